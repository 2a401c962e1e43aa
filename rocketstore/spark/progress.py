"""Micro-batch progress shared by the streaming readers (local store and wire): no Spark here."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K", str, tuple[str, str, int])      # "topic/queue" (local), (topic, broker, queue) (wire)


def advance_offsets(start: Mapping[K, int], bounds: Mapping[K, tuple[int, int]],
                    target: Mapping[K, int] | None, max_rows: int | None) -> dict[K, int]:
    """The end offsets of the next micro-batch from ``start``, given each queue's (min, max)
    offsets now: every queue up to its max (capped by ``target``, the offsets
    Trigger.AvailableNow reads to), at most ``max_rows`` rows in all. A queue first seen
    starts at its min offset (a new queue at 0); a queue gone from ``bounds`` keeps its
    offset; no offset moves backwards."""
    latest = {k: hi for k, (lo, hi) in bounds.items()}
    if target is not None:
        latest = {k: min(v, target.get(k, 0)) for k, v in latest.items()}
    end = dict(start)
    begin = {k: max(start.get(k, bounds[k][0]), bounds[k][0]) for k in latest}
    if max_rows is not None:
        budget = max_rows
        backlog = {k: max(0, latest[k] - begin[k]) for k in sorted(latest)}
        # fair share: every queue with a backlog gets an equal part, what one cannot use
        # goes to the others
        active = [k for k, n in backlog.items() if n > 0]
        take = {k: 0 for k in active}
        while budget > 0 and active:
            share = max(1, budget // len(active))
            for k in list(active):
                t = min(share, backlog[k] - take[k], budget)
                take[k] += t
                budget -= t
                if take[k] == backlog[k]:
                    active.remove(k)
                if budget == 0:
                    break
        for k in latest:
            end[k] = begin[k] + take.get(k, 0)
    else:
        for k in latest:
            end[k] = max(begin[k], latest[k])
    for k, v in end.items():
        end[k] = max(v, start.get(k, v))
    return end
