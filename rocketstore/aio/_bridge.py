"""A ``concurrent.futures.Future`` awaited on the running event loop.

The future's completion (on a transport thread, or at once for an in-process broker) is
handed to the loop with ``call_soon_threadsafe``; nothing waits in a thread.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, TypeVar

from rocketstore.client.transport import never_blocks

T = TypeVar("T")


def _copy(src: concurrent.futures.Future, dst: asyncio.Future) -> None:
    if dst.done():          # the awaiting task was cancelled: the send itself stands
        return
    exc = src.exception()
    if exc is None:
        dst.set_result(src.result())
    else:
        dst.set_exception(exc)


async def wait(fut: concurrent.futures.Future[T]) -> T:
    """The future's result, awaited; a done future (an in-process send) costs no loop hop."""
    if fut.done():
        return fut.result()
    loop = asyncio.get_running_loop()
    out = loop.create_future()

    def done(f: concurrent.futures.Future) -> None:
        try:
            loop.call_soon_threadsafe(_copy, f, out)
        except RuntimeError:        # the loop is closed: nobody awaits any more
            pass
    fut.add_done_callback(never_blocks(done))   # a hand-off only: may run on an I/O thread
    return await out


async def on_loop(value: Any) -> Any:
    """``value`` awaited when it is awaitable (a listener may be ``async def`` or not)."""
    if hasattr(value, "__await__"):
        return await value
    return value
