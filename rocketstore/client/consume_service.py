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
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.client import process_queue
from rocketstore.client.process_queue import ProcessQueue
from rocketstore.client.scheduler import TaskThreads
from rocketstore.common import (ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, Message,
                                MessageExt, MessageModel, MessageQueue, ResponseCode)
from rocketstore.common import constants as C
from rocketstore.common.protocol import ConsumerSendMsgBackRequest
from rocketstore.store._codec import (CALLS_COMMIT, CALLS_DONE, CALLS_DROPPED, CALLS_FAST,
                                      CALLS_SLOW, ORDERLY_COMMIT, ORDERLY_LOCK, ORDERLY_RESULT,
                                      ORDERLY_TIME, ConsumeConcurrentlyContext, ConsumeJob,
                                      ConsumeOrderlyContext,
                                      consume_clock, run_calls, run_orderly)

if TYPE_CHECKING:
    from rocketstore.client.push_consumer import PushConsumer

log = logging.getLogger("rocketstore.client")

JAVA_INT_MAX = 0x7FFFFFFF
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
_SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60000


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


#: A listener call slower than this fans a job out to more runners (an I/O-bound listener).
SLOW_CALL_S = 0.0005
#: A runner commits its finished messages at least this often (seconds).
RUNNER_COMMIT_S = 1.0
#: How often the watchdog looks for a job whose call blocks the rest of its pull (ms).
WATCH_MS = 50


class ConsumeMessageConcurrentlyService(ConsumeServiceBase):
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        self._threads = consumer.consume_thread_nums
        self._slow = False       # the last listener calls were slow: fan jobs out at once
        self._active: set[ConsumeJob] = set()     # jobs with calls left, for the watchdog
        self._watch_lock = threading.Lock()
        self._watching = False
        self._closed = False

    def shutdown(self) -> None:
        self._closed = True
        super().shutdown()

    def _arm_watchdog(self) -> None:
        with self._watch_lock:
            if not self._watching and not self._closed:
                self._watching = True
                self.c.instance.scheduler.schedule(WATCH_MS, self._watch)

    def _watch(self) -> None:
        """A call that has not returned after ``WATCH_MS`` (a hung or slow listener) must not
        hold back the rest of its pull: its job gets one more runner, as long as threads and
        calls are left. Re-armed while jobs are active."""
        now = consume_clock()
        for job in list(self._active):
            if job.pq.dropped:
                self._active.discard(job)
                continue
            since = job.busy_since
            if since and now - since > WATCH_MS / 1000.0:
                # what the blocked runner consumed before its call leaves the cache now
                self._commit(job)
                if job.taken < job.n_calls and job.runners < self._threads:
                    self._slow = True
                    job.runners += 1
                    self._submit(self._run_job, job)
        with self._watch_lock:
            self._watching = False
            if self._active and not self._closed:
                self._watching = True
                self.c.instance.scheduler.schedule(WATCH_MS, self._watch)

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
               dispatch: bool) -> None:
        job = ConsumeJob(msgs, pq, mq, self.c.consume_message_batch_max_size)
        runners = min(job.n_calls, self._threads) if self._slow else 1
        job.runners = runners
        if job.n_calls > 1:
            self._active.add(job)
            if not self._watching:
                self._arm_watchdog()
        for _ in range(runners):
            self._submit(self._run_job, job)

    def _run_job(self, job: ConsumeJob) -> None:
        """Take the job's calls until none is left. ``run_calls`` runs plain successes in
        C and comes back here only for what needs a decision: a failed call (send-back), a
        slow one (fan out), a commit due, the end of the job or of the queue."""
        pq, mq = job.pq, job.mq
        if mq.topic == self.retry_topic:
            reset_retry_topic(job.msgs, mq, self.retry_topic)     # idempotent per job
        listener = self.listener
        commit_at = consume_clock() + RUNNER_COMMIT_S
        while True:
            what, chunk, status, ctx, error, slow = run_calls(
                job, listener, _SUCCESS, SLOW_CALL_S, commit_at, self._slow)
            if what == CALLS_DONE:
                self._active.discard(job)
                break
            if what == CALLS_DROPPED:
                return
            if what == CALLS_COMMIT:
                self._commit(job)
                commit_at = consume_clock() + RUNNER_COMMIT_S
                continue
            if slow is not self._slow:
                self._slow = slow
            if slow and job.calls_left and job.runners < self._threads:
                job.runners += 1                 # racy by design: only bounds the fan-out
                self._submit(self._run_job, job)
            if what == CALLS_SLOW or what == CALLS_FAST:
                continue
            if error is not None:
                log.error("listener of %s failed on %d message(s) of %s: RECONSUME_LATER",
                          self.c.group, len(chunk), mq, exc_info=error)
                status = ConsumeConcurrentlyStatus.RECONSUME_LATER
            self.process_consume_result(status, ctx, chunk, pq, mq)
        if job.has_done() and not pq.dropped:
            self._commit(job)

    def _commit(self, job: ConsumeJob) -> None:
        """The job's consumed messages so far: out of the cache, the committed offset
        forward, a parked pull resumed."""
        out = job.take_done()       # a swap: the watchdog and a runner may commit at once
        if not out:
            return
        pq, mq = job.pq, job.mq
        offset = pq.remove_message(out)
        if offset >= 0:
            self.c.offset_store.update_offset(mq, offset, True)
        if pq.parked_pull is not None:
            self.c.resume_parked_pull(pq)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """One listener call on ``msgs`` (a send-back that failed, retried locally)."""
        if pq.dropped:
            return
        job = ConsumeJob(msgs, pq, mq, max(1, len(msgs)))
        self._run_job(job)

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
        """Consume the queue's cached messages in order while its lock holds. The calls run
        in C (``run_orderly``: take, call under the consume lock, commit); a call that is
        not a plain auto-committed success comes back for ``process_consume_result``."""
        if pq.dropped:
            return
        with self._mq_lock(mq):
            clustering = self._clustering()
            if clustering and (not pq.locked or pq.is_lock_expired()):
                self._try_lock_later_and_reconsume(pq, mq, 100)
                return
            until = consume_clock() + MAX_TIME_CONSUME_CONTINUOUSLY_MS / 1000.0
            reset = self._reset if mq.topic == self.retry_topic else None
            while True:
                what, msgs, status, ctx, error, offset = run_orderly(
                    pq, mq, self.listener, _SUSPEND,
                    self.c.consume_message_batch_max_size, clustering,
                    process_queue.REBALANCE_LOCK_MAX_LIVE_TIME_MS, until, RUNNER_COMMIT_S, reset)
                if offset >= 0 and not pq.dropped:
                    self.c.offset_store.update_offset(mq, offset, False)
                if what == ORDERLY_COMMIT:
                    if pq.parked_pull is not None:
                        self.c.resume_parked_pull(pq)
                    continue
                if what == ORDERLY_RESULT:
                    if error is not None:
                        log.error("orderly listener of %s failed on %s: suspend", self.c.group,
                                  mq, exc_info=error)
                    if status is None:
                        status = _SUSPEND
                    if not self.process_consume_result(msgs, status, ctx, pq, mq):
                        return
                    continue
                if pq.parked_pull is not None:
                    self.c.resume_parked_pull(pq)
                if what == ORDERLY_LOCK:
                    self._try_lock_later_and_reconsume(pq, mq, 10)
                elif what == ORDERLY_TIME:
                    self._later(10, self._run, pq, mq)
                return          # ORDERLY_EMPTY, ORDERLY_DROPPED

    def _reset(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        reset_retry_topic(msgs, mq, self.retry_topic)

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
