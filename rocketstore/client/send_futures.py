"""The producer's sends without a waiting thread: ``send_future`` (``send``'s retry rules,
each attempt answered through a future), ``send_async`` (RocketMQ's async rules) and
``flush``. Mixed into ``Producer`` (rocketstore.client.producer), whose state they use."""
from __future__ import annotations

import functools
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any, Callable, Generator, Iterable

from rocketstore.client import reply
from rocketstore.client.selector import TopicPublishInfo
from rocketstore.client.sending import (_SEND_OK, _SUCCESS, Selector, SendResult,
                                        _chosen_queue_failed, _ms_since)
from rocketstore.common import Message, MessageQueue, ResponseCode
from rocketstore.common import constants as C
from rocketstore.common.protocol import SendMessageRequest, SendMessageResponse
from rocketstore.errors import MQClientError, TransportError
from rocketstore.store._commitlog import (AckFuture, complete_future, has_callbacks,
                                          pending_future)


class FutureSends:
    """``Producer``'s future and async sends (a mixin: ``Producer`` has the state and the
    preparation, queue choice and retry rules they use)."""

    # -- futures: the sync rules without a waiting thread ---------------------------------------
    def send_future(self, msg: Message, message_queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None,
                    timeout: int | None = None) -> Future[SendResult]:
        """``send`` (its retry rules exactly) as a future: nothing waits while the broker
        answers; a retry after a failed attempt runs on the client's pull-service thread (a
        route refresh may ask the NameServer). ``timeout`` bounds when a new attempt may
        start; each attempt waits as long as its transport allows (3 s over TCP).
        ``rocketstore.aio.AsyncProducer.send`` awaits this future."""
        out: Future[SendResult] = pending_future()
        try:
            prepared, uniq = self._prepare(msg)
            timeout = self.send_msg_timeout if timeout is None else timeout
            if message_queue is not None or selector is not None:
                mq = self._explicit_queue(msg, message_queue, selector, arg)
                self._send_once_future(out, mq, self._request(prepared, mq), uniq)
            else:
                steps = self._retrying(prepared, uniq, None, timeout)
                self._advance(out, steps, steps.send, None, False)
        except Exception as e:
            out.set_exception(e)
        return self._track(out)

    def send_batch_future(self, msgs: Iterable[Message],
                          message_queue: MessageQueue | None = None,
                          timeout: int | None = None) -> Future[SendResult]:
        """``send_batch`` as a future (see ``send_future``)."""
        out: Future[SendResult] = pending_future()
        try:
            batch, joined = self._prepare_batch(msgs)
            timeout = self.send_msg_timeout if timeout is None else timeout
            if message_queue is not None:
                mq = self._explicit_queue(batch[0], message_queue, None, None)
                self._send_once_future(out, mq, self._request(batch[0], mq, batch), joined)
            else:
                steps = self._retrying(batch[0], joined, batch, timeout)
                self._advance(out, steps, steps.send, None, False)
        except Exception as e:
            out.set_exception(e)
        return self._track(out)

    def _track(self, out: Future) -> Future:
        """Remember an unanswered future for ``flush`` (its answer forgets it)."""
        if not out.done():
            pending = self._pending
            pending.add(out)
            if out.done():          # answered meanwhile, perhaps before the add
                pending.discard(out)
        return out

    def _settle(self, out: Future, value: Any = None, exc: BaseException | None = None
                ) -> None:
        """Complete ``out``. Its callbacks are the user's: on the transport's I/O thread
        (an answer over TCP) they run on the transport's callback threads instead, where
        they may block (a callback that sends synchronously waits for an answer only the
        I/O thread can read); callbacks marked ``never_blocks`` (the asyncio bridge's) run
        here. Decided under the future's lock, so a callback added meanwhile runs on the
        thread that adds it, after completion."""
        t = self.transport
        if (t.callbacks_on_io_thread and (type(out) is not AckFuture or has_callbacks(out))
                and t.on_io_thread()):
            with out._condition:        # reentrant: set_result takes it again
                if not all(getattr(cb, "never_blocks", False) for cb in out._done_callbacks):
                    t.run_callback(self._settle_now, out, value, exc)
                    return
                self._settle_now(out, value, exc)
            return
        self._settle_now(out, value, exc)

    def _settle_now(self, out: Future, value: Any = None,
                    exc: BaseException | None = None) -> None:
        if exc is None:
            complete_future(out, value)
        elif not out.done():
            out.set_exception(exc)
        self._pending.discard(out)

    def _send_once_future(self, out: Future, mq: MessageQueue, request: SendMessageRequest,
                          uniq: str) -> None:
        def answered(f: Future) -> None:
            exc = f.exception()
            if exc is None:
                try:
                    self._settle(out, self._result(f.result(), mq, uniq))
                except Exception as e:
                    self._settle(out, exc=e)
            else:
                self._settle(out, exc=_chosen_queue_failed(mq, exc)
                             if isinstance(exc, TransportError) else exc)
        try:
            fut = self.transport.send_message_async(mq.broker_name, request)
        except TransportError as e:
            raise _chosen_queue_failed(mq, e) from e
        if fut.done():
            answered(fut)
        else:
            fut.add_done_callback(answered)

    def _advance(self, out: Future, steps: Generator[Any, Any, Any], resume: Callable,
                 value: Any, later: bool) -> None:
        """Resume the retry rules with an answer (``steps.send``) or an error
        (``steps.throw``) and start the next attempt, or settle ``out``. ``later``: the
        answer arrived on a transport thread; a resume that may retry (and so refresh a
        route with a blocking NameServer call) moves to the pull-service thread."""
        if later:
            inst = self._instance
            if inst is None:
                self._settle(out, exc=MQClientError(f"producer {self.group!r} was shut down "
                                                    f"before its send was answered"))
                return
            inst.pull_service.execute(self._advance, out, steps, resume, value, False)
            return
        try:
            mq, request, _left = resume(value)
        except StopIteration as stop:
            self._settle(out, stop.value)
            return
        except BaseException as e:
            self._settle(out, exc=e)
            return
        try:
            fut = self.transport.send_message_async(mq.broker_name, request)
        except TransportError as e:
            self._advance(out, steps, steps.throw, e, False)
            return
        if fut.done():       # an in-process broker answers at once
            self._attempt_answered(out, steps, False, fut)
        else:
            fut.add_done_callback(functools.partial(self._attempt_answered, out, steps, True))

    def _attempt_answered(self, out: Future, steps: Generator[Any, Any, Any], later: bool,
                          f: Future) -> None:
        exc = f.exception()
        if exc is None:
            resp = f.result()
            # SUCCESS ends the send: no retry, no blocking call, so finish on this thread
            self._advance(out, steps, steps.send, resp,
                          later and resp.code != ResponseCode.SUCCESS)
        elif isinstance(exc, TransportError):
            self._advance(out, steps, steps.throw, exc, later)
        else:
            steps.close()
            self._settle(out, exc=exc)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every ``send_async`` / ``send_future`` made so far is answered (Kafka's
        ``flush``); ``timeout`` in seconds. Returns how many are still unanswered (0: all)."""
        pending = [f for f in list(self._pending) if not f.done()]
        if pending:
            wait_futures(pending, timeout)
        return sum(1 for f in pending if not f.done())

    # -- async and oneway ---------------------------------------------------------------------
    def send_async(self, msg: Message, message_queue: MessageQueue | None = None,
                   selector: Selector | None = None, arg: Any = None
                   ) -> Future[SendResult]:
        """Send without waiting: the future completes with the ``SendResult`` when the broker
        answers (under SYNC_FLUSH: once the message is on disk). A transport failure is
        retried ``retry_times_when_send_async_failed`` times on another queue (default queue
        selection only); a broker refusal is the future's exception (RocketMQ's async rules;
        ``send_future`` keeps ``send``'s). No thread waits per send.
        """
        if message_queue is None and selector is None and type(msg) is Message:
            fast = self._fast.get(msg.topic)
            if fast is not None:
                done = fast.send_async(msg)     # completed, or tracked by FastSend
                if done is not None:
                    return done
        # the store's future: its Condition is made only if someone waits before it is done
        # (an in-process send is done at once); thousands in flight stay cheap for the GC
        out: Future[SendResult] = pending_future()
        try:
            prepared, uniq = self._prepare(msg)
            if message_queue is not None or selector is not None:
                mq = self._explicit_queue(msg, message_queue, selector, arg)
                retries = 0
                info = None
            else:
                info = self.publish_info(prepared.topic)
                mq = self.fault_strategy.select_one_message_queue(info, None)
                retries = self.retry_times_when_send_async_failed
        except Exception as e:
            out.set_exception(e)
            return out
        self._send_async_attempt(out, prepared, uniq, mq, info, retries)
        return self._track(out)

    def _send_async_attempt(self, out: Future, prepared: Message, uniq: str, mq: MessageQueue,
                            info: TopicPublishInfo | None, retries: int) -> None:
        started = time.monotonic()
        try:
            if (mq.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)     # header fields moved
                    or mq.topic.endswith(reply.REPLY_TOPIC_SUFFIX)):  # a reply's own code
                fut = self.transport.send_message_async(mq.broker_name,
                                                        self._request(prepared, mq))
            else:
                fut = self.transport.send_one_async(
                    mq.broker_name, self.group, mq.topic, mq.queue_id, prepared,
                    self.create_topic_key, self.default_topic_queue_nums)
        except Exception as e:
            self._async_failed(out, e, prepared, uniq, mq, info, retries, started)
            return
        self._async_answer(out, fut, prepared, uniq, mq, info, retries, started)

    def _async_failed(self, out: Future, e: Exception, prepared: Message, uniq: str,
                      mq: MessageQueue, info: TopicPublishInfo | None, retries: int,
                      started: float) -> None:
        """An attempt the transport could not make: retried on another queue while retries
        are left (a TransportError), else the future's exception."""
        if isinstance(e, TransportError) and retries > 0 and info is not None:
            self.fault_strategy.update_fault_item(mq.broker_name, _ms_since(started), True)
            nxt = self.fault_strategy.select_one_message_queue(info, mq.broker_name)
            self._send_async_attempt(out, prepared, uniq, nxt, info, retries - 1)
            return
        self._settle(out, exc=e)

    def _async_answer(self, out: Future, fut: SendMessageResponse | Future, prepared: Message,
                      uniq: str, mq: MessageQueue, info: TopicPublishInfo | None, retries: int,
                      started: float) -> None:
        """An attempt's answer (given at once) or its future: ``out`` completed from it."""
        if type(fut) is SendMessageResponse:    # answered at once: no future at all
            strategy = self.fault_strategy
            if strategy.send_latency_fault_enable:
                strategy.update_fault_item(mq.broker_name, _ms_since(started), False)
            if fut.code == _SUCCESS:            # _result's SEND_OK, without its lookups
                complete_future(out, SendResult(
                    _SEND_OK, uniq, fut.msg_id,
                    mq if fut.queue_id == mq.queue_id else
                    MessageQueue(mq.topic, mq.broker_name, fut.queue_id),
                    fut.queue_offset, fut.transaction_id))
                return
            try:
                self._settle(out, self._result(fut, mq, uniq))
            except Exception as e:
                self._settle(out, exc=e)
            return
        if fut.done():          # an in-process broker answers at once: no callback to keep
            self._async_answered(out, prepared, uniq, mq, info, retries, started, fut)
        else:
            fut.add_done_callback(_AsyncAnswer(self, out, prepared, uniq, mq, info, retries,
                                               started))

    def _async_answered(self, out: Future, prepared: Message, uniq: str, mq: MessageQueue,
                        info: TopicPublishInfo | None, retries: int, started: float,
                        f: Future) -> None:
        exc = f.exception()
        self.fault_strategy.update_fault_item(mq.broker_name, _ms_since(started),
                                              exc is not None)
        if exc is None:
            try:
                self._settle(out, self._result(f.result(), mq, uniq))
            except Exception as e:
                self._settle(out, exc=e)
            return
        if isinstance(exc, TransportError) and retries > 0 and info is not None:
            nxt = self.fault_strategy.select_one_message_queue(info, mq.broker_name)
            self._send_async_attempt(out, prepared, uniq, nxt, info, retries - 1)
            return
        self._settle(out, exc=exc)


class _AsyncAnswer:
    """``FutureSends._async_answered`` bound to one attempt: the callback of an answer that
    comes later (SYNC_FLUSH, over TCP). One object per waiting send, where a partial took
    three: the GC walks each of them while thousands of sends wait for their flush."""

    __slots__ = ("sends", "out", "prepared", "uniq", "mq", "info", "retries", "started")

    def __init__(self, sends: FutureSends, out: Future, prepared: Message, uniq: str,
                 mq: MessageQueue, info: TopicPublishInfo | None, retries: int,
                 started: float) -> None:
        self.sends = sends
        self.out = out
        self.prepared = prepared
        self.uniq = uniq
        self.mq = mq
        self.info = info
        self.retries = retries
        self.started = started

    def __call__(self, f: Future) -> None:
        self.sends._async_answered(self.out, self.prepared, self.uniq, self.mq, self.info,
                                   self.retries, self.started, f)
