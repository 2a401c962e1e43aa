"""SYNC_MASTER's wait for the slave (RocketMQ 4.9.8 ``GroupTransferService`` and
``CommitLog.submitReplicaRequest``, docs/replication.md §4).

A waiting put (``WAIT`` not false) hands its result here with the offset its record ends at
(``defer``, called by the commit log's ``put_*_async`` while ``wait_replica`` is set):

* no slave connected, or the slaves more than ``haSlaveFallbehindMax`` behind: completed at
  once with SLAVE_NOT_AVAILABLE (after the flush under SYNC_FLUSH);
* otherwise this thread completes it once a slave acknowledged that offset (PUT_OK), or after
  ``slaveTimeout`` with FLUSH_SLAVE_TIMEOUT -- every future the acknowledgement covers at once,
  a whole group per wake-up, as the sync flush's ``FlushAckService`` does.

Under SYNC_FLUSH too, the disk wait runs in parallel (the flush is requested at once) and the
statuses combine as 4.9.8's ``thenCombine``: a flush timeout gives FLUSH_DISK_TIMEOUT, and a
replica failure wins over it. The record is stored on the master whatever the status.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.store._commitlog import done_future, pending_future
from rocketstore.store.flush import settle, take_due
from rocketstore.store.status import PutMessageStatus

if TYPE_CHECKING:
    from rocketstore.ha.service import HAService

SLAVE_NOT_AVAILABLE = PutMessageStatus.SLAVE_NOT_AVAILABLE
FLUSH_SLAVE_TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT


class ReplicaAckService:
    """The ``acks`` of a SYNC_MASTER's puts (same interface as ``FlushAckService``)."""

    def __init__(self, service: HAService) -> None:
        self.service = service
        self.commit_log = service.commit_log
        self.flush_ack = service.store.flush_ack
        self.timeout = service.config.slave_timeout / 1000.0
        self.flush_timeout = service.store.config.sync_flush_timeout / 1000.0
        self._pending: deque = deque()      # (end, result, future, deadline, transform, t0)
        self._cond = threading.Condition()
        self._idle = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.groups = 0

    @staticmethod
    def completed(result: Any, transform: Callable | None = None) -> Future:
        return done_future(result if transform is None else transform(result))

    def _forced(self, status: Any, transform: Callable | None) -> Callable:
        set_status = self.commit_log.set_put_status

        def apply(r: Any) -> Any:
            set_status(r, status)       # after the flush's verdict: the replica's wins
            return r if transform is None else transform(r)
        return apply

    def defer(self, result: Any, end: int, transform: Callable | None = None) -> Future:
        svc = self.service
        if not svc.is_slave_ok(end):
            if self.commit_log.sync_flush:
                return self.flush_ack.defer(result, end, self._forced(SLAVE_NOT_AVAILABLE,
                                                                      transform))
            self.commit_log.set_put_status(result, SLAVE_NOT_AVAILABLE)
            return self.completed(result, transform)
        if svc.push2slave_max_offset >= end:
            if self.commit_log.sync_flush:
                return self.flush_ack.defer(result, end, transform)
            return self.completed(result, transform)
        fut = pending_future()
        now = time.monotonic()
        self._pending.append((end, result, fut, now + self.timeout, transform, now))
        if self.commit_log.sync_flush:
            self.commit_log.request_flush(end)      # the disk wait runs meanwhile
        svc.wakeup_writers()
        if self._idle:
            with self._cond:
                self._cond.notify()
        if self._stopped:
            self._complete(self._take(svc.push2slave_max_offset, True))
        return fut

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="GroupTransferService",
                                        daemon=True)
        self._thread.start()

    def _take(self, acked: int, fail_all: bool) -> list:
        return take_due(self._pending, self._cond, acked, fail_all)

    def _complete(self, done: list) -> None:
        if not done:
            return
        acked = self.service.push2slave_max_offset
        cl = self.commit_log
        flushed = None
        if cl.sync_flush:
            # the parallel disk wait: the group's last record, until the oldest's deadline
            last = max(e[0] for e in done)
            left = max(0.0, done[0][5] + self.flush_timeout - time.monotonic())
            flushed, _, _ = cl.wait_flushed(last, int(left * 1000))
        for end, result, fut, _, transform, _ in done:
            if flushed is not None and end > flushed:
                cl.mark_not_durable(result)
            if end > acked:
                cl.set_put_status(result, FLUSH_SLAVE_TIMEOUT)
            settle(fut, result, transform)
        self.groups += 1

    def _run(self) -> None:
        pending = self._pending
        svc = self.service
        while True:
            if not pending and not self._stopped:
                with self._cond:
                    self._idle = True
                    while not pending and not self._stopped:
                        self._cond.wait()
                    self._idle = False
            try:
                end, _, _, deadline, _, _ = pending[0]
            except IndexError:
                if self._stopped:
                    return
                continue
            stopping = self._stopped
            acked = svc.wait_acked(end, deadline - time.monotonic())
            self._complete(self._take(acked, stopping))

    def shutdown(self) -> None:
        """Complete every waiting put (FLUSH_SLAVE_TIMEOUT unless acknowledged) and stop."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._complete(self._take(self.service.push2slave_max_offset, True))
