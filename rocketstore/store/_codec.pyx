# cython: language_level=3
"""Commit-log record codec: RocketMQ's v1 and v2 message layouts (docs/format.md §1, 7).

Writers fill a ``RecordFields`` struct and ``write_record`` lays every field out, big-endian,
straight into the destination (a mapped file); readers run ``parse_record`` over a pointer
and a length, which checks every length read from disk against the bytes available before
using it. ``Message`` is what a producer builds: validated and encoded once at construction,
so a put only copies. ``MessageExt`` is a decoded record whose body is a zero-copy view.

Stateless apart from ``UniqIdGenerator`` (used under the commit log's put lock); safe to call
from any thread.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
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
    timespec, clock_gettime, CLOCK_REALTIME,
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


# -- hosts and ids -----------------------------------------------------------------------------

cdef dict _host_cache = {}

cpdef bytes encode_host(str host):
    """'a.b.c.d:port', '[v6]:port' (or Java's 'x:x:...:x:port') -> address bytes + int port."""
    cdef bytes out = _host_cache.get(host)
    if out is not None:
        return out
    addr, sep, port_s = host.rpartition(":")
    if not sep or not addr:
        raise InvalidMessageError("host", host, "expected 'ip:port'")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:len(addr) - 1]
    try:
        port = int(port_s)
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise InvalidMessageError("host", host, "expected 'ip:port' with a numeric IP address")
    if not 0 <= port <= 65535:
        # the record holds 4 bytes, but RocketMQ's decoder (InetSocketAddress) refuses more
        raise InvalidMessageError("host", host, "port outside [0, 65535]", limit=65535)
    out = ip.packed + port.to_bytes(4, "big")
    if len(_host_cache) < 4096:
        _host_cache[host] = out
    return out


cdef str decode_host(const char *p, int n):
    cdef const uint8_t *u = <const uint8_t *>p
    cdef uint32_t port = get_u32(p + n - 4)
    if n == RS_HOST_V4_LEN:
        return f"{u[0]}.{u[1]}.{u[2]}.{u[3]}:{port}"
    return f"[{ipaddress.IPv6Address(p[:16]).compressed}]:{port}"


cpdef str format_msg_id(bytes host_bytes, int64_t phy_offset):
    """Offset message id: store host address + port + commit-log offset, uppercase hex."""
    cdef char buf[8]
    put_u64(buf, <uint64_t>phy_offset)
    return (host_bytes + buf[:8]).hex().upper()


_HEX_DIGITS = "0123456789abcdefABCDEF"


def decode_msg_id(msg_id):
    """Inverse of the offset message id: (store host 'ip:port', commit-log offset)."""
    if not isinstance(msg_id, str):
        raise InvalidMessageIdError(msg_id, "expected a str")
    n = len(msg_id)
    if n != 2 * RS_MSGID_V4_BYTES and n != 2 * RS_MSGID_V6_BYTES:
        raise InvalidMessageIdError(msg_id, f"expected 32 (IPv4) or 56 (IPv6) hex characters, got {n}")
    # bytes.fromhex skips whitespace: check every character, so the length is the byte count
    if not msg_id.isascii() or msg_id.strip(_HEX_DIGITS):
        raise InvalidMessageIdError(msg_id, "not hexadecimal")
    raw = bytes.fromhex(msg_id)
    hl = len(raw) - 8
    cdef bytes hb = raw[:hl]
    return decode_host(hb, hl), int.from_bytes(raw[hl:], "big", signed=True)


# -- properties --------------------------------------------------------------------------------

def parse_properties(raw):
    """docs/format.md §1.4: split on \\x02; keep 'name\\x01value' with both sides non-empty."""
    cdef dict out = {}
    cdef bytes data = bytes(raw)
    for seg in data.split(b"\x02"):
        i = seg.find(b"\x01")
        if len(seg) >= 3 and 0 < i < len(seg) - 1:
            out[seg[:i].decode("utf-8", "replace")] = seg[i + 1:].decode("utf-8", "replace")
    return out


cdef bytes _encode_properties(dict props):
    parts = []
    for k, v in props.items():
        parts.append(k)
        parts.append("\x01")
        parts.append(v)
        parts.append("\x02")
    return "".join(parts).encode("utf-8")


def encode_properties(dict props):
    """name \\x01 value \\x02 for each entry, UTF-8 (MessageDecoder.messageProperties2String)."""
    return _encode_properties(props)


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


# -- UNIQ_KEY ----------------------------------------------------------------------------------

cdef void _hex(char *dst, uint64_t v, int digits) noexcept nogil:
    cdef int i
    for i in range(digits - 1, -1, -1):
        dst[i] = HEX[v & 0xF]
        v >>= 4


@cython.final
cdef class UniqIdGenerator:
    """Client message ids in RocketMQ's MessageClientIDSetter layout (docs/format.md §7).

    ip 4 bytes + pid 2 + instance hash 4 + ms since the start of the month 4 + counter 2,
    as 32 uppercase hex chars. Not thread-safe: callers hold the put lock.
    """

    def __init__(self, str ip="127.0.0.1", instance_hash=None):
        packed_all = ipaddress.ip_address(ip).packed
        cdef bytes packed = packed_all[len(packed_all) - 4:]
        if instance_hash is None:
            instance_hash = int.from_bytes(os.urandom(4), "big")
        _hex(self.prefix, int.from_bytes(packed, "big"), 8)
        _hex(self.prefix + 8, os.getpid() & 0xFFFF, 4)
        _hex(self.prefix + 12, instance_hash & 0xFFFFFFFF, 8)
        self.counter = int.from_bytes(os.urandom(2), "big")
        self._set_month(now_ms())

    def _set_month(self, int64_t now):
        t = time.localtime(now / 1000.0)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        ny, nm = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        nxt = time.mktime((ny, nm, 1, 0, 0, 0, 0, 0, -1))
        self.month_start_ms = <int64_t>(start * 1000)
        self.next_month_ms = <int64_t>(nxt * 1000)

    cdef void next_into(self, char *dst, int64_t now) noexcept:
        cdef int64_t diff
        if now >= self.next_month_ms or now < self.month_start_ms:
            try:
                self._set_month(now)
            except Exception:
                pass
        diff = now - self.month_start_ms
        if diff < 0:
            diff = 0
        memcpy(dst, self.prefix, 20)
        _hex(dst + 20, <uint32_t>diff, 8)
        _hex(dst + 28, <uint16_t>self.counter, 4)
        self.counter += 1

    def next(self):
        """One new id as a str (the store uses next_into, straight into the record)."""
        cdef char buf[32]
        self.next_into(buf, now_ms())
        return buf[:32].decode("ascii")


# -- Message -----------------------------------------------------------------------------------

cdef bint _valid_topic_char(uint8_t c) noexcept:
    # ^[%|a-zA-Z0-9_-]+$ (RocketMQ TopicValidator)
    return (c >= 0x61 and c <= 0x7A) or (c >= 0x41 and c <= 0x5A) or (c >= 0x30 and c <= 0x39) \
        or c == 0x25 or c == 0x7C or c == 0x5F or c == 0x2D


cdef dict _topic_cache = {}         # validated topic str -> its bytes (applications use few)


cdef bytes _check_topic(object topic):
    cdef object hit = _topic_cache.get(topic) if type(topic) is str else None
    if hit is not None:
        return <bytes>hit
    if not isinstance(topic, str):
        raise InvalidMessageTypeError("topic", "str", type(topic).__name__)
    cdef bytes b = _utf8("topic", topic, None)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b), i
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(b)
    if n == 0:
        raise InvalidMessageError("topic", topic, "must not be empty")
    for i in range(n):
        if not _valid_topic_char(p[i]):
            raise InvalidMessageError("topic", topic,
                                      "contains characters outside ^[%|a-zA-Z0-9_-]+$")
    # docs/format.md §1.5: v1 holds 127 bytes; only retry topics may use the v2 layout, up to 255
    cdef Py_ssize_t limit = RS_MAX_TOPIC_LEN if topic.startswith("%RETRY%") else RS_MAX_TOPIC_LEN_V1
    if n > limit:
        raise InvalidMessageError("topic", topic, f"is {n} characters long, longer than {limit}",
                                  limit=limit)
    if len(_topic_cache) < 65536:
        _topic_cache[topic] = b
    return b


cdef bytes _text_utf8(str field, object value, bint allow_space, object key=None):
    """``value`` as UTF-8 after checking it is a non-empty str free of the separators.

    ``key`` (a property name) is only formatted into the field name when raising.
    """
    if type(value) is not str and not isinstance(value, str):
        raise InvalidMessageTypeError(_field(field, key), "str", type(value).__name__)
    cdef bytes b = _utf8(field, value, key)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    cdef const char *p = PyBytes_AS_STRING(b)
    if n == 0:
        raise InvalidMessageError(_field(field, key), value,
                                  "must not be empty (use None to leave it out)")
    if memchr(p, 1, <size_t>n) != NULL or memchr(p, 2, <size_t>n) != NULL:
        raise InvalidMessageError(_field(field, key), value,
                                  "contains \\x01 or \\x02, the properties separators")
    if memchr(p, 0, <size_t>n) != NULL:
        raise InvalidMessageError(_field(field, key), value,
                                  "contains NUL, which readers take for a damaged record")
    if not allow_space and memchr(p, 32, <size_t>n) != NULL:
        raise InvalidMessageError(_field(field, key), value, "contains a space, the KEYS separator")
    return b


cdef bytes _utf8(str field, str value, object key):
    try:
        return PyUnicode_AsUTF8String(value)
    except UnicodeEncodeError as e:
        # a lone surrogate (from surrogateescape, a bad decode) has no UTF-8 form
        raise InvalidMessageError(_field(field, key), value,
                                  f"is not valid Unicode: {e.reason} at {e.start}") from None


cdef str _field(str field, object key):
    return field if key is None else f"{field}[{key!r}]"


cdef inline Py_ssize_t _put_prop(char *dst, const char *name, Py_ssize_t nlen, bytes value) noexcept:
    cdef Py_ssize_t vlen = PyBytes_GET_SIZE(value)
    memcpy(dst, name, <size_t>nlen)
    dst[nlen] = 1
    memcpy(dst + nlen + 1, PyBytes_AS_STRING(value), <size_t>vlen)
    dst[nlen + 1 + vlen] = 2
    return nlen + vlen + 2


BODY_PREVIEW_BYTES = 64


def body_preview(body):
    """A body as a repr shows it: its bytes (the first 64 and the size when longer), not
    ``<memory at 0x...>`` (a read message's body is a zero-copy memoryview)."""
    cdef Py_ssize_t n = len(body)
    if n <= BODY_PREVIEW_BYTES:
        return repr(bytes(body))
    return f"{bytes(body[:BODY_PREVIEW_BYTES])!r}...({n} bytes)"


def _rebuild_message(topic, body, props, flag, sys_flag, reconsume_times, prepared, born_ts,
                     born_host):
    return Message(topic, body, properties=props, flag=flag, sys_flag=sys_flag,
                   reconsume_times=reconsume_times, prepared_transaction_offset=prepared,
                   born_timestamp=born_ts, born_host=born_host)


@cython.final
@cython.embedsignature(False)   # the docstring's first lines are its text signature instead
@cython.freelist(64)    # a Message per put is the common case: skip the allocator
@cython.no_gc       # holds only str/bytes/dict-of-str: no cycles, so no GC traversal cost
cdef class Message:
    """Message(topic, body, tags=None, keys=None, properties=None, flag=0, *, sys_flag=0, reconsume_times=0, prepared_transaction_offset=0, born_timestamp=None, born_host=None, delay_level=0)
--

    A message to put: what a RocketMQ producer sends.

    Validated and encoded once here, so bad input fails at construction with an
    ``InvalidMessageError`` naming the field, and a put only copies bytes. A ``Message`` is
    immutable; build a new one to change it.

    Parameters
    ----------
    topic : str
        ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters (255 for ``%RETRY%`` topics).
    body : bytes-like
        Stored as given (copied to ``bytes`` unless it already is).
    tags : str, optional
        The ``TAGS`` property, hashed into the consume queue's tags code.
    keys : str or list of str, optional
        The ``KEYS`` property (space-separated), indexed for ``query_message``.
    properties : dict of str to str, optional
        User properties; names and values must not contain ``\\x01`` or ``\\x02``.
        ``tags`` and ``keys`` override ``TAGS`` and ``KEYS`` given here.
    flag : int
        RocketMQ's user flag.
    sys_flag, reconsume_times, prepared_transaction_offset, born_timestamp, born_host
        Stored as given: transaction type bits (``sys_flag & 0xC``), compression bits;
        ``born_timestamp=None`` means the put time, ``born_host=None`` means ``127.0.0.1:0``.
    delay_level : int
        RocketMQ's delay level (``Message.setDelayTimeLevel``): the ``DELAY`` property when
        above 0 (it overrides a ``DELAY`` given in ``properties``); 0 means no delay.

    Examples
    --------
    >>> m = Message("TopicA", b"hello", tags="TagA", keys=["order-1"])
    >>> m.tags, m.keys
    ('TagA', ['order-1'])
    """

    def __init__(self, topic, body, tags=None, keys=None, properties=None, flag=0, *,
                 sys_flag=0, reconsume_times=0, prepared_transaction_offset=0,
                 born_timestamp=None, born_host=None, delay_level=0):
        cdef bytes tags_b = None, keys_b = None, delay_b = None, user_b = b"", kb, vb
        cdef dict user = None
        cdef list parts
        cdef Py_ssize_t plen, pos, i
        self._topic_b = _check_topic(topic)
        self.topic = topic
        if type(body) is bytes:
            self._body = body
        elif isinstance(body, (bytes, bytearray, memoryview)) or hasattr(body, "__buffer__"):
            self._body = bytes(body)
        else:
            raise InvalidMessageTypeError("body", "bytes-like", type(body).__name__)
        self._body_len = PyBytes_GET_SIZE(self._body)
        if properties is not None:
            if not isinstance(properties, dict):
                raise InvalidMessageTypeError("properties", "dict of str to str",
                                              type(properties).__name__)
            user = dict(<dict>properties)
            if tags is not None:
                user.pop(PROPERTY_TAGS, None)       # the explicit argument wins
            if keys is not None:
                user.pop(PROPERTY_KEYS, None)
            # the store computes the record CRC itself (RocketMQ deletes a given one too)
            user.pop(PROPERTY_CRC32, None)
            if delay_level is not 0:
                user.pop(PROPERTY_DELAY, None)
            if user:
                parts = []
                plen = 0
                for k, v in user.items():
                    kb = _text_utf8("properties name", k, True)
                    vb = _text_utf8("properties", v, True, k)
                    parts.append(kb)
                    parts.append(vb)
                    plen += PyBytes_GET_SIZE(kb) + PyBytes_GET_SIZE(vb) + 2
                user_b = PyBytes_FromStringAndSize(NULL, plen)
                pos = 0
                for i in range(0, len(parts), 2):
                    kb = parts[i]
                    pos += _put_prop(PyBytes_AS_STRING(user_b) + pos, PyBytes_AS_STRING(kb),
                                     PyBytes_GET_SIZE(kb), parts[i + 1])
        if tags is not None:
            tags_b = _text_utf8("tags", tags, True)
        if keys is not None:
            if type(keys) is str:
                keys_b = _text_utf8("keys", keys, True)
            elif isinstance(keys, (list, tuple)):
                for k in keys:
                    _text_utf8("keys", k, False)
                if keys:
                    keys_b = _text_utf8("keys", " ".join(keys), True)
            else:
                raise InvalidMessageTypeError("keys", "str or list of str", type(keys).__name__)
        if delay_level is not 0:
            self._delay = _int32("delay_level", delay_level)
            if self._delay < 0:
                raise InvalidMessageError("delay_level", delay_level,
                                          "must not be negative (0 means no delay)")
            if self._delay:
                delay_b = str(self._delay).encode("ascii")
        self._user = user
        self._tags = tags
        self._keys = None if keys_b is None else (keys if type(keys) is str else " ".join(keys))
        self._has_uniq = bool(user) and PROPERTY_UNIQ_KEY in user
        self._delayed = delay_b is not None or (bool(user) and PROPERTY_DELAY in user)
        # WAIT=false: a sync-flush put does not wait for the disk (docs/format.md §2)
        self._no_wait = bool(user) and user.get("WAIT") == "false"
        # properties bytes: user properties, then TAGS, KEYS and DELAY (order is free:
        # docs/format.md §1.4)
        plen = PyBytes_GET_SIZE(user_b)
        if tags_b is not None:
            plen += 6 + PyBytes_GET_SIZE(tags_b)
        if keys_b is not None:
            plen += 6 + PyBytes_GET_SIZE(keys_b)
        if delay_b is not None:
            plen += 7 + PyBytes_GET_SIZE(delay_b)
        if plen == PyBytes_GET_SIZE(user_b):
            self._props_b = user_b
        else:
            self._props_b = PyBytes_FromStringAndSize(NULL, plen)
            pos = PyBytes_GET_SIZE(user_b)
            memcpy(PyBytes_AS_STRING(self._props_b), PyBytes_AS_STRING(user_b), <size_t>pos)
            if tags_b is not None:
                pos += _put_prop(PyBytes_AS_STRING(self._props_b) + pos, "TAGS", 4, tags_b)
            if keys_b is not None:
                pos += _put_prop(PyBytes_AS_STRING(self._props_b) + pos, "KEYS", 4, keys_b)
            if delay_b is not None:
                pos += _put_prop(PyBytes_AS_STRING(self._props_b) + pos, "DELAY", 5, delay_b)
        plen += 0 if self._has_uniq else UNIQ_PROP_LEN
        if plen > RS_MAX_PROPERTIES_LEN:
            raise InvalidMessageError("properties", f"{plen} bytes encoded",
                                      f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                      limit=RS_MAX_PROPERTIES_LEN, status="PROPERTIES_SIZE_EXCEEDED")
        self.flag = 0 if flag is 0 else _int32("flag", flag)
        self.sys_flag = 0 if sys_flag is 0 else _int32("sys_flag", sys_flag)
        if self.sys_flag & (RS_SYSFLAG_BORNHOST_V6 | RS_SYSFLAG_STOREHOST_V6):
            raise InvalidMessageError("sys_flag", hex(self.sys_flag),
                                      "host bits 0x10/0x20 are set by the store from the addresses")
        self.reconsume_times = 0 if reconsume_times is 0 else _int32("reconsume_times", reconsume_times)
        if prepared_transaction_offset is not 0:
            if not isinstance(prepared_transaction_offset, int):
                raise InvalidMessageTypeError("prepared_transaction_offset", "int",
                                              type(prepared_transaction_offset).__name__)
            _int64("prepared_transaction_offset", prepared_transaction_offset)
            self.prepared_transaction_offset = prepared_transaction_offset
        if born_timestamp is not None:
            if not isinstance(born_timestamp, int):
                raise InvalidMessageTypeError("born_timestamp", "int (ms) or None",
                                              type(born_timestamp).__name__)
            _int64("born_timestamp", born_timestamp)
        self.born_timestamp = born_timestamp
        if born_host is not None:
            if not isinstance(born_host, str):
                raise InvalidMessageTypeError("born_host", "'ip:port' str", type(born_host).__name__)
            self._born_host_b = encode_host(born_host)
        else:
            self._born_host_b = LOCAL_BORN_HOST
        self.born_host = born_host

    @staticmethod
    def from_properties_string(topic, body, properties_string, *, bint wait=True, flag=0,
                               sys_flag=0, reconsume_times=0, prepared_transaction_offset=0,
                               born_timestamp=None, born_host=None, dict properties=None):
        """A message whose stored properties are exactly ``properties_string`` (str or bytes).

        What a broker stores: RocketMQ writes ``MessageExtBrokerInner.propertiesString``, which
        may differ from the property map (docs/messaging.md) and has no trailing ``\\x02``. The
        string is stored verbatim: no UNIQ_KEY is added. ``wait=False`` is the map's
        ``WAIT=false`` (a sync-flush put does not wait), which the string may not show.
        ``properties``: the same entries as a dict, when the caller has them (not parsed again;
        they must be the string's).
        """
        cdef bytes pb
        if isinstance(properties_string, str):
            pb = PyUnicode_AsUTF8String(properties_string)
        elif isinstance(properties_string, (bytes, bytearray, memoryview)):
            pb = bytes(properties_string)
        else:
            raise InvalidMessageTypeError("properties_string", "str or bytes",
                                          type(properties_string).__name__)
        if prop_crc_state(PyBytes_AS_STRING(pb), <int32_t>PyBytes_GET_SIZE(pb)) == 1:
            # a stored record's own CRC property: the writing store computes a new one
            # (RocketMQ deletes __CRC32# before encoding)
            pb = pb[:PyBytes_GET_SIZE(pb) - RS_CRC32_RESERVED_LEN]
            if properties is not None and PROPERTY_CRC32 in properties:
                properties = {k: v for k, v in properties.items() if k != PROPERTY_CRC32}
        if PyBytes_GET_SIZE(pb) > RS_MAX_PROPERTIES_LEN:
            raise InvalidMessageError("properties", f"{PyBytes_GET_SIZE(pb)} bytes encoded",
                                      f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                      limit=RS_MAX_PROPERTIES_LEN, status="PROPERTIES_SIZE_EXCEEDED")
        cdef Message m = Message(topic, body, flag=flag, sys_flag=sys_flag,
                                 reconsume_times=reconsume_times,
                                 prepared_transaction_offset=prepared_transaction_offset,
                                 born_timestamp=born_timestamp, born_host=born_host)
        cdef dict user = parse_properties(pb) if properties is None else properties
        m._user = user if user else None
        m._props_b = pb
        m._has_uniq = True          # verbatim: the broker decides whether a UNIQ_KEY is there
        m._delayed = PROPERTY_DELAY in user
        m._no_wait = not wait
        return m

    @property
    def body(self):
        """The body bytes."""
        return self._body

    @property
    def tags(self):
        """The ``TAGS`` property, or None."""
        return self._tags if self._tags is not None else \
            (self._user.get(PROPERTY_TAGS) if self._user else None)

    @property
    def keys(self):
        """The ``KEYS`` property split on spaces (empty list when absent)."""
        k = self._keys if self._keys is not None else \
            (self._user.get(PROPERTY_KEYS) if self._user else None)
        return [x for x in k.split(" ") if x] if k else []

    @property
    def delay_level(self):
        """The delay level (the ``DELAY`` property as an int), 0 when the message has none."""
        if self._delay:
            return self._delay
        v = self._user.get(PROPERTY_DELAY) if self._user else None
        try:
            return int(v) if v is not None else 0
        except ValueError:
            return 0

    @property
    def properties(self):
        """A copy of every property, TAGS, KEYS and DELAY included (UNIQ_KEY only when given)."""
        cdef dict out = dict(self._user) if self._user else {}
        if self._tags is not None:
            out[PROPERTY_TAGS] = self._tags
        if self._keys is not None:
            out[PROPERTY_KEYS] = self._keys
        if self._delay:
            out[PROPERTY_DELAY] = str(self._delay)
        return out

    cdef int _fill(self, RecordFields *f, const char **body_buf) except -1:
        """Fill the message's own fields of ``f`` (not offsets, times or store host)."""
        if not self._crc_cached:
            self._crc = rs_body_crc(<const unsigned char *>PyBytes_AS_STRING(self._body),
                                    <size_t>self._body_len) if self._body_len else 0
            self._crc_cached = True
        f.body_crc = self._crc
        f.flag = self.flag
        f.sys_flag = self.sys_flag
        f.reconsume_times = self.reconsume_times
        f.prepared_tx_offset = self.prepared_transaction_offset
        f.born_host = PyBytes_AS_STRING(self._born_host_b)
        f.born_host_len = <int>PyBytes_GET_SIZE(self._born_host_b)
        if f.born_host_len == RS_HOST_V6_LEN:
            f.sys_flag |= RS_SYSFLAG_BORNHOST_V6
        f.body = PyBytes_AS_STRING(self._body)
        f.body_len = self._body_len
        f.topic = PyBytes_AS_STRING(self._topic_b)
        f.topic_len = PyBytes_GET_SIZE(self._topic_b)
        f.magic = RS_MAGIC_V2 if f.topic_len > RS_MAX_TOPIC_LEN_V1 else RS_MAGIC_V1
        f.props = PyBytes_AS_STRING(self._props_b)
        f.props_len = PyBytes_GET_SIZE(self._props_b)
        return 0

    @property
    def needs_uniq_key(self):
        return not self._has_uniq

    @property
    def delayed(self):
        """True when the message carries a ``DELAY`` property (a batch refuses level > 0)."""
        return self._delayed

    @property
    def wait_store_msg_ok(self):
        """False only for ``WAIT=false`` (RocketMQ's ``isWaitStoreMsgOK``)."""
        return not self._no_wait

    def __reduce__(self):
        return (_rebuild_message, (self.topic, self._body, self.properties, self.flag,
                                   self.sys_flag, self.reconsume_times,
                                   self.prepared_transaction_offset, self.born_timestamp,
                                   self.born_host))

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, body={body_preview(self._body)}, "
                f"properties={self.properties!r}, flag={self.flag})")


cdef bytes LOCAL_BORN_HOST = encode_host("127.0.0.1:0")


cdef int32_t _int32(str field, object v) except? -1:
    if not isinstance(v, int) or isinstance(v, bool):
        raise InvalidMessageTypeError(field, "int", type(v).__name__)
    if not -0x80000000 <= v <= 0x7FFFFFFF:
        raise InvalidMessageError(field, v, "outside the 32-bit signed range", limit=0x7FFFFFFF)
    return v


cdef int _int64(str field, object v) except -1:
    # a Java long on disk
    if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        raise InvalidMessageError(field, v, "outside the 64-bit signed range (a Java long)",
                                  limit=0x7FFFFFFFFFFFFFFF)
    return 0


# -- MessageExt --------------------------------------------------------------------------------

cdef object _decompress(object stored, int sys_flag, int64_t offset):
    cdef int kind = sys_flag & RS_SYSFLAG_COMPRESS_TYPE
    cdef bytes head = bytes(stored[:4])
    if kind == RS_SYSFLAG_COMPRESS_LZ4:
        # an LZ4 frame starts with its magic: without it the SYSFLAG is what is wrong
        _frame_or_corrupt(head, b"\x04\x22\x4d\x18", "LZ4", sys_flag, offset)
        try:
            import lz4.frame
        except ImportError as e:
            raise ModuleNotFoundError(
                f"message at commit-log offset {offset} is LZ4-compressed (sysflag {sys_flag:#x}): "
                "install lz4 to read it, or read it with raw=True") from e
        try:
            return lz4.frame.decompress(bytes(stored))
        except RuntimeError as e:
            raise CorruptionError("commitlog", offset, f"LZ4 body does not decompress: {e}") from e
    if kind == RS_SYSFLAG_COMPRESS_ZSTD:
        _frame_or_corrupt(head, b"\x28\xb5\x2f\xfd", "ZSTD", sys_flag, offset)
        try:
            import zstandard
        except ImportError as e:
            raise ModuleNotFoundError(
                f"message at commit-log offset {offset} is ZSTD-compressed (sysflag {sys_flag:#x}): "
                "install zstandard to read it, or read it with raw=True") from e
        try:
            return zstandard.ZstdDecompressor().decompressobj().decompress(bytes(stored))
        except zstandard.ZstdError as e:
            raise CorruptionError("commitlog", offset, f"ZSTD body does not decompress: {e}") from e
    if kind != 0 and kind != RS_SYSFLAG_COMPRESS_ZLIB:
        raise CorruptionError("commitlog", offset,
                              f"SYSFLAG {sys_flag:#x} names compression type {kind >> 8}, "
                              "which RocketMQ does not define")
    try:
        return zlib.decompress(stored)  # 0x300 ZLIB, or legacy 0 = zlib
    except zlib.error as e:
        raise CorruptionError("commitlog", offset,
                              f"body flagged zlib-compressed (sysflag {sys_flag:#x}) does not "
                              f"decompress: {e}") from e


cdef int _frame_or_corrupt(bytes head, bytes magic, str kind, int sys_flag,
                           int64_t offset) except -1:
    if head != magic:
        raise CorruptionError("commitlog", offset,
                              f"SYSFLAG {sys_flag:#x} says {kind}-compressed, but the body is "
                              f"not a {kind} frame")
    return 0


@cython.final
@cython.freelist(256)
@cython.no_gc       # owner is a MappedFile, bytes or memoryview: none refers back to a MessageExt
cdef class MessageExt:
    """A stored message with every field of its record (docs/format.md §1).

    Numbers are decoded when the record is read; topic, properties, hosts and the body are
    decoded from the record bytes on first access. A ``MessageExt`` read from a store pins its
    mapped file (``MappedFile.pin``), so its bytes stay valid after the store closes, and the
    file cannot be unmapped under it. ``body`` is a zero-copy ``memoryview`` of the mapping
    (decompressed ``bytes`` when the record is stored compressed and was read without
    ``raw``): a memoryview has no ``.decode()`` and ``json.loads`` refuses it, so use
    ``body_bytes`` (a ``bytes`` copy) there; ``copy()`` detaches the message from the mapping.
    """

    def __dealloc__(self):
        if self._mf is not None:
            self._mf.unpin()

    @staticmethod
    cdef MessageExt new(const RecordInfo *info, object owner, MappedFile mf, const char *rec,
                        bint raw, str topic):
        cdef MessageExt m = MessageExt.__new__(MessageExt)
        if mf is not None:
            mf.pin()
            m._mf = mf
        m._owner = owner
        m._rec = rec
        m.store_size = info.total_size
        m.magic = <int32_t>info.magic
        m.body_crc = info.body_crc
        m.queue_id = info.queue_id
        m.flag = info.flag
        m.queue_offset = info.queue_offset
        m.commitlog_offset = info.phy_offset
        m.sys_flag = info.sys_flag
        m.born_timestamp = info.born_ts
        m.store_timestamp = info.store_ts
        m.reconsume_times = info.reconsume_times
        m.prepared_transaction_offset = info.prepared_tx_offset
        m._born_host_off = <int32_t>(info.born_host - rec)
        m._born_host_len = info.born_host_len
        m._store_host_off = <int32_t>(info.store_host - rec)
        m._store_host_len = info.store_host_len
        m._body_off = <int32_t>(info.body - rec)
        m._body_len = info.body_len
        m._topic_off = <int32_t>(info.topic - rec)
        m._topic_len = info.topic_len
        m._props_off = <int32_t>(info.props - rec)
        m._props_len = info.props_len
        m._raw = raw
        m._topic = topic
        return m

    cdef object _slice(self, int32_t off, int32_t n):
        """A zero-copy view of n record bytes at off (pins what the owner pins)."""
        cdef Py_ssize_t base
        if self._mf is not None:
            base = self._rec - self._mf.base
            return self._mf.whole_view()[base + off:base + off + n]
        base = self._rec - <const char *>self._owner_ptr
        if type(self._owner) is bytes:
            if self._copied:        # a detached copy hands out bytes, not views of itself
                return (<bytes>self._owner)[base + off:base + off + n]
            return memoryview(<bytes>self._owner)[base + off:base + off + n]
        return self._owner[base + off:base + off + n]

    @property
    def topic(self):
        if self._topic is None:
            self._topic = PyUnicode_DecodeUTF8(self._rec + self._topic_off, self._topic_len,
                                               "replace")
        return self._topic

    @topic.setter
    def topic(self, str value):
        # the client shows a retried message under its RETRY_TOPIC (resetRetryAndNamespace);
        # the record's bytes are untouched
        self._topic = value

    @property
    def stored_body(self):
        """The body exactly as stored (compressed when the record is): a zero-copy view.

        Read from a store, the body's CRC is checked on this first access
        (``CorruptionError`` on a mismatch)."""
        return self._stored() if self._stored_body is None else self._stored_body

    cdef object _stored(self):
        if self._verify_crc and self._body_len and rs_body_crc(
                <const unsigned char *>self._rec + self._body_off,
                <size_t>self._body_len) != self.body_crc:
            # the body is the one field the record protects: refuse to hand out bad bytes
            raise CorruptionError("commitlog", self.commitlog_offset,
                                  f"body CRC mismatch (stored {self.body_crc:#x})")
        self._stored_body = self._slice(self._body_off, self._body_len)
        return self._stored_body

    @property
    def body(self):
        """The body: a zero-copy view, or decompressed bytes for a compressed record."""
        if self._body is None:
            stored = self._stored_body if self._stored_body is not None else self._stored()
            if (self.sys_flag & RS_SYSFLAG_COMPRESSED) and not self._raw:
                self._body = _decompress(stored, self.sys_flag, self.commitlog_offset)
            else:
                self._body = stored
        return self._body

    @property
    def body_bytes(self):
        """The body as ``bytes`` (a copy): for ``json.loads``, ``.decode()``, or keeping it
        past the message. ``body`` is the zero-copy view; read that in hot loops."""
        cdef object b = self.body
        return b if type(b) is bytes else bytes(b)

    @property
    def body_size(self):
        """Length of the stored body in bytes."""
        return self._body_len

    @property
    def properties(self):
        """Every property of the record (parsed on first access; docs/format.md §1.4)."""
        if self._props is None:
            self._props = parse_properties(self._rec[self._props_off:self._props_off + self._props_len])
        return self._props

    @property
    def properties_bytes(self):
        """The properties segment exactly as stored (a broker copies it verbatim, see
        docs/messaging.md; 4.9.x strings have no trailing \\x02 and keep the writer's order)."""
        return self._rec[self._props_off:self._props_off + self._props_len]

    @property
    def born_host(self):
        return decode_host(self._rec + self._born_host_off, self._born_host_len)

    @property
    def store_host(self):
        return decode_host(self._rec + self._store_host_off, self._store_host_len)

    @property
    def tags(self):
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self):
        k = self.properties.get(PROPERTY_KEYS)
        return [x for x in k.split(" ") if x] if k else []

    @property
    def uniq_key(self):
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def msg_id(self):
        """The message id. Read from a store (``MessageStore``, ``rocketstore get``, Spark) it
        is the offset message id, as RocketMQ's ``MessageExt.getMsgId``; handed out by a
        consumer it is the producer's UNIQ_KEY when the message has one -- what ``send()``
        returned as ``SendResult.msg_id`` -- else the offset id, as RocketMQ's client
        ``MessageClientExt.getMsgId``. ``offset_msg_id`` is always the offset id."""
        if self._client:
            key = self.properties.get(PROPERTY_UNIQ_KEY)
            if key:
                return key
        return self.offset_msg_id

    @property
    def offset_msg_id(self):
        """Offset message id: store host + commit-log offset as uppercase hex (docs/format.md §7)."""
        return format_msg_id(self._rec[self._store_host_off:self._store_host_off + self._store_host_len],
                             self.commitlog_offset)

    @property
    def is_client_message(self):
        """Whether a consumer handed this message out (then ``msg_id`` is the UNIQ_KEY)."""
        return self._client

    @property
    def transaction_type(self):
        return self.sys_flag & RS_SYSFLAG_TX_MASK

    def record(self):
        """A copy of the whole record's bytes."""
        return self._rec[:self.store_size]

    def copy(self):
        """The same message backed by its own copy of the record (bodies become ``bytes``)."""
        cdef bytes rec = self._rec[:self.store_size]
        cdef RecordInfo info
        if parse_record(rec, len(rec), True, &info) <= 0:
            # the copy is what a caller keeps: never a damaged one
            raise CorruptionError("commitlog", self.commitlog_offset,
                                  "record fails its integrity check: "
                                  + check_reason(rec))
        cdef MessageExt m = MessageExt.new(&info, rec, None, rec, self._raw, self._topic)
        m._owner_ptr = <const void *>PyBytes_AS_STRING(rec)
        m._copied = True
        m._client = self._client
        return m

    def to_message(self):
        """A ``Message`` carrying this one's topic, body, properties and producer fields (not
        its record CRC: the store that writes it computes its own)."""
        return Message(self.topic, bytes(self.stored_body), properties=self.properties,
                       flag=self.flag, sys_flag=self.sys_flag & ~0x30,
                       reconsume_times=self.reconsume_times,
                       prepared_transaction_offset=self.prepared_transaction_offset,
                       born_timestamp=self.born_timestamp, born_host=self.born_host)

    def encode(self):
        """This record's bytes, re-encoded field by field from the decoded values.

        Properties are re-serialised from the parsed dict, keeping the trailing-separator
        convention of the writer (4.9.x drops the last \\x02; 5.2+ and rocketstore keep it).
        """
        cdef bytes props = _encode_properties(self.properties)
        if self._props_len and self._rec[self._props_off + self._props_len - 1] != 2 and props:
            props = props[:len(props) - 1]
        return encode_record(
            topic=self.topic, body=self.stored_body, properties_raw=props,
            queue_id=self.queue_id, flag=self.flag, queue_offset=self.queue_offset,
            physical_offset=self.commitlog_offset, sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp, born_host=self.born_host,
            store_timestamp=self.store_timestamp, store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            body_crc=self.body_crc, magic=self.magic & 0xFFFFFFFF)

    def __reduce__(self):
        return (_rebuild_ext, (self.record(), self._raw, self._client))

    def __repr__(self):
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
                f"store_size={self.store_size}, tags={self.tags!r}, "
                f"body={body_preview(self.body)})")


def _rebuild_ext(bytes record, bint raw=False, bint client=False):
    cdef MessageExt m = decode(record, 0, raw=raw).copy()
    m._client = client
    return m


def as_client_messages(list msgs):
    """Mark ``msgs`` (``MessageExt``) as handed out by a consumer: their ``msg_id`` becomes
    the UNIQ_KEY (RocketMQ's ``MessageClientExt``). One flag per message, no new object;
    returns ``msgs``."""
    cdef MessageExt m
    for m in msgs:
        m._client = True
    return msgs


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


# -- a producer's send-time stamping -------------------------------------------------------------

cdef bytes _WAIT_TRUE_PROP = b"WAIT\x01true\x02"


def stamp_for_send(list msgs, UniqIdGenerator gen not None):
    """The messages as a RocketMQ producer sends them, and their UNIQ_KEYs.

    A message without ``UNIQ_KEY`` gets a new one from ``gen`` (MessageClientIDSetter), one
    without ``WAIT`` gets ``WAIT=true`` (what Java's ``Message`` constructors set); a message
    that has both is returned as is. The copies append the two properties to the encoded
    properties, so the cost is one small bytes concatenation per message (the client's batch
    path). ``gen`` is not thread-safe: callers serialise calls on it.
    """
    cdef list out = [], keys = []
    cdef int64_t now = now_ms()
    cdef Message c
    for obj in msgs:
        if type(obj) is not Message:
            raise InvalidMessageTypeError("message", "Message", type(obj).__name__)
        c = _stamped(<Message>obj, gen, now)
        out.append(c)
        keys.append(c._user[PROPERTY_UNIQ_KEY])
    return out, keys


def stamp_one(Message m not None, UniqIdGenerator gen not None):
    """``stamp_for_send`` of one message: ``(message as sent, its UNIQ_KEY)`` (the sync
    send's path: no lists)."""
    cdef Message c = _stamped(m, gen, now_ms())
    return c, c._user[PROPERTY_UNIQ_KEY]


cdef Message _stamped(Message m, UniqIdGenerator gen, int64_t now):
    """``m`` with UNIQ_KEY and WAIT=true added where absent (``m`` itself when it has both)."""
    cdef char buf[32]
    cdef bint need_uniq = not (m._user and PROPERTY_UNIQ_KEY in m._user)
    cdef bint need_wait = not (m._user and "WAIT" in m._user)
    cdef dict user
    cdef bytes extra
    cdef Message c
    if not need_uniq and not need_wait:
        return m
    user = dict(m._user) if m._user else {}
    extra = b""
    if need_uniq:
        gen.next_into(buf, now)
        user[PROPERTY_UNIQ_KEY] = buf[:32].decode("ascii")
        extra = UNIQ_KEY_HEAD + buf[:32] + b"\x02"
    if need_wait:
        user["WAIT"] = "true"
        extra += _WAIT_TRUE_PROP
    c = Message.__new__(Message)
    c.topic = m.topic
    c._body = m._body
    c._user = user
    c._tags = m._tags
    c._keys = m._keys
    c.flag = m.flag
    c.sys_flag = m.sys_flag
    c.reconsume_times = m.reconsume_times
    c.prepared_transaction_offset = m.prepared_transaction_offset
    c.born_timestamp = m.born_timestamp
    c.born_host = m.born_host
    c._topic_b = m._topic_b
    c._props_b = m._props_b + extra
    if PyBytes_GET_SIZE(c._props_b) > RS_MAX_PROPERTIES_LEN:
        raise InvalidMessageError("properties", f"{PyBytes_GET_SIZE(c._props_b)} bytes encoded",
                                  f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                  limit=RS_MAX_PROPERTIES_LEN,
                                  status="PROPERTIES_SIZE_EXCEEDED")
    c._born_host_b = m._born_host_b
    c._has_uniq = True
    c._delayed = m._delayed
    c._delay = m._delay
    c._no_wait = m._no_wait
    c._crc_cached = m._crc_cached
    c._crc = m._crc
    c._body_len = m._body_len
    return c
