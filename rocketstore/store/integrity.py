"""Records that fail their integrity check (``_codec.record_check``): every read path skips
them and reports them here, once per record: a warning in the log and an entry in a bounded,
per-process list that ``MessageStore.bad_records()`` and ``rocketstore verify`` show."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict

log = logging.getLogger("rocketstore.integrity")

MAX_KEPT = 10_000                       # the oldest reports are forgotten past this
_lock = threading.Lock()
_reports: OrderedDict[tuple[str, int], tuple[int, str]] = OrderedDict()    # -> (seq, reason)
_seq = 0


def report(where: str, offset: int, reason: str) -> None:
    """Record that the record at commit-log ``offset`` of ``where`` (a store's commit-log
    directory) was not handed out because of ``reason``."""
    global _seq
    key = (where, offset)
    with _lock:
        if key in _reports:
            return
        _seq += 1
        _reports[key] = (_seq, reason)
        if len(_reports) > MAX_KEPT:
            _reports.popitem(last=False)
    log.warning("%s: commit-log record at offset %d skipped: %s", where, offset, reason)


def mark() -> int:
    """A point in the reports: ``reported(since=mark())`` lists only what comes after it."""
    with _lock:
        return _seq


def reported(where: str | None = None, since: int = 0) -> list[tuple[int, str]]:
    """(offset, reason) of every record reported for ``where`` (all when None) after the
    ``since`` mark, by offset."""
    with _lock:
        items = list(_reports.items())
    return sorted((off, reason) for (w, off), (seq, reason) in items
                  if (where is None or w == where) and seq > since)
