# cython: language_level=3
"""The broker's send path over bytes: a client's properties string turned into what a 4.9.8
broker stores, without a map or a dict per message (``SendMessageProcessor.send_wire``), and
request headers read in place (``json_header``).

4.9.8 parses the client's string into a ``java.util.HashMap`` (``string2messageProperties``),
puts ``UNIQ_KEY`` when the client sent none and ``CLUSTER``, removes ``WAIT`` and stores the
map serialized in its iteration order (``rocketstore.broker.inner.PropertiesMap`` models it).
That order depends on the keys alone: bucket ``spread(hash) & (capacity - 1)`` in bucket order,
insertion order within a bucket, with the capacity the puts grew the table to. Here it is
computed on the segments of the string in place and the result written once.

Only the common shape takes this path (``stored_properties`` returns None otherwise, and the
caller runs the map path, which decides): ASCII without NUL, at most ``MAX_KEYS`` properties,
none of ``DELAY``, ``TRAN_MSG``, the broker-only properties or the record CRC property.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t

from rocketstore.errors import InvalidMessageError, RemotingProtocolError, StoreClosedError
from libc.string cimport memchr, memcmp, memcpy

cdef enum:
    MAX_KEYS = 64

# keys that send the message down the map path (its rules: delay rewrite, half message,
# broker-only refusal, a client's stale record CRC)
cdef tuple _SLOW_KEYS = (b"DELAY", b"TRAN_MSG", b"REAL_TOPIC", b"REAL_QID",
                         b"TRAN_PREPARED_QUEUE_OFFSET", b"TRANSACTION_CHECK_TIMES", b"__CRC32#")


cdef inline uint32_t _spread(const char *k, Py_ssize_t n) noexcept nogil:
    # String.hashCode over ASCII (one UTF-16 unit per byte), then HashMap.hash's h ^ (h >>> 16)
    cdef uint32_t h = 0
    cdef Py_ssize_t i
    for i in range(n):
        h = 31 * h + <unsigned char>k[i]
    return h ^ (h >> 16)


cdef struct _Entry:
    const char *key
    Py_ssize_t klen
    const char *val
    Py_ssize_t vlen
    uint32_t hash
    bint removed


cdef struct _Map:
    _Entry e[MAX_KEYS + 2]
    int n                   # entries (removed included: they keep their slot)
    int size                # live entries
    int cap                 # 0: no table yet
    int threshold


cdef int _find(_Map *m, const char *k, Py_ssize_t n) noexcept nogil:
    cdef int i
    for i in range(m.n):
        if not m.e[i].removed and m.e[i].klen == n and memcmp(m.e[i].key, k, <size_t>n) == 0:
            return i
    return -1


cdef void _resize(_Map *m) noexcept nogil:
    m.cap = m.threshold if m.cap == 0 else m.cap * 2
    m.threshold = <int>(m.cap * 0.75)


cdef int _put(_Map *m, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) noexcept nogil:
    """HashMap.put as PropertiesMap models it; -1 when the table is full here."""
    cdef int i = _find(m, k, kn), j, in_bucket = 0
    cdef uint32_t b
    if i >= 0:
        m.e[i].val = v          # a replaced value keeps its place
        m.e[i].vlen = vn
        return 0
    if m.n >= MAX_KEYS + 2:
        return -1
    if m.cap == 0:
        _resize(m)
    i = m.n
    m.e[i].key, m.e[i].klen, m.e[i].val, m.e[i].vlen = k, kn, v, vn
    m.e[i].hash = _spread(k, kn)
    m.e[i].removed = False
    m.n += 1
    m.size += 1
    b = m.e[i].hash & <uint32_t>(m.cap - 1)
    for j in range(m.n):
        if not m.e[j].removed and (m.e[j].hash & <uint32_t>(m.cap - 1)) == b:
            in_bucket += 1
    if in_bucket > 8 and m.cap < 64:
        _resize(m)              # treeifyBin on a small table resizes instead
    if m.size > m.threshold:
        _resize(m)
    return 0


cdef bint _slow_key(const char *k, Py_ssize_t n):
    cdef bytes s
    for s in _SLOW_KEYS:
        if PyBytes_GET_SIZE(s) == n and memcmp(PyBytes_AS_STRING(s), k, <size_t>n) == 0:
            return True
    return False


cdef int _parse_into(_Map *m, const char *p, Py_ssize_t n) noexcept:
    """Put the properties of "k\x01v\x02..." into ``m`` in order; -1 when a key sends the
    message down the map path or the table is full here."""
    cdef const char *end = p + n
    cdef const char *seg
    cdef const char *sep
    cdef Py_ssize_t klen
    while p < end:
        # parse_properties' rule: a segment is a property when it has a separator with a
        # non-empty name before it and a non-empty value after it
        seg = <const char *>memchr(p, 2, <size_t>(end - p))
        if seg == NULL:
            seg = end
        sep = <const char *>memchr(p, 1, <size_t>(seg - p))
        if sep != NULL and sep > p and sep + 1 < seg:
            klen = sep - p
            if _slow_key(p, klen):
                return -1
            if _put(m, p, klen, sep + 1, seg - sep - 1) < 0:
                return -1
        p = seg + 1
    return 0


cdef bint _plain(const char *p, Py_ssize_t n) noexcept nogil:
    """ASCII without NUL: the bytes a str round trip keeps as they are."""
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(n):
        c = <unsigned char>p[i]
        if c == 0 or c >= 0x80:
            return False
    return True


cdef bint _take_wait_value(_Map *m) noexcept:
    """WAIT's Boolean.parseBoolean (absent: true), the map unchanged."""
    cdef int i = _find(m, b"WAIT", 4)
    if i < 0:
        return True
    return m.e[i].vlen == 4 and (m.e[i].val[0] | 32) == b't' and \
        (m.e[i].val[1] | 32) == b'r' and (m.e[i].val[2] | 32) == b'u' and \
        (m.e[i].val[3] | 32) == b'e'


cdef bint _take_wait(_Map *m) noexcept:
    """Remove WAIT from the map; its Boolean.parseBoolean (absent: true)."""
    cdef int i = _find(m, b"WAIT", 4)
    cdef bint wait = _take_wait_value(m)
    if i >= 0:
        m.e[i].removed = True
        m.size -= 1
    return wait


cdef Py_ssize_t _map_size(_Map *m) noexcept nogil:
    """Bytes of the map serialized ("k\x01v" joined by "\x02", no tail)."""
    cdef Py_ssize_t total = 0
    cdef int a
    for a in range(m.n):
        if not m.e[a].removed:
            total += m.e[a].klen + m.e[a].vlen + 2
    return total - 1 if total else 0


cdef void _write_map(_Map *m, char *w, const char *tail, Py_ssize_t tail_len) noexcept nogil:
    """The map in iteration order (bucket at the final capacity, insertion order within a
    bucket), "k\x01v" joined by "\x02"; ``tail`` (when not NULL) after one more "\x02".
    ``w`` has room for ``_map_size(m)`` (+ 1 + ``tail_len``) bytes."""
    cdef int order[MAX_KEYS + 2]
    cdef int cnt = 0, a, b, t
    for a in range(m.n):
        if m.e[a].removed:
            continue
        order[cnt] = a
        cnt += 1
    for a in range(1, cnt):             # insertion sort: stable, a dozen entries
        t = order[a]
        b = a - 1
        while b >= 0 and (m.e[order[b]].hash & <uint32_t>(m.cap - 1)) > \
                (m.e[t].hash & <uint32_t>(m.cap - 1)):
            order[b + 1] = order[b]
            b -= 1
        order[b + 1] = t
    for a in range(cnt):
        t = order[a]
        if a:
            w[0] = 2
            w += 1
        memcpy(w, m.e[t].key, <size_t>m.e[t].klen)
        w += m.e[t].klen
        w[0] = 1
        w += 1
        memcpy(w, m.e[t].val, <size_t>m.e[t].vlen)
        w += m.e[t].vlen
    if tail != NULL:
        w[0] = 2
        memcpy(w + 1, tail, <size_t>tail_len)


cdef bytes _serialize(_Map *m, const char *tail, Py_ssize_t tail_len):
    """``_write_map`` into a new bytes object."""
    cdef Py_ssize_t total = _map_size(m)
    if tail != NULL:
        total += 1 + tail_len
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    _write_map(m, PyBytes_AS_STRING(out), tail, tail_len)
    return out


cdef inline void _init(_Map *m) noexcept:
    m.n = m.size = m.cap = 0
    m.threshold = 16


def stored_properties(bytes props not None, bytes cluster not None, object uniq_id):
    """(stored properties bytes, wait) for a client send whose properties string is ``props``
    on a broker of cluster ``cluster``: the string a 4.9.8 broker stores (client map +
    ``UNIQ_KEY`` from ``uniq_id()`` when absent + ``CLUSTER``, ``WAIT`` removed, Java HashMap
    order) and whether a sync flush waits for it (``WAIT`` absent or true). None when the
    string is not of the common shape (see the module doc): the caller takes the map path."""
    cdef _Map m
    cdef bytes uniq_b = None
    cdef bint wait
    if not _plain(PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props)):
        return None
    _init(&m)
    if _parse_into(&m, PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props)) < 0:
        return None
    if _find(&m, b"UNIQ_KEY", 8) < 0:
        uniq_b = uniq_id().encode("ascii")
        if _put(&m, b"UNIQ_KEY", 8, PyBytes_AS_STRING(uniq_b), PyBytes_GET_SIZE(uniq_b)) < 0:
            return None
    if _put(&m, b"CLUSTER", 7, PyBytes_AS_STRING(cluster), PyBytes_GET_SIZE(cluster)) < 0:
        return None
    wait = _take_wait(&m)
    return _serialize(&m, NULL, 0), wait


cdef inline int32_t _be32(const unsigned char *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


def wire_batch(bytes body not None, bytes extra not None, bytes cluster not None,
               object uniq_id):
    """A SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``) as a 4.9.8 broker stores
    it: ``(meta, props, entries, body bytes)``, the first two for ``CommitLog.put_wire_batch_async`` -- per entry its body's
    offset and length in ``body``, its flag, and its stored properties in ``props``: the
    entry's own map (its string, then the batch header's ``extra``; ``UNIQ_KEY`` from
    ``uniq_id()`` when absent) in Java order, then the batch's map of ``WAIT`` (the first
    entry's) and ``CLUSTER``. A malformed body raises ``RemotingProtocolError`` (as
    ``decode_batch_body``); None when an entry is not of the common shape (the map path)."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(body)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(body), pos = 0, b0, p0, count = 0, poff = 0
    cdef Py_ssize_t body_bytes = 0
    cdef int32_t total, flag, blen, plen
    cdef _Map m, bm
    cdef bytes uniq_b, own, tail = None
    cdef list parts = []
    cdef bytearray meta = bytearray()
    cdef int32_t rec[5]
    cdef const char *ex = PyBytes_AS_STRING(extra)
    cdef Py_ssize_t exn = PyBytes_GET_SIZE(extra)
    if not _plain(ex, exn):
        return None
    while pos < n:
        if n - pos < 22:
            raise RemotingProtocolError(f"batch body: truncated entry at byte {pos}")
        total = _be32(p + pos)
        flag = _be32(p + pos + 12)
        blen = _be32(p + pos + 16)
        if total < 22 or pos + total > n or blen < 0 or 20 + <Py_ssize_t>blen + 2 > total:
            raise RemotingProtocolError(f"batch body: bad entry size {total} at byte {pos}")
        b0 = pos + 20
        plen = <int16_t>((<uint32_t>p[b0 + blen] << 8) | p[b0 + blen + 1])
        p0 = b0 + blen + 2
        if plen < 0 or p0 + plen > pos + total:
            raise RemotingProtocolError(f"batch body: bad properties length at byte {pos}")
        if not _plain(<const char *>p + p0, plen):
            return None
        _init(&m)
        if _parse_into(&m, <const char *>p + p0, plen) < 0 or _parse_into(&m, ex, exn) < 0:
            return None
        uniq_b = None
        if _find(&m, b"UNIQ_KEY", 8) < 0:
            uniq_b = uniq_id().encode("ascii")
            if _put(&m, b"UNIQ_KEY", 8, PyBytes_AS_STRING(uniq_b), PyBytes_GET_SIZE(uniq_b)) < 0:
                return None
        if tail is None:
            # MessageBatch: the batch carries WAIT of its first message; the broker adds CLUSTER
            _init(&bm)
            if _take_wait_value(&m):
                _put(&bm, b"WAIT", 4, b"true", 4)
            else:
                _put(&bm, b"WAIT", 4, b"false", 5)
            _put(&bm, b"CLUSTER", 7, PyBytes_AS_STRING(cluster), PyBytes_GET_SIZE(cluster))
            tail = _serialize(&bm, NULL, 0)
        own = _serialize(&m, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))
        if PyBytes_GET_SIZE(own) > 32767:
            return None                 # the map path refuses it
        rec[0], rec[1], rec[2] = <int32_t>b0, blen, flag
        rec[3], rec[4] = <int32_t>poff, <int32_t>PyBytes_GET_SIZE(own)
        meta += (<char *>rec)[:20]
        parts.append(own)
        poff += PyBytes_GET_SIZE(own)
        body_bytes += blen
        count += 1
        pos += total
    if count == 0:
        raise RemotingProtocolError("batch body holds no message")
    return bytes(meta), b"".join(parts), count, body_bytes


# -- request headers ---------------------------------------------------------------------------
#
# A remoting header is a small flat JSON object (docs/protocol.md §1.2). ``json_header`` reads
# the shape every client sends -- strings without escapes, integers, true/false/null, one level
# of ``extFields`` -- straight from the frame's bytes; anything else (an escape, a float, a
# nested value, a malformed byte) returns None and the caller's strict decoder reads the header
# and names what is wrong. So this accepts a subset of what that decoder accepts and returns
# exactly what it would.

from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef enum:
    _V_NONE = 0         # not a value this reader takes: fall back
    _V_STR = 1
    _V_INT = 2
    _V_NULL = 3
    _V_TRUE = 4
    _V_FALSE = 5
    _V_OBJ = 6


cdef struct _Val:
    int kind
    const unsigned char *s      # string bytes (without quotes) or integer digits
    Py_ssize_t n
    long long i
    bint esc                    # the string has escapes


cdef inline Py_ssize_t _ws(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and (p[i] == 32 or p[i] == 9 or p[i] == 10 or p[i] == 13):
        i += 1
    return i


cdef Py_ssize_t _value(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, _Val *v) noexcept nogil:
    """Read one scalar value at ``i`` (after whitespace); returns the index past it, or -1."""
    cdef Py_ssize_t j, d
    cdef unsigned char c
    cdef bint neg
    v.kind = _V_NONE
    if i >= n:
        return -1
    c = p[i]
    if c == 34:                     # '"'
        j = i + 1
        v.esc = False
        while j < n:
            c = p[j]
            if c == 34:
                break
            if c < 32:              # a raw control character: the strict reader refuses it
                return -1
            if c == 92:             # an escape: \uXXXX (not a surrogate) or one of "\/bfnrt
                if j + 1 >= n:
                    return -1
                c = p[j + 1]
                if c == 117:
                    if j + 5 >= n or _hex4(p + j + 2) < 0 or 0xD800 <= _hex4(p + j + 2) <= 0xDFFF:
                        return -1
                    j += 6
                elif c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or \
                        c == 114 or c == 116:
                    j += 2
                else:
                    return -1
                v.esc = True
                continue
            j += 1
        if j >= n:
            return -1
        v.kind, v.s, v.n = _V_STR, p + i + 1, j - i - 1
        return j + 1
    if c == 45 or 48 <= c <= 57:    # '-' or a digit
        j = i
        neg = c == 45
        if neg:
            j += 1
        d = j
        while j < n and 48 <= p[j] <= 57:
            j += 1
        if j == d or j - d > 18:    # no digits, or maybe past a long: the strict reader's
            return -1
        if p[d] == 48 and j - d > 1:    # a leading zero is not JSON
            return -1
        if neg and j - d == 1 and p[d] == 48:   # -0: its text differs from the number's
            return -1
        if j < n and (p[j] == 46 or p[j] == 101 or p[j] == 69):     # '.', 'e', 'E'
            return -1
        v.kind, v.s, v.n = _V_INT, p + i, j - i
        v.i = 0
        for d in range(d, j):
            v.i = v.i * 10 + (p[d] - 48)
        if neg:
            v.i = -v.i
        return j
    if n - i >= 4 and memcmp(p + i, b"null", 4) == 0:
        v.kind = _V_NULL
        return i + 4
    if n - i >= 4 and memcmp(p + i, b"true", 4) == 0:
        v.kind = _V_TRUE
        return i + 4
    if n - i >= 5 and memcmp(p + i, b"false", 5) == 0:
        v.kind = _V_FALSE
        return i + 5
    if c == 123:                    # '{': the caller decides whether one may be here
        v.kind = _V_OBJ
        return i
    return -1


cdef inline int _hex4(const unsigned char *p) noexcept nogil:
    cdef int i, x = 0, d
    cdef unsigned char c
    for i in range(4):
        c = p[i]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        x = x * 16 + d
    return x


cdef object _str(const unsigned char *s, Py_ssize_t n):
    """The string's text, or None when it is not valid UTF-8 (the strict reader names it)."""
    try:
        return PyUnicode_DecodeUTF8(<const char *>s, n, NULL)
    except UnicodeDecodeError:
        return None


cdef object _unescape(const unsigned char *s, Py_ssize_t n):
    """The text of a string with escapes (checked by ``_value``), or None when its raw bytes
    are not valid UTF-8. An escape's UTF-8 never starts with a continuation byte, so the
    bytes are valid together exactly when each part is."""
    cdef bytes buf = PyBytes_FromStringAndSize(NULL, n)     # escapes only shrink
    cdef unsigned char *w = <unsigned char *>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t i = 0, o = 0
    cdef int x
    cdef unsigned char c
    while i < n:
        c = s[i]
        if c != 92:
            w[o] = c
            o += 1
            i += 1
            continue
        c = s[i + 1]
        if c == 117:
            x = _hex4(s + i + 2)
            if x < 0x80:
                w[o] = <unsigned char>x
                o += 1
            elif x < 0x800:
                w[o] = <unsigned char>(0xC0 | (x >> 6))
                w[o + 1] = <unsigned char>(0x80 | (x & 0x3F))
                o += 2
            else:
                w[o] = <unsigned char>(0xE0 | (x >> 12))
                w[o + 1] = <unsigned char>(0x80 | ((x >> 6) & 0x3F))
                w[o + 2] = <unsigned char>(0x80 | (x & 0x3F))
                o += 3
            i += 6
            continue
        w[o] = (8 if c == 98 else 12 if c == 102 else 10 if c == 110 else 13 if c == 114
                else 9 if c == 116 else c)
        o += 1
        i += 2
    return _str(w, o)


cdef inline object _string(_Val *v):
    return _unescape(v.s, v.n) if v.esc else _str(v.s, v.n)


cdef object _text(_Val *v):
    # fastjson's text of a header value: strings as they are, numbers in decimal
    if v.kind == _V_STR:
        return _string(v)
    if v.kind == _V_INT:
        return PyUnicode_DecodeUTF8(<const char *>v.s, v.n, NULL)
    if v.kind == _V_TRUE:
        return "true"
    if v.kind == _V_FALSE:
        return "false"
    return None


cdef bint _is(const unsigned char *k, Py_ssize_t n, const char *name, Py_ssize_t m) noexcept nogil:
    return n == m and memcmp(k, name, <size_t>m) == 0


def json_header(const unsigned char[::1] h):
    """``(code, opaque, flag, version, language, remark, ext_fields)`` of a JSON remoting
    header in the common shape, else None (see above). ``language`` is the header's text or
    None when absent; ``ext_fields`` maps names to text (None for a JSON null)."""
    if h.shape[0] == 0:
        return None
    return _json_header(&h[0], h.shape[0])


cdef object _json_header(const unsigned char *p, Py_ssize_t n):
    cdef Py_ssize_t i, kn
    cdef const unsigned char *k
    cdef _Val v
    cdef long long code = 0, opaque = 0, flag = 0, version = 0
    cdef bint has_code = False
    cdef object language = None, remark = None, key, val
    cdef dict ext = None, e
    i = _ws(p, 0, n)
    if i >= n or p[i] != 123:
        return None
    i = _ws(p, i + 1, n)
    if i < n and p[i] == 125:
        return None                 # no code: the strict reader names it
    while True:
        i = _value(p, i, n, &v)
        if i < 0 or v.kind != _V_STR or v.esc:
            return None
        k, kn = v.s, v.n
        i = _ws(p, i, n)
        if i >= n or p[i] != 58:    # ':'
            return None
        i = _ws(p, i + 1, n)
        i = _value(p, i, n, &v)
        if i < 0:
            return None
        if v.kind == _V_OBJ:
            if not _is(k, kn, "extFields", 9):
                return None
            e = {}
            i = _ws(p, i + 1, n)
            if i < n and p[i] == 125:
                i += 1
            else:
                while True:
                    i = _value(p, i, n, &v)
                    if i < 0 or v.kind != _V_STR:
                        return None
                    key = _string(&v)
                    if key is None:
                        return None
                    i = _ws(p, i, n)
                    if i >= n or p[i] != 58:
                        return None
                    i = _ws(p, i + 1, n)
                    i = _value(p, i, n, &v)
                    if i < 0 or v.kind == _V_OBJ:
                        return None
                    val = _text(&v)
                    if val is None and v.kind != _V_NULL:
                        return None
                    e[key] = val
                    i = _ws(p, i, n)
                    if i < n and p[i] == 44:        # ','
                        i = _ws(p, i + 1, n)
                        continue
                    if i < n and p[i] == 125:       # '}'
                        i += 1
                        break
                    return None
            ext = e
        elif _is(k, kn, "code", 4) or _is(k, kn, "opaque", 6) or _is(k, kn, "flag", 4) or \
                _is(k, kn, "version", 7):
            if v.kind != _V_INT or not -2147483648 <= v.i <= 2147483647:
                return None         # text numbers, nulls, out of range: the strict reader's
            if k[0] == 99:
                code, has_code = v.i, True
            elif k[0] == 111:
                opaque = v.i
            elif k[0] == 102:
                flag = v.i
            else:
                version = v.i
        elif _is(k, kn, "language", 8):
            if v.kind != _V_STR:
                return None
            language = _string(&v)
            if language is None:
                return None
        elif _is(k, kn, "remark", 6):
            if v.kind == _V_NULL:
                remark = None
            elif v.kind == _V_STR:
                remark = _string(&v)
                if remark is None:
                    return None
            else:
                return None
        elif _is(k, kn, "extFields", 9):
            if v.kind != _V_NULL:
                return None
            ext = None
        else:
            # another field: ignored, but its name and text must still be valid UTF-8
            if _str(k, kn) is None or (v.kind == _V_STR and _string(&v) is None):
                return None
        i = _ws(p, i, n)
        if i < n and p[i] == 44:
            i = _ws(p, i + 1, n)
            continue
        if i < n and p[i] == 125:
            i = _ws(p, i + 1, n)
            break
        return None
    if i != n or not has_code:
        return None
    return code, opaque, flag, version, language, remark, {} if ext is None else ext


# -- frames ------------------------------------------------------------------------------------

def split_frames(bytearray buf not None, Py_ssize_t max_frame, Py_ssize_t max_header,
                 Py_ssize_t max_ext_fields, command_class, dict languages, default_language,
                 other_language, decode_other):
    """The whole frames at the front of ``buf`` decoded: ``(commands, consumed, bad)``.

    A JSON header in the common shape (``json_header``) becomes a ``command_class`` here,
    its fields set directly (language: ``languages[text]``, ``other_language`` when unknown,
    ``default_language`` when absent); any other frame goes to ``decode_other(frame bytes)``
    (the strict reader, which raises on a malformed one). ``bad``: the frame at ``consumed``
    has a length or header length outside the limits: the caller raises its error there.
    Nothing is read past the whole frames; ``buf`` is not changed."""
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(buf), pos = 0, length, hlen, blen
    cdef const unsigned char *p
    cdef const unsigned char *f
    cdef list out = []
    cdef int32_t word
    cdef object fast, cmd
    while n - pos >= 4:
        p = <const unsigned char *>PyByteArray_AS_STRING(buf)
        length = _be32(p + pos)
        if length < 4 or length + 4 > max_frame:
            return out, pos, True
        if n - pos >= 8 and (_be32(p + pos + 4) & 0xFFFFFF) > max_header:
            return out, pos, True
        if n - pos - 4 < length:
            break
        f = p + pos + 4
        word = _be32(f)
        hlen = word & 0xFFFFFF
        fast = None
        if (word >> 24) & 0xFF == 0 and hlen <= length - 4 and hlen > 0:
            fast = _json_header(f + 4, hlen)
        if fast is not None and len((<tuple>fast)[6]) <= max_ext_fields:
            code, opaque, flag, version, lang, remark, ext = <tuple>fast
            blen = length - 4 - hlen
            cmd = command_class.__new__(command_class)
            cmd.code = code
            cmd.opaque = opaque
            cmd.flag = flag
            cmd.remark = remark
            cmd.ext_fields = ext
            cmd.body = PyBytes_FromStringAndSize(<const char *>f + 4 + hlen, blen)
            cmd.language = default_language if lang is None else languages.get(lang,
                                                                               other_language)
            cmd.version = version
            cmd.serialize_type = 0
            out.append(cmd)
        else:
            # the strict reader: binary headers, other shapes, errors (a copy: rare)
            out.append(decode_other(PyBytes_FromStringAndSize(<const char *>f, length)))
        pos += 4 + length
    return out, pos, False


# -- send headers ------------------------------------------------------------------------------

cdef bint _long_of(object v, int64_t default, int64_t *out):
    """``v`` as Java's long when it is plain decimal text (``-?[0-9]{1,19}`` in range), or
    empty/None (``default``); False for anything else (the caller's strict reader decides)."""
    cdef Py_ssize_t n, i = 0
    cdef const char *s
    cdef bint neg = False
    cdef uint64_t acc = 0, lim
    if v is None:
        out[0] = default
        return True
    if type(v) is not str:
        return False
    s = PyUnicode_AsUTF8AndSize(v, &n)
    if n == 0:
        out[0] = default
        return True
    if s[0] == 45:      # '-'
        neg = True
        i = 1
    if n - i < 1 or n - i > 19:
        return False
    lim = 9223372036854775808ULL if neg else 9223372036854775807ULL
    while i < n:
        if not 48 <= s[i] <= 57:
            return False
        acc = acc * 10 + <uint64_t>(s[i] - 48)
        if acc > lim:
            return False
        i += 1
    if not neg:
        out[0] = <int64_t>acc
    elif acc == 9223372036854775808ULL:
        out[0] = <int64_t>(-9223372036854775807LL - 1)
    else:
        out[0] = -<int64_t>acc
    return True


def send_header(dict ext not None, keys, tuple required not None,
                int version):
    """A send header's fields read in C (``headers.decode_send_wire``'s rules): ``(group, topic,
    default topic, default queue nums, queue id, sys flag, born timestamp, flag, properties,
    reconsume times, max reconsume times, batch)``; None when a required field is missing or
    a number is not plain decimal text (the strict reader then names the problem). ``keys``:
    the 14 field names in ``_SendKeys`` order."""
    cdef int64_t born, reconsume, flag = 0, sys_flag = 0, queue_id, dtqn, max_rt = 0
    cdef object v, b
    cdef bint batch
    for name in required:
        if ext.get(name) is None:
            return None
    if not _long_of(ext[keys[6]], 0, &born):
        return None
    b = ext.get(keys[12])
    batch = b is not None and b != "" and b.lower() == "true"
    if not _long_of(ext.get(keys[9]), 0, &reconsume):
        return None
    if not batch:
        if not _long_of(ext[keys[7]], 0, &flag) or not _long_of(ext[keys[5]], 0, &sys_flag):
            return None
    if not _long_of(ext[keys[4]], 0, &queue_id) or not _long_of(ext[keys[3]], 4, &dtqn):
        return None
    v = ext.get(keys[11])
    if v is None or v == "" or version < 121:
        max_obj = None
    else:
        if not _long_of(v, 0, &max_rt):
            return None
        max_obj = max_rt
    return (ext[keys[0]], ext[keys[1]], ext[keys[2]], dtqn, queue_id, sys_flag, born, flag,
            ext.get(keys[8]) or "", reconsume, max_obj, batch)


include "_wire_lane_batch.pxi"
include "_wire_lane.pxi"
include "_pull_lane.pxi"
include "_wire_header.pxi"
