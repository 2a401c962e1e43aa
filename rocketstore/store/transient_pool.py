"""TransientStorePool: off-heap write buffers lent to new commit-log files (docs/format.md §4.5).

With the pool, a put copies its record into memory the writer owns (page-aligned, mlocked,
never faulting and never contending with the kernel's writeback of the file) instead of into
the page cache; the commit service then copies whole runs of records into the file with
``pwrite`` and only then are they readable, flushable and dispatched. Reads and writes thus
touch different memory (RocketMQ's read/write separation).

A file borrows a buffer when it is created and gives it back once every byte of it has been
committed, which happens only after the file is full. When no buffer is free at a roll (the
commit service has fallen behind by ``size`` whole files), the putting thread commits the full
files itself, which frees their buffers: the writer pays for the copy, nothing falls back to
unbuffered writes, and what is committed stays one contiguous prefix of what was written --
so a crash loses at most the uncommitted tail, never a hole before later data. With
``fast_fail_if_no_buffer_in_store_pool`` the put is refused with OS_PAGE_CACHE_BUSY instead.

Only used with ASYNC_FLUSH (as RocketMQ): a sync put must reach the disk, so buffering it in
process memory first would only add a copy.
"""
from __future__ import annotations

import logging
import threading
from collections import deque

from rocketstore.store._mapped import MappedFile, WriteBuffer
from rocketstore.errors import InvalidConfigError

log = logging.getLogger("rocketstore.store.transient_pool")


class TransientStorePool:
    """``size`` write buffers of ``buffer_size`` bytes each, allocated and locked at creation.

    Parameters
    ----------
    size : int
        Number of buffers (``transient_store_pool_size``, 5).
    buffer_size : int
        Bytes per buffer: the commit-log file size.
    lock : bool
        ``mlock`` each buffer (failure to lock is logged, not fatal, as in RocketMQ).
    """

    def __init__(self, size: int, buffer_size: int, lock: bool = True) -> None:
        if size <= 0:
            raise InvalidConfigError("transient_store_pool_size", size, "must be positive")
        self.size = size
        self.buffer_size = buffer_size
        self._buffers = [WriteBuffer(buffer_size, lock) for _ in range(size)]
        self._free: deque[WriteBuffer] = deque(self._buffers)
        self.lent: list[MappedFile] = []     # files holding a buffer, in log order
        # one committer at a time: the commit service, or a writer freeing a buffer at a roll
        self.commit_lock = threading.Lock()
        self.fallback_commits = 0            # rolls where the writer committed to free a buffer
        if not all(b.locked for b in self._buffers):
            log.warning("transient store pool: could not mlock every buffer (RLIMIT_MEMLOCK); "
                        "they may be swapped out")

    @property
    def available(self) -> int:
        """Buffers free to lend."""
        return len(self._free)

    @property
    def locked(self) -> bool:
        """Every buffer is locked in RAM."""
        return all(b.locked for b in self._buffers)

    def lend(self, mf: MappedFile) -> None:
        """Give ``mf`` (new, empty) a write buffer; commit full files first if none is free."""
        if not self._free:
            self.fallback_commits += 1
            self.commit(0)
            if not self._free:      # every lent file is the current one: cannot happen
                raise RuntimeError("transient store pool: no buffer free after committing")
        if len(self._free) <= self.size * 0.4:
            log.debug("transient store pool: %d of %d buffers free", len(self._free), self.size)
        mf.set_write_buffer(self._free.popleft())
        self.lent.append(mf)

    def commit(self, least_pages: int = 0) -> int:
        """Commit the lent files in log order (docs/format.md §4.5); return bytes committed.

        A file fully committed gives its buffer back. ``OSError`` from the copy propagates
        (the caller makes it sticky).
        """
        done = 0
        with self.commit_lock:
            for mf in list(self.lent):
                before = mf.committed_pos
                after = mf.commit(least_pages)
                done += after - before
                if after < mf.file_size:
                    break           # later files wait: committed data stays one prefix
                self._give_back(mf)
        return done

    def _give_back(self, mf: MappedFile) -> None:
        buf = mf.take_write_buffer()
        if buf is not None:
            self._free.append(buf)
        self.lent.remove(mf)

    def uncommitted_bytes(self) -> int:
        """Bytes appended to the buffers but not yet in the files (at risk on a crash)."""
        return sum(mf.wrote_pos - mf.committed_pos for mf in list(self.lent))

    def close(self) -> None:
        """Take the buffers back from files that committed everything (a clean close);
        buffers still lent stay alive with their files."""
        with self.commit_lock:
            for mf in list(self.lent):
                if mf.committed_pos == mf.wrote_pos and mf.is_mapped:
                    self._give_back(mf)
