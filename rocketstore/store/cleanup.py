"""CleanupService: retention of a store's files (docs/format.md §9; RocketMQ's
``CleanCommitLogService`` and ``CleanConsumeQueueService``).

Every ``clean_resource_interval`` ms (first run after ``clean_resource_first_delay``) one run:

1. **Commit log.** Runs when the hour of day is in ``delete_when``, when the disk is fuller
   than ``disk_max_used_space_ratio``, or during the 20 runs after a manual request
   (``execute_delete_files_manually``). Deletes files from the oldest whose mtime is more
   than ``file_reserved_time`` hours old, at most ``delete_file_batch_max`` per run, never
   the active (last) file and never a file holding data not yet flushed or dispatched.
   Above ``disk_space_clean_forcibly_ratio`` (and ``clean_file_forcibly_enable``) files are
   deleted whatever their age. Above ``disk_space_warning_level_ratio`` the store is marked
   DISK_FULL: puts are refused with ``SERVICE_NOT_AVAILABLE`` carrying a ``DiskFullError``,
   until a run finds usage at or below the clean-forcibly ratio.
2. **Consume queues and index.** When the commit log's min offset moved since the last run,
   every queue deletes its files whose units all point below it and corrects its min
   offset (readers below it get ``OFFSET_TOO_SMALL`` with the new min as next offset), and
   index files whose last key points below it are deleted.

Deleted files are unlinked at once; their mappings are released ``retire_grace_s`` later (a
reader or flush loop that picked a file a moment ago still finds it mapped), and a file that
message views still pin is unmapped only when the last view goes.

Disk usage is ``disk_usage(path)`` -> used fraction of the partition holding ``path``
(default ``statvfs``, as Java's ``File.getTotalSpace``/``getFreeSpace``); tests inject their
own. The thread sleeps on a condition and stops at ``shutdown()``.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketstore.store.config import StoreConfig
from rocketstore.errors import DiskFullError, StoreClosedError

log = logging.getLogger("rocketstore.store.cleanup")

MANUAL_DELETE_RUNS = 20     # runs a manual request keeps the commit-log clean going (RocketMQ)
RETIRE_GRACE_S = 5.0        # deleted files stay mapped this long for in-flight readers


def partition_used_ratio(path: str) -> float:
    """Used share of the partition holding ``path`` (-1.0 when it cannot be read), as RocketMQ
    4.9.8's ``UtilAll.getDiskPartitionSpaceUsedPercent``: used / (used + usable) -- the blocks
    reserved for root counted in neither -- rounded up to a whole percent, e.g. 0.43."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    pct = used * 100 // entire + (1 if used * 100 % entire else 0)
    return pct / 100.0


@dataclass
class CleanResult:
    """What one run did."""

    commit_log_files: int = 0       # commit-log files deleted
    consume_queue_files: int = 0    # consume-queue files deleted (all queues)
    index_files: int = 0            # index files deleted
    triggered_by: str = ""          # "time", "space", "manual", "forced" or "" (not run)
    clean_immediately: bool = False  # files were deleted regardless of age
    disk_used_ratio: float = -1.0   # the highest usage seen (commit log, consume queues)
    disk_full: bool = False         # the DISK_FULL flag after the run
    min_phy_offset: int = 0         # the commit log's min offset after the run


class CleanupService:
    """Retention for one open (writable) store; see the module docstring.

    Parameters
    ----------
    store : MessageStore
        The store; its commit log, consume queues, index and dispatch position are used.
    config : StoreConfig
        Retention settings (docs/format.md §9 names).
    disk_usage : callable, optional
        ``disk_usage(path) -> float`` used fraction of ``path``'s partition; default
        :func:`partition_used_ratio`.
    clock : callable, optional
        Epoch seconds (file ages, the ``delete_when`` hour); default ``time.time``.
    """

    def __init__(self, store: Any, config: StoreConfig,
                 disk_usage: Callable[[str], float] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.config = config
        self.disk_usage = disk_usage or partition_used_ratio
        self.clock = clock or time.time
        self.retire_grace_s = RETIRE_GRACE_S
        self.runs = 0
        self.last_result: CleanResult | None = None
        self.error: BaseException | None = None
        self._manual_runs = 0
        self._last_min_phy = 0      # min offset at the last consume-queue clean
        self._disk_full: DiskFullError | None = None
        self._run_lock = threading.Lock()       # one run at a time (thread, clean_now)
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread: first run after ``clean_resource_first_delay`` ms."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="CleanupService", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread (an ongoing run finishes its current file) and join it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._run_lock:
            pass                        # a run on another thread (clean_now) has stopped too

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless stopped; True when stopped."""
        with self._cond:
            if not self._stopped and seconds > 0:
                self._cond.wait_for(lambda: self._stopped, seconds)
            return self._stopped

    def _loop(self) -> None:
        delay = self.config.clean_resource_first_delay / 1000.0
        while not self._wait(delay):
            delay = self.config.clean_resource_interval / 1000.0
            try:
                self.run_once()
            except Exception as e:  # noqa: BLE001 - logged; the next run tries again
                self.error = e
                log.exception("retention run failed")

    # -- requests ------------------------------------------------------------------------------

    def execute_delete_files_manually(self) -> None:
        """RocketMQ's manual request: the next 20 runs clean the commit log whatever the hour
        (files still have to be expired)."""
        self._manual_runs = MANUAL_DELETE_RUNS
        log.info("manual retention requested: the next %d runs delete expired files",
                 MANUAL_DELETE_RUNS)

    @property
    def manual_runs_left(self) -> int:
        return self._manual_runs

    @property
    def disk_full(self) -> bool:
        """The DISK_FULL flag: puts are refused while it is set."""
        return self._disk_full is not None

    # -- one run -------------------------------------------------------------------------------

    def run_once(self, *, force: bool = False) -> CleanResult:
        """One retention run, synchronously (the thread calls this; so can tests and tools).

        ``force`` (ours) deletes the oldest commit-log files whatever their age and the hour,
        within the same limits: ``delete_file_batch_max`` per run, never the active file.
        """
        with self._run_lock:
            if self._stopped:
                raise StoreClosedError("retention service of store " + self.store.root)
            self.store.commit_log_queue.release_retired(self.retire_grace_s)
            for cq in self.store.consume_queues.queues():
                cq.mapped_file_queue.release_retired(self.retire_grace_s)
            self.store.consume_queues.release_removed(self.retire_grace_s)
            self.store.index_service.release_retired(self.retire_grace_s)
            result = CleanResult()
            self._clean_commit_log(result, force)
            if not self._stopped:
                self._clean_logics(result)
            result.disk_full = self.disk_full
            result.min_phy_offset = max(0, self.store.commit_log_queue.get_min_offset())
            self.runs += 1
            self.last_result = result
            return result

    def _clean_commit_log(self, result: CleanResult, force: bool) -> None:
        cfg = self.config
        now = self.clock()
        time_up = time.localtime(now).tm_hour in cfg.delete_when_hours()
        space_up, clean_immediately = self._check_space(result)
        manual = self._manual_runs > 0
        if force:
            result.triggered_by = "forced"
        elif space_up:
            result.triggered_by = "space"
        elif time_up:
            result.triggered_by = "time"
        elif manual:
            result.triggered_by = "manual"
        else:
            return
        if manual:
            self._manual_runs -= 1
        at_once = force or (cfg.clean_file_forcibly_enable and clean_immediately)
        result.clean_immediately = at_once
        mfq = self.store.commit_log_queue
        result.commit_log_files = mfq.delete_expired_file_by_time(
            cfg.file_reserved_time * 3_600_000, cfg.delete_commit_log_files_interval,
            at_once, cfg.delete_file_batch_max, now_ms=int(now * 1000),
            safe_end=self._safe_end(), sleep=self._wait)
        if result.commit_log_files:
            log.info("retention (%s): deleted %d commit-log file(s); min offset now %d",
                     result.triggered_by, result.commit_log_files, mfq.get_min_offset())
        elif space_up:
            log.warning("disk space is above the limits, but no commit-log file could be "
                        "deleted (none expired, or only the active one is left)")

    def _check_space(self, result: CleanResult) -> tuple[bool, bool]:
        """RocketMQ ``isSpaceToDelete``: (usage above the max used ratio, delete regardless of
        age); sets and clears the DISK_FULL flag from the commit log's partition."""
        used_max, forcibly, warning = self.config.disk_ratios()
        cl_path = self.config.commit_log_path(self.store.root)
        physic = self.disk_usage(cl_path)
        logics = self.disk_usage(os.path.join(self.store.root, "consumequeue")
                                 if os.path.isdir(os.path.join(self.store.root, "consumequeue"))
                                 else self.store.root)
        result.disk_used_ratio = max(physic, logics)
        clean_immediately = False
        if physic > warning:
            self._set_disk_full(DiskFullError(cl_path, physic, warning))
            clean_immediately = True
        elif physic > forcibly:
            clean_immediately = True
        else:
            self._clear_disk_full(physic)
        if logics > forcibly:
            clean_immediately = True
        space_up = physic < 0 or physic > used_max or logics < 0 or logics > used_max
        return space_up, clean_immediately

    def _set_disk_full(self, error: DiskFullError) -> None:
        commit_log = self.store.commit_log
        if commit_log.flush_error is not None:
            return                      # a failed sync already refuses puts; keep its cause
        if self._disk_full is None:
            log.error("%s", error)
        self._disk_full = error
        commit_log.set_not_writeable(error)

    def _clear_disk_full(self, physic: float) -> None:
        if self._disk_full is None:
            return
        self._disk_full = None
        # put back whatever else refuses puts (a failed sync, a stalled dispatch), else
        # accept them again
        self.store.refresh_put_refusal()
        log.info("disk space OK again (%.1f%% used): puts accepted", physic * 100)

    def _safe_end(self) -> int:
        """Commit-log offset below which data is flushed and dispatched: a file ending past it
        is kept (the flusher or the dispatcher may still be reading it)."""
        store = self.store
        end = store.dispatch_core.reput_offset
        flushed = store.commit_log.flushed_where
        if flushed >= 0:
            end = min(end, flushed)
        return end

    def _clean_logics(self, result: CleanResult) -> None:
        """RocketMQ ``CleanConsumeQueueService``: queues and index follow the commit log's min."""
        min_phy = self.store.commit_log_queue.get_min_offset()
        if min_phy <= self._last_min_phy:
            return
        self._last_min_phy = min_phy
        interval = self.config.delete_consume_queue_files_interval / 1000.0
        for cq in self.store.consume_queues.queues():
            n = cq.mapped_file_queue.delete_expired_file_by_offset(min_phy, 20)
            cq.correct_min_offset(min_phy)
            result.consume_queue_files += n
            if n and interval > 0 and self._wait(interval):
                break
        if self.config.message_index_enable:
            result.index_files = self.store.index_service.delete_expired_file(min_phy)
        if result.consume_queue_files or result.index_files:
            log.info("retention: deleted %d consume-queue and %d index file(s) below commit-log "
                     "offset %d", result.consume_queue_files, result.index_files, min_phy)
