# cython: language_level=3
"""Commit-log record codec: RocketMQ's v1 and v2 message layouts (docs/format.md §1, 7).

Writers fill a ``RecordFields`` struct and ``write_record`` lays every field out, big-endian,
straight into the destination (a mapped file); readers run ``parse_record`` over a pointer
and a length, which checks every length read from disk against the bytes available before
using it. ``Message`` is what a producer builds: validated and encoded once at construction,
so a put only copies. ``MessageExt`` is a decoded record whose body is a zero-copy view.

Stateless apart from ``UniqIdGenerator`` (used under the commit log's put lock); safe to call
from any thread.

Source layout: one extension module; the record layout (write, parse, check) and the
Python-level codec API are here, the rest in files pulled in with ``include``: hosts, message
ids and properties (``_codec_ids.pxi``), the UNIQ_KEY generator and a producer's send-time
stamp (``_codec_uniq.pxi``), ``Message`` (``_codec_message.pxi``), ``MessageExt``
(``_codec_ext.pxi``).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t, uint8_t, uint16_t
from libc.string cimport memcpy, memcmp, memchr

from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._bytes cimport put_u16, put_u32, put_u64, get_u16, get_u32, get_u64
from rocketstore.store._csrc cimport (
    rs_java_hash, rs_body_crc, rs_crc32,
    RS_MAGIC_V1, RS_MAGIC_V2, RS_BLANK_MAGIC, RS_RECORD_FIXED_V1, RS_BORNHOST_POS,
    RS_HOST_V4_LEN, RS_HOST_V6_LEN, RS_SYSFLAG_BORNHOST_V6, RS_SYSFLAG_STOREHOST_V6,
    RS_SYSFLAG_COMPRESSED, RS_SYSFLAG_COMPRESS_TYPE, RS_SYSFLAG_COMPRESS_LZ4, RS_SYSFLAG_COMPRESS_ZLIB,
    RS_SYSFLAG_COMPRESS_ZSTD, RS_SYSFLAG_TX_MASK, RS_MAX_TOPIC_LEN_V1, RS_MAX_TOPIC_LEN,
    RS_MAX_PROPERTIES_LEN, RS_MSGID_V4_BYTES, RS_MSGID_V6_BYTES, RS_CRC32_RESERVED_LEN,
    RS_CRC32_NAME_LEN,
    timespec, clock_gettime, CLOCK_REALTIME, CLOCK_MONOTONIC,
)

import ipaddress
import os
import time
import zlib

from rocketstore.errors import (
    CorruptionError, InvalidMessageError, InvalidMessageTypeError, InvalidMessageIdError,
)

cdef enum:
    MIN_RECORD_SIZE = 91        # TOTALSIZE of an empty v1 record with IPv4 hosts (0 body/topic/props)

cdef const char *HEX = b"0123456789ABCDEF"
cdef bytes UNIQ_KEY_HEAD = b"UNIQ_KEY\x01"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CRC32 = "__CRC32#"             # the 5.x record CRC, written by the store only
PROPERTY_DELAY = "DELAY"


# -- clock ------------------------------------------------------------------------------------

cdef int64_t now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef double mono_s() noexcept nogil:
    # time.monotonic()'s clock on Linux, without a call into Python
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


# -- writing -----------------------------------------------------------------------------------

cdef Py_ssize_t record_size(const RecordFields *f) noexcept nogil:
    """TOTALSIZE per MessageExtEncoder.calMsgLength (docs/format.md §1.1)."""
    cdef Py_ssize_t n = RS_RECORD_FIXED_V1 - 2 * RS_HOST_V4_LEN
    n += f.born_host_len + f.store_host_len + f.body_len + f.topic_len + f.props_len
    if f.magic == RS_MAGIC_V2:
        n += 1                  # 2-byte topic length
    if f.uniq != NULL:
        n += UNIQ_PROP_LEN
    if f.prop_crc:
        n += _prop_crc_extra(f)
    return n


cdef inline Py_ssize_t _prop_crc_extra(const RecordFields *f) noexcept nogil:
    # CommitLog: a \x02 closes user properties that lack it, then the 20 reserved bytes
    if f.uniq == NULL and f.props_len and f.props[f.props_len - 1] != 2:
        return RS_CRC32_RESERVED_LEN + 1
    return RS_CRC32_RESERVED_LEN


cdef void write_prop_crc(char *rec, Py_ssize_t total) noexcept nogil:
    """Fill the last 20 bytes of a finished record with "__CRC32#" \\x01 <10 digits> \\x02:
    CRC32 & 0x7FFFFFFF of bytes [0, total - 20), least significant digit first, zero padded
    (MessageDecoder.createCrc32)."""
    cdef uint32_t crc = rs_crc32(0, <const unsigned char *>rec,
                                 <size_t>(total - RS_CRC32_RESERVED_LEN)) & 0x7FFFFFFFu
    cdef char *t = rec + total - RS_CRC32_RESERVED_LEN
    cdef int i
    memcpy(t, b"__CRC32#\x01", RS_CRC32_NAME_LEN + 1)
    for i in range(10):
        t[RS_CRC32_NAME_LEN + 1 + i] = <char>(48 + crc % 10)
        crc //= 10
    t[RS_CRC32_RESERVED_LEN - 1] = 2


cdef void write_record(char *dst, const RecordFields *f, Py_ssize_t total) noexcept nogil:
    cdef char *p = dst
    put_u32(p, <uint32_t>total)                     # TOTALSIZE
    put_u32(p + 4, f.magic)                         # MAGICCODE
    put_u32(p + 8, <uint32_t>f.body_crc)            # BODYCRC
    put_u32(p + 12, <uint32_t>f.queue_id)           # QUEUEID
    put_u32(p + 16, <uint32_t>f.flag)               # FLAG
    put_u64(p + 20, <uint64_t>f.queue_offset)       # QUEUEOFFSET
    put_u64(p + 28, <uint64_t>f.phy_offset)         # PHYSICALOFFSET
    put_u32(p + 36, <uint32_t>f.sys_flag)           # SYSFLAG
    put_u64(p + 40, <uint64_t>f.born_ts)            # BORNTIMESTAMP
    memcpy(p + RS_BORNHOST_POS, f.born_host, <size_t>f.born_host_len)   # BORNHOST
    p += RS_BORNHOST_POS + f.born_host_len
    put_u64(p, <uint64_t>f.store_ts)                # STORETIMESTAMP
    memcpy(p + 8, f.store_host, <size_t>f.store_host_len)               # STOREHOSTADDRESS
    p += 8 + f.store_host_len
    put_u32(p, <uint32_t>f.reconsume_times)         # RECONSUMETIMES
    put_u64(p + 4, <uint64_t>f.prepared_tx_offset)  # PREPARED TRANSACTION OFFSET
    put_u32(p + 12, <uint32_t>f.body_len)           # BODY length + body
    p += 16
    if f.body_len:
        memcpy(p, f.body, <size_t>f.body_len)
        p += f.body_len
    if f.magic == RS_MAGIC_V2:                      # TOPIC length + topic
        put_u16(p, <uint32_t>f.topic_len)
        p += 2
    else:
        p[0] = <char>f.topic_len
        p += 1
    memcpy(p, f.topic, <size_t>f.topic_len)
    p += f.topic_len
    cdef Py_ssize_t crc_extra = _prop_crc_extra(f) if f.prop_crc else 0
    cdef Py_ssize_t plen = f.props_len + (UNIQ_PROP_LEN if f.uniq != NULL else 0) + crc_extra
    put_u16(p, <uint32_t>plen)                      # PROPERTIES length + properties
    p += 2
    if f.props_len:
        memcpy(p, f.props, <size_t>f.props_len)
        p += f.props_len
    if f.uniq != NULL:
        memcpy(p, b"UNIQ_KEY\x01", 9)
        memcpy(p + 9, f.uniq, UNIQ_HEX_LEN)
        p[9 + UNIQ_HEX_LEN] = 2
    if crc_extra:
        if crc_extra > RS_CRC32_RESERVED_LEN:
            p[0] = 2
        write_prop_crc(dst, total)                  # last: covers everything before it


cdef void write_blank(char *dst, int32_t max_blank) noexcept nogil:
    """The 8-byte end-of-file record: int maxBlank, int BLANK_MAGIC_CODE (docs/format.md §1.6)."""
    put_u32(dst, <uint32_t>max_blank)
    put_u32(dst + 4, RS_BLANK_MAGIC)


# -- reading -----------------------------------------------------------------------------------

cdef Py_ssize_t parse_record(const char *p, Py_ssize_t avail, bint check_crc,
                             RecordInfo *info) noexcept nogil:
    cdef int32_t total
    cdef Py_ssize_t q, hl
    if avail < 8:
        return -1
    total = <int32_t>get_u32(p)                     # TOTALSIZE
    info.total_size = total
    info.magic = get_u32(p + 4)                     # MAGICCODE
    if info.magic == RS_BLANK_MAGIC:
        # a blank fills the rest of its file: it can be neither shorter than itself nor longer
        # than what is left
        if total < 8 or total > avail:
            return -1
        return 0
    if info.magic != RS_MAGIC_V1 and info.magic != RS_MAGIC_V2:
        return -1
    if total < MIN_RECORD_SIZE or total > avail:
        return -1
    info.body_crc = <int32_t>get_u32(p + 8)         # BODYCRC
    info.queue_id = <int32_t>get_u32(p + 12)        # QUEUEID
    info.flag = <int32_t>get_u32(p + 16)            # FLAG
    info.queue_offset = <int64_t>get_u64(p + 20)    # QUEUEOFFSET
    info.phy_offset = <int64_t>get_u64(p + 28)      # PHYSICALOFFSET
    info.sys_flag = <int32_t>get_u32(p + 36)        # SYSFLAG
    info.born_ts = <int64_t>get_u64(p + 40)         # BORNTIMESTAMP
    info.born_host = p + RS_BORNHOST_POS            # BORNHOST
    info.born_host_len = RS_HOST_V6_LEN if info.sys_flag & RS_SYSFLAG_BORNHOST_V6 else RS_HOST_V4_LEN
    q = RS_BORNHOST_POS + info.born_host_len
    info.store_ts = <int64_t>get_u64(p + q)         # STORETIMESTAMP
    info.store_host = p + q + 8                     # STOREHOSTADDRESS
    info.store_host_len = RS_HOST_V6_LEN if info.sys_flag & RS_SYSFLAG_STOREHOST_V6 else RS_HOST_V4_LEN
    q += 8 + info.store_host_len
    # the fixed part is now known: everything up to the body length must fit in TOTALSIZE
    if q + 16 > total:
        return -1
    info.reconsume_times = <int32_t>get_u32(p + q)  # RECONSUMETIMES
    info.prepared_tx_offset = <int64_t>get_u64(p + q + 4)   # PREPARED TRANSACTION OFFSET
    info.body_len = <int32_t>get_u32(p + q + 12)    # BODY length
    q += 16
    if info.body_len < 0 or q + info.body_len + 1 > total:
        return -1
    info.body = p + q
    q += info.body_len
    if info.magic == RS_MAGIC_V2:                   # TOPIC length: short (v2) / byte (v1)
        if q + 2 > total:
            return -1
        info.topic_len = <int32_t>get_u16(p + q)
        q += 2
    else:
        info.topic_len = <uint8_t>p[q]
        q += 1
    if q + info.topic_len + 2 > total:
        return -1
    info.topic = p + q
    q += info.topic_len
    info.props_len = <int32_t>get_u16(p + q)        # PROPERTIES length
    q += 2
    info.props = p + q
    q += info.props_len
    if q != total:
        return -2                                   # parsed, but TOTALSIZE disagrees
    if check_crc and record_check(info, p, False) != REC_OK:
        return -1
    return total


cdef Py_ssize_t checked_record(const char *p, Py_ssize_t avail, int64_t offset,
                               RecordInfo *info, int64_t crc_from) noexcept nogil:
    cdef Py_ssize_t rc = parse_record(p, avail, False, info)
    if rc <= 0:
        return -1 if rc == -2 else rc
    if info.phy_offset != offset or \
            record_check(info, p, 0 <= crc_from <= offset) != REC_OK:
        return REC_SKIP
    return rc


cdef int report_bad_record(object where, int64_t offset, const char *p,
                           Py_ssize_t avail, int64_t crc_from) except -1:
    """Tell ``integrity.report`` why the record at ``offset`` was skipped."""
    cdef RecordInfo info
    cdef str reason
    if parse_record(p, avail, False, &info) <= 0:
        reason = "malformed record"
    elif info.phy_offset != offset:
        reason = f"its PHYSICALOFFSET field says {info.phy_offset}"
    else:
        reason = REC_REASONS[record_check(&info, p, 0 <= crc_from <= offset)]
    from rocketstore.store import integrity
    integrity.report(str(where), offset, reason)
    return 0


cdef int prop_crc_state(const char *props, int32_t props_len) noexcept nogil:
    """1: the properties end with a well-formed record CRC property; 0: they do not; -1: their
    last 20 bytes differ from that shape in one or two bytes (a damaged CRC property: a
    user property that close to it does not occur)."""
    cdef const char *t
    cdef int bad = 0, i
    cdef char c
    if props_len < RS_CRC32_RESERVED_LEN:
        return 0
    t = props + props_len - RS_CRC32_RESERVED_LEN
    for i in range(RS_CRC32_NAME_LEN + 1):
        if t[i] != (<const char *>b"__CRC32#\x01")[i]:
            bad += 1
    for i in range(RS_CRC32_NAME_LEN + 1, RS_CRC32_RESERVED_LEN - 1):
        c = t[i]
        if c < 48 or c > 57:
            bad += 1
    if t[RS_CRC32_RESERVED_LEN - 1] != 2:
        bad += 1
    if props_len > RS_CRC32_RESERVED_LEN and props[props_len - RS_CRC32_RESERVED_LEN - 1] != 2:
        bad += 1                                    # not a property of its own
    if bad == 0:
        return 1
    return -1 if bad <= 2 else 0


cdef int record_check(const RecordInfo *info, const char *rec, bint need_crc) noexcept nogil:
    """REC_OK, or why the parsed record at ``rec`` must not be handed out. ``need_crc``: it
    was written where the store appends the record CRC property, so it must carry one."""
    cdef int state
    if info.props_len and memchr(info.props, 0, <size_t>info.props_len) != NULL:
        # properties are text: a NUL is a zeroed page or sector (it could also hide the
        # record CRC property, making the record look like one without it)
        return REC_BAD_PROPS
    state = prop_crc_state(info.props, info.props_len)
    cdef uint64_t want = 0
    cdef uint32_t crc
    cdef const char *d
    cdef int i
    if state < 0:
        return REC_BAD_CRC_PROP
    if state == 0:
        if need_crc:
            return REC_NO_CRC_PROP
        if rs_body_crc(<const unsigned char *>info.body, <size_t>info.body_len) != info.body_crc:
            return REC_BAD_BODY_CRC
        return REC_OK
    d = info.props + info.props_len - RS_CRC32_RESERVED_LEN + RS_CRC32_NAME_LEN + 1
    for i in range(9, -1, -1):                      # least significant digit first
        want = want * 10 + <uint32_t>(d[i] - 48)
    crc = rs_crc32(0, <const unsigned char *>rec,
                   <size_t>(info.total_size - RS_CRC32_RESERVED_LEN)) & 0x7FFFFFFFu
    return REC_OK if crc == want else REC_BAD_RECORD_CRC


include "_codec_ids.pxi"


# -- hashes ------------------------------------------------------------------------------------

def java_hash(str s):
    """Java ``String.hashCode`` of ``s`` (UTF-16 code units, signed 32-bit)."""
    cdef bytes b = s.encode("utf-8", "surrogatepass")
    return rs_java_hash(PyBytes_AS_STRING(b), <size_t>PyBytes_GET_SIZE(b))


def body_crc(const unsigned char[::1] data not None):
    """BODYCRC: zlib CRC-32 of the stored body & 0x7FFFFFFF (docs/format.md §1.2)."""
    if data.shape[0] == 0:
        return 0
    cdef int32_t c
    with nogil:
        c = rs_body_crc(&data[0], <size_t>data.shape[0])
    return c


def crc32(const unsigned char[::1] data not None, uint32_t value=0):
    """zlib CRC-32, without the mask (for comparisons with zlib.crc32)."""
    if data.shape[0] == 0:
        return value
    cdef uint32_t c
    with nogil:
        c = rs_crc32(value, &data[0], <size_t>data.shape[0])
    return c


include "_codec_uniq.pxi"
include "_codec_message.pxi"
include "_codec_ext.pxi"
include "_codec_consume.pxi"
include "_codec_pullcache.pxi"
include "_codec_orderly.pxi"


# -- Python-level codec API ------------------------------------------------------------------

def decode(buf, Py_ssize_t pos=0, *, bint check_crc=False, bint raw=False):
    """Decode the record at ``pos`` of a buffer into a ``MessageExt`` (body is a view of ``buf``).

    Returns None for a blank (end-of-file) record; raises ``ValueError`` when the bytes at
    ``pos`` are not a valid record. The message keeps a view of ``buf`` (or ``buf`` itself
    when it is ``bytes``) alive.
    """
    cdef object owner
    cdef const unsigned char[::1] mv
    cdef const char *base
    cdef Py_ssize_t n
    if type(buf) is bytes:
        owner = buf
        base = PyBytes_AS_STRING(<bytes>buf)
        n = PyBytes_GET_SIZE(<bytes>buf)
    else:
        owner = memoryview(buf)
        mv = owner
        n = mv.shape[0]
        base = <const char *>&mv[0] if n else NULL
    cdef RecordInfo info
    cdef Py_ssize_t rc
    if pos < 0 or pos > n:
        raise ValueError(f"position {pos} outside a buffer of {n} bytes")
    rc = parse_record(base + pos if n else NULL, n - pos, check_crc, &info)
    if rc == 0:
        return None
    if rc < 0:
        raise ValueError(f"no valid record at position {pos} "
                         f"({'TOTALSIZE disagrees with its fields' if rc == -2 else 'bad magic, size or CRC'})")
    cdef MessageExt m = MessageExt.new(&info, owner, None, base + pos, raw, None)
    m._owner_ptr = <const void *>base
    return m


def decode_all(bytes buf not None, *, bint check_crc=True, bint client=False):
    """Every record of ``buf`` (stored records back to back, as a pull response's body)
    decoded, in one pass: a list of ``MessageExt`` keeping ``buf`` alive. A blank record
    ends the list; bytes that are not a valid record raise ``ValueError`` naming the
    position. ``client``: handed out by a consumer (``msg_id`` is the UNIQ_KEY)."""
    cdef const char *base = PyBytes_AS_STRING(buf)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf), pos = 0, rc
    cdef RecordInfo info
    cdef MessageExt m
    cdef list out = []
    while pos < n:
        rc = parse_record(base + pos, n - pos, check_crc, &info)
        if rc == 0:
            break
        if rc < 0:
            raise ValueError(f"no valid record at position {pos} "
                             f"({'TOTALSIZE disagrees with its fields' if rc == -2 else 'bad magic, size or CRC'})")
        m = MessageExt.new(&info, buf, None, base + pos, False, None)
        m._owner_ptr = <const void *>base
        m._client = client
        out.append(m)
        pos += m.store_size
    return out


def check_reason(buf, Py_ssize_t pos=0):
    """Why the record at ``pos`` fails ``record_check`` ('' when it passes, 'malformed' when
    it does not even parse)."""
    cdef const unsigned char[::1] mv = buf
    cdef RecordInfo info
    if pos < 0 or pos >= mv.shape[0]:
        return "malformed"
    cdef const char *p = <const char *>&mv[0] + pos
    if parse_record(p, mv.shape[0] - pos, False, &info) <= 0:
        return "malformed"
    return REC_REASONS[record_check(&info, p, False)]


REC_REASONS = {REC_OK: "", REC_BAD_BODY_CRC: "body CRC mismatch",
               REC_BAD_RECORD_CRC: "record CRC (__CRC32#) mismatch",
               REC_BAD_CRC_PROP: "damaged record CRC property (__CRC32#)",
               REC_BAD_PROPS: "NUL bytes in the properties",
               REC_NO_CRC_PROP: "no record CRC property (__CRC32#), which the store appended "
                                "to every record from its offset on (config/recordCrc.json)"}


def check_record(buf, Py_ssize_t pos=0, bint check_crc=True):
    """(kind, size) of the record at ``pos``: ('msg', n), ('blank', n) or ('invalid', -1|-2)."""
    cdef const unsigned char[::1] mv = buf
    cdef Py_ssize_t n = mv.shape[0]
    cdef RecordInfo info
    if pos < 0 or pos > n:
        raise ValueError(f"position {pos} outside a buffer of {n} bytes")
    if n == pos:
        return ("invalid", -1)
    cdef Py_ssize_t rc = parse_record(<const char *>&mv[0] + pos, n - pos, check_crc, &info)
    if rc > 0:
        return ("msg", rc)
    if rc == 0:
        return ("blank", info.total_size)
    return ("invalid", rc)


def encode_record(*, str topic, body, properties=None, int queue_id=0, int flag=0,
                  int64_t queue_offset=0, int64_t physical_offset=0, int sys_flag=0,
                  int64_t born_timestamp=0, str born_host="127.0.0.1:0",
                  int64_t store_timestamp=0, str store_host="127.0.0.1:10911",
                  int reconsume_times=0, int64_t prepared_transaction_offset=0,
                  body_crc=None, magic=None, properties_raw=None, bint prop_crc=False):
    """Encode one record from its fields (tests, tools, re-encoding a decoded record).

    Host V6 bits of ``sys_flag`` follow the addresses; ``magic`` defaults to v1 unless the
    topic needs v2; ``body_crc`` defaults to the CRC of ``body``; ``prop_crc`` appends the
    5.x record CRC property (docs/format.md §1.2).
    """
    cdef RecordFields f
    cdef bytes topic_b = topic.encode("utf-8")
    cdef bytes body_b = bytes(body)
    cdef bytes props_b = bytes(properties_raw) if properties_raw is not None else \
        _encode_properties(dict(properties or {}))
    cdef bytes bh = encode_host(born_host)
    cdef bytes sh = encode_host(store_host)
    f.magic = (RS_MAGIC_V2 if len(topic_b) > RS_MAX_TOPIC_LEN_V1 else RS_MAGIC_V1) \
        if magic is None else <uint32_t>(magic & 0xFFFFFFFF)
    f.body_crc = (rs_body_crc(<const unsigned char *>PyBytes_AS_STRING(body_b), len(body_b))
                  if body_b else 0) if body_crc is None else <int32_t>body_crc
    f.queue_id = queue_id
    f.flag = flag
    f.queue_offset = queue_offset
    f.phy_offset = physical_offset
    f.sys_flag = sys_flag & ~(RS_SYSFLAG_BORNHOST_V6 | RS_SYSFLAG_STOREHOST_V6)
    if len(bh) == RS_HOST_V6_LEN:
        f.sys_flag |= RS_SYSFLAG_BORNHOST_V6
    if len(sh) == RS_HOST_V6_LEN:
        f.sys_flag |= RS_SYSFLAG_STOREHOST_V6
    f.born_ts = born_timestamp
    f.born_host = PyBytes_AS_STRING(bh)
    f.born_host_len = <int>len(bh)
    f.store_ts = store_timestamp
    f.store_host = PyBytes_AS_STRING(sh)
    f.store_host_len = <int>len(sh)
    f.reconsume_times = reconsume_times
    f.prepared_tx_offset = prepared_transaction_offset
    f.body = PyBytes_AS_STRING(body_b)
    f.body_len = len(body_b)
    f.topic = PyBytes_AS_STRING(topic_b)
    f.topic_len = len(topic_b)
    f.props = PyBytes_AS_STRING(props_b)
    f.props_len = len(props_b)
    f.uniq = NULL
    f.prop_crc = prop_crc
    if f.props_len > RS_MAX_PROPERTIES_LEN:
        raise InvalidMessageError("properties", f"{f.props_len} bytes", "too long",
                                  limit=RS_MAX_PROPERTIES_LEN, status="PROPERTIES_SIZE_EXCEEDED")
    cdef Py_ssize_t total = record_size(&f)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    write_record(PyBytes_AS_STRING(out), &f, total)
    return out


BLANK_MAGIC_CODE = RS_BLANK_MAGIC
MESSAGE_MAGIC_CODE = RS_MAGIC_V1
MESSAGE_MAGIC_CODE_V2 = RS_MAGIC_V2
