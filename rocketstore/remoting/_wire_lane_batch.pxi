# The in-process batch lane's per-message work (``LaneCore._batch``,
# ``FastSendCore.send_batch``), in C.
#
# ``Producer.send_batch`` used to stamp a ``Message`` copy per entry, encode the batch as a
# SEND_BATCH_MESSAGE body, and have the broker parse that body again (``wire_batch``). Here
# the broker's records are made straight from the producer's own messages: each entry's
# properties string is read in place with the ids the producer made for it, rewritten as
# ``wire_batch`` rewrites it, and written into one buffer ``CommitLog.put_wire_batch_async``
# takes. The stored bytes are the same: the stamp inserts ``UNIQ_KEY`` and ``WAIT`` where
# ``stamped_message`` does (after the user properties), which is all the map order sees.

from cpython.unicode cimport PyUnicode_DecodeASCII
from rocketstore.store._codec cimport Message, stamped_with
from rocketstore.store._codec import PROPERTY_UNIQ_KEY


cdef enum:
    _MAX_PROPS = 32767              # a batch entry's properties length is a Java short
    _STAMP_LEN = 52                 # "UNIQ_KEY\x01" + 32 hex + "\x02" + "WAIT\x01true\x02"


cdef inline bint _needs_uniq(Message m) noexcept:
    # stamped_message's test (the map path's: a user's own UNIQ_KEY is kept)
    return not (m._user and PROPERTY_UNIQ_KEY in m._user)


cdef object _batch_records(tuple msgs, bytes cluster, object uniq_id, const char *ids,
                           Py_ssize_t *body_bytes):
    """``(body, meta, props)`` for ``CommitLog.put_wire_batch_async`` from ``msgs``, the
    records ``wire_batch`` makes of the same messages stamped and encoded as a batch body
    (each entry's map in Java order, then the batch's WAIT -- its first entry's -- and
    CLUSTER). ``ids``: 32 hex chars per entry, the UNIQ_KEY of an entry that has none, with
    ``WAIT=true`` added where absent (``stamped_message``'s stamp); NULL: the messages are
    stamped already (``uniq_id()`` gives an entry without UNIQ_KEY one, as ``wire_batch``).
    ``body_bytes``: the bodies' total. None when an entry is not of the byte path's shape
    (the caller takes the map path, which decides). A tuple: no other thread changes it
    between the passes."""
    cdef Py_ssize_t n = len(msgs), i, plen, cut, bsum = 0, psum = 0, bpos = 0, ppos = 0
    cdef Py_ssize_t size, tail_len = 0, elen
    cdef Message m
    cdef _Map mp, bm
    cdef bytes body, meta, props, tail = None, uniq_b
    cdef const char *src
    cdef char *bw
    cdef char *pw
    cdef int32_t *rec
    cdef bint need_uniq, need_wait
    for i in range(n):                  # the shape and the sizes first: nothing built yet
        obj = msgs[i]
        if type(obj) is not Message:
            return None
        m = <Message>obj
        # batch_body's shape: no sys flag, born time or host of its own, the encoded form
        if (m.sys_flag or m.born_timestamp is not None or m.born_host is not None
                or m._user_len < 0 or type(m._body) is not bytes):
            return None
        bsum += m._body_len
        psum += PyBytes_GET_SIZE(m._props_b)
    # per entry at most its string + the stamp + a broker UNIQ_KEY + "\x02" + the batch's
    # "WAIT\x01false\x02CLUSTER\x01<cluster>"
    props = PyBytes_FromStringAndSize(NULL, psum + n * (_STAMP_LEN + 42 + 21 +
                                                        PyBytes_GET_SIZE(cluster)))
    body = PyBytes_FromStringAndSize(NULL, bsum)
    meta = PyBytes_FromStringAndSize(NULL, 20 * n)
    pw = PyBytes_AS_STRING(props)
    bw = PyBytes_AS_STRING(body)
    rec = <int32_t *>PyBytes_AS_STRING(meta)
    for i in range(n):
        m = <Message>msgs[i]
        src = PyBytes_AS_STRING(m._props_b)
        plen = PyBytes_GET_SIZE(m._props_b)
        if not _plain(src, plen):
            return None
        _init(&mp)
        if ids != NULL:
            need_uniq = _needs_uniq(m)
            need_wait = not (m._user and "WAIT" in m._user)
            elen = (42 if need_uniq else 0) + (10 if need_wait else 0)
            if plen + elen > _MAX_PROPS:
                return None             # stamp_for_send refuses it
            cut = m._user_len
            if _parse_into(&mp, src, cut) < 0:
                return None
            if need_uniq and _put(&mp, b"UNIQ_KEY", 8, ids + 32 * i, 32) < 0:
                return None
            if need_wait and _put(&mp, b"WAIT", 4, b"true", 4) < 0:
                return None
            if _parse_into(&mp, src + cut, plen - cut) < 0:
                return None
        else:
            if plen > _MAX_PROPS or _parse_into(&mp, src, plen) < 0:
                return None
        uniq_b = None
        if _find(&mp, b"UNIQ_KEY", 8) < 0:
            uniq_b = uniq_id().encode("ascii")      # kept alive until written below
            if _put(&mp, b"UNIQ_KEY", 8, PyBytes_AS_STRING(uniq_b),
                    PyBytes_GET_SIZE(uniq_b)) < 0:
                return None
        if tail is None:
            # MessageBatch: the batch carries WAIT of its first message; the broker adds CLUSTER
            _init(&bm)
            if _take_wait_value(&mp):
                _put(&bm, b"WAIT", 4, b"true", 4)
            else:
                _put(&bm, b"WAIT", 4, b"false", 5)
            _put(&bm, b"CLUSTER", 7, PyBytes_AS_STRING(cluster), PyBytes_GET_SIZE(cluster))
            tail = _serialize(&bm, NULL, 0)
            tail_len = PyBytes_GET_SIZE(tail)
        size = _map_size(&mp) + 1 + tail_len
        if size > _MAX_PROPS:
            return None                 # the map path refuses it
        _write_map(&mp, pw + ppos, PyBytes_AS_STRING(tail), tail_len)
        memcpy(bw + bpos, PyBytes_AS_STRING(m._body), <size_t>m._body_len)
        rec[5 * i] = <int32_t>bpos
        rec[5 * i + 1] = <int32_t>m._body_len
        rec[5 * i + 2] = m.flag
        rec[5 * i + 3] = <int32_t>ppos
        rec[5 * i + 4] = <int32_t>size
        bpos += m._body_len
        ppos += size
    body_bytes[0] = bsum
    return body, meta, props


def message_batch(list msgs not None, bytes cluster not None, object uniq_id):
    """``(body, meta, props, count, body bytes)`` for ``CommitLog.put_wire_batch_async`` of
    a batch of stamped ``Message``s (``SendMessageProcessor._batch_as_wire``): the records
    ``wire_batch`` makes of their SEND_BATCH_MESSAGE body, without encoding one. None when an
    entry is not of the byte path's shape."""
    cdef Py_ssize_t body_bytes = 0
    if not msgs:
        return None
    built = _batch_records(tuple(msgs), cluster, uniq_id, NULL, &body_bytes)
    if built is None:
        return None
    return (*built, len(msgs), body_bytes)


cdef str _joined_ids(tuple msgs, const char *ids):
    """The batch's UNIQ_KEYs joined by ',' (a send result's ``msg_id``): the ids made for
    the entries that had none, the others' own."""
    cdef Py_ssize_t n = len(msgs), i
    cdef Message m
    cdef list keys
    cdef bytes out
    cdef char *w
    for i in range(n):
        if not _needs_uniq(<Message>msgs[i]):
            break
    else:                               # the common case: every id made here, one string
        out = PyBytes_FromStringAndSize(NULL, 33 * n - 1)
        w = PyBytes_AS_STRING(out)
        for i in range(n):
            if i:
                w[33 * i - 1] = b','
            memcpy(w + 33 * i, ids + 32 * i, 32)
        return PyUnicode_DecodeASCII(w, 33 * n - 1, NULL)
    keys = []
    for i in range(n):
        m = <Message>msgs[i]
        keys.append(PyUnicode_DecodeASCII(ids + 32 * i, 32, NULL) if _needs_uniq(m)
                    else m._user[PROPERTY_UNIQ_KEY])
    return ",".join(keys)


def restamp(tuple msgs not None, bytes ids not None):
    """``msgs`` as ``stamp_for_send`` stamps them, with the ids ``ids`` holds (32 hex chars
    per entry: what ``FastSendCore.send_batch`` made): the batch a refused lane send retries
    with keeps its message ids."""
    cdef Py_ssize_t i, n = len(msgs)
    cdef const char *p = PyBytes_AS_STRING(ids)
    cdef Message m
    if PyBytes_GET_SIZE(ids) != 32 * n:
        raise ValueError(f"ids: {PyBytes_GET_SIZE(ids)} bytes for {n} messages")
    cdef list out = []
    for i in range(n):
        m = <Message?>msgs[i]
        out.append(stamped_with(m, p + 32 * i if _needs_uniq(m) else NULL))
    return out
