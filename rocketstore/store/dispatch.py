"""DispatchService: makes new commit-log records visible to consumers (RocketMQ's
ReputMessageService, docs/format.md §5.6), and the long-polling arrival notifier.

A thread that sleeps on an event until a put wakes it (a put only signals when the thread is
asleep, so a busy dispatcher costs producers nothing), dispatches everything written since its
reput offset through ``DispatchCore`` (GIL-free for runs of records to known queues), then wakes
readers waiting for those queues. ``dispatch_behind_bytes`` is the lag.

Thread-safety: ``DispatchCore`` is driven by one thread at a time (its own mutex: the service
thread, or a caller bringing the queues up to date at once: recovery, topic deletion). ``shutdown()``
dispatches what is left, stops and joins the thread.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rocketstore.store._dispatch import DispatchCore

# While records keep coming, the thread polls the log every POLL_S instead of asking each put
# to wake it (RocketMQ's ReputMessageService sleeps 1 ms between rounds): a put that found it
# asleep paid an Event.set and a futex wake, and the thread one GIL hand-off, per message.
# After IDLE_POLLS empty rounds it arms the put's wake-up and sleeps, so an idle store costs
# no CPU.
POLL_S = 0.001
IDLE_POLLS = 20
# a record dispatch cannot read (a slave's record cut by its master's death, damage) is said
# once for its position, then again only this often while dispatch stays there
STUCK_REPEAT_S = 300.0

log = logging.getLogger("rocketstore.store.dispatch")


class ArrivalNotifier:
    """Readers wait here for a queue to grow past an offset; the dispatcher wakes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # one condition per waiter on the shared lock, with its test: an arrival wakes only
        # the waiters whose test passes
        self._entries: list[tuple[Callable[[], bool], threading.Condition]] = []
        self._waiters = 0
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        # a listener (a broker's long-poll hold service) wants arrivals now; it clears this
        # while it holds nothing, so dispatch costs nothing extra then
        self.listeners_armed = False

    @property
    def has_waiters(self) -> bool:
        return self._waiters > 0 or self.listeners_armed

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (no args, must not block) after each dispatch round that made
        messages visible, while ``listeners_armed`` is set."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``ready()`` is true, at most ``timeout`` s (None: no limit).

        ``ready`` is also run by the notifying (dispatch) thread at each arrival, which wakes
        a waiter only when its own test passes: a waiter for something rare (the schedule
        service's delay levels) is not woken, and does not take the GIL, on every dispatch
        round. So ``ready`` must be cheap, must not block, and may run on any thread."""
        with self._lock:
            entry = (ready, threading.Condition(self._lock))
            self._entries.append(entry)
            self._waiters += 1
            try:
                return entry[1].wait_for(lambda: self._closed or ready(), timeout)
            finally:
                self._waiters -= 1
                self._entries.remove(entry)

    def notify(self) -> None:
        if self._waiters:
            with self._lock:
                for ready, cond in self._entries:
                    try:
                        passed = ready()
                    except Exception:   # noqa: BLE001 - its waiter re-runs it and sees the error
                        passed = True
                    if passed:
                        cond.notify()
        if self.listeners_armed:
            for callback in self._listeners:
                callback()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for _, cond in self._entries:
                cond.notify()


class DispatchService:
    """Runs ``DispatchCore`` in a thread.

    Parameters
    ----------
    core : DispatchCore
    bound : callable
        The commit-log offset up to which records may be dispatched (its max offset; the
        flushed offset under sync flush, once the flush services exist).
    follow : bool
        ``bound`` is the commit log's live end, so records appended while dispatching may be
        dispatched too.
    commit_log : CommitLog
        Wakes the thread after a put (``set_on_append``).
    notifier : ArrivalNotifier
    """

    def __init__(self, core: DispatchCore, bound: Callable[[], int], commit_log,
                 notifier: ArrivalNotifier, follow: bool = True) -> None:
        self.core = core
        self.bound = bound
        self.follow = follow        # the bound is the commit log's live end
        self.commit_log = commit_log
        self.notifier = notifier
        core.notifier = notifier            # the core wakes readers after each dispatch
        self.lock = threading.Lock()        # one dispatcher at a time
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        # the last failure, until a dispatch succeeds again (the store reports it)
        self.error: BaseException | None = None
        self._stuck_said: tuple[int, float] = (-1, 0.0)    # (position, monotonic time)
        self.on_error: Callable[[BaseException | None], None] | None = None

    @property
    def reput_offset(self) -> int:
        return self.core.reput_offset

    def dispatch_behind_bytes(self) -> int:
        """Bytes written to the commit log but not yet dispatched."""
        return max(0, self.bound() - self.core.reput_offset)

    def do_dispatch(self) -> int:
        """Dispatch everything readable at the call (any thread); returns records dispatched.
        Puts that land meanwhile are left for the next call: a caller never chases a producer
        faster than dispatch."""
        with self.lock:
            n = 0
            target = self.bound()
            while True:
                done = self.core.dispatch(target, 1 << 16, self.follow)
                n += done
                if done == 0:
                    break
        return n

    # -- thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self.commit_log.set_on_append(self._wake.set)
        self._thread = threading.Thread(target=self._run, name="DispatchService", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        """New bytes are readable (the transient pool's commit): look now."""
        self._wake.set()

    def _run(self) -> None:
        try:
            stuck = 0.0
            idle = IDLE_POLLS
            while not self._stopped:
                try:
                    done = self.do_dispatch()
                except Exception as e:  # noqa: BLE001 - kept, reported, retried
                    # a full disk or no free descriptor (creating a consume-queue or index
                    # file) must not end dispatch: retry with back-off until the cause clears
                    self._failed(e)
                    stuck = min(max(stuck * 2, 0.01), 1.0)
                    self._wake.clear()
                    self._wake.wait(stuck)
                    continue
                if self.error is not None:
                    self._recovered()
                if done:
                    stuck = 0.0
                    idle = 0
                    time.sleep(POLL_S)      # the next round takes what lands meanwhile
                    continue
                if idle < IDLE_POLLS:
                    idle += 1
                    time.sleep(POLL_S)
                    continue
                # sleep until the next put signals: arm first, then look once more, so a put
                # between the dispatch and the arming is not missed (both run under the GIL)
                self._wake.clear()
                self.commit_log.arm_wakeup()
                if self.bound() > self.core.reput_offset and not self._stopped:
                    # bytes are there but no record could be dispatched: a record still being
                    # written, or damage; back off instead of spinning
                    if stuck == 0.0:
                        stuck = 0.001
                    else:
                        stuck = min(stuck * 2, 1.0)
                        if stuck == 1.0:
                            self._say_stuck()
                    self._wake.wait(stuck)
                    continue
                self._wake.wait(1.0)
        except BaseException as e:  # noqa: BLE001 - recorded and reported by the store
            self.error = e
            log.exception("dispatch service stopped")
            self.notifier.notify()      # waiters (wait_dispatched) see the error

    def _say_stuck(self) -> None:
        """Log the unreadable record once per position, then every ``STUCK_REPEAT_S``."""
        at, when = self._stuck_said
        pos, now = self.core.reput_offset, time.monotonic()
        if pos == at and now - when < STUCK_REPEAT_S:
            return
        self._stuck_said = (pos, now)
        if pos == at:
            log.warning("dispatch cannot read a record at commit-log offset %d (still, after "
                        "%.0f s)", pos, now - when)
        else:
            log.warning("dispatch cannot read a record at commit-log offset %d: a record "
                        "still being written (a slave's, cut by its master's end) or damage; "
                        "retrying every second", pos)

    def _failed(self, e: BaseException) -> None:
        if self.error is None or type(self.error) is not type(e) or str(self.error) != str(e):
            log.error("dispatch at commit-log offset %d failed (retrying): %s",
                      self.core.reput_offset, e)
        self.error = e
        if self.on_error is not None:
            self.on_error(e)

    def _recovered(self) -> None:
        log.info("dispatch resumed at commit-log offset %d", self.core.reput_offset)
        self.error = None
        if self.on_error is not None:
            self.on_error(None)

    def shutdown(self) -> None:
        """Stop and join the thread, then dispatch what is left."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.commit_log.set_on_append(None)
        try:
            self.do_dispatch()
            self.error = None
        except Exception as e:  # noqa: BLE001 - close() goes on; abort stays
            log.error("dispatch at close failed: %s", e)
            self.error = e
