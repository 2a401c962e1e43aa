# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# Fault-ahead: a GIL-free thread faults the current file's pages in ahead of the writer.


cdef class _FaultAhead(_GroupCommit):
    """CommitLog's fault-ahead layer: puts ask, the fault-ahead thread faults pages in."""
    cdef pthread_mutex_t fault_mu
    cdef pthread_cond_t fault_cv
    cdef int64_t fault_want             # pages are wanted up to this commit-log offset
    cdef int64_t fault_next             # a put ending past this offset asks for more
    cdef int64_t fault_window           # how far ahead of the writer; 0: off
    cdef bint fault_stop
    cdef readonly int64_t faulted_bytes # statistics: bytes faulted in ahead of the writer

    def __cinit__(self):
        pthread_mutex_init(&self.fault_mu, NULL)
        pthread_cond_init(&self.fault_cv, NULL)

    def __dealloc__(self):
        pthread_cond_destroy(&self.fault_cv)
        pthread_mutex_destroy(&self.fault_mu)

    # -- fault-ahead -------------------------------------------------------------------------

    def enable_fault_ahead(self, int64_t window):
        """Have puts ask ``fault_ahead_loop`` to keep ``window`` bytes ahead of the writer
        faulted in (0 turns it off). Files not warmed at allocation otherwise take a page
        fault -- a zero-filled page and a block reservation -- on the putting thread for
        every 4 KiB written: the largest cost of a put of a small message."""
        self.fault_window = window
        self.fault_next = 0
        if window and self.cur is not None:
            self._fault_request(self.cur.file_from_offset + self.cur.wrote_pos)   # from now

    @cython.final
    cdef void _fault_request(self, int64_t end) noexcept:
        self.fault_next = end + FAULT_STEP
        pthread_mutex_lock(&self.fault_mu)      # held briefly by both sides: never a wait
        if end + self.fault_window > self.fault_want:
            self.fault_want = end + self.fault_window
            pthread_cond_signal(&self.fault_cv)
        pthread_mutex_unlock(&self.fault_mu)

    def fault_ahead_loop(self):
        """The fault-ahead thread's loop, GIL-free: wait for a request, fault the current
        file's pages from where the last round stopped up to the wanted offset in
        (MADV_POPULATE_WRITE: the bytes are not touched, so a writer overtaking it is safe),
        repeat. Returns 0 when stopped, -errno when the kernel cannot do it."""
        cdef int64_t done = 0, seen = 0, want, start, stop, end, base_from
        cdef bint stopping = False
        cdef char *base
        cdef char *wbase
        cdef Py_ssize_t size
        cdef int rc = 0
        with nogil:
            while True:
                pthread_mutex_lock(&self.fault_mu)
                # a new request each time (the part of a window past the file's end waits for
                # the request a put makes once it has rolled into the next file)
                while self.fault_want == seen and not self.fault_stop:
                    pthread_cond_wait(&self.fault_cv, &self.fault_mu)
                want = self.fault_want
                if self.fault_stop:
                    pthread_mutex_unlock(&self.fault_mu)
                    break
                pthread_mutex_unlock(&self.fault_mu)
                # the current file only changes under the put lock; it stays mapped while the
                # store is open (the store stops this thread before unmapping anything)
                pthread_mutex_lock(&self.put_lock)
                base = self._cur_base
                wbase = self._cur_wbase
                base_from = self._cur_from
                size = self._cur_size
                if base != NULL and self._cur_alloc[0] < size:
                    size = self._cur_alloc[0]   # never fault pages into the unallocated part
                pthread_mutex_unlock(&self.put_lock)
                if base != NULL and wbase == NULL:      # a pool buffer takes the writes: none
                    start = done if done > base_from else base_from
                    start -= (start - base_from) % FAULT_PAGE
                    stop = want if want < base_from + size else base_from + size
                    # FAULT_STEP at a time, so a stop waits for one step at most, not for a
                    # whole window (close() of a store that just took a bulk append)
                    while stop > start:
                        end = start + FAULT_STEP if stop - start > FAULT_STEP else stop
                        rc = rs_populate_write(base + (start - base_from), <size_t>(end - start))
                        if rc == -22 or rc == -38:      # EINVAL, ENOSYS: not this kernel
                            break
                        rc = 0                          # EFAULT/ENOMEM: the next round retries
                        self.faulted_bytes += end - start
                        done = start = end
                        pthread_mutex_lock(&self.fault_mu)
                        stopping = self.fault_stop
                        pthread_mutex_unlock(&self.fault_mu)
                        if stopping:
                            break
                    if rc != 0 or stopping:
                        break
                seen = want
        return rc

    def stop_fault_ahead(self):
        self.fault_window = 0
        with nogil:
            pthread_mutex_lock(&self.fault_mu)
            self.fault_stop = True
            pthread_cond_broadcast(&self.fault_cv)
            pthread_mutex_unlock(&self.fault_mu)
