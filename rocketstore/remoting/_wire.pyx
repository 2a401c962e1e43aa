# cython: language_level=3
"""The broker's send path over bytes: a client's properties string turned into what a 4.9.8
broker stores, without a map or a dict per message (docs/protocol.md "The send fast path").

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
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, uint32_t
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


@cython.boundscheck(False)
def stored_properties(bytes props not None, bytes cluster not None, object uniq_id):
    """(stored properties bytes, wait) for a client send whose properties string is ``props``
    on a broker of cluster ``cluster``: the string a 4.9.8 broker stores (client map +
    ``UNIQ_KEY`` from ``uniq_id()`` when absent + ``CLUSTER``, ``WAIT`` removed, Java HashMap
    order) and whether a sync flush waits for it (``WAIT`` absent or true). None when the
    string is not of the common shape (see the module doc): the caller takes the map path."""
    cdef const char *p = PyBytes_AS_STRING(props)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(props), i, total, klen, vlen
    cdef const char *end = p + n
    cdef const char *seg
    cdef const char *sep
    cdef _Map m
    cdef bytes uniq_b = None, out
    cdef char *w
    cdef int order[MAX_KEYS + 2]
    cdef int cnt = 0, a, b, wait_i, t
    cdef bint wait = True
    cdef unsigned char c
    for i in range(n):
        c = <unsigned char>p[i]
        if c == 0 or c >= 0x80:
            return None
    m.n = m.size = m.cap = 0
    m.threshold = 16
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
                return None
            if _put(&m, p, klen, sep + 1, seg - sep - 1) < 0:
                return None
        p = seg + 1
    if _find(&m, b"UNIQ_KEY", 8) < 0:
        uniq_b = uniq_id().encode("ascii")
        if _put(&m, b"UNIQ_KEY", 8, PyBytes_AS_STRING(uniq_b), PyBytes_GET_SIZE(uniq_b)) < 0:
            return None
    if _put(&m, b"CLUSTER", 7, PyBytes_AS_STRING(cluster), PyBytes_GET_SIZE(cluster)) < 0:
        return None
    wait_i = _find(&m, b"WAIT", 4)
    if wait_i >= 0:
        # Boolean.parseBoolean of the value, then removed from the stored string
        wait = m.e[wait_i].vlen == 4 and (m.e[wait_i].val[0] | 32) == b't' and \
            (m.e[wait_i].val[1] | 32) == b'r' and (m.e[wait_i].val[2] | 32) == b'u' and \
            (m.e[wait_i].val[3] | 32) == b'e'
        m.e[wait_i].removed = True
        m.size -= 1
    # iteration order: by bucket at the final capacity, insertion order within a bucket
    total = 0
    for a in range(m.n):
        if m.e[a].removed:
            continue
        order[cnt] = a
        cnt += 1
        total += m.e[a].klen + m.e[a].vlen + 2
    for a in range(1, cnt):             # insertion sort: stable, a dozen entries
        t = order[a]
        b = a - 1
        while b >= 0 and (m.e[order[b]].hash & <uint32_t>(m.cap - 1)) > \
                (m.e[t].hash & <uint32_t>(m.cap - 1)):
            order[b + 1] = order[b]
            b -= 1
        order[b + 1] = t
    out = PyBytes_FromStringAndSize(NULL, total - 1 if total else 0)
    w = PyBytes_AS_STRING(out)
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
    return out, wait
