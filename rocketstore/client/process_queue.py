"""``ProcessQueue``: a consumer's cache of one queue's pulled, unfinished messages (§4.7, §5.3).

Offsets enter in increasing order (each pull starts where the previous one ended), so the tree
of RocketMQ is a dict (offset -> message) plus a deque of offsets in order: the smallest offset
still in flight is the deque's head once finished offsets are popped from it, amortised O(1).
``ConcurrentProcessQueue`` (a concurrent push consumer's) keeps whole pulls instead
(``PullCache``, in C): no Python object or dict entry per cached message.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Iterable

from rocketstore.common import MessageExt
from rocketstore.store._codec import PullCache, cache_pull, drop_consumed, first_in_flight

# rocketmq.client.rebalance.lockMaxLiveTime / pull.pullMaxIdleTime
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 30000
PULL_MAX_IDLE_TIME_MS = 120000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ProcessQueue:
    """Pulled messages of one queue not yet finished, with the counters flow control reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._init_cache()
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = now_ms()
        self.last_pull_timestamp = now_ms()
        self.last_consume_timestamp = now_ms()
        self.consuming = False                 # orderly: a consume task runs for the queue
        self.consume_lock = threading.Lock()   # orderly: held while the listener runs
        self.reconsume: dict[int, int] = {}    # orderly: in-memory reconsume times by offset
        self.parked_pull: object | None = None  # a pull held back by flow control

    def _init_cache(self) -> None:
        self._tree: dict[int, MessageExt] = {}
        self._order: collections.deque[int] = collections.deque()
        self._consuming: dict[int, MessageExt] = {}     # orderly: taken, not committed
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    # -- concurrent and orderly: put ---------------------------------------------------------
    def put_message(self, msgs: list[MessageExt]) -> bool:
        """Add pulled messages (an offset already present is ignored). True when an orderly
        consume task should be dispatched (messages waiting and none running)."""
        with self._lock:
            tree, order = self._tree, self._order
            last = order[-1] if order else -1
            # the usual pull: offsets after everything cached (every cached offset is in the
            # deque, which ascends), none taken by an orderly consume: in bulk, in C
            bulk = cache_pull(tree, order, msgs, last) if msgs and not self._consuming else None
            if bulk is not None:
                n, size, top = bulk
                self.msg_count += n
                self.msg_size += size
                if top > self.queue_offset_max:
                    self.queue_offset_max = top
                dispatch = not self.consuming
                if dispatch:
                    self.consuming = True
                return dispatch
            added = 0
            size = 0
            resort = False
            for m in msgs:
                off = m.queue_offset
                if off in tree or off in self._consuming:
                    continue
                tree[off] = m
                if off <= last:
                    resort = True
                order.append(off)
                last = off
                added += 1
                size += m.body_size
            if resort:                # offsets put back out of order (a reset): re-sort once
                self._order = collections.deque(sorted(o for o in set(order) if o in tree))
            self.msg_count += added
            self.msg_size += size
            if msgs:
                self.queue_offset_max = max(self.queue_offset_max, msgs[-1].queue_offset)
            dispatch = bool(tree) and not self.consuming
            if dispatch:
                self.consuming = True
            return dispatch

    def _first_key(self) -> int | None:
        first = first_in_flight(self._order, self._tree)     # pops the finished head
        return first if first >= 0 else None

    # -- concurrent ---------------------------------------------------------------------------
    def remove_message(self, msgs: Iterable[MessageExt]) -> int:
        """Drop finished messages; the offset to commit: the smallest still in flight, or
        ``queue_offset_max + 1`` when none is; -1 when the cache was already empty."""
        with self._lock:
            tree = self._tree
            if not tree:
                return -1
            removed, size = drop_consumed(tree, msgs)
            self.msg_count -= removed
            self.msg_size -= size
            self.last_consume_timestamp = now_ms()
            first = first_in_flight(self._order, tree)
            return first if first >= 0 else self.queue_offset_max + 1

    def max_span(self) -> int:
        """Last minus first cached offset (concurrent flow control: ``consumeConcurrentlyMaxSpan``)."""
        with self._lock:
            first = self._first_key()
            if first is None:
                return 0
            while self._order and self._order[-1] not in self._tree:
                self._order.pop()
            return self._order[-1] - first

    # -- orderly ------------------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` lowest-offset messages into the consuming map; when none is
        left, mark the queue not consuming (the next put dispatches a task)."""
        with self._lock:
            out: list[MessageExt] = []
            self.last_consume_timestamp = now_ms()
            while len(out) < batch_size:
                first = self._first_key()
                if first is None:
                    break
                self._order.popleft()
                m = self._tree.pop(first)
                self._consuming[first] = m
                out.append(m)
            if not out:
                self.consuming = False
            return out

    def commit(self) -> int:
        """Orderly success: forget the taken messages; the offset to commit (last + 1), or -1."""
        with self._lock:
            if not self._consuming:
                return -1
            last = max(self._consuming)
            self.msg_count -= len(self._consuming)
            self.msg_size -= sum(m.body_size for m in self._consuming.values())
            for off in self._consuming:
                self.reconsume.pop(off, None)
            self._consuming.clear()
            return last + 1

    def make_message_to_consume_again(self, msgs: list[MessageExt]) -> None:
        """Orderly suspend: the taken messages go back to the head of the cache, in order."""
        with self._lock:
            for m in sorted(msgs, key=lambda x: x.queue_offset, reverse=True):
                off = m.queue_offset
                if self._consuming.pop(off, None) is not None:
                    self._tree[off] = m
                    self._order.appendleft(off)

    def rollback(self) -> None:
        with self._lock:
            taken = list(self._consuming.values())
        self.make_message_to_consume_again(taken)

    # -- flow control -------------------------------------------------------------------------
    def park_pull(self, request: object) -> None:
        """Hold the queue's pull request until consumption makes room (``take_parked_pull``)."""
        with self._lock:
            self.parked_pull = request

    def take_parked_pull(self) -> object | None:
        """The held pull request, once: whoever takes it sends it."""
        with self._lock:
            r, self.parked_pull = self.parked_pull, None
            return r

    # -- lifecycle ----------------------------------------------------------------------------
    def has_temp_message(self) -> bool:
        with self._lock:
            return bool(self._tree) or bool(self._consuming)

    def is_lock_expired(self) -> bool:
        return now_ms() - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME_MS

    def is_pull_expired(self) -> bool:
        return now_ms() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME_MS

    def clear(self) -> None:
        with self._lock:
            self._tree.clear()
            self._order.clear()
            self._consuming.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0

    def cached_offsets(self) -> list[int]:
        """Offsets in the cache, smallest first (tests and diagnostics)."""
        with self._lock:
            return sorted(self._tree)


_ORDERLY_ONLY = "a concurrent consumer's ProcessQueue has no orderly take/commit"


class ConcurrentProcessQueue(ProcessQueue):
    """A concurrent push consumer's ``ProcessQueue``: the same counters and answers, the
    messages kept as whole pulls with a finished flag each (``PullCache``). Every change to
    the cache is one ``PullCache`` call, which holds the GIL throughout: no lock is taken.
    Orderly consumption's take/commit/put-back are ``ProcessQueue``'s alone."""

    def _init_cache(self) -> None:
        self._flight = PullCache()

    @property
    def msg_count(self) -> int:          # type: ignore[override]
        return self._flight.count

    @property
    def msg_size(self) -> int:           # type: ignore[override]
        return self._flight.size

    @property
    def queue_offset_max(self) -> int:   # type: ignore[override]
        return self._flight.top_put

    def put_message(self, msgs: list[MessageExt]) -> bool:
        """Add pulled messages (an offset already cached is ignored). True when the cache
        holds messages and no consume task was marked running (``consuming``)."""
        self._flight.put(msgs)
        if self._flight.count and not self.consuming:
            self.consuming = True
            return True
        return False

    def remove_message(self, msgs: Iterable[MessageExt]) -> int:
        """Drop finished messages; the offset to commit: the smallest still in flight, or
        ``queue_offset_max + 1`` when none is; -1 when the cache was already empty."""
        offset = self._flight.finish(msgs)
        if offset >= 0:
            self.last_consume_timestamp = now_ms()
        return offset

    def max_span(self) -> int:
        return self._flight.span()

    def has_temp_message(self) -> bool:
        return self._flight.count > 0

    def clear(self) -> None:
        self._flight.clear()

    def cached_offsets(self) -> list[int]:
        return self._flight.offsets()

    # orderly consumption's steps need the per-message tree: ``ProcessQueue`` alone
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        raise TypeError(_ORDERLY_ONLY)

    def commit(self) -> int:
        raise TypeError(_ORDERLY_ONLY)

    def make_message_to_consume_again(self, msgs: list[MessageExt]) -> None:
        raise TypeError(_ORDERLY_ONLY)

    def rollback(self) -> None:
        raise TypeError(_ORDERLY_ONLY)
