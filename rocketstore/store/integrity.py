"""Records that fail their integrity check (``_codec.record_check``): every read path skips
them and reports them here, once per record: a warning in the log and an entry in a bounded,
per-process list that ``MessageStore.bad_records()`` and ``rocketstore verify`` show.

Damage that is not one record is reported the same way, keyed by where it starts: a
commit-log range with no readable record in it (``damaged range [a, b) ...``) and a
consume-queue unit that points nowhere (``consume queue unit <topic>/<queue>/<index>: ...``,
with the commit-log offset the unit claims)."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict

log = logging.getLogger("rocketstore.integrity")

MAX_KEPT = 10_000                       # the oldest reports are forgotten past this
_lock = threading.Lock()
# (where, offset) or (where, topic, queue id, index) -> (seq, commit-log offset, reason)
_reports: OrderedDict[tuple, tuple[int, int, str]] = OrderedDict()
_seq = 0


def report(where: str, offset: int, reason: str) -> None:
    """Record that the record at commit-log ``offset`` of ``where`` (a store's commit-log
    directory) was not handed out because of ``reason``."""
    if _add((where, offset), offset, reason):
        log.warning("%s: commit-log record at offset %d skipped: %s", where, offset, reason)


def report_unit(where: str, topic: str, queue_id: int, index: int, offset: int,
                reason: str) -> None:
    """Record that unit ``index`` of consume queue ``topic``/``queue_id`` of ``where`` (the
    store's commit-log directory) was skipped: it claims commit-log ``offset`` and ``reason``
    says why that is no record of this queue."""
    text = f"consume queue unit {topic}/{queue_id}/{index}: {reason}"
    if _add((where, topic, queue_id, index), offset, text):
        log.warning("%s: %s", where, text)


def _add(key: tuple, offset: int, reason: str) -> bool:
    global _seq
    with _lock:
        if key in _reports:
            return False
        _seq += 1
        _reports[key] = (_seq, offset, reason)
        if len(_reports) > MAX_KEPT:
            _reports.popitem(last=False)
    return True


def mark() -> int:
    """A point in the reports: ``reported(since=mark())`` lists only what comes after it."""
    with _lock:
        return _seq


def reported(where: str | None = None, since: int = 0) -> list[tuple[int, str]]:
    """(offset, reason) of every record reported for ``where`` (all when None) after the
    ``since`` mark, by offset."""
    with _lock:
        items = list(_reports.items())
    return sorted((off, reason) for key, (seq, off, reason) in items
                  if (where is None or key[0] == where) and seq > since)
