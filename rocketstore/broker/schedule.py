"""ScheduleMessageService: delivers delayed messages when their delay level's time is up
(RocketMQ 4.9.8 ``ScheduleMessageService``, MESSAGING.md §9).

The broker's send path stores a message with ``DELAY=<level>`` in ``SCHEDULE_TOPIC_XXXX``, queue
``level - 1``, with ``REAL_TOPIC``/``REAL_QID`` naming its destination; the store's dispatcher
writes the delivery time (store time + the level's delay) as the unit's tags code. This service
walks each level's consume queue from its offset: a unit whose time has come is read, rebuilt for
``REAL_TOPIC``/``REAL_QID`` and put; the first unit not yet due ends that level's walk (a level is
FIFO in store time and all its messages share one delay, so the rest are later).

Rebuilt records keep the scheduled record's properties string as 4.9.8's ``messageTimeup`` stores
it (§0.4): ``DELAY``, ``REAL_TOPIC``, ``REAL_QID`` and the scheduled ``WAIT`` value stay; body
(as stored), flag, sysflag, born timestamp/host and reconsume times are copied. A record whose
real topic is the transaction half topic is discarded, as in 4.9.8.

Offsets: ``config/delayOffset.json``, ``{"offsetTable":{<level>:<next queue offset>}}`` with
unquoted integer keys (docs/format.md §10), only levels that delivered (or were loaded); persisted
atomically every ``flush_delay_offset_interval`` ms when changed and at ``close()``, under
SYNC_FLUSH only once the delivered copies are durable (docs/durability.md); loaded at
``start()`` and clamped into each queue's [min, max] (4.9.2's fix for issue #1869).

One thread serves all levels. It sleeps on the store's arrival notifier until the earliest due
time, until the dispatcher brings a new unit to a level queue, or until ``close()``; a put that
failed for a passing reason (disk full, page cache busy) is retried after 100 ms at the same
unit, as RocketMQ does. A record that can never be delivered (no or an invalid REAL_TOPIC, a
system topic, a put refused as illegal or without permission) does not stall its level, unlike
4.9.8: it is counted (``undeliverable``), logged at WARN and moved to its group's ``%DLQ%``
topic when it was a retry, else left where it is with the WARN line as its dead letter.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.broker.records import copy_record
from rocketstore.common.constants import (NOT_ALLOWED_SEND_TOPICS, PROPERTY_REAL_QUEUE_ID,
                                          PROPERTY_REAL_TOPIC, RETRY_GROUP_TOPIC_PREFIX,
                                          SCHEDULE_TOPIC, TRANS_HALF_TOPIC, PermName, dlq_topic)
from rocketstore.common.names import group_problem, topic_problem
from rocketstore.errors import InvalidMessageError, RocketStoreError
from rocketstore.store.status import PutMessageStatus
from rocketstore.store import paths
from rocketstore.store.configfile import ConfigFile

if TYPE_CHECKING:
    from rocketstore.store.message_store import MessageStore
    from rocketstore.store.types import Message, MessageExt, PutMessageResult

__all__ = ["ScheduleMessageService", "DELAY_OFFSET_FILE"]

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE = "delayOffset.json"
RETRY_PUT_MS = 100            # 4.9.8's DELAY_FOR_A_WHILE after a failed put
RETRY_ERROR_MS = 10_000       # 4.9.8's DELAY_FOR_A_PERIOD after an exception

DLQ_QUEUE_NUMS = 1            # as the send-back's DLQ_NUMS_PER_GROUP
_RW = int(PermName.PERM_READ | PermName.PERM_WRITE)
# put statuses that will not change by retrying the same record: it is moved past
_REFUSED = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                      PutMessageStatus.NO_PERMISSION,
                      PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED})

PutFn = Callable[["Message", int], "PutMessageResult"]


def _decode_offsets(doc: Any) -> dict[int, int]:
    if not isinstance(doc, dict):
        raise ValueError(f"top level is a {type(doc).__name__}, not an object")
    raw = doc.get("offsetTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("offsetTable is not an object")
    out: dict[int, int] = {}
    for level, offset in raw.items():
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"offsetTable[{level}]: {offset!r} is not an integer")
        out[int(level)] = offset
    return out


class ScheduleMessageService:
    """Delivers the delayed messages of one store (one thread for every level).

    Parameters
    ----------
    owner
        The ``Broker`` (its ``store``), or an open, writable ``MessageStore``; the store's
        ``message_delay_level`` gives the levels (the table its dispatcher uses for the
        delivery times).
    put
        Stores a rebuilt record on ``(message, queue_id)`` with no broker rewrite; default
        ``store.put_message``.
    flush_interval_ms
        How often changed offsets are persisted (default the store's
        ``flush_delay_offset_interval``, 10 s).

    Use ``start()`` and ``close()``, or ``with``. ``close()`` must come before the store's.
    """

    def __init__(self, owner: Any, put: PutFn | None = None, *,
                 flush_interval_ms: int | None = None) -> None:
        store: MessageStore = getattr(owner, "store", owner)
        self.store = store
        self._topics = getattr(owner, "topic_manager", None)   # a Broker's: creates %DLQ%
        self._put: PutFn = put if put is not None else store.put_message
        self.delays_ms = store.config.delay_levels_ms()[1:]   # index 0 = level 1
        self.max_level = len(self.delays_ms)
        self.flush_interval_ms = (store.config.flush_delay_offset_interval
                                  if flush_interval_ms is None else flush_interval_ms)
        self.path = os.path.join(paths.config_dir(store.root), DELAY_OFFSET_FILE)
        self._file = ConfigFile(self.path)
        self._lock = threading.Lock()            # guards _offsets and the change counts
        self._offsets: dict[int, int] = {}       # level -> next queue offset to deliver
        self._changes = 0
        self._persisted = 0
        self._queues: list[Any] = [None] * self.max_level   # consume queue per level, once seen
        self._seen = [0] * self.max_level        # max offset of each level at the last walk
        self._stopping = False
        self._woken = False                      # wake() asked for a walk
        self._thread: threading.Thread | None = None
        self.delivered = 0                       # records put to their real topic (all levels)
        self.undeliverable = 0                   # records moved past (to a DLQ or the log)
        self.rounds = 0                          # walks over the levels (wake-ups of the thread)
        self._next_persist = float("inf")        # monotonic time of the next periodic persist

    # -- offsets -------------------------------------------------------------------------------

    def load(self) -> None:
        """Read ``delayOffset.json`` (or its ``.bak``) and clamp each offset into its queue.

        Neither readable: the broker starts anyway, each level's progress rebuilt from the
        commit log (``_rebuild_offsets``: after the last unit whose delivered copy is there,
        so no undelivered message is skipped; at worst some are delivered twice), and the
        reset reported (ERROR log, ``configfile.resets``)."""
        loaded = self._file.load_or_reset(
            _decode_offsets, "delay progress rebuilt from the delivered copies in the commit "
                             "log (messages after the last one found are delivered again)")
        rebuilt = loaded is None and self._file.damaged_text is not None
        if rebuilt:
            loaded = self._rebuild_offsets()
        loaded = loaded or {}
        with self._lock:
            self._offsets = {}
            self._persisted = self._changes     # as loaded; a clamped offset makes it dirty
            for level, offset in loaded.items():
                if not 1 <= level <= self.max_level:
                    log.warning("%s: level %d is not one of the %d levels; ignored",
                                self.path, level, self.max_level)
                    continue
                lo = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, level - 1)
                hi = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
                fixed = min(max(offset, lo), hi)
                if fixed != offset:
                    log.warning("%s: level %d offset %d outside [%d, %d]; using %d",
                                self.path, level, offset, lo, hi, fixed)
                    self._changes += 1
                self._offsets[level] = fixed
            if rebuilt:
                self._changes += 1          # persist the rebuilt table soon

    def _rebuild_offsets(self) -> dict[int, int]:
        """Each level's next offset from what was delivered: a delivered record is copied to
        its real topic with the schedule record's properties (UNIQ_KEY, DELAY), after it in
        the commit log. A level's progress is one past its last unit whose copy is found
        (levels deliver in queue order); none found: its queue's min (deliver all again)."""
        store = self.store
        units: dict[int, list[tuple[int, int]]] = {}       # level -> [(queue offset, phy)]
        start = -1
        for level in range(1, self.max_level + 1):
            lo = store.get_min_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            hi = store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            cq = store.consume_queues.find(SCHEDULE_TOPIC, level - 1)
            if cq is None or hi <= lo:
                continue
            units[level] = [(i, u[0]) for i in range(lo, hi)
                            if (u := cq.get_unit(i)) is not None]
            if units[level]:
                first = units[level][0][1]
                start = first if start < 0 else min(start, first)
        if start < 0:
            return {}
        delivered: set[str] = set()
        for m in store.iter_messages(start):
            if m.topic != SCHEDULE_TOPIC and "DELAY" in m.properties and m.uniq_key:
                delivered.add(m.uniq_key)
        out: dict[int, int] = {}
        for level, lst in units.items():
            out[level] = lst[0][0]
            for index, phy in reversed(lst):
                m = store.look_message_by_offset(phy)
                if m is not None and m.uniq_key in delivered:
                    out[level] = index + 1
                    break
        log.error("%s: delay progress rebuilt from the commit log: %s", self.path,
                  {lv: off for lv, off in sorted(out.items())})
        return out

    def offsets(self) -> dict[int, int]:
        """Next queue offset to deliver per level (levels that delivered or were loaded)."""
        with self._lock:
            return dict(self._offsets)

    def persist(self) -> None:
        """Write ``delayOffset.json`` now (atomic: tmp, fsync, ``.bak``, rename).

        Under SYNC_FLUSH the copies delivered up to the snapshot are made durable first
        (``MessageStore.wait_durable``; they were put with ``WAIT=false``): an offset on disk
        never points past a delivery a power cut can lose. ``NotDurableError`` when they do
        not become durable in time (nothing is written; the next persist retries)."""
        with self._lock:
            snapshot = dict(self._offsets)
            count = self._changes
        wait_durable = getattr(self.store, "wait_durable", None)
        if wait_durable is not None:
            wait_durable(DELAY_OFFSET_FILE)
        self._file.persist({"offsetTable": snapshot})
        with self._lock:
            self._persisted = count

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the offsets and start delivering."""
        if self._thread is not None:
            raise RuntimeError("ScheduleMessageService already started")
        self.load()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ScheduleMessageService",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Walk the levels now instead of at the next due time or arrival."""
        self._woken = True
        self.store.notifier.notify()

    def close(self) -> None:
        """Stop the thread (it finishes the put in progress) and persist the offsets."""
        thread = self._thread
        self._stopping = True
        self.store.notifier.notify()
        if thread is not None:
            thread.join()
            self._thread = None
        with self._lock:
            dirty = self._changes != self._persisted
        if dirty:
            self.persist()

    shutdown = close        # the Broker's name for stopping a service

    def __enter__(self) -> ScheduleMessageService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- delivery ------------------------------------------------------------------------------

    def _run(self) -> None:
        self._next_persist = time.monotonic() + self.flush_interval_ms / 1000
        while not self._stopping and not self.store.closed:
            self.rounds += 1
            self._woken = False
            try:
                wait_ms = self.deliver_due()
            except Exception:   # noqa: BLE001 - the service outlives one bad round, as 4.9.8's
                log.exception("schedule: delivery round failed; retrying in %d ms",
                              RETRY_ERROR_MS)
                wait_ms = RETRY_ERROR_MS
            self._maybe_persist()
            timeout = self._next_persist - time.monotonic()
            if wait_ms is not None:
                timeout = min(timeout, wait_ms / 1000)
            if timeout > 0:
                self.store.notifier.wait(self._ready, timeout)

    def _maybe_persist(self) -> None:
        """Persist changed offsets when the interval is up (also in the middle of a long
        burst of deliveries: a crash then repeats at most one interval's worth)."""
        now = time.monotonic()
        if now < self._next_persist:
            return
        self._next_persist = now + self.flush_interval_ms / 1000
        with self._lock:
            dirty = self._changes != self._persisted
        if dirty:
            try:
                self.persist()
            except (OSError, RocketStoreError):
                log.exception("%s: periodic persist failed", self.path)

    def _ready(self) -> bool:
        """Wake-up test run by the notifier on each dispatch: stop, or a level queue grew."""
        if self._stopping or self._woken:
            return True
        # run by the dispatch thread at every arrival (ArrivalNotifier.wait): only the level
        # queues that exist are looked at, not 18 lookups per dispatch round
        seen = self._seen
        try:
            for i, cq in self.store.consume_queues.queues_of(SCHEDULE_TOPIC).items():
                if 0 <= i < self.max_level and cq.get_max_offset_in_queue() > seen[i]:
                    return True
        except RuntimeError:        # a level queue was created meanwhile: look again now
            return True
        return False

    def deliver_due(self) -> int | None:
        """Deliver every unit that is due now, on every level.

        Returns the ms until the earliest unit not yet due (or until a failed put is retried),
        or None when every level is delivered to its end.
        """
        wait: int | None = None
        for level in range(1, self.max_level + 1):
            if self._stopping:
                break
            w = self._deliver_level(level)
            if w is not None and (wait is None or w < wait):
                wait = w
        return wait

    def _deliver_level(self, level: int) -> int | None:
        i = level - 1
        cq = self._queues[i]
        if cq is None:
            cq = self.store.consume_queues.find(SCHEDULE_TOPIC, i)
            if cq is None:
                return None
            self._queues[i] = cq
        delay = self.delays_ms[i]
        with self._lock:
            offset = self._offsets.get(level, 0)
        lo = cq.get_min_offset_in_queue()
        if offset < lo:               # retention removed undelivered units: go on from the first
            offset = lo
        hi = cq.get_max_offset_in_queue()
        self._seen[i] = hi
        try:
            while offset < hi and not self._stopping:
                unit = cq.get_unit(offset)
                if unit is None:
                    break
                phy, size, deliver_at = unit
                now = int(time.time() * 1000)
                if deliver_at > now + delay:      # the clock went back: deliver now (4.9.8)
                    deliver_at = now
                if deliver_at > now:
                    return deliver_at - now
                ext = self.store.look_message_by_offset(phy, raw=True)
                if ext is not None and not self._deliver(ext, level):
                    return RETRY_PUT_MS
                offset += 1
                if not offset & 0xFF:
                    self._set_offset(level, offset)
                    self._maybe_persist()
        finally:
            self._set_offset(level, offset)
        return None

    def _deliver(self, ext: MessageExt, level: int) -> bool:
        """Put one due record to its real topic; False when the put failed for a reason that
        may pass (retry later). A record that can never be delivered is moved past."""
        props = ext.properties
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        try:
            real_qid = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
        except ValueError:
            real_qid = -1
        if not real_topic or real_qid < 0:
            # 4.9.8 throws here and retries the unit forever
            self._undeliverable(ext, level, "no valid REAL_TOPIC/REAL_QID "
                                f"({real_topic!r}, {props.get(PROPERTY_REAL_QUEUE_ID)!r})")
            return True
        if real_topic == TRANS_HALF_TOPIC:
            log.error("schedule: level %d record at %d targets %s; discarded (as 4.9.8)",
                      level, ext.commitlog_offset, TRANS_HALF_TOPIC)
            return True
        why = topic_problem(real_topic)
        if why is None and real_topic in NOT_ALLOWED_SEND_TOPICS:
            why = "a system topic nothing is delivered to"    # SCHEDULE_TOPIC_XXXX: a loop
        if why is not None:
            self._undeliverable(ext, level, f"REAL_TOPIC {real_topic!r}: {why}")
            return True
        try:
            msg = copy_record(ext, real_topic)
        except InvalidMessageError as e:    # the record itself cannot be put, ever
            self._undeliverable(ext, level, str(e))
            return True
        try:
            result = self._put(msg, real_qid)
        except InvalidMessageError as e:
            self._undeliverable(ext, level, str(e))
            return True
        except RocketStoreError as e:
            log.error("schedule: level %d record at %d: %s; retrying", level,
                      ext.commitlog_offset, e)
            return False
        if result.status in _REFUSED:
            self._undeliverable(ext, level, f"put to {real_topic}/{real_qid} refused: "
                                f"{result.status.value}")
            return True
        if not result.ok:
            log.warning("schedule: put of level %d record at %d to %s/%d: %s; retrying in %d ms",
                        level, ext.commitlog_offset, real_topic, real_qid, result.status,
                        RETRY_PUT_MS)
            return False
        self.delivered += 1
        return True

    def _undeliverable(self, ext: MessageExt, level: int, why: str) -> None:
        """Move past a record that can never be delivered: to its group's ``%DLQ%`` topic when
        it was a retry, else (or when that put fails too) only this WARN line, the dead-letter
        log (the record stays in SCHEDULE_TOPIC_XXXX at the offset logged until retention)."""
        self.undeliverable += 1
        real_topic = ext.properties.get(PROPERTY_REAL_TOPIC) or ""
        where = "dead-letter log only"
        if real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = real_topic[len(RETRY_GROUP_TOPIC_PREFIX):]
            if group_problem(group) is None and self._topics is not None:
                dlq = dlq_topic(group)
                try:
                    tc = self._topics.create_topic_in_send_message_back_method(
                        dlq, DLQ_QUEUE_NUMS, _RW)
                    if tc.perm & PermName.PERM_WRITE:
                        r = self._put(copy_record(ext, dlq), 0)
                        if r.ok:
                            where = f"moved to {dlq}"
                        else:
                            where = f"{dlq} refused it too ({r.status.value}); dead-letter log only"
                except RocketStoreError as e:
                    where = f"{dlq} refused it too ({e}); dead-letter log only"
        log.warning("schedule: undeliverable level %d record at commit-log offset %d (msg id "
                    "%s, key %s): %s; %s", level, ext.commitlog_offset, ext.msg_id,
                    ext.uniq_key, why, where)

    def _set_offset(self, level: int, offset: int) -> None:
        with self._lock:
            if self._offsets.get(level) != offset and (offset or level in self._offsets):
                self._offsets[level] = offset
                self._changes += 1
