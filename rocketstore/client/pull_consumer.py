"""``PullConsumer``: RocketMQ's ``DefaultLitePullConsumer``, with Kafka's habits.

``subscribe`` (the group rebalances queues among its members) or ``assign`` (fixed queues);
background long-polling pulls fill a bounded cache that ``poll`` drains; ``commit`` sends the
consumed offsets (auto-commit does it every ``auto_commit_interval_ms`` from ``poll``);
``seek`` moves a queue, ``offsets_for_times`` finds offsets by store time.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Iterator, Mapping

from rocketstore.client.consumer import ConsumerBase
from rocketstore.client.offset_store import ReadOffsetType, RemoteBrokerOffsetStore
from rocketstore.client.instance import (HEARTBEAT_BROKER_INTERVAL_MS, POLL_NAME_SERVER_INTERVAL_MS,
                                         ClientTimers)
from rocketstore.client.process_queue import ConcurrentProcessQueue, ProcessQueue
from rocketstore.client.subscription import build_subscription_data, filter_by_tags
from rocketstore.common import ConsumeType, MessageExt, MessageModel, MessageQueue, ResponseCode
from rocketstore.common.protocol import PullMessageRequest, PullMessageResponse
from rocketstore.errors import MQClientError

log = logging.getLogger("rocketstore.client")

FLAG_SUSPEND, FLAG_SUBSCRIPTION, FLAG_LITE_PULL = 0x2, 0x4, 0x10
SUSPEND_MS = 15000
DELAY_WHEN_FLOW_CONTROL_MS = 50
DELAY_WHEN_EXCEPTION_MS = 1000


class _Assigned:
    """One queue's pull state: its cache, next pull offset and seek generation."""

    __slots__ = ("mq", "pq", "pull_offset", "generation", "paused", "in_flight")
    # in_flight: the generation whose pull is out (a held pull survives a seek; the seek's
    # generation pulls at once and the old answer is dropped)

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.mq = mq
        self.pq = pq
        self.pull_offset = offset
        self.generation = 0
        self.paused = False
        self.in_flight = -1


class PullConsumer(ConsumerBase):
    """Poll messages yourself; offsets committed by you or automatically."""

    consume_type = ConsumeType.CONSUME_ACTIVELY
    drop_idle_queues = False

    def __init__(self, group: str, *, broker: Any = None, namesrv_addr: str | None = None,
                 message_model: str | MessageModel = "CLUSTERING",
                 consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
                 consume_timestamp_ms: int | None = None, auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, pull_batch_size: int = 10,
                 pull_threshold_for_queue: int = 1000, pull_threshold_for_all: int = 10000,
                 allocate_strategy: Any = "AVG", instance_name: str | None = None,
                 offset_store_dir: Any = None,
                 poll_name_server_interval: int = POLL_NAME_SERVER_INTERVAL_MS,
                 heartbeat_broker_interval: int = HEARTBEAT_BROKER_INTERVAL_MS,
                 credentials: Any = None, access_key: str | None = None,
                 secret_key: str | None = None,
                 on_assign: Callable[[set[MessageQueue]], Any] | None = None,
                 on_revoke: Callable[[set[MessageQueue]], Any] | None = None,
                 consumer_timeout_ms: float | None = None,
                 ) -> None:
        """``credentials`` (a ``rocketstore.acl.SessionCredentials``, or ``access_key`` and
        ``secret_key``): sign every request for a broker with plain ACL on (docs/acl.md).
        ``on_assign(queues)`` / ``on_revoke(queues)``: called (on the rebalance thread) with
        the queues a rebalance gave this consumer or took from it (Kafka's rebalance
        listener); leaving the group revokes every queue.
        ``consumer_timeout_ms``: iteration (``for msg in consumer``) ends after this long
        without a message (None: it ends only when the consumer is shut down)."""
        super().__init__(group, broker=broker, namesrv_addr=namesrv_addr,
                         message_model=message_model, consume_from_where=consume_from_where,
                         consume_timestamp_ms=consume_timestamp_ms,
                         allocate_strategy_=allocate_strategy, instance_name=instance_name,
                         offset_store_dir=offset_store_dir,
                         timers=ClientTimers.checked(poll_name_server_interval,
                                                     heartbeat_broker_interval),
                         credentials=credentials, access_key=access_key, secret_key=secret_key,
                         on_assign=on_assign, on_revoke=on_revoke)
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_for_all = pull_threshold_for_all
        self._assigned: dict[MessageQueue, _Assigned] = {}
        self._cache: collections.deque[tuple[_Assigned, int, list[MessageExt]]] = \
            collections.deque()
        self._cached = 0
        self._cond = threading.Condition()
        self._mode: str | None = None          # "subscribe" or "assign"
        self._last_commit = time.monotonic()
        self.consumer_timeout_ms = consumer_timeout_ms
        # called (pull-service thread, outside the lock) after messages are cached or the
        # consumer stops: how rocketstore.aio's consumer learns without a waiting thread
        self._waker: Callable[[], None] | None = None

    # -- configuration ------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        if self._mode == "assign":
            raise MQClientError("subscribe and assign are mutually exclusive")
        self._mode = "subscribe"
        super().subscribe(topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no rebalance)."""
        if self._mode == "subscribe":
            raise MQClientError("subscribe and assign are mutually exclusive")
        queues = set(queues)
        if not queues:
            raise MQClientError("assign: message queues is empty")
        self._mode = "assign"
        for mq in queues:
            if mq.topic not in self._subscriptions:
                self._subscriptions[mq.topic] = build_subscription_data(mq.topic, "*")
                self._subs_cache = None
        self._assign_queues = queues
        if self._running:
            self._apply_assignment(queues)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> PullConsumer:
        if self._running:
            raise MQClientError(f"pull consumer {self.group!r} is already started")
        # subscribe() or assign() may come before or after start() (Kafka's and RocketMQ's
        # lite pull consumer allow both): ``with PullConsumer(...) as c: c.assign(queues)``
        self._start_base()
        self._running = True
        self.instance.send_heartbeat_to_all_brokers()
        if self._mode == "assign":
            self._apply_assignment(self._assign_queues)
        else:
            self.instance.rebalance_immediately()
        return self

    def shutdown(self) -> None:
        """Commit (with auto-commit), persist offsets, leave the group."""
        if not self._running:
            return
        if self.auto_commit:
            self.commit()
        self._running = False
        with self._cond:
            self._cond.notify_all()
        waker = self._waker
        if waker is not None:
            waker()
        self._leave()

    # -- assignment ---------------------------------------------------------------------------
    def _apply_assignment(self, queues: set[MessageQueue]) -> None:
        table = self.rebalance.process_queue_table
        for mq in list(table):
            if mq not in queues:
                table.pop(mq).dropped = True
                self._assigned.pop(mq, None)
        new = []
        for mq in sorted(queues - table.keys()):
            offset = self.rebalance.compute_pull_from_where(mq)
            if offset < 0:
                raise MQClientError(f"assign: no start offset for {mq}")
            pq = table[mq] = ConcurrentProcessQueue()
            new.append((mq, pq, offset))
        self.dispatch_pull_requests(new)

    def dispatch_pull_requests(self, pulls: list[tuple[MessageQueue, ProcessQueue, int]]) -> None:
        for mq, pq, offset in pulls:
            a = _Assigned(mq, pq, offset)
            self._assigned[mq] = a
            self.offset_store.update_offset(mq, offset, False)
            self.instance.pull_service.execute(self._pull, a)

    def do_rebalance(self) -> None:
        # assigned queues are fixed: a group rebalance racing start() would add the same
        # queue a second time and deliver its messages twice (RocketMQ's lite pull consumer
        # rebalances in subscribe mode only)
        if self._mode == "subscribe":
            super().do_rebalance()

    def queues_changed(self, revoked: set[MessageQueue], assigned: set[MessageQueue]) -> None:
        # as Kafka's: queues given with assign() are never "rebalanced"
        if self._mode == "subscribe":
            super().queues_changed(revoked, assigned)

    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self._assigned.pop(mq, None)
        return super().remove_unnecessary_message_queue(mq, pq)

    def assignment(self, topic: str | None = None) -> set[MessageQueue]:
        """The queues this consumer currently pulls."""
        return {mq for mq in list(self._assigned) if topic is None or mq.topic == topic}

    # -- pulling (pull service thread) --------------------------------------------------------
    def _later(self, a: _Assigned, delay_ms: float) -> None:
        if self._running:
            self.instance.scheduler.schedule(
                delay_ms, lambda: self.instance.pull_service.execute(self._pull, a))

    def _pull(self, a: _Assigned) -> None:
        if a.pq.dropped or not self._running or a.in_flight == a.generation:
            return
        if a.pq.msg_count > self.pull_threshold_for_queue:
            # waits until poll() takes this queue's messages (the timer is a backstop)
            a.pq.park_pull(a)
            if a.pq.msg_count <= self.pull_threshold_for_queue:
                self._resume_parked(a)
            else:
                self.instance.scheduler.schedule(DELAY_WHEN_EXCEPTION_MS,
                                                  lambda: self._resume_parked(a))
            return
        if a.paused or self._cached > self.pull_threshold_for_all:
            self._later(a, DELAY_WHEN_FLOW_CONTROL_MS)
            return
        sub = self._subscriptions.get(a.mq.topic)
        if sub is None:
            self._later(a, DELAY_WHEN_EXCEPTION_MS)
            return
        req = PullMessageRequest(self.group, a.mq.topic, a.mq.queue_id, a.pull_offset,
                                 self.pull_batch_size,
                                 FLAG_SUSPEND | FLAG_SUBSCRIPTION | FLAG_LITE_PULL, 0,
                                 SUSPEND_MS, sub.sub_string, sub.sub_version)
        gen = a.generation
        try:
            fut = self.transport.pull_message(a.mq.broker_name, req)
        except Exception as e:
            log.warning("pull %s: %s", a.mq, e)
            self._later(a, DELAY_WHEN_EXCEPTION_MS)
            return
        a.in_flight = gen
        execute = self.instance.pull_service.execute
        fut.add_done_callback(lambda f: execute(self._on_response, a, gen, f))

    def _resume_parked(self, a: _Assigned) -> None:
        if a.pq.parked_pull is not None and a.pq.msg_count <= self.pull_threshold_for_queue:
            if a.pq.take_parked_pull() is not None:
                self.instance.pull_service.execute(self._pull, a)

    def _on_response(self, a: _Assigned, gen: int, fut: Future[PullMessageResponse]) -> None:
        if gen != a.generation:          # sought meanwhile: the new generation pulls itself
            return
        a.in_flight = -1
        if a.pq.dropped or not self._running:
            return
        try:
            resp = fut.result()
        except Exception as e:
            log.warning("pull %s failed: %s", a.mq, e)
            self._later(a, DELAY_WHEN_EXCEPTION_MS)
            return
        if resp.code == ResponseCode.SUCCESS:
            a.pull_offset = resp.next_begin_offset
            msgs = filter_by_tags(resp.messages, self._subscriptions[a.mq.topic]) \
                if a.mq.topic in self._subscriptions else resp.messages
            if msgs:
                a.pq.put_message(msgs)
                with self._cond:
                    self._cache.append((a, gen, msgs))
                    self._cached += len(msgs)
                    self._cond.notify()
                    waker = self._waker
                if waker is not None:
                    waker()
            self._pull(a)
        elif resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            a.pull_offset = resp.next_begin_offset
            self._pull(a)
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
            a.pull_offset = resp.next_begin_offset
            self._pull(a)
        else:
            log.warning("pull %s: %s %s", a.mq, resp.code, resp.remark)
            self._later(a, DELAY_WHEN_EXCEPTION_MS)

    # -- the consumer's API -------------------------------------------------------------------
    def poll(self, timeout_ms: int = 5000) -> list[MessageExt]:
        """Messages pulled for one queue (up to ``pull_batch_size``), waiting up to
        ``timeout_ms``; an empty list when none arrived."""
        self._check_running()
        deadline = time.monotonic() + timeout_ms / 1000.0
        self._maybe_auto_commit()
        while True:
            with self._cond:
                while not self._cache:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._running:
                        return []
                    self._cond.wait(left)
            msgs = self._take()
            if msgs:
                return msgs

    def _check_running(self) -> None:
        if not self._running:
            raise MQClientError("pull consumer is not running: start() first")

    def _take(self) -> list[MessageExt] | None:
        """The next cached batch for the application (its queue's offset advanced past it),
        or None when nothing is cached; never waits (``poll`` and rocketstore.aio share it)."""
        while True:
            with self._cond:
                if not self._cache:
                    return None
                a, gen, msgs = self._cache.popleft()
                self._cached -= len(msgs)
            if a.pq.dropped or gen != a.generation:
                continue                 # revoked or sought past: not for the application
            offset = a.pq.remove_message(msgs)
            if offset >= 0:
                self.offset_store.update_offset(a.mq, offset, True)
            if a.pq.parked_pull is not None:
                self._resume_parked(a)
            return msgs

    def __iter__(self) -> Iterator[MessageExt]:
        """Message after message (Kafka's ``for msg in consumer``): ends when the consumer is
        shut down, or after ``consumer_timeout_ms`` without a message. A batch counts as
        consumed once iteration took it from the cache (as ``poll`` does)."""
        self._check_running()
        idle_since = time.monotonic()
        limit = self.consumer_timeout_ms
        while self._running:
            wait_ms = 1000.0
            if limit is not None:
                wait_ms = min(wait_ms, limit - (time.monotonic() - idle_since) * 1000)
                if wait_ms <= 0:
                    return
            msgs = self.poll(max(1, int(wait_ms)))
            if msgs:
                yield from msgs
                idle_since = time.monotonic()

    def _maybe_auto_commit(self) -> None:
        if self.auto_commit and \
                (time.monotonic() - self._last_commit) * 1000 >= self.auto_commit_interval_ms:
            self.commit()

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None
               ) -> dict[MessageQueue, int]:
        """Commit the offsets consumed so far (the next offset of each polled queue), or, as
        Kafka's ``commit(offsets)``, exactly ``offsets`` ({queue: next offset to consume});
        returns what was committed. Explicit offsets leave the position alone: the next
        ``poll`` continues where it was, and a later (auto-)commit writes the position again."""
        if self.offset_store is None:
            raise MQClientError("commit: the pull consumer was never started")
        self._last_commit = time.monotonic()
        if offsets is None:
            owned = list(self.rebalance.process_queue_table)
            table = self.offset_store.clone_offset_table()
            self.offset_store.persist_all(owned)
            return {mq: table[mq] for mq in owned if mq in table}
        checked = _checked_offsets(offsets)
        if isinstance(self.offset_store, RemoteBrokerOffsetStore):
            for mq, off in checked.items():
                self.transport.update_consumer_offset(mq.broker_name, self.group, mq.topic,
                                                      mq.queue_id, off)
        else:       # broadcasting: the local file holds the position and the commit alike
            for mq, off in checked.items():
                self.offset_store.update_offset(mq, off, False)
            self.offset_store.persist_all(list(self.rebalance.process_queue_table))
        return checked

    def commit_async(self, offsets: Mapping[MessageQueue, int] | None = None,
                     callback: Callable[[dict[MessageQueue, int], BaseException | None], Any]
                     | None = None) -> Future[dict[MessageQueue, int]]:
        """``commit`` on the client's timer thread: returns at once; the future (and
        ``callback(offsets, error)``) completes with what was committed."""
        self._check_running()
        checked = None if offsets is None else _checked_offsets(offsets)
        fut: Future[dict[MessageQueue, int]] = Future()

        def run() -> None:
            try:
                done = self.commit(checked)
            except Exception as e:
                fut.set_exception(e)
                if callback is not None:
                    callback(dict(checked or {}), e)
                return
            fut.set_result(done)
            if callback is not None:
                callback(done, None)
        self.instance.scheduler.schedule(0, run)
        return fut

    def position(self, queue: MessageQueue) -> int:
        """The offset of the next message ``poll`` gives from ``queue`` (Kafka's
        ``position``)."""
        if queue not in self._assigned:
            raise MQClientError(f"position: {queue} is not assigned to this consumer")
        off = self.offset_store.read_offset(queue, ReadOffsetType.READ_FROM_MEMORY)
        return off if off >= 0 else self._assigned[queue].pull_offset

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Next ``poll`` of ``queue`` starts at ``offset`` (cached messages are discarded)."""
        a = self._assigned.get(queue)
        if a is None:
            raise MQClientError(f"seek: {queue} is not assigned to this consumer")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise MQClientError(f"seek offset {offset!r} of {queue} is not an int")
        lo = self.transport.get_min_offset(queue.broker_name, queue.topic, queue.queue_id)
        hi = self.transport.get_max_offset(queue.broker_name, queue.topic, queue.queue_id)
        if not lo <= offset <= hi:
            raise MQClientError(f"seek offset {offset} of {queue} is out of range [{lo}, {hi}]")
        with self._cond:
            a.generation += 1
            a.pull_offset = offset
            a.pq.clear()
        self.offset_store.update_offset(queue, offset, False)
        self.instance.pull_service.execute(self._pull, a)

    def seek_to_beginning(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Seek ``queues`` (default: every assigned queue) to their first stored message."""
        for mq in self._seek_targets(queues):
            self.seek(mq, self.transport.get_min_offset(mq.broker_name, mq.topic,
                                                        mq.queue_id))

    def seek_to_end(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Seek ``queues`` (default: every assigned queue) past their last message: only
        messages stored from now on are polled."""
        for mq in self._seek_targets(queues):
            self.seek(mq, self.transport.get_max_offset(mq.broker_name, mq.topic,
                                                        mq.queue_id))

    def _seek_targets(self, queues: Iterable[MessageQueue] | None) -> list[MessageQueue]:
        if queues is None:
            return sorted(self._assigned)
        if isinstance(queues, MessageQueue):
            return [queues]
        return list(queues)

    def committed(self, queue: MessageQueue) -> int:
        """The offset the broker (or the local file, broadcasting) holds for ``queue``; -1
        when none was committed."""
        return self.offset_store.read_committed(queue)

    def offsets_for_times(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        """For each queue, the offset of the first message stored at or after the time (ms)."""
        return {mq: self.transport.search_offset(mq.broker_name, mq.topic, mq.queue_id, ts)
                for mq, ts in timestamps.items()}

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (to ``assign`` them)."""
        qs = self.rebalance.topic_queues(topic)
        if qs is None:
            raise MQClientError(f"no route info of topic {topic!r}")
        return sorted(qs)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            if mq in self._assigned:
                self._assigned[mq].paused = True

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            if mq in self._assigned:
                self._assigned[mq].paused = False


def _checked_offsets(offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
    if not isinstance(offsets, Mapping):
        raise MQClientError(f"commit offsets must be a dict of MessageQueue to offset, got "
                            f"{type(offsets).__name__}")
    out: dict[MessageQueue, int] = {}
    for mq, off in offsets.items():
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"commit offsets: key {mq!r} is not a MessageQueue")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise MQClientError(f"commit offsets: offset {off!r} of {mq} is not an int >= 0")
        out[mq] = off
    return out
