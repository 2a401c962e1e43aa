# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# CommitLog's base layer: queue offsets, put results, the put lock and the current
# file as C values, which the GIL-free services read under that lock.

# -- queue offsets ---------------------------------------------------------------------------

@cython.final
cdef class _QueueOffsets:
    """Next queue offset of every queue of one topic (RocketMQ's topicQueueTable row).

    Queue ids below DENSE_QUEUES live in a C array (the put path reads it without a dict
    lookup); larger ids, which a topic rarely has, in a dict, so memory never grows with the
    size of an id. Negative ids are never stored.
    """
    cdef int64_t *offs
    cdef Py_ssize_t n
    cdef dict sparse                    # queue id -> next offset, for ids >= DENSE_QUEUES

    def __dealloc__(self):
        free(self.offs)

    cdef inline int64_t get(self, Py_ssize_t qid) noexcept:
        if 0 <= qid < self.n:
            return self.offs[qid]
        if qid < DENSE_QUEUES or self.sparse is None:
            return 0
        return self.sparse.get(qid, 0)

    cdef int grow(self, Py_ssize_t qid) except -1:
        cdef Py_ssize_t n = min(max(qid + 1, self.n * 2, 8), DENSE_QUEUES)
        cdef int64_t *p = <int64_t *>realloc(self.offs, n * sizeof(int64_t))
        if p == NULL:
            raise MemoryError()
        memset(p + self.n, 0, (n - self.n) * sizeof(int64_t))
        self.offs = p
        self.n = n
        return 0

    cdef inline int set(self, Py_ssize_t qid, int64_t v) except -1:
        if qid < 0:
            raise ValueError(f"queue id {qid} is negative")
        if qid < self.n:
            self.offs[qid] = v
        elif qid < DENSE_QUEUES:
            self.grow(qid)
            self.offs[qid] = v
        else:
            if self.sparse is None:
                self.sparse = {}
            self.sparse[qid] = v
        return 0

    cdef dict items(self):
        cdef dict out = {}
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.offs[i]:
                out[i] = self.offs[i]
        if self.sparse:
            out.update({k: v for k, v in self.sparse.items() if v})
        return out


# -- results ---------------------------------------------------------------------------------

cdef str _joined_msg_ids(bytes host, object offsets):
    """``",".join(format_msg_id(host, o) for o in offsets)`` written into one buffer (a
    batch's result carries one id per message: no str per id, no list)."""
    cdef const int64_t[::1] offs = offsets
    cdef Py_ssize_t n = offs.shape[0], hn = PyBytes_GET_SIZE(host), k, i, one
    cdef const unsigned char *h = <const unsigned char *>PyBytes_AS_STRING(host)
    cdef bytes out
    cdef char *w
    cdef uint64_t off
    if n == 0 or hn > 24:
        return ",".join([format_msg_id(host, o) for o in offsets.tolist()])   # raises
    one = 2 * hn + 16
    out = PyBytes_FromStringAndSize(NULL, n * (one + 1) - 1)
    w = PyBytes_AS_STRING(out)
    for i in range(hn):                 # the host's hex once, copied before every offset
        w[2 * i] = b"0123456789ABCDEF"[h[i] >> 4]
        w[2 * i + 1] = b"0123456789ABCDEF"[h[i] & 15]
    for k in range(n):
        if k:
            w[k * (one + 1) - 1] = b','
            memcpy(w + k * (one + 1), w, <size_t>(2 * hn))
        off = <uint64_t>offs[k]
        for i in range(16):
            w[k * (one + 1) + one - 1 - i] = b"0123456789ABCDEF"[off & 15]
            off >>= 4
    return PyUnicode_DecodeASCII(w, n * (one + 1) - 1, NULL)

@cython.final
@cython.freelist(64)
@cython.no_gc       # status enum, offsets array, host bytes, an exception: no cycles back
cdef class PutMessageResult:
    """Outcome of a put: ``status`` and, when stored, where.

    ``msg_id`` is the offset message id (docs/format.md §7); for a batch, the ids of all its
    messages joined with ``,`` as RocketMQ does. It is built on first access.
    """
    cdef readonly object status
    cdef readonly int queue_id
    cdef readonly int64_t queue_offset
    cdef readonly int64_t commitlog_offset
    cdef readonly Py_ssize_t wrote_bytes
    cdef readonly int64_t store_timestamp
    cdef readonly Py_ssize_t msg_count
    cdef readonly object error          # the exception behind a failed status, or None
    cdef bytes _host_b
    cdef object _offsets                # int64 array of each batch message's offset, or None

    @property
    def ok(self):
        return self.status is PUT_OK

    @property
    def msg_id(self):
        # a stored record has its id whatever the status says: a flush or replica wait that
        # failed (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE) still stored it,
        # and 4.9.8 answers those with msgId/queueId/queueOffset as for SEND_OK
        if self.commitlog_offset < 0:
            return None
        if self._offsets is None:
            return format_msg_id(self._host_b, self.commitlog_offset)
        return _joined_msg_ids(self._host_b, self._offsets)

    @property
    def commitlog_offsets(self):
        """Commit-log offset of every message of the put (one for a single put)."""
        if self._offsets is None:
            return [self.commitlog_offset] if self.commitlog_offset >= 0 else []
        return self._offsets.tolist()

    def __repr__(self):
        return (f"PutMessageResult(status={self.status.name}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
                f"wrote_bytes={self.wrote_bytes}, msg_count={self.msg_count})")


cdef PutMessageResult _failed(object status, object error, int queue_id):
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r.status = status
    r.error = error
    r.queue_id = queue_id
    r.queue_offset = -1
    r.commitlog_offset = -1
    return r


cdef inline PutMessageResult _ok_result(bytes host_b, int32_t queue_id, int64_t queue_offset,
                                        int64_t phy_offset, Py_ssize_t wrote_bytes, int64_t ts,
                                        Py_ssize_t msg_count):
    """A stored put's result: ``msg_count`` records from ``phy_offset`` on, the first at
    ``queue_offset``."""
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r.status = PUT_OK
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.commitlog_offset = phy_offset
    r.wrote_bytes = wrote_bytes
    r.store_timestamp = ts
    r.msg_count = msg_count
    r._host_b = host_b
    return r

cdef inline void _deadline_in(timespec *t, int64_t ms) noexcept nogil:
    # an absolute CLOCK_REALTIME deadline ``ms`` from now, for pthread_cond_timedwait
    clock_gettime(CLOCK_REALTIME, t)
    t.tv_sec += ms // 1000
    t.tv_nsec += (ms % 1000) * 1000000
    if t.tv_nsec >= 1000000000:
        t.tv_sec += 1
        t.tv_nsec -= 1000000000


# -- CommitLog's layers ------------------------------------------------------------------

cdef class _LogCore:
    """CommitLog's first layer: the put lock, the current file as C values and the queue-offset
    table. Cython classes have one base and ``include`` works only at module level, so the
    commit log's concepts are layers of one chain, each in its own file: _LogCore (here),
    _PoolCommit (_commitlog_commit.pxi), _GroupCommit (_commitlog_flush.pxi), _FaultAhead
    (_commitlog_fault.pxi), _LogReader (_commitlog_read.pxi), CommitLog (_commitlog.pyx).
    Their cdef methods are final: a call from a later layer is a direct (inlinable) C call.
    """
    cdef readonly object mapped_file_queue
    cdef MappedFile cur                 # last file, or None before the first put
    cdef pthread_mutex_t put_lock       # a C mutex: no clock read per uncontended acquire
    cdef dict queue_table               # topic str -> _QueueOffsets
    cdef str _last_topic                # one-entry cache in front of queue_table
    cdef _QueueOffsets _last_queues
    cdef bytes store_host_b
    cdef readonly str store_host
    cdef UniqIdGenerator uniq
    cdef readonly Py_ssize_t file_size
    cdef readonly Py_ssize_t max_message_size
    cdef readonly bint closed
    cdef readonly object on_append      # called (no args) after a put once armed, outside the lock
    cdef bint _armed                    # a waiter asked to be woken by the next put
    cdef object _not_writeable          # exception making every put SERVICE_NOT_AVAILABLE
    # the current file as C values, for the GIL-free services (changed under the put lock)
    cdef char *_cur_wbase
    cdef int _cur_fd
    cdef Py_ssize_t _cur_size
    cdef Py_ssize_t *_cur_wrote
    cdef Py_ssize_t *_cur_alloc         # the current file's allocated end (fault-ahead stops there)
    cdef char *_cur_base
    cdef int64_t _cur_from
    cdef Py_ssize_t *_cur_committed
    cdef int64_t *_cur_store_ts

    def __cinit__(self):
        pthread_mutex_init(&self.put_lock, NULL)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.put_lock)

    @cython.final
    cdef void _set_cur(self, MappedFile mf) noexcept:
        # callers hold the put lock (or are single-threaded: open, recovery)
        self.cur = mf
        if mf is None:
            self._cur_base = NULL
            self._cur_committed = NULL
            self._cur_store_ts = NULL
            self._cur_wbase = NULL
        else:
            self._cur_base = mf.base
            self._cur_from = mf.file_from_offset
            self._cur_committed = &mf.committed_pos
            self._cur_store_ts = &mf.store_timestamp
            # the GIL-free commit loop copies from here (NULL: nothing to commit)
            self._cur_wbase = mf.wbase if mf.write_buffer is not None else NULL
            self._cur_fd = mf.fd
            self._cur_size = mf.file_size
            self._cur_wrote = &mf.wrote_pos
            self._cur_alloc = &mf.allocated_end

    def set_on_append(self, callback):
        """Call ``callback()`` after the next put following each ``arm_wakeup()``."""
        self.on_append = callback

    def arm_wakeup(self):
        """Ask the next put to call ``on_append`` (a sleeping dispatcher), once."""
        self._armed = True

    # -- locking ------------------------------------------------------------------------------

    @cython.final
    cdef inline void _lock(self) noexcept:
        # never block holding the GIL: the holder may need it (a roll waits on the allocator)
        if pthread_mutex_trylock(&self.put_lock) != 0:
            with nogil:
                pthread_mutex_lock(&self.put_lock)

    @cython.final
    cdef inline void _unlock(self) noexcept:
        pthread_mutex_unlock(&self.put_lock)

    def under_put_lock(self, fn):
        """Run ``fn()`` with no put in progress: none lands or takes a queue offset until it
        returns (deleting a topic reads the log's end and resets the topic's offsets)."""
        self._lock()
        try:
            return fn()
        finally:
            self._unlock()

    # -- queue offsets ---------------------------------------------------------------------

    @cython.final
    cdef _QueueOffsets _queues(self, str topic):
        if topic is self._last_topic:
            return self._last_queues
        cdef object q = self.queue_table.get(topic)
        if q is None:
            q = _QueueOffsets()
            self.queue_table[topic] = q
        self._last_topic = topic
        self._last_queues = <_QueueOffsets>q
        return <_QueueOffsets>q

    def get_queue_offset(self, str topic, int64_t queue_id):
        """Next queue offset the topic-queue will assign (0 for an unknown queue)."""
        q = self.queue_table.get(topic)
        return (<_QueueOffsets>q).get(queue_id) if q is not None else 0

    def set_queue_offset(self, str topic, int64_t queue_id, int64_t offset):
        if not 0 <= queue_id <= 0x7FFFFFFF:
            raise InvalidMessageError("queue_id", queue_id, "outside [0, 2147483647]",
                                      limit=0x7FFFFFFF)
        self._queues(topic).set(queue_id, offset)

    def queue_offsets(self):
        """{(topic, queue_id): next offset} of every queue that has one."""
        cdef _QueueOffsets q
        out = {}
        for topic, q in self.queue_table.items():
            for qid, off in q.items().items():
                out[(topic, qid)] = off
        return out
