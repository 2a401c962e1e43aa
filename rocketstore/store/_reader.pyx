# cython: language_level=3
"""get_message: consume-queue units -> messages, with RocketMQ's statuses (docs/format.md §13).

One call reads units of one consume-queue file from the requested queue offset, filters them
by tags code (up to 8 wanted codes compared in a C loop), reads each matching record from
the commit log, compares its real TAGS string against the wanted tags (so a hash collision
never returns a message it should not), and stops when the batch is full by RocketMQ's rules
(``isTheBatchFull``). Messages are ``MessageExt`` objects whose body is a zero-copy view of
the commit-log mapping.

Stateless; safe to call from any thread while the dispatcher appends (it reads only units
below the published write position).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t
from libc.string cimport memcmp, memcpy

from rocketstore.store._csrc cimport RS_CQ_UNIT_SIZE, RS_CQ_FILLER_SIZE, rs_java_hash
from rocketstore.store._codec cimport (RecordInfo, parse_record, MessageExt, find_prop,
                                       checked_record, report_bad_record, REC_SKIP)
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._bytes cimport get_i64 as _be64, get_i32 as _be32
from rocketstore.store._consumequeue cimport ConsumeQueue

from rocketstore.store.status import GetMessageStatus

cdef object FOUND = GetMessageStatus.FOUND
cdef object NO_MATCHED_MESSAGE = GetMessageStatus.NO_MATCHED_MESSAGE
cdef object MESSAGE_WAS_REMOVING = GetMessageStatus.MESSAGE_WAS_REMOVING
cdef object OFFSET_FOUND_NULL = GetMessageStatus.OFFSET_FOUND_NULL
cdef object OFFSET_OVERFLOW_BADLY = GetMessageStatus.OFFSET_OVERFLOW_BADLY
cdef object OFFSET_OVERFLOW_ONE = GetMessageStatus.OFFSET_OVERFLOW_ONE
cdef object OFFSET_TOO_SMALL = GetMessageStatus.OFFSET_TOO_SMALL
cdef object NO_MESSAGE_IN_QUEUE = GetMessageStatus.NO_MESSAGE_IN_QUEUE

cdef enum:
    MAX_TAGS = 8                    # wanted tags per get (a subscription's code set)
    MIN_FILTER_BYTES = 16000        # units scanned per call: max(16000 B, max_msgs * 20)


@cython.final
cdef class TagFilter:
    """Wanted tags of a get: their Java hash codes (the consume-queue pre-filter) and their
    UTF-8 strings (the exact check on the record)."""
    cdef int n
    cdef int64_t codes[MAX_TAGS]
    cdef list tags_b                    # bytes of each wanted tag (kept alive for the pointers)
    cdef const char *ptrs[MAX_TAGS]
    cdef int lens[MAX_TAGS]

    def __init__(self, tags):
        cdef bytes b
        tags_b = []
        for t in tags:
            b = t.encode("utf-8")
            if b not in tags_b:
                tags_b.append(b)
        if len(tags_b) > MAX_TAGS:
            raise ValueError(f"tags: {len(tags_b)} tags given, at most {MAX_TAGS} per get")
        self.tags_b = tags_b
        self.n = len(tags_b)
        for i in range(self.n):
            b = tags_b[i]
            self.ptrs[i] = PyBytes_AS_STRING(b)
            self.lens[i] = <int>PyBytes_GET_SIZE(b)
            self.codes[i] = rs_java_hash(self.ptrs[i], <size_t>self.lens[i])

    @property
    def codes(self):
        return [self.codes[i] for i in range(self.n)]

    cdef inline bint code_matches(self, int64_t code) noexcept nogil:
        cdef int i
        for i in range(self.n):
            if self.codes[i] == code:
                return True
        return False

    cdef bint record_matches(self, const RecordInfo *info) noexcept nogil:
        cdef int32_t vlen = 0
        cdef const char *v = find_prop(info.props, info.props_len, "TAGS", 4, &vlen)
        cdef int i
        if v == NULL:
            return False
        for i in range(self.n):
            if self.lens[i] == vlen and memcmp(self.ptrs[i], v, <size_t>vlen) == 0:
                return True
        return False


@cython.final
@cython.freelist(16)
cdef class GetMessageResult:
    """Outcome of a get (docs/format.md §13): ``status``, ``messages`` (MessageExt, zero-copy
    bodies), ``next_begin_offset`` to ask for next, the queue's ``min_offset`` and
    ``max_offset``, ``buffer_total_size`` (bytes of the records returned),
    ``units_scanned`` (consume-queue units read: the work a filter saved shows here) and
    ``suggest_pulling_from_slave``."""
    cdef readonly object status
    cdef readonly list messages
    cdef readonly int64_t next_begin_offset
    cdef readonly int64_t min_offset
    cdef readonly int64_t max_offset
    cdef readonly int64_t buffer_total_size
    cdef readonly int64_t units_scanned
    cdef readonly bint suggest_pulling_from_slave
    cdef readonly int64_t msg_count4commercial
    cdef readonly object error

    @property
    def message_count(self):
        return len(self.messages)

    @property
    def found(self):
        return self.status is FOUND

    def __iter__(self):
        return iter(self.messages)

    def __len__(self):
        return len(self.messages)

    def __repr__(self):
        return (f"GetMessageResult(status={self.status.name}, messages={len(self.messages)}, "
                f"next_begin_offset={self.next_begin_offset}, min_offset={self.min_offset}, "
                f"max_offset={self.max_offset})")


def make_result(status, int64_t next_begin_offset, int64_t min_offset, int64_t max_offset,
                error=None):
    """A result without messages (statuses decided before the scan)."""
    cdef GetMessageResult r = GetMessageResult.__new__(GetMessageResult)
    r.status = status
    r.messages = []
    r.next_begin_offset = next_begin_offset
    r.min_offset = min_offset
    r.max_offset = max_offset
    r.error = error
    return r


@cython.final
cdef class ReadLimits:
    """The batch-size settings of isTheBatchFull and the in-memory test (StoreConfig)."""
    cdef public int64_t bytes_in_memory, count_in_memory, bytes_in_disk, count_in_disk
    cdef public int64_t memory_bytes          # RAM x access_message_in_memory_max_ratio

    def __init__(self, int64_t bytes_in_memory=256 * 1024, int64_t count_in_memory=32,
                 int64_t bytes_in_disk=64 * 1024, int64_t count_in_disk=8,
                 int64_t memory_bytes=1 << 62):
        self.bytes_in_memory = bytes_in_memory
        self.count_in_memory = count_in_memory
        self.bytes_in_disk = bytes_in_disk
        self.count_in_disk = count_in_disk
        self.memory_bytes = memory_bytes


cdef inline bint _batch_full(ReadLimits lim, int32_t size, int64_t max_msgs, int64_t total,
                             int64_t count, int64_t max_bytes, bint in_disk) noexcept:
    if total == 0 or count == 0:
        return False
    if max_msgs <= count:
        return True
    if max_bytes > 0 and total + size > max_bytes:
        return True
    if in_disk:
        return total + size > lim.bytes_in_disk or count > lim.count_in_disk - 1
    return total + size > lim.bytes_in_memory or count > lim.count_in_memory - 1


def get_message(ConsumeQueue cq, commit_log_queue, int64_t offset, int64_t max_msgs,
                int64_t max_bytes, TagFilter tag_filter, ReadLimits limits, int64_t max_offset_py,
                bint raw=False):
    """Read up to ``max_msgs`` messages of ``cq`` from queue ``offset`` (docs/format.md §13)."""
    cdef int64_t min_off = cq.min_index()
    cdef int64_t max_off = cq.max_index()
    if max_off == 0:
        return make_result(NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
    if offset < min_off:
        return make_result(OFFSET_TOO_SMALL, min_off, min_off, max_off)
    if offset == max_off:
        return make_result(OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
    if offset > max_off:
        # docs/format.md §13 and 5.x: back to the max (4.9.x sent readers of a queue whose min is
        # 0 back to 0 instead)
        return make_result(OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
    cdef MappedFile cqf = cq.read_file(offset)
    cdef Py_ssize_t upos = offset * RS_CQ_UNIT_SIZE - cqf.file_from_offset if cqf is not None else 0
    if cqf is None or cqf.base == NULL or upos >= cqf.committed_pos:
        return make_result(OFFSET_FOUND_NULL, cq.roll_next_file(offset), min_off, max_off)
    # the scan reads the unit file through a raw pointer: pin it against a concurrent unmap
    cqf.pin()
    try:
        return _scan_units(cq, cqf, upos, commit_log_queue, offset, max_msgs, max_bytes,
                           tag_filter, limits, max_offset_py, raw, min_off, max_off)
    finally:
        cqf.unpin()


cdef GetMessageResult _scan_units(ConsumeQueue cq, MappedFile cqf, Py_ssize_t upos,
                                  commit_log_queue, int64_t offset, int64_t max_msgs,
                                  int64_t max_bytes, TagFilter tag_filter, ReadLimits limits,
                                  int64_t max_offset_py, bint raw, int64_t min_off,
                                  int64_t max_off):
    cdef const char *u = cqf.base + upos
    cdef Py_ssize_t nbytes = cqf.committed_pos - upos
    cdef Py_ssize_t limit = max(<Py_ssize_t>MIN_FILTER_BYTES, <Py_ssize_t>(max_msgs * RS_CQ_UNIT_SIZE))
    cdef Py_ssize_t i = 0
    cdef int64_t phy, tags, total = 0, count = 0, next_phy_file = -1, max_pulling = -1
    cdef int32_t size
    cdef Py_ssize_t rc, pos
    cdef bint in_disk
    cdef RecordInfo info
    cdef MappedFile mf = None
    cdef MessageExt m
    cdef int64_t cl_file_size = commit_log_queue.file_size
    cdef const char *topic_p = cq.topic_b
    cdef int32_t topic_len = len(cq.topic_b)
    cdef GetMessageResult r = GetMessageResult.__new__(GetMessageResult)
    cdef list msgs = []
    cdef str topic = cq.topic
    cdef int64_t crc_from = commit_log_queue.record_crc_from
    r.status = NO_MATCHED_MESSAGE
    while i < nbytes and i < limit:
        phy = _be64(u + i)
        size = _be32(u + i + 8)
        tags = _be64(u + i + 12)
        i += RS_CQ_UNIT_SIZE
        if size == RS_CQ_FILLER_SIZE:
            continue                    # filler units are never returned
        if size <= 0:
            # a zeroed or damaged unit inside the queue: skipped and reported, the queue
            # goes on
            _report_unit(cq, commit_log_queue, offset + i // RS_CQ_UNIT_SIZE - 1, phy,
                         f"size {size}: a zeroed or damaged unit")
            continue
        max_pulling = phy
        if next_phy_file >= 0 and phy < next_phy_file:
            continue                    # that commit-log file is gone
        in_disk = max_offset_py - phy > limits.memory_bytes
        if _batch_full(limits, size, max_msgs, total, count, max_bytes, in_disk):
            i -= RS_CQ_UNIT_SIZE
            break
        if tag_filter is not None and not tag_filter.code_matches(tags):
            continue
        if mf is None or not (mf.file_from_offset <= phy < mf.file_from_offset + mf.file_size):
            mf = commit_log_queue.find_mapped_file_by_offset(phy)
        pos = phy - mf.file_from_offset if mf is not None else -1
        if mf is None or mf.base == NULL or pos + size > mf.committed_pos:
            if not commit_log_queue.read_only and _unit_past_log(commit_log_queue, phy):
                # a damaged unit (its offset or size): skip and report it; what follows is
                # intact (marking its "file" gone would hide every later unit)
                _report_unit(cq, commit_log_queue, offset + i // RS_CQ_UNIT_SIZE - 1, phy,
                             f"points outside the commit log (offset {phy}, size {size})")
                mf = None
                continue
            if total == 0:
                r.status = MESSAGE_WAS_REMOVING
            next_phy_file = phy + cl_file_size - phy % cl_file_size
            mf = None
            continue
        rc = checked_record(mf.base + pos, size, phy, &info, crc_from)
        if rc == REC_SKIP:
            report_bad_record(commit_log_queue.store_path, phy, mf.base + pos, size, crc_from)
            continue                    # damaged: never handed out, the queue goes on
        if rc != size:
            if total == 0:
                r.status = MESSAGE_WAS_REMOVING
            _report_unit(cq, commit_log_queue, offset + i // RS_CQ_UNIT_SIZE - 1, phy,
                         f"no record of {size} bytes at commit-log offset {phy}")
            continue
        if info.queue_id != cq.queue_id or info.queue_offset != offset + i // RS_CQ_UNIT_SIZE - 1 \
                or info.topic_len != topic_len or memcmp(info.topic, topic_p, <size_t>topic_len) != 0:
            # a damaged unit (or record) is not this queue's message
            _report_unit(cq, commit_log_queue, offset + i // RS_CQ_UNIT_SIZE - 1, phy,
                         f"the record at commit-log offset {phy} is queue {info.queue_id} "
                         f"offset {info.queue_offset}")
            continue
        if tag_filter is not None and not tag_filter.record_matches(&info):
            continue                    # same hash, another tag
        m = MessageExt.new(&info, None, mf, mf.base + pos, raw, topic)
        msgs.append(m)
        total += size
        count += 1
        r.msg_count4commercial += (size + 4095) // 4096
        r.status = FOUND
        next_phy_file = -1
    r.messages = msgs
    r.units_scanned = i // RS_CQ_UNIT_SIZE
    r.next_begin_offset = offset + i // RS_CQ_UNIT_SIZE
    r.min_offset = min_off
    r.max_offset = max_off
    r.buffer_total_size = total
    r.suggest_pulling_from_slave = max_pulling >= 0 and max_offset_py - max_pulling > limits.memory_bytes
    return r


cdef int _report_unit(ConsumeQueue cq, commit_log_queue, int64_t index, int64_t phy,
                      str why) except -1:
    from rocketstore.store import integrity
    integrity.report_unit(commit_log_queue.store_path, cq.topic, cq.queue_id, index, phy, why)
    return 0


cdef bint _unit_past_log(commit_log_queue, int64_t phy) except -1:
    """Whether a unit's record would lie at or past the commit log's end, or at a negative
    offset (damage), rather than in a file retention deleted (below the log's min)."""
    return phy < 0 or phy >= commit_log_queue.get_min_offset()


# -- time lookups -------------------------------------------------------------------------------

cdef int64_t _store_ts_at(object cl_mfq, int64_t phy, int64_t min_phy) except? -3:
    """STORETIMESTAMP of the record at ``phy``: -1 below the commit log's min (too old), -2
    when it cannot be read."""
    if phy < min_phy:
        return -1
    cdef MappedFile mf = cl_mfq.find_mapped_file_by_offset(phy)
    if mf is None or mf.base == NULL:
        return -2
    cdef RecordInfo info
    cdef Py_ssize_t pos = phy - mf.file_from_offset
    if parse_record(mf.base + pos, mf.committed_pos - pos, False, &info) <= 0:
        return -2
    return info.store_ts


def store_timestamp_at(ConsumeQueue cq, cl_mfq, int64_t index, int64_t min_phy):
    """Store time of the message at queue offset ``index``, or -1."""
    unit = cq.get_unit(index)
    if unit is None or unit[1] == RS_CQ_FILLER_SIZE:
        return -1
    cdef int64_t ts = _store_ts_at(cl_mfq, unit[0], min_phy)
    return ts if ts >= 0 else -1


def offset_by_time(ConsumeQueue cq, cl_mfq, int64_t timestamp, bint upper, int64_t min_phy):
    """Queue offset for ``timestamp`` with 5.x semantics (docs/format.md §5.4).

    LOWER: the first unit stored at or after ``timestamp`` (all older -> one past the last
    unit; all newer -> the first unit). UPPER: the last unit stored at or before it (all
    older -> the last unit; all newer -> 0). Runs of equal times resolve to their first
    (LOWER) or last (UPPER) unit. Units are in commit-log order, so store times are
    non-decreasing along the queue: a binary search over the queue, one record read per probe.
    """
    cdef int64_t lo = cq.get_min_offset_in_queue(), hi = cq.get_max_offset_in_queue()
    cdef int64_t first = lo, last = hi - 1, mid, ts
    if hi <= lo:
        return 0
    # first unit whose time is >= timestamp (LOWER) or > timestamp (UPPER)
    while lo < hi:
        mid = lo + (hi - lo) // 2
        unit = cq.get_unit(mid)
        if unit is None:
            return 0
        if unit[1] == RS_CQ_FILLER_SIZE:
            lo = mid + 1
            continue
        ts = _store_ts_at(cl_mfq, unit[0], min_phy)
        if ts == -2:
            return 0
        if ts < timestamp or (upper and ts == timestamp) or ts == -1:
            lo = mid + 1
        else:
            hi = mid
    if not upper:
        return lo                   # == last + 1 when every unit is older
    if lo == first:
        return 0                    # every unit is newer
    return lo - 1


# -- key lookups ---------------------------------------------------------------------------------

cdef bint _has_key(const RecordInfo *info, const char *key, int32_t klen) noexcept nogil:
    """The record's UNIQ_KEY is ``key``, or ``key`` is one of its space-separated KEYS."""
    cdef int32_t vlen = 0, i, start
    cdef const char *v = find_prop(info.props, info.props_len, "UNIQ_KEY", 8, &vlen)
    if v != NULL and vlen == klen and memcmp(v, key, <size_t>klen) == 0:
        return True
    v = find_prop(info.props, info.props_len, "KEYS", 4, &vlen)
    if v == NULL:
        return False
    start = 0
    for i in range(vlen + 1):
        if i == vlen or v[i] == 32:
            if i - start == klen and memcmp(v + start, key, <size_t>klen) == 0:
                return True
            start = i + 1
    return False


def verify_candidates(commit_log_queue, candidates, str topic, str key, Py_ssize_t max_num,
                      bint raw=False, int64_t begin_ts=-(1 << 62), int64_t end_ts=1 << 62):
    """Messages at the candidate offsets that really carry ``key`` in ``topic`` (an index
    chain also holds other keys of the same hash) and were stored in [begin_ts, end_ts], at
    most ``max_num``, each offset once."""
    cdef bytes topic_b = topic.encode("utf-8"), key_b = key.encode("utf-8")
    cdef const char *tp = topic_b
    cdef const char *kp = key_b
    cdef int32_t tlen = len(topic_b), klen = len(key_b)
    cdef list out = []
    cdef set seen = set()
    cdef MappedFile mf = None
    cdef MessageExt m
    cdef RecordInfo info
    cdef Py_ssize_t pos, rc
    cdef int64_t phy
    cdef int64_t crc_from = commit_log_queue.record_crc_from
    for c in candidates:
        if len(out) >= max_num:
            break
        phy = c
        if phy in seen:
            continue
        seen.add(phy)
        if mf is None or not (mf.file_from_offset <= phy < mf.file_from_offset + mf.file_size):
            mf = commit_log_queue.find_mapped_file_by_offset(phy)
            if mf is None or mf.base == NULL:
                mf = None
                continue
        pos = phy - mf.file_from_offset
        if pos >= mf.committed_pos:
            continue
        rc = checked_record(mf.base + pos, mf.committed_pos - pos, phy, &info, crc_from)
        if rc == REC_SKIP:
            report_bad_record(commit_log_queue.store_path, phy, mf.base + pos, mf.committed_pos - pos,
                              crc_from)
        if rc <= 0 or info.topic_len != tlen or memcmp(info.topic, tp, <size_t>tlen) != 0:
            continue
        if info.store_ts < begin_ts or info.store_ts > end_ts or not _has_key(&info, kp, klen):
            continue
        out.append(MessageExt.new(&info, None, mf, mf.base + pos, raw, topic))
    return out


# -- bulk read ------------------------------------------------------------------------------------

@cython.final
cdef class BodyBatch:
    """Bodies of consecutive messages of one queue in one buffer (``get_message_bodies``).

    ``buffer`` holds every body as stored, back to back; body ``i`` is
    ``buffer[offsets[i]:offsets[i + 1]]`` and was stored at queue offset ``queue_offsets[i]``
    with SYSFLAG ``sys_flags[i]`` (bit 0: compressed). Every record was checked (record CRC
    when it has one, else body CRC) before its body was copied; one that fails is left out
    and reported. ``next_begin_offset`` is where to read next."""
    cdef readonly object status
    cdef readonly bytes buffer
    cdef readonly object offsets
    cdef readonly object queue_offsets
    cdef readonly object sys_flags
    cdef readonly int64_t next_begin_offset
    cdef readonly int64_t min_offset
    cdef readonly int64_t max_offset

    def __len__(self):
        return len(self.queue_offsets)

    def __iter__(self):
        """Each body as a memoryview of ``buffer`` (a view per body: slower than slicing with
        ``offsets`` in bulk)."""
        mv = memoryview(self.buffer)
        offs = self.offsets
        for i in range(len(self.queue_offsets)):
            yield mv[offs[i]:offs[i + 1]]

    def __repr__(self):
        return (f"BodyBatch(status={self.status.name}, messages={len(self)}, "
                f"bytes={len(self.buffer)}, next_begin_offset={self.next_begin_offset})")


def get_bodies(ConsumeQueue cq, commit_log_queue, int64_t offset, Py_ssize_t max_msgs,
               Py_ssize_t max_bytes):
    """Up to ``max_msgs`` bodies (``max_bytes`` of them, 0 for no limit) of ``cq`` from queue
    ``offset``; statuses as ``get_message``. One C pass checks each record and notes its body,
    a second copies the bodies into one buffer."""
    import numpy as np
    cdef int64_t min_off = cq.min_index() if cq is not None else 0
    cdef int64_t max_off = cq.max_index() if cq is not None else 0
    cdef BodyBatch b = BodyBatch.__new__(BodyBatch)
    b.min_offset = min_off
    b.max_offset = max_off
    b.buffer = b""
    b.offsets = np.zeros(1, dtype=np.int64)
    b.queue_offsets = np.zeros(0, dtype=np.int64)
    b.sys_flags = np.zeros(0, dtype=np.int32)
    b.next_begin_offset = offset
    if max_off == 0:
        b.status, b.next_begin_offset = NO_MESSAGE_IN_QUEUE, 0
        return b
    if offset < min_off:
        b.status, b.next_begin_offset = OFFSET_TOO_SMALL, min_off
        return b
    if offset >= max_off:
        b.status = OFFSET_OVERFLOW_ONE if offset == max_off else OFFSET_OVERFLOW_BADLY
        b.next_begin_offset = offset if offset == max_off else max_off
        return b
    cdef MappedFile cqf = cq.read_file(offset)
    cdef Py_ssize_t upos = offset * RS_CQ_UNIT_SIZE - cqf.file_from_offset if cqf is not None else 0
    if cqf is None or cqf.base == NULL or upos >= cqf.committed_pos:
        b.status, b.next_begin_offset = OFFSET_FOUND_NULL, cq.roll_next_file(offset)
        return b
    cdef Py_ssize_t nunits = min(<Py_ssize_t>((cqf.committed_pos - upos) // RS_CQ_UNIT_SIZE),
                                 max_msgs)
    queue_offsets = np.empty(nunits, dtype=np.int64)
    offsets = np.empty(nunits + 1, dtype=np.int64)
    sys_flags = np.empty(nunits, dtype=np.int32)
    cdef int64_t[::1] qo = queue_offsets
    cdef int64_t[::1] bo = offsets
    cdef int32_t[::1] sf = sys_flags
    # body pointers stay valid: the files are pinned until the copy is done
    cdef list pinned = []
    cdef const char **src = <const char **>PyMem_Malloc(max(nunits, 1) * sizeof(char *))
    if src == NULL:
        raise MemoryError()
    cdef Py_ssize_t i = 0, n = 0, pos, rc, k
    cdef int64_t total = 0, phy
    cdef int32_t size
    cdef const char *u
    cdef RecordInfo info
    cdef MappedFile mf = None
    cdef bint lost = False
    cdef char *dst
    cdef int64_t crc_from = commit_log_queue.record_crc_from
    cqf.pin()
    pinned.append(cqf)
    try:
        u = cqf.base + upos
        while i < nunits:
            phy = _be64(u + i * RS_CQ_UNIT_SIZE)
            size = _be32(u + i * RS_CQ_UNIT_SIZE + 8)
            i += 1
            if size == RS_CQ_FILLER_SIZE:
                continue
            if size <= 0:
                _report_unit(cq, commit_log_queue, offset + i - 1, phy,
                             f"size {size}: a zeroed or damaged unit")
                continue
            if mf is None or not (mf.file_from_offset <= phy < mf.file_from_offset + mf.file_size):
                mf = commit_log_queue.find_mapped_file_by_offset(phy)
                if mf is None or mf.base == NULL:
                    mf = None
                    if not commit_log_queue.read_only and _unit_past_log(commit_log_queue, phy):
                        _report_unit(cq, commit_log_queue, offset + i - 1, phy,
                                     f"points outside the commit log (offset {phy}, size {size})")
                        continue
                    lost = n == 0
                    continue
                mf.pin()
                pinned.append(mf)
            pos = phy - mf.file_from_offset
            if pos + size > mf.committed_pos:
                if not commit_log_queue.read_only:
                    _report_unit(cq, commit_log_queue, offset + i - 1, phy,
                                 f"points outside the commit log (offset {phy}, size {size})")
                    continue
                lost = n == 0
                continue
            rc = checked_record(mf.base + pos, size, phy, &info, crc_from)
            if rc == REC_SKIP:
                report_bad_record(commit_log_queue.store_path, phy, mf.base + pos, size, crc_from)
                continue
            if rc != size or info.queue_id != cq.queue_id or info.queue_offset != offset + i - 1:
                # a damaged unit (or record) is not this queue's message
                _report_unit(cq, commit_log_queue, offset + i - 1, phy,
                             f"no record of this queue's offset {offset + i - 1} and {size} "
                             f"bytes at commit-log offset {phy}")
                continue
            if max_bytes > 0 and n > 0 and total + info.body_len > max_bytes:
                i -= 1
                break
            src[n] = info.body
            qo[n] = info.queue_offset
            sf[n] = info.sys_flag
            bo[n] = total
            total += info.body_len
            n += 1
        bo[n] = total
        b.buffer = PyBytes_FromStringAndSize(NULL, total)
        dst = PyBytes_AS_STRING(b.buffer)
        with nogil:
            for k in range(n):
                memcpy(dst + bo[k], src[k], <size_t>(bo[k + 1] - bo[k]))
    finally:
        PyMem_Free(src)
        for f in pinned:
            (<MappedFile>f).unpin()
    b.offsets = offsets[:n + 1]
    b.queue_offsets = queue_offsets[:n]
    b.sys_flags = sys_flags[:n]
    b.next_begin_offset = offset + i
    b.status = FOUND if n else (MESSAGE_WAS_REMOVING if lost else NO_MATCHED_MESSAGE)
    return b


# -- records for the wire -------------------------------------------------------------------------

cdef inline void _flush_run(list out, MappedFile mf, Py_ssize_t start, Py_ssize_t end):
    if mf is not None:
        out.append(mf.whole_view()[start:end])


def record_views(list messages):
    """``(views, nbytes)``: the whole records of ``messages`` as read-only views of their mapped
    commit-log files, in order, records adjacent in one file joined into one view; ``nbytes``
    is their total length. No byte is copied: each view pins its mapping (a file released by
    retention or a closing store stays mapped until the last view goes), so the views can be
    written to a socket later. A message that is not backed by a mapped file (a detached
    ``copy()``) contributes a copy of its record."""
    cdef list out = []
    cdef MessageExt m
    cdef MappedFile mf, run = None
    cdef Py_ssize_t start, end, run_start = 0, run_end = 0, total = 0
    for obj in messages:
        m = <MessageExt?>obj
        mf = m._mf
        total += m.store_size
        if mf is None or mf.base == NULL:
            _flush_run(out, run, run_start, run_end)
            run = None
            out.append(m.record())
            continue
        start = m._rec - mf.base
        end = start + m.store_size
        if mf is run and start == run_end:
            run_end = end
            continue
        _flush_run(out, run, run_start, run_end)
        run, run_start, run_end = mf, start, end
    _flush_run(out, run, run_start, run_end)
    return out, total
