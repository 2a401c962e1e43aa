"""``AsyncPushConsumer``: a ``PushConsumer`` whose listener is a coroutine on the event loop.

The synchronous consume service decides everything (batches, concurrency, orderly locks,
retries, send-back, committed offsets); its consume thread hands each listener call to the
loop and waits for the result there, so ``consume_thread_nums`` listener calls run at once on
the loop.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from rocketstore.aio._bridge import on_loop
from rocketstore.client.push_consumer import PushConsumer
from rocketstore.common import MessageExt, MessageQueue
from rocketstore.errors import MQClientError

LOOP_CHECK_S = 1.0      # how often a waiting consume thread checks that the loop still runs


class AsyncPushConsumer:
    """RocketMQ's push consumer for asyncio; takes ``PushConsumer``'s arguments.

    >>> async def on_messages(msgs, context):                     # doctest: +SKIP
    ...     return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    >>> consumer = AsyncPushConsumer("cg", broker=broker)         # doctest: +SKIP
    >>> consumer.subscribe("TopicA", "*")                         # doctest: +SKIP
    >>> consumer.register_message_listener(on_messages)           # doctest: +SKIP
    >>> async with consumer: ...                                  # doctest: +SKIP
    """

    def __init__(self, group: str, **kw: Any) -> None:
        self._c = PushConsumer(group, **kw)
        self._fn: Callable[..., Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def consumer(self) -> PushConsumer:
        """The synchronous ``PushConsumer`` underneath."""
        return self._c

    @property
    def group(self) -> str:
        return self._c.group

    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        self._c.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._c.unsubscribe(topic)

    def register_message_listener(self, fn: Callable[..., Awaitable[Any] | Any],
                                  orderly: bool = False) -> None:
        """``async def fn(msgs, context)`` returning the status, as ``PushConsumer``'s
        listener (a plain function works too, run on the loop)."""
        if not callable(fn):
            raise MQClientError(f"message listener {fn!r} is not callable")
        self._c.register_message_listener(self._on_messages, orderly)
        self._fn = fn

    def assignment(self, topic: str | None = None) -> set[MessageQueue]:
        return self._c.assignment(topic)

    def suspend(self) -> None:
        self._c.suspend()

    def resume(self) -> None:
        self._c.resume()

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> AsyncPushConsumer:
        """Join the group (in the default executor): listener calls run on this loop."""
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._c.start)
        return self

    async def stop(self) -> None:
        """Let running listeners finish, persist offsets, leave the group (in the default
        executor: the listeners it waits for run on this loop meanwhile)."""
        await asyncio.get_running_loop().run_in_executor(None, self._c.shutdown)

    close = stop
    shutdown = stop

    async def __aenter__(self) -> AsyncPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- on a consume thread ------------------------------------------------------------------
    def _on_messages(self, msgs: list[MessageExt], context: Any) -> Any:
        loop = self._loop
        fn = self._fn
        if loop is None or fn is None or loop.is_closed():
            raise MQClientError("the consumer's event loop is gone")
        fut = asyncio.run_coroutine_threadsafe(_call(fn, msgs, context), loop)
        while True:
            try:
                return fut.result(LOOP_CHECK_S)
            except TimeoutError:
                if not loop.is_running():       # stopped without stop(): give up the call
                    fut.cancel()
                    raise MQClientError("the consumer's event loop stopped during a "
                                        "listener call") from None


async def _call(fn: Callable[..., Any], msgs: list[MessageExt], context: Any) -> Any:
    return await on_loop(fn(msgs, context))
