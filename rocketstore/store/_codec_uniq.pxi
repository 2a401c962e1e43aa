# Included by _codec.pyx (one extension module: every call below stays a C call).
# UNIQ_KEY: the client message-id generator, and a producer's send-time stamp.

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
    as 32 uppercase hex chars. ``next_into`` holds the GIL and runs no Python code (but at a
    month's turn, where threads racing there compute the same month), so Python threads get
    distinct ids without a lock; code that releases the GIL around it needs one.
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
        c = stamped_message(<Message>obj, gen, now)
        out.append(c)
        keys.append(c._user[PROPERTY_UNIQ_KEY])
    return out, keys


def stamp_one(Message m not None, UniqIdGenerator gen not None):
    """``stamp_for_send`` of one message: ``(message as sent, its UNIQ_KEY)`` (the sync
    send's path: no lists)."""
    cdef Message c = stamped_message(m, gen, now_ms())
    return c, c._user[PROPERTY_UNIQ_KEY]


cdef Message stamped_message(Message m, UniqIdGenerator gen, int64_t now):
    """``m`` with UNIQ_KEY and WAIT=true added where absent (``m`` itself when it has both)."""
    cdef char uniq[32]
    if m._user and PROPERTY_UNIQ_KEY in m._user:
        return stamped_with(m, NULL)
    gen.next_into(uniq, now)
    return stamped_with(m, uniq)


cdef Message stamped_with(Message m, const char *uniq):
    """``stamped_message`` with the UNIQ_KEY taken from ``uniq`` (32 hex chars) when ``m``
    has none (``uniq`` is then not NULL): the in-process batch lane makes the ids before it
    knows whether a copy is needed at all."""
    # every sync send pays this: the two properties are written into one new properties
    # string, with no intermediate bytes objects
    cdef char extra[52]             # "UNIQ_KEY\x01" + 32 hex + "\x02" + "WAIT\x01true\x02"
    cdef Py_ssize_t elen = 0, plen, cut
    cdef bint need_uniq = not (m._user and PROPERTY_UNIQ_KEY in m._user)
    cdef bint need_wait = not (m._user and "WAIT" in m._user)
    cdef dict user
    cdef bytes props
    cdef char *w
    cdef const char *src
    cdef Message c
    if not need_uniq and not need_wait:
        return m
    user = dict(m._user) if m._user else {}
    if need_uniq:
        memcpy(extra, b"UNIQ_KEY\x01", 9)
        memcpy(extra + 9, uniq, 32)
        extra[41] = 2
        elen = 42
        user[PROPERTY_UNIQ_KEY] = PyUnicode_DecodeASCII(extra + 9, 32, NULL)
    if need_wait:
        memcpy(extra + elen, b"WAIT\x01true\x02", 10)
        elen += 10
        user["WAIT"] = "true"
    # inserted after the user properties, where ``properties`` has them, so that
    # ``send_properties`` stays the encoded form (appended to a verbatim string)
    src = PyBytes_AS_STRING(m._props_b)
    plen = PyBytes_GET_SIZE(m._props_b)
    cut = m._user_len if m._user_len >= 0 else plen
    if plen + elen > RS_MAX_PROPERTIES_LEN:
        raise InvalidMessageError("properties", f"{plen + elen} bytes encoded",
                                  f"exceed {RS_MAX_PROPERTIES_LEN} bytes",
                                  limit=RS_MAX_PROPERTIES_LEN,
                                  status="PROPERTIES_SIZE_EXCEEDED")
    props = PyBytes_FromStringAndSize(NULL, plen + elen)
    w = PyBytes_AS_STRING(props)
    memcpy(w, src, <size_t>cut)
    memcpy(w + cut, extra, <size_t>elen)
    memcpy(w + cut + elen, src + cut, <size_t>(plen - cut))
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
    c._props_b = props
    c._user_len = m._user_len + elen if m._user_len >= 0 else -1
    c._born_host_b = m._born_host_b
    c._has_uniq = True
    c._delayed = m._delayed
    c._delay = m._delay
    c._no_wait = m._no_wait
    c._crc_cached = m._crc_cached
    c._crc = m._crc
    c._body_len = m._body_len
    return c
