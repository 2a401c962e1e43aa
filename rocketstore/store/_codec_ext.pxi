# Included by _codec.pyx (one extension module: every call below stays a C call).
# MessageExt: a decoded record whose body is a zero-copy view of the record.

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


def drop_consumed(dict tree not None, msgs):
    """Remove each of ``msgs`` (``MessageExt``) from ``tree`` (queue offset -> message):
    ``(removed, their body bytes)``; offsets not there are skipped (a process queue's
    finished messages, one pass)."""
    cdef MessageExt m
    cdef Py_ssize_t removed = 0
    cdef int64_t size = 0
    for obj in msgs:
        m = <MessageExt?>obj
        if tree.pop(m.queue_offset, None) is not None:
            removed += 1
            size += m._body_len
    return removed, size
