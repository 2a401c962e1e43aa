"""The client's threads: one timer thread per client instance (delayed and periodic tasks on a
heap) and task threads (the pull service, the consume pools).

RocketMQ's client uses scheduled executors for re-pulls after flow control, orderly re-locks,
the 5 s offset persistence and the 30 s heartbeat; here they share one thread that sleeps on a
condition until the earliest deadline (no polling). Tasks must be short: they hand work to the
pull service or the consume pool.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from typing import Any, Callable

log = logging.getLogger("rocketstore.client")


class Scheduler:
    def __init__(self, name: str) -> None:
        self._name = name
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def schedule(self, delay_ms: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` once, ``delay_ms`` from now (dropped after ``shutdown``)."""
        with self._cond:
            if self._stopped:
                return
            deadline = time.monotonic() + delay_ms / 1000.0
            heapq.heappush(self._heap, (deadline, next(self._seq), fn))
            if self._heap[0][2] is fn:
                self._cond.notify()

    def schedule_at_fixed_rate(self, initial_ms: float, period_ms: float,
                               fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``initial_ms`` and then every ``period_ms`` until shutdown."""
        def tick() -> None:
            try:
                fn()
            finally:
                self.schedule(period_ms, tick)
        self.schedule(initial_ms, tick)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:      # a failed task must not end the timer thread
                log.exception("%s: scheduled task failed", self._name)

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()


class TaskThreads:
    """A fixed set of threads running (fn, args) tasks from one queue, in order of submission.

    Nothing per task but a tuple on a C-level queue (a ThreadPoolExecutor builds a Future, a
    Condition and its locks per submit, which with one-message consume requests cost more
    than the listener). The consume pool and the pull service; ``shutdown`` lets running
    tasks finish and drops the queued ones.
    """

    _STOP = object()

    def __init__(self, threads: int, name: str) -> None:
        self._name = name
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._dropping = False
        self._stopped = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        if not self._stopped:
            self._q.put((fn, args))

    def _run(self) -> None:
        q = self._q
        while True:
            item = q.get()
            if item is self._STOP:
                return
            if self._dropping:
                continue
            fn, args = item
            try:
                fn(*args)
            except Exception:
                log.exception("%s: task failed", self._name)

    def shutdown(self) -> None:
        self._stopped = True
        self._dropping = True
        for _ in self._threads:
            self._q.put(self._STOP)
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join()
