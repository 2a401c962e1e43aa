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

Source layout: one extension module, its concepts in files pulled in with ``include`` (Cython
allows it only at module level, and a class has one base, so ``CommitLog`` is the last of a
chain of layers): queue offsets, results and the put lock (``_commitlog_core.pxi``), the
transient-pool commit (``_commitlog_commit.pxi``), group commit and the sync flush
(``_commitlog_flush.pxi``), fault-ahead (``_commitlog_fault.pxi``), reads and recovery's scan
(``_commitlog_read.pxi``), futures of durable puts (``_commitlog_futures.pxi``); the put path
is here.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
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
    RS_MAGIC_V1, RS_MAGIC_V2, RS_MAX_TOPIC_LEN_V1, RS_MAX_PROPERTIES_LEN, PyObject_GC_UnTrack,
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


include "_commitlog_core.pxi"
include "_commitlog_commit.pxi"
include "_commitlog_flush.pxi"
include "_commitlog_fault.pxi"
include "_commitlog_read.pxi"
include "_commitlog_futures.pxi"


# -- the put path ------------------------------------------------------------------------

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
cdef class CommitLog(_LogReader):
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
    cdef dict _topic_rules              # topic -> (writeable, write_queue_nums), from topics.json
    cdef bint _v1_only                  # refuse topics longer than 127 (v2 records)
    cdef object _roll_error             # the OSError of the last failed file creation
    cdef object _roll_status            # and the status it gives the put
    cdef public bint debug_ack_before_sync  # WRONG on purpose: the crash harness' negative control
    cdef public bint prop_crc           # append the 5.x record CRC property (off, as RocketMQ's
                                        # default: the store turns it on from its config)

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
                             bytes born_host not None, acks, transform=None,
                             bint direct=False):
        """``put_messages_async`` of a broker's batch send from its wire body, without a
        ``Message`` per entry: entry ``i``'s body is ``body[o:o + n]`` and its exact stored
        properties ``props[po:po + pn]``, where ``(o, n, flag, po, pn)`` are the five native
        int32 at ``meta[20 * i:]`` (``rocketstore.remoting._wire.wire_batch`` builds them; no
        UNIQ_KEY is added). Same guarantees as ``put_messages``. ``direct``: as for
        ``put_wire_async`` (the in-process batch lane's path)."""
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
                return r if direct else acks.completed(r, transform)
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
            # a negative born time is the put time (an in-process batch never stamped)
            total += self._size_entry(b, i, False, born_timestamp < 0, f.body_len)
        r = self._append_batch(topic, qid, b, total, False)
        if (r.status is PUT_OK and (self.sync_flush or self.wait_replica)
                and not self.debug_ack_before_sync):
            return acks.defer(r, r.commitlog_offset + r.wrote_bytes, transform)
        return r if direct else acks.completed(r, transform)


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
