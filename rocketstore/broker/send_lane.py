"""SendLane: one producer group's in-process sends to one topic, with the checks that depend
only on the pair made once.

``SendMessageProcessor.send_one`` runs 4.9.8's whole send order on every message: the
accept-time guard, the name rules, the topic lookup (or its auto-creation), the queue range,
then the byte path or the map path. For a producer sending message after message to the same
topic, all of that but the queue range and the put depends only on the topic's configuration
and the broker's settings, and both are immutable objects (the accept-time guard only ever
opens: once a send passed it, later ones do). So a lane remembers the two objects its last
full send passed with and, while the topic manager and the send processor still hold those
very objects, stores a plain send in one step. Anything else -- a changed or deleted topic, new
settings, a queue out of range, a message the byte path does not take (DELAY, a transaction, a
broker-only property, non-ASCII properties) -- goes through ``send_one``, so the rules and the
refusals stay in one place.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

from rocketstore.common import constants as C
from rocketstore.common.protocol import SendMessageResponse
from rocketstore.store.status import SysFlag
from rocketstore.store.topics import MULTI_TAG, TopicConfig
from rocketstore.store.types import Message

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker


class SendLane:
    """``Broker.send_one`` for one (producer group, topic), made by ``Broker.send_lane``.

    Thread-safe: its state is one reference, replaced whole."""

    __slots__ = ("broker", "group", "topic", "default_topic", "default_topic_queue_nums",
                 "_table", "_state")

    def __init__(self, broker: Broker, group: str, topic: str, default_topic: str,
                 default_topic_queue_nums: int) -> None:
        self.broker = broker
        self.group = group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self._table = broker.topic_manager.table.peek
        # what the last full send passed with: (topic config, broker config, queue bound,
        # sys flag bits); a runtime settings change replaces the broker config object
        self._state: tuple[TopicConfig, object, int, int] | None = None

    def send(self, msg: Message, queue_id: int) -> SendMessageResponse | Future:
        """Send ``msg`` (already stamped by the producer) to ``queue_id``: the response, or
        its Future when a flush or replica wait completes it (as ``Broker.send_one``)."""
        b = self.broker
        sp = b.send_processor
        state = self._state
        tc = self._table(self.topic)
        if (state is None or tc is not state[0] or sp.cfg is not state[1]
                or not 0 <= queue_id < state[2]
                or type(msg) is not Message or msg.prepared_transaction_offset):
            return self._full(msg, queue_id, tc)
        b._check_open()
        r = sp.put_plain_message(self.topic, queue_id, msg, state[3])
        if r is None:                           # not the byte path's shape
            return self._full(msg, queue_id, tc)
        if b.metrics is not None:
            b.metrics.on_send_one(self.topic, msg, r)
        return r

    def _full(self, msg: Message, queue_id: int, tc: TopicConfig | None
              ) -> SendMessageResponse | Future:
        """``Broker.send_one``'s whole path; its checks passed, the lane takes the next send
        of this topic configuration itself."""
        cfg = self.broker.send_processor.cfg
        r = self.broker.send_one(self.group, self.topic, queue_id, msg, self.default_topic,
                                 self.default_topic_queue_nums)
        # a send that stored (SUCCESS now, or a Future: its put was made) passed every
        # check with ``tc``; a topic this send auto-created is taken from the next send on
        stored = isinstance(r, Future) or type(r) is SendMessageResponse and r.code == 0
        if stored and tc is not None and not self.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            self._state = (tc, cfg, max(tc.write_queue_nums, tc.read_queue_nums),
                           int(SysFlag.MULTI_TAGS) if tc.topic_filter_type == MULTI_TAG else 0)
        return r

