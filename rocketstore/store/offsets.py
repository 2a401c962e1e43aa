"""ConsumerOffsetManager: each consumer group's next queue offset, kept in consumerOffset.json.

Structure (docs/format.md §10): ``config/consumerOffset.json`` =
``{"offsetTable":{"<topic>@<group>":{<queueId>:<nextQueueOffset>,...}}}``, written by
:class:`rocketstore.store.configfile.ConfigFile` in fastjson's layout (unquoted queue-id keys) and
replaced atomically, with the previous version kept as ``.bak``. It follows RocketMQ's
``broker/.../offset/ConsumerOffsetManager.java``. A value is a ``queue_offset``, the number of
the next consume-queue entry the group will read, not a byte position. A 5.x file's extra
properties (``dataVersion``) are ignored on load and not written back, as in 4.9.x.

The persist service persists every ``flush_interval_ms`` (RocketMQ's
``flushConsumerOffsetInterval``, 5000 ms), but only when the table changed since the last
persist. Rewriting a clean table would leave the bytes the same, but it would turn ``.bak``
into a copy of the current file and lose the older version. ``shutdown()`` persists once more.

Thread safety: every method may be called from any thread. One lock guards the table. A
second lock serialises persists, so an older snapshot never overwrites a newer one on disk.
Commits do not wait for a persist's fsync, nor for a whole copy of the table: ``table()`` and a
persist copy it ``_COPY_CHUNK`` entries per hold of the lock (a 300k-entry table held it 13 ms
in one piece), resuming one iterator over the table while no key was added or removed (no
O(table) step at all); weakly consistent like Java's ConcurrentHashMap iteration: each entry's
value is whole, an entry added or removed during the copy may be missing or still there (the
table stays dirty, so the next persist writes it right).
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rocketstore.errors import InvalidArgumentError, InvalidArgumentTypeError
from rocketstore.store.names import check_name
from rocketstore.store.configfile import ConfigFile

__all__ = ["ConsumerOffsetManager", "CONSUMER_OFFSET_FILE", "TOPIC_GROUP_SEPARATOR"]

log = logging.getLogger(__name__)

CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR = "@"  # RocketMQ's TOPIC_GROUP_SEPARATOR, between topic and group in a key
_MAX_QUEUE_ID = 2**31 - 1  # queueId is a Java int
_MAX_OFFSET = 2**63 - 1  # offsets are Java longs
_INT_KEY = re.compile(r"-?\d+")
_COPY_CHUNK = 4096  # table entries copied per hold of the lock (~0.3 ms)


def _check_name(arg: str, value: object) -> str:
    # the library's errors (they are also TypeError / ValueError)
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(arg, "str", type(value).__name__)
    check_name(arg, value)          # empty, not UTF-8, a control character: InvalidNameError
    if TOPIC_GROUP_SEPARATOR in value:
        raise InvalidArgumentError(arg, value, f"must not contain {TOPIC_GROUP_SEPARATOR!r} "
                                  "(it separates topic and group in consumerOffset.json keys)")
    return value


def _check_int(arg: str, value: object, limit: int) -> int:
    # bool is an int subclass; True as a queue id is a caller's mistake, not queue 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(arg, "int", type(value).__name__)
    if not 0 <= value <= limit:
        raise InvalidArgumentError(arg, value, f"is out of range 0..{limit}")
    return value


def _split_key(key: str) -> tuple[str, str] | None:
    """(topic, group) of an offsetTable key, or None when it is not ``topic@group``."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    # RocketMQ's whichTopicByConsumer also skips keys that do not split into exactly two
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _decode(doc: Any) -> dict[str, dict[int, int]]:
    """offsetTable of a parsed consumerOffset.json; ValueError/TypeError if malformed."""
    if not isinstance(doc, dict):
        raise ValueError(f"top level is a {type(doc).__name__}, not an object")
    raw = doc.get("offsetTable")
    if raw is None:  # fastjson leaves the field's default (an empty map) when absent
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"offsetTable is a {type(raw).__name__}, not an object")
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw.items():
        if not isinstance(queues, dict):
            raise ValueError(f"offsetTable[{key!r}] is a {type(queues).__name__}, not an object")
        decoded: dict[int, int] = {}
        for queue_id, offset in queues.items():
            if not _INT_KEY.fullmatch(queue_id):
                raise ValueError(f"offsetTable[{key!r}]: queue id {queue_id!r} is not an integer")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offsetTable[{key!r}][{queue_id}]: offset {offset!r} "
                                 "is not an integer")
            decoded[int(queue_id)] = offset
        table[key] = decoded
    return table


# one offsetTable entry of a damaged file: "topic@group":{0:12,1:30} (keys quoted or bare)
_ENTRY = re.compile(r'"((?:[^"\\]|\\.)+)"\s*:\s*\{([^{}]*)\}')
_PAIR = re.compile(r'\s*"?(-?\d+)"?\s*:\s*(-?\d+)\s*')


def _salvage(text: str) -> dict[str, dict[int, int]]:
    """The offsets a damaged consumerOffset.json still holds intact: every entry whose text
    parses pair by pair (a damaged pair is left out, not guessed)."""
    table: dict[str, dict[int, int]] = {}
    for m in _ENTRY.finditer(text):
        key = m.group(1)
        if _split_key(key) is None:
            continue
        queues: dict[int, int] = {}
        for pair in m.group(2).split(","):
            p = _PAIR.fullmatch(pair)
            if p is None:
                continue
            qid, off = int(p.group(1)), int(p.group(2))
            if 0 <= qid <= _MAX_QUEUE_ID and 0 <= off <= _MAX_OFFSET:
                queues[qid] = off
        if queues:
            table.setdefault(key, {}).update(queues)
    return table


class ConsumerOffsetManager:
    """Consumer offsets by group, topic and queue id, persisted to ``consumerOffset.json``.

    Parameters
    ----------
    config_dir
        The store's ``config`` directory (``rocketstore.store.paths.config_dir(root)``). It is
        created on the first persist.
    flush_interval_ms
        Period of the persist service started by :meth:`start`.

    Nothing is read at construction. Call :meth:`load` before committing, or the first
    persist replaces what an earlier run left (the old version survives only as ``.bak``).

    Examples
    --------
    >>> import tempfile
    >>> with ConsumerOffsetManager(tempfile.mkdtemp(), flush_interval_ms=1000) as offsets:
    ...     offsets.commit_offset("group1", "TopicTest", 0, 250)
    ...     offsets.query_offset("group1", "TopicTest", 0)
    250
    """

    def __init__(self, config_dir: str | os.PathLike[str], flush_interval_ms: int = 5000) -> None:
        if isinstance(flush_interval_ms, bool) or not isinstance(flush_interval_ms, int):
            raise TypeError(
                f"flush_interval_ms must be an int, got {type(flush_interval_ms).__name__}")
        if flush_interval_ms <= 0:
            raise ValueError(f"flush_interval_ms={flush_interval_ms} must be > 0")
        self.config_dir = os.fspath(config_dir)
        self.flush_interval_ms = flush_interval_ms
        self._file = ConfigFile(os.path.join(self.config_dir, CONSUMER_OFFSET_FILE))
        self._lock = threading.Lock()  # guards _table and the two counts
        self._persist_lock = threading.Lock()  # one snapshot+write at a time
        self._table: dict[str, dict[int, int]] = {}
        # bumped when a key is added or removed: a chunked copy's iterator is then invalid
        self._key_changes = 0
        # dirty when they differ; counts (not a flag) so a change made during a persist's
        # write is not marked clean by it, and a failed persist leaves the table dirty
        self._change_count = 0
        self._persisted_count = 0
        # persist service; the condition's own lock guards _thread, _stopping and _service_rounds
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._service_rounds = 0  # wake-ups of the service, whether it persisted or not
        self.error: BaseException | None = None  # the last periodic persist's, until one works
        # called after a persist's snapshot, before its write: raises (NotDurableError) unless
        # every record the snapshot's offsets point past is durable (the store sets it under
        # SYNC_FLUSH; docs/durability.md)
        self.durable_barrier: Callable[[], None] | None = None

    @property
    def path(self) -> str:
        """The ``consumerOffset.json`` path."""
        return self._file.path

    # -- offsets ---------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record *offset* as the next queue offset *group* consumes from *topic*/*queue_id*.

        Like RocketMQ's ``commitOffset``, this replaces the stored value even with a smaller
        one (a consumer resetting its offset).
        """
        key = self._key(group, topic)
        _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        _check_int("offset", offset, _MAX_OFFSET)
        self.commit_checked(key, queue_id, offset)

    def table_key(self, group: str, topic: str) -> str:
        """The offset table's key of (group, topic), both names checked."""
        return self._key(group, topic)

    def commit_checked(self, key: str, queue_id: int, offset: int) -> None:
        """``commit_offset`` for a caller that checked its arguments once: ``key`` from
        ``table_key``, ``queue_id`` and ``offset`` in range (the in-process pull lane)."""
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                queues = self._table[key] = {}
                self._key_changes += 1
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._change_count += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when *group* never committed one for that queue."""
        key = self._key(group, topic)
        _check_int("queue_id", queue_id, _MAX_QUEUE_ID)
        with self._lock:
            return self._table.get(key, {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Committed offsets of *group* on *topic* by queue id (a copy; empty when none)."""
        key = self._key(group, topic)
        with self._lock:
            return dict(self._table.get(key, {}))

    def remove_offset(self, group: str) -> None:
        """Forget every offset *group* committed, on every topic."""
        _check_name("group", group)
        with self._lock:
            doomed = [key for key in self._table
                      if (split := _split_key(key)) is not None and split[1] == group]
            for key in doomed:
                del self._table[key]
            self._key_changes += 1
            if doomed:
                self._change_count += 1

    def which_topics_by_group(self, group: str) -> set[str]:
        """Topics on which *group* has committed offsets."""
        _check_name("group", group)
        with self._lock:
            return {split[0] for key in self._table
                    if (split := _split_key(key)) is not None and split[1] == group}

    def which_groups_by_topic(self, topic: str) -> set[str]:
        """Groups that have committed offsets on *topic*."""
        _check_name("topic", topic)
        with self._lock:
            return {split[1] for key in self._table
                    if (split := _split_key(key)) is not None and split[0] == topic}

    def merge_table(self, table: dict[str, dict[int, int]]) -> None:
        """A slave's sync: each ``topic@group`` entry of the master's table replaces this
        one's (RocketMQ's ``putAll``); entries the master does not have are kept."""
        with self._lock:
            before = len(self._table)
            for key, queues in table.items():
                self._table[key] = {int(q): int(o) for q, o in queues.items()}
            if len(self._table) != before:      # new keys (a slave's usual sync adds none)
                self._key_changes += 1
            self._change_count += 1

    def table(self) -> dict[str, dict[int, int]]:
        """A deep copy of the offset table: ``{"topic@group": {queue_id: offset}}``, weakly
        consistent (copied in chunks; see the module docstring)."""
        return self._copy()[0]

    def _copy(self) -> tuple[dict[str, dict[int, int]], int]:
        """The table copied ``_COPY_CHUNK`` entries per lock hold, and the change count
        before the copy began (a change made during it leaves the table dirty)."""
        out: dict[str, dict[int, int]] = {}
        with self._lock:
            count, version = self._change_count, self._key_changes
            items = iter(self._table.items())
        keys: list[str] | None = None       # the keys left, once the key set changed
        done = False
        while not done:
            with self._lock:
                if keys is None and self._key_changes != version:
                    # the iterator would fail or skip entries: list what is left, once
                    keys = [k for k in self._table if k not in out]
                if keys is None:
                    n = 0
                    for key, queues in itertools.islice(items, _COPY_CHUNK):
                        out[key] = dict(queues)
                        n += 1
                    done = n < _COPY_CHUNK
                else:
                    table = self._table
                    for key in keys[:_COPY_CHUNK]:
                        left = table.get(key)
                        if left is not None:        # not removed meanwhile
                            out[key] = dict(left)
                    del keys[:_COPY_CHUNK]
                    done = not keys
        return out, count

    # -- persistence -----------------------------------------------------------------------

    def load(self) -> bool:
        """Replace the table with the file's (or ``.bak``'s) content.

        Returns False when neither file exists or has content; the table is then empty.

        A ``<file>`` that cannot be parsed is salvaged entry by entry and merged with
        ``.bak`` (issue 21): for each topic@group and queue the value of ``<file>`` (the newer
        copy) where its text is intact, else ``.bak``'s; no entry of a readable copy is
        dropped. The merge is reported (``configfile.resets``, ERROR log). Raises
        ``CorruptionError`` when neither copy can be decoded (see ``ConfigFile.load``).
        """
        with self._persist_lock:
            path = self._file.path
            # neither copy readable: still refused (CorruptionError), as consumers would
            # otherwise silently restart from their consume-from-where (docs/recovery.md)
            table = self._file.load(_decode)
            damaged = self._file.damaged_text
            from_bak = self._file.loaded_path == self._file.bak_path or damaged is not None
            if damaged is not None:
                salvaged = _salvage(damaged)
                merged = {k: dict(v) for k, v in (table or {}).items()}
                older = sum(1 for k, v in merged.items() for q in v
                            if q not in salvaged.get(k, {}))
                for key, queues in salvaged.items():
                    merged.setdefault(key, {}).update(queues)
                from rocketstore.store.configfile import report_reset
                report_reset(path, "unparseable",
                             f"merged with {os.path.basename(self._file.bak_path)}: "
                             f"{sum(map(len, salvaged.values()))} offsets read from the "
                             f"damaged file, {older} from the older backup")
                self._file.keep_damaged_copy()
                table = merged
            with self._lock:
                self._table = table if table is not None else {}
                self._key_changes += 1
                self._persisted_count = self._change_count
                if from_bak:
                    # <file> is missing or bad: leave the table dirty, so the next persist
                    # writes a good <file> (.bak is kept, because a bad <file> is not rotated)
                    self._change_count += 1
        return table is not None

    def persist(self) -> None:
        """Write the table to ``consumerOffset.json`` now (atomic; see ``ConfigFile.persist``)."""
        with self._persist_lock:
            snapshot, count = self._copy()
            if self.durable_barrier is not None:
                # after the snapshot: every record an offset in it points past was written
                # before now, so durable once the log is durable up to its end of now
                self.durable_barrier()
            self._file.persist({"offsetTable": snapshot})
            with self._lock:
                self._persisted_count = count

    def _dirty(self) -> bool:
        with self._lock:
            return self._change_count != self._persisted_count

    # -- persist service -------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread that persists every ``flush_interval_ms`` when the table changed."""
        with self._cond:
            if self._thread is not None:
                raise RuntimeError("ConsumerOffsetManager: persist service already started")
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="ConsumerOffsetPersistService",
                                            daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        """Stop and join the persist service, then persist if anything is unsaved.

        Safe to call more than once, and without :meth:`start`.
        """
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join()
            with self._cond:
                self._thread = None
        if self._dirty():
            self.persist()

    def __enter__(self) -> ConsumerOffsetManager:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()

    def _run(self) -> None:
        interval_s = self.flush_interval_ms / 1000
        while True:
            with self._cond:
                # sleep on the condition: shutdown() wakes it at once, and spurious wake-ups
                # go back to sleep until the deadline
                deadline = time.monotonic() + interval_s
                while not self._stopping:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if self._stopping:
                    return
            if self._dirty():
                try:
                    self.persist()
                    self.error = None
                except Exception as e:  # noqa: BLE001 - kept, logged and reported
                    # nothing may kill the service (a full disk, a bug): the table stays
                    # dirty, the next round retries, and the store reports the error
                    if self.error is None or type(self.error) is not type(e):
                        log.exception("%s: periodic persist failed", self.path)
                    self.error = e
            with self._cond:
                self._service_rounds += 1
                self._cond.notify_all()

    def _key(self, group: str, topic: str) -> str:
        _check_name("group", group)
        _check_name("topic", topic)
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
