"""FastSend: a producer's sync sends to one topic over a broker's ``SendLane`` (in process).

``Producer.send`` with no chosen queue validates, stamps, compresses, looks the publish list
up, picks a queue and asks the transport, then builds the result, over a dozen Python calls.
After a first send to a topic succeeded through that path, and while its publish list is
fresh, a plain send (a body of 1 byte up to the compression threshold, latency fault avoidance
off) needs only the stamp, the next queue and the broker's lane: this is that path. Every other
case, and any answer but SUCCESS, returns to the producer's own path, which keeps the rules
(validation errors, compression, retries on another queue, route refresh).
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable

from rocketstore.client import sending
from rocketstore.client.selector import TopicPublishInfo
from rocketstore.client.sending import _SEND_OK, SendResult
from rocketstore.common import Message, MessageQueue
from rocketstore.common.protocol import SendMessageResponse
from rocketstore.errors import StoreClosedError, TransportError
from rocketstore.store._codec import stamp_one

if TYPE_CHECKING:
    from rocketstore.client.producer import Producer

Lane = Callable[[Message, int], "SendMessageResponse | Future[SendMessageResponse]"]


class FastSend:
    """One topic's fast sends for one producer (``Producer._fast``), valid until ``expires``
    (``time.monotonic()``: the publish list's age limit)."""

    __slots__ = ("producer", "info", "expires", "lane", "broker_name")

    def __init__(self, producer: Producer, info: TopicPublishInfo, fetched_at: float,
                 lane: Lane, broker_name: str) -> None:
        self.producer = producer
        self.info = info
        self.expires = fetched_at + producer.timers.poll_name_server_interval / 1000
        self.lane = lane
        self.broker_name = broker_name

    def send(self, msg: Message, timeout: int) -> SendResult | None:
        """The send's result, or None when this path does not take the message (the caller
        runs ``Producer.send``'s own path)."""
        p = self.producer
        n = len(msg.body)
        begin = time.monotonic()
        if (not 0 < n < p.compress_msg_body_over_howmuch or n > p.max_message_size
                or begin >= self.expires or p.fault_strategy.send_latency_fault_enable):
            return None
        gen = sending._uniq_gen
        if gen is None:
            return None
        info = self.info
        mqs = info.message_queues
        mq = mqs[info.send_which_queue.increment_and_get() % len(mqs)]
        if mq.broker_name != self.broker_name:
            return None             # a route over several brokers: the transport's path
        m, uniq = stamp_one(msg, gen)
        r: SendMessageResponse | TransportError
        try:
            answer = self.lane(m, mq.queue_id)
            # SYNC_FLUSH: a Future, completed after the group commit
            r = answer if type(answer) is SendMessageResponse else \
                answer.result(timeout / 1000.0)     # type: ignore[union-attr]
        except StoreClosedError as e:
            r = TransportError(mq.broker_name, f"broker closed: {e}")
        except TimeoutError:
            r = TransportError(mq.broker_name, f"send timed out after {timeout} ms")
        else:
            if r.code == 0:                             # SUCCESS
                return SendResult(_SEND_OK, uniq, r.msg_id,
                                  mq if r.queue_id == mq.queue_id else
                                  MessageQueue(mq.topic, mq.broker_name, r.queue_id),
                                  r.queue_offset, r.transaction_id)
        return p._drive(p._retrying(m, uniq, None, timeout, (mq, begin, info)), r)
