"""``RebalanceImpl``: one consumer's share of its subscribed queues (MESSAGING.md §3, §6.5).

Each consumer decides alone from the topic's readable queues and the group's client ids, both
sorted; queues it loses are persisted and dropped, queues it gains get a ``ProcessQueue`` and a
start offset (§3.7). Orderly consumers must lock a queue on the broker before taking it.
"""
from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Callable

from rocketstore.client.offset_store import ReadOffsetType
from rocketstore.client.process_queue import ConcurrentProcessQueue, ProcessQueue, now_ms
from rocketstore.common import MessageModel, MessageQueue, PermName
from rocketstore.common import constants as C
from rocketstore.common.protocol import ConsumeFromWhere
from rocketstore.errors import TransportError

if TYPE_CHECKING:
    from rocketstore.client.consumer import ConsumerBase

log = logging.getLogger("rocketstore.client")


def readable_queues(topic: str, route) -> list[MessageQueue]:  # noqa: ANN001
    """The topic's queues of every broker whose perm allows reading."""
    out: list[MessageQueue] = []
    for qd in route.queue_datas:
        if qd.perm & PermName.PERM_READ:
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return out


class RebalanceImpl:
    def __init__(self, consumer: ConsumerBase) -> None:
        self.c = consumer
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._lock = threading.RLock()          # one rebalance at a time per consumer

    # -- the round ---------------------------------------------------------------------------
    def do_rebalance(self, is_order: bool) -> None:
        with self._lock:
            subs = self.c.subscriptions_for_rebalance()
            for topic in subs:
                try:
                    self.rebalance_by_topic(topic, is_order)
                except TransportError as e:
                    log.warning("rebalance of %s/%s: %s", self.c.group, topic, e)
            gone = {mq for mq in self.process_queue_table if mq.topic not in subs}
            for mq in gone:
                pq = self.process_queue_table.pop(mq)
                pq.dropped = True
            self.c.queues_changed(gone, set())

    def topic_queues(self, topic: str) -> list[MessageQueue] | None:
        route = self.c.instance.topic_route(topic)
        if route is None:
            return None
        return readable_queues(topic, route)

    def find_consumer_id_list(self, topic: str) -> list[str] | None:
        route = self.c.instance.topic_route(topic)
        if route is None or not route.queue_datas:
            return None
        broker = random.choice([qd.broker_name for qd in route.queue_datas])
        try:
            return self.c.transport.get_consumer_id_list(broker, self.c.group)
        except TransportError as e:
            log.warning("consumer ids of %s from %s: %s", self.c.group, broker, e)
            return None

    def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        mq_set = self.topic_queues(topic)
        if mq_set is None:
            return
        if self.c.message_model is MessageModel.BROADCASTING:
            if self.update_process_queue_table(topic, set(mq_set), is_order):
                self.c.message_queue_changed(topic, set(mq_set), set(mq_set))
            return
        cid_all = self.find_consumer_id_list(topic)
        if not cid_all:
            return
        mq_all = sorted(mq_set)
        cid_all = sorted(cid_all)
        try:
            mine = self.c.allocate_strategy.allocate(self.c.group, self.c.client_id, mq_all,
                                                     cid_all)
        except Exception:
            log.exception("allocate of %s/%s failed", self.c.group, topic)
            return
        if self.update_process_queue_table(topic, set(mine), is_order):
            self.c.message_queue_changed(topic, set(mq_all), set(mine))

    def update_process_queue_table(self, topic: str, mq_set: set[MessageQueue],
                                   is_order: bool) -> bool:
        changed = False
        revoked: set[MessageQueue] = set()
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set or (self.c.drop_idle_queues and pq.is_pull_expired()):
                pq.dropped = True
                if self.c.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    revoked.add(mq)
                    changed = True
        new_pulls = []
        for mq in sorted(mq_set - self.process_queue_table.keys()):
            if is_order and self.c.message_model is MessageModel.CLUSTERING and not self.lock(mq):
                continue
            self.c.offset_store.remove_offset(mq)
            pq = ProcessQueue() if is_order else ConcurrentProcessQueue()
            if is_order:
                pq.locked = True
                pq.last_lock_timestamp = now_ms()
            offset = self.compute_pull_from_where(mq)
            if offset < 0:
                continue
            self.process_queue_table[mq] = pq
            new_pulls.append((mq, pq, offset))
            changed = True
        if new_pulls:
            self.c.dispatch_pull_requests(new_pulls)
        if changed:
            self.c.queues_changed(revoked, {mq for mq, _, _ in new_pulls})
        return changed

    def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """§3.7: the committed offset, else by ``consume_from_where``; -1 skips the queue."""
        last = self.c.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last != -1:
            return -1
        t = self.c.transport
        where = self.c.consume_from_where
        try:
            if mq.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
                if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                    return t.get_max_offset(mq.broker_name, mq.topic, mq.queue_id)
                return 0
            if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                return t.search_offset(mq.broker_name, mq.topic, mq.queue_id,
                                       self.c.consume_timestamp_ms)
            return t.get_max_offset(mq.broker_name, mq.topic, mq.queue_id)
        except TransportError as e:
            log.warning("start offset of %s: %s", mq, e)
            return -1

    # -- orderly locks (§6.2) ------------------------------------------------------------------
    def lock(self, mq: MessageQueue) -> bool:
        try:
            locked = self.c.transport.lock_batch_mq(mq.broker_name, self.c.group,
                                                    self.c.client_id, {mq})
        except TransportError as e:
            log.warning("lock %s: %s", mq, e)
            return False
        pq = self.process_queue_table.get(mq)
        ok = mq in locked
        if pq is not None and ok:
            pq.locked = True
            pq.last_lock_timestamp = now_ms()
        return ok

    def _by_broker(self) -> dict[str, set[MessageQueue]]:
        out: dict[str, set[MessageQueue]] = {}
        for mq in list(self.process_queue_table):
            out.setdefault(mq.broker_name, set()).add(mq)
        return out

    def lock_all(self) -> None:
        for broker, mqs in self._by_broker().items():
            try:
                locked = self.c.transport.lock_batch_mq(broker, self.c.group, self.c.client_id,
                                                        mqs)
            except TransportError as e:
                log.warning("lock_all on %s: %s", broker, e)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    pq.locked = True
                    pq.last_lock_timestamp = now_ms()
                else:
                    pq.locked = False

    def unlock(self, mq: MessageQueue) -> None:
        try:
            self.c.transport.unlock_batch_mq(mq.broker_name, self.c.group, self.c.client_id,
                                             {mq})
        except TransportError as e:
            log.warning("unlock %s: %s", mq, e)

    def unlock_all(self) -> None:
        for broker, mqs in self._by_broker().items():
            try:
                self.c.transport.unlock_batch_mq(broker, self.c.group, self.c.client_id, mqs)
            except TransportError as e:
                log.warning("unlock_all on %s: %s", broker, e)
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.locked = False

    def destroy(self) -> None:
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()

    def schedule(self, delay_ms: float, fn: Callable[[], None]) -> None:
        self.c.instance.scheduler.schedule(delay_ms, fn)
