"""``AsyncPullConsumer``: ``await poll()`` and ``async for msg in consumer`` over a
``PullConsumer``.

The pull service fills the consumer's cache as for the synchronous consumer; taking from it
(``PullConsumer._take``: dropping revoked or sought-past batches, advancing offsets) is the
same code. When the cache is empty, ``poll`` waits on an ``asyncio.Event`` that the pull
service sets through ``call_soon_threadsafe`` when it caches messages.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

from rocketstore.client.pull_consumer import PullConsumer
from rocketstore.common import MessageExt, MessageQueue


class AsyncPullConsumer:
    """RocketMQ's lite pull consumer for asyncio; takes ``PullConsumer``'s arguments
    (``consumer_timeout_ms`` ends ``async for`` after that long without a message).

    >>> consumer = AsyncPullConsumer("cg", broker=broker)          # doctest: +SKIP
    >>> consumer.subscribe("TopicA", "*")                          # doctest: +SKIP
    >>> async with consumer:                                       # doctest: +SKIP
    ...     async for msg in consumer:
    ...         print(msg.queue_offset, msg.body_bytes)
    """

    def __init__(self, group: str, **kw: Any) -> None:
        self._c = PullConsumer(group, **kw)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._waiting = 0

    @property
    def consumer(self) -> PullConsumer:
        """The synchronous ``PullConsumer`` underneath."""
        return self._c

    @property
    def group(self) -> str:
        return self._c.group

    # -- configuration (as PullConsumer) ------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        self._c.subscribe(topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        self._c.assign(queues)

    def assignment(self, topic: str | None = None) -> set[MessageQueue]:
        return self._c.assignment(topic)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        self._c.pause(queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._c.resume(queues)

    def position(self, queue: MessageQueue) -> int:
        return self._c.position(queue)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> AsyncPullConsumer:
        """Join the group or take the assigned queues (in the default executor)."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._c._waker = self._wake
        await self._loop.run_in_executor(None, self._c.start)
        return self

    async def stop(self) -> None:
        """Commit (with auto-commit), persist offsets, leave the group; pending polls return
        empty."""
        await asyncio.get_running_loop().run_in_executor(None, self._c.shutdown)

    close = stop
    shutdown = stop

    async def __aenter__(self) -> AsyncPullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _wake(self) -> None:
        """From the pull service: messages were cached (or the consumer stopped)."""
        loop, event = self._loop, self._event
        if self._waiting and loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:        # the loop is closed
                pass

    # -- consuming ----------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 5000) -> list[MessageExt]:
        """Messages pulled for one queue (up to ``pull_batch_size``), awaiting up to
        ``timeout_ms``; an empty list when none arrived (``PullConsumer.poll``)."""
        c = self._c
        c._check_running()
        c._maybe_auto_commit()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        event = self._event
        assert event is not None
        while True:
            msgs = c._take()
            if msgs:
                return msgs
            left = deadline - loop.time()
            if left <= 0 or not c._running:
                return []
            event.clear()
            self._waiting += 1
            try:
                msgs = c._take()        # cached between the first look and the arming
                if msgs:
                    return msgs
                try:
                    await asyncio.wait_for(event.wait(), left)
                except asyncio.TimeoutError:
                    pass
            finally:
                self._waiting -= 1

    getmany = poll

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MessageExt]:
        """As ``PullConsumer.__iter__``: ends at ``stop`` or after ``consumer_timeout_ms``
        without a message."""
        c = self._c
        c._check_running()
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        limit = c.consumer_timeout_ms
        while c._running:
            wait_ms = 1000.0
            if limit is not None:
                wait_ms = min(wait_ms, limit - (loop.time() - idle_since) * 1000)
                if wait_ms <= 0:
                    return
            msgs = await self.poll(max(1, int(wait_ms)))
            for m in msgs:
                yield m
            if msgs:
                idle_since = loop.time()

    # -- offsets ------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None
                     ) -> dict[MessageQueue, int]:
        """``PullConsumer.commit``: the consumed offsets, or exactly ``offsets``."""
        return self._c.commit(offsets)

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """``PullConsumer.seek`` (its range check asks the broker: in the default executor)."""
        await self._run(self._c.seek, queue, offset)

    async def seek_to_beginning(self, queues: Iterable[MessageQueue] | None = None) -> None:
        await self._run(self._c.seek_to_beginning, queues)

    async def seek_to_end(self, queues: Iterable[MessageQueue] | None = None) -> None:
        await self._run(self._c.seek_to_end, queues)

    async def committed(self, queue: MessageQueue) -> int:
        return await self._run(self._c.committed, queue)

    async def offsets_for_times(self, timestamps: dict[MessageQueue, int]
                                ) -> dict[MessageQueue, int]:
        return await self._run(self._c.offsets_for_times, timestamps)

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return await self._run(self._c.fetch_message_queues, topic)

    @staticmethod
    async def _run(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None,
                                                                functools.partial(fn, *args))
