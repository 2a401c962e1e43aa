"""BrokerTopicManager: RocketMQ's broker ``TopicConfigManager`` rules over the store's
``topics.json`` (``rocketstore.store.topics.TopicConfigManager``).

At start the system topics of MESSAGING.md 12.1 are registered in 4.9.8's order (those the
file already has keep the file's values, as ``load()`` overrides the constructor's table in
RocketMQ); topics are created on demand by a send (copying the ``TBW102`` template, 11.6), by
a send-back or a heartbeat (``%RETRY%``/``%DLQ%``, 1 queue, perm 6) and by the transaction check
(``TRANS_CHECK_MAX_TIME_TOPIC``). Every creation bumps the data version and persists
(auto-creations through the background writer: never an fsync on the event loop).

Sends create no topics past ``autoCreateTopicMax`` (stricter than 4.9.8, where a client could
grow the table, ``topics.json`` and every NameServer registration without bound): the count is
of the topics the broker holds however made (``topics.json`` keeps no record of how), except
system topics and the ``%RETRY%``/``%DLQ%`` topics of groups the broker holds, which
``autoCreateSubscriptionGroupMax`` bounds.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from rocketstore.broker.config import BrokerConfig
from rocketstore.common import constants as C
from rocketstore.common.constants import PermName
from rocketstore.store.topics import TopicConfig, TopicConfigManager

log = logging.getLogger("rocketstore.broker.topics")

_RW = int(PermName.PERM_READ | PermName.PERM_WRITE)
_TEMPLATE = int(PermName.PERM_INHERIT | PermName.PERM_READ | PermName.PERM_WRITE)
SCHEDULE_TOPIC_QUEUE_NUM = 18       # TopicConfigManager registers 18 whatever the levels


def system_topics(cfg: BrokerConfig) -> list[TopicConfig]:
    """The topics 4.9.8's ``TopicConfigManager`` constructor registers, in its order."""
    out = [TopicConfig(C.SELF_TEST_TOPIC, 1, 1, _RW)]
    if cfg.auto_create_topic_enable:
        out.append(TopicConfig(C.AUTO_CREATE_TOPIC_KEY_TOPIC, cfg.default_topic_queue_nums,
                               cfg.default_topic_queue_nums, _TEMPLATE))
    out.append(TopicConfig(C.BENCHMARK_TOPIC, 1024, 1024, _RW))
    out.append(TopicConfig(cfg.broker_cluster_name, 16, 16,
                           _TEMPLATE if cfg.cluster_topic_enable else int(PermName.PERM_INHERIT)))
    out.append(TopicConfig(cfg.broker_name, 1, 1,
                           _TEMPLATE if cfg.broker_topic_enable else int(PermName.PERM_INHERIT)))
    out.append(TopicConfig(C.OFFSET_MOVED_EVENT, 1, 1, _RW))
    out.append(TopicConfig(C.SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM, SCHEDULE_TOPIC_QUEUE_NUM,
                           _RW))
    if cfg.trace_topic_enable:
        out.append(TopicConfig(cfg.msg_trace_topic_name, 1, 1, _RW))
    out.append(TopicConfig(cfg.broker_cluster_name + "_" + C.REPLY_TOPIC_POSTFIX, 1, 1, _RW))
    return out


class BrokerTopicManager:
    """Topic lookups and the creation paths of RocketMQ's broker ``TopicConfigManager``."""

    def __init__(self, table: TopicConfigManager, cfg: BrokerConfig) -> None:
        self.table = table
        self.cfg = cfg
        self._lock = threading.Lock()
        self.system_topic_names = {tc.topic_name for tc in system_topics(cfg)}
        # the broker's SubscriptionGroupManager (set by the broker): a held group's retry and
        # DLQ topics are bounded by the groups, not by autoCreateTopicMax
        self.groups: Any = None
        # how many topics count toward autoCreateTopicMax, as of the table's data version
        # ``_counted_at`` (recounted only when someone else changed the table)
        self._counted = 0
        self._counted_at: Any = None
        missing = table.register_absent(system_topics(cfg))
        if missing:
            log.info("registered system topics %s", [tc.topic_name for tc in missing])

    def select(self, topic: str) -> TopicConfig | None:
        """``selectTopicConfig``: the topic's config, or None."""
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """``updateTopicConfig``: create or replace, bump the version, persist."""
        self.table.update(tc)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.table.get(topic)
        return tc is not None and tc.order

    def is_system_topic(self, topic: str) -> bool:
        """``TopicValidator.isSystemTopic`` plus the topics this broker added at start."""
        return (topic in self.system_topic_names or topic.startswith(C.SYSTEM_TOPIC_PREFIX)
                or topic in (C.TRANS_HALF_TOPIC, C.TRANS_OP_HALF_TOPIC,
                             C.TRANS_CHECK_MAX_TIME_TOPIC, C.RMQ_SYS_TRACE_TOPIC))

    def _capped(self, topic: str) -> bool:
        """Does ``topic`` count toward ``autoCreateTopicMax``?"""
        if self.is_system_topic(topic):
            return False
        for prefix in (C.RETRY_GROUP_TOPIC_PREFIX, C.DLQ_GROUP_TOPIC_PREFIX):
            if topic.startswith(prefix):
                groups = self.groups
                return groups is None or groups.get(topic[len(prefix):]) is None
        return True

    def _count(self) -> int:
        """The topics counting toward ``autoCreateTopicMax`` (caller holds ``_lock``)."""
        version = self.table.data_version
        if version is not self._counted_at:
            self._counted = sum(1 for t in self.table.all() if self._capped(t))
            self._counted_at = version
        return self._counted

    def _room_for(self, topic: str) -> bool:
        """May a send create ``topic`` (caller holds ``_lock``)?"""
        return not self._capped(topic) or self._count() < self.cfg.auto_create_topic_max

    def _created(self, tc: TopicConfig) -> None:
        """Add ``tc`` made by a send-side path, keeping the count (caller holds ``_lock``)."""
        counted = self._counted_at is self.table.data_version
        self.table.update(tc, durable=False)
        if counted:
            self._counted += self._capped(tc.topic_name)
            self._counted_at = self.table.data_version

    def cap_problem(self, topic: str) -> str | None:
        """Why a send may not create ``topic`` past ``autoCreateTopicMax``, or None."""
        if not (self.cfg.auto_create_topic_enable or topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)):
            return None                 # refused as 4.9.8 refuses it, whatever the count
        with self._lock:
            if self.table.get(topic) is not None or self._room_for(topic):
                return None
            n, cap = self._count(), self.cfg.auto_create_topic_max
        return (f"topic[{topic}] not exist: the broker holds {n} topics and sends create no "
                f"more (autoCreateTopicMax={cap}); create it with updateTopic")

    def create_topic_in_send_message_method(self, topic: str, default_topic: str,
                                            client_default_topic_queue_nums: int,
                                            topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from the template ``default_topic`` (MESSAGING.md 11.6): needs
        the template's INHERIT bit; queues = min(client's count, template's write queues),
        perm = template's without INHERIT, same filter type. None when it cannot, or when the
        broker holds ``autoCreateTopicMax`` topics (``cap_problem`` says so)."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            if not self._room_for(topic):
                return None
            template = self.table.get(default_topic)
            if template is None:
                log.warning("create topic %s failed: default topic %s does not exist",
                            topic, default_topic)
                return None
            perm = template.perm
            if default_topic == C.AUTO_CREATE_TOPIC_KEY_TOPIC and not self.cfg.auto_create_topic_enable:
                perm = _RW          # a stale TBW102 in the file no longer lends its INHERIT bit
            if not perm & PermName.PERM_INHERIT:
                log.warning("create topic %s failed: default topic %s has perm %d (no inherit)",
                            topic, default_topic, perm)
                return None
            nums = max(0, min(client_default_topic_queue_nums, template.write_queue_nums))
            tc = TopicConfig(topic, nums, nums, perm & ~int(PermName.PERM_INHERIT),
                             template.topic_filter_type, topic_sys_flag)
            # written by the background writer: a send never waits for an fsync here
            self._created(tc)
            log.info("created topic %s from %s: %s", topic, default_topic, tc)
            return tc

    def create_topic_in_send_message_back_method(self, topic: str, queue_nums: int, perm: int,
                                                 topic_sys_flag: int = 0) -> TopicConfig:
        """``%RETRY%``/``%DLQ%`` creation: the given queue count and perm, if absent."""
        with self._lock:
            return self._create_back(topic, queue_nums, perm, topic_sys_flag)

    def create_retry_topic_in_send(self, topic: str, queue_nums: int, perm: int
                                   ) -> TopicConfig | None:
        """A client's plain send to a ``%RETRY%`` topic the template could not make: as
        ``create_topic_in_send_message_back_method``, but None past ``autoCreateTopicMax``
        unless the broker holds the topic's group."""
        with self._lock:
            if self.table.get(topic) is None and not self._room_for(topic):
                return None
            return self._create_back(topic, queue_nums, perm, 0)

    def _create_back(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
                     ) -> TopicConfig:
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self._created(tc)
        return tc

    def create_topic_of_tran_check_max_time(self, queue_nums: int, perm: int) -> TopicConfig:
        """``TRANS_CHECK_MAX_TIME_TOPIC`` when the first half message is discarded."""
        return self.create_topic_in_send_message_back_method(C.TRANS_CHECK_MAX_TIME_TOPIC,
                                                             queue_nums, perm)
