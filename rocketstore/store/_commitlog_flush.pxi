# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# Group commit and the sync flush (docs/format.md §4.5 GroupCommitService).


cdef class _GroupCommit(_PoolCommit):
    """CommitLog's sync-flush layer: the GIL-free group commit, and the producers' wait for it."""
    # group commit (docs/format.md §4.5 GroupCommitService): sync puts wait here without the GIL
    # until the flusher has synced past their record; one sync serves every waiter
    cdef pthread_mutex_t flush_mu
    cdef pthread_cond_t flushed_cv      # producers wait for flushed_offset
    cdef pthread_cond_t request_cv      # the flusher waits for request_offset
    cdef int64_t request_offset
    cdef int64_t flushed_offset
    cdef bint flush_failed              # sticky: the flushed offset never passes a failed sync
    cdef int sync_waiters               # producers inside _await_flush (under flush_mu)
    cdef bint flusher_stop
    cdef readonly bint sync_flush
    cdef public bint wait_replica       # SYNC_MASTER: waiting async puts go to acks.defer too
    cdef readonly int64_t sync_flush_timeout_ms
    cdef readonly object flush_error
    cdef readonly int64_t flushed_store_timestamp  # store time of the last record synced
    cdef readonly int64_t sync_count

    def __cinit__(self):
        pthread_mutex_init(&self.flush_mu, NULL)
        pthread_cond_init(&self.flushed_cv, NULL)
        pthread_cond_init(&self.request_cv, NULL)

    def __dealloc__(self):
        pthread_cond_destroy(&self.flushed_cv)
        pthread_cond_destroy(&self.request_cv)
        pthread_mutex_destroy(&self.flush_mu)

    def group_commit(self):
        """The group-commit loop, GIL-free: wait for a request, msync everything committed in
        the current file since the flushed offset, publish, wake the waiters, repeat.

        Without a request it still wakes every ``FLUSH_TICK_MS`` and syncs what was written
        meanwhile, as RocketMQ's GroupCommitService does: puts that do not wait (``WAIT=false``,
        the broker's own re-puts) become durable within a tick even when nobody asks.

        Returns 0 when stopped, 1 when a round needs the GIL path (the range spans files),
        or -errno when msync failed (the caller makes that sticky)."""
        cdef int rc = 0
        cdef int64_t start_off, comm_end, ts
        cdef char *base
        cdef int64_t base_from
        cdef bint ticked
        cdef timespec deadline
        with nogil:
            while True:
                pthread_mutex_lock(&self.flush_mu)
                ticked = False
                while (self.request_offset <= self.flushed_offset and not self.flusher_stop
                       and not self.flush_failed):
                    _deadline_in(&deadline, FLUSH_TICK_MS)
                    if pthread_cond_timedwait(&self.request_cv, &self.flush_mu, &deadline) != 0:
                        ticked = True
                        break
                if self.flusher_stop or self.flush_failed:
                    pthread_mutex_unlock(&self.flush_mu)
                    rc = 0
                    break
                start_off = self.flushed_offset
                pthread_mutex_unlock(&self.flush_mu)
                # a consistent view of the current file: it only changes under the put lock
                pthread_mutex_lock(&self.put_lock)
                base = self._cur_base
                base_from = self._cur_from
                comm_end = base_from + rs_load_acquire(self._cur_committed) if base != NULL else 0
                ts = self._cur_store_ts[0] if base != NULL else 0
                pthread_mutex_unlock(&self.put_lock)
                if ticked and (base == NULL or comm_end <= start_off):
                    continue        # a tick with nothing written since the last sync
                if base == NULL or start_off < base_from or sync_hook_active():
                    rc = 1          # spans a roll, or a test hook: the GIL path syncs this round
                    break
                if comm_end > start_off:
                    rc = rs_msync(base + (start_off - base_from), <size_t>(comm_end - start_off))
                    if rc != 0:
                        break
                pthread_mutex_lock(&self.flush_mu)
                if comm_end > self.flushed_offset:
                    self.flushed_offset = comm_end
                    self.flushed_store_timestamp = ts
                    self.sync_count += 1
                pthread_cond_broadcast(&self.flushed_cv)
                pthread_mutex_unlock(&self.flush_mu)
        return rc

    # -- group commit ------------------------------------------------------------------------

    def enable_sync_flush(self, int64_t timeout_ms, int64_t flushed_offset):
        """Sync puts from now on: each waits until ``flushed_offset`` passes its record."""
        self.sync_flush = True
        self.sync_flush_timeout_ms = timeout_ms
        self.flushed_offset = flushed_offset
        self.request_offset = flushed_offset

    def wait_flush_request(self, int64_t timeout_ms=-1):
        """The flusher's wait (GIL released): the offset producers wait for, or -1 to stop;
        after ``timeout_ms`` (when >= 0) without a request, the flushed offset."""
        cdef int64_t r
        cdef timespec deadline
        if timeout_ms >= 0:
            _deadline_in(&deadline, timeout_ms)
        with nogil:
            pthread_mutex_lock(&self.flush_mu)
            while self.request_offset <= self.flushed_offset and not self.flusher_stop:
                if timeout_ms < 0:
                    pthread_cond_wait(&self.request_cv, &self.flush_mu)
                elif pthread_cond_timedwait(&self.request_cv, &self.flush_mu, &deadline) != 0:
                    break
            r = self.request_offset if self.request_offset > self.flushed_offset else self.flushed_offset
            if self.flusher_stop:
                r = -1
            pthread_mutex_unlock(&self.flush_mu)
        return r

    def set_flushed(self, int64_t offset):
        """Publish that everything below ``offset`` is durable; wakes the waiting producers."""
        with nogil:
            pthread_mutex_lock(&self.flush_mu)
            if offset > self.flushed_offset and not self.flush_failed:
                self.flushed_offset = offset
            pthread_cond_broadcast(&self.flushed_cv)
            pthread_mutex_unlock(&self.flush_mu)

    def set_flush_error(self, error):
        """A sync failed: sticky. Waiting and later sync puts fail; every put is refused."""
        self.flush_error = error
        self._not_writeable = error
        with nogil:
            pthread_mutex_lock(&self.flush_mu)
            self.flush_failed = True
            pthread_cond_broadcast(&self.flushed_cv)
            pthread_mutex_unlock(&self.flush_mu)

    def stop_flusher(self):
        with nogil:
            pthread_mutex_lock(&self.flush_mu)
            self.flusher_stop = True
            pthread_cond_broadcast(&self.request_cv)
            pthread_cond_broadcast(&self.flushed_cv)
            pthread_mutex_unlock(&self.flush_mu)

    @property
    def flushed_where(self):
        return self.flushed_offset

    @cython.final
    cdef int _await_flush(self, int64_t target) noexcept nogil:
        """0 once durable past ``target``, -1 on timeout, -2 after a failed sync."""
        cdef timespec deadline
        cdef int rc = 0
        _deadline_in(&deadline, self.sync_flush_timeout_ms)
        cdef int i
        pthread_mutex_lock(&self.flush_mu)
        if self.request_offset < target:
            self.request_offset = target
            pthread_cond_signal(&self.request_cv)
        self.sync_waiters += 1
        if self.sync_waiters > SPIN_WAITERS:
            # many producers wait: poll, yielding the CPU, before sleeping. Sleepers woken by
            # the flush each need a wake-up and then the GIL in turn; on a VM an idle vCPU's
            # wake-up costs tens of us, so busy waiters refill the next group much sooner
            # (64 producers: ~1.6x msgs/s here). One producer gains nothing: it just sleeps.
            pthread_mutex_unlock(&self.flush_mu)
            for i in range(SPIN_YIELDS):
                if (rs_load_acquire(<Py_ssize_t *>&self.flushed_offset) >= target
                        or self.flush_failed or self.flusher_stop):
                    break
                sched_yield()
            pthread_mutex_lock(&self.flush_mu)
        while self.flushed_offset < target and not self.flush_failed and not self.flusher_stop:
            if pthread_cond_timedwait(&self.flushed_cv, &self.flush_mu, &deadline) != 0:
                break
        rc = 0 if self.flushed_offset >= target else (-2 if self.flush_failed else -1)
        self.sync_waiters -= 1
        pthread_mutex_unlock(&self.flush_mu)
        return rc

    @cython.final
    cdef PutMessageResult _sync_result(self, PutMessageResult r, int64_t target):
        cdef int rc
        with nogil:
            rc = self._await_flush(target)
        if rc == -1:
            r.status = FLUSH_DISK_TIMEOUT
        elif rc == -2:
            r.status = FLUSH_DISK_TIMEOUT
            r.error = self.flush_error
        return r

    def request_flush(self, int64_t target):
        """Ask the group-commit service to make everything below ``target`` durable."""
        # the GIL stays held: whoever holds flush_mu never needs it, and releasing it per put
        # would hand it to the acknowledging thread between every two puts
        pthread_mutex_lock(&self.flush_mu)
        if self.request_offset < target:
            self.request_offset = target
            pthread_cond_signal(&self.request_cv)
        pthread_mutex_unlock(&self.flush_mu)

    def wait_flushed(self, int64_t target, int64_t timeout_ms):
        """Wait (GIL released) until the flushed offset reaches ``target``, a sync fails, the
        flusher stops or ``timeout_ms`` passes. Returns (flushed offset, failed, stopped)."""
        cdef timespec deadline
        cdef int64_t flushed
        cdef bint failed, stopped
        _deadline_in(&deadline, timeout_ms)
        with nogil:
            pthread_mutex_lock(&self.flush_mu)
            while (self.flushed_offset < target and not self.flush_failed
                   and not self.flusher_stop):
                if pthread_cond_timedwait(&self.flushed_cv, &self.flush_mu, &deadline) != 0:
                    break
            flushed = self.flushed_offset
            failed = self.flush_failed
            stopped = self.flusher_stop
            pthread_mutex_unlock(&self.flush_mu)
        return flushed, failed, stopped

    def mark_not_durable(self, PutMessageResult r):
        """What a sync put answers when its flush did not come: FLUSH_DISK_TIMEOUT, with the
        failed sync's error if there was one."""
        r.status = FLUSH_DISK_TIMEOUT
        r.error = self.flush_error
