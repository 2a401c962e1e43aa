"""``AsyncProducer`` and ``AsyncTransactionProducer``: ``await send`` over a ``Producer``.

``send`` awaits ``Producer.send_future``: the synchronous ``send``'s retry rules (another
broker's queue, within ``send_msg_timeout``) driven by the broker's answers instead of a
waiting thread. A send's route lookup uses the producer's cached publish list; refreshing it
(once per ``poll_name_server_interval``, 30 s) is a short blocking NameServer call.
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable

from rocketstore.aio._bridge import on_loop, wait
from rocketstore.client.producer import (Producer, Selector, SendResult, TransactionProducer,
                                         TransactionSendResult)
from rocketstore.client.reply import create_reply_message
from rocketstore.common import Message, MessageExt, MessageQueue, SendStatus
from rocketstore.errors import MQClientError


class AsyncProducer:
    """RocketMQ's producer for asyncio; takes ``Producer``'s arguments.

    >>> async with AsyncProducer("pg", broker=broker) as p:          # doctest: +SKIP
    ...     r = await p.send(Message("TopicA", b"hello", tags="TagA"))
    """

    def __init__(self, group: str, **kw: Any) -> None:
        self._p = self._make(group, **kw)

    def _make(self, group: str, **kw: Any) -> Producer:
        return Producer(group, **kw)

    @property
    def producer(self) -> Producer:
        """The synchronous ``Producer`` underneath (same group, same client instance)."""
        return self._p

    @property
    def group(self) -> str:
        return self._p.group

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> AsyncProducer:
        """Join the client instance and register the group (in the default executor: over
        TCP this heartbeats the brokers)."""
        await asyncio.get_running_loop().run_in_executor(None, self._p.start)
        return self

    async def stop(self) -> None:
        """Wait for unanswered sends, then leave the group."""
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(None, self._p.shutdown)

    close = stop
    shutdown = stop

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- sends --------------------------------------------------------------------------------
    async def send(self, msg: Message, message_queue: MessageQueue | None = None,
                   selector: Selector | None = None, arg: Any = None,
                   timeout: int | None = None) -> SendResult:
        """``Producer.send``, awaited: the same queue choice, retries and errors."""
        return await wait(self._p.send_future(msg, message_queue, selector, arg, timeout))

    async def send_batch(self, msgs: Iterable[Message],
                         message_queue: MessageQueue | None = None,
                         timeout: int | None = None) -> SendResult:
        """``Producer.send_batch``, awaited."""
        return await wait(self._p.send_batch_future(msgs, message_queue, timeout))

    async def request(self, msg: Message, timeout: int = 3000) -> MessageExt:
        """``Producer.request``, awaited: the reply (no thread waits for it);
        ``RequestTimeoutError`` after ``timeout`` ms."""
        return await wait(self._p.request_async(msg, timeout))

    async def send_reply(self, request: Message | MessageExt, body: bytes,
                         timeout: int | None = None) -> SendResult:
        """``Producer.send_reply``, awaited (the broker answers once it pushed the reply to
        the requester)."""
        return await self.send(create_reply_message(request, body), timeout=timeout)

    def send_oneway(self, msg: Message, message_queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None) -> None:
        """``Producer.send_oneway``: queued for the broker, no answer (nothing to await)."""
        self._p.send_oneway(msg, message_queue, selector, arg)

    async def flush(self) -> None:
        """Wait until every send made so far (by any task) is answered."""
        for fut in list(self._p._pending):
            try:
                await wait(fut)
            except Exception:       # its sender sees the error
                pass


class AsyncTransactionProducer(AsyncProducer):
    """``TransactionProducer`` for asyncio: the listener's ``execute_local_transaction`` and
    ``check_local_transaction`` may be coroutines; a check-back runs on the event loop of
    ``start``."""

    def __init__(self, group: str, listener: Any, **kw: Any) -> None:
        if listener is None or not callable(getattr(listener, "execute_local_transaction", None)):
            raise MQClientError("AsyncTransactionProducer needs a listener with "
                                "execute_local_transaction and check_local_transaction")
        self.listener = listener
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__(group, listener=_LoopListener(self), **kw)

    def _make(self, group: str, listener: Any = None, **kw: Any) -> Producer:
        return TransactionProducer(group, listener, **kw)

    async def start(self) -> AsyncTransactionProducer:
        self._loop = asyncio.get_running_loop()
        await super().start()
        return self

    async def send_message_in_transaction(self, msg: Message, arg: Any = None
                                          ) -> TransactionSendResult:
        """``TransactionProducer.send_message_in_transaction``: half message, the local
        transaction (awaited when a coroutine), then commit / rollback / UNKNOW."""
        p: TransactionProducer = self._p  # type: ignore[assignment]
        res = await wait(p.send_future(p.half_message(msg)))
        outcome: Any = None
        error: BaseException | None = None
        if res.status is SendStatus.SEND_OK:
            try:
                outcome = await on_loop(self.listener.execute_local_transaction(msg, arg))
            except Exception as e:       # counts as UNKNOW: the check-back decides
                error = e
        return p.end_transaction(res, outcome, error)


CHECK_TIMEOUT_S = 60.0


class _LoopListener:
    """What the synchronous ``TransactionProducer`` calls on its check thread: the user's
    ``check_local_transaction``, run on the producer's event loop when it is a coroutine."""

    def __init__(self, owner: AsyncTransactionProducer) -> None:
        self.owner = owner

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        raise MQClientError("AsyncTransactionProducer runs local transactions itself")

    def check_local_transaction(self, msg: MessageExt) -> Any:
        value = self.owner.listener.check_local_transaction(msg)
        if not hasattr(value, "__await__"):
            return value
        loop = self.owner._loop
        if loop is None or loop.is_closed():
            value.close()
            raise MQClientError("the producer's event loop is gone: cannot run "
                                "check_local_transaction")
        return asyncio.run_coroutine_threadsafe(on_loop(value), loop).result(CHECK_TIMEOUT_S)
