"""MessageStore's reads: consume-queue reads (get_message, bulk bodies, tag scans, offsets by
time) and lookups by key, id and offset. A mixin of ``MessageStore``."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from rocketstore.store import _reader
from rocketstore.store._codec import MessageExt, decode_msg_id
from rocketstore.store._reader import GetMessageResult, TagFilter
from rocketstore.store.cleanup import RETIRE_GRACE_S
from rocketstore.store.consumequeue import unit_runs
from rocketstore.errors import (InvalidMessageError, InvalidMessageTypeError, StoreClosedError,
                                TopicPermissionError)
from rocketstore.store.status import BoundaryType, GetMessageStatus

from rocketstore.store.arguments import _check_timeout, _java_long

log = logging.getLogger("rocketstore.store")


class _Reads:
    """Reads and lookups: ``MessageStore`` mixes this in."""

    # -- consume queues --------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int, offset: int = -1):
        if not self.read_only:
            per_topic = self.consume_queues._queues.get(topic)
            if per_topic is not None:
                cq = per_topic.get(queue_id)
                if cq is not None:
                    return cq
        if not isinstance(topic, str):
            raise InvalidMessageTypeError("topic", "str", type(topic).__name__)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise InvalidMessageTypeError("queue_id", "int", type(queue_id).__name__)
        cq = self.consume_queues.find(topic, queue_id)
        if cq is not None and self.read_only:
            self._follow_retention(cq, offset)
            cq.refresh()
            max_offset = cq.get_max_offset_in_queue()
            if max_offset > cq.get_min_offset_in_queue():
                last = cq.get_unit(max_offset - 1)
                # the writer's newest record must be readable: if not, it rolled to a file we
                # have not mapped, or replaced one we have (a restart)
                if last is not None and (last[0] + last[1] > self.commit_log_queue.get_max_offset()
                                         or self.commit_log.get_message(last[0]) is None):
                    self.commit_log_queue.refresh_files()
                    for mf in self.commit_log_queue.files:
                        if mf.committed_pos == 0:
                            mf.set_positions(mf.file_size)
        return cq

    def _follow_retention(self, cq, offset: int) -> None:
        """Read-only: drop the files the writer's retention deleted at the front (commit log,
        this queue) and move min offsets past them. Looked for at most once a second, and
        on every read from the queue's first file (where deleted data would be served)."""
        files = cq.mapped_file_queue.files
        if offset < 0 or not files or offset * 20 >= files[0].file_from_offset + cq.file_size:
            now = time.monotonic()
            if now - self._retention_checked < 1.0:
                return
            self._retention_checked = now
        cl = self.commit_log_queue
        dropped = cl.drop_deleted_front()
        if dropped:
            min_phy = max(0, cl.get_min_offset())
            for q in self.consume_queues.queues():
                q.mapped_file_queue.drop_deleted_front()
                q.correct_min_offset(min_phy)
            self.index_service.drop_deleted_front()
            self.index_service.release_retired(RETIRE_GRACE_S)
        elif cq.mapped_file_queue.drop_deleted_front():
            cq.correct_min_offset(max(0, cl.get_min_offset()))
        if cl.retired_count:
            cl.release_retired(RETIRE_GRACE_S)
        if cq.mapped_file_queue.retired_count:
            cq.mapped_file_queue.release_retired(RETIRE_GRACE_S)

    def _tag_filter(self, tags: Any) -> TagFilter | None:
        # RocketMQ's FilterAPI: None, "" and "*" subscribe to every message
        if tags is None or (isinstance(tags, str) and tags.strip() in ("", "*")):
            return None
        f = self._tag_filters.get(tags) if isinstance(tags, (str, tuple)) else None
        if f is not None:
            return f
        if isinstance(tags, str):
            wanted = [t.strip() for t in tags.split("||") if t.strip()]
        elif isinstance(tags, (list, tuple, set, frozenset)):
            wanted = list(tags)
            for t in wanted:
                if not isinstance(t, str) or not t:
                    raise InvalidMessageTypeError("tags", "non-empty str", type(t).__name__)
        else:
            raise InvalidMessageTypeError("tags", "str or list of str", type(tags).__name__)
        if not wanted or wanted == ["*"]:
            return None
        try:
            f = TagFilter(wanted)
        except ValueError as e:
            raise InvalidMessageError("tags", tags, str(e), limit=8) from None
        if isinstance(tags, (str, tuple)) and len(self._tag_filters) < 1024:
            self._tag_filters[tags] = f
        return f

    def get_message(self, group: str, topic: str, queue_id: int, offset: int,
                    max_msgs: int = 32, max_bytes: int | None = None, tags: Any = None, *,
                    timeout_ms: int = 0, raw: bool = False) -> GetMessageResult:
        """Up to ``max_msgs`` messages of a queue from queue ``offset`` (docs/format.md §13).

        ``group`` names the consumer group asking; the store does not use it (RocketMQ's
        signature: a broker uses it for offsets and filters) -- commit progress with
        ``commit_offset(group, ...)``. ``tags``: None or ``"*"`` for every message; a tag,
        ``"TagA || TagB"`` or a list of up to 8 tags. With ``timeout_ms`` a get that finds
        nothing new waits (long polling) for the dispatcher to bring messages past
        ``offset``. Returns a ``GetMessageResult`` (``status``, ``messages``,
        ``next_begin_offset``, ``min_offset``, ``max_offset``).

        Dispatch lag: a message is readable here only once the dispatch thread has written
        its consume-queue unit, a moment after ``put_message`` returned (usually under a
        millisecond or two; tens of milliseconds under load). Right after a put a get may
        still answer NO_MESSAGE_IN_QUEUE / OFFSET_OVERFLOW_ONE: call
        ``store.wait_dispatched()`` first (read-your-writes) or pass ``timeout_ms`` (long
        polling). A consumer loop should not stop at the first empty answer.
        """
        if self._closed:
            raise StoreClosedError("store " + self.root)
        if type(offset) is not int or type(max_msgs) is not int:
            if not isinstance(offset, int) or not isinstance(max_msgs, int):
                raise InvalidMessageTypeError("offset/max_msgs", "int",
                                              f"{type(offset).__name__}/{type(max_msgs).__name__}")
        if max_msgs <= 0 or max_msgs > 0x7FFFFFFF:
            raise InvalidMessageError("max_msgs", max_msgs, "must be in [1, 2147483647]", limit=1)
        if not -(1 << 63) <= offset < (1 << 63):
            raise InvalidMessageError("offset", offset, "outside the 64-bit range", limit=(1 << 63) - 1)
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 0):
            raise InvalidMessageError("max_bytes", max_bytes, "must be a non-negative int or None")
        if self._read_forbidden and topic in self._read_forbidden:
            return _reader.make_result(GetMessageStatus.NO_PERMISSION, offset, 0, 0,
                                       TopicPermissionError(topic, "is not readable (perm in topics.json)"))
        tag_filter = None if tags is None else self._tag_filter(tags)
        cap = max(max_bytes, 100) if max_bytes is not None else 0
        _check_timeout(timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000.0 if timeout_ms > 0 else 0.0
        delay = 0.001
        while True:
            cq = self._queue(topic, queue_id, offset)
            if cq is None:
                r = _reader.make_result(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
            else:
                r = _reader.get_message(cq, self.commit_log_queue, offset, max_msgs, cap,
                                        tag_filter, self._limits,
                                        self.commit_log_queue.get_max_offset(), raw)
            # a tag-filtered poll waits for a match (docs/recovery.md): what did not match is
            # stepped over, and the wait goes on from after it
            skipped = tag_filter is not None and r.status is GetMessageStatus.NO_MATCHED_MESSAGE
            if not deadline or not skipped and r.status not in (
                    GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
                return r
            if skipped:
                offset = max(offset, r.next_begin_offset)
            left = deadline - time.monotonic()
            if left <= 0:
                return r
            if self.read_only:
                # the dispatcher lives in another process: look again after a short sleep
                if self._closing.wait(min(delay, left)):
                    return r
                delay = min(delay * 2, 0.05)
                continue

            def arrived() -> bool:
                q = self.consume_queues.find(topic, queue_id)
                return q is not None and q.get_max_offset_in_queue() > offset
            self.notifier.wait(arrived, left)
            if self._closed:
                return r
            if tag_filter is None:
                deadline = 0.0      # one more look, whatever woke us: the answer is current

    def get_message_bodies(self, topic: str, queue_id: int, offset: int,
                           max_msgs: int = 1024, max_bytes: int = 0) -> "_reader.BodyBatch":
        """The bodies of up to ``max_msgs`` messages of a queue from queue ``offset`` (at most
        ``max_bytes`` of bodies when > 0) in one buffer plus an offsets array: the bulk read
        for consumers that want raw speed (no ``MessageExt`` per message, no tag filter).

        Every record is checked first, as ``get_message`` checks it; statuses and
        ``next_begin_offset`` are ``get_message``'s. Bodies are as stored (``sys_flags`` bit 0
        marks a compressed one).
        """
        self._check_open()
        if not isinstance(offset, int) or not isinstance(max_msgs, int) \
                or not isinstance(max_bytes, int):
            raise InvalidMessageTypeError("offset/max_msgs/max_bytes", "int",
                                          f"{type(offset).__name__}/{type(max_msgs).__name__}/"
                                          f"{type(max_bytes).__name__}")
        if not 0 < max_msgs <= 1 << 24:
            raise InvalidMessageError("max_msgs", max_msgs, "must be in [1, 16777216]", limit=1 << 24)
        if not 0 <= max_bytes < 1 << 62:
            raise InvalidMessageError("max_bytes", max_bytes, "must be in [0, 2**62)")
        if not 0 <= offset < 1 << 62:
            raise InvalidMessageError("offset", offset, "must be in [0, 2**62)")
        return _reader.get_bodies(self._queue(topic, queue_id, offset), self.commit_log_queue,
                                  offset, max_msgs, max_bytes)

    def match_offsets(self, topic: str, queue_id: int, tags: Any, start: int | None = None,
                      end: int | None = None):
        """Queue offsets in [start, end) whose tags code matches ``tags`` (≤ 8 tags), found by
        one vectorized pass over the consume-queue files (numpy int64 array).

        Matching is by tags code, as RocketMQ's consume-queue filter; a hash collision can
        match here, and ``get_message`` then drops it by the real tag.
        """
        return self._scan_queue(topic, queue_id, tags, start, end, count_only=False)

    def count_matches(self, topic: str, queue_id: int, tags: Any, start: int | None = None,
                      end: int | None = None) -> int:
        """How many queue offsets in [start, end) match ``tags`` by tags code (one pass)."""
        return int(self._scan_queue(topic, queue_id, tags, start, end, count_only=True))

    def _scan_queue(self, topic: str, queue_id: int, tags: Any, start: int | None,
                    end: int | None, count_only: bool):
        import numpy as np

        from rocketstore.store import _scan
        self._check_open()
        tag_filter = self._tag_filter(tags)
        cq = self._queue(topic, queue_id)
        found: list = []
        total = 0
        if cq is not None:
            lo = cq.get_min_offset_in_queue() if start is None else max(start, cq.get_min_offset_in_queue())
            hi = cq.get_max_offset_in_queue() if end is None else min(end, cq.get_max_offset_in_queue())
            for index, view in unit_runs(cq, lo, hi):
                n = len(view) // 20
                if count_only:
                    total += n if tag_filter is None else _scan.count_matches(view, tag_filter.codes)
                elif tag_filter is None:
                    found.append(np.arange(index, index + n, dtype=np.int64))
                else:
                    found.append(_scan.match_indices(view, tag_filter.codes) + index)
        if count_only:
            return total
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still stored (0 for an unknown queue)."""
        self._check_open()
        cq = self._queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """One past the queue's last dispatched offset (0 for an unknown queue)."""
        self._check_open()
        cq = self._queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int,
                                    boundary: BoundaryType | str = BoundaryType.LOWER) -> int:
        """Queue offset of the message stored at ``timestamp_ms`` (5.x semantics, docs/format.md §5.4):
        LOWER is the first message stored at or after it, UPPER the last one at or before it."""
        self._check_open()
        if isinstance(boundary, str):
            try:
                boundary = BoundaryType[boundary.upper()]
            except KeyError:
                raise InvalidMessageError("boundary", boundary, "must be LOWER or UPPER") from None
        _java_long("timestamp_ms", timestamp_ms)
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        return _reader.offset_by_time(cq, self.commit_log_queue, timestamp_ms,
                                      boundary is BoundaryType.UPPER,
                                      max(0, self.commit_log.get_min_offset()))

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at a queue offset, or -1."""
        self._check_open()
        _java_long("consume_queue_offset", consume_queue_offset)
        cq = self._queue(topic, queue_id)
        if cq is None:
            return -1
        return _reader.store_timestamp_at(cq, self.commit_log_queue, consume_queue_offset,
                                          max(0, self.commit_log.get_min_offset()))

    # -- lookups -------------------------------------------------------------------------------

    def query_message(self, topic: str, key: str, max_num: int = 64, begin_ts: int = 0,
                      end_ts: int | None = None, *, raw: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``), stored
        in [begin_ts, end_ts] ms, at most ``max_num`` (capped by ``max_msgs_num_batch``), in
        commit-log order.

        The index files are searched newest first, each slot chain walked as RocketMQ does;
        every candidate is then checked against its stored record, so a key that merely
        shares a hash with another ("Aa" / "BB") never returns the other's messages.
        """
        self._check_open()
        if not isinstance(topic, str) or not isinstance(key, str):
            raise InvalidMessageTypeError("topic/key", "str",
                                          f"{type(topic).__name__}/{type(key).__name__}")
        if not isinstance(max_num, int) or max_num <= 0:
            raise InvalidMessageError("max_num", max_num, "must be a positive int", limit=1)
        _java_long("begin_ts", begin_ts)
        end = int(time.time() * 1000) if end_ts is None else _java_long("end_ts", end_ts)
        if self.read_only:
            self.index_service.refresh()
        limit = min(max_num, self.config.max_msgs_num_batch)
        # the index keeps whole seconds since its file's begin time (an entry reads up to 999 ms
        # early): walk a window widened by that, then check each record's real store time
        found = _reader.verify_candidates(self.commit_log_queue,
                                          self.index_service.candidates(topic, key,
                                                                        begin_ts - 999, end),
                                          topic, key, limit, raw, begin_ts, end)
        found.sort(key=lambda m: m.commitlog_offset)
        return found

    def query_message_by_uniq_key(self, topic: str, uniq_key: str, *,
                                  raw: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` with UNIQ_KEY ``uniq_key`` (RocketMQ caps this lookup at 32;
        a retried or re-sent message can share one)."""
        return [m for m in self.query_message(topic, uniq_key, 32, raw=raw)
                if m.uniq_key == uniq_key]

    def look_message_by_offset(self, commitlog_offset: int, raw: bool = False) -> MessageExt | None:
        """The message stored at ``commitlog_offset``, or None if no record starts there.

        Compressed bodies are returned decompressed unless ``raw``.
        """
        self._check_open()
        return self.commit_log.get_message(_java_long("commitlog_offset", commitlog_offset), raw)

    def look_message_by_id(self, msg_id: str, raw: bool = False) -> MessageExt | None:
        """The message with offset message id ``msg_id`` (store host + commit-log offset).

        None when no record starts at that offset or it was stored by another host.
        Raises ``InvalidMessageIdError`` for a string that is not an offset message id.
        """
        self._check_open()
        host, offset = decode_msg_id(msg_id)
        msg = self.commit_log.get_message(offset, raw)
        if msg is None or msg.msg_id != msg_id.upper():
            return None
        return msg

    def iter_messages(self, from_offset: int = 0) -> Iterator[MessageExt]:
        """Every stored message from commit-log offset ``from_offset``, in log order."""
        self._check_open()
        return self.commit_log.iter_messages(_java_long("from_offset", from_offset))
