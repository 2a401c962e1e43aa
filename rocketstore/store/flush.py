"""Flush services (docs/format.md §4.5): async flush, group commit, and the transient pool's commit.

``FlushRealTimeService`` (ASYNC_FLUSH): a thread that every ``flush_interval_commit_log`` ms
msyncs the commit log when at least ``flush_commit_log_least_pages`` pages are dirty, and
everything every ``flush_commit_log_thorough_interval`` ms.

``GroupCommitService`` (SYNC_FLUSH): producers wait in the commit log, without the GIL, until
the flushed offset passes their record; this thread wakes on their requests and msyncs
everything written so far, so one sync serves every producer that wrote meanwhile (the
group), and more producers make bigger groups rather than more syncs. Puts that do not wait
(``WAIT=false``: the broker's send-back, delayed delivery, transaction op messages) wake it
too, and it syncs every 10 ms without a request, so they are durable within ~10 ms: the
progress files that point past them (docs/durability.md) are written only after that.

A failed sync is sticky: the flushed offset stops, the commit log refuses every put
(SERVICE_NOT_AVAILABLE with the cause) and no waiting sync put reports PUT_OK. Both services
record the store time of what they flushed as the checkpoint's ``physicMsgTimestamp``.

``CommitRealTimeService`` (transient store pool): copies what puts appended into the pool's
write buffers into the files, every ``commit_interval_commit_log`` ms or as soon as a put
leaves ``commit_commit_log_least_pages`` pages waiting; committed bytes become readable and
flushable, so it then wakes the dispatcher.

Threads stop cleanly on ``shutdown()`` (joined); they sleep on events or C conditions, never spin.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

from rocketstore.store._commitlog import claim, complete_future, done_future, pending_future

log = logging.getLogger("rocketstore.store.flush")

FLUSH_TICK_MS = 10      # sync flush syncs unrequested writes this often (RocketMQ's 10 ms wait)


class _FlushBase:
    def __init__(self, commit_log, checkpoint) -> None:
        self.commit_log = commit_log
        self.queue = commit_log.mapped_file_queue
        self.checkpoint = checkpoint
        self.syncs = 0                  # flush rounds that synced something (statistics)
        # called with the seconds of each round that synced something (broker metrics); the
        # C group commit of sync flush does not come through here
        self.on_synced: Callable[[float], None] | None = None
        self._thread: threading.Thread | None = None

    def _flush(self, least_pages: int) -> int:
        before = self.commit_log.flushed_where
        t0 = time.perf_counter()
        try:
            flushed = self.queue.flush(least_pages)
        except OSError as e:
            log.error("commit log flush failed: %s; the store is now read-only", e)
            self.commit_log.set_flush_error(e)
            raise
        if flushed > before:
            self.syncs += 1
            if self.on_synced is not None:
                self.on_synced(time.perf_counter() - t0)
            last = self.queue.last_file()
            if last is not None and last.store_timestamp:
                self.checkpoint.physic_msg_timestamp = last.store_timestamp
        self.commit_log.set_flushed(flushed)
        return flushed

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()


class FlushRealTimeService(_FlushBase):
    """Async flush: periodic, by dirty pages, thorough every so often."""

    def __init__(self, commit_log, checkpoint, interval_ms: int = 500, least_pages: int = 4,
                 thorough_interval_ms: int = 10_000) -> None:
        super().__init__(commit_log, checkpoint)
        self.interval = interval_ms / 1000.0
        self.least_pages = least_pages
        self.thorough_interval = thorough_interval_ms / 1000.0
        self._stop = threading.Event()

    def _run(self) -> None:
        last_thorough = time.monotonic()
        while not self._stop.wait(self.interval):
            least = self.least_pages
            if time.monotonic() - last_thorough >= self.thorough_interval:
                least = 0
                last_thorough = time.monotonic()
            try:
                self._flush(least)
            except OSError:
                return

    def shutdown(self) -> None:
        """Stop, join, and flush everything once more (RocketMQ retries up to 10 times)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.commit_log.flush_error is None:
            for _ in range(10):
                try:
                    self._flush(0)
                    break
                except OSError:
                    break


class GroupCommitService(_FlushBase):
    """Sync flush: one msync for every producer that wrote since the last one."""

    def _run(self) -> None:
        from rocketstore.store._mapped import sync_hook_installed
        while True:
            if not sync_hook_installed():
                # the whole round in C, without the GIL: dozens of producer threads holding
                # the GIL between puts would otherwise delay every round by a GIL handoff
                rc = self.commit_log.group_commit()
                if rc == 0:
                    return
                if rc < 0:
                    e = OSError(-rc, os.strerror(-rc), self.queue.store_path)
                    log.error("commit log sync failed: %s; the store is now read-only", e)
                    self.commit_log.set_flush_error(e)
                    return
            # a round spanning files, or a test's sync hook: the Python path, which also
            # syncs every FLUSH_TICK_MS without a request (what WAIT=false puts wrote)
            target = self.commit_log.wait_flush_request(FLUSH_TICK_MS)     # GIL released
            if target < 0:
                return
            try:
                self._flush(0)
            except OSError:
                return

    def shutdown(self) -> None:
        self.commit_log.stop_flusher()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.commit_log.flush_error is None:
            try:
                self._flush(0)
            except OSError:
                pass


class CommitRealTimeService:
    """Commits the transient pool's write buffers into the commit-log files.

    Parameters
    ----------
    commit_log : CommitLog
        Its puts wake this service (``commit_loop``); a failed copy is made sticky there.
        A wake by the interval commits everything (RocketMQ's thorough commit interval is
        the commit interval by default, 200 ms), a wake by puts once ``least_pages`` wait.
    pool : TransientStorePool
    on_commit : callable
        Called after a round that committed bytes (wakes the dispatcher).
    """

    def __init__(self, commit_log, pool, on_commit=None, interval_ms: int = 200,
                 least_pages: int = 4) -> None:
        self.commit_log = commit_log
        self.pool = pool
        self.on_commit = on_commit
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.python_rounds = 0          # rounds of the Python path that committed bytes
        self.python_bytes = 0
        self._thread: threading.Thread | None = None

    def commit(self, least_pages: int) -> int:
        """One round; returns the bytes committed. A failed copy turns the store read-only."""
        try:
            n = self.pool.commit(least_pages)
        except OSError as e:
            log.error("commit log commit failed: %s; the store is now read-only", e)
            self.commit_log.set_flush_error(e)
            raise
        if n:
            self.python_rounds += 1
            self.python_bytes += n
            if self.on_commit is not None:
                self.on_commit()
        return n

    @property
    def rounds(self) -> int:
        """Rounds that committed bytes (GIL-free and Python ones)."""
        return self.commit_log.commit_rounds + self.python_rounds

    def _run(self) -> None:
        from rocketstore.store._mapped import PAGE_SIZE
        cl = self.commit_log
        least_bytes = max(1, self.least_pages) * PAGE_SIZE
        while True:
            # steady state in C without the GIL: producers holding the GIL between puts would
            # otherwise delay every round (and grow the bytes a crash can lose)
            rc = cl.commit_loop(self.interval_ms, least_bytes)
            if rc == 0:
                return
            if rc < 0:
                e = OSError(-rc, os.strerror(-rc), self.pool.lent[0].path if self.pool.lent else "")
                log.error("commit log commit failed: %s; the store is now read-only", e)
                cl.set_flush_error(e)
                return
            if rc == 2:
                if self.on_commit is not None:
                    self.on_commit()
                continue
            # files to hand back, or files before the current one: the pool's ordered commit
            rolls = cl.rolls
            try:
                self.commit(0)
            except OSError:
                return
            if len(self.pool.lent) <= 1:
                cl.set_rolls_seen(rolls)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="CommitRealTimeService",
                                        daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop, join, and commit everything once more."""
        self.commit_log.stop_commit()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.commit_log.flush_error is None:
            try:
                self.commit(0)
            except OSError:
                pass


class FlushConsumeQueueService:
    """Flushes consume queues (docs/format.md §5.3): every ``interval_ms`` those with at least
    ``least_pages`` dirty pages, all of them every ``thorough_interval_ms``. A thorough round
    reads the consume queues' store time *before* flushing and then writes it, with the commit
    log's flushed store time, to the checkpoint, so the checkpoint never claims more than is
    on disk -- abnormal recovery starts from it."""

    def __init__(self, consume_queues, commit_log, checkpoint, interval_ms: int = 1000,
                 least_pages: int = 2, thorough_interval_ms: int = 60_000) -> None:
        self.consume_queues = consume_queues
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self.interval = interval_ms / 1000.0
        self.least_pages = least_pages
        self.thorough_interval = thorough_interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def flush(self, thorough: bool) -> None:
        logics = max((q.get_last_store_timestamp() for q in self.consume_queues.queues()),
                     default=0)
        self.consume_queues.flush(0 if thorough else self.least_pages)
        if thorough:
            if logics:
                self.checkpoint.logics_msg_timestamp = logics
            physic = self.commit_log.flushed_store_timestamp
            if physic > self.checkpoint.physic_msg_timestamp:
                self.checkpoint.physic_msg_timestamp = physic
            self.checkpoint.flush()

    def _run(self) -> None:
        last_thorough = time.monotonic()
        while not self._stop.wait(self.interval):
            thorough = time.monotonic() - last_thorough >= self.thorough_interval
            if thorough:
                last_thorough = time.monotonic()
            try:
                self.flush(thorough)
            except OSError as e:
                log.error("consume queue flush failed: %s; the store is now read-only", e)
                self.commit_log.set_flush_error(e)
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="FlushConsumeQueueService",
                                        daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def take_due(pending: deque, lock: threading.Condition, covered: int, fail_all: bool) -> list:
    """Pop, in order, the waiting entries ``(end, result, future, deadline, ...)`` that are
    due: covered (``end <= covered``), past their deadline, or all when ``fail_all``."""
    done = []
    now = time.monotonic()
    with lock:
        while pending and (pending[0][0] <= covered or fail_all or pending[0][3] <= now):
            done.append(pending.popleft())
    return done


def settle(fut: Future, result, transform=None) -> None:
    """Complete ``fut`` with ``result``, or ``transform(result)`` (whose exception, if it
    raises, goes to the waiter). A future cancelled by its waiter is left as it is."""
    if transform is None:
        complete_future(fut, result)
        return
    try:
        value = transform(result)
    except Exception as e:  # noqa: BLE001 - a failing transform goes to the waiter
        if not fut.done():
            try:
                fut.set_exception(e)
            except InvalidStateError:
                pass
        return
    complete_future(fut, value)


class FlushAckService:
    """Acknowledges sync-flush puts without a thread per waiting put (``put_message_async``).

    A put appends, then hands its result here with the commit-log offset its record ends at
    (``defer``); this thread waits, without the GIL, for the group-commit service's next sync
    and completes every future whose record the sync covered, a whole group at a time. A future
    never completes with PUT_OK before its bytes are durable: a sync that fails or does not come
    within ``timeout_ms`` (``sync_flush_timeout``) completes it with FLUSH_DISK_TIMEOUT, as a
    waiting ``put_message`` answers. Puts that need no wait (ASYNC_FLUSH, ``WAIT=false``, a
    refused put) get an already completed future (``completed``).

    The futures are ``AckFuture``s (a Condition only when somebody waits on one), and a put
    takes no lock here: it appends to a deque (atomic) and wakes this thread only when it
    sleeps for want of work, so the producer and this thread do not trade a lock per put.
    """

    def __init__(self, commit_log, timeout_ms: int) -> None:
        self.commit_log = commit_log
        self.timeout = timeout_ms / 1000.0
        self._pending: deque = deque()          # (end offset, result, future, deadline, transform)
        self._cond = threading.Condition()
        self._idle = False                      # the thread sleeps on _cond for an entry
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.groups = 0                         # completion rounds (statistics)

    @staticmethod
    def completed(result, transform=None) -> Future:
        """A completed future of ``result`` (or of ``transform(result)``)."""
        return done_future(result if transform is None else transform(result))

    def defer(self, result, end: int, transform=None) -> Future:
        """A future completed once the log is durable up to ``end`` (or found not to be);
        its value is ``result``, or ``transform(result)`` (a broker's response, computed by
        this thread: no second future per put)."""
        fut = pending_future()
        # what a thread waiting in fut.result() needs to complete it itself (wait_own)
        fut._ack = self
        fut._end = end
        fut._put = result
        fut._tf = transform
        self._pending.append((end, result, fut, time.monotonic() + self.timeout, transform))
        # the order of these checks against _run's and shutdown()'s is what makes the lock-free
        # append safe: see _run (idle) and shutdown (stopped)
        if self._idle:
            with self._cond:
                self._cond.notify()
        if self._stopped:
            # closing: the flush that covers it may never come; never claim durability
            flushed = self.commit_log.flushed_where
            self._complete(self._take(flushed, True), flushed)
            return fut
        self.commit_log.request_flush(end)
        return fut

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="FlushAckService", daemon=True)
        self._thread.start()

    def _take(self, flushed: int, fail_all: bool) -> list:
        """Entries to complete now: durable ones (end <= flushed) as PUT_OK, and, when
        ``fail_all`` or past their deadline, the others as not durable."""
        # under the lock: against a closing put's own _take, not against appends
        return take_due(self._pending, self._cond, flushed, fail_all)

    def _complete(self, done: list, flushed: int) -> None:
        mark = self.commit_log.mark_not_durable
        for end, result, fut, _, transform in done:
            if end <= flushed and getattr(fut, "_waiting", False):
                continue            # durable, and its waiter completes it (wait_own)
            if not claim(fut):
                continue            # its waiter completed it (wait_own)
            if end > flushed:
                mark(result)
            settle(fut, result, transform)
        if done:
            self.groups += 1

    def wait_own(self, fut: Future, timeout: float | None) -> float | None:
        """``fut.result(timeout)``'s first step, on the waiting thread: wait for the sync that
        covers the put (GIL released) and complete ``fut`` here when it came, rather than wake
        this service's thread to do it; never PUT_OK before the bytes are durable. A sync that
        fails or is late is left to this service (FLUSH_DISK_TIMEOUT at the put's deadline).
        Returns what is left of ``timeout``."""
        end = fut._end              # type: ignore[attr-defined]
        limit = self.timeout if timeout is None else min(timeout, self.timeout)
        t0 = time.monotonic()
        fut._waiting = True         # type: ignore[attr-defined]
        try:
            self.commit_log.wait_flushed(end, int(limit * 1000))
        finally:
            fut._waiting = False    # type: ignore[attr-defined]
        # read after the flag is down: a durable entry the service skipped because of the
        # flag is seen durable here (the offset only grows), so one of the two completes it
        if self.commit_log.flushed_where >= end and claim(fut):
            settle(fut, fut._put, fut._tf)      # type: ignore[attr-defined]
        if timeout is None:
            return None
        return max(0.0, timeout - (time.monotonic() - t0))

    def _run(self) -> None:
        cl = self.commit_log
        pending = self._pending
        while True:
            if not pending and not self._stopped:
                with self._cond:
                    # idle first, then look again: a put appends first, then reads idle, so
                    # either this sees its entry or it sees idle and notifies (under the lock,
                    # which wait() releases only once this thread is a waiter)
                    self._idle = True
                    while not pending and not self._stopped:
                        self._cond.wait()
                    self._idle = False
            try:
                end, _, _, deadline, _ = pending[0]
            except IndexError:
                if self._stopped:
                    return
                continue        # taken by a closing put
            stopping = self._stopped
            wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
            flushed, failed, flusher_stopped = cl.wait_flushed(end, wait_ms)
            self._complete(self._take(flushed, failed or stopping), flushed)
            if flusher_stopped and not failed and not stopping:
                # the store is closing: wait for shutdown(), which completes the rest
                with self._cond:
                    while not self._stopped:
                        self._cond.wait()

    def shutdown(self) -> None:
        """Complete every pending future (after the flush service's last flush) and stop.
        A put racing with this sees ``_stopped`` after its append and completes its own
        entry (as not durable unless flushed), so none is left behind."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        flushed = self.commit_log.flushed_where
        self._complete(self._take(flushed, True), flushed)
