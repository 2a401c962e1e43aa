cimport cython
from libc.stdint cimport int32_t, uint32_t, int64_t
from cpython.ref cimport PyObject

from rocketstore.store._csrc cimport pthread_mutex_t
from rocketstore.store._codec cimport RecordInfo, PropRefs
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._consumequeue cimport ConsumeQueue, CQState
from rocketstore.store._indexfile cimport IndexFile


cdef enum:
    CACHE_SLOTS = 256           # queues dispatched without the GIL (direct-mapped)
    MAX_DELAY_LEVELS = 64
    MAX_FAST_KEYS = 32          # index keys of one record handled without the GIL


cdef struct CacheSlot:
    const char *topic           # borrowed from the queue's topic_b
    int topic_len
    int32_t queue_id
    CQState *state              # inside the ConsumeQueue object (kept alive by the store)
    PyObject *cq
    int listed                  # in the core's list of slots to publish


@cython.final
cdef class DispatchCore:
    cdef object cl_mfq
    cdef object find_queue
    cdef public int64_t reput_offset
    cdef CacheSlot cache[CACHE_SLOTS]
    cdef int dirty[CACHE_SLOTS]         # slots written since the last publish
    cdef int n_dirty
    cdef list _cached                   # strong refs of the cached queues
    cdef int64_t delay_ms[MAX_DELAY_LEVELS]
    cdef int max_delay_level
    cdef bytes schedule_topic_b
    cdef public list dispatchers        # extra dispatchers: callables taking a MessageExt
    cdef public int64_t dispatched      # records dispatched so far (statistics)
    # records below this offset were found on disk at open, not written by this process:
    # each is checked (record_check, PHYSICALOFFSET, topic, queue offset) before dispatch
    cdef public int64_t verify_below
    cdef public int64_t rejected        # records not dispatched because they failed that
    cdef public int64_t crc_from        # records from here on must carry the record CRC
    cdef public object notifier         # woken after records are dispatched (has_waiters)
    # {topic: commit-log offset}: records of a deleted topic below its offset are not
    # dispatched (the topic's queues were removed; a re-created topic starts empty)
    cdef public dict deleted_before
    cdef MappedFile _mf                 # the commit-log file of the last run
    cdef pthread_mutex_t mu             # one dispatcher at a time (thread, recovery, close)
    # the index (docs/format.md §6): keys of each record go to the service's last file
    cdef object index_service
    cdef IndexFile index_file
    cdef public int64_t index_last_phy  # offset of the last indexed record, -1 for none
    cdef public object index_error      # the OSError that stopped index building, or None
    cdef bint _boundary                 # indexing the record at index_last_phy again
    cdef int32_t pend_hashes[MAX_FAST_KEYS]
    cdef Py_ssize_t pend_n
    cdef int64_t pend_phy, pend_ts

    cdef int64_t tags_code(self, const RecordInfo *info) noexcept nogil
    cdef int64_t tags_code_refs(self, const RecordInfo *info, const PropRefs *refs) noexcept nogil
    cdef CacheSlot *_lookup(self, const RecordInfo *info) noexcept nogil
    cdef ConsumeQueue _queue_slow(self, const RecordInfo *info)
    cdef void _mark(self, CacheSlot *s) noexcept nogil
    cdef bint _deleted(self, const RecordInfo *info) except -1
    cdef int _reject(self, const RecordInfo *info) except -1
    cdef void _publish_all(self) noexcept
    cdef void _index_flush(self) noexcept nogil
    cdef int _index_fast(self, const RecordInfo *info, const PropRefs *refs) noexcept nogil
    cdef int _index_slow(self, const RecordInfo *info) except -1
    cdef int _put_key_rolling(self, const RecordInfo *info, const char *key, int32_t n) except -1
    cdef int _run(self, MappedFile mf, Py_ssize_t *pos, Py_ssize_t *end_p, bint follow,
                  Py_ssize_t *budget, RecordInfo *info) noexcept nogil
    cdef void _acquire(self) noexcept
    cdef int _notify(self, Py_ssize_t n) except -1
    cdef MappedFile _file_at(self, int64_t offset)
    cdef Py_ssize_t _dispatch(self, int64_t bound, Py_ssize_t max_records,
                              bint follow) except -1
