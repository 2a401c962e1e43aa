# cython: language_level=3
"""Batch decode of commit-log records into column buffers (the Spark source's read path).

``decode_units`` walks a run of consume-queue units (optionally only the positions a tag scan
kept), reads each unit's record from the commit log, cross-checks it as ``get_message`` does
(offset, queue, queue offset, topic), applies the exact tag and store-time filters, and
appends every field to growable C buffers: Arrow-style int32 offsets + UTF-8/binary data
for strings, lists and maps, fixed-width arrays for numbers. Python then wraps the buffers
into pyarrow arrays without touching a row.

Stateless; reads only published units and records below the files' committed positions.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT64_MIN, INT64_MAX
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memcmp, memchr
from cython.view cimport array as cvarray

from rocketstore.store._csrc cimport (RS_CQ_UNIT_SIZE, RS_CQ_FILLER_SIZE, RS_HOST_V4_LEN,
                                RS_SYSFLAG_COMPRESSED, inet_ntop, AF_INET6)
from rocketstore.store._codec cimport (RecordInfo, parse_record, checked_record, report_bad_record,
                                       REC_SKIP, PropRefs, find_dispatch_props,
                               next_prop, find_prop)
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._bytes cimport get_i64, get_i32, get_u32, get_u64

import numpy as np


cdef const char *HEX = b"0123456789ABCDEF"

cdef enum:
    MAX_TAGS = 8

# Column bits of ``decode_units``' ``fields``: a read decodes and copies only the columns it
# was asked for (a count asks for none: the records are still parsed and checked, so every
# projection yields the same rows).
cdef enum:
    F_QUEUE_OFFSET = 1 << 0
    F_COMMITLOG_OFFSET = 1 << 1
    F_MSG_ID = 1 << 2
    F_TAGS = 1 << 3
    F_KEYS = 1 << 4
    F_PROPERTIES = 1 << 5
    F_BODY = 1 << 6
    F_BORN_TS = 1 << 7
    F_STORE_TS = 1 << 8
    F_BORN_HOST = 1 << 9
    F_STORE_HOST = 1 << 10
    F_RECONSUME = 1 << 11
    F_SYS_FLAG = 1 << 12
    F_ALL = (1 << 13) - 1

#: {column name: bit} for ``fields`` (topic and queue_id are constants of a split: no bit).
FIELD_BITS = {
    "queue_offset": F_QUEUE_OFFSET, "commitlog_offset": F_COMMITLOG_OFFSET, "msg_id": F_MSG_ID,
    "tags": F_TAGS, "keys": F_KEYS, "properties": F_PROPERTIES, "body": F_BODY,
    "born_timestamp": F_BORN_TS, "store_timestamp": F_STORE_TS, "born_host": F_BORN_HOST,
    "store_host": F_STORE_HOST, "reconsume_times": F_RECONSUME, "sys_flag": F_SYS_FLAG,
}
ALL_FIELDS = F_ALL


# -- growable buffers ----------------------------------------------------------------------------

cdef struct Buf:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int buf_reserve(Buf *b, Py_ssize_t extra) except -1 nogil:
    cdef Py_ssize_t cap
    cdef char *q
    if b.n + extra <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < b.n + extra:
        cap *= 2
    q = <char *>realloc(b.p, <size_t>cap)
    if q == NULL:
        with gil:
            raise MemoryError(f"column buffer of {cap} bytes")
    b.p = q
    b.cap = cap
    return 0


cdef inline int buf_put(Buf *b, const void *src, Py_ssize_t n) except -1 nogil:
    if b.n + n > b.cap:
        buf_reserve(b, n)
    if n:
        memcpy(b.p + b.n, src, <size_t>n)
    b.n += n
    return 0


cdef inline int buf_i32(Buf *b, int32_t v) except -1 nogil:
    return buf_put(b, &v, 4)


cdef inline int buf_i64(Buf *b, int64_t v) except -1 nogil:
    return buf_put(b, &v, 8)


cdef object buf_array(Buf *b, object dtype):
    """The buffer as a numpy array of ``dtype``, without a copy: the memory moves to the
    array (freed with it) and the buffer is left empty."""
    if b.n == 0:
        return np.empty(0, dtype=dtype)
    cdef cvarray a = cvarray(shape=(b.n,), itemsize=1, format="B", mode="c",
                             allocate_buffer=False)
    a.data = b.p
    a.callback_free_data = free
    b.p = NULL
    b.n = b.cap = 0
    return np.asarray(a).view(dtype)


# -- one string column: int32 offsets (with the leading 0) and data --------------------------------

cdef struct StrCol:
    Buf off
    Buf data


cdef int str_init(StrCol *c) except -1 nogil:
    return buf_i32(&c.off, 0)


cdef inline int str_add(StrCol *c, const char *p, Py_ssize_t n) except -1 nogil:
    buf_put(&c.data, p, n)
    if c.data.n > 0x7FFFFFFF:
        with gil:
            raise OverflowError("a string column of one batch passed 2 GiB: lower max_bytes")
    return buf_i32(&c.off, <int32_t>c.data.n)


cdef inline int32_t str_count(StrCol *c) noexcept nogil:
    return <int32_t>(c.off.n // 4 - 1)


cdef void str_free(StrCol *c) noexcept nogil:
    free(c.off.p)
    free(c.data.p)


cdef object str_arrays(StrCol *c):
    return buf_array(&c.off, np.int32), buf_array(&c.data, np.uint8)


# -- field formatting ----------------------------------------------------------------------------

cdef int add_host(StrCol *c, const char *h, int n) except -1 nogil:
    """'a.b.c.d:port' (IPv4) or '[v6]:port', as MessageExt.born_host / store_host."""
    cdef char tmp[80]
    cdef int k = 0, i
    cdef const uint8_t *u = <const uint8_t *>h
    cdef uint32_t port = get_u32(h + n - 4)
    if n == RS_HOST_V4_LEN:
        for i in range(4):
            k += _utoa(tmp + k, u[i])
            if i < 3:
                tmp[k] = 46         # '.'
                k += 1
    else:
        tmp[0] = 91                 # '['
        if inet_ntop(AF_INET6, h, tmp + 1, 64) == NULL:
            tmp[1] = 0
        k = 1
        while tmp[k] != 0:
            k += 1
        tmp[k] = 93                 # ']'
        k += 1
    tmp[k] = 58                     # ':'
    k += 1
    k += _utoa(tmp + k, port)
    return str_add(c, tmp, k)


cdef inline int _utoa(char *dst, uint32_t v) noexcept nogil:
    cdef char rev[12]
    cdef int n = 0, i
    while True:
        rev[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        dst[i] = rev[n - 1 - i]
    return n


cdef int add_msg_id(StrCol *c, const char *host, int n, int64_t phy) except -1 nogil:
    """Offset message id: store host bytes + commit-log offset, uppercase hex (docs/format.md §7)."""
    cdef char tmp[64]
    cdef int i, k = 0
    cdef const uint8_t *u = <const uint8_t *>host
    cdef uint64_t v = <uint64_t>phy
    for i in range(n):
        tmp[k] = HEX[u[i] >> 4]
        tmp[k + 1] = HEX[u[i] & 15]
        k += 2
    for i in range(15, -1, -1):
        tmp[k + i] = HEX[v & 15]
        v >>= 4
    return str_add(c, tmp, k + 16)


# -- the decoder ---------------------------------------------------------------------------------

@cython.final
cdef class _Columns:
    """Column buffers of one batch (freed when the object goes); only the ``fields`` columns
    are filled."""
    cdef Py_ssize_t rows
    cdef int fields
    cdef Buf queue_offset, commitlog_offset, born_ts, store_ts, reconsume, sys_flag
    cdef Buf tags_valid, compressed
    cdef StrCol msg_id, tags, body, born_host, store_host
    cdef Buf keys_off, props_off             # list / map offsets (int32, leading 0)
    cdef StrCol keys, prop_keys, prop_vals

    def __cinit__(self, int fields=F_ALL):
        self.fields = fields
        str_init(&self.msg_id)
        str_init(&self.tags)
        str_init(&self.body)
        str_init(&self.born_host)
        str_init(&self.store_host)
        str_init(&self.keys)
        str_init(&self.prop_keys)
        str_init(&self.prop_vals)
        buf_i32(&self.keys_off, 0)
        buf_i32(&self.props_off, 0)

    def __dealloc__(self):
        cdef Buf *bufs[10]
        cdef int i
        bufs[0] = &self.queue_offset
        bufs[1] = &self.commitlog_offset
        bufs[2] = &self.born_ts
        bufs[3] = &self.store_ts
        bufs[4] = &self.reconsume
        bufs[5] = &self.sys_flag
        bufs[6] = &self.tags_valid
        bufs[7] = &self.compressed
        bufs[8] = &self.keys_off
        bufs[9] = &self.props_off
        for i in range(10):
            free(bufs[i].p)
        str_free(&self.msg_id)
        str_free(&self.tags)
        str_free(&self.body)
        str_free(&self.born_host)
        str_free(&self.store_host)
        str_free(&self.keys)
        str_free(&self.prop_keys)
        str_free(&self.prop_vals)

    cdef int reserve(self, const unsigned char[::1] units, const int64_t[::1] positions,
                     Py_ssize_t count) except -1:
        """Size the buffers of the wanted columns for ``count`` rows up front (the units give
        the record sizes, a bound on the bodies): no realloc copies while decoding."""
        cdef Py_ssize_t k, i, nunits = units.shape[0] // RS_CQ_UNIT_SIZE
        cdef int64_t total = 0
        cdef int32_t size
        cdef int f = self.fields
        if f & F_BODY:
            for k in range(count):
                i = k if positions is None else positions[k]
                if 0 <= i < nunits:
                    size = get_i32(<const char *>&units[i * RS_CQ_UNIT_SIZE + 8])
                    if 0 < size < RS_CQ_FILLER_SIZE:
                        total += size
            buf_reserve(&self.body.off, count * 4)
            buf_reserve(&self.body.data, total)
        if f & F_QUEUE_OFFSET:
            buf_reserve(&self.queue_offset, count * 8)
        if f & F_COMMITLOG_OFFSET:
            buf_reserve(&self.commitlog_offset, count * 8)
        if f & F_BORN_TS:
            buf_reserve(&self.born_ts, count * 8)
        if f & F_STORE_TS:
            buf_reserve(&self.store_ts, count * 8)
        if f & F_RECONSUME:
            buf_reserve(&self.reconsume, count * 4)
        if f & F_SYS_FLAG:
            buf_reserve(&self.sys_flag, count * 4)
        if f & F_TAGS:
            buf_reserve(&self.tags_valid, count)
            buf_reserve(&self.tags.off, count * 4)
        if f & F_KEYS:
            buf_reserve(&self.keys_off, count * 4)
        if f & F_PROPERTIES:
            buf_reserve(&self.props_off, count * 4)
        if f & F_MSG_ID:
            buf_reserve(&self.msg_id.off, count * 4)
            buf_reserve(&self.msg_id.data, count * 32)
        if f & F_BORN_HOST:
            buf_reserve(&self.born_host.off, count * 4)
            buf_reserve(&self.born_host.data, count * 21)
        if f & F_STORE_HOST:
            buf_reserve(&self.store_host.off, count * 4)
            buf_reserve(&self.store_host.data, count * 21)
        return 0

    cdef int add(self, const RecordInfo *info) except -1 nogil:
        cdef PropRefs refs
        cdef int64_t us
        cdef uint8_t one = 1, zero = 0
        cdef int32_t i, start, n
        cdef int32_t rows = <int32_t>self.rows
        cdef int f = self.fields
        self.rows += 1
        if f == 0:
            return 0            # a count: the row is all there is
        if f & F_QUEUE_OFFSET:
            buf_i64(&self.queue_offset, info.queue_offset)
        if f & F_COMMITLOG_OFFSET:
            buf_i64(&self.commitlog_offset, info.phy_offset)
        if f & F_BORN_TS:
            buf_i64(&self.born_ts, info.born_ts * 1000)       # Spark timestamps are microseconds
        if f & F_STORE_TS:
            buf_i64(&self.store_ts, info.store_ts * 1000)
        if f & F_RECONSUME:
            buf_i32(&self.reconsume, info.reconsume_times)
        if f & F_SYS_FLAG:
            buf_i32(&self.sys_flag, info.sys_flag)
        if f & F_MSG_ID:
            add_msg_id(&self.msg_id, info.store_host, info.store_host_len, info.phy_offset)
        if f & F_BORN_HOST:
            add_host(&self.born_host, info.born_host, info.born_host_len)
        if f & F_STORE_HOST:
            add_host(&self.store_host, info.store_host, info.store_host_len)
        if f & F_BODY:
            if info.sys_flag & RS_SYSFLAG_COMPRESSED:
                buf_i32(&self.compressed, rows)
            str_add(&self.body, info.body, info.body_len)
        if not (f & (F_PROPERTIES | F_TAGS | F_KEYS)):
            return 0
        if f & F_PROPERTIES:
            _add_props(self, info.props, info.props_len, &refs)
            buf_i32(&self.props_off, str_count(&self.prop_keys))
        else:
            find_dispatch_props(info.props, info.props_len, &refs)
        if f & F_TAGS:
            if refs.tags != NULL:
                str_add(&self.tags, refs.tags, refs.tags_len)
                buf_put(&self.tags_valid, &one, 1)
            else:
                str_add(&self.tags, NULL, 0)
                buf_put(&self.tags_valid, &zero, 1)
        # KEYS: space-separated, empty pieces dropped (MessageExt.keys)
        if f & F_KEYS:
            if refs.keys != NULL:
                start = 0
                for i in range(refs.keys_len + 1):
                    if i == refs.keys_len or refs.keys[i] == 32:
                        if i > start:
                            str_add(&self.keys, refs.keys + start, i - start)
                        start = i + 1
            buf_i32(&self.keys_off, str_count(&self.keys))
        return 0

    def arrays(self):
        """{column: numpy array(s)} of the batch's wanted columns, and ``rows`` (see
        rocketstore.spark.arrow for the shape). The arrays take over the buffers: call once."""
        cdef int f = self.fields
        out = {"rows": self.rows}
        if f & F_QUEUE_OFFSET:
            out["queue_offset"] = buf_array(&self.queue_offset, np.int64)
        if f & F_COMMITLOG_OFFSET:
            out["commitlog_offset"] = buf_array(&self.commitlog_offset, np.int64)
        if f & F_BORN_TS:
            out["born_timestamp"] = buf_array(&self.born_ts, np.int64)
        if f & F_STORE_TS:
            out["store_timestamp"] = buf_array(&self.store_ts, np.int64)
        if f & F_RECONSUME:
            out["reconsume_times"] = buf_array(&self.reconsume, np.int32)
        if f & F_SYS_FLAG:
            out["sys_flag"] = buf_array(&self.sys_flag, np.int32)
        if f & F_BODY:
            out["compressed_rows"] = buf_array(&self.compressed, np.int32)
            out["body"] = str_arrays(&self.body)
        if f & F_TAGS:
            out["tags_valid"] = buf_array(&self.tags_valid, np.bool_)
            out["tags"] = str_arrays(&self.tags)
        if f & F_MSG_ID:
            out["msg_id"] = str_arrays(&self.msg_id)
        if f & F_BORN_HOST:
            out["born_host"] = str_arrays(&self.born_host)
        if f & F_STORE_HOST:
            out["store_host"] = str_arrays(&self.store_host)
        if f & F_KEYS:
            out["keys_offsets"] = buf_array(&self.keys_off, np.int32)
            out["keys"] = str_arrays(&self.keys)
        if f & F_PROPERTIES:
            out["props_offsets"] = buf_array(&self.props_off, np.int32)
            out["prop_keys"] = str_arrays(&self.prop_keys)
            out["prop_values"] = str_arrays(&self.prop_vals)
        return out


cdef enum:
    MAX_SEEN_PROPS = 64             # properties deduplicated in a local table


cdef int _add_props(_Columns c, const char *props, int32_t n, PropRefs *refs) except -1 nogil:
    """Each 'name\x01value\x02' with both sides non-empty (parse_properties' rule) into the
    map columns, and TAGS / KEYS into ``refs``. A name that occurs again later is skipped, so
    the last one wins as in the parsed dict."""
    cdef const char *p = props
    cdef const char *end = props + n
    cdef const char *k
    cdef const char *v
    cdef const char *names[MAX_SEEN_PROPS]
    cdef const char *vals[MAX_SEEN_PROPS]
    cdef int32_t nlens[MAX_SEEN_PROPS]
    cdef int32_t vlens[MAX_SEEN_PROPS]
    cdef int count = 0
    cdef int32_t klen, vl
    refs.tags = refs.keys = NULL
    refs.tags_len = refs.keys_len = 0
    while p < end:
        p = next_prop(p, end, &k, &klen, &v, &vl)
        if k == NULL:
            continue
        if klen == 4 and memcmp(k, "TAGS", 4) == 0:
            refs.tags, refs.tags_len = v, vl
        elif klen == 4 and memcmp(k, "KEYS", 4) == 0:
            refs.keys, refs.keys_len = v, vl
        if count < MAX_SEEN_PROPS:
            names[count], nlens[count], vals[count], vlens[count] = k, klen, v, vl
        count += 1
    if count > MAX_SEEN_PROPS:
        _add_many_props(c, props, n)    # more than the table holds: the slow way
    else:
        _flush_props(c, names, nlens, vals, vlens, count)
    return 0


cdef int _add_many_props(_Columns c, const char *props, int32_t n) except -1 nogil:
    """_add_props for records with more properties than its table: each name is checked
    against the rest of the string (quadratic, for a rare record)."""
    cdef const char *p = props
    cdef const char *end = props + n
    cdef const char *k
    cdef const char *v
    cdef int32_t klen, vl, later_len
    while p < end:
        p = next_prop(p, end, &k, &klen, &v, &vl)
        # find_prop over the rest gives the last value of this name, if it occurs again
        if k != NULL and (p >= end or find_prop(p, <int32_t>(end - p), k, klen, &later_len) == NULL):
            str_add(&c.prop_keys, k, klen)
            str_add(&c.prop_vals, v, vl)
    return 0


cdef int _flush_props(_Columns c, const char **names, int32_t *nlens, const char **vals,
                      int32_t *vlens, int count) except -1 nogil:
    cdef int i, j
    cdef bint later
    for i in range(count):
        later = False
        for j in range(i + 1, count):
            if nlens[j] == nlens[i] and memcmp(names[j], names[i], <size_t>nlens[i]) == 0:
                later = True
                break
        if not later:
            str_add(&c.prop_keys, names[i], nlens[i])
            str_add(&c.prop_vals, vals[i], vlens[i])
    return 0


@cython.final
cdef class _TagSet:
    cdef int n
    cdef list tags_b
    cdef const char *ptrs[MAX_TAGS]
    cdef int lens[MAX_TAGS]

    def __init__(self, tags):
        self.tags_b = [t.encode("utf-8") for t in tags]
        if len(self.tags_b) > MAX_TAGS:
            raise ValueError(f"tags: {len(self.tags_b)} tags given, at most {MAX_TAGS}")
        self.n = len(self.tags_b)
        for i in range(self.n):
            self.ptrs[i] = PyBytes_AS_STRING(self.tags_b[i])
            self.lens[i] = <int>PyBytes_GET_SIZE(self.tags_b[i])

    cdef bint matches(self, const RecordInfo *info) noexcept nogil:
        cdef PropRefs refs
        cdef int i
        find_dispatch_props(info.props, info.props_len, &refs)
        if refs.tags == NULL:
            return False
        for i in range(self.n):
            if self.lens[i] == refs.tags_len and memcmp(self.ptrs[i], refs.tags, <size_t>refs.tags_len) == 0:
                return True
        return False


def tag_set(tags):
    """The exact-match side of a tags filter (the consume-queue scan matched hash codes)."""
    return _TagSet(tags)


def decode_units(const unsigned char[::1] units not None, const int64_t[::1] positions,
                 commit_log_queue, bytes topic_b not None, int queue_id, int64_t first_offset,
                 _TagSet tags=None, int64_t min_ts=INT64_MIN, int64_t max_ts=INT64_MAX,
                 int fields=F_ALL):
    """Decode the records of consume-queue ``units`` (20-byte units; unit i is queue offset
    ``first_offset + i``), or only of the unit indices in ``positions``.

    Returns ``(columns, records_read)``: ``columns`` is a dict of numpy arrays (``arrays()``)
    for the rows kept; ``records_read`` counts the commit-log records parsed. A unit whose
    record is gone, unreadable or not this queue's message (a damaged unit) is skipped, as
    ``get_message`` skips it; ``tags`` keeps only records whose TAGS equals one of them;
    rows keep ``min_ts <= store_timestamp <= max_ts`` (ms). ``fields`` (bits of
    ``FIELD_BITS``) names the columns to fill: the others are not decoded nor copied (the
    records are parsed and checked all the same, so the rows do not depend on it).
    """
    cdef Py_ssize_t nunits = units.shape[0] // RS_CQ_UNIT_SIZE
    cdef Py_ssize_t count = nunits if positions is None else positions.shape[0]
    cdef Py_ssize_t k, i, pos, rc
    cdef int64_t crc_from = commit_log_queue.record_crc_from
    cdef const char *u
    cdef int64_t phy, records = 0
    cdef int32_t size
    cdef RecordInfo info
    cdef MappedFile mf = None
    cdef _Columns cols = _Columns(fields)
    cdef const char *tp = PyBytes_AS_STRING(topic_b)
    cdef int32_t tlen = <int32_t>PyBytes_GET_SIZE(topic_b)
    if count == 0:
        return cols.arrays(), 0
    cols.reserve(units, positions, count)
    try:
        for k in range(count):
            i = k if positions is None else positions[k]
            if i < 0 or i >= nunits:
                raise IndexError(f"unit position {i} outside the {nunits} units given")
            u = <const char *>&units[i * RS_CQ_UNIT_SIZE]
            phy = get_i64(u)
            size = get_i32(u + 8)
            if size == RS_CQ_FILLER_SIZE or size <= 0:
                continue
            if mf is None or not (mf.file_from_offset <= phy < mf.file_from_offset + mf.file_size):
                if mf is not None:
                    mf.unpin()
                    mf = None
                mf = commit_log_queue.find_mapped_file_by_offset(phy)
                if mf is None:
                    continue
                mf.pin()
            pos = phy - mf.file_from_offset
            if mf.base == NULL or pos + size > mf.committed_pos:
                continue
            records += 1
            with nogil:
                rc = checked_record(mf.base + pos, size, phy, &info, crc_from)
            if rc == REC_SKIP:
                report_bad_record(commit_log_queue.store_path, phy, mf.base + pos, size, crc_from)
            if rc != size:
                continue
            if (info.queue_id != queue_id
                    or info.queue_offset != first_offset + i or info.topic_len != tlen
                    or memcmp(info.topic, tp, <size_t>tlen) != 0):
                continue                # a damaged unit (or record) is not this queue's message
            if info.store_ts < min_ts or info.store_ts > max_ts:
                continue
            if tags is not None and not tags.matches(&info):
                continue                # same hash code, another tag
            cols.add(&info)
    finally:
        if mf is not None:
            mf.unpin()
    return cols.arrays(), records


def decode_records(const unsigned char[::1] buf not None, bytes topic_b not None, int queue_id,
                   int64_t first_offset, int64_t end_offset, _TagSet tags=None,
                   int64_t min_ts=INT64_MIN, int64_t max_ts=INT64_MAX):
    """Decode records stored back to back, as a ``PULL_MESSAGE`` answer carries them, into
    ``decode_units``' columns: the rows of queue offsets [first_offset, end_offset) passing
    the exact tag and store-time filters.

    Returns ``(columns, records_parsed)``. Every record must parse and pass its CRC check
    and belong to ``topic_b`` / ``queue_id``, else ``ValueError`` names the byte position
    (a pull answer has no damaged units to skip, unlike a store's consume queue)."""
    cdef Py_ssize_t n = buf.shape[0], pos = 0, rc
    cdef RecordInfo info
    cdef _Columns cols = _Columns()
    cdef const char *base
    cdef const char *tp = PyBytes_AS_STRING(topic_b)
    cdef int32_t tlen = <int32_t>PyBytes_GET_SIZE(topic_b)
    cdef int64_t records = 0
    if n == 0:
        return cols.arrays(), 0
    base = <const char *>&buf[0]
    while pos < n:
        with nogil:
            rc = parse_record(base + pos, n - pos, True, &info)
        if rc <= 0:
            raise ValueError(f"no valid record at byte {pos} of {n} (code {rc})")
        records += 1
        pos += rc
        if info.queue_id != queue_id or info.topic_len != tlen or \
                memcmp(info.topic, tp, <size_t>tlen) != 0:
            raise ValueError(f"the record at byte {pos - rc} is of "
                             f"{PyBytes_FromStringAndSize(info.topic, info.topic_len)!r}/"
                             f"{info.queue_id}, not {topic_b!r}/{queue_id}")
        if info.queue_offset < first_offset or info.queue_offset >= end_offset:
            continue
        if info.store_ts < min_ts or info.store_ts > max_ts:
            continue
        if tags is not None and not tags.matches(&info):
            continue
        cols.add(&info)
    return cols.arrays(), records
