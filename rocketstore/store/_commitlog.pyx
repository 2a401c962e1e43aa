# cython: language_level=3
"""CommitLog: every topic's messages appended to one log of mapped files (docs/format.md §1, 4).

A put validates (the ``Message`` was validated at construction; sizes against this log's
limits here), takes the put lock, assigns the queue offset of its topic-queue, encodes the
record straight into the last mapped file at its write position and returns a
``PutMessageResult``. A record never straddles files: when fewer than ``size + 8`` bytes
remain, an 8-byte blank record fills the file and the record goes to the next one, which is
obtained *before* the blank is written so that a failed allocation leaves the log unchanged.

Thread-safety: puts are serialised by the put lock (a C lock; waiting for it releases the
GIL). Reads (``get_message``, ``iter_messages``) take no lock: they only read bytes below the
published read position of a file.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdlib cimport realloc, free
cimport numpy as cnp
from libc.string cimport memset, memcpy

from rocketstore.store._csrc cimport (
    RS_END_FILE_MIN_BLANK, RS_SYSFLAG_TX_MASK, RS_SYSFLAG_TX_PREPARED, RS_SYSFLAG_TX_ROLLBACK,
    RS_SYSFLAG_STOREHOST_V6, RS_SYSFLAG_BORNHOST_V6, RS_HOST_V6_LEN, RS_MAX_RECORD_SLACK, RS_MSGID_V4_BYTES,
    RS_MAX_PROPERTIES_LEN, RS_CRC32_RESERVED_LEN,
    pthread_mutex_t, pthread_mutex_init, pthread_mutex_destroy, pthread_mutex_lock,
    pthread_mutex_trylock, pthread_mutex_unlock, rs_store_release, rs_load_acquire, rs_msync,
    pthread_cond_t, pthread_cond_init, pthread_cond_destroy, pthread_cond_wait,
    pthread_cond_timedwait, pthread_cond_broadcast, pthread_cond_signal, timespec,
    clock_gettime, CLOCK_REALTIME, rs_pwrite_all, sched_yield, rs_populate_write, rs_body_crc,
    RS_MAGIC_V1, RS_MAGIC_V2, RS_MAX_TOPIC_LEN_V1, RS_MAX_PROPERTIES_LEN,
)
from rocketstore.store._codec cimport (
    RecordFields, RecordInfo, Message, MessageExt, UniqIdGenerator, record_size, write_record,
    write_blank, parse_record, now_ms, encode_host, format_msg_id, UNIQ_HEX_LEN, UNIQ_PROP_LEN,
    checked_record, report_bad_record, REC_SKIP,
    _check_topic,
)
from rocketstore.store._mapped cimport MappedFile, sync_hook_active
from rocketstore.store._bytes cimport get_u32

import logging
import os
import numpy as np

cnp.import_array()

from rocketstore.errors import (InvalidMessageError, InvalidMessageTypeError, StoreClosedError,
                                TopicPermissionError)
from rocketstore.store.status import PutMessageStatus

log = logging.getLogger("rocketstore.commitlog")

cdef object PUT_OK = PutMessageStatus.PUT_OK
cdef object CREATE_MAPPED_FILE_FAILED = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
cdef object NO_PERMISSION = PutMessageStatus.NO_PERMISSION
cdef object MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE
cdef object FLUSH_DISK_TIMEOUT = PutMessageStatus.FLUSH_DISK_TIMEOUT
cdef object OS_PAGE_CACHE_BUSY = PutMessageStatus.OS_PAGE_CACHE_BUSY


class PoolBusyError(OSError):
    """No transient-pool buffer for a new file and fast fail is on (a put is refused)."""

cdef enum:
    DENSE_QUEUES = 4096     # queue ids held in a C array per topic; larger ones in a dict
    SPIN_WAITERS = 2        # sync puts poll before sleeping when more producers than this wait
    SPIN_YIELDS = 500       # polls (each a sched_yield) before sleeping: about a sync's time
    FAULT_STEP = 8 << 20    # a put asks the fault-ahead thread for more each time it passes this
                            # (large requests: one 8 MiB madvise faults a page ~5x cheaper
                            # than 1 MiB ones, ~10x cheaper than a write fault here)
    FAULT_PAGE = 4096
    FLUSH_TICK_MS = 10      # sync flush: the group commit syncs what unwaited puts wrote this often
    RESYNC_WINDOW = 16 << 20  # how far recovery looks for a valid record after damage before
                              # it takes the damage for the torn end (a zeroed page or a few
                              # lost ones are found; bigger holes end the log there)


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
        return ",".join([format_msg_id(self._host_b, o) for o in self._offsets.tolist()])

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


cdef inline void _publish(MappedFile mf, Py_ssize_t end, int64_t ts) noexcept:
    """Make ``mf``'s bytes up to ``end`` visible (under the put lock, after writing them): a
    GIL-free dispatcher or the commit service reads the position, so the bytes come first,
    then the position; with a write buffer the commit service moves ``committed_pos``."""
    if mf.write_buffer is None:
        mf.wrote_pos = end
        rs_store_release(&mf.committed_pos, end)
    else:
        rs_store_release(&mf.wrote_pos, end)
    mf.store_timestamp = ts


cdef int32_t _queue_id(object queue_id) except -1:
    if type(queue_id) is not int:
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise InvalidMessageTypeError("queue_id", "int", type(queue_id).__name__)
    if not 0 <= queue_id <= 0x7FFFFFFF:
        raise InvalidMessageError("queue_id", queue_id, "outside [0, 2147483647]",
                                  limit=0x7FFFFFFF)
    return <int32_t>queue_id


cdef inline void _deadline_in(timespec *t, int64_t ms) noexcept nogil:
    # an absolute CLOCK_REALTIME deadline ``ms`` from now, for pthread_cond_timedwait
    clock_gettime(CLOCK_REALTIME, t)
    t.tv_sec += ms // 1000
    t.tv_nsec += (ms % 1000) * 1000000
    if t.tv_nsec >= 1000000000:
        t.tv_sec += 1
        t.tv_nsec -= 1000000000


# -- the log ---------------------------------------------------------------------------------

cdef Py_ssize_t _cell(const int32_t[::1] offsets, int64_t r, Py_ssize_t size, str name,
                      Py_ssize_t *length) except -1:
    """Start of row ``r`` of an Arrow binary layout (its length to *length), checked against
    the ``size`` bytes of the data buffer."""
    cdef int32_t lo = offsets[r], hi = offsets[r + 1]
    if lo < 0 or hi < lo or hi > size:
        raise InvalidMessageError(f"{name}_offsets[{r}]", (lo, hi),
                                  f"outside the {size} bytes of {name}_data")
    length[0] = hi - lo
    return lo


@cython.final
cdef class _Batch:
    """The C arrays of one batch put, freed with it (also when a bad message raises)."""
    cdef RecordFields *fields
    cdef Py_ssize_t *sizes
    cdef char *need_uniq
    cdef char *born_now
    cdef Py_ssize_t n

    def __cinit__(self, Py_ssize_t n):
        self.n = n
        self.fields = <RecordFields *>PyMem_Malloc(n * sizeof(RecordFields))
        self.sizes = <Py_ssize_t *>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.need_uniq = <char *>PyMem_Malloc(n)
        self.born_now = <char *>PyMem_Malloc(n)
        if self.fields == NULL or self.sizes == NULL or self.need_uniq == NULL or self.born_now == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.fields)
        PyMem_Free(self.sizes)
        PyMem_Free(self.need_uniq)
        PyMem_Free(self.born_now)


cdef bytes LOCAL_HOST = encode_host("127.0.0.1:0")      # born host of rows without one
cdef const char *_UNIQ_SLOT = b"00000000000000000000000000000000"  # "a UNIQ_KEY goes here"


@cython.final
cdef class CommitLog:
    """The commit log over a ``MappedFileQueue`` of fixed-size files.

    Parameters
    ----------
    mapped_file_queue : MappedFileQueue
        Its files (loaded, not yet recovered).
    store_host : str
        ``ip:port`` written as STOREHOSTADDRESS and used in offset message ids.
    max_message_size : int
        Largest body accepted (``StoreConfig.max_message_size``).
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
    cdef dict _topic_rules              # topic -> (writeable, write_queue_nums), from topics.json
    cdef object _not_writeable          # exception making every put SERVICE_NOT_AVAILABLE
    cdef bint _v1_only                  # refuse topics longer than 127 (v2 records)
    cdef object _roll_error             # the OSError of the last failed file creation
    cdef object _roll_status            # and the status it gives the put
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
    cdef char *_cur_wbase
    cdef int _cur_fd
    cdef Py_ssize_t _cur_size
    cdef Py_ssize_t *_cur_wrote
    cdef Py_ssize_t *_cur_alloc         # the current file's allocated end (fault-ahead stops there)
    cdef readonly int64_t commit_rounds     # GIL-free rounds that committed bytes
    cdef readonly int64_t committed_bytes
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
    # the current file as C values, for the GIL-free flusher (changed under the put lock)
    cdef char *_cur_base
    cdef int64_t _cur_from
    cdef Py_ssize_t *_cur_committed
    cdef int64_t *_cur_store_ts
    cdef readonly int64_t flushed_store_timestamp  # store time of the last record synced
    cdef readonly int64_t sync_count
    cdef public bint debug_ack_before_sync  # WRONG on purpose: the crash harness' negative control
    cdef public bint prop_crc           # append the 5.x record CRC property (off, as RocketMQ's
                                        # default: the store turns it on from its config)
    # fault-ahead: a GIL-free thread faults the current file's pages in ahead of the writer
    cdef pthread_mutex_t fault_mu
    cdef pthread_cond_t fault_cv
    cdef int64_t fault_want             # pages are wanted up to this commit-log offset
    cdef int64_t fault_next             # a put ending past this offset asks for more
    cdef int64_t fault_window           # how far ahead of the writer; 0: off
    cdef bint fault_stop
    cdef readonly int64_t faulted_bytes # statistics: bytes faulted in ahead of the writer
    cdef public int64_t bytes_resynced  # recovery: damaged bytes skipped to a valid record
    cdef public dict scan_first         # recovery: (topic, qid) -> (queue offset, offset) first scanned

    def __cinit__(self):
        self.scan_first = {}
        pthread_mutex_init(&self.put_lock, NULL)
        pthread_mutex_init(&self.flush_mu, NULL)
        pthread_cond_init(&self.flushed_cv, NULL)
        pthread_cond_init(&self.request_cv, NULL)
        pthread_mutex_init(&self.commit_mu, NULL)
        pthread_cond_init(&self.commit_cv, NULL)
        pthread_mutex_init(&self.copy_mu, NULL)
        pthread_mutex_init(&self.fault_mu, NULL)
        pthread_cond_init(&self.fault_cv, NULL)

    def __dealloc__(self):
        pthread_cond_destroy(&self.fault_cv)
        pthread_mutex_destroy(&self.fault_mu)
        pthread_cond_destroy(&self.commit_cv)
        pthread_mutex_destroy(&self.commit_mu)
        pthread_mutex_destroy(&self.copy_mu)
        pthread_mutex_destroy(&self.put_lock)
        pthread_cond_destroy(&self.flushed_cv)
        pthread_cond_destroy(&self.request_cv)
        pthread_mutex_destroy(&self.flush_mu)

    def __init__(self, mapped_file_queue, str store_host="127.0.0.1:10911",
                 Py_ssize_t max_message_size=4 * 1024 * 1024, UniqIdGenerator uniq=None):
        self.mapped_file_queue = mapped_file_queue
        self.file_size = mapped_file_queue.file_size
        self.store_host = store_host
        self.store_host_b = encode_host(store_host)
        self.max_message_size = max_message_size
        self.queue_table = {}
        self._topic_rules = {}
        self.uniq = uniq if uniq is not None else UniqIdGenerator()
        self._set_cur(mapped_file_queue.last_file())

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

    def set_on_append(self, callback):
        """Call ``callback()`` after the next put following each ``arm_wakeup()``."""
        self.on_append = callback

    def set_topic_rule(self, str topic, rule):
        """``rule`` = (writeable, write_queue_nums) for a configured topic, or None to drop it."""
        if rule is None:
            self._topic_rules.pop(topic, None)
        else:
            self._topic_rules[topic] = (bool(rule[0]), int(rule[1]))

    def set_v1_only(self, bint v1_only):
        """With ``v1_only`` a topic longer than 127 characters (a v2 record, which RocketMQ
        4.9.x cannot read) is refused with MESSAGE_ILLEGAL instead of written."""
        self._v1_only = v1_only

    def set_not_writeable(self, error):
        """Refuse every put with SERVICE_NOT_AVAILABLE carrying ``error`` (None re-enables)."""
        self._not_writeable = error

    cdef PutMessageResult _refused(self, str topic, int32_t qid):
        if self._not_writeable is not None:
            return _failed(SERVICE_NOT_AVAILABLE, self._not_writeable, qid)
        if self._v1_only and len(topic) > 127:      # topics are ASCII: characters == bytes
            return _failed(MESSAGE_ILLEGAL, InvalidMessageError(
                "topic", topic, f"is {len(topic)} characters long: it needs a v2 record, which "
                "RocketMQ 4.9.x cannot read (StoreConfig.auto_message_version_on_topic_len)",
                limit=127), qid)
        rule = self._topic_rules.get(topic)
        if rule is not None:
            if not rule[0]:
                return _failed(NO_PERMISSION, TopicPermissionError(
                    topic, "is not writeable (perm in topics.json)"), qid)
            if qid >= <int>rule[1]:
                return _failed(MESSAGE_ILLEGAL, TopicPermissionError(
                    topic, f"queue id {qid} is not below its {rule[1]} write queues"), qid)
        return None

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

    def arm_wakeup(self):
        """Ask the next put to call ``on_append`` (a sleeping dispatcher), once."""
        self._armed = True

    # -- locking ------------------------------------------------------------------------------

    cdef inline void _lock(self) noexcept:
        # never block holding the GIL: the holder may need it (a roll waits on the allocator)
        if pthread_mutex_trylock(&self.put_lock) != 0:
            with nogil:
                pthread_mutex_lock(&self.put_lock)

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

    # -- writing -----------------------------------------------------------------------------

    cdef int _check_open(self) except -1:
        if self.closed:
            raise StoreClosedError("commit log")
        return 0

    cdef int _check_props(self, const RecordFields *f) except -1:
        """The record CRC property counts against RocketMQ's properties limit too."""
        cdef Py_ssize_t plen
        if not f.prop_crc:
            return 0
        plen = f.props_len + (UNIQ_PROP_LEN if f.uniq != NULL else 0) + RS_CRC32_RESERVED_LEN
        if f.uniq == NULL and f.props_len and f.props[f.props_len - 1] != 2:
            plen += 1
        if plen > RS_MAX_PROPERTIES_LEN:
            raise InvalidMessageError("properties", f"{plen} bytes encoded",
                                      f"exceed {RS_MAX_PROPERTIES_LEN} bytes with the record "
                                      "CRC property (StoreConfig.enabled_append_prop_crc)",
                                      limit=RS_MAX_PROPERTIES_LEN,
                                      status="PROPERTIES_SIZE_EXCEEDED")
        return 0

    cdef int _check_size(self, Py_ssize_t body_len, Py_ssize_t total) except -1:
        if body_len > self.max_message_size:
            raise InvalidMessageError(
                "body", f"{body_len} bytes",
                f"longer than max_message_size={self.max_message_size} "
                "(StoreConfig.max_message_size)", limit=self.max_message_size)
        if total > self.max_message_size + RS_MAX_RECORD_SLACK:
            raise InvalidMessageError(
                "record", f"{total} bytes",
                f"longer than max_message_size + 64 KiB = {self.max_message_size + RS_MAX_RECORD_SLACK}",
                limit=self.max_message_size + RS_MAX_RECORD_SLACK)
        if total + RS_END_FILE_MIN_BLANK > self.file_size:    # the message built only then
            self._check_fits(total, "record", f"{total} bytes",
                             "does not fit a commit-log file of {} bytes with its 8-byte "
                             "end-of-file reserve (StoreConfig.mapped_file_size_commit_log)")
        return 0

    cdef int _check_fits(self, Py_ssize_t total, str field, str value, str why) except -1:
        """``total`` bytes must fit one file beside the end-of-file blank (``why`` takes the
        file size)."""
        if total + RS_END_FILE_MIN_BLANK > self.file_size:
            raise InvalidMessageError(field, value, why.format(self.file_size),
                                      limit=self.file_size - RS_END_FILE_MIN_BLANK)
        return 0

    cdef MappedFile _file_for(self, Py_ssize_t need):
        """The file to append ``need`` bytes to: the last one, or the next one after writing a
        blank record into the last. The next file is obtained first, so an allocation
        failure (raised here) leaves the log untouched."""
        cdef MappedFile cur = self.cur
        cdef MappedFile nxt
        cdef Py_ssize_t left = 0
        if cur is not None and cur.wrote_pos != cur.file_size:
            left = cur.file_size - cur.wrote_pos
            # disk for the record and the blank after it (or the blank that ends the file);
            # a new extent lets the fault-ahead thread go further: the next put asks it to
            if cur.wrote_pos + min(left, need + RS_END_FILE_MIN_BLANK) > cur.allocated_end:
                cur.reserve(cur.wrote_pos + min(left, need + RS_END_FILE_MIN_BLANK))
                self.fault_next = 0
            if need + RS_END_FILE_MIN_BLANK <= left:
                return cur
        if self.pool is not None and self._pool_fast_fail and not self.pool.available:
            # refuse instead of committing here; close the current file first (a blank, as a
            # roll writes) so the commit service can commit it whole and free its buffer
            if cur is not None and cur.wrote_pos != cur.file_size:
                self._close_file(cur, left)
            raise PoolBusyError(11, "no free buffer in the transient store pool "
                                    "(fast_fail_if_no_buffer_in_store_pool)",
                                self.mapped_file_queue.store_path)
        if cur is None:
            nxt = self.mapped_file_queue.create_next(self.mapped_file_queue.next_start_offset())
        elif cur.wrote_pos == cur.file_size:
            nxt = self.mapped_file_queue.create_next(cur.file_from_offset + cur.file_size)
        else:
            nxt = self.mapped_file_queue.create_next(cur.file_from_offset + cur.file_size)
            self._close_file(cur, left)
        if self.pool is not None:
            if cur is not None and cur.write_buffer is not None:
                self._rolls += 1    # the commit loop hands files before nxt to Python
            self.pool.lend(nxt)     # may commit the full files itself when no buffer is free
        self._set_cur(nxt)
        nxt.reserve(need + RS_END_FILE_MIN_BLANK)
        return nxt

    cdef void _close_file(self, MappedFile cur, Py_ssize_t left) noexcept:
        # the end-of-file blank fills the rest; the file is full from here
        write_blank(cur.wbase + cur.wrote_pos, <int32_t>left)
        if cur.write_buffer is None:
            cur.wrote_pos = cur.file_size
            rs_store_release(&cur.committed_pos, cur.file_size)
        else:
            rs_store_release(&cur.wrote_pos, cur.file_size)

    cdef MappedFile _file_or_none(self, Py_ssize_t need):
        """``_file_for``, or None with the OSError in ``_roll_error`` (a full disk is a
        CREATE_MAPPED_FILE_FAILED status, not an exception, and leaves the log unchanged)."""
        try:
            return self._file_for(need)
        except PoolBusyError as e:
            self._roll_error = e
            self._roll_status = OS_PAGE_CACHE_BUSY
            return None
        except OSError as e:
            log.error("commit log: cannot create the next file: %s", e)
            self._roll_error = e
            self._roll_status = CREATE_MAPPED_FILE_FAILED
            return None

    cdef inline void _fill_store(self, RecordFields *f) noexcept:
        f.store_host = PyBytes_AS_STRING(self.store_host_b)
        f.store_host_len = <int>len(self.store_host_b)
        if f.store_host_len == RS_HOST_V6_LEN:
            f.sys_flag |= RS_SYSFLAG_STOREHOST_V6
        f.prop_crc = self.prop_crc

    cdef inline void _fill_raw(self, RecordFields *f, bytes topic_b, int32_t qid,
                               bytes born_host, int32_t flag, int32_t sys_flag,
                               int32_t reconsume_times) noexcept:
        """The header fields of a record put from raw parts, without a ``Message`` (wire
        sends, columns): ``born_host`` encoded; an IPv6 one sets its sys flag."""
        f.flag = flag
        f.sys_flag = sys_flag
        f.reconsume_times = reconsume_times
        f.prepared_tx_offset = 0
        f.born_host = PyBytes_AS_STRING(born_host)
        f.born_host_len = <int>PyBytes_GET_SIZE(born_host)
        if f.born_host_len == RS_HOST_V6_LEN:
            f.sys_flag |= RS_SYSFLAG_BORNHOST_V6
        f.topic = PyBytes_AS_STRING(topic_b)
        f.topic_len = PyBytes_GET_SIZE(topic_b)
        f.magic = RS_MAGIC_V2 if f.topic_len > RS_MAX_TOPIC_LEN_V1 else RS_MAGIC_V1
        self._fill_store(f)
        f.queue_id = qid

    cpdef PutMessageResult put_message(self, object msg, object queue_id=0):
        """Append one message to ``queue_id`` of its topic; see the module doc."""
        return self._put(msg, queue_id, True)

    cdef PutMessageResult _put(self, object msg, object queue_id, bint wait):
        cdef RecordFields f
        cdef const char *body = NULL
        self._check_open()
        if type(msg) is not Message:
            raise InvalidMessageTypeError("msg", "Message", type(msg).__name__)
        cdef Message m = <Message>msg
        cdef int32_t qid = _queue_id(queue_id)
        cdef PutMessageResult r
        if self._topic_rules or self._not_writeable is not None or self._v1_only:
            r = self._refused(m.topic, qid)
            if r is not None:
                return r
        m._fill(&f, &body)
        self._fill_store(&f)
        f.queue_id = qid
        f.uniq = _UNIQ_SLOT if not m._has_uniq else NULL    # sized now, generated at write
        cdef bint born_now = m.born_timestamp is None
        if not born_now:
            f.born_ts = <int64_t>m.born_timestamp
        cdef Py_ssize_t total = record_size(&f)
        self._check_size(m._body_len, total)
        self._check_props(&f)
        r = self._append_one(m.topic, qid, &f, total, born_now, not m._has_uniq)
        if r.status is not PUT_OK:
            return r
        if wait and self.sync_flush and not m._no_wait and not self.debug_ack_before_sync:
            self._sync_result(r, f.phy_offset + total)
        elif self.sync_flush and m._no_wait:
            # nobody waits for it, but it must not wait for the next tick either: wake the
            # group commit (RocketMQ's wakeup on !isWaitStoreMsgOK)
            self.request_flush(f.phy_offset + total)
        return r

    cdef inline void _write_at(self, MappedFile mf, Py_ssize_t pos, RecordFields *f,
                               Py_ssize_t size, int64_t ts, int64_t qoff, bint born_now,
                               bint need_uniq, char *uniq) noexcept:
        """Write one filled and sized record at ``pos`` of ``mf`` (under the put lock) with
        its store timestamp ``ts`` (its born timestamp too when ``born_now``), queue offset
        ``qoff``, physical offset, and a new UNIQ_KEY when it needs one (generated into
        ``uniq``)."""
        f.store_ts = ts
        if born_now:
            f.born_ts = ts
        f.queue_offset = qoff
        f.phy_offset = mf.file_from_offset + pos
        if need_uniq:
            self.uniq.next_into(uniq, ts)
            f.uniq = uniq
        else:
            f.uniq = NULL
        write_record(mf.wbase + pos, f, size)

    cdef inline int _after_append(self, MappedFile mf, int64_t end) except -1:
        """After a put's bytes up to commit-log offset ``end`` are published, outside the put
        lock: wake the commit service past its mark, ask fault-ahead to keep ahead, and call
        ``on_append`` once if armed."""
        if mf.write_buffer is not None:
            self._maybe_wake_commit(mf)
        if self.fault_window and end > self.fault_next:
            self._fault_request(end)
        if self._armed:
            self._fire_on_append()      # rare: kept out of line so this inlines into the put
        return 0

    cdef int _fire_on_append(self) except -1:
        self._armed = False
        if self.on_append is not None:
            self.on_append()
        return 0

    cdef inline PutMessageResult _append_one(self, str topic, int32_t qid, RecordFields *f,
                                             Py_ssize_t total, bint born_now, bint need_uniq):
        """Write one filled and sized record under the put lock (the common half of
        ``put_message`` and ``put_wire_async``); half and rollback messages take no queue
        offset. The durability wait is the caller's."""
        cdef char uniq[UNIQ_HEX_LEN]
        cdef MappedFile mf
        cdef _QueueOffsets qs
        cdef int64_t qoff = 0, ts
        cdef Py_ssize_t pos
        cdef int tx = f.sys_flag & RS_SYSFLAG_TX_MASK
        self._lock()
        try:
            mf = self._file_or_none(total)
            if mf is None:
                return _failed(self._roll_status, self._roll_error, qid)
            ts = now_ms()
            qs = self._queues(topic)
            if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                qoff = qs.get(qid)      # half/rollback messages take none (stored as 0)
                qs.set(qid, qoff + 1)
            pos = mf.wrote_pos
            self._write_at(mf, pos, f, total, ts, qoff, born_now, need_uniq, uniq)
            _publish(mf, pos + total, ts)
        finally:
            self._unlock()
        self._after_append(mf, f.phy_offset + total)
        return _ok_result(self.store_host_b, qid, qoff, f.phy_offset, total, ts, 1)

    cpdef PutMessageResult put_messages(self, object msgs, object queue_id=0):
        """Append a batch of one topic to one queue: consecutive queue offsets, one store
        timestamp, all in one file (the whole batch moves to the next file if needed)."""
        return self._put_batch(msgs, queue_id, True)

    cdef PutMessageResult _put_batch(self, object msgs, object queue_id, bint wait):
        if not isinstance(msgs, (list, tuple)):
            raise InvalidMessageTypeError("msgs", "list of Message", type(msgs).__name__)
        cdef tuple batch = tuple(msgs)      # the pointers below borrow from these objects
        cdef Py_ssize_t n = len(batch), i, total = 0
        cdef int32_t qid
        cdef const char *body = NULL
        cdef Message m
        cdef int tx
        cdef RecordFields *f
        self._check_open()
        qid = _queue_id(queue_id)
        if n == 0:
            raise InvalidMessageError("msgs", msgs, "a batch needs at least one message")
        if not isinstance(batch[0], Message):
            raise InvalidMessageTypeError("msgs[0]", "Message", type(batch[0]).__name__)
        cdef str topic = (<Message>batch[0]).topic
        cdef PutMessageResult refused
        if self._topic_rules or self._not_writeable is not None or self._v1_only:
            refused = self._refused(topic, qid)
            if refused is not None:
                return refused
        cdef _Batch b = _Batch(n)
        # validate, fill and size everything before the lock: a bad message writes nothing
        for i in range(n):
            o = batch[i]
            if not isinstance(o, Message):
                raise InvalidMessageTypeError(f"msgs[{i}]", "Message", type(o).__name__)
            m = <Message>o
            if m.topic is not topic and m.topic != topic:
                raise InvalidMessageError(f"msgs[{i}].topic", m.topic,
                                          f"differs from the batch's topic {topic!r}")
            tx = m.sys_flag & RS_SYSFLAG_TX_MASK
            if tx == RS_SYSFLAG_TX_PREPARED or tx == RS_SYSFLAG_TX_ROLLBACK:
                raise InvalidMessageError(f"msgs[{i}].sys_flag", hex(m.sys_flag),
                                          "a batch cannot hold transactional half messages")
            if m._delayed:
                raise InvalidMessageError(f"msgs[{i}].properties['DELAY']",
                                          m.properties.get("DELAY"),
                                          "a batch cannot hold delayed messages")
            f = &b.fields[i]
            m._fill(f, &body)
            self._fill_store(f)
            f.queue_id = qid
            if m.born_timestamp is not None:
                f.born_ts = <int64_t>m.born_timestamp
            total += self._size_entry(b, i, not m._has_uniq, m.born_timestamp is None,
                                      m._body_len)
        return self._append_batch(topic, qid, b, total, wait)

    def put_columns(self, str topic not None, object queue_id, const int64_t[::1] rows not None,
                    object body_data not None, const int32_t[::1] body_offsets not None,
                    object props_data=None, const int32_t[::1] props_offsets=None,
                    bytes const_props=None):
        """Append rows of columnar data as one batch of ``topic``/``queue_id`` (the Spark
        writer's path: no ``Message`` per row). Row ``r``'s body is
        ``body_data[body_offsets[r]:body_offsets[r + 1]]`` (Arrow's binary layout); ``rows``
        lists the rows to append, in order. Its properties are, encoded (``name\x01value\x02``
        each), ``props_data[props_offsets[r]:props_offsets[r + 1]]`` when ``props_offsets``
        is given, else ``const_props`` for every row; they are taken as given (the caller
        validated them), and the store adds a UNIQ_KEY to each. Same guarantees as
        ``put_messages``: consecutive queue offsets, one file, all or nothing."""
        # any buffer (an Arrow buffer exports signed chars): viewed as bytes
        cdef const unsigned char[::1] bdata = memoryview(body_data).cast("B")
        cdef const unsigned char[::1] pdata = memoryview(props_data).cast("B") \
            if props_data is not None else None
        cdef Py_ssize_t n = rows.shape[0], i, total = 0, nbody = body_offsets.shape[0] - 1
        cdef Py_ssize_t nprops = props_offsets.shape[0] - 1 if props_offsets is not None else 0
        cdef int64_t r
        cdef RecordFields *f
        self._check_open()
        cdef int32_t qid = _queue_id(queue_id)
        cdef bytes topic_b = _check_topic(topic)
        if n == 0:
            raise InvalidMessageError("rows", "[]", "a batch needs at least one row")
        cdef PutMessageResult refused
        if self._topic_rules or self._not_writeable is not None:
            refused = self._refused(topic, qid)
            if refused is not None:
                return refused
        cdef const char *bbase = <const char *>&bdata[0] if bdata.shape[0] else <const char *>""
        cdef const char *pbase = <const char *>""
        if props_offsets is not None:
            if pdata is None:
                raise InvalidMessageTypeError("props_data", "a bytes-like buffer", "None")
            if pdata.shape[0]:
                pbase = <const char *>&pdata[0]
        elif const_props is not None:
            pbase = PyBytes_AS_STRING(const_props)
        cdef _Batch b = _Batch(n)
        for i in range(n):
            r = rows[i]
            if r < 0 or r >= nbody or (props_offsets is not None and r >= nprops):
                raise InvalidMessageError(f"rows[{i}]", r, f"not a row of the {nbody} given")
            f = &b.fields[i]
            f.body = bbase + _cell(body_offsets, r, bdata.shape[0], "body", &f.body_len)
            f.body_crc = rs_body_crc(<const unsigned char *>f.body, <size_t>f.body_len) \
                if f.body_len else 0
            if props_offsets is not None:
                f.props = pbase + _cell(props_offsets, r, pdata.shape[0], "props", &f.props_len)
            else:
                f.props = pbase
                f.props_len = PyBytes_GET_SIZE(const_props) if const_props is not None else 0
            if f.props_len + UNIQ_PROP_LEN > RS_MAX_PROPERTIES_LEN:
                raise InvalidMessageError(f"properties of row {r}", f"{f.props_len} bytes encoded",
                                          f"exceed {RS_MAX_PROPERTIES_LEN} bytes with the UNIQ_KEY",
                                          limit=RS_MAX_PROPERTIES_LEN,
                                          status="PROPERTIES_SIZE_EXCEEDED")
            self._fill_raw(f, topic_b, qid, LOCAL_HOST, 0, 0, 0)
            total += self._size_entry(b, i, True, True, f.body_len)
        return self._append_batch(topic, qid, b, total, True)

    cdef inline Py_ssize_t _size_entry(self, _Batch b, Py_ssize_t i, bint need_uniq,
                                       bint born_now, Py_ssize_t body_len) except -1:
        """Size and check entry ``i`` of a filled batch: whether it gets a UNIQ_KEY (sized now,
        generated at write) and the put time as born timestamp. Returns its size."""
        cdef RecordFields *f = &b.fields[i]
        b.need_uniq[i] = need_uniq
        f.uniq = _UNIQ_SLOT if need_uniq else NULL
        b.born_now[i] = born_now
        b.sizes[i] = record_size(f)
        self._check_size(body_len, b.sizes[i])
        self._check_props(f)
        return b.sizes[i]

    cdef PutMessageResult _append_batch(self, str topic, int32_t qid, _Batch b, Py_ssize_t total,
                                        bint wait):
        """Write a filled and sized batch under the put lock (the common half of
        ``put_messages`` and ``put_columns``); ``wait``: a sync-flush put waits for its sync."""
        cdef Py_ssize_t n = b.n, i, pos
        cdef char uniq[UNIQ_HEX_LEN]
        cdef MappedFile mf
        cdef _QueueOffsets qs
        cdef int64_t qoff, ts, start_phy
        cdef RecordFields *f
        if total + RS_END_FILE_MIN_BLANK > self.file_size:
            self._check_fits(total, "msgs", f"{n} messages, {total} bytes",
                             "a batch must fit one commit-log file of {} bytes with its 8-byte "
                             "reserve (StoreConfig.mapped_file_size_commit_log); split it")
        offsets = np.empty(n, dtype=np.int64)
        cdef int64_t *offs = <int64_t *>cnp.PyArray_DATA(offsets)
        self._lock()
        try:
            mf = self._file_or_none(total)
            if mf is None:
                return _failed(self._roll_status, self._roll_error, qid)
            ts = now_ms()
            qs = self._queues(topic)
            qoff = qs.get(qid)
            pos = mf.wrote_pos
            start_phy = mf.file_from_offset + pos
            for i in range(n):
                f = &b.fields[i]
                self._write_at(mf, pos, f, b.sizes[i], ts, qoff + i, b.born_now[i],
                               b.need_uniq[i], uniq)
                offs[i] = f.phy_offset
                pos += b.sizes[i]
            qs.set(qid, qoff + n)
            _publish(mf, pos, ts)
        finally:
            self._unlock()
        self._after_append(mf, start_phy + total)
        cdef PutMessageResult r = _ok_result(self.store_host_b, qid, qoff, start_phy, total, ts, n)
        r._offsets = offsets
        if wait and self.sync_flush and not self.debug_ack_before_sync:
            self._sync_result(r, start_phy + total)
        return r

    # -- acknowledgement without a waiting thread ------------------------------------------------

    def put_message_async(self, object msg, object queue_id=0, acks=None, transform=None):
        """Append like ``put_message``; the durability wait goes to ``acks`` (a
        ``FlushAckService``): ``acks.defer(result, end, transform)`` when a sync flush must pass
        ``end`` first, else ``acks.completed(result, transform)``. Returns what ``acks`` returns
        (a Future of the result, or of ``transform(result)``)."""
        cdef PutMessageResult r = self._put(msg, queue_id, False)
        if (r.status is PUT_OK and (self.sync_flush or self.wait_replica)
                and not (<Message>msg)._no_wait and not self.debug_ack_before_sync):
            return acks.defer(r, r.commitlog_offset + r.wrote_bytes, transform)
        return acks.completed(r, transform)

    def put_messages_async(self, object msgs, object queue_id=0, acks=None, transform=None):
        """``put_messages`` with the durability wait handed to ``acks`` (see above)."""
        cdef PutMessageResult r = self._put_batch(msgs, queue_id, False)
        if (r.status is PUT_OK and (self.sync_flush or self.wait_replica)
                and not self.debug_ack_before_sync):
            return acks.defer(r, r.commitlog_offset + r.wrote_bytes, transform)
        return acks.completed(r, transform)

    def put_wire_async(self, str topic not None, object queue_id, bytes body not None,
                       bytes props not None, int32_t flag, int32_t sys_flag,
                       int32_t reconsume_times, int64_t born_timestamp,
                       bytes born_host not None, bint wait, acks, transform=None,
                       bint direct=False):
        """``put_message_async`` of a broker's send from its wire fields, without a
        ``Message``: ``props`` is the exact properties string to store (no UNIQ_KEY is
        added), ``born_host`` encoded (``encode_host``), ``wait`` the message's
        ``isWaitStoreMsgOK`` (a sync flush acknowledges it only once durable); a negative
        ``born_timestamp`` is the store timestamp (a local send that was never stamped).
        ``direct``: return the ``PutMessageResult`` itself when nothing waits for a flush or
        a replica (``transform`` not applied), a Future only when the answer comes later:
        the in-process send's path, which needs no completed future per message."""
        cdef RecordFields f
        cdef Py_ssize_t total
        self._check_open()
        cdef int32_t qid = _queue_id(queue_id)
        cdef bytes topic_b = _check_topic(topic)
        cdef PutMessageResult r
        if self._topic_rules or self._not_writeable is not None or self._v1_only:
            r = self._refused(topic, qid)
            if r is not None:
                return r if direct else acks.completed(r, transform)
        if PyBytes_GET_SIZE(props) > RS_MAX_PROPERTIES_LEN:
            raise InvalidMessageError("properties", f"{PyBytes_GET_SIZE(props)} bytes encoded",
                                      f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                      limit=RS_MAX_PROPERTIES_LEN,
                                      status="PROPERTIES_SIZE_EXCEEDED")
        f.body = PyBytes_AS_STRING(body)
        f.body_len = PyBytes_GET_SIZE(body)
        f.body_crc = rs_body_crc(<const unsigned char *>f.body, <size_t>f.body_len) \
            if f.body_len else 0
        self._fill_raw(&f, topic_b, qid, born_host, flag, sys_flag, reconsume_times)
        f.props = PyBytes_AS_STRING(props)
        f.props_len = PyBytes_GET_SIZE(props)
        f.uniq = NULL
        total = record_size(&f)
        self._check_size(f.body_len, total)
        self._check_props(&f)
        f.born_ts = born_timestamp
        r = self._append_one(topic, qid, &f, total, born_timestamp < 0, False)
        if r.status is not PUT_OK:
            return r if direct else acks.completed(r, transform)
        if self.sync_flush and not wait:
            # nobody waits for it, but it must not wait for the next tick either
            self.request_flush(f.phy_offset + total)
        elif (self.sync_flush or (self.wait_replica and wait)) and not self.debug_ack_before_sync:
            return acks.defer(r, f.phy_offset + total, transform)
        return r if direct else acks.completed(r, transform)

    def put_wire_batch_async(self, str topic not None, object queue_id, bytes body not None,
                             bytes meta not None, bytes props not None, int32_t sys_flag,
                             int32_t reconsume_times, int64_t born_timestamp,
                             bytes born_host not None, acks, transform=None):
        """``put_messages_async`` of a broker's batch send from its wire body, without a
        ``Message`` per entry: entry ``i``'s body is ``body[o:o + n]`` and its exact stored
        properties ``props[po:po + pn]``, where ``(o, n, flag, po, pn)`` are the five native
        int32 at ``meta[20 * i:]`` (``rocketstore.remoting._wire.wire_batch`` builds them; no
        UNIQ_KEY is added). Same guarantees as ``put_messages``."""
        cdef Py_ssize_t n = PyBytes_GET_SIZE(meta) // 20, i, total = 0
        cdef const int32_t *m = <const int32_t *>PyBytes_AS_STRING(meta)
        cdef const char *bbase = PyBytes_AS_STRING(body)
        cdef const char *pbase = PyBytes_AS_STRING(props)
        cdef Py_ssize_t blen = PyBytes_GET_SIZE(body), plen = PyBytes_GET_SIZE(props)
        cdef RecordFields *f
        cdef int tx = sys_flag & RS_SYSFLAG_TX_MASK
        self._check_open()
        cdef int32_t qid = _queue_id(queue_id)
        cdef bytes topic_b = _check_topic(topic)
        if n == 0 or PyBytes_GET_SIZE(meta) != 20 * n:
            raise InvalidMessageError("meta", f"{PyBytes_GET_SIZE(meta)} bytes",
                                      "five int32 per entry, one entry at least")
        if tx == RS_SYSFLAG_TX_PREPARED or tx == RS_SYSFLAG_TX_ROLLBACK:
            raise InvalidMessageError("sys_flag", hex(sys_flag),
                                      "a batch cannot hold transactional half messages")
        cdef PutMessageResult r
        if self._topic_rules or self._not_writeable is not None or self._v1_only:
            r = self._refused(topic, qid)
            if r is not None:
                return acks.completed(r, transform)
        cdef _Batch b = _Batch(n)
        for i in range(n):
            if m[5 * i] < 0 or m[5 * i + 1] < 0 or m[5 * i] + <Py_ssize_t>m[5 * i + 1] > blen \
                    or m[5 * i + 3] < 0 or m[5 * i + 4] < 0 \
                    or m[5 * i + 3] + <Py_ssize_t>m[5 * i + 4] > plen:
                raise InvalidMessageError(f"meta[{i}]", "an entry", "outside body or props")
            f = &b.fields[i]
            f.body = bbase + m[5 * i]
            f.body_len = m[5 * i + 1]
            f.body_crc = rs_body_crc(<const unsigned char *>f.body, <size_t>f.body_len) \
                if f.body_len else 0
            f.props = pbase + m[5 * i + 3]
            f.props_len = m[5 * i + 4]
            if f.props_len > RS_MAX_PROPERTIES_LEN:
                raise InvalidMessageError(f"properties of entry {i}", f"{f.props_len} bytes encoded",
                                          f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                          limit=RS_MAX_PROPERTIES_LEN,
                                          status="PROPERTIES_SIZE_EXCEEDED")
            self._fill_raw(f, topic_b, qid, born_host, m[5 * i + 2], sys_flag, reconsume_times)
            f.born_ts = born_timestamp
            total += self._size_entry(b, i, False, False, f.body_len)
        r = self._append_batch(topic, qid, b, total, False)
        if (r.status is PUT_OK and (self.sync_flush or self.wait_replica)
                and not self.debug_ack_before_sync):
            return acks.defer(r, r.commitlog_offset + r.wrote_bytes, transform)
        return acks.completed(r, transform)

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

    # -- reading -------------------------------------------------------------------------------

    def get_min_offset(self):
        """Commit-log offset of the first byte still stored (-1 when there is no file)."""
        return self.mapped_file_queue.get_min_offset()

    def get_max_offset(self):
        """Commit-log offset one past the last readable byte."""
        cdef MappedFile mf
        if self.pool is not None:
            # with write buffers, the first file still holding one ends what is readable
            # (files after it may be further along in the pool, not in the files)
            lent = list(self.pool.lent)     # a copy: the commit service removes entries
            if lent:                        # (and boundscheck is off: test, then index)
                mf = lent[0]
                return mf.file_from_offset + mf.committed_pos
        return self.mapped_file_queue.get_max_offset()

    def get_message(self, int64_t offset, bint raw=False):
        """The message whose record starts at commit-log ``offset``, or None.

        None when the offset is outside the stored range or is not the start of a valid
        record (its PHYSICALOFFSET field must equal ``offset``).
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos, rc, end
        cdef MappedFile mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or mf.base == NULL:
            return None
        pos = offset - mf.file_from_offset
        end = mf.committed_pos
        if pos < 0 or pos >= end:
            return None
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        rc = checked_record(mf.base + pos, end - pos, offset, &info, crc_from)
        if rc == REC_SKIP:
            report_bad_record(self.mapped_file_queue.store_path, offset, mf.base + pos, end - pos,
                              crc_from)
        if rc <= 0:
            return None
        return MessageExt.new(&info, None, mf, mf.base + pos, raw, None)

    def next_record(self, int64_t offset):
        """(MessageExt or None, next offset) for the record at ``offset``.

        A blank record gives (None, start of the next file); the end of data gives
        (None, -1).
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos, rc, end
        cdef MappedFile mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or mf.base == NULL:
            return None, -1
        pos = offset - mf.file_from_offset
        end = mf.committed_pos
        if pos >= end:
            if end == mf.file_size:
                return None, mf.file_from_offset + mf.file_size
            return None, -1
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        cdef Py_ssize_t nxt
        rc = checked_record(mf.base + pos, end - pos, offset, &info, crc_from)
        if rc == 0 and info.total_size == mf.file_size - pos:
            return None, mf.file_from_offset + mf.file_size
        if rc == REC_SKIP:
            # intact framing, failed check: skip it (never handed out), go on after it
            report_bad_record(self.mapped_file_queue.store_path, offset, mf.base + pos, end - pos,
                              crc_from)
            return None, offset + info.total_size
        if rc <= 0:
            # not a record: damage with a valid record after it in this file is skipped and
            # reported; with none, a file that is not the last one is unreadable from here on
            # (reported, the walk goes on in the next file); the last one ends here
            nxt = resync_record(mf, pos, end, crc_from)
            if nxt > pos:
                report_damaged_range(self.mapped_file_queue.store_path, offset,
                                     mf.file_from_offset + nxt)
                return None, mf.file_from_offset + nxt
            if end == mf.file_size and mf is not self.mapped_file_queue.last_file():
                report_damaged_range(self.mapped_file_queue.store_path, offset,
                                     mf.file_from_offset + mf.file_size)
                return None, mf.file_from_offset + mf.file_size
            return None, -1
        return MessageExt.new(&info, None, mf, mf.base + pos, False, None), offset + rc

    def iter_messages(self, int64_t from_offset=0):
        """Every message from ``from_offset`` (a record start) to the end, across files."""
        cdef int64_t off = max(from_offset, self.get_min_offset())
        while off >= 0:
            msg, nxt = self.next_record(off)
            if msg is not None:
                yield msg
            off = nxt

    # -- recovery ----------------------------------------------------------------------------

    def resync(self, MappedFile mf, Py_ssize_t pos, Py_ssize_t limit=-1):
        """Position in ``mf`` of the first valid record after damage at ``pos``, below
        ``limit`` (the file size when negative); -1 when none."""
        if limit < 0 or limit > mf.file_size:
            limit = mf.file_size
        return resync_record(mf, pos, data_end(mf, pos, limit),
                             self.mapped_file_queue.record_crc_from)

    def scan_file(self, MappedFile mf, bint check_crc, bint rebuild_queues=True):
        """Walk the records of one file from position 0 to the end of valid data.

        Returns (end_pos, messages, blank): the position after the last valid record (the file
        size after a blank), how many messages were read, and whether a blank closed the file.
        With ``rebuild_queues`` every NOT/COMMIT record advances its queue's next offset.

        With ``check_crc``, damage that a valid record follows in the same file (a zeroed
        page, garbage) is skipped: the walk resynchronises on that record (magic, sizes,
        PHYSICALOFFSET and CRC all right) and the damaged range is reported
        (``integrity.report``) and added to ``bytes_resynced``. Damage with no valid record
        after it is the torn end of the log, as before.
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos = 0, rc, count = 0
        cdef Py_ssize_t size = mf.file_size
        cdef int64_t from_off = mf.file_from_offset
        cdef int tx
        cdef _QueueOffsets qs
        cdef dict topics = {}
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        while pos < size:
            if check_crc:
                rc = checked_record(mf.base + pos, size - pos, from_off + pos, &info, crc_from)
            else:
                rc = parse_record(mf.base + pos, size - pos, False, &info)
            if rc == 0:
                # a blank must fill the rest of the file exactly
                if info.total_size == size - pos:
                    return size, count, True
            if rc <= 0 or info.phy_offset != from_off + pos:
                if check_crc and rc != 0 and self._skippable(mf, pos, &info):
                    # one damaged record mid-log: skip it (never handed out), keep what follows
                    report_bad_record(self.mapped_file_queue.store_path, from_off + pos,
                                      mf.base + pos, size - pos, crc_from)
                    pos += info.total_size
                    continue
                if check_crc:
                    # within a window: the zero tail of a big preallocated file is not read
                    # into the page cache at every open just to find it empty; and never
                    # into a hole (nothing was ever written there)
                    nxt = resync_record(mf, pos, data_end(mf, pos, min(size, pos + RESYNC_WINDOW)),
                                        crc_from)
                    if nxt > pos:
                        # a zeroed page or garbage with valid records after it: damage
                        # inside the log, not its torn end (docs/recovery.md)
                        report_damaged_range(self.mapped_file_queue.store_path,
                                             from_off + pos, from_off + nxt)
                        self.bytes_resynced += nxt - pos
                        pos = nxt
                        continue
                break
            count += 1
            if rebuild_queues:
                tx = info.sys_flag & RS_SYSFLAG_TX_MASK
                if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                    tb = info.topic[:info.topic_len]
                    topic = topics.get(tb)
                    if topic is None:
                        topic = tb.decode("utf-8", "replace")
                        topics[tb] = topic
                    if info.queue_id >= 0:      # QUEUEID has no CRC: never trust it blindly
                        qs = self._queues(topic)
                        if info.queue_offset + 1 > qs.get(info.queue_id):
                            qs.set(info.queue_id, info.queue_offset + 1)
                        key = (topic, info.queue_id)
                        if key not in self.scan_first:
                            # recovery compares it with the queue's first unit on disk
                            self.scan_first[key] = (info.queue_offset, from_off + pos)
            pos += rc
        return pos, count, False

    cdef bint _skippable(self, MappedFile mf, Py_ssize_t pos, RecordInfo *info):
        """The record at ``pos`` frames correctly but fails its check, and a valid record (or
        the file's blank) follows it: damage inside the log, not its torn end."""
        cdef RecordInfo nxt
        cdef Py_ssize_t size = mf.file_size, rc, after
        if checked_record(mf.base + pos, size - pos, mf.file_from_offset + pos, info,
                          self.mapped_file_queue.record_crc_from) != REC_SKIP:
            return False
        after = pos + info.total_size
        if after >= size:
            return False
        rc = parse_record(mf.base + after, size - after, True, &nxt)
        if rc == 0:
            return nxt.total_size == size - after
        return rc > 0 and nxt.phy_offset == mf.file_from_offset + after

    def reset_write_file(self):
        """Point the writer at the queue's last file (after load, recovery or truncation)."""
        self._set_cur(self.mapped_file_queue.last_file())

    # -- replication (rocketstore.ha) ----------------------------------------------------------

    def set_put_status(self, PutMessageResult r, status):
        """Overwrite a put's status (the replica wait's verdict: FLUSH_SLAVE_TIMEOUT or
        SLAVE_NOT_AVAILABLE; the record stays stored)."""
        r.status = status

    def append_replicated(self, int64_t offset, const unsigned char[::1] data not None):
        """A slave's append of raw commit-log bytes its master sent for ``offset``: ONE copy
        from ``data`` (the receive buffer) into the mapped file, under the put lock.

        ``offset`` must be this log's end (an empty log takes any offset at a file boundary
        and starts its files there); the bytes must fit the current file (a master's frame
        never crosses files); a full file rolls to the next one. Advances the written and
        committed positions and wakes dispatch; the flush services flush it as any put.
        Returns the log's new end, or -1 (nothing written) when ``offset`` is not where this
        log ends or the bytes do not fit: the HA client then drops the connection.
        """
        cdef Py_ssize_t n = data.shape[0], pos
        cdef MappedFile mf
        cdef int64_t end
        self._check_open()
        mfq = self.mapped_file_queue
        self._lock()
        try:
            mf = self.cur
            if mf is None or (mf.file_from_offset + mf.wrote_pos == 0 and len(mfq.files) == 1):
                # an empty log follows the master from wherever it starts (docs/replication.md §3.4)
                if offset % self.file_size:
                    return -1
                if mf is not None and offset != 0:
                    mfq.delete_last_file()
                    self._set_cur(None)
                    mf = None
                if mf is None:
                    mf = mfq.create_next(offset)
                    self._set_cur(mf)
            elif mf.wrote_pos == mf.file_size and mf.file_from_offset + mf.file_size == offset:
                mf = mfq.create_next(offset)
                self._set_cur(mf)
            pos = mf.wrote_pos
            if mf.file_from_offset + pos != offset or pos + n > mf.file_size:
                return -1
            if n == 0:
                return offset
            mf.reserve(pos + n)
            with nogil:
                memcpy(mf.wbase + pos, &data[0], <size_t>n)
            _publish(mf, pos + n, mf.store_timestamp)
            end = offset + n
        finally:
            self._unlock()
        self._after_append(mf, end)
        return end

    def close(self):
        self._lock()
        try:
            self.closed = True
        finally:
            self._unlock()


# -- resynchronising after damage (recovery and reads) -------------------------------------------

cdef inline Py_ssize_t _first_nonzero(const char *b, Py_ssize_t q, Py_ssize_t limit) noexcept nogil:
    """First position >= ``q`` below ``limit`` holding a non-zero byte (``limit`` if none);
    zero runs go by 8 bytes at a time (mapped files are page-aligned)."""
    while q < limit and (q & 7):
        if b[q] != 0:
            return q
        q += 1
    while q + 8 <= limit and (<const uint64_t *>(b + q))[0] == 0:
        q += 8
    while q < limit and b[q] == 0:
        q += 1
    return q


cdef Py_ssize_t resync_record(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit,
                              int64_t crc_from) noexcept nogil:
    """First position after ``pos`` (below ``limit``) where a valid record starts: its
    MAGICCODE, sizes, PHYSICALOFFSET (its own position) and CRCs all check. -1 when there is
    none: what follows ``pos`` is the torn end (or, in an older file, the damaged rest of it,
    which recovery closes with a blank)."""
    cdef const char *b = mf.base
    cdef int64_t from_off = mf.file_from_offset
    cdef Py_ssize_t p = pos + 1, q, rc
    cdef uint32_t magic
    cdef RecordInfo info
    if b == NULL:
        return -1
    while p + 8 <= limit:
        # the last byte of MAGICCODE is never zero: skip to where it could be
        q = _first_nonzero(b, p + 7, limit)
        if q >= limit:
            return -1
        if q - 7 > p:
            p = q - 7
        magic = get_u32(b + p + 4)
        if magic == RS_MAGIC_V1 or magic == RS_MAGIC_V2:
            rc = checked_record(b + p, limit - p, from_off + p, &info, crc_from)
            if rc > 0:
                return p
        p += 1
    return -1


def data_end(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit):
    """``limit``, or the start of the first hole of ``mf``'s file at or after ``pos`` when
    that comes first. A resync never reads a hole: no record was ever written there, and on
    tmpfs (or any filesystem that allocates on a read fault) reading one on a full disk is a
    SIGBUS. Sparse files are what extent allocation leaves past the written log."""
    cdef Py_ssize_t hole
    if mf.path is None:
        return limit
    try:
        fd = os.open(mf.path, os.O_RDONLY)
    except OSError:
        return limit
    try:
        hole = os.lseek(fd, pos, os.SEEK_HOLE)
    except OSError:             # SEEK_HOLE unsupported, or pos past the end
        return limit
    finally:
        os.close(fd)
    return hole if hole < limit else limit


def resync_offset(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit, int64_t crc_from):
    """``resync_record`` for the dispatcher's slow path: the position of the next valid
    record in ``mf`` after damage at ``pos`` (below ``limit``), or -1."""
    return resync_record(mf, pos, data_end(mf, pos, min(limit, mf.file_size)), crc_from)


cdef int report_damaged_range(object where, int64_t start, int64_t end) except -1:
    """Report the commit-log bytes [start, end) skipped as damage (no record could be read)."""
    from rocketstore.store import integrity
    integrity.report(str(where), start,
                     f"damaged range [{start}, {end}) of {end - start} bytes skipped: no valid "
                     f"record starts in it")
    return 0


@cython.final
cdef class _CopyGuard:
    """The commit log's copy lock as a context manager, for the pool's Python commits: the
    GIL-free commit loop and a rolling writer must never copy the same file at once."""
    cdef CommitLog cl

    def __cinit__(self, CommitLog cl):
        self.cl = cl

    def __enter__(self):
        with nogil:
            pthread_mutex_lock(&self.cl.copy_mu)
        return self

    def __exit__(self, *exc):
        pthread_mutex_unlock(&self.cl.copy_mu)
        return False


# -- futures of durable puts -----------------------------------------------------------------

from concurrent.futures import Future as _Future, InvalidStateError as _InvalidStateError
import threading as _threading

try:
    from concurrent.futures._base import (PENDING as _F_PENDING, FINISHED as _F_FINISHED,
                                          CANCELLED as _F_CANCELLED,
                                          CANCELLED_AND_NOTIFIED as _F_CANCELLED_AND_NOTIFIED)
except ImportError:         # not CPython's layout: plain futures below
    _F_PENDING, _F_FINISHED, _F_CANCELLED, _F_CANCELLED_AND_NOTIFIED = (
        "PENDING", "FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED")


def _future_layout_known():
    """Whether ``Future`` keeps its state in the attributes AckFuture relies on (CPython
    3.8-3.13 do); another Python gets plain futures instead of a wrong fast path."""
    try:
        f = _Future()
        known = (f._state is _F_PENDING and f._result is None and f._exception is None
                 and f._waiters == [] and f._done_callbacks == []
                 and isinstance(f._condition, type(_threading.Condition())))
        f.set_result(1)
        return known and f._state is _F_FINISHED and f._result == 1
    except Exception:       # noqa: BLE001 - any surprise means: do not rely on it
        return False


_FAST_FUTURES = _future_layout_known()


class AckFuture(_Future):
    """The ``concurrent.futures.Future`` of a ``put_message(s)_async``: its
    ``threading.Condition`` is made on first use.

    A standard future builds a Condition (an RLock behind a Python-level ``__init__``: most of
    what a future costs) that only someone waiting on, listening to, or cancelling the future
    needs. Every such path of ``Future`` reads ``self._condition`` first, which makes it here;
    ``complete_future`` completes a future nobody touched that way without any lock. Otherwise
    it is a plain ``Future`` (``asyncio.wrap_future``, ``concurrent.futures.wait``, callbacks).
    """

    def __init__(self):
        self._state = _F_PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def __getattr__(self, name):
        # made on first use (dict.setdefault is atomic: racing threads all get the one that
        # landed): a future nobody waits on or calls back costs the GC one object fewer each
        if name == "_condition":
            return self.__dict__.setdefault("_condition", _threading.Condition())
        if name == "_waiters" or name == "_done_callbacks":
            return self.__dict__.setdefault(name, [])
        raise AttributeError(name)

    def done(self):
        # the state is one attribute read; no Condition needed to read it
        s = self._state
        return s is _F_FINISHED or s is _F_CANCELLED or s is _F_CANCELLED_AND_NOTIFIED

    def result(self, timeout=None):
        # a finished future never changes again, and its result was stored before its state
        if self._state is _F_FINISHED and self._exception is None:
            return self._result
        return _Future.result(self, timeout)

    def exception(self, timeout=None):
        if self._state is _F_FINISHED:
            return self._exception
        return _Future.exception(self, timeout)


cdef object _new_future(object state, object value):
    cdef object f
    cdef dict d
    if not _FAST_FUTURES:
        f = _Future()
        if state is _F_FINISHED:
            f.set_result(value)
        return f
    f = AckFuture.__new__(AckFuture)
    d = f.__dict__
    d["_state"] = state
    d["_result"] = value
    d["_exception"] = None
    return f


def pending_future():
    """A new pending ``AckFuture``."""
    return _new_future(_F_PENDING, None)


def done_future(value):
    """An ``AckFuture`` already completed with ``value``."""
    return _new_future(_F_FINISHED, value)


def complete_future(fut, value):
    """Complete ``fut`` with ``value``; False when it was cancelled (or already done).

    An ``AckFuture`` without a Condition has no waiter, callback or canceller (each makes the
    Condition before it looks at the state), and nothing between the state check and the two
    stores below runs Python code or lets go of the GIL: the check-and-set is atomic without a
    lock. Any other future goes through ``set_result``."""
    cdef dict d
    if _FAST_FUTURES and type(fut) is AckFuture:
        d = fut.__dict__
        if "_condition" not in d:
            if d["_state"] is not _F_PENDING:
                return False
            d["_result"] = value
            d["_state"] = _F_FINISHED
            return True
    try:
        fut.set_result(value)
    except _InvalidStateError:
        return False
    return True
