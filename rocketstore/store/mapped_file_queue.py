"""MappedFileQueue: an ordered run of fixed-size mapped files (docs/format.md §4.1, 4.3).

Files are named by the 20-digit offset of their first byte; file k of a queue starts at
``first.file_from_offset + k * file_size``. The queue finds the file holding an offset,
creates the next file on a roll (through ``AllocateMappedFileService`` when given one), loads
the files of a directory and truncates the files past a recovered end.

Thread-safety: ``files`` is replaced, never mutated in place, so readers in other threads
iterate a consistent list without a lock; mutations happen under the owner's lock (the
commit log's put lock, or single-threaded open/close). Retention deletes files at the front
from its own thread: the list swaps of ``create_next`` and of the deletions also take
``_files_lock``, so a roll and a deletion never lose each other's update.

Deletion (retention) takes a file out of the list and unlinks it at once (durably: the
directory is fsynced before the next step), but *retires* its
mapping rather than releasing it: a thread that picked the file from the list a moment ago
(a flush loop, a reader between its lookup and its read) still finds it mapped.
``release_retired(grace)`` releases retired files later; a file pinned by a message view
is unmapped only when its last view goes (``MappedFile.release``). The disk space of an
unlinked file is freed when its mapping goes.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from rocketstore.store._mapped import CREATING_SUFFIX, MappedFile, fsync_dir, metadata_event
from rocketstore.store.allocate import AllocateMappedFileService, create_mapped_file
from rocketstore.errors import CorruptionError
from rocketstore.store.fsutil import makedirs, makedirs_durable
from rocketstore.store.paths import is_segment_name, offset_to_file_name

log = logging.getLogger("rocketstore.store.mapped_file_queue")


class MappedFileQueue:
    """The files of one directory, each ``file_size`` bytes.

    Parameters
    ----------
    store_path : str
        Directory of the files (created when missing, unless read-only).
    file_size : int
        Size of every file.
    allocator : AllocateMappedFileService, optional
        Creates files and pre-allocates the next one; without it files are created inline.
    read_only : bool
        Map files read-only and never create any.
    extent : int
        Disk allocated ahead of the writer at a time (0: files are allocated whole); see
        ``allocate``.
    sync_create : bool
        Make a new file and its directories durable as it is created (the commit log). False
        for files recovery rebuilds from the commit log (consume queues): their fsyncs are
        left to ``sync_created``, which ``flush`` runs, so creating one costs the writer no
        disk round trip (a new queue's first unit waited 4-50 ms for them).
    """

    def __init__(self, store_path: str, file_size: int,
                 allocator: AllocateMappedFileService | None = None,
                 read_only: bool = False, warm: bool = False, create_dir: bool = True,
                 extent: int = 0, sync_create: bool = True) -> None:
        self.store_path = store_path
        self.file_size = file_size
        # records from this commit-log offset on carry the record CRC property (the store
        # appends it since then: config/recordCrc.json); -1 when none must
        self.record_crc_from = -1
        # a file no bigger than one extent is allocated a quarter at a time: its last quarter
        # then still says "nearly full" (pre-allocate the next file)
        self.extent = 0 if extent <= 0 else extent if extent < file_size else max(file_size // 4, 1)
        self.allocator = allocator
        self.read_only = read_only
        self.warm = warm
        self.files: list[MappedFile] = []
        self._files_lock = threading.Lock()
        self._retired: list[tuple[float, MappedFile]] = []     # (monotonic time, file)
        self.sync_create = sync_create
        # new files, then the directories whose new entries they are, awaiting an fsync
        self._unsynced: list[MappedFile | str] = []
        if create_dir and not read_only:
            makedirs_durable(store_path)

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> None:
        """Map every segment file of the directory, in name order.

        Loaded files start with all positions at ``file_size``; recovery truncates them.
        Files are created under a temporary name and renamed at full length (``MappedFile``);
        a leftover temporary file (a crash during creation) is deleted, and so is a last file
        of length 0 (a crash during creation by an older version). Any other file whose
        size is not ``file_size`` raises ``CorruptionError``; so do gaps between files.
        """
        if not os.path.isdir(self.store_path):
            return
        listing = os.listdir(self.store_path)
        if not self.read_only:
            leftovers = [n for n in listing if n.endswith(CREATING_SUFFIX)]
            for n in leftovers:
                # a file killed while being created (never renamed to its name): no data
                log.warning("%s: deleting %s, a file whose creation a crash interrupted",
                            self.store_path, n)
            self._unlink_durably([os.path.join(self.store_path, n) for n in leftovers])
        names = sorted(n for n in listing
                       if is_segment_name(n) and os.path.isfile(os.path.join(self.store_path, n)))
        files: list[MappedFile] = []
        try:
            for i, name in enumerate(names):
                path = os.path.join(self.store_path, name)
                try:
                    size = os.path.getsize(path)
                except FileNotFoundError:
                    if self.read_only and not files:
                        continue    # retention in the writer deleted it after our listing
                    raise
                if size == 0 and i == len(names) - 1 and self.read_only:
                    break           # the writer is creating it: the next refresh maps it
                if size == 0 and i == len(names) - 1 and not self.read_only:
                    log.warning("%s: deleting empty last file (crash during its creation)", path)
                    os.unlink(path)
                    continue
                mf = MappedFile(path, self.file_size, read_only=self.read_only,
                                extent=self.extent)
                if files and mf.file_from_offset != files[-1].file_from_offset + self.file_size:
                    expected = files[-1].file_from_offset + self.file_size
                    mf.release()
                    raise CorruptionError(path, 0, f"file starts at offset {int(name)}, expected "
                                          f"{expected}: files are missing between them")
                mf.set_positions(self.file_size)
                files.append(mf)
        except BaseException:
            for mf in files:
                mf.release()
            raise
        self.files = files
        if files and self.extent and not self.read_only:
            # a loaded file's allocation is unknown (0) until its writer reserves: that still
            # reaches the last extent, which then prepares the next file
            self._preallocate_after(files[-1])

    # -- lookups -------------------------------------------------------------------------------

    def first_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def get_min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else -1

    def get_max_offset(self) -> int:
        files = self.files
        if not files:
            return 0
        return files[-1].file_from_offset + files[-1].read_pos

    def next_start_offset(self) -> int:
        """Where the next file starts: after the last one, or 0 for an empty queue."""
        last = self.last_file()
        return 0 if last is None else last.file_from_offset + self.file_size

    def find_mapped_file_by_offset(self, offset: int,
                                   return_first_on_not_found: bool = False) -> MappedFile | None:
        """The file holding ``offset``: computed by index, as the files are contiguous."""
        files = self.files
        if files:
            first = files[0].file_from_offset
            idx = (offset - first) // self.file_size if offset >= first else -1
            if 0 <= idx < len(files):
                mf = files[idx]
                if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                    return mf
            if return_first_on_not_found:
                return files[0]
        return None

    # -- growth --------------------------------------------------------------------------------

    def create_next(self, start_offset: int) -> MappedFile:
        """Create the file starting at ``start_offset`` and append it to the queue."""
        if self.read_only:
            raise OSError(30, "mapped file queue is read-only", self.store_path)
        if start_offset % self.file_size:
            raise ValueError(f"{self.store_path}: start offset {start_offset} is not a multiple "
                             f"of the file size {self.file_size}")
        path = os.path.join(self.store_path, offset_to_file_name(start_offset))
        if not self.sync_create:
            # the entries (and their parents') are synced by sync_created, before flush
            # reports anything in the file flushed
            new_dirs = makedirs(self.store_path)
        elif not self.files:
            makedirs_durable(self.store_path)
        if self.allocator is not None:
            mf = self.allocator.get(path, self.file_size, extent=self.extent)
            self._preallocate_after(mf)
        else:
            mf = create_mapped_file(path, self.file_size, warm=self.warm, extent=self.extent,
                                    sync=self.sync_create)
        if not self.sync_create:
            self._unsynced += [mf, *new_dirs]    # sync_metadata syncs its own directory
        mf.set_positions(0)
        with self._files_lock:
            self.files = self.files + [mf]
        return mf

    def _preallocate_after(self, mf: MappedFile) -> None:
        """Have the allocator prepare the file after ``mf`` once ``mf`` is nearly full: when
        its writer reserves its last extent (at once for a file allocated whole)."""
        allocator = self.allocator
        if allocator is None or self.read_only:
            return
        nxt = os.path.join(self.store_path, offset_to_file_name(mf.file_from_offset + self.file_size))
        size, extent = self.file_size, self.extent
        if mf.allocated_end >= self.file_size:
            allocator.request(nxt, size, extent)
        else:
            mf.on_last_extent = lambda: allocator.request(nxt, size, extent)

    # -- truncation ----------------------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at and after commit-log ``offset``.

        The file holding ``offset`` keeps its positions at ``offset``; files starting after
        it are deleted (docs/format.md §4.3 ``truncateDirtyFiles``).
        """
        keep: list[MappedFile] = []
        for mf in self.files:
            tail = mf.file_from_offset + self.file_size
            if tail <= offset:
                keep.append(mf)
            elif offset >= mf.file_from_offset:
                mf.set_positions(offset - mf.file_from_offset)
                keep.append(mf)
            else:
                log.info("%s: deleting dirty file past offset %d", mf.path, offset)
                mf.destroy()
        self.files = keep

    def flush(self, least_pages: int = 0) -> int:
        """msync every file's committed-but-unflushed bytes (a file with fewer than
        ``least_pages`` dirty pages waits, unless full: docs/format.md §4.5). Returns the offset
        below which everything is flushed."""
        flushed_where = -1
        self.sync_created()
        for mf in self.files:
            if mf.flushed_pos < mf.committed_pos:
                mf.flush(least_pages)
            if mf.flushed_pos < mf.file_size:
                return mf.file_from_offset + mf.flushed_pos
            flushed_where = mf.file_from_offset + mf.file_size
        return max(flushed_where, 0)

    def sync_created(self) -> None:
        """fsync each file created since the last call and the directories holding new
        entries (``sync_create`` False): after it, every file created so far is durable at
        its full length."""
        if not self._unsynced:
            return
        todo, self._unsynced = self._unsynced, []
        try:
            for item in dict.fromkeys(todo):
                try:
                    if isinstance(item, str):
                        fsync_dir(item)
                    elif item.is_mapped and item in self.files:
                        item.sync_metadata()
                except FileNotFoundError:
                    pass        # deleted since (retention, a removed topic): nothing to keep
        except BaseException:
            self._unsynced = todo + self._unsynced
            raise

    def delete_last_file(self) -> None:
        """Delete the last file (consume-queue truncation drops whole files)."""
        files = self.files
        if files:
            self.files = files[:-1]
            files[-1].destroy()

    # -- retention (docs/format.md §4.3, 9) --------------------------------------------------------------

    def delete_expired_file_by_time(self, expired_ms: int, interval_ms: int = 0,
                                    clean_immediately: bool = False, batch_max: int = 10, *,
                                    now_ms: int | None = None, safe_end: int | None = None,
                                    sleep: Callable[[float], object] = time.sleep) -> int:
        """Delete files from the front whose mtime is ``expired_ms`` old (any age with
        ``clean_immediately``); RocketMQ ``deleteExpiredFileByTime``.

        Never the last (active) file, never from the middle: stops at the first file that is
        not expired, after ``batch_max`` deletions, or at a file ending past ``safe_end`` (data
        not yet flushed or dispatched). Sleeps ``interval_ms`` between deletions through
        ``sleep`` (the caller's stoppable wait). Returns the number of files deleted.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        deleted = 0
        while deleted < batch_max:
            files = self.files
            if len(files) < 2:
                break
            mf = files[0]
            if safe_end is not None and mf.file_from_offset + self.file_size > safe_end:
                break
            try:
                mtime_ms = int(os.stat(mf.path).st_mtime * 1000)
            except FileNotFoundError:
                mtime_ms = 0                # already gone from disk: drop it from the queue
            if not clean_immediately and now < mtime_ms + expired_ms:
                break
            if not self._retire_first(mf):
                break
            deleted += 1
            if interval_ms > 0 and deleted < batch_max and len(self.files) > 1:
                if sleep(interval_ms / 1000.0):
                    break                   # the caller's wait says stop
        return deleted

    def delete_expired_file_by_offset(self, min_phy_offset: int, unit_size: int = 20) -> int:
        """Delete consume-queue files from the front whose last unit points below the commit
        log's ``min_phy_offset`` (RocketMQ ``deleteExpiredFileByOffset``); never the last file.
        Returns the number of files deleted."""
        deleted = 0
        while True:
            files = self.files
            if len(files) < 2:
                break
            mf = files[0]
            if not mf.is_mapped:
                break
            last_unit = int.from_bytes(mf.read_bytes(self.file_size - unit_size, 8), "big",
                                       signed=True)
            if last_unit >= min_phy_offset:
                break
            if not self._retire_first(mf):
                break
            deleted += 1
        return deleted

    def _retire_first(self, mf: MappedFile) -> bool:
        """Take ``mf`` (the first file) out of the queue, unlink it, retire its mapping."""
        with self._files_lock:
            files = self.files
            if len(files) < 2 or files[0] is not mf:
                return False
            self.files = files[1:]
        log.info("%s: deleting expired file", mf.path)
        self._unlink_durably([mf.path])
        with self._files_lock:
            self._retired.append((time.monotonic(), mf))
        return True

    def _unlink_durably(self, paths: list[str]) -> None:
        """Unlink ``paths`` and fsync the directory before returning: a deletion is durable
        before the caller goes on to delete what depends on it (retention deletes the
        consume-queue and index files below the commit log's new minimum next), so a power
        cut never brings back a commit-log file whose queues are gone, nor a file between
        two that stay deleted (a gap no store opens)."""
        if not paths:
            return
        for path in paths:
            metadata_event("delete", path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        fsync_dir(self.store_path)

    def retire_all(self) -> int:
        """Take every file out of the queue, unlink it and retire its mapping (the queue of a
        deleted topic); ``release_retired`` unmaps them later. Returns how many."""
        with self._files_lock:
            files, self.files = self.files, []
        now = time.monotonic()
        self._unlink_durably([mf.path for mf in files])
        with self._files_lock:
            self._retired.extend((now, mf) for mf in files)
        return len(files)

    def release_retired(self, grace_s: float = 0.0) -> int:
        """Release the mappings of files deleted at least ``grace_s`` seconds ago (pinned
        ones unmap when their last view goes). Returns how many were released."""
        now = time.monotonic()
        keep: list[tuple[float, MappedFile]] = []
        done: list[tuple[float, MappedFile]] = []
        with self._files_lock:
            for item in self._retired:
                (done if now - item[0] >= grace_s else keep).append(item)
            self._retired = keep
        for _, mf in done:
            mf.release()
        return len(done)

    @property
    def retired_count(self) -> int:
        """Deleted files whose mapping is not released yet."""
        return len(self._retired)

    def drop_deleted_front(self) -> int:
        """Read-only: retire leading files a writer's retention deleted (their names are
        gone). Returns how many were dropped."""
        dropped = 0
        while True:
            files = self.files
            if len(files) < 1 or os.path.exists(files[0].path):
                break
            with self._files_lock:
                if not self.files or self.files[0] is not files[0]:
                    continue
                self.files = self.files[1:]
                self._retired.append((time.monotonic(), files[0]))
            dropped += 1
        return dropped

    def refresh_files(self) -> list[MappedFile]:
        """Map files another process created after ours (read-only tailing).

        New files are appended with positions 0; returns them. A file still being created
        (size 0, or not yet ``file_size``) is left for the next refresh. The last two files
        already mapped are checked against the directory: one the writer deleted and created
        again (a restart's recovery may) is mapped anew.
        """
        if not os.path.isdir(self.store_path):
            return []
        self.remap_replaced(self.files[-2:])
        known = self.files[-1].file_from_offset if self.files else -1
        names = sorted(n for n in os.listdir(self.store_path)
                       if is_segment_name(n) and int(n) > known)
        added: list[MappedFile] = []
        expected = known + self.file_size if self.files else None
        for name in names:
            path = os.path.join(self.store_path, name)
            try:
                if os.path.getsize(path) != self.file_size:
                    break
            except FileNotFoundError:
                break
            if expected is not None and int(name) != expected:
                break
            mf = MappedFile(path, self.file_size, read_only=self.read_only)
            mf.set_positions(0)
            added.append(mf)
            expected = int(name) + self.file_size
        if added:
            self.files = self.files + added
        return added

    def remap_replaced(self, candidates: list[MappedFile]) -> None:
        """Read-only: map anew each of ``candidates`` whose file a writer replaced (another
        inode); at one it deleted or resized, drop it and every later file (the next
        ``refresh_files`` maps them again)."""
        files = list(self.files)
        changed = False
        for mf in candidates:
            try:
                st = os.stat(mf.path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino == mf.inode:
                continue
            i = files.index(mf)
            if st is None or st.st_size != self.file_size:
                for gone in files[i:]:
                    gone.release()
                files = files[:i]
                changed = True
                break
            fresh = MappedFile(mf.path, self.file_size, read_only=self.read_only)
            fresh.set_positions(mf.committed_pos)
            files[i] = fresh
            mf.release()
            changed = True
        if changed:
            self.files = files

    def close(self) -> None:
        """Release every mapping (views already handed out stay valid)."""
        for mf in self.files:
            mf.release()
        self.files = []
        self.release_retired()
