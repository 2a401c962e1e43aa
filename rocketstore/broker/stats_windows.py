"""RocketMQ's ``BrokerStatsManager`` items as VIEW_BROKER_STATS_DATA (315) answers them.

4.9.8 keeps, per stats item (``TOPIC_PUT_NUMS`` of a topic, ``GROUP_GET_NUMS`` of
``topic@group`` ...), snapshots of its counter every 10 s (the last 7: a minute), every 10 min
(the last 7: an hour) and every hour (the last 25: a day); a window's ``sum`` is the counter's
increase from its oldest snapshot and ``tps`` that increase per second. ``mqadmin statsAll``
prints the minute's tps as #InTPS/#OutTPS and the day's sum (else the hour's, else the
minute's) as #InMsg24Hour/#OutMsg24Hour.

Here the same three rings hold snapshots of the broker's counters (``BrokerMetrics``), taken
by the housekeeping thread every 10 s and at each query; a window's figures run from its
oldest snapshot to the counters now (RocketMQ's stop at its last snapshot, up to 10 s old).
``avgpt`` (RocketMQ's average per call) is not counted here and is 0.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

Counters = dict[tuple[str, str], int]

# (name in BrokerStatsData, snapshot interval s, snapshots kept)
WINDOWS = (("statsMinute", 10.0, 7), ("statsHour", 600.0, 7), ("statsDay", 3600.0, 25))


class StatsWindows:
    """Minute, hour and day snapshots of ``read()``'s counters, keyed (stats name, key)."""

    def __init__(self, read: Callable[[], Counters]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._rings: list[deque[tuple[float, Counters]]] = [deque(maxlen=n)
                                                            for _, _, n in WINDOWS]
        self.sample()

    def sample(self, now: float | None = None) -> Counters:
        """Take the snapshots that are due; returns the counters read."""
        now = time.monotonic() if now is None else now
        counters = self._read()
        with self._lock:
            for ring, (_, interval, _) in zip(self._rings, WINDOWS):
                if not ring or now - ring[-1][0] >= interval:
                    ring.append((now, counters))
        return counters

    def item(self, name: str, key: str) -> dict[str, dict[str, float | int]] | None:
        """``BrokerStatsData`` of one item, or None when nothing was ever counted for it
        (RocketMQ has no such item then)."""
        now = time.monotonic()
        counters = self.sample(now)
        k = (name, key)
        if k not in counters:
            return None
        out: dict[str, dict[str, float | int]] = {}
        with self._lock:
            for ring, (label, _, _) in zip(self._rings, WINDOWS):
                t0, base = ring[0]
                total = counters[k] - base.get(k, 0)
                dt = now - t0
                out[label] = {"avgpt": 0.0, "sum": total, "tps": total / dt if dt > 0 else 0.0}
        return out
