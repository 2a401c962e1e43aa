"""Where a consumer keeps its consume offsets (MESSAGING.md §7, §8).

``RemoteBrokerOffsetStore`` (clustering): a local table, increase-only for normal progress,
sent to the broker every 5 s, on queue removal and at shutdown. ``LocalFileOffsetStore``
(broadcasting): the same table in ``<dir>/<clientId>/<group>/offsets.json`` in RocketMQ's
fastjson form, whose keys are JSON *objects* (not valid JSON, hence the small reader below).
"""
from __future__ import annotations

import enum
import json
import os
import threading
from pathlib import Path
from typing import Iterable

from rocketstore.client.transport import Transport
from rocketstore.common import MessageQueue, ResponseCode
from rocketstore.errors import MQClientError, TransportError


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = 0
    READ_FROM_STORE = 1
    MEMORY_FIRST_THEN_STORE = 2


class OffsetStore:
    """The table both stores share: mq -> next offset to consume."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._table: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        pass

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        with self._lock:
            old = self._table.get(mq)
            if old is None or not increase_only or offset > old:
                self._table[mq] = offset

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        """The offset, -1 when unknown, -2 when the store could not be asked (skip the queue)."""
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            with self._lock:
                off = self._table.get(mq)
            if off is not None:
                return off
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        off = self._read_from_store(mq)
        if off >= 0:
            self.update_offset(mq, off, False)
        return off

    def _read_from_store(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    def read_committed(self, mq: MessageQueue) -> int:
        """What the store holds for ``mq`` (-1 none, -2 unreachable), leaving the table alone."""
        return self._read_from_store(mq)

    def remove_offset(self, mq: MessageQueue) -> None:
        with self._lock:
            self._table.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        with self._lock:
            return {mq: o for mq, o in self._table.items() if topic is None or mq.topic == topic}

    def persist(self, mq: MessageQueue) -> None:
        pass

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        pass


class RemoteBrokerOffsetStore(OffsetStore):
    """Clustering: offsets live on the broker (``consumerOffset.json``)."""

    def __init__(self, transport: Transport, group: str) -> None:
        super().__init__(group)
        self.transport = transport

    def _read_from_store(self, mq: MessageQueue) -> int:
        try:
            r = self.transport.query_consumer_offset(mq.broker_name, self.group, mq.topic,
                                                     mq.queue_id)
        except TransportError:
            return -2
        if r.code == ResponseCode.SUCCESS:
            return int(r.value)
        if r.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return -2

    def persist(self, mq: MessageQueue) -> None:
        with self._lock:
            off = self._table.get(mq)
        if off is not None:
            try:
                self.transport.update_consumer_offset(mq.broker_name, self.group, mq.topic,
                                                      mq.queue_id, off)
            except TransportError:
                # the queue's broker is down (a rebalance dropping its queues, say): the
                # broker keeps its last committed offset, so at worst some messages come
                # again; failing here would abort the whole rebalance
                pass

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Send the offsets of the owned queues; forget those of queues no longer owned."""
        owned = set(mqs)
        with self._lock:
            table = dict(self._table)
            for mq in [mq for mq in self._table if mq not in owned]:
                del self._table[mq]
        for mq, off in table.items():
            if mq in owned:
                try:
                    self.transport.update_consumer_offset(mq.broker_name, self.group, mq.topic,
                                                          mq.queue_id, off)
                except TransportError:
                    pass        # next round (every 5 s) tries again


# -- the local file -----------------------------------------------------------------------------

def encode_offset_table(table: dict[MessageQueue, int]) -> str:
    """fastjson's pretty form of ``{"offsetTable": {<mq object>: offset}}`` (keys alphabetical)."""
    items = []
    for mq in sorted(table):
        key = ("{\n\t\t\t\"brokerName\":" + json.dumps(mq.broker_name) + ",\n\t\t\t\"queueId\":"
               + str(mq.queue_id) + ",\n\t\t\t\"topic\":" + json.dumps(mq.topic) + "\n\t\t}")
        items.append(f"{key}:{int(table[mq])}")
    return "{\n\t\"offsetTable\":{" + ",".join(items) + "\n\t}\n}"


def decode_offset_table(text: str) -> dict[MessageQueue, int]:
    """Read ``{"offsetTable": {{...}: n, ...}}`` (object-valued keys); ``ValueError`` when not."""
    dec = json.JSONDecoder()
    start = text.find('"offsetTable"')
    if start < 0:
        if text.strip() in ("", "{}"):
            return {}
        raise ValueError("no offsetTable")
    i = text.index(":", start) + 1
    n = len(text)

    def ws(k: int) -> int:
        while k < n and text[k] in " \t\r\n":
            k += 1
        return k

    i = ws(i)
    if text[i] != "{":
        raise ValueError(f"offsetTable is not an object at {i}")
    i = ws(i + 1)
    out: dict[MessageQueue, int] = {}
    while i < n and text[i] != "}":
        key, i = dec.raw_decode(text, i)
        if isinstance(key, str):          # a string key ("T@b@0"-like) is not RocketMQ's form
            raise ValueError(f"offsetTable key {key!r} is not a MessageQueue object")
        i = ws(i)
        if text[i] != ":":
            raise ValueError(f"':' expected at {i}")
        value, i = dec.raw_decode(text, ws(i + 1))
        out[MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))] = \
            int(value)
        i = ws(i)
        if i < n and text[i] == ",":
            i = ws(i + 1)
    return out


def _write_durable(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def string_to_file(text: str, path: Path) -> None:
    """RocketMQ 4.9's ``MixAll.string2File``: write ``.tmp``, copy the old content to ``.bak``,
    rename ``.tmp`` over the file (synced, then the directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    _write_durable(tmp, text)
    if path.exists():
        _write_durable(path.with_name(path.name + ".bak"), path.read_text(encoding="utf-8"))
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def default_offset_store_dir() -> Path:
    """``rocketmq.client.localOffsetStoreDir``: ``$ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR`` or
    ``~/.rocketmq_offsets``."""
    env = os.environ.get("ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR")
    return Path(env) if env else Path.home() / ".rocketmq_offsets"


class LocalFileOffsetStore(OffsetStore):
    """Broadcasting: offsets in a file of this client; nothing is committed to the broker."""

    def __init__(self, client_id: str, group: str, store_dir: str | os.PathLike | None = None) -> None:
        super().__init__(group)
        base = Path(store_dir) if store_dir is not None else default_offset_store_dir()
        self.path = base / client_id / group / "offsets.json"

    def _read_file(self) -> dict[MessageQueue, int]:
        bak = self.path.with_name(self.path.name + ".bak")
        try:
            text = self.path.read_text(encoding="utf-8")
            if text.strip():
                return decode_offset_table(text)
        except FileNotFoundError:
            pass
        except ValueError:
            pass          # unparsable: fall back to the .bak, as RocketMQ does
        try:
            text = bak.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            return decode_offset_table(text)
        except ValueError as e:
            raise MQClientError(f"{bak}: local offsets file unreadable ({e}); neither "
                                f"{self.path.name} nor its .bak can be parsed") from e

    def load(self) -> None:
        table = self._read_file()
        with self._lock:
            self._table.update(table)

    def _read_from_store(self, mq: MessageQueue) -> int:
        return self._read_file().get(mq, -1)

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        owned = set(mqs)
        if not owned:
            return
        try:
            merged = self._read_file()
        except MQClientError:
            merged = {}
        with self._lock:
            for mq, off in self._table.items():
                if mq in owned:
                    merged[mq] = off
        string_to_file(encode_offset_table(merged), self.path)
