"""ConsumeQueueStore: every topic-queue's ConsumeQueue under ``consumequeue/`` (docs/format.md §5).

Finds or creates queues for the dispatcher, loads and recovers them at open, truncates
units past the recovered commit-log end, corrects min offsets against the commit log's min,
flushes and closes them. Queue objects are created on first use; their directory and first
file appear with the first unit.

Thread-safety: ``find_or_create`` and the queue table are guarded by a lock (readers and the
dispatcher both look queues up); each queue is written by the dispatcher only.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading

from collections.abc import Iterator

from rocketstore.store._consumequeue import ConsumeQueue
from rocketstore.store._mapped import fsync_dir, metadata_event
from rocketstore.store.paths import CONSUMEQUEUE_DIR, is_segment_name

log = logging.getLogger("rocketstore.store.consumequeue")



def unit_runs(cq: ConsumeQueue, lo: int, hi: int,
              max_units: int = -1) -> Iterator[tuple[int, memoryview]]:
    """(first queue offset, zero-copy view) over the published units [lo, hi) of ``cq``: one
    view per file (at most ``max_units`` units each), for vectorized scans. Each view is
    released when the next is asked for, so callers copy what they keep."""
    index = lo
    while index < hi:
        want = hi - index if max_units < 0 else min(hi - index, max_units)
        view = cq.units_view(index, want)
        if view is None:
            return
        n = len(view) // 20
        try:
            if n == 0:
                return
            yield index, view
        finally:
            view.release()
        index += n


_LOOK_PAST_END = 8192       # bytes after a queue's end checked for units damage cut off


def _units_after_end(q: ConsumeQueue) -> bool:
    """Whether non-zero bytes follow the end ``recover`` found in the queue's last file
    (within ``_LOOK_PAST_END`` bytes: a zeroed range inside the queue, not its end)."""
    mf = q.mapped_file_queue.last_file()
    if mf is None or mf.wrote_pos >= mf.file_size:
        return False
    n = min(_LOOK_PAST_END, mf.file_size - mf.wrote_pos)
    return mf.read_bytes(mf.wrote_pos, n).count(0) != n


def _drop_damaged_files(qdir: str, file_size: int) -> bool:
    """Delete a queue's files from the first one of the wrong size or out of sequence on;
    True when any was deleted."""
    names = sorted(n for n in os.listdir(qdir) if is_segment_name(n))
    for i, name in enumerate(names):
        size = os.path.getsize(os.path.join(qdir, name))
        if size == file_size and (i == 0 or int(name) == int(names[i - 1]) + file_size):
            continue
        log.warning("%s: consume-queue file %s is %d bytes or out of sequence after a crash; "
                    "dropping it and %d later file(s), re-dispatch rebuilds them",
                    qdir, name, size, len(names) - i - 1)
        for n in names[i:]:
            metadata_event("delete", os.path.join(qdir, n))
            os.unlink(os.path.join(qdir, n))
        fsync_dir(qdir)
        return True
    return False


def _dir_name(topic: object) -> bool:
    """Whether ``topic`` names one directory entry (no separator, not "." or ".."): a
    caller's string is never walked out of the consume-queue directory."""
    return (isinstance(topic, str) and topic not in ("", ".", "..") and "/" not in topic
            and os.sep not in topic and "\0" not in topic)


_NO_QUEUES: dict[int, ConsumeQueue] = {}

class ConsumeQueueStore:
    """The consume queues of one store directory."""

    def __init__(self, root: str, file_size: int, read_only: bool = False,
                 min_phy_offset=lambda: 0) -> None:
        self.root = os.path.join(root, CONSUMEQUEUE_DIR)
        self.min_phy_offset = min_phy_offset     # the commit log's, for a late-found queue
        self.file_size = file_size
        self.read_only = read_only
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()
        self.damaged = False        # load() dropped files: rebuild from the commit log
        self._removed: list[ConsumeQueue] = []     # a deleted topic's, mappings retired
        self._tail_cut: list[ConsumeQueue] = []    # recover() dropped their last files

    # -- lookup ------------------------------------------------------------------------------

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, or None when it has never had a unit (read-only: loads one that a
        writer created since)."""
        q = self._queues.get(topic, {}).get(queue_id)
        if q is None and self.read_only and _dir_name(topic) and \
                os.path.isdir(os.path.join(self.root, topic, str(queue_id))):
            with self._lock:
                q = self._queues.get(topic, {}).get(queue_id)
                if q is None:
                    q = ConsumeQueue(self.root, topic, queue_id, self.file_size, read_only=True)
                    q.load()
                    q.correct_min_offset(self.min_phy_offset())
                    self._queues.setdefault(topic, {})[queue_id] = q
        return q

    def queues_of(self, topic: str) -> dict[int, ConsumeQueue]:
        """The topic's queues by queue id, live (no copy: iterate it as a reader that may see
        a queue added meanwhile, RuntimeError then); empty when it has none."""
        return self._queues.get(topic, _NO_QUEUES)

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        q = self._queues.get(topic, {}).get(queue_id)
        if q is not None:
            return q
        with self._lock:
            per_topic = self._queues.setdefault(topic, {})
            q = per_topic.get(queue_id)
            if q is None:
                q = ConsumeQueue(self.root, topic, queue_id, self.file_size, read_only=self.read_only)
                q.load()
                q.recover()
                per_topic[queue_id] = q
        return q

    def queues(self) -> list[ConsumeQueue]:
        return [q for per_topic in list(self._queues.values()) for q in list(per_topic.values())]

    def topics(self) -> list[str]:
        return sorted(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, {}))

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self, last_exit_ok: bool = True) -> None:
        """Load every ``<topic>/<queueId>`` directory (names that are not ints are skipped).

        After a crash (``last_exit_ok`` false) consume-queue files are derived data: from the
        first file of a queue whose size is wrong (a size change a power cut lost) or that
        leaves a gap, that file and the later ones are dropped, and ``damaged`` tells
        recovery to rebuild every queue from the commit log's start."""
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                try:
                    qid = int(qname)
                except ValueError:
                    continue
                if not os.path.isdir(os.path.join(tdir, qname)):
                    continue
                dropped = False
                if not self.read_only:
                    # wrong-sized or out-of-sequence files are damage after a clean close
                    # too; the queue is rebuilt from its last unit before them
                    dropped = _drop_damaged_files(os.path.join(tdir, qname), self.file_size)
                    if not last_exit_ok:
                        self.damaged |= dropped
                q = ConsumeQueue(self.root, topic, qid, self.file_size, read_only=self.read_only)
                q.load()
                self._queues.setdefault(topic, {})[qid] = q
                if dropped and last_exit_ok:
                    self._tail_cut.append(q)

    def recover(self) -> None:
        """Find each queue's end (``ConsumeQueue.recover``). Queues it cut short are noted
        for ``validate``: trailing files dropped (never written: a cut after they were
        created), or units found shortly after the end it found (damage inside the queue,
        not its end)."""
        for q in self.queues():
            before = len(q.mapped_file_queue.files)
            q.recover()
            last = q.mapped_file_queue.last_file()
            if len(q.mapped_file_queue.files) < before or _units_after_end(q) \
                    or (last is not None and last.wrote_pos == 0):
                if q not in self._tail_cut:
                    self._tail_cut.append(q)

    def drop_queue(self, q: ConsumeQueue) -> ConsumeQueue:
        """Delete every file of ``q`` (its first ones are missing: what is left cannot be
        extended backwards) and put an empty queue in its place, which re-dispatch fills.
        Only before dispatch starts."""
        log.error("%s/%d: the consume queue starts at unit %d, after records the commit log "
                  "still holds (its first files are missing or damaged): rebuilding it whole",
                  q.topic, q.queue_id, q.mapped_file_queue.files[0].file_from_offset // 20
                  if q.mapped_file_queue.files else 0)
        q.destroy()
        fresh = ConsumeQueue(self.root, q.topic, q.queue_id, self.file_size,
                             read_only=self.read_only)
        fresh.load()
        fresh.recover()
        with self._lock:
            self._queues.setdefault(q.topic, {})[q.queue_id] = fresh
        if q in self._tail_cut:
            self._tail_cut.remove(q)
        return fresh

    def mark_suspect(self, q: ConsumeQueue) -> None:
        """Have ``validate`` check ``q`` and rebuild it from its last unit on."""
        if q not in self._tail_cut:
            self._tail_cut.append(q)

    def suspects(self) -> list[ConsumeQueue]:
        """The queues load or recover found cut short or out of sequence."""
        return list(self._tail_cut)

    @property
    def suspect(self) -> bool:
        """Whether load or recover found a queue cut short or out of sequence."""
        return bool(self._tail_cut)

    def validate(self, commit_log_queue, end: int, min_phy: int, deep_files: int = 3,
                 queues: list[ConsumeQueue] | None = None) -> tuple[int, list[str]]:
        """Abnormal recovery: check every queue's units against the commit log (units up to
        ``end``; the last ``deep_files`` files of each queue unit by unit against the record
        headers, the others at their first and last unit) and drop each queue from its first
        unit that does not hold (``queues``: only those; default every queue). Returns (the commit-log offset re-dispatch must start from
        to rebuild what was dropped, or -1 when nothing was; "topic/queue@index" of each
        queue cut)."""
        rebuild_from = -1
        cut = []
        for q in (self.queues() if queues is None else queues):
            files = q.mapped_file_queue.files
            if not files:
                continue
            deep_from = files[max(0, len(files) - deep_files)].file_from_offset
            bad = q.validate(commit_log_queue, end, min_phy, deep_from)
            if bad < 0:
                if q in self._tail_cut:
                    # its last files held no units: rebuild what they should have held
                    log.error("%s/%d: the consume queue ends at unit %d, before what the "
                              "commit log holds (files never written after a cut, or damaged "
                              "or missing): rebuilding it from the commit log", q.topic,
                              q.queue_id, q.get_max_offset_in_queue())
                    n = q.get_max_offset_in_queue()
                    last = q.get_unit(n - 1) if n > q.get_min_offset_in_queue() else None
                    start = max(last[0] + last[1], min_phy) \
                        if last is not None and last[1] != 0x7FFFFFFF else min_phy
                    rebuild_from = start if rebuild_from < 0 else min(rebuild_from, start)
                    cut.append(f"{q.topic}/{q.queue_id}@{q.get_max_offset_in_queue()}")
                continue
            log.error("%s/%d: consume-queue unit %d does not match the commit log (zeroed, "
                      "stale or damaged after a crash): dropping the queue from there and "
                      "rebuilding it from the commit log", q.topic, q.queue_id, bad)
            start = q.truncate_at(bad)
            start = min_phy if start < 0 else max(start, min_phy)
            rebuild_from = start if rebuild_from < 0 else min(rebuild_from, start)
            cut.append(f"{q.topic}/{q.queue_id}@{bad}")
        return rebuild_from, cut

    def max_physic_offset(self) -> int:
        """End (offset + size) of the furthest commit-log record any queue points at, or -1."""
        return max((q.max_physic_offset for q in self.queues()), default=-1)

    def truncate_dirty(self, phy_offset: int) -> None:
        for q in self.queues():
            q.truncate_dirty_logic_files(phy_offset)

    def correct_min_offset(self, min_phy_offset: int) -> None:
        for q in self.queues():
            q.correct_min_offset(min_phy_offset)

    def refresh(self) -> None:
        """Read-only: follow the writer (new units, new files, new queues)."""
        for q in self.queues():
            q.refresh()

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """{(topic, queue_id): max queue offset} of every queue."""
        return {(q.topic, q.queue_id): q.get_max_offset_in_queue() for q in self.queues()}

    def flush(self, least_pages: int = 0) -> None:
        for q in self.queues():
            q.flush(least_pages)

    def remove_topic(self, topic: str) -> list[int]:
        """Remove every queue of ``topic`` (RocketMQ's ``cleanUnusedTopic``): files unlinked
        and the directory removed now, mappings released by ``release_removed`` later (a
        reader may be inside one). A topic without a queue in memory removes nothing from
        disk. Call with no dispatch running. Returns the queue ids."""
        with self._lock:
            per_topic = self._queues.pop(topic, {})
        for q in per_topic.values():
            q.mapped_file_queue.retire_all()
            self._removed.append(q)
        # only a directory the table knows, named by an entry of this very directory (load)
        # or a stored record's topic: never one built from a caller's string ("..", "a/b")
        tdir = os.path.join(self.root, topic)
        if per_topic and _dir_name(topic) and os.path.isdir(tdir):
            shutil.rmtree(tdir, ignore_errors=True)
            fsync_dir(self.root)
        return sorted(per_topic)

    def release_removed(self, grace_s: float = 0.0) -> int:
        """Release the retired mappings of removed queues deleted ``grace_s`` seconds ago."""
        n = 0
        for q in list(self._removed):
            n += q.mapped_file_queue.release_retired(grace_s)
            if not q.mapped_file_queue.retired_count:
                self._removed.remove(q)
        return n

    def close(self) -> None:
        for q in self.queues():
            q.close()
        self._queues = {}
        self.release_removed()
