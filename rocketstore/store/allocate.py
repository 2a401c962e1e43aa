"""Pre-allocation of the next mapped file (RocketMQ's AllocateMappedFileService, docs/format.md §4).

Asking for file N returns it (taking it from the pre-allocated set, or creating it on the
spot); file N+1 is queued for a background thread -- at once, or (sparse files) once file N
is allocated to its end, i.e. nearly full -- so the next roll finds its file allocated, mapped
and, when warm-up is on, faulted in. A failed pre-allocation (a full disk) is not an error
until that file is asked for: then creation is retried in the caller and its ``OSError``
propagates.

Disk footprint: files are created at their full length but only their first ``extent``
bytes allocated (``StoreConfig.allocation_extent`` for the commit log,
``CONSUME_QUEUE_EXTENT``); the writer allocates the
next extent before it writes there (``MappedFile.reserve``). Warm-up touches every page, so a
warmed file is allocated whole.

Thread-safe. ``shutdown()`` stops the thread and deletes the files it pre-allocated that were
never handed out, as RocketMQ's shutdown does: a closed store holds only files with data.
"""
from __future__ import annotations

import logging
import os
import threading

from rocketstore.store._mapped import MappedFile, metadata_event

log = logging.getLogger("rocketstore.store.allocate")

CONSUME_QUEUE_EXTENT = 1 << 20      # allocated ahead of a consume queue's writer (52,428 units)


def create_mapped_file(path: str, size: int, warm: bool = False, lock: bool = False,
                       flush_pages: int = 0, extent: int = 0, sync: bool = True) -> MappedFile:
    """Create, allocate (posix_fallocate), map and optionally warm one file.

    With ``extent`` (and no warm-up) only the first ``extent`` bytes are allocated; the
    writer reserves the rest as it goes. The file is created under a temporary name, sized,
    fsynced and renamed, then its directory fsynced (``MappedFile``): a kill -9 or a power
    cut leaves it absent or at its full length, and the allocation survives power loss
    before the first acknowledgement that depends on it. With ``sync`` False the fsyncs are
    left to the caller (``MappedFileQueue.sync_created``).
    """
    mf = MappedFile(path, size, create=True, extent=0 if warm else extent, sync_create=sync)
    try:
        if not mf.created and sync:
            mf.sync_metadata()      # an existing file taken over: make sure it is durable
        if warm:
            mf.warm(lock=lock, flush_pages=flush_pages)
    except BaseException:
        mf.destroy()
        raise
    return mf


class AllocateMappedFileService:
    """Creates the file asked for and pre-allocates the one after it in a background thread."""

    def __init__(self, warm: bool = False, mlock: bool = False, flush_pages: int = 0) -> None:
        self.warm = warm
        self.mlock = mlock
        self.flush_pages = flush_pages      # sync flush: sync the warm-up zeros as they go
        self._cond = threading.Condition()
        self._pending: dict[str, tuple[int, int]] = {}  # path -> (size, extent), for the thread
        self._ready: dict[str, MappedFile] = {}   # allocated, not yet handed out
        self._busy: str | None = None             # path being allocated right now
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="AllocateMappedFileService",
                                                daemon=True)
                self._thread.start()

    def get(self, path: str, size: int, next_path: str | None = None,
            extent: int = 0) -> MappedFile:
        """File ``path`` of ``size`` bytes, ready to write; queues ``next_path`` behind it."""
        with self._cond:
            while self._busy == path:       # the thread is allocating it right now
                self._cond.wait()
            mf = self._ready.pop(path, None)
            self._pending.pop(path, None)
        if mf is None:
            mf = create_mapped_file(path, size, self.warm, self.mlock, self.flush_pages, extent)
        if next_path is not None:
            self.request(next_path, size, extent)
        return mf

    def request(self, path: str, size: int, extent: int = 0) -> None:
        """Queue ``path`` for pre-allocation by the background thread (cheap: callable under
        a writer's lock)."""
        with self._cond:
            if self._stopped or path in self._ready or path == self._busy:
                return
            self._pending[path] = (size, extent)
            self._cond.notify_all()
        self.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                path, (size, extent) = self._pending.popitem()
                self._busy = path
            mf = None
            try:
                if not os.path.exists(path):
                    mf = create_mapped_file(path, size, self.warm, self.mlock, self.flush_pages,
                                            extent)
            except OSError as e:   # e.g. ENOSPC: the caller retries and sees it
                log.warning("pre-allocation of %s failed: %s", path, e)
            with self._cond:
                self._busy = None
                if mf is not None:
                    if self._stopped:
                        metadata_event("delete", mf.path)
                        mf.destroy()
                    else:
                        self._ready[path] = mf
                self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no pre-allocation is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and self._busy is None, timeout)

    def shutdown(self) -> None:
        """Stop the thread (waiting for an allocation in progress) and delete the files it
        pre-allocated that were never handed out."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            for mf in self._ready.values():
                log.info("%s: deleting the pre-allocated file nobody used", mf.path)
                metadata_event("delete", mf.path)
                mf.destroy()
            self._ready.clear()
            self._pending.clear()
