"""FastSend: a producer's sends to one topic over a broker's ``SendLane`` (in process).

``Producer.send`` with no chosen queue validates, stamps, compresses, looks the publish list
up, picks a queue and asks the transport, then builds the result, over a dozen Python calls.
After a first send to a topic succeeded through that path, and while its publish list is
fresh, a plain send (a body of 1 byte up to the compression threshold, latency fault avoidance
off) needs only the stamp, the next queue and the broker's lane: this is that path. Every other
case, and any answer but SUCCESS, returns to the producer's own path, which keeps the rules
(validation errors, compression, retries on another queue, route refresh).

``send_batch`` is the same for ``Producer.send_batch``: the entries checked on their faces,
their UNIQ_KEYs made into one buffer (no stamped copy per entry) and the broker's lane given
the producer's own messages; a batch the lane does not take goes through ``_batch_full``.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Sequence, cast

from rocketstore.client.selector import TopicPublishInfo
from rocketstore.client.sending import _SEND_OK, SendResult, uniq_generator
from rocketstore.common import Message, MessageQueue
from rocketstore.common.protocol import SendMessageResponse
from rocketstore.errors import StoreClosedError, TransportError
from rocketstore.remoting._wire import FastSendCore, restamp
from rocketstore.store._commitlog import (PutMessageResult, complete_future, pending_future,
                                          sent_future)

if TYPE_CHECKING:
    from rocketstore.client.producer import Producer
    from rocketstore.broker.send_lane import SendLane

# the broker's SendLane.send: a PutMessageResult when stored at once, else send_one's answer
Lane = Callable[[Message, int],
                "PutMessageResult | SendMessageResponse | Future[SendMessageResponse]"]


class FastSend(FastSendCore):
    """One topic's fast sends for one producer (``Producer._fast``), valid until ``expires``
    (``time.monotonic()``: the publish list's age limit). ``send`` and ``send_async``
    (``FastSendCore``, in C) stamp, pick the next queue and call the lane; every answer but a
    put stored at once comes back to ``_answered`` / ``_async_answered``."""

    def __init__(self, producer: Producer, info: TopicPublishInfo, fetched_at: float,
                 lane: Lane, broker_name: str) -> None:
        super().__init__(producer, info,
                         fetched_at + producer.timers.poll_name_server_interval / 1000,
                         lane, broker_name, uniq_generator(), SendResult, _SEND_OK,
                         PutMessageResult, sent_future)

    def _async_answered(self, answer: SendMessageResponse | Future[SendMessageResponse]
                        | StoreClosedError, m: Message, uniq: str, mq: MessageQueue,
                        begin: float) -> Future[SendResult]:
        """``send_async``'s future for an answer other than a put stored at once (its retry
        rules: ``FutureSends``), tracked for ``flush`` (a put stored at once needs not be)."""
        p = self.producer
        out: Future[SendResult] = pending_future()
        if isinstance(answer, StoreClosedError):
            p._async_failed(out, TransportError(mq.broker_name, f"broker closed: {answer}"), m,
                            uniq, mq, self.info, p.retry_times_when_send_async_failed, begin)
        elif type(answer) is SendMessageResponse and answer.code == 0:  # SUCCESS at once
            complete_future(out, sent_result(answer, mq, uniq))
        else:
            p._async_answer(out, answer, m, uniq, mq, self.info,
                            p.retry_times_when_send_async_failed, begin)
        return p._track(out)

    def _batch_full(self, msgs: tuple[Message, ...], mq: MessageQueue, begin: float,
                    timeout: int) -> SendResult:
        """A batch the lane did not take (its first, or not its shape): the producer's
        checks and stamp, then the broker's whole batch path on this queue (which warms the
        lane when it passed); its answer as ``_batch_answered`` takes it."""
        p = self.producer
        stamped, joined = p._prepare_batch(msgs)
        lane = cast("SendLane", self.batch_lane)     # set whenever _batch_full is reached
        answer: Future[SendMessageResponse] | StoreClosedError
        try:
            answer = lane.send_batch_full(stamped, mq.queue_id)
        except StoreClosedError as e:
            answer = e
        return self._batch_answered(answer, stamped, None, joined, mq, begin, timeout)

    def _batch_answered(self, answer: SendMessageResponse | Future[SendMessageResponse]
                        | StoreClosedError, msgs: Sequence[Message], ids: bytes | None,
                        joined: str, mq: MessageQueue, begin: float, timeout: int
                        ) -> SendResult:
        """A batch's answer other than a put stored at once (``_answered``'s rules): a
        retry sends the batch stamped with the ids of the first attempt (``ids``: the lane's
        made ids, the messages unstamped; None: ``msgs`` are stamped)."""
        p = self.producer
        r = _response(answer, mq, timeout)
        if type(r) is SendMessageResponse and r.code == 0:      # SUCCESS
            return sent_result(r, mq, joined)
        stamped = list(msgs) if ids is None else restamp(tuple(msgs), ids)
        return p._drive(p._retrying(stamped[0], joined, stamped, timeout,
                                    (mq, begin, self.info)), r)

    def _answered(self, answer: SendMessageResponse | Future[SendMessageResponse]
                  | StoreClosedError, m: Message, uniq: str, mq: MessageQueue, begin: float,
                  timeout: int) -> SendResult:
        """A sync send's answer other than a put stored at once: a response, or its Future
        (SYNC_FLUSH: completed after the group commit), or the error of a closed broker;
        anything but SUCCESS takes the producer's retry rules."""
        p = self.producer
        r = _response(answer, mq, timeout)
        if type(r) is SendMessageResponse and r.code == 0:      # SUCCESS
            return sent_result(r, mq, uniq)
        return p._drive(p._retrying(m, uniq, None, timeout, (mq, begin, self.info)), r)


def sent_result(r: SendMessageResponse, mq: MessageQueue, uniq: str) -> SendResult:
    """The SEND_OK result of a SUCCESS answer (the queue object reused when the broker kept it)."""
    return SendResult(_SEND_OK, uniq, r.msg_id,
                      mq if r.queue_id == mq.queue_id else
                      MessageQueue(mq.topic, mq.broker_name, r.queue_id),
                      r.queue_offset, r.transaction_id)


def _response(answer: SendMessageResponse | Future[SendMessageResponse] | StoreClosedError,
              mq: MessageQueue, timeout: int) -> SendMessageResponse | TransportError:
    """A sync send's answer as a response (a Future waited for up to ``timeout`` ms), or the
    transport error the retry rules take: a closed broker, a timed-out wait."""
    try:
        if isinstance(answer, StoreClosedError):
            raise answer
        return answer if type(answer) is SendMessageResponse else \
            answer.result(timeout / 1000.0)     # type: ignore[union-attr]
    except StoreClosedError as e:
        return TransportError(mq.broker_name, f"broker closed: {e}")
    except TimeoutError:
        return TransportError(mq.broker_name, f"send timed out after {timeout} ms")
