"""BrokerTopicManager: RocketMQ's broker ``TopicConfigManager`` rules over the store's
``topics.json`` (``rocketstore.store.topics.TopicConfigManager``).

At start the system topics of MESSAGING.md 12.1 are registered in 4.9.8's order (those the
file already has keep the file's values, as ``load()`` overrides the constructor's table in
RocketMQ); topics are created on demand by a send (copying the ``TBW102`` template, 11.6), by
a send-back or a heartbeat (``%RETRY%``/``%DLQ%``, 1 queue, perm 6) and by the transaction check
(``TRANS_CHECK_MAX_TIME_TOPIC``). Every creation bumps the data version and persists
(auto-creations through the background writer: never an fsync on the event loop).
"""
from __future__ import annotations

import logging
import threading

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

    def create_topic_in_send_message_method(self, topic: str, default_topic: str,
                                            client_default_topic_queue_nums: int,
                                            topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from the template ``default_topic`` (MESSAGING.md 11.6): needs
        the template's INHERIT bit; queues = min(client's count, template's write queues),
        perm = template's without INHERIT, same filter type. None when it cannot."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
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
            self.table.update(tc, durable=False)
            log.info("created topic %s from %s: %s", topic, default_topic, tc)
            return tc

    def create_topic_in_send_message_back_method(self, topic: str, queue_nums: int, perm: int,
                                                 topic_sys_flag: int = 0) -> TopicConfig:
        """``%RETRY%``/``%DLQ%`` creation: the given queue count and perm, if absent."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
            self.table.update(tc, durable=False)
            return tc

    def create_topic_of_tran_check_max_time(self, queue_nums: int, perm: int) -> TopicConfig:
        """``TRANS_CHECK_MAX_TIME_TOPIC`` when the first half message is discarded."""
        return self.create_topic_in_send_message_back_method(C.TRANS_CHECK_MAX_TIME_TOPIC,
                                                             queue_nums, perm)
