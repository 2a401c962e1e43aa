# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# The transient-pool commit (docs/format.md §4.5): new files borrow a write buffer; puts
# append there and a GIL-free commit service copies them into the file.


cdef class _PoolCommit(_LogCore):
    """CommitLog's transient-pool layer: the GIL-free commit service and its wake-ups."""
    # transient store pool (docs/format.md §4.5): new files borrow a write buffer; the commit
    # service copies appends into the file. Puts wake it once enough bytes wait.
    cdef readonly object pool
    cdef bint _pool_fast_fail
    cdef pthread_mutex_t commit_mu
    cdef pthread_cond_t commit_cv
    cdef Py_ssize_t commit_want         # the commit service sleeps until this many bytes wait
    cdef bint commit_stop
    cdef pthread_mutex_t copy_mu        # one committer at a time (service, or a rolling writer)
    cdef Py_ssize_t _rolls              # rolls away from a buffered file (under the put lock)
    cdef Py_ssize_t _rolls_seen         # ... whose files the Python path has committed
    cdef readonly int64_t commit_rounds     # GIL-free rounds that committed bytes
    cdef readonly int64_t committed_bytes

    def __cinit__(self):
        pthread_mutex_init(&self.commit_mu, NULL)
        pthread_cond_init(&self.commit_cv, NULL)
        pthread_mutex_init(&self.copy_mu, NULL)

    def __dealloc__(self):
        pthread_cond_destroy(&self.commit_cv)
        pthread_mutex_destroy(&self.commit_mu)
        pthread_mutex_destroy(&self.copy_mu)

    def set_transient_pool(self, pool, bint fast_fail=False):
        """Lend a write buffer of ``pool`` to every new file (``pool.lend(mf)``); with
        ``fast_fail`` a put that needs a new file while no buffer is free is refused with
        OS_PAGE_CACHE_BUSY instead of committing the full files itself to free one."""
        self.pool = pool
        self._pool_fast_fail = fast_fail
        pool.commit_lock = _CopyGuard(self)

    def commit_loop(self, int64_t interval_ms, Py_ssize_t least_bytes):
        """The commit service's steady state, GIL-free: sleep until ``least_bytes`` wait in
        the current file's write buffer (a put signals) or ``interval_ms`` passes, then copy
        them into the file (pwrite) and publish the committed position; repeat.

        Returns 0 when stopped, 1 when a round needs the Python path (files before the current
        one still hold buffers, or the current one is full and gives its buffer back), 2 when
        bytes were committed while the dispatcher sleeps (wake it), -errno when pwrite failed.
        """
        cdef timespec deadline
        cdef int rc = 0, timed_out
        cdef Py_ssize_t start, end, rolls
        cdef char *wbase
        cdef int fd
        cdef Py_ssize_t *wrote_p
        cdef Py_ssize_t *comm_p
        cdef Py_ssize_t size
        with nogil:
            while True:
                # a snapshot of the current file (it changes under the put lock only)
                pthread_mutex_lock(&self.put_lock)
                rolls = self._rolls
                wbase = self._cur_wbase
                fd = self._cur_fd
                wrote_p = self._cur_wrote
                comm_p = self._cur_committed
                size = self._cur_size
                pthread_mutex_unlock(&self.put_lock)
                if rolls != self._rolls_seen:
                    rc = 1
                    break
                timed_out = 0
                if wbase == NULL or rs_load_acquire(wrote_p) - comm_p[0] < least_bytes:
                    _deadline_in(&deadline, interval_ms)
                    pthread_mutex_lock(&self.commit_mu)
                    if not self.commit_stop:
                        self.commit_want = least_bytes if least_bytes > 0 else 1
                        timed_out = pthread_cond_timedwait(&self.commit_cv, &self.commit_mu,
                                                           &deadline) != 0
                        self.commit_want = 0
                    pthread_mutex_unlock(&self.commit_mu)
                if self.commit_stop:
                    rc = 0
                    break
                if wbase == NULL:
                    continue
                if sync_hook_active():
                    rc = 1          # a test's hook sees (or fails) each commit: Python path
                    break
                pthread_mutex_lock(&self.copy_mu)
                if self._rolls != rolls:
                    # a roll since the snapshot: its writer may have committed (and re-lent)
                    # the buffer; take a fresh snapshot
                    pthread_mutex_unlock(&self.copy_mu)
                    continue
                start = comm_p[0]
                end = rs_load_acquire(wrote_p)
                rc = 0
                if end > start and (timed_out or end - start >= least_bytes or end == size):
                    rc = rs_pwrite_all(fd, wbase + start, <size_t>(end - start), start)
                    if rc == 0:
                        rs_store_release(comm_p, end)
                        self.commit_rounds += 1
                        self.committed_bytes += end - start
                pthread_mutex_unlock(&self.copy_mu)
                if rc != 0:
                    break
                if end == size:
                    rc = 1          # full and committed: the Python path gives the buffer back
                    break
                if end > start and self._armed:
                    self._armed = False
                    rc = 2
                    break
        return rc

    @property
    def rolls(self):
        return self._rolls

    def set_rolls_seen(self, Py_ssize_t rolls):
        """Files lent before roll number ``rolls`` are committed (the Python path)."""
        self._rolls_seen = rolls

    # -- the commit service -----------------------------------------------------------------

    def stop_commit(self):
        with nogil:
            pthread_mutex_lock(&self.commit_mu)
            self.commit_stop = True
            pthread_cond_broadcast(&self.commit_cv)
            pthread_mutex_unlock(&self.commit_mu)

    @cython.final
    cdef inline void _maybe_wake_commit(self, MappedFile mf) noexcept:
        # a plain read of commit_want: a put racing the service's next sleep at worst leaves
        # the bytes to the commit interval (the next put past the mark signals again)
        if self.commit_want > 0 and (mf.wrote_pos - mf.committed_pos >= self.commit_want
                                     or mf.wrote_pos == mf.file_size):
            with nogil:
                pthread_mutex_lock(&self.commit_mu)
                if self.commit_want > 0:
                    self.commit_want = 0
                    pthread_cond_signal(&self.commit_cv)
                pthread_mutex_unlock(&self.commit_mu)


@cython.final
cdef class _CopyGuard:
    """The commit log's copy lock as a context manager, for the pool's Python commits: the
    GIL-free commit loop and a rolling writer must never copy the same file at once."""
    cdef _PoolCommit cl

    def __cinit__(self, _PoolCommit cl):
        self.cl = cl

    def __enter__(self):
        with nogil:
            pthread_mutex_lock(&self.cl.copy_mu)
        return self

    def __exit__(self, *exc):
        pthread_mutex_unlock(&self.cl.copy_mu)
        return False
