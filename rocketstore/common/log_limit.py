"""Log lines a client triggers, at most one per interval per kind.

A client controls how often it connects, registers, changes its client id or sends a
malformed request: a line per event let it fill the servers' log (300 connect/disconnect
cycles wrote 600 lines, 300 bad requests 300). ``LogLimiter`` writes the first event of a quiet interval as it comes and sums up the
rest (how many, the first few names) in one line once the interval is over, at the next event
or at the housekeeping scan's ``flush()``.
"""
from __future__ import annotations

import logging
import threading
import time

LOG_INTERVAL_S = 60.0       # at most one line per kind in this time
LOG_NAMED = 5               # names a summary line carries


class LogLimiter:
    """One kind of client-triggered event (``what``, e.g. "new consumer connected") logged at
    ``level`` on ``logger``, at most once per ``interval_s``."""

    def __init__(self, logger: logging.Logger, level: int, what: str,
                 interval_s: float = LOG_INTERVAL_S, named: int = LOG_NAMED) -> None:
        self.logger, self.level, self.what = logger, level, what
        self.interval_s, self.named = interval_s, named
        self._lock = threading.Lock()
        self._last = float("-inf")      # monotonic time of the last line
        self._held = 0                  # events since it, not yet written
        self._names: list[str] = []     # the first few of them

    def event(self, name: str) -> None:
        """One event about ``name`` (e.g. "group G client C")."""
        if not self.logger.isEnabledFor(self.level):
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                self._held += 1
                if len(self._names) < self.named:
                    self._names.append(name)
                return
            line = self._take_locked(now, name)
        self.logger.log(self.level, "%s", line)

    def flush(self) -> None:
        """Write what is held back if the interval is over (the housekeeping scan)."""
        now = time.monotonic()
        with self._lock:
            if not self._held or now - self._last < self.interval_s:
                return
            line = self._take_locked(now, None)
        self.logger.log(self.level, "%s", line)

    def _take_locked(self, now: float, name: str | None) -> str:
        held, names = self._held, self._names
        self._last, self._held, self._names = now, 0, []
        if name is not None:
            if not held:
                return f"{self.what}: {name}"
            held += 1
            if len(names) < self.named:
                names.append(name)
        more = ", ..." if held > len(names) else ""
        return f"{self.what}: {held} times since the last such line: {', '.join(names)}{more}"
