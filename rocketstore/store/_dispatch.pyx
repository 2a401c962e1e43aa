# cython: language_level=3
"""The dispatch core: commit-log records -> consume-queue units (RocketMQ's ReputMessageService
loop body, docs/format.md §3, 5.2, 5.6).

``DispatchCore.dispatch`` walks records from the reput offset up to a bound. Records whose
queue is in a small C cache and whose unit lands at the end of that queue's current file are
dispatched without the GIL (the common case: a run of puts to known queues), so producers
keep running while a backlog is indexed. Anything else -- a queue seen for the first time, a
full queue file, a gap, an extra dispatcher such as the index -- takes the GIL path for that
one record. Units become visible to readers when the run ends (``ConsumeQueue.publish``).

One dispatcher at a time, under the core's own mutex: the store's dispatch thread, or a
caller that must bring the queues up to date now (recovery, topic deletion), both through
``dispatch``.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t, INT64_MAX
from libc.string cimport memcmp, memset

from rocketstore.store._csrc cimport (
    rs_java_hash, rs_load_acquire, rs_prefetch_write, RS_SYSFLAG_TX_MASK, RS_SYSFLAG_TX_PREPARED,
    RS_SYSFLAG_TX_ROLLBACK, pthread_mutex_init, pthread_mutex_destroy, pthread_mutex_lock,
    pthread_mutex_trylock, pthread_mutex_unlock,
)
from rocketstore.store._codec cimport (RecordInfo, PropRefs, parse_record, MessageExt, find_prop,
                                 find_dispatch_props, record_check, checked_record,
                                 report_bad_record, REC_OK, REC_SKIP)
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._consumequeue cimport ConsumeQueue, CQState, cq_append_fast
from rocketstore.store._indexfile cimport (IndexFile, index_key_hash, index_topic_prefix,
                                     index_key_hash_from)

import logging

log = logging.getLogger("rocketstore.store.dispatch")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef const char *SCHEDULE_TOPIC_C = b"SCHEDULE_TOPIC_XXXX"

cdef enum:
    STOP_END = 0                # reached the bound
    STOP_BLANK = 1              # end-of-file blank: go to the next file
    STOP_INVALID = 2            # not a record (yet): stop this round
    STOP_SLOW = 3               # this record needs the GIL path
    STOP_LIMIT = 4              # record budget used


cdef bint valid_topic(const char *t, Py_ssize_t n) noexcept nogil:
    """RocketMQ's topic rule, ^[%|a-zA-Z0-9_-]+$ and at most 255 bytes, on raw bytes."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if n <= 0 or n > 255:
        return False
    for i in range(n):
        c = <unsigned char>t[i]
        if not ((c >= 0x61 and c <= 0x7A) or (c >= 0x41 and c <= 0x5A) or (c >= 0x30 and c <= 0x39)
                or c == 0x25 or c == 0x7C or c == 0x5F or c == 0x2D):
            return False
    return True


cdef inline uint32_t _slot_of(const char *topic, int n, int32_t qid) noexcept nogil:
    cdef uint32_t h = 2166136261u
    cdef int i
    for i in range(n):
        h = (h ^ <unsigned char>topic[i]) * 16777619u
    h = (h ^ <uint32_t>qid) * 16777619u
    return h % CACHE_SLOTS


@cython.final
cdef class DispatchCore:
    """Dispatches commit-log records into consume queues (and extra dispatchers).

    Parameters
    ----------
    commit_log_queue : MappedFileQueue
        The commit log's files.
    find_queue : callable
        ``find_queue(topic, queue_id) -> ConsumeQueue``: finds or creates a queue.
    delay_levels_ms : list of int
        Delay of each level (index 1..N; index 0 unused), for the tags code of
        ``SCHEDULE_TOPIC_XXXX`` records (docs/format.md §3).
    """
    def __init__(self, commit_log_queue, find_queue, delay_levels_ms, int64_t reput_offset=0):
        self.cl_mfq = commit_log_queue
        self.find_queue = find_queue
        self.reput_offset = reput_offset
        self._cached = []
        self.dispatchers = []
        self.deleted_before = {}
        self.index_last_phy = -1
        self.crc_from = -1
        memset(self.cache, 0, sizeof(self.cache))
        self.max_delay_level = min(len(delay_levels_ms) - 1, MAX_DELAY_LEVELS - 1)
        for i in range(self.max_delay_level + 1):
            self.delay_ms[i] = delay_levels_ms[i]
        self.schedule_topic_b = SCHEDULE_TOPIC.encode()

    def __cinit__(self):
        pthread_mutex_init(&self.mu, NULL)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)

    def set_index(self, index_service):
        """Build the index too (``IndexService``), or stop building it (None)."""
        self.index_service = index_service
        if index_service is None:
            self.index_file = None
            self.index_last_phy = -1
        else:
            self.index_last_phy = index_service.last_indexed_offset()
            self.index_file = index_service.last_file()

    def invalidate(self):
        """Forget the cached queues (after queues were destroyed or reloaded)."""
        memset(self.cache, 0, sizeof(self.cache))
        self.n_dirty = 0
        self._cached = []
        self._mf = None

    def exclusive(self, fn):
        """Run ``fn()`` with no dispatch in progress (any thread), then
        forget the cached queues: what ``fn`` removes is never written to again."""
        self._acquire()
        try:
            self._publish_all()
            return fn()
        finally:
            self.invalidate()
            pthread_mutex_unlock(&self.mu)

    # -- per record ---------------------------------------------------------------------------

    cdef int64_t tags_code(self, const RecordInfo *info) noexcept nogil:
        cdef PropRefs refs
        find_dispatch_props(info.props, info.props_len, &refs)
        return self.tags_code_refs(info, &refs)

    cdef int64_t tags_code_refs(self, const RecordInfo *info, const PropRefs *refs) noexcept nogil:
        """Java hashCode of TAGS; a delivery time for delayed records (docs/format.md §3)."""
        cdef int32_t vlen = 0
        cdef const char *v
        cdef int64_t level = 0
        cdef int32_t i = 0
        cdef bint negative = False, garbage = False
        if info.topic_len == 19 and memcmp(info.topic, SCHEDULE_TOPIC_C, 19) == 0:
            v = refs.delay
            vlen = refs.delay_len
            if v != NULL:
                # Integer.parseInt: an optional sign, then digits that fit an int
                if vlen > 0 and (v[0] == 45 or v[0] == 43):
                    negative = v[0] == 45
                    i = 1
                garbage = i >= vlen
                while i < vlen and not garbage:
                    if v[i] < 48 or v[i] > 57:
                        garbage = True
                    else:
                        level = level * 10 + (v[i] - 48)
                        garbage = level > <int64_t>2147483647 + <int64_t>negative
                    i += 1
                if garbage:
                    return info.store_ts + 1000     # not a level: as an unknown level
                if negative:
                    level = -level
                if level > self.max_delay_level:
                    level = self.max_delay_level
                if level > 0:
                    return info.store_ts + self.delay_ms[level]
        if refs.tags == NULL or refs.tags_len == 0:
            return 0
        return <int64_t>rs_java_hash(refs.tags, <size_t>refs.tags_len)

    cdef CacheSlot *_lookup(self, const RecordInfo *info) noexcept nogil:
        cdef CacheSlot *s = &self.cache[_slot_of(info.topic, info.topic_len, info.queue_id)]
        if s.state != NULL and s.queue_id == info.queue_id and s.topic_len == info.topic_len \
                and memcmp(s.topic, info.topic, info.topic_len) == 0:
            return s
        return NULL

    cdef ConsumeQueue _queue_slow(self, const RecordInfo *info):
        """The record's queue, found or created; None when its topic or queue id could not be
        a queue's (a path is never built from an unchecked on-disk name)."""
        if not valid_topic(info.topic, info.topic_len) or info.queue_id < 0:
            return None
        topic = info.topic[:info.topic_len].decode("ascii")
        cdef ConsumeQueue cq = self.find_queue(topic, info.queue_id)
        cdef CacheSlot *s = &self.cache[_slot_of(info.topic, info.topic_len, info.queue_id)]
        s.topic = PyBytes_AS_STRING(cq.topic_b)
        s.topic_len = <int>PyBytes_GET_SIZE(cq.topic_b)
        s.queue_id = cq.queue_id
        s.state = &cq.state
        s.cq = <PyObject *>cq
        self._cached.append(cq)
        if len(self._cached) > 4 * CACHE_SLOTS:
            # drop refs of queues no longer cached
            live = {<object>self.cache[i].cq for i in range(CACHE_SLOTS) if self.cache[i].cq != NULL}
            self._cached = [q for q in self._cached if q in live]
        return cq

    cdef void _mark(self, CacheSlot *s) noexcept nogil:
        """List the slot for the next publish (once)."""
        if not s.listed:
            s.listed = 1
            self.dirty[self.n_dirty] = <int>(s - self.cache)
            self.n_dirty += 1

    cdef void _publish_all(self) noexcept:
        # only the listed slots: a walk over the whole cache would cost every small run
        cdef int i
        cdef CacheSlot *s
        for i in range(self.n_dirty):
            s = &self.cache[self.dirty[i]]
            s.listed = 0
            if s.state != NULL and s.state.dirty:
                (<ConsumeQueue>s.cq).publish()
        self.n_dirty = 0

    # -- index -------------------------------------------------------------------------------

    cdef void _index_flush(self) noexcept nogil:
        """Write the pending record's keys (room was checked when it was staged)."""
        cdef Py_ssize_t k
        if self.pend_n == 0:
            return
        for k in range(self.pend_n):
            self.index_file.put_key_hash(self.pend_hashes[k], self.pend_phy, self.pend_ts, False)
        self.index_file.write_header()
        self.index_last_phy = self.pend_phy
        self.pend_n = 0

    cdef int _index_fast(self, const RecordInfo *info, const PropRefs *refs) noexcept nogil:
        """Stage the record's keys (UNIQ_KEY, then each KEYS token; docs/format.md §6.3) when they
        all fit the current file, after writing the previously staged record's; -1 when the
        GIL path must index it (file full, allocation to grow, the boundary record after a
        restart, very many keys) -- with nothing staged left behind."""
        cdef int32_t vlen = 0, i, start, prefix
        cdef Py_ssize_t n = 0, k
        cdef const char *v
        if self.index_file is None or info.phy_offset < self.index_last_phy:
            return 0
        if info.sys_flag & RS_SYSFLAG_TX_MASK == RS_SYSFLAG_TX_ROLLBACK:
            return 0
        if info.phy_offset == self.index_last_phy:
            self._index_flush()
            return -1
        prefix = index_topic_prefix(info.topic, info.topic_len)
        cdef int32_t *h = self.pend_hashes + self.pend_n     # stage after the pending keys
        cdef Py_ssize_t room = MAX_FAST_KEYS - self.pend_n
        if refs.uniq != NULL:
            h[n] = index_key_hash_from(prefix, refs.uniq, refs.uniq_len)
            n += 1
        v = refs.keys
        vlen = refs.keys_len
        if v != NULL:
            start = 0
            for i in range(vlen + 1):
                if i == vlen or v[i] == 32:
                    if i > start:
                        if n == room:
                            self._index_flush()
                            return -1
                        h[n] = index_key_hash_from(prefix, v + start, i - start)
                        n += 1
                    start = i + 1
        if n == 0:
            return 0
        if not self.index_file.has_room(self.pend_n + n):
            self._index_flush()
            return -1       # file full (RocketMQ fills it key by key) or allocation to grow
        for k in range(n):
            rs_prefetch_write(self.index_file.slot_addr(h[k]))
        # write the previous record's keys, then this one becomes the pending one
        cdef int32_t tmp[MAX_FAST_KEYS]
        for k in range(n):
            tmp[k] = h[k]
        self._index_flush()
        for k in range(n):
            self.pend_hashes[k] = tmp[k]
        self.pend_n = n
        self.pend_phy = info.phy_offset
        self.pend_ts = info.store_ts
        return 0

    cdef int _index_slow(self, const RecordInfo *info) except -1:
        cdef int32_t vlen = 0, i, start
        cdef const char *v
        if self.index_file is None or info.phy_offset < self.index_last_phy:
            return 0
        # the boundary record may have been cut between two keys (a crash, a dropped file):
        # put only the keys the index does not hold yet
        self._boundary = info.phy_offset == self.index_last_phy
        if info.sys_flag & RS_SYSFLAG_TX_MASK == RS_SYSFLAG_TX_ROLLBACK:
            return 0
        v = find_prop(info.props, info.props_len, "UNIQ_KEY", 8, &vlen)
        if v != NULL and vlen > 0:
            self._put_key_rolling(info, v, vlen)
        v = find_prop(info.props, info.props_len, "KEYS", 4, &vlen)
        if v != NULL:
            start = 0
            for i in range(vlen + 1):
                if i == vlen or v[i] == 32:
                    if i > start:
                        self._put_key_rolling(info, v + start, i - start)
                    start = i + 1
        self.index_last_phy = info.phy_offset
        return 0

    cdef int _put_key_rolling(self, const RecordInfo *info, const char *key, int32_t n) except -1:
        cdef int32_t h = index_key_hash(info.topic, info.topic_len, key, n)
        cdef int rc
        if self._boundary:
            for f in self.index_service.files[-2:]:
                if (<IndexFile>f).has_entry(h, info.phy_offset):
                    return 0
        for attempt in range(3):
            rc = self.index_file.put_key_hash(h, info.phy_offset, info.store_ts)
            if rc == 1:
                return 0
            if rc < 0:
                self.index_file.grow()                  # OSError (a full disk) propagates
            else:
                self.index_file = self.index_service.roll()     # full: a new file
        raise RuntimeError(f"index: could not place a key of commit-log offset {info.phy_offset}")

    # -- the loop ------------------------------------------------------------------------------

    cdef int _run(self, MappedFile mf, Py_ssize_t *pos, Py_ssize_t *end_p, bint follow,
                  Py_ssize_t *budget, RecordInfo *info) noexcept nogil:
        """Dispatch records from *pos while the fast path applies; returns the stop reason with
        *pos at the record it stopped on (info filled for STOP_SLOW).

        With ``follow``, records the writer appends meanwhile are dispatched too (its committed
        position is read with acquire semantics), so a dispatcher keeping up with a producer
        does not come back for the GIL after every put.
        """
        cdef Py_ssize_t rc
        cdef int tx
        cdef CacheSlot *s = NULL
        cdef int64_t tags
        cdef const char *base = mf.base
        cdef int64_t file_from = mf.file_from_offset
        cdef Py_ssize_t end = end_p[0]
        cdef PropRefs refs
        while True:
            if pos[0] >= end:
                if not follow:
                    return STOP_END
                end = rs_load_acquire(&mf.committed_pos)
                end_p[0] = end          # the caller's slow path reads up to here too
                if pos[0] >= end:
                    return STOP_END
            if budget[0] <= 0:
                return STOP_LIMIT
            rc = parse_record(base + pos[0], end - pos[0], False, info)
            if rc == 0:
                return STOP_BLANK
            if rc == -2:
                pos[0] += info.total_size   # parsed, but TOTALSIZE disagrees: skip it (5.6)
                continue
            if rc < 0 or info.phy_offset != file_from + pos[0]:
                return STOP_SLOW if file_from + pos[0] < self.verify_below else STOP_INVALID
            if file_from + pos[0] < self.verify_below and record_check(
                    info, base + pos[0], 0 <= self.crc_from <= file_from + pos[0]) != REC_OK:
                return STOP_SLOW
            tx = info.sys_flag & RS_SYSFLAG_TX_MASK
            if info.queue_id < 0:
                return STOP_SLOW
            if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                s = self._lookup(info)
                if s == NULL:
                    return STOP_SLOW
            find_dispatch_props(info.props, info.props_len, &refs)
            if self._index_fast(info, &refs) < 0:
                return STOP_SLOW
            if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                tags = self.tags_code_refs(info, &refs)
                self._mark(s)
                if cq_append_fast(s.state, info.phy_offset, info.total_size, tags,
                                  info.queue_offset, info.store_ts) < 0:
                    return STOP_SLOW
            pos[0] += rc
            budget[0] -= 1

    def dispatch(self, int64_t bound, Py_ssize_t max_records=1 << 16, bint follow=False):
        """Dispatch records in [reput_offset, bound); returns how many were dispatched.

        Stops early at data that is not (yet) a valid record, and after ``max_records``. With
        ``follow`` (``bound`` is the commit log's live end), records appended during the call
        are dispatched as well. One dispatcher at a time: callers from other threads wait.
        """
        cdef Py_ssize_t n
        self._acquire()
        try:
            n = self._dispatch(bound, max_records, follow)
        finally:
            pthread_mutex_unlock(&self.mu)
        self._notify(n)
        return n

    cdef void _acquire(self) noexcept:
        # never block holding the GIL: the holder may need it (a new queue's files)
        if pthread_mutex_trylock(&self.mu) != 0:
            with nogil:
                pthread_mutex_lock(&self.mu)

    cdef int _notify(self, Py_ssize_t n) except -1:
        # the notifier's counter, not its property: no Python frame when nobody waits
        if n and self.notifier is not None and self.notifier._waiters:
            self.notifier.notify()
        return 0

    cdef MappedFile _file_at(self, int64_t offset):
        """The commit-log file holding ``offset`` (the last run's file when it still does)."""
        cdef MappedFile mf = self._mf
        if mf is not None and mf.base != NULL and mf.file_from_offset <= offset \
                and offset - mf.file_from_offset < mf.file_size:
            return mf
        mf = self.cl_mfq.find_mapped_file_by_offset(offset)
        self._mf = mf
        return mf

    cdef Py_ssize_t _dispatch(self, int64_t bound, Py_ssize_t max_records,
                              bint follow) except -1:
        """``dispatch`` under ``mu``; the fast path runs without the GIL."""
        cdef MappedFile mf
        cdef RecordInfo info
        cdef Py_ssize_t pos, end, budget = max_records, start_budget = max_records
        cdef int stop
        cdef int64_t tags
        cdef ConsumeQueue cq
        cdef bint extra
        cdef int tx
        while self.reput_offset < bound and budget > 0:
            mf = self._file_at(self.reput_offset)
            if mf is None:
                first = self.cl_mfq.get_min_offset()
                if 0 <= self.reput_offset < first:
                    self.reput_offset = first       # files were deleted under us
                    continue
                break
            pos = self.reput_offset - mf.file_from_offset
            end = min(<Py_ssize_t>mf.committed_pos, <Py_ssize_t>(bound - mf.file_from_offset))
            if pos >= end:
                if mf.committed_pos == mf.file_size:    # full (blank-terminated) file
                    self.reput_offset = mf.file_from_offset + mf.file_size
                    continue
                break
            extra = bool(self.dispatchers)
            if not extra:
                with nogil:
                    stop = self._run(mf, &pos, &end, follow, &budget, &info)
                    if self.index_file is not None:
                        self._index_flush()
            else:
                stop = STOP_END if pos >= end else STOP_SLOW
                if stop == STOP_SLOW:
                    rc = parse_record(mf.base + pos, end - pos, False, &info)
                    if rc == 0:
                        stop = STOP_BLANK
                    elif rc < 0 or info.phy_offset != mf.file_from_offset + pos:
                        stop = STOP_INVALID if rc != -2 else STOP_SLOW
            self.reput_offset = mf.file_from_offset + pos
            self._publish_all()
            if stop == STOP_END or stop == STOP_LIMIT:
                continue
            if stop == STOP_BLANK:
                self.reput_offset = mf.file_from_offset + mf.file_size
                continue
            if stop == STOP_INVALID:
                break
            # STOP_SLOW: one record under the GIL
            if self.reput_offset < self.verify_below:
                rc = checked_record(mf.base + pos, end - pos, self.reput_offset, &info,
                                    self.crc_from)
                if rc == REC_SKIP:
                    # found on disk, failed its check: recovery kept what follows it
                    report_bad_record(self.cl_mfq.store_path, self.reput_offset, mf.base + pos,
                                      end - pos, self.crc_from)
                    self.rejected += 1
                    self.reput_offset += info.total_size
                    continue
            rc = parse_record(mf.base + pos, end - pos, False, &info)
            if rc == -2:
                self.reput_offset += info.total_size
                continue
            if rc <= 0 and self.reput_offset < self.verify_below:
                # recovery found valid records after this damage (and reported it): go on
                # at the next one instead of stopping for good
                from rocketstore.store._commitlog import resync_offset
                nxt = resync_offset(mf, pos, end, self.crc_from)
                if nxt > pos:
                    self.reput_offset = mf.file_from_offset + nxt
                    continue
                if mf.committed_pos == mf.file_size and \
                        mf.file_from_offset + mf.file_size < self.verify_below:
                    self.reput_offset = mf.file_from_offset + mf.file_size
                    continue
            if rc <= 0:
                break
            tx = info.sys_flag & RS_SYSFLAG_TX_MASK
            if self.deleted_before and self._lookup(&info) == NULL and self._deleted(&info):
                self.reput_offset += rc         # a deleted topic's record: nothing to build
                continue
            if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                s = self._lookup(&info)
                cq = <ConsumeQueue>s.cq if s != NULL else self._queue_slow(&info)
                if cq is None or (self.reput_offset < self.verify_below and not
                                  cq.offset_plausible(info.phy_offset, info.queue_offset)):
                    # a topic, queue id or queue offset no queue could hold: nothing built
                    self._reject(&info)
                    self.reput_offset += rc
                    continue
                s = self._lookup(&info)
                if s != NULL:
                    self._mark(s)
                cq.put_position(info.phy_offset, info.total_size, self.tags_code(&info),
                                info.queue_offset, info.store_ts)
            try:
                self._index_slow(&info)
            except OSError as e:
                # RocketMQ's "index file error": keys stop being indexed, consumers go on
                log.error("index building stopped at commit-log offset %d: %s", info.phy_offset, e)
                self.index_error = e
                self.index_file = None
            if extra:
                msg = MessageExt.new(&info, None, mf, mf.base + pos, True, None)
                for d in self.dispatchers:
                    d(msg)
            self.reput_offset += rc
            budget -= 1
        self._publish_all()
        self.dispatched += start_budget - budget
        return start_budget - budget

    cdef bint _deleted(self, const RecordInfo *info) except -1:
        """The record belongs to a topic deleted after it was written. Checked only where the
        queue is not cached: queues of a deleted topic leave the cache at deletion, and a
        record that predates the deletion never follows one of the re-created topic."""
        if not valid_topic(info.topic, info.topic_len):
            return False
        cut = self.deleted_before.get(info.topic[:info.topic_len].decode("ascii"))
        return cut is not None and info.phy_offset < cut

    cdef int _reject(self, const RecordInfo *info) except -1:
        from rocketstore.store import integrity
        self.rejected += 1
        topic = info.topic[:min(info.topic_len, 300)]
        integrity.report(self.cl_mfq.store_path, info.phy_offset,
                         f"not dispatched: topic {topic!r}, queue {info.queue_id}, queue offset "
                         f"{info.queue_offset} cannot be a queue's")
        return 0

    def tags_code_of(self, MessageExt msg):
        """The tags code dispatch computes for a stored message (tests, tools)."""
        cdef RecordInfo info
        cdef bytes rec = msg.record()
        parse_record(rec, len(rec), False, &info)
        return self.tags_code(&info)
