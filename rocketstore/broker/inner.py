"""What a 4.9.8 broker puts: ``MessageExtBrokerInner`` with its property map and string.

RocketMQ stores ``propertiesString``, built by ``MessageDecoder.messageProperties2String`` from
a ``java.util.HashMap``: entries in the map's *iteration order* (bucket by bucket), each as
``name \\x01 value \\x02``, with the last ``\\x02`` dropped (checked against the 4.9.8 source and
the fixture store written by it). Several broker paths serialize the map and change it
afterwards (MESSAGING.md 0.4), so the bytes on disk are the map at serialization time.
``PropertiesMap`` reproduces the HashMap's order; ``MessageInner`` carries the map, the frozen
string and the record fields, and becomes a store ``Message`` with exactly that string.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rocketstore.store._codec import java_hash
from rocketstore.store.types import Message

if TYPE_CHECKING:
    from rocketstore.store.types import MessageExt

_NAME_VALUE_SEPARATOR = "\x01"
_PROPERTY_SEPARATOR = "\x02"
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def _spread(key: str) -> int:
    h = java_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)            # HashMap.hash(): h ^ (h >>> 16)


class PropertiesMap:
    """A ``java.util.HashMap<String, String>`` with Java's iteration order.

    Buckets are ``hash & (capacity - 1)`` with ``hash = h ^ (h >>> 16)`` of Java's
    ``String.hashCode``; a bucket keeps its nodes in insertion order (a replaced value keeps
    its place, a removed and re-added key goes last); the table starts at 16 and doubles when
    the size passes 0.75 of it (or when a bucket reaches 8 nodes below 64 buckets), which
    keeps each bucket's relative order. Bins big enough to become trees (9+ colliding keys in
    64+ buckets) are not modelled: no broker path builds one.
    """

    __slots__ = ("_table", "_values", "_threshold")

    def __init__(self, initial_capacity: int = 16) -> None:
        cap = 1
        while cap < initial_capacity:
            cap <<= 1
        self._table: list[list[str]] | None = None
        self._threshold = cap           # the capacity the first put allocates (Java's trick)
        self._values: dict[str, str] = {}

    @classmethod
    def from_string(cls, properties: str | None) -> PropertiesMap:
        """``MessageDecoder.string2messageProperties``: a new HashMap, filled in string order;
        a segment needs a non-empty name and value."""
        m = cls()
        if properties:
            for seg in properties.split(_PROPERTY_SEPARATOR):
                i = seg.find(_NAME_VALUE_SEPARATOR)
                if len(seg) >= 3 and 0 < i < len(seg) - 1:
                    m.put(seg[:i], seg[i + 1:])
        return m

    @classmethod
    def from_dict(cls, props: dict[str, str]) -> PropertiesMap:
        """A HashMap filled with ``props`` in the dict's order."""
        m = cls()
        for k, v in props.items():
            m.put(k, v)
        return m

    def copy(self) -> PropertiesMap:
        """``new HashMap<>(this)``: sized for the entries, filled in this map's order."""
        if not self._values:
            return PropertiesMap()
        m = PropertiesMap(int(len(self) / 0.75 + 1.0))
        for k in self:
            m.put(k, self._values[k])
        return m

    # -- the Map operations the broker uses -------------------------------------------------

    def _index(self, key: str, capacity: int) -> int:
        return _spread(key) & (capacity - 1)

    def _resize(self) -> None:
        old = self._table
        cap = self._threshold if old is None else len(old) * 2
        table: list[list[str]] = [[] for _ in range(cap)]
        if old is not None:
            for bucket in old:
                for k in bucket:
                    table[self._index(k, cap)].append(k)
        self._table = table
        self._threshold = int(cap * 0.75)

    def put(self, key: str, value: str) -> str | None:
        """``HashMap.put``: returns the previous value."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("property names and values are str")
        prev = self._values.get(key)
        if prev is not None:
            self._values[key] = value
            return prev
        if self._table is None:
            self._resize()
        table = self._table
        assert table is not None
        bucket = table[self._index(key, len(table))]
        bucket.append(key)
        self._values[key] = value
        if len(bucket) > _TREEIFY_THRESHOLD and len(table) < _MIN_TREEIFY_CAPACITY:
            self._resize()          # treeifyBin on a small table resizes instead
        if len(self._values) > self._threshold:
            self._resize()
        return None

    def remove(self, key: str) -> str | None:
        """``HashMap.remove``: returns the removed value."""
        prev = self._values.pop(key, None)
        if prev is not None and self._table is not None:
            self._table[self._index(key, len(self._table))].remove(key)
        return prev

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[str]:
        if self._table is not None:
            for bucket in self._table:
                yield from bucket

    def to_dict(self) -> dict[str, str]:
        """The entries in iteration order."""
        return {k: self._values[k] for k in self}

    def to_string(self) -> str:
        """``MessageDecoder.messageProperties2String`` (4.9.8): iteration order, no trailing
        separator."""
        return _PROPERTY_SEPARATOR.join(k + _NAME_VALUE_SEPARATOR + self._values[k] for k in self)

    def __repr__(self) -> str:
        return f"PropertiesMap({self.to_dict()!r})"


class MessageInner:
    """RocketMQ's ``MessageExtBrokerInner``: a record about to be stored by the broker.

    ``properties`` is the live map; ``properties_string`` what will be stored (None: serialize
    the map at put time; ``freeze()`` serializes it now, before later map changes, as 4.9.8's
    serialize-then-mutate paths do).
    """

    __slots__ = ("topic", "queue_id", "body", "properties", "properties_string", "flag",
                 "sys_flag", "born_timestamp", "born_host", "reconsume_times",
                 "prepared_transaction_offset")

    def __init__(self, topic: str, queue_id: int, body: bytes | memoryview,
                 properties: PropertiesMap | None = None, *,
                 properties_string: str | None = None, flag: int = 0, sys_flag: int = 0,
                 born_timestamp: int | None = None, born_host: str | None = None,
                 reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.properties = properties if properties is not None else PropertiesMap()
        self.properties_string = properties_string
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset

    @classmethod
    def from_ext(cls, ext: MessageExt) -> MessageInner:
        """Every field of a stored record, the body as stored (compressed stays compressed),
        the map built from its stored properties string (``string2messageProperties``)."""
        return cls(ext.topic, ext.queue_id, bytes(ext.stored_body),
                   PropertiesMap.from_dict(ext.properties), flag=ext.flag,
                   sys_flag=ext.sys_flag & ~0x30,   # host bits: the store sets them
                   born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                   reconsume_times=ext.reconsume_times,
                   prepared_transaction_offset=ext.prepared_transaction_offset)

    def freeze(self) -> None:
        """``setPropertiesString(messageProperties2String(properties))`` now."""
        self.properties_string = self.properties.to_string()

    def delay_time_level(self) -> int:
        """``Message.getDelayTimeLevel``: the map's DELAY as an int, 0 when absent."""
        v = self.properties.get("DELAY")
        return int(v) if v is not None else 0

    def wait_store_msg_ok(self) -> bool:
        """``Message.isWaitStoreMsgOK``: WAIT absent or ``Boolean.parseBoolean`` true."""
        v = self.properties.get("WAIT")
        return v is None or v.lower() == "true"

    def to_message(self, wait: bool | None = None) -> Message:
        """The store ``Message`` with exactly the properties string to be stored; ``wait``
        (default: the map's ``WAIT``) says whether a SYNC_FLUSH put waits for its sync."""
        props = self.properties_string
        if props is None:
            props = self.properties.to_string()
        if wait is None:
            wait = self.wait_store_msg_ok()
        return Message.from_properties_string(
            self.topic, self.body, props, wait=wait, flag=self.flag,
            sys_flag=self.sys_flag, reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            born_timestamp=self.born_timestamp, born_host=self.born_host)

    def __repr__(self) -> str:
        return (f"MessageInner(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"properties={self.properties!r})")


@functools.lru_cache(maxsize=4096)
def _java_order(keys: tuple[str, ...], puts: tuple[str, ...],
                removes: tuple[str, ...]) -> tuple[str, ...]:
    # the order depends on the key operations only, never on the values: memoized per shape
    m = PropertiesMap()
    for k in keys:
        m.put(k, "")
    for k in puts:
        m.put(k, "")
    for k in removes:
        m.remove(k)
    return tuple(m)


def java_properties(props: dict[str, str], puts: tuple[tuple[str, str], ...] = (),
                    removes: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """(string, entries) of a HashMap filled from ``props`` in order, then ``puts``, then
    ``removes`` removed: what ``PropertiesMap`` gives, memoized by the keys' shape (the hot
    send path's map)."""
    order = _java_order(tuple(props), tuple(k for k, _ in puts), removes)
    values = dict(props)
    for k, v in puts:
        values[k] = v
    out = {k: values[k] for k in order}
    return "\x02".join([k + "\x01" + v for k, v in out.items()]), out
