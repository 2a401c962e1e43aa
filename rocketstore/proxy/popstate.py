"""The proxy's durable POP state: pop cursors and in-flight (invisible) messages.

A single-broker equivalent of RocketMQ 5's revive topic (docs/grpc.md): instead of checkpoint
and ack messages replayed by a revive thread, one table of in-flight entries keyed by
``(group, topic, broker, queue id, queue offset)`` with the time each becomes visible again,
its delivery attempt and the pop time its receipt handle names, plus one pop cursor per
``(group, topic, broker, queue id)`` and the broker offsets of each open transaction's half
message (so an EndTransaction reaching a restarted proxy still finds it). Every change is one
JSON line appended to a journal (``pop.journal`` in the proxy's data directory) and written to
the OS before the RPC answers (not fsynced: a power cut may lose the last changes, which
redelivers, never loses; a delay message's entry, the only copy of its schedule, is fsynced); the
journal is replayed and compacted at start, and rewritten (to a temporary file, fsynced, renamed
over) whenever it holds four times more lines than live state. So a proxy or broker restart
loses no un-acked message (it comes back when its invisibility ends) and redelivers nothing
acked.
"""
from __future__ import annotations

import heapq
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO

COMPACT_MIN_LINES = 10_000
TRANSACTION_KEEP_MS = 24 * 3600 * 1000

Key = tuple[str, str, str, int, int]         # group, topic, broker, queue id, queue offset
QueueKey = tuple[str, str, str, int]


@dataclass
class InFlight:
    pop_time: int            # ms; names the receipt handle that is current
    visible_at: int          # ms; invisible until then
    attempt: int             # delivery attempt of the current delivery (1 = first)
    commit_log_offset: int


class VisibleHeap:
    """``(visible_at, key)`` of a ``PopState``'s in-flight entries (those ``select`` takes),
    earliest first, so what is due next is found without walking everything in flight. An
    entry changed or gone since it was pushed is stale: dropped when it reaches the top, and
    the heap is rebuilt from the table once mostly stale (bounded, O(1) amortized)."""

    def __init__(self, state: PopState, select: Callable[[Key], bool] | None = None) -> None:
        self._state = state             # read at each use: the table is ``state.inflight``
        self._select = select
        self._heap: list[tuple[int, Key]] = []
        self.rebuild()

    def rebuild(self) -> int:
        """The heap from the table; the number of entries it holds."""
        sel = self._select
        self._heap = [(e.visible_at, k) for k, e in self._state.inflight.items()
                      if sel is None or sel(k)]
        heapq.heapify(self._heap)
        return len(self._heap)

    def push(self, visible_at: int, k: Key, live: int) -> None:
        """Add an entry (or its new visibility); ``live``: entries really held, for the
        rebuild."""
        heapq.heappush(self._heap, (visible_at, k))
        if len(self._heap) > 2 * live + 1024:
            self.rebuild()

    def first(self) -> tuple[int, Key] | None:
        """The earliest live entry (stale ones above it dropped), left on the heap."""
        heap, inflight = self._heap, self._state.inflight
        while heap:
            v, k = heap[0]
            e = inflight.get(k)
            if e is not None and e.visible_at == v:
                return v, k
            heapq.heappop(heap)
        return None

    def pop(self) -> None:
        """Drop the entry ``first`` returned."""
        heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)


class PopState:
    """Cursors and in-flight entries, journaled to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cursors: dict[QueueKey, int] = {}
        self.inflight: dict[Key, InFlight] = {}       # change only through _set/_del
        # the same entries by queue, so a receive looks at its queue's entries only (not at
        # everything in flight in every group)
        self._by_queue: dict[QueueKey, dict[int, InFlight]] = {}
        # every entry by visibility: ``next_visible`` without a scan of everything in flight
        self._heap = VisibleHeap(self)
        # open transactions: id -> [broker, queue offset, commit-log offset, offset msg id, ms]
        self.transactions: dict[str, list] = {}
        self._lock = threading.Lock()
        self._lines = 0
        self._out: TextIO | None = None
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._replay()
        self._compact()

    def _replay(self) -> None:
        try:
            f = open(self.path, encoding="utf-8")
        except FileNotFoundError:
            return
        with f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:           # a torn last line from a crash
                    continue
                op, k = rec.get("op"), rec.get("k")
                if op == "c":
                    self.cursors[tuple(k)] = int(rec["n"])            # type: ignore[index]
                elif op == "p":
                    self._set(tuple(k), InFlight(                     # type: ignore[arg-type]
                        int(rec["pt"]), int(rec["v"]), int(rec["a"]), int(rec.get("cl", -1))))
                elif op == "a":
                    self._del(tuple(k))                                # type: ignore[arg-type]
                elif op == "t":
                    self.transactions[str(k)] = list(rec["v"])
                elif op == "te":
                    self.transactions.pop(str(k), None)

    def _compact(self) -> None:
        if self._out is not None:
            self._out.close()
        # an open transaction no one ended in a day is the broker's check service's by now
        stale = int(time.time() * 1000) - TRANSACTION_KEEP_MS
        self.transactions = {t: v for t, v in self.transactions.items() if v[4] > stale}
        self._lines = self._live()
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for qk, n in self.cursors.items():
                f.write(self._cursor_line(qk, n))
            for k, e in self.inflight.items():
                f.write(self._pop_line(k, e))
            for t, v in self.transactions.items():
                f.write(json.dumps({"op": "t", "k": t, "v": v}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._out = open(self.path, "a", encoding="utf-8")

    @staticmethod
    def _cursor_line(qk: QueueKey, n: int) -> str:
        return json.dumps({"op": "c", "k": list(qk), "n": n}) + "\n"

    @staticmethod
    def _pop_line(k: Key, e: InFlight) -> str:
        return json.dumps({"op": "p", "k": list(k), "pt": e.pop_time, "v": e.visible_at,
                           "a": e.attempt, "cl": e.commit_log_offset}) + "\n"

    def _write(self, lines: list[str]) -> None:
        assert self._out is not None
        self._out.write("".join(lines))
        self._out.flush()
        self._lines += len(lines)
        if self._lines > COMPACT_MIN_LINES and self._lines > 4 * self._live():
            self._compact()

    def _set(self, k: Key, e: InFlight) -> None:
        self.inflight[k] = e
        self._by_queue.setdefault(k[:4], {})[k[4]] = e      # type: ignore[index]
        self._heap.push(e.visible_at, k, len(self.inflight))

    def _del(self, k: Key) -> InFlight | None:
        e = self.inflight.pop(k, None)
        if e is not None:
            q = self._by_queue[k[:4]]                       # type: ignore[index]
            del q[k[4]]
            if not q:
                del self._by_queue[k[:4]]                   # type: ignore[arg-type]
        return e

    def _live(self) -> int:
        return len(self.cursors) + len(self.inflight) + len(self.transactions)

    # -- changes (each one journaled before it returns) ----------------------------------------
    def record_pops(self, cursor: tuple[QueueKey, int] | None,
                    pops: list[tuple[Key, InFlight]], *, sync: bool = False) -> None:
        """Journal a pop (cursor move and new in-flight entries); ``sync``: fsync too."""
        with self._lock:
            lines = []
            if cursor is not None:
                self.cursors[cursor[0]] = cursor[1]
                lines.append(self._cursor_line(*cursor))
            for k, e in pops:
                self._set(k, e)
                lines.append(self._pop_line(k, e))
            self._write(lines)
            if sync and self._out is not None:
                os.fsync(self._out.fileno())

    def set_cursor(self, qk: QueueKey, n: int) -> None:
        self.record_pops((qk, n), [])

    def ack(self, k: Key, pop_time: int, now: int) -> str | None:
        """Drop the entry if the handle (``pop_time``) is current and unexpired; else why not."""
        with self._lock:
            e = self.inflight.get(k)
            if e is None or e.pop_time != pop_time:
                return "receipt handle is expired or already used"
            if e.visible_at <= now:
                return "receipt handle is expired"
            self._del(k)
            self._write([json.dumps({"op": "a", "k": list(k)}) + "\n"])
            return None

    def change_invisible(self, k: Key, pop_time: int, now: int, visible_at: int
                         ) -> InFlight | str:
        """A new invisibility for the entry (a nack): new pop time, the next delivery counts
        as a new attempt."""
        with self._lock:
            e = self.inflight.get(k)
            if e is None or e.pop_time != pop_time:
                return "receipt handle is expired or already used"
            if e.visible_at <= now:
                return "receipt handle is expired"
            e = InFlight(max(now, pop_time + 1), visible_at, e.attempt, e.commit_log_offset)
            self._set(k, e)
            self._write([self._pop_line(k, e)])
            return e

    def extend(self, k: Key, pop_time: int, visible_at: int) -> bool:
        """Move the entry's visibility (auto-renew); its handle stays valid."""
        with self._lock:
            e = self.inflight.get(k)
            if e is None or e.pop_time != pop_time:
                return False
            e.visible_at = visible_at
            self._heap.push(visible_at, k, len(self.inflight))   # the old position goes stale
            self._write([self._pop_line(k, e)])
            return True

    def open_transaction(self, txid: str, broker: str, queue_offset: int, cl_offset: int,
                         offset_msg_id: str) -> None:
        """Remember where a half message is, until EndTransaction (any proxy process)."""
        v = [broker, queue_offset, cl_offset, offset_msg_id, int(time.time() * 1000)]
        with self._lock:
            self.transactions[txid] = v
            self._write([json.dumps({"op": "t", "k": txid, "v": v}) + "\n"])

    def end_transaction(self, txid: str) -> tuple[str, int, int, str] | None:
        with self._lock:
            v = self.transactions.pop(txid, None)
            if v is None:
                return None
            self._write([json.dumps({"op": "te", "k": txid}) + "\n"])
            return v[0], v[1], v[2], v[3]

    def drop(self, k: Key) -> None:
        with self._lock:
            if self._del(k) is not None:
                self._write([json.dumps({"op": "a", "k": list(k)}) + "\n"])

    # -- queries ------------------------------------------------------------------------------
    def queue_entries(self, qk: QueueKey) -> list[tuple[int, InFlight]]:
        """In-flight entries of one queue, by offset (that queue's only: not a scan of all)."""
        with self._lock:
            return sorted(self._by_queue.get(qk, {}).items())

    def next_visible(self) -> int | None:
        """The earliest time an entry becomes visible (None: nothing in flight), from the
        heap: a long-polling receive asks this every round, so it must not scan."""
        with self._lock:
            top = self._heap.first()
            return None if top is None else top[0]

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
