"""One timer thread per client instance: delayed and periodic tasks on a heap.

RocketMQ's client uses scheduled executors for re-pulls after flow control, orderly re-locks,
the 5 s offset persistence and the 30 s heartbeat; here they share one thread that sleeps on a
condition until the earliest deadline (no polling). Tasks must be short: they hand work to the
pull service or the consume pool.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

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
