"""RebalanceLockManager: which client consumes a queue orderly (MESSAGING.md 6.2).

group -> MessageQueue -> (client id, last update). A lock not refreshed for 60 s
(``rebalance_lock_max_live_time``) is expired and may be taken by another client. Memory only:
a restarted broker has no locks.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from rocketstore.broker.channels import now_ms
from rocketstore.common.protocol import MessageQueue

log = logging.getLogger("rocketstore.broker.locks")


class _LockEntry:
    __slots__ = ("client_id", "last_update_timestamp")

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.last_update_timestamp = now_ms()


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = 60_000) -> None:
        self.max_live_time_ms = max_live_time_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def _expired(self, e: _LockEntry, now: int) -> bool:
        return now - e.last_update_timestamp > self.max_live_time_ms

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue],
                       client_id: str) -> set[MessageQueue]:
        """Lock what this client may hold: its own unexpired locks (refreshed), free queues,
        and queues whose holder's lock expired. Returns the queues locked by it."""
        locked: set[MessageQueue] = set()
        now = now_ms()
        with self._lock:
            table = self._table.setdefault(group, {})
            for mq in mqs:
                e = table.get(mq)
                if e is None:
                    table[mq] = _LockEntry(client_id)
                    locked.add(mq)
                elif e.client_id == client_id and not self._expired(e, now):
                    e.last_update_timestamp = now
                    locked.add(mq)
                elif self._expired(e, now):
                    log.info("lock of %s in group %s: expired holder %s replaced by %s",
                             mq, group, e.client_id, client_id)
                    e.client_id = client_id
                    e.last_update_timestamp = now
                    locked.add(mq)
                else:
                    log.warning("lock of %s in group %s refused to %s: held by %s",
                                mq, group, client_id, e.client_id)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues this client holds; others' locks stay."""
        with self._lock:
            table = self._table.get(group)
            if table is None:
                return
            for mq in mqs:
                e = table.get(mq)
                if e is not None and e.client_id == client_id:
                    del table[mq]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        with self._lock:
            e = self._table.get(group, {}).get(mq)
            return e is not None and e.client_id == client_id and not self._expired(e, now_ms())
