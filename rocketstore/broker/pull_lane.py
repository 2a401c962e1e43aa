"""PullLane: one consumer group's in-process pulls of one topic, with the checks that depend
only on the pair made once.

``PullMessageProcessor.process`` runs 4.9.8's whole pull order on every pull: broker readable,
the group's config (or its auto-creation), the topic's config and queue range, the group's
registration, message model and subscription, then the read and the response. For a push
consumer pulling queue after queue of one topic, everything but the queue range and the read
depends on objects that are replaced whole when they change (the settings, the group's and the
topic's frozen configs, the group's registration and its frozen subscription) plus the
registration's message model. So a lane remembers the objects its last full check passed with
and, while the managers still hold those very objects, answers a pull that finds messages with
one store read (``PullLaneCore.pull``, in C): no request, response or future, the commit flag's
offset committed, the pull counted. Every other pull -- nothing found (parked, offset moved), a
changed object, a slave, a subscription carried by the pull, more tags than the store filters
-- gets None and goes the full way, so the rules and the refusals stay in one place.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rocketstore.broker.pull import _filter_of
from rocketstore.common.protocol import PullMessageRequest
from rocketstore.remoting._wire import PullLaneCore
from rocketstore.store import _reader
from rocketstore.store.status import GetMessageStatus

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker


class PullLane(PullLaneCore):
    """``PullMessageProcessor.process`` for one (consumer group, topic) of a push consumer in
    process, made by ``Broker.pull_lane``.

    ``pull(queue_id, offset, max_nums, sys_flag, commit_offset, sub_version)`` (``PullLaneCore``,
    in C) answers a ``PullFound`` or None (send the request). Thread-safe: its state is
    replaced whole while the GIL is held."""

    def __init__(self, broker: Broker, group: str, topic: str) -> None:
        store = broker.store
        offsets = store.consumer_offset_manager
        metrics = broker.metrics
        super().__init__(
            group, topic, broker, broker.subscription_groups, broker.topic_manager.table,
            broker.consumer_manager, store, store.consume_queues._queues,
            store.commit_log_queue, _reader.get_message, offsets.commit_checked,
            offsets.table_key(group, topic),
            None if metrics is None else metrics.pull_counter(group, topic),
            GetMessageStatus.FOUND)
        self.broker = broker

    def _warm(self) -> bool:
        """The full checks of a pull of this pair; True (and the objects kept) when they
        passed with objects that were still the managers' after them."""
        b = self.broker
        cfg = b.config
        if b.is_slave or cfg.slave_read_enable or b.store.read_only:
            return False        # a slave's offsets and a suggested broker are the full path's
        tc = b.topic_manager.table._table.get(self.topic)
        info = b.consumer_manager._table.get(self.group)
        if tc is None or info is None:
            return False
        model = info.message_model
        sub0 = info.subscription_table.get(self.topic)
        refused, sgc, sub = b.pull_processor.check(
            PullMessageRequest(self.group, self.topic, 0, 0, 1, 0, 0, 0, None, 0))
        if (refused is not None or sub is None or sub is not sub0 or b.config is not cfg
                or b.subscription_groups._table.get(self.group) is not sgc
                or b.topic_manager.table._table.get(self.topic) is not tc
                or b.consumer_manager._table.get(self.group) is not info
                or info.message_model is not model):
            return False
        tags, codes = _filter_of(sub)
        if codes is not None:
            return False        # more tags than the store filters: checked in Python
        metrics = b.metrics
        self._keep(cfg, sgc, tc, info, model, sub,
                   None if tags is None else b.store._tag_filter(tags),
                   tc.read_queue_nums, sub.sub_version,
                   None if metrics is None else metrics.pull_counter(self.group, self.topic))
        return True
