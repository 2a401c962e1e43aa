"""Running the listener: concurrently (MESSAGING.md §5) or orderly (§6).

Concurrent: pulled messages are cut into requests of ``consume_message_batch_max_size`` and run
on the consume pool in any order; a failed message is sent back to the broker's retry topic
(the broker decides retry or DLQ), and the committed offset is the smallest still in flight.
Orderly: one task per queue at a time under the broker lock; a failure suspends only that
queue and retries the same messages locally.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.client.process_queue import ProcessQueue, now_ms
from rocketstore.client.scheduler import TaskThreads
from rocketstore.common import (ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, Message,
                                MessageExt, MessageModel, MessageQueue, ResponseCode)
from rocketstore.common import constants as C
from rocketstore.common.protocol import ConsumerSendMsgBackRequest

if TYPE_CHECKING:
    from rocketstore.client.push_consumer import PushConsumer

log = logging.getLogger("rocketstore.client")

JAVA_INT_MAX = 0x7FFFFFFF
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60000


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """``delay_level_when_next_consume``: 0 lets the broker choose (3 + reconsume times), -1
    sends failures straight to the DLQ. ``ack_index``: with CONSUME_SUCCESS, messages after
    this index are sent back."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = JAVA_INT_MAX


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


def reset_retry_topic(msgs: list[MessageExt], mq: MessageQueue, retry_topic: str) -> None:
    """§5.8: messages pulled from the group's retry topic are shown under RETRY_TOPIC."""
    if mq.topic != retry_topic:
        return
    for m in msgs:
        rt = m.properties.get(C.PROPERTY_RETRY_TOPIC)
        if rt:
            m.topic = rt


def retry_message(msg: MessageExt, group: str, reconsume_times: int, max_times: int,
                  delay_level: int) -> Message:
    """The client-built copy for ``%RETRY%<group>`` (send-back fallback §5.4, orderly DLQ §6.4)."""
    props = dict(msg.properties)
    props.setdefault(C.PROPERTY_ORIGIN_MESSAGE_ID, msg.uniq_key or msg.msg_id)
    props[C.PROPERTY_RETRY_TOPIC] = msg.topic
    props[C.PROPERTY_RECONSUME_TIME] = str(reconsume_times)
    props[C.PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
    props.pop(C.PROPERTY_TRANSACTION_PREPARED, None)
    props[C.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    return Message(C.retry_topic(group), bytes(msg.body), properties=props, flag=msg.flag)


class ConsumeServiceBase:
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        self.c = consumer
        self.listener = listener
        self.retry_topic = C.retry_topic(consumer.group)
        self.pool = TaskThreads(consumer.consume_thread_nums, f"consume-{consumer.group}")
        self._submit = self.pool.submit

    def shutdown(self) -> None:
        # queued requests are dropped: their messages stay in flight, so the committed offset
        # stays below them and the group's next owner consumes them
        self.pool.shutdown()

    def _later(self, delay_ms: float, fn: Callable[..., None], *args: Any) -> None:
        self.c.instance.scheduler.schedule(delay_ms, lambda: self._submit(fn, *args))

    def _send_back_via_producer(self, msg: MessageExt, reconsume_times: int, max_times: int
                                ) -> bool:
        try:
            self.c.inner_producer().send(retry_message(
                msg, self.c.group, reconsume_times, max_times, 3 + reconsume_times))
            return True
        except Exception as e:
            log.warning("send back %s to %s failed: %s", msg.msg_id, self.retry_topic, e)
            return False


class ConsumeMessageConcurrentlyService(ConsumeServiceBase):
    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
               dispatch: bool) -> None:
        bs = self.c.consume_message_batch_max_size
        if len(msgs) <= bs:
            self._submit(self._consume, msgs, pq, mq)
        else:
            for i in range(0, len(msgs), bs):
                self._submit(self._consume, msgs[i:i + bs], pq, mq)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        if mq.topic == self.retry_topic:
            reset_retry_topic(msgs, mq, self.retry_topic)
        ctx = ConsumeConcurrentlyContext(mq)
        try:
            status = self.listener(msgs, ctx)
        except Exception:
            log.exception("listener of %s failed on %d message(s) of %s: RECONSUME_LATER",
                          self.c.group, len(msgs), mq)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:      # the queue went to another consumer meanwhile: discard
            return
        if status is _SUCCESS and ctx.ack_index >= len(msgs) - 1:
            # the common case, without the send-back bookkeeping
            offset = pq.remove_message(msgs)
            if offset >= 0:
                self.c.offset_store.update_offset(mq, offset, True)
            if pq.parked_pull is not None:
                self.c.resume_parked_pull(pq)
            return
        self.process_consume_result(status, ctx, msgs, pq, mq)

    def process_consume_result(self, status: Any, ctx: ConsumeConcurrentlyContext,
                               msgs: list[MessageExt], pq: ProcessQueue,
                               mq: MessageQueue) -> None:
        n = len(msgs)
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack = min(ctx.ack_index, n - 1)
        else:
            ack = -1
        done = msgs
        if ack < n - 1:
            if self.c.message_model is MessageModel.BROADCASTING:
                for m in msgs[ack + 1:]:
                    log.warning("BROADCASTING, the message %s consume failed, drop it",
                                m.uniq_key or m.msg_id)
            else:
                failed = [m for m in msgs[ack + 1:] if not self.send_message_back(m, ctx, mq)]
                if failed:
                    ids = {id(m) for m in failed}
                    done = [m for m in msgs if id(m) not in ids]
                    self._later(5000, self._consume, failed, pq, mq)
        offset = pq.remove_message(done)
        if offset >= 0 and not pq.dropped:
            self.c.offset_store.update_offset(mq, offset, True)
        if pq.parked_pull is not None:
            self.c.resume_parked_pull(pq)

    def send_message_back(self, msg: MessageExt, ctx: ConsumeConcurrentlyContext,
                          mq: MessageQueue) -> bool:
        """§5.4: ask the broker that holds the record; on failure send a client-built copy."""
        max_times = self.c.max_reconsume_times_concurrently()
        try:
            r = self.c.transport.consumer_send_msg_back(mq.broker_name, ConsumerSendMsgBackRequest(
                self.c.group, msg.commitlog_offset, ctx.delay_level_when_next_consume,
                msg.uniq_key or msg.msg_id, msg.topic, max_times))
            if r.code == ResponseCode.SUCCESS:
                return True
            log.warning("send back of %s refused (%s %s): client fallback", msg.msg_id,
                        r.code, r.remark)
        except Exception as e:
            log.warning("send back of %s failed (%s): client fallback", msg.msg_id, e)
        return self._send_back_via_producer(msg, msg.reconsume_times + 1, max_times)


class ConsumeMessageOrderlyService(ConsumeServiceBase):
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}
        self._mq_locks_guard = threading.Lock()

    def _mq_lock(self, mq: MessageQueue) -> threading.Lock:
        with self._mq_locks_guard:
            lk = self._mq_locks.get(mq)
            if lk is None:
                lk = self._mq_locks[mq] = threading.Lock()
            return lk

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
               dispatch: bool) -> None:
        if dispatch:
            self._submit(self._run, pq, mq)

    def _clustering(self) -> bool:
        return self.c.message_model is MessageModel.CLUSTERING

    def _run(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        with self._mq_lock(mq):
            if self._clustering() and (not pq.locked or pq.is_lock_expired()):
                self._try_lock_later_and_reconsume(pq, mq, 100)
                return
            begin = now_ms()
            while True:
                if pq.dropped:
                    return
                if self._clustering() and (not pq.locked or pq.is_lock_expired()):
                    self._try_lock_later_and_reconsume(pq, mq, 10)
                    return
                if now_ms() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_MS:
                    self._later(10, self._run, pq, mq)
                    return
                msgs = pq.take_messages(self.c.consume_message_batch_max_size)
                if not msgs:
                    return
                reset_retry_topic(msgs, mq, self.retry_topic)
                ctx = ConsumeOrderlyContext(mq)
                with pq.consume_lock:
                    if pq.dropped:
                        return
                    try:
                        status = self.listener(msgs, ctx)
                    except Exception:
                        log.exception("orderly listener of %s failed on %s: suspend",
                                      self.c.group, mq)
                        status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is None:
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if not self.process_consume_result(msgs, status, ctx, pq, mq):
                    return

    def _try_lock_later_and_reconsume(self, pq: ProcessQueue, mq: MessageQueue,
                                      delay_ms: float) -> None:
        def relock() -> None:
            if pq.dropped:
                return
            if self.c.rebalance.lock(mq):
                self._later(10, self._run, pq, mq)
            else:
                self._later(3000, self._run, pq, mq)
        self.c.instance.scheduler.schedule(delay_ms, lambda: self._submit(relock))

    def _suspend_ms(self, ctx: ConsumeOrderlyContext) -> int:
        v = ctx.suspend_current_queue_time_millis
        if v == -1:
            v = self.c.suspend_current_queue_time_millis
        return max(10, min(30000, v))

    def process_consume_result(self, msgs: list[MessageExt], status: Any,
                               ctx: ConsumeOrderlyContext, pq: ProcessQueue,
                               mq: MessageQueue) -> bool:
        cont = True
        commit_offset = -1
        suspend_status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if ctx.auto_commit:
            if status is suspend_status:
                if self._check_reconsume_times(msgs, pq):
                    pq.make_message_to_consume_again(msgs)
                    self._later(self._suspend_ms(ctx), self._run, pq, mq)
                    cont = False
                else:
                    commit_offset = pq.commit()
            else:
                commit_offset = pq.commit()
        else:
            if status is suspend_status:
                if self._check_reconsume_times(msgs, pq):
                    pq.make_message_to_consume_again(msgs)
                    self._later(self._suspend_ms(ctx), self._run, pq, mq)
                    cont = False
            # SUCCESS without auto-commit: nothing committed
        if commit_offset >= 0 and not pq.dropped:
            self.c.offset_store.update_offset(mq, commit_offset, False)
        if pq.parked_pull is not None:
            self.c.resume_parked_pull(pq)
        return cont

    def _check_reconsume_times(self, msgs: list[MessageExt], pq: ProcessQueue) -> bool:
        """§6.4: True to suspend; a message at the limit goes to the DLQ through the retry
        topic (its send failing suspends too). Reconsume counts live in memory only."""
        suspend = False
        max_times = self.c.max_reconsume_times_orderly()
        for m in msgs:
            rt = pq.reconsume.get(m.queue_offset, m.reconsume_times)
            if rt >= max_times:
                if not self._send_back_via_producer(m, rt, max_times):
                    suspend = True
                    pq.reconsume[m.queue_offset] = rt + 1
            else:
                suspend = True
                pq.reconsume[m.queue_offset] = rt + 1
        return suspend
