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

Sends from the wire take a lane too (``LaneCore.send_wire``, ``Broker.wire_send_lane``): the
broker's handler, after the ACL and the name checks every request gets, hands the decoded
``WireSend`` to the lane of its (producer group, topic), which stores a plain one-message send
as ``SendMessageProcessor.send_wire_now``'s byte path does; anything else goes through
``send_wire_full`` (``Broker.send_wire_now``).

Batches take the same lane and state (``LaneCore._batch``, ``_wire_lane_batch.pxi``): a
producer's plain batch is written as ``put_wire_batch_async`` records straight from its
``Message``s; its first batch, and any batch not of that shape, goes through
``send_batch_full`` (``Broker.send_message``'s whole batch path).
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

from rocketstore.broker.send import illegal, put_response
from rocketstore.common import constants as C
from rocketstore.common.protocol import SendMessageRequest, SendMessageResponse
from rocketstore.common.sends import WireSend
from rocketstore.remoting._wire import LaneCore
from rocketstore.store.status import PutMessageStatus, SysFlag
from rocketstore.store.topics import MULTI_TAG, TopicConfig
from rocketstore.store.types import Message, PutMessageResult

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker


def _passed_checks(r: SendMessageResponse | Future) -> bool:
    """Whether a full path's answer shows the send passed every check: SUCCESS, or a
    pending Future (its put was made; a flush or a replica completes it). The wire path
    answers a refusal as a completed Future, so a completed one counts only with SUCCESS."""
    if isinstance(r, Future):
        return not r.done() or r.exception() is None and r.result().code == 0
    return type(r) is SendMessageResponse and r.code == 0


class SendLane(LaneCore):
    """``Broker.send_one`` for one (producer group, topic), made by ``Broker.send_lane``.

    ``send`` (``LaneCore``, in C) stores a plain send in one step while the topic config and
    the settings object are those its last full send passed with, and comes back to ``_full``
    otherwise. Thread-safe: its state is replaced whole while the GIL is held."""

    def __init__(self, broker: Broker, group: str, topic: str, default_topic: str,
                 default_topic_queue_nums: int) -> None:
        sp = broker.send_processor
        metrics = broker.metrics
        super().__init__(
            topic, broker.topic_manager.table, sp, broker,
            broker.store.commit_log.put_wire_async, broker.store.put_acks, sp._transform,
            put_response, illegal, broker.next_uniq_id, sp._born_host_of, PutMessageResult,
            PutMessageStatus.PUT_OK, sp._cluster_b, sp._born_host_of(None),
            None if metrics is None else metrics.put_counter(topic),
            None if metrics is None else metrics.on_send_one,
            broker.store.commit_log.put_wire_batch_async,
            None if metrics is None else metrics.on_send_sized)
        self.broker = broker
        self.group = group
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self._kept_tc: TopicConfig | None = None       # what ``_keep`` was last given

    def _full(self, msg: Message, queue_id: int, tc: TopicConfig | None
              ) -> SendMessageResponse | Future:
        """``Broker.send_one``'s whole path; when its checks passed, the lane takes the next
        send of this topic configuration itself."""
        cfg = self.broker.send_processor.cfg
        r = self.broker.send_one(self.group, self.topic, queue_id, msg, self.default_topic,
                                 self.default_topic_queue_nums)
        # a topic this send auto-created is taken from the next send on
        self._passed(_passed_checks(r), tc, cfg)
        return r

    def send_wire_full(self, w: WireSend) -> SendMessageResponse | Future:
        """A send from the wire the lane did not take (``send_wire`` answered None: its
        first, or one not of its shape) through ``Broker.send_wire_now``'s whole path
        (counted there). When its checks passed, the lane takes the next one itself."""
        tc = self.broker.topic_manager.table.peek(self.topic)
        cfg = self.broker.send_processor.cfg
        r = self.broker.send_wire_now(w)
        self._passed(_passed_checks(r), tc, cfg)
        return r

    def send_batch_full(self, msgs: list[Message], queue_id: int) -> Future:
        """A producer's stamped batch through ``Broker.send_message``'s whole path (a batch
        the lane did not take: its first, or one not of its shape): a Future of the response.
        When its checks passed, the lane takes the next batch (and send) itself."""
        tc = self.broker.topic_manager.table.peek(self.topic)
        cfg = self.broker.send_processor.cfg
        fut = self.broker.send_message(SendMessageRequest(
            self.group, self.topic, queue_id, msgs, batch=True,
            default_topic=self.default_topic,
            default_topic_queue_nums=self.default_topic_queue_nums))
        self._passed(_passed_checks(fut), tc, cfg)
        return fut

    def _passed(self, stored: bool, tc: TopicConfig | None, cfg: object) -> None:
        if stored and tc is not None and not self.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            metrics = self.broker.metrics
            if tc is not self._kept_tc and metrics is not None:
                # a new config may be a re-created topic, whose old counter left the metrics
                self._count_into(metrics.put_counter(self.topic))
            self._kept_tc = tc
            self._keep(tc, cfg, max(tc.write_queue_nums, tc.read_queue_nums),
                       int(SysFlag.MULTI_TAGS) if tc.topic_filter_type == MULTI_TAG else 0)
