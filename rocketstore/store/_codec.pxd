cimport cython
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t, uint8_t
from libc.string cimport memcmp, memchr
from rocketstore.store._mapped cimport MappedFile


# Every field of one commit-log record, as C values and borrowed pointers (docs/format.md §1.1).
# Pointers borrow from Python objects the caller keeps alive for the call.
cdef struct RecordFields:
    uint32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t phy_offset
    int32_t sys_flag
    int64_t born_ts
    const char *born_host           # 8 (IPv4) or 20 (IPv6) bytes: address + int port
    int born_host_len
    int64_t store_ts
    const char *store_host
    int store_host_len
    int32_t reconsume_times
    int64_t prepared_tx_offset
    const char *body
    Py_ssize_t body_len
    const char *topic
    Py_ssize_t topic_len
    const char *props               # encoded properties, each "name\x01value\x02"
    Py_ssize_t props_len
    const char *uniq                # 32 hex chars appended as UNIQ_KEY, or NULL
    bint prop_crc                   # append the 5.x record CRC property (last)


# What a scan learns of a record without building Python objects.
cdef struct RecordInfo:
    int32_t total_size
    uint32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t phy_offset
    int32_t sys_flag
    int64_t born_ts
    const char *born_host
    int born_host_len
    int64_t store_ts
    const char *store_host
    int store_host_len
    int32_t reconsume_times
    int64_t prepared_tx_offset
    const char *body
    int32_t body_len
    const char *topic
    int32_t topic_len
    const char *props
    int32_t props_len


cdef enum:
    UNIQ_HEX_LEN = 32               # UNIQ_KEY value: 16 bytes as uppercase hex
    UNIQ_PROP_LEN = 42              # "UNIQ_KEY" \x01 <32 hex> \x02


# record sizes and writing
cdef Py_ssize_t record_size(const RecordFields *f) noexcept nogil
cdef void write_record(char *dst, const RecordFields *f, Py_ssize_t total) noexcept nogil
cdef void write_blank(char *dst, int32_t max_blank) noexcept nogil
cdef void write_prop_crc(char *rec, Py_ssize_t total) noexcept nogil

# reading: >0 message size, 0 blank (info.total_size = blank length), -1 not a record
# (zeros, bad magic, truncated, failing record_check when check_crc), -2 TOTALSIZE disagrees
# with the fields
cdef Py_ssize_t parse_record(const char *p, Py_ssize_t avail, bint check_crc,
                             RecordInfo *info) noexcept nogil

# The one integrity check of a parsed record: its 5.x record CRC property when it carries one
# (covers every byte but the property itself), else its body CRC.
cdef enum:
    REC_OK = 0
    REC_BAD_BODY_CRC = 1
    REC_BAD_RECORD_CRC = 2
    REC_BAD_CRC_PROP = 3            # the tail has the CRC property's shape, damaged
    REC_BAD_PROPS = 4               # NUL bytes in the properties (zeroed on disk)
    REC_NO_CRC_PROP = 5             # written since the store appends it, but without it
cdef int prop_crc_state(const char *props, int32_t props_len) noexcept nogil
cdef int record_check(const RecordInfo *info, const char *rec, bint need_crc) noexcept nogil

# What every path that hands out a message calls on the record it found at commit-log
# ``offset``: >0 its size (parsed, PHYSICALOFFSET == offset, record_check passed), 0 a blank,
# (``crc_from``: the store's records from this offset on carry the record CRC; -1: none must)
# -1 not a record, REC_SKIP a record that parses but fails its check or names another offset
# (info.total_size is its size: readers skip it and report it with report_bad_record).
cdef enum:
    REC_SKIP = -3
cdef Py_ssize_t checked_record(const char *p, Py_ssize_t avail, int64_t offset,
                               RecordInfo *info, int64_t crc_from) noexcept nogil
cdef int report_bad_record(object where, int64_t offset, const char *p,
                           Py_ssize_t avail, int64_t crc_from) except -1

cdef int64_t now_ms() noexcept nogil
cdef double mono_s() noexcept nogil          # CLOCK_MONOTONIC seconds


# The properties dispatch needs, found in one pass over a record's properties.
cdef struct PropRefs:
    const char *tags
    int32_t tags_len
    const char *keys
    int32_t keys_len
    const char *uniq
    int32_t uniq_len
    const char *delay
    int32_t delay_len


cdef inline const char *next_prop(const char *p, const char *end, const char **key,
                                  int32_t *klen, const char **val, int32_t *vlen) noexcept nogil:
    """One "name\x01value\x02" segment of a properties string, from ``p``: returns where the
    next one begins. *key is NULL when the segment is not a property (parse_properties' rule:
    a separator and both sides non-empty)."""
    cdef const char *seg_end = <const char *>memchr(p, 2, <size_t>(end - p))
    cdef const char *sep
    if seg_end == NULL:
        seg_end = end
    sep = <const char *>memchr(p, 1, <size_t>(seg_end - p))
    if sep != NULL and sep > p and sep + 1 < seg_end:
        key[0] = p
        klen[0] = <int32_t>(sep - p)
        val[0] = sep + 1
        vlen[0] = <int32_t>(seg_end - sep - 1)
    else:
        key[0] = NULL
    return seg_end + 1


cdef inline void find_dispatch_props(const char *props, int32_t n, PropRefs *r) noexcept nogil:
    """TAGS, KEYS, UNIQ_KEY and DELAY of "k\x01v\x02..." in one pass (later duplicates win,
    as in the parsed map); absent ones are NULL."""
    cdef const char *p = props
    cdef const char *end = props + n
    cdef const char *k
    cdef const char *v
    cdef int32_t klen, vl
    r.tags = r.keys = r.uniq = r.delay = NULL
    r.tags_len = r.keys_len = r.uniq_len = r.delay_len = 0
    while p < end:
        p = next_prop(p, end, &k, &klen, &v, &vl)
        if k == NULL:
            continue
        if klen == 4 and memcmp(k, "TAGS", 4) == 0:
            r.tags, r.tags_len = v, vl
        elif klen == 4 and memcmp(k, "KEYS", 4) == 0:
            r.keys, r.keys_len = v, vl
        elif klen == 8 and memcmp(k, "UNIQ_KEY", 8) == 0:
            r.uniq, r.uniq_len = v, vl
        elif klen == 5 and memcmp(k, "DELAY", 5) == 0:
            r.delay, r.delay_len = v, vl


cdef inline const char *find_prop(const char *props, int32_t n, const char *name, int nlen,
                                  int32_t *vlen) noexcept nogil:
    """Value of property ``name`` in "k\x01v\x02..." (the last one wins, as in the parsed
    map), or NULL; its length goes to *vlen."""
    cdef const char *p = props
    cdef const char *end = props + n
    cdef const char *k
    cdef const char *v
    cdef const char *found = NULL
    cdef int32_t klen, vl
    while p < end:
        p = next_prop(p, end, &k, &klen, &v, &vl)
        if k != NULL and klen == nlen and memcmp(k, name, <size_t>nlen) == 0:
            found = v
            vlen[0] = vl
    return found


@cython.final
cdef class UniqIdGenerator:
    cdef char prefix[20]            # hex of ip 4 + pid 2 + instance hash 4
    cdef int64_t month_start_ms
    cdef int64_t next_month_ms
    cdef uint32_t counter
    cdef void next_into(self, char *dst, int64_t now) noexcept


@cython.final
@cython.freelist(256)
@cython.no_gc
cdef class Message:
    cdef readonly str topic
    cdef object _body               # bytes-like, kept as given
    cdef dict _user                 # user properties (copy), or None
    cdef str _tags                  # TAGS, or None
    cdef str _keys                  # KEYS as stored (space-separated), or None
    cdef readonly int flag
    cdef readonly int sys_flag
    cdef readonly int reconsume_times
    cdef readonly int64_t prepared_transaction_offset
    cdef readonly object born_timestamp # int ms, or None for "now at put"
    cdef readonly object born_host      # "ip:port" str, or None for 127.0.0.1:0
    # encoded forms (built once at construction: a Message is immutable)
    cdef bytes _topic_b
    cdef bytes _props_b
    cdef Py_ssize_t _user_len       # bytes of _props_b before TAGS/KEYS/DELAY; -1: verbatim
    cdef bytes _born_host_b
    cdef bint _has_uniq
    cdef bint _delayed              # has a DELAY property (not allowed in a batch)
    cdef int32_t _delay             # delay_level given to the constructor (> 0), else 0
    cdef bint _no_wait              # WAIT=false: sync flush does not wait for it
    cdef bint _crc_cached           # body is bytes: its CRC is computed once
    cdef int32_t _crc
    cdef Py_ssize_t _body_len
    cdef int _fill(self, RecordFields *f, const char **body_buf) except -1


@cython.final
@cython.freelist(256)
@cython.no_gc
cdef class MessageExt:
    cdef readonly int flag
    cdef readonly int queue_id
    cdef readonly int64_t queue_offset
    cdef readonly int64_t commitlog_offset
    cdef readonly int store_size
    cdef readonly int body_crc
    cdef readonly int sys_flag
    cdef readonly int64_t born_timestamp
    cdef readonly int64_t store_timestamp
    cdef readonly int reconsume_times
    cdef readonly int64_t prepared_transaction_offset
    cdef readonly int magic
    # where the record lives: a pinned MappedFile, or a bytes / memoryview kept alive here
    cdef MappedFile _mf
    cdef object _owner
    cdef const void *_owner_ptr         # start of _owner's buffer (memoryview owners)
    cdef const char *_rec               # first byte of the record
    cdef bint _raw                      # body as stored, even when compressed
    cdef bint _copied
    cdef public bint _verify_crc        # check BODYCRC when the body is first read
    cdef bint _client                   # handed out by a consumer: msg_id is the UNIQ_KEY
    # field positions within the record, decoded on first access
    cdef int32_t _born_host_off, _born_host_len, _store_host_off, _store_host_len
    cdef int32_t _body_off, _body_len, _topic_off, _topic_len, _props_off, _props_len
    cdef str _topic
    cdef dict _props
    cdef object _body
    cdef object _stored_body

    @staticmethod
    cdef MessageExt new(const RecordInfo *info, object owner, MappedFile mf, const char *rec,
                        bint raw, str topic)
    cdef object _slice(self, int32_t off, int32_t n)
    cdef object _stored(self)


cpdef str format_msg_id(bytes host_bytes, int64_t phy_offset)
# a producer's send-time stamp of one message (UNIQ_KEY, WAIT=true where absent)
cdef Message stamped_message(Message m, UniqIdGenerator gen, int64_t now)
# the same with the UNIQ_KEY given (32 hex chars; used only when ``m`` has none)
cdef Message stamped_with(Message m, const char *uniq)
cdef bytes _check_topic(object topic)
cpdef bytes encode_host(str host)
