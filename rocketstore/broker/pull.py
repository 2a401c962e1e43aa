"""PullMessageProcessor and PullRequestHoldService: pulls and long polling (MESSAGING.md 4.4).

A pull is checked in 4.9.8's order (broker readable, subscription group, topic, queue id,
subscription from the request or the consumer manager), read from the store with the
subscription's tag-hash filter and answered with RocketMQ's status mapping (docs/format.md §13):
SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED (which also stores an
``OFFSET_MOVED_EVENT``). A network pull with the commit flag commits the consumer's offset,
whatever the outcome.

A pull that finds nothing and may suspend is parked, not answered: ``PullRequestHoldService``
keeps parked pulls under ``topic@queueId`` and one thread re-examines them when the store
dispatches new messages (its arrival notifier) and periodically; a parked pull whose queue now
has a matching message, or whose time is up, is run again without suspension and its future
completed. No thread waits per parked pull.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rocketstore.broker.channels import complete
from rocketstore.broker.inner import MessageInner, PropertiesMap
from rocketstore.common import constants as C
from rocketstore.common.constants import PermName
from rocketstore.common.protocol import (MessageModel, PullMessageRequest, PullMessageResponse,
                                         ResponseCode, SubscriptionData)
from rocketstore.store._codec import java_hash
from rocketstore.store._commitlog import complete_future, pending_future
from rocketstore.store.status import GetMessageStatus

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.pull_lane import PullLane
    from rocketstore.remoting._wire import PullFound
    from rocketstore.broker.subscription_group import SubscriptionGroupConfig

log = logging.getLogger("rocketstore.broker.pull")

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MAX_STORE_FILTER_TAGS = 8       # the store's tag filter; larger sets are filtered here
MAX_PULL_LANES = 4096           # (group, topic) pull lanes the processor keeps

_STATUS = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


# the statuses whose next offset 4.9.8 corrects (DefaultMessageStore.nextOffsetCorrection):
# on a SLAVE without offsetCheckInSlave the requested offset is kept
_CORRECTED = frozenset({GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                        GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                        GetMessageStatus.OFFSET_FOUND_NULL})

#: a plain int: IntFlag's ``&`` builds an enum member per call, on every pull
_PERM_READ = int(PermName.PERM_READ)


def build_subscription_data(topic: str, sub_string: str | None,
                            sub_version: int = 0) -> SubscriptionData:
    """``FilterAPI.buildSubscriptionData``: "*" (or empty) for every message, else the tags
    split on ``||`` and trimmed, with their Java hash codes."""
    if sub_string is None or not sub_string.strip() or sub_string.strip() == "*":
        return SubscriptionData(topic, "*", sub_version=sub_version)
    tags = [t.strip() for t in sub_string.split("||") if t.strip()]
    return SubscriptionData(topic, sub_string, frozenset(tags),
                            frozenset(java_hash(t) for t in tags), sub_version)


def _refused(code: ResponseCode, remark: str
             ) -> tuple[PullMessageResponse, None, None]:
    return PullMessageResponse(code, remark=remark), None, None


def _not_tag(expression_type: str) -> tuple[PullMessageResponse, None, None]:
    """4.9.8's answer to a subscription other than TAG (``enablePropertyFilter=false``:
    property filtering is not served), whether the pull carried it or the group registered
    it."""
    return _refused(ResponseCode.SYSTEM_ERROR, remark=(
        f"The broker does not support consumer to filter message by {expression_type}"))


def _filter_of(sub: SubscriptionData):
    """What to hand the store's get: None (everything), the tags, or ``(None, codes)`` when
    there are more tags than the store filters (the codes are then checked here)."""
    if sub.sub_string == "*" or not sub.code_set:
        return None, None
    if len(sub.tags_set) <= MAX_STORE_FILTER_TAGS:
        return sorted(sub.tags_set), None
    return None, sub.code_set


class _Parked:
    __slots__ = ("request", "future", "deadline", "sub", "key")

    def __init__(self, request: PullMessageRequest, future: Future, deadline: float,
                 sub: SubscriptionData, key: str) -> None:
        self.request = request
        self.future = future
        self.deadline = deadline
        self.sub = sub
        self.key = key


class PullRequestHoldService:
    """Parked pulls by ``topic@queueId``, woken by arrivals and a periodic check."""

    def __init__(self, processor: PullMessageProcessor) -> None:
        self.processor = processor
        self.broker = processor.broker
        cfg = self.broker.config
        self.check_interval = (cfg.long_polling_check_interval if cfg.long_polling_enable
                               else cfg.short_polling_time_mills) / 1000.0
        self._lock = threading.Lock()
        self._table: dict[str, list[_Parked]] = {}
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.notifier = self.broker.store.notifier
        self.notifier.add_listener(self._wake.set)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="PullRequestHoldService",
                                        daemon=True)
        self._thread.start()

    def suspend(self, parked: _Parked) -> None:
        with self._lock:
            self._table.setdefault(parked.key, []).append(parked)
            self.notifier.listeners_armed = True
        # a waiter that goes away (its connection closed) cancels: dropped then, not at the
        # deadline the request chose
        parked.future.add_done_callback(lambda f: self._drop(parked) if f.cancelled() else None)
        # a message may have arrived between the read and the parking: look once now
        self._wake.set()

    def _drop(self, parked: _Parked) -> None:
        with self._lock:
            waiting = self._table.get(parked.key)
            if waiting is None:
                return          # being checked: notify_message_arriving skips it
            try:
                waiting.remove(parked)
            except ValueError:
                return
            if not waiting:
                del self._table[parked.key]
            self.notifier.listeners_armed = bool(self._table)

    def parked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._table.values())

    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                deadlines = [p.deadline for v in self._table.values() for p in v]
            timeout = self.check_interval
            if deadlines:
                timeout = max(0.0, min(timeout, min(deadlines) - time.monotonic()))
            self._wake.wait(timeout)
            self._wake.clear()
            if self._stopped:
                break
            try:
                self.check_all()
            except Exception:  # noqa: BLE001 - keep serving the other pulls
                log.exception("long-polling check failed")

    def check_all(self) -> None:
        """``checkHoldRequest``: every key with its queue's current max offset."""
        with self._lock:
            keys = list(self._table)
        for key in keys:
            topic, _, qid = key.rpartition("@")
            self.notify_message_arriving(topic, int(qid))

    def notify_message_arriving(self, topic: str, queue_id: int) -> None:
        key = f"{topic}@{queue_id}"
        store = self.broker.store
        with self._lock:
            parked = self._table.pop(key, None)
        if not parked:
            return
        max_offset = store.get_max_offset_in_queue(topic, queue_id)
        now = time.monotonic()
        keep, ready = [], []
        for p in parked:
            if p.future.done():
                continue        # cancelled by its waiter
            offset = p.request.queue_offset
            if max_offset > offset and self._matches(p, topic, queue_id, offset, max_offset):
                ready.append(p)
            elif now >= p.deadline:
                ready.append(p)
            else:
                keep.append(p)
        if keep:
            with self._lock:
                self._table.setdefault(key, [])[:0] = keep
        with self._lock:
            self.notifier.listeners_armed = bool(self._table)
        for p in ready:
            self._answer(p)

    def _matches(self, p: _Parked, topic: str, queue_id: int, start: int, end: int) -> bool:
        tags, codes = _filter_of(p.sub)
        if tags is None and codes is None:
            return True
        if codes is not None:
            return True         # too many tags for the store's scan: let the pull decide
        return self.broker.store.count_matches(topic, queue_id, tags, start, end) > 0

    def _answer(self, p: _Parked) -> None:
        if p.future.done():         # cancelled by its waiter: nothing to answer
            return
        # the pull's lane answers what it finds (no commit: the parked attempt made it; not
        # counted: the waiter's future is, when it completes)
        found = self.processor.by_lane(p.request, commit=False, count=False)
        if found is not None:
            complete(p.future, PullMessageResponse(
                ResponseCode.SUCCESS, found.next_begin_offset, found.min_offset,
                found.max_offset, found.messages))
            return
        try:
            resp = self.processor.process(p.request, allow_suspend=False)
        except Exception as e:  # noqa: BLE001 - the waiter gets it
            complete(p.future, error=e)
            return
        complete(p.future, resp)

    def shutdown(self) -> None:
        """Stop the thread and answer every parked pull now (the store is still open)."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.notifier.remove_listener(self._wake.set)
        with self._lock:
            parked = [p for v in self._table.values() for p in v]
            self._table.clear()
            self.notifier.listeners_armed = False
        for p in parked:
            self._answer(p)


class PullMessageProcessor:
    """``PULL_MESSAGE``: ``pull(request) -> Future[PullMessageResponse]``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.hold = PullRequestHoldService(self)
        self._lanes: dict[tuple[str, str], PullLane | None] = {}

    def lane(self, group: str, topic: str) -> PullLane | None:
        """The broker's pull lane of (group, topic), kept for the next pulls (at most
        ``MAX_PULL_LANES`` pairs: requests naming ever new pairs only refill the table)."""
        key = (group, topic)
        try:
            return self._lanes[key]
        except KeyError:
            pass
        if len(self._lanes) >= MAX_PULL_LANES:
            self._lanes.clear()
        lane = self._lanes[key] = self.broker.pull_lane(group, topic)
        return lane

    def by_lane(self, req: PullMessageRequest, *, commit: bool = True, count: bool = True,
                client: bool = False) -> PullFound | None:
        """``req`` answered by its lane when it finds messages (a TAG pull, carrying no
        subscription or the registered one), else None: ``process`` answers it. A lane that
        raises is the full path's to answer (with its own error)."""
        if req.expression_type != "TAG":
            return None
        try:
            lane = self.lane(req.consumer_group, req.topic)
            if lane is None:
                return None
            return lane.pull(req.queue_id, req.queue_offset, req.max_msg_nums,
                             req.sys_flag if commit else req.sys_flag & ~FLAG_COMMIT_OFFSET,
                             req.commit_offset, req.sub_version, client, count,
                             req.subscription if req.sys_flag & FLAG_SUBSCRIPTION else None)
        except Exception:   # noqa: BLE001 - a closed broker, a lane that broke: process says
            return None

    def pull(self, request: PullMessageRequest) -> Future:
        # the store's lazy future: a pull answered at once (the usual case) never builds
        # the Condition a waiter, callback or a parked pull's completion needs
        fut: Future = pending_future()
        resp = self.process(request, allow_suspend=True, future=fut)
        if resp is not None:
            complete_future(fut, resp)
        return fut

    def check(self, req: PullMessageRequest
              ) -> tuple[PullMessageResponse | None, SubscriptionGroupConfig | None,
                         SubscriptionData | None]:
        """4.9.8's checks of a pull, in its order: ``(refusal, None, None)``, or ``(None,
        the group's config, the subscription the read filters by)``."""
        b = self.broker
        cfg = b.config
        if not _PERM_READ & cfg.broker_permission:
            return _refused(ResponseCode.NO_PERMISSION, remark=(
                f"the broker[{cfg.broker_ip1}] pulling message is forbidden"))
        sgc = b.subscription_groups.find(req.consumer_group)
        if sgc is None:
            return _refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=(
                f"subscription group [{req.consumer_group}] does not exist"))
        if not sgc.consume_enable:
            return _refused(ResponseCode.NO_PERMISSION, remark=(
                f"subscription group no permission, {req.consumer_group}"))
        tc = b.topic_manager.select(req.topic)
        if tc is None:
            return _refused(ResponseCode.TOPIC_NOT_EXIST, remark=(
                f"topic[{req.topic}] not exist, apply first please!"))
        if not tc.perm & _PERM_READ:
            return _refused(ResponseCode.NO_PERMISSION, remark=(
                f"the topic[{req.topic}] pulling message is forbidden"))
        if req.queue_id < 0 or req.queue_id >= tc.read_queue_nums:
            return _refused(ResponseCode.SYSTEM_ERROR, remark=(
                f"queueId[{req.queue_id}] is illegal, topic:[{req.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{req.consumer_group}]"))
        if req.sys_flag & FLAG_SUBSCRIPTION:
            # counted before the split: each tag is split, hashed (on the event loop) and
            # held with a held pull; a 256 KiB header holds ~30,000 (stricter than 4.9.8)
            expression = req.subscription
            if expression and expression.count("||") >= cfg.heartbeat_max_entries:
                return _refused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=(
                    f"the pull's subscription has {expression.count('||') + 1} tags "
                    f"(heartbeatMaxEntries={cfg.heartbeat_max_entries})"))
            if req.expression_type != "TAG":
                return _not_tag(req.expression_type)
            sub = build_subscription_data(req.topic, expression, req.sub_version)
        else:
            info = b.consumer_manager.get_consumer_group_info(req.consumer_group)
            if info is None:
                return _refused(ResponseCode.SUBSCRIPTION_NOT_EXIST, remark=(
                    f"the consumer's group info not exist, group: {req.consumer_group}"))
            if (not sgc.consume_broadcast_enable
                    and info.message_model is MessageModel.BROADCASTING):
                return _refused(ResponseCode.NO_PERMISSION, remark=(
                    f"the consumer group[{req.consumer_group}] can not consume by broadcast way"))
            found = info.find_subscription_data(req.topic)
            if found is None:
                return _refused(ResponseCode.SUBSCRIPTION_NOT_EXIST, remark=(
                    f"the consumer's subscription not exist, group: {req.consumer_group}"))
            if found.sub_version < req.sub_version:
                return _refused(ResponseCode.SUBSCRIPTION_NOT_LATEST, remark=(
                    "the consumer's subscription not latest"))
            if found.expression_type != "TAG":
                # the registration's type decides, not the pull header's (which defaults to
                # TAG): a SQL92 registration was served every message unfiltered
                return _not_tag(found.expression_type)
            sub = found
        return None, sgc, sub

    def process(self, req: PullMessageRequest, allow_suspend: bool,
                future: Future | None = None) -> PullMessageResponse | None:
        """One pull; None when it was parked (``future`` completes later)."""
        refused, sgc, sub = self.check(req)
        if refused is not None:
            return refused
        assert sgc is not None and sub is not None      # check's contract
        b = self.broker
        cfg = b.config
        suspend = bool(req.sys_flag & FLAG_SUSPEND)
        commit = bool(req.sys_flag & FLAG_COMMIT_OFFSET)
        resp, suggest_slave = self._read(req, sub)
        slave = b.is_slave
        # suggestWhichBrokerId (docs/replication.md): only a broker with slaveReadEnable steers a
        # client to a slave, when the consumer lags beyond the in-memory share of RAM (or the
        # group says so with brokerId); every other answer points back to the master
        if cfg.slave_read_enable:
            resp.suggest_which_broker_id = (sgc.which_broker_when_consume_slowly
                                            if suggest_slave else sgc.broker_id)
        parked = False
        if resp.code == ResponseCode.PULL_NOT_FOUND and allow_suspend and suspend:
            timeout_ms = (req.suspend_timeout_millis if cfg.long_polling_enable
                          else cfg.short_polling_time_mills)
            assert future is not None
            self.hold.suspend(_Parked(req, future, time.monotonic() + timeout_ms / 1000.0, sub,
                                      f"{req.topic}@{req.queue_id}"))
            parked = True
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
            resp.suggest_which_broker_id = sgc.broker_id
            if slave and not cfg.offset_check_in_slave:
                # a slave may only lag: it never moves a consumer, it asks it to come again
                resp.code = ResponseCode.PULL_RETRY_IMMEDIATELY
            else:
                self._offset_moved_event(req, resp.next_begin_offset)
        # a slave ignores the commit flag (its offsets come from the master's sync)
        if allow_suspend and commit and not slave:
            b.store.commit_offset(req.consumer_group, req.topic, req.queue_id, req.commit_offset)
        return None if parked else resp

    def _read(self, req: PullMessageRequest, sub: SubscriptionData
              ) -> tuple[PullMessageResponse, bool]:
        """The store's answer as a pull response, and whether the store suggests the slave."""
        tags, codes = _filter_of(sub)
        store = self.broker.store
        r = store.get_message(req.consumer_group, req.topic, req.queue_id, req.queue_offset,
                              max(1, req.max_msg_nums), tags=tags)
        status = r.status
        messages = r.messages
        if codes is not None and status is GetMessageStatus.FOUND:
            messages = [m for m in messages if m.tags is not None and java_hash(m.tags) in codes]
            if not messages:
                status = GetMessageStatus.NO_MATCHED_MESSAGE
        if status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            code = (ResponseCode.PULL_OFFSET_MOVED if req.queue_offset != 0
                    else ResponseCode.PULL_NOT_FOUND)
        else:
            code = _STATUS.get(status, ResponseCode.SYSTEM_ERROR)
        next_begin = r.next_begin_offset
        if status in _CORRECTED and self.broker.is_slave \
                and not self.broker.config.offset_check_in_slave:
            next_begin = req.queue_offset        # nextOffsetCorrection: a slave keeps it
        return PullMessageResponse(code, next_begin, r.min_offset, r.max_offset,
                                   messages if code == ResponseCode.SUCCESS else [],
                                   remark=None if code != ResponseCode.SYSTEM_ERROR
                                   else status.value), r.suggest_pulling_from_slave

    def _offset_moved_event(self, req: PullMessageRequest, offset_new: int) -> None:
        """``generateOffsetMovedEvent``: TAGS/KEYS = group, DELAY=0, body = the event JSON."""
        b = self.broker
        body = json.dumps({"consumerGroup": req.consumer_group,
                           "messageQueue": {"brokerName": b.config.broker_name,
                                            "queueId": req.queue_id, "topic": req.topic},
                           "offsetNew": offset_new, "offsetRequest": req.queue_offset},
                          separators=(",", ":")).encode()
        props = PropertiesMap()
        props.put(C.PROPERTY_TAGS, req.consumer_group)
        props.put(C.PROPERTY_DELAY_TIME_LEVEL, "0")
        props.put(C.PROPERTY_KEYS, req.consumer_group)
        inner = MessageInner(C.OFFSET_MOVED_EVENT, 0, body, props, born_timestamp=b.now_ms(),
                             born_host=b.store_host)
        inner.freeze()
        b.put_inner(inner)
