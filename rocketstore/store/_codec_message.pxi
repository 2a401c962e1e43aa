# Included by _codec.pyx (one extension module: every call below stays a C call).
# Message: what a producer builds, validated and encoded once at construction.

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


def batch_body(list msgs):
    """The SEND_BATCH_MESSAGE body of ``msgs`` (``MessageDecoder.encodeMessages``: per entry
    total size, magic 0, body CRC 0, flag, body length, body, properties length, properties in
    the order of ``Message.properties``), in one buffer and one pass; None when an entry is not
    of the in-process batch's common shape (a ``Message`` with no sys flag, born time or born
    host of its own): the caller takes the map path."""
    cdef Py_ssize_t total = 0, pos = 0, blen, plen, i
    cdef Message m
    cdef list props = []
    cdef bytes pb, out
    cdef char *w
    for obj in msgs:
        if type(obj) is not Message:
            return None
        m = <Message>obj
        if m.sys_flag or m.born_timestamp is not None or m.born_host is not None:
            return None
        pb = m._props_b if m._user_len >= 0 else _encode_properties(m.properties)
        plen = PyBytes_GET_SIZE(pb)
        if plen > 32767:
            return None
        props.append(pb)
        total += 22 + m._body_len + plen
    out = PyBytes_FromStringAndSize(NULL, total)
    w = PyBytes_AS_STRING(out)
    for i in range(len(msgs)):
        m = <Message>msgs[i]
        pb = <bytes>props[i]
        blen = m._body_len
        plen = PyBytes_GET_SIZE(pb)
        put_u32(w + pos, <uint32_t>(22 + blen + plen))
        put_u32(w + pos + 4, 0)
        put_u32(w + pos + 8, 0)
        put_u32(w + pos + 12, <uint32_t>m.flag)
        put_u32(w + pos + 16, <uint32_t>blen)
        memcpy(w + pos + 20, PyBytes_AS_STRING(m._body), <size_t>blen)
        pos += 20 + blen
        put_u16(w + pos, <uint16_t>plen)
        memcpy(w + pos + 2, PyBytes_AS_STRING(pb), <size_t>plen)
        pos += 2 + plen
    return out


def batch_plain(list msgs, Py_ssize_t max_size):
    """The topic of ``msgs`` when every entry passes a producer's batch checks on its face
    (a ``Message``, the first one's topic, a body of 1 .. ``max_size`` bytes, no DELAY
    property or level, the first one's WAIT), else None: the caller's own checks then name
    what is wrong. The topic name itself is not checked here."""
    cdef Message m, first
    if not msgs or type(msgs[0]) is not Message:
        return None
    first = <Message>msgs[0]
    for obj in msgs:
        if type(obj) is not Message:
            return None
        m = <Message>obj
        if (m._body_len == 0 or m._body_len > max_size or m._delayed
                or m._no_wait != first._no_wait
                or (m.topic is not first.topic and m.topic != first.topic)):
            return None
    return first.topic


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
        self._user_len = plen
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
        m._user_len = -1            # not in the order of ``properties``
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

    def send_properties(self):
        """``encode_properties(self.properties)`` (the properties string a producer sends),
        without building the dict: the encoded form kept in that order, when it is."""
        if self._user_len >= 0:
            return self._props_b
        return _encode_properties(self.properties)

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
