# A remoting command's JSON header written in C (``RemotingCommand.header_json``): every request
# a client makes and every response built as a command is encoded here, not as a dict handed to
# the json module. The output is byte for byte ``json.dumps`` with separators (",", ":") and
# ensure_ascii=False of the header dict in its key order.

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdio cimport snprintf


cdef struct _Out:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _reserve(_Out *o, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = o.cap
    cdef char *q
    if o.n + more <= cap:
        return 0
    while cap < o.n + more:
        cap = cap * 2 if cap else 256
    q = <char *>PyMem_Realloc(o.p, <size_t>cap)
    if q == NULL:
        raise MemoryError()
    o.p = q
    o.cap = cap
    return 0


cdef int _raw(_Out *o, const char *s, Py_ssize_t n) except -1:
    _reserve(o, n)
    memcpy(o.p + o.n, s, <size_t>n)
    o.n += n
    return 0


cdef int _int(_Out *o, long long v) except -1:
    cdef char buf[32]
    cdef int k = snprintf(buf, 32, "%lld", v)
    return _raw(o, buf, k)


cdef const char *_HEX_LOWER = b"0123456789abcdef"


cdef int _jstr(_Out *o, str s) except -1:
    """``s`` as a JSON string (json's escapes with ensure_ascii=False)."""
    cdef Py_ssize_t n, i
    cdef const char *u = PyUnicode_AsUTF8AndSize(s, &n)
    cdef unsigned char c
    _reserve(o, n + 2)
    o.p[o.n] = b'"'
    o.n += 1
    for i in range(n):
        c = <unsigned char>u[i]
        if c >= 0x20 and c != b'"' and c != b'\\':
            if o.n + 1 > o.cap:
                _reserve(o, n - i + 1)
            o.p[o.n] = <char>c
            o.n += 1
            continue
        _reserve(o, 6 + n - i)
        o.p[o.n] = b'\\'
        if c == b'"' or c == b'\\':
            o.p[o.n + 1] = <char>c
            o.n += 2
        elif c == b'\n':
            o.p[o.n + 1] = b'n'
            o.n += 2
        elif c == b'\r':
            o.p[o.n + 1] = b'r'
            o.n += 2
        elif c == b'\t':
            o.p[o.n + 1] = b't'
            o.n += 2
        elif c == 8:
            o.p[o.n + 1] = b'b'
            o.n += 2
        elif c == 12:
            o.p[o.n + 1] = b'f'
            o.n += 2
        else:
            memcpy(o.p + o.n + 1, b"u00", 3)
            o.p[o.n + 4] = _HEX_LOWER[c >> 4]
            o.p[o.n + 5] = _HEX_LOWER[c & 15]
            o.n += 6
    return _raw(o, b'"', 1)


def encode_header(long long code, dict ext, long long flag, str language, long long opaque,
                  long long version, object remark):
    """The JSON header of a command whose ``ext`` keys and values are all str (None when one
    is not: the caller's json encoder writes it)."""
    cdef _Out o
    cdef bint first = True
    for k, v in ext.items():
        if type(k) is not str or type(v) is not str:
            return None
    if remark is not None and type(remark) is not str:
        return None
    o.p = NULL
    o.n = o.cap = 0
    try:
        _raw(&o, b'{"code":', 8)
        _int(&o, code)
        _raw(&o, b',"extFields":{', 14)
        for k, v in ext.items():
            if not first:
                _raw(&o, b',', 1)
            first = False
            _jstr(&o, <str>k)
            _raw(&o, b':', 1)
            _jstr(&o, <str>v)
        _raw(&o, b'},"flag":', 9)
        _int(&o, flag)
        _raw(&o, b',"language":', 12)
        _jstr(&o, language)
        _raw(&o, b',"opaque":', 10)
        _int(&o, opaque)
        _raw(&o, b',"serializeTypeCurrentRPC":"JSON","version":', 44)
        _int(&o, version)
        if remark is not None:
            _raw(&o, b',"remark":', 10)
            _jstr(&o, <str>remark)
        _raw(&o, b'}', 1)
        return PyBytes_FromStringAndSize(o.p, o.n)
    finally:
        PyMem_Free(o.p)


cdef inline Py_ssize_t _put_lit(char *p, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(p, PyBytes_AS_STRING(b), <size_t>n)
    return n


cdef inline Py_ssize_t _put_int(char *p, long long v) noexcept:
    """``v`` in decimal at ``p`` (at most 20 bytes); the bytes written."""
    cdef char tmp[24]
    cdef int k = 0, j
    cdef unsigned long long u = <unsigned long long>v
    if v < 0:
        u = <unsigned long long>0 - u
    while True:
        tmp[k] = <char>(48 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    j = 0
    if v < 0:
        p[0] = b'-'
        j = 1
    while k:
        k -= 1
        p[j] = tmp[k]
        j += 1
    return j


def send_ok_header(long long code, str msg_id not None, long long queue_id,
                   long long queue_offset, long long opaque, bytes region not None,
                   long long version):
    """A stored send's answer header (``headers.encode_send_response``'s text: its keys,
    order and values, ``msgId`` as given), without formatting a Python string per send."""
    cdef Py_ssize_t n, cap
    cdef const char *u = PyUnicode_AsUTF8AndSize(msg_id, &n)
    cdef char *p
    cdef char *q
    # the literals below are 210 bytes; five numbers of at most 20 characters each
    cap = 210 + 100 + n + PyBytes_GET_SIZE(region)
    out = PyBytes_FromStringAndSize(NULL, cap)
    p = q = PyBytes_AS_STRING(out)
    q += _put_lit(q, b'{"code":')
    q += _put_int(q, code)
    q += _put_lit(q, b',"extFields":{"MSG_REGION":"')
    q += _put_lit(q, region)
    q += _put_lit(q, b'","TRACE_ON":"true","msgId":"')
    memcpy(q, u, <size_t>n)
    q += n
    q += _put_lit(q, b'","queueId":"')
    q += _put_int(q, queue_id)
    q += _put_lit(q, b'","queueOffset":"')
    q += _put_int(q, queue_offset)
    q += _put_lit(q, b'"},"flag":1,"language":"JAVA","opaque":')
    q += _put_int(q, opaque)
    q += _put_lit(q, b',"serializeTypeCurrentRPC":"JSON","version":')
    q += _put_int(q, version)
    q[0] = b'}'
    q += 1
    return out[:q - p]
