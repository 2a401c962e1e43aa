"""IndexService: the index files of a store and lookups by key (docs/format.md §6.3, 6.4).

Files live in ``index/`` named by their creation time (``yyyyMMddHHmmssSSS``, local time).
The dispatcher appends keys to the last file (``_dispatch.pyx``, GIL-free); when it fills, a
new file starts from the old one's end values and the full one is flushed in the background,
after which the checkpoint's ``indexMsgTimestamp`` moves to its end time. After a crash,
files newer than that timestamp are dropped and rebuilt by re-dispatch.

Allocation: a default file is 420,000,040 bytes (5 M slots, 20 M entries). It is allocated
for real with ``posix_fallocate`` at creation, like every mapped file here: a full disk is a
clean ``OSError(ENOSPC)`` when the file is created, never a SIGBUS when an entry is written
into a sparse hole, and on ext4/xfs the call only reserves extents, so it takes milliseconds
and writes nothing. Opening a store maps existing files lazily (no read, no warm-up), so
opening stays fast whatever the index size.

Thread-safety: the dispatcher is the only writer; queries may run in any thread.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from rocketstore.store._mapped import fsync_dir, metadata_event
from rocketstore.store._indexfile import IndexFile, index_file_size, key_hash
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.errors import CorruptionError
from rocketstore.store.fsutil import makedirs_durable

log = logging.getLogger("rocketstore.store.index")


def _header_problem(f: IndexFile) -> str | None:
    """Why an index file's header cannot be what the writer wrote, or None."""
    if f.begin_timestamp > f.end_timestamp:
        return f"begin timestamp {f.begin_timestamp} after end timestamp {f.end_timestamp}"
    if f.begin_phy_offset > f.end_phy_offset:
        return f"begin offset {f.begin_phy_offset} after end offset {f.end_phy_offset}"
    if f.begin_timestamp < 0 or f.begin_phy_offset < 0:
        return "negative begin timestamp or offset"
    return None


def _file_name(now_ms: int) -> str:
    t = time.localtime(now_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


class IndexService:
    """The index files of one store directory."""

    def __init__(self, index_dir: str, hash_slot_num: int, index_num: int,
                 checkpoint: StoreCheckpoint, read_only: bool = False,
                 max_msgs_num_batch: int = 64) -> None:
        self.max_msgs_num_batch = max_msgs_num_batch
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        self.read_only = read_only
        self.files: list[IndexFile] = []
        self._flushers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._retired: list[tuple[float, IndexFile]] = []     # deleted, mapping kept a while
        self._reported_links: set[str] = set()      # files whose damaged chain link was logged

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self, last_exit_ok: bool) -> None:
        """Map every index file in name order.

        After a clean close a file of the wrong size is refused (``CorruptionError``: the
        geometry settings differ from the ones it was written with). After a crash index
        files are derived data: the first file the checkpoint does not vouch for -- newer
        than its ``indexMsgTimestamp``, of the wrong size (a size change a power cut
        lost), or with a zeroed header -- and every later one are dropped; re-dispatch
        rebuilds them from the commit log.
        """
        if not os.path.isdir(self.index_dir):
            return
        size = index_file_size(self.hash_slot_num, self.index_num)
        names = [n for n in sorted(os.listdir(self.index_dir))
                 if len(n) == 17 and n.isdigit() and os.path.isfile(os.path.join(self.index_dir, n))]
        files: list[IndexFile] = []
        for i, name in enumerate(names):
            path = os.path.join(self.index_dir, name)
            actual = os.path.getsize(path)
            if actual == 0 and self.read_only:
                continue                # being created by the writer
            # a reader never skips a file for its size; a writer refuses after a clean close
            # (the geometry settings changed) and rebuilds after a crash (below)
            if actual != size and (last_exit_ok or self.read_only):
                raise CorruptionError(path, actual,
                                      f"index file is not {size} bytes (max_hash_slot_num="
                                      f"{self.hash_slot_num}, max_index_num={self.index_num})")
            if actual != size:
                self._drop_after_crash(names[i:], f"is {actual} bytes, not {size}")
                break
            f = IndexFile(path, self.hash_slot_num, self.index_num, read_only=self.read_only)
            ckpt = self.checkpoint.index_msg_timestamp
            # the checkpoint vouches for the files flushed before it was written: those
            # ending before its time, and the first one ending in its very millisecond. A
            # later file can end in that millisecond too (it starts with its predecessor's
            # end time, and puts share milliseconds under load) with entries never synced
            if (not last_exit_ok and not self.read_only
                    and not (0 < f.end_timestamp < ckpt or f.end_timestamp == ckpt > 0 and
                             not (files and files[-1].end_timestamp == ckpt))):
                f.close()
                self._drop_after_crash(names[i:], "is not covered by the checkpoint")
                break
            # a header whose ranges run backwards was damaged (a flipped begin timestamp
            # hides the whole file from every query by time); a reader may see a header
            # mid-update, so only the writer judges
            problem = None if self.read_only else _header_problem(f)
            if problem is not None:
                f.close()
                if last_exit_ok:
                    raise CorruptionError(path, 0, f"index file header: {problem}")
                self._drop_after_crash(names[i:], f"has a damaged header ({problem})")
                break
            files.append(f)
        self.files = files

    def _drop_after_crash(self, names: list[str], why: str) -> None:
        log.warning("%s: index file %s %s; dropping it and %d later file(s), re-dispatch "
                    "rebuilds them", self.index_dir, names[0], why, len(names) - 1)
        for name in names:
            metadata_event("delete", os.path.join(self.index_dir, name))
            os.unlink(os.path.join(self.index_dir, name))
        fsync_dir(self.index_dir)

    def last_indexed_offset(self) -> int:
        """Commit-log offset of the last indexed record, or -1 when nothing is indexed."""
        for f in reversed(self.files):
            if f.index_count > 1 or f.end_phy_offset > 0:
                return f.end_phy_offset
        return -1

    def last_file(self) -> IndexFile:
        """The file the dispatcher writes: the last one, or a new one when it is full."""
        with self._lock:
            last = self.files[-1] if self.files else None
            if last is not None and not last.is_full():
                return last
            return self._create(last)

    def roll(self) -> IndexFile:
        with self._lock:
            return self._create(self.files[-1] if self.files else None)

    def _create(self, prev: IndexFile | None) -> IndexFile:
        makedirs_durable(self.index_dir)
        now = int(time.time() * 1000)
        while os.path.exists(os.path.join(self.index_dir, _file_name(now))):
            now += 1                    # two files in one millisecond: keep names unique
        f = IndexFile(os.path.join(self.index_dir, _file_name(now)), self.hash_slot_num,
                      self.index_num, create=True,
                      prev_end_phy=prev.end_phy_offset if prev is not None else 0,
                      prev_end_ts=prev.end_timestamp if prev is not None else 0)
        # its name and size survive a power cut before the checkpoint counts on it
        f.mapped_file.sync_metadata()
        self.files = self.files + [f]
        if prev is not None and prev.is_full():
            earlier = [x for x in self._flushers if x.is_alive()]
            t = threading.Thread(target=self._flush_full, args=(prev, earlier),
                                 name="IndexFlush")
            self._flushers = earlier + [t]
            t.start()
        return f

    def _flush_full(self, f: IndexFile, earlier: list[threading.Thread]) -> None:
        try:
            f.flush()
            # the checkpoint's time vouches for every file before this one: their flushes
            # end first
            for t in earlier:
                t.join()
            with self._lock:
                if f.end_timestamp > self.checkpoint.index_msg_timestamp:
                    self.checkpoint.index_msg_timestamp = f.end_timestamp
                self.checkpoint.flush()
        except Exception:  # noqa: BLE001 - logged; the file is flushed again at close
            log.exception("flushing full index file %s failed", f.path)

    def refresh(self) -> None:
        """Read-only: pick up files the writer created, and its newest header values."""
        known = {f.file_name for f in self.files}
        if os.path.isdir(self.index_dir):
            size = index_file_size(self.hash_slot_num, self.index_num)
            for name in sorted(os.listdir(self.index_dir)):
                path = os.path.join(self.index_dir, name)
                if (name not in known and len(name) == 17 and name.isdigit()
                        and os.path.getsize(path) == size):
                    self.files = self.files + [IndexFile(path, self.hash_slot_num,
                                                         self.index_num, read_only=True)]
        for f in self.files[-2:]:
            f.refresh()

    def flush(self) -> None:
        """Flush every file and record the last one's end time in the checkpoint."""
        for t in self._flushers:
            t.join()
        self._flushers = []
        for f in self.files:
            f.flush()
        if self.files:
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp,
                                                      self.files[-1].end_timestamp)

    def close(self) -> None:
        for t in self._flushers:
            t.join()
        for f in self.files:
            f.close()
        self.files = []
        self.release_retired()

    # -- retention (docs/format.md §9) -----------------------------------------------------------------

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete index files from the oldest while their ``endPhyOffset`` is below the commit
        log's ``min_phy_offset`` (every key they hold points at deleted data); never the last
        file (RocketMQ ``IndexService.deleteExpiredFile``). A query may be walking a deleted
        file: it is unlinked now and unmapped by ``release_retired`` later. Returns the
        number of files deleted."""
        deleted = 0
        with self._lock:
            files = self.files
            n = 0
            while n < len(files) - 1 and files[n].end_phy_offset < min_phy_offset:
                n += 1
            if n == 0:
                return 0
            gone = files[:n]
            self.files = files[n:]
        for f in gone:
            log.info("%s: deleting index file (end phy offset %d < commit-log min %d)",
                     f.path, f.end_phy_offset, min_phy_offset)
            try:
                os.unlink(f.path)
            except FileNotFoundError:
                pass
            with self._lock:
                self._retired.append((time.monotonic(), f))
            deleted += 1
        return deleted

    def release_retired(self, grace_s: float = 0.0) -> int:
        """Unmap index files deleted at least ``grace_s`` seconds ago."""
        now = time.monotonic()
        keep: list[tuple[float, IndexFile]] = []
        done: list[tuple[float, IndexFile]] = []
        with self._lock:
            for item in self._retired:
                (done if now - item[0] >= grace_s else keep).append(item)
            self._retired = keep
        for _, f in done:
            f.close()
        return len(done)

    def drop_deleted_front(self) -> int:
        """Read-only: forget leading index files a writer's retention deleted."""
        dropped = 0
        while self.files and not os.path.exists(self.files[0].path):
            with self._lock:
                f = self.files[0]
                self.files = self.files[1:]
                self._retired.append((time.monotonic(), f))
            dropped += 1
        return dropped

    # -- queries -----------------------------------------------------------------------------

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """RocketMQ's IndexService.queryOffset: hash matches, newest files first, unverified."""
        max_num = min(max_num, self.max_msgs_num_batch)
        out: list[int] = []
        h = key_hash(topic, key)
        files = self.files
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                out.extend(f.select_phy_offsets(h, max_num - len(out), begin, end))
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def candidates(self, topic: str, key: str, begin: int, end: int):
        """Every hash-matching offset in [begin, end], newest first (whole chains)."""
        h = key_hash(topic, key)
        for f in reversed(self.files):
            if f.is_time_matched(begin, end):
                seen = f.bad_links
                found = f.select_phy_offsets(h, 1 << 30, begin, end)
                if f.bad_links != seen:
                    self._report_bad_link(f)
                yield from found
            if f.begin_timestamp < begin:
                break

    def _report_bad_link(self, f: IndexFile) -> None:
        """A chain link pointing at a newer entry (garbage in the file): the walk stopped
        there, so a key query may miss older entries of that chain. Logged once per file."""
        name = os.path.basename(f.mapped_file.path)
        if name in self._reported_links:
            return
        self._reported_links.add(name)
        log.warning("%s: index file %s has a damaged chain link (it points at a newer entry): "
                    "key queries stop at it and may miss older messages of that chain",
                    self.index_dir, name)
