"""TopicConfig and TopicConfigManager: the broker's topic catalogue in config/topics.json.

Structure (docs/format.md §10): ``config/topics.json`` =
``{"dataVersion":{"counter":N,"timestamp":ms},"topicConfigTable":{"<name>":{"order":false,
"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"<name>",
"topicSysFlag":0,"writeQueueNums":4}}}``. Properties are in alphabetical order, the layout is
fastjson's pretty format, and writes are atomic with a ``.bak``, all by
:class:`rocketstore.store.configfile.ConfigFile`. It follows RocketMQ's
``broker/.../topic/TopicConfigManager.java``, ``common/.../TopicConfig.java`` and
``common/.../constant/PermName.java``.

Properties this module does not model are kept and written back unchanged: a 5.x topic's
``"attributes"``, ``dataVersion.stateVersion``, and any other top-level property. A 5.x broker
stores meaning in them, so dropping them on rewrite would lose its settings.

Thread safety: ``TopicConfig`` is frozen. ``TopicConfigManager`` holds one lock over its table
and its data version, taken only to change them or to snapshot them for a write; writes are
serialised apart and a write older than the one on disk is dropped, so the file always ends
with the newest state and readers never wait for an fsync.

Durability: ``update``/``delete`` (admin calls) are on disk when they return.
``update(..., durable=False)`` (a topic a send auto-creates) only asks the background writer
(``BatchedPersister``): changes coalesce, none is written on the caller's thread (the event
loop), and ``flush_pending``/``close_persister`` write what is left.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketstore.store.names import check_name
from rocketstore.store.configfile import BatchedPersister, ConfigFile

__all__ = [
    "TopicConfig", "TopicConfigManager", "DataVersion", "TOPICS_FILE",
    "PERM_PRIORITY", "PERM_READ", "PERM_WRITE", "PERM_INHERIT",
    "SINGLE_TAG", "MULTI_TAG", "DEFAULT_TOPIC_QUEUE_NUMS", "MAX_QUEUE_NUMS",
]

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"

# PermName bits
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
_MAX_PERM = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT  # 15

# TopicFilterType names
SINGLE_TAG = "SINGLE_TAG"
MULTI_TAG = "MULTI_TAG"

# the broker's defaultTopicQueueNums, which auto-created topics get (TBW102 template)
DEFAULT_TOPIC_QUEUE_NUMS = 8
# Far above any real topic (BenchmarkTest has 1024 queues). The bound catches a sign or unit
# mix-up before it makes a consume queue directory per queue.
MAX_QUEUE_NUMS = 65535
_MAX_JAVA_INT = 2**31 - 1
# TBW102's perm when the broker has autoCreateTopicEnable; auto-created topics drop INHERIT
_TBW102_PERM = PERM_INHERIT | PERM_READ | PERM_WRITE

# topics.json property name → TopicConfig field
_BEAN_FIELDS = {
    "order": "order",
    "perm": "perm",
    "readQueueNums": "read_queue_nums",
    "topicFilterType": "topic_filter_type",
    "topicName": "topic_name",
    "topicSysFlag": "topic_sys_flag",
    "writeQueueNums": "write_queue_nums",
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_int(name: str, value: object, low: int, high: int, hint: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range {low}..{high}{hint}")


@dataclass(frozen=True)
class TopicConfig:
    """One topic's configuration (RocketMQ ``TopicConfig``; defaults are its class defaults).

    Parameters
    ----------
    topic_name
        The topic.
    read_queue_nums, write_queue_nums
        Queues consumers read from and producers write to (0..65535).
    perm
        ``PermName`` bits: PRIORITY 8, READ 4, WRITE 2, INHERIT 1. 6 = read-write,
        4 = read-only, 2 = write-only.
    topic_filter_type
        ``"SINGLE_TAG"`` or ``"MULTI_TAG"``.
    topic_sys_flag
        ``TopicSysFlag`` bits (UNIT 1, UNIT_SUB 2).
    order
        Whether the topic is ordered.
    extra
        Properties this class does not model, e.g. 5.x ``"attributes"``, written back as read.
        Treat them as read-only.

    Invalid values raise ``TypeError`` or ``ValueError``, and the message names the field.
    Use ``dataclasses.replace`` to derive a changed copy; it validates again.
    """

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        check_name("TopicConfig.topic_name", self.topic_name)
        _check_int("TopicConfig.read_queue_nums", self.read_queue_nums, 0, MAX_QUEUE_NUMS)
        _check_int("TopicConfig.write_queue_nums", self.write_queue_nums, 0, MAX_QUEUE_NUMS)
        _check_int("TopicConfig.perm", self.perm, 0, _MAX_PERM,
                   " (PermName bits: PRIORITY 8, READ 4, WRITE 2, INHERIT 1)")
        if self.topic_filter_type not in (SINGLE_TAG, MULTI_TAG):
            raise ValueError(f"TopicConfig.topic_filter_type={self.topic_filter_type!r} "
                             f"must be {SINGLE_TAG!r} or {MULTI_TAG!r}")
        _check_int("TopicConfig.topic_sys_flag", self.topic_sys_flag, 0, _MAX_JAVA_INT)
        if not isinstance(self.order, bool):
            raise TypeError(f"TopicConfig.order must be a bool, got {type(self.order).__name__}")
        if not isinstance(self.extra, Mapping) or not all(isinstance(k, str) for k in self.extra):
            raise TypeError("TopicConfig.extra must be a mapping with str keys")
        # a private copy: the caller's dict must not change a frozen config behind its back
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def attributes(self) -> dict[str, str]:
        """RocketMQ 5's topic attributes (``extra["attributes"]``, e.g. ``{"message.type":
        "FIFO"}``; ``rocketstore.store.topic_attributes``); empty for a 4.9 topic."""
        raw = self.extra.get("attributes")
        return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}

    def is_readable(self) -> bool:
        """PermName.isReadable: the READ bit (4) is set."""
        return bool(self.perm & PERM_READ)

    def is_writeable(self) -> bool:
        """PermName.isWriteable: the WRITE bit (2) is set."""
        return bool(self.perm & PERM_WRITE)

    def is_inherited(self) -> bool:
        """PermName.isInherited: the INHERIT bit (1) is set (templates such as TBW102)."""
        return bool(self.perm & PERM_INHERIT)


@dataclass(frozen=True)
class DataVersion:
    """RocketMQ ``DataVersion``: bumped on every topic change so name servers see it.

    ``state_version`` is the 5.x property. It is None when the file did not have it, and is
    then not written.
    """

    counter: int = 0
    timestamp: int = field(default_factory=lambda: _now_ms())  # looked up per call: patchable clock
    state_version: int | None = None

    def next_version(self) -> DataVersion:
        # RocketMQ's nextVersion(): counter + 1, timestamp = now; never earlier than the
        # previous timestamp, so a clock stepped back cannot make a newer version look older
        return dataclasses.replace(self, counter=self.counter + 1,
                                   timestamp=max(_now_ms(), self.timestamp))


def _config_to_bean(config: TopicConfig) -> dict[str, Any]:
    bean = dict(config.extra)
    bean.update({prop: getattr(config, name) for prop, name in _BEAN_FIELDS.items()})
    return bean


def _config_from_bean(name: str, bean: Any) -> TopicConfig:
    if not isinstance(bean, dict):
        raise ValueError(f"topicConfigTable[{name!r}] is a {type(bean).__name__}, not an object")
    kwargs: dict[str, Any] = {field_name: bean[prop]
                              for prop, field_name in _BEAN_FIELDS.items() if prop in bean}
    kwargs.setdefault("topic_name", name)
    kwargs["extra"] = {k: v for k, v in bean.items() if k not in _BEAN_FIELDS}
    try:
        return TopicConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise type(e)(f"topicConfigTable[{name!r}]: {e}") from e


def _version_to_bean(version: DataVersion) -> dict[str, Any]:
    return {"counter": version.counter, "stateVersion": version.state_version,
            "timestamp": version.timestamp}


def _version_from_bean(bean: Any) -> DataVersion:
    if bean is None:
        return DataVersion()
    if not isinstance(bean, dict):
        raise ValueError(f"dataVersion is a {type(bean).__name__}, not an object")
    values = {"counter": bean.get("counter", 0), "timestamp": bean.get("timestamp", 0)}
    for prop, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"dataVersion.{prop}={value!r} is not an integer")
    state = bean.get("stateVersion")
    if state is not None and (isinstance(state, bool) or not isinstance(state, int)):
        raise ValueError(f"dataVersion.stateVersion={state!r} is not an integer")
    return DataVersion(values["counter"], values["timestamp"], state)


_Decoded = tuple[dict[str, TopicConfig], DataVersion, dict[str, Any]]


def _decode(doc: Any) -> _Decoded:
    """(table, data version, unmodelled top-level properties) of a parsed topics.json."""
    if not isinstance(doc, dict):
        raise ValueError(f"top level is a {type(doc).__name__}, not an object")
    raw = doc.get("topicConfigTable")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"topicConfigTable is a {type(raw).__name__}, not an object")
    table = {name: _config_from_bean(name, bean) for name, bean in raw.items()}
    extra = {k: v for k, v in doc.items() if k not in ("dataVersion", "topicConfigTable")}
    return table, _version_from_bean(doc.get("dataVersion")), extra


class VersionedConfigTable:
    """A table kept in one metadata JSON file under a data version (``topics.json``,
    ``subscriptionGroup.json``): the file, the lock and the version the managers share."""

    def __init__(self, path: str) -> None:
        self._file = ConfigFile(path)
        self._lock = threading.RLock()
        self._data_version = DataVersion()
        self._write_lock = threading.Lock()     # serialises writes; taken without _lock held
        self._seq = 0                           # snapshots taken
        self._written_seq = 0                   # the snapshot the file holds
        self._persister: BatchedPersister | None = None

    def _snapshot(self) -> Any:
        """The document to write (called with the lock held)."""
        raise NotImplementedError

    def snapshot(self) -> Any:
        """The document the file holds, as of now (RocketMQ's ``encode()``: what
        GET_ALL_TOPIC_CONFIG and GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer)."""
        with self._lock:
            return self._snapshot()

    def persist(self) -> None:
        """Write the current state now (atomic; see ``ConfigFile.persist``)."""
        with self._lock:
            doc = self._snapshot()
            self._seq += 1
            seq = self._seq
        with self._write_lock:
            if seq < self._written_seq:
                return          # a newer snapshot is already on disk
            self._file.persist(doc)
            self._written_seq = seq

    def persist_later(self) -> None:
        """Have the background writer persist soon (coalescing with other requests)."""
        with self._lock:
            if self._persister is None:
                self._persister = BatchedPersister(self.persist, os.path.basename(self.path))
            persister = self._persister
        persister.request()

    def flush_pending(self) -> None:
        """Write now if a background write is pending."""
        if self._persister is not None:
            self._persister.flush()

    def close_persister(self) -> None:
        """Write what is pending and stop the background writer."""
        if self._persister is not None:
            self._persister.close()

    @property
    def path(self) -> str:
        """The JSON file's path."""
        return self._file.path

    @property
    def data_version(self) -> DataVersion:
        """The current data version (bumped by every change)."""
        with self._lock:
            return self._data_version

    def _version_bean(self) -> dict[str, Any]:
        return _version_to_bean(self._data_version)

    def replace_all(self, table: dict[str, Any], version: DataVersion) -> None:
        """A slave's sync: the master's whole table and data version replace this one's,
        persisted now (``SlaveSynchronize``: clear, putAll, persist)."""
        with self._lock:
            self._table = dict(table)
            self._data_version = version
        self.persist()


class TopicConfigManager(VersionedConfigTable):
    """Topic configurations by name, persisted to ``topics.json`` on every change.

    Parameters
    ----------
    config_dir
        The store's ``config`` directory (``rocketstore.store.paths.config_dir(root)``).

    Nothing is read at construction. Call :meth:`load` first, or the first change replaces
    what an earlier run left (the old version survives only as ``.bak``). RocketMQ's built-in
    system topics (TBW102, SCHEDULE_TOPIC_XXXX, ...) are not registered here.

    Examples
    --------
    >>> import tempfile
    >>> topics = TopicConfigManager(tempfile.mkdtemp())
    >>> topics.load()
    False
    >>> topics.create_if_absent("TopicTest").write_queue_nums
    8
    >>> topics.data_version.counter
    1
    """

    def __init__(self, config_dir: str | os.PathLike[str]) -> None:
        self.config_dir = os.fspath(config_dir)
        super().__init__(os.path.join(self.config_dir, TOPICS_FILE))
        self._table: dict[str, TopicConfig] = {}
        self._extra: dict[str, Any] = {}
        # called after every change (a broker re-registers with its NameServers at once)
        self.listeners: list[Callable[[], None]] = []

    def get(self, topic: str) -> TopicConfig | None:
        """The topic's configuration, or None when it does not exist."""
        with self._lock:
            return self._table.get(topic)

    def peek(self, topic: str) -> TopicConfig | None:
        """``get`` without the lock, for a per-message hot path: every change stores a new
        immutable ``TopicConfig`` in one assignment (or swaps the table whole), so a reader
        sees the old object or the new one, never a half-made one."""
        return self._table.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        """Every topic's configuration by name (a copy of the table)."""
        with self._lock:
            return dict(self._table)

    def update(self, config: TopicConfig, *, durable: bool = True) -> None:
        """Add or replace *config*, bump the data version and persist (with
        ``durable=False``: in the background, see the module's "Durability")."""
        if not isinstance(config, TopicConfig):
            raise TypeError(f"config must be a TopicConfig, got {type(config).__name__}")
        with self._lock:
            self._table[config.topic_name] = config
            self._data_version = self._data_version.next_version()
        self._changed(durable)

    def touch(self) -> None:
        """A new data version with the table unchanged (RocketMQ's ``nextVersion()`` when the
        broker's own permission changes): persisted, and the listeners (NameServer
        re-registration) told."""
        with self._lock:
            self._data_version = self._data_version.next_version()
        self._changed(True)

    def register_absent(self, configs: list[TopicConfig]) -> list[TopicConfig]:
        """Add the configs whose topic is absent, without a version bump (RocketMQ's
        constructor-registered system topics), persisting once if any was added."""
        with self._lock:
            added = [c for c in configs if c.topic_name not in self._table]
            for c in added:
                self._table[c.topic_name] = c
            if added:
                self.persist()
            return added

    def delete(self, topic: str) -> bool:
        """Remove *topic*. Returns False, with no version bump or write, if it did not exist."""
        with self._lock:
            if self._table.pop(topic, None) is None:
                return False
            self._data_version = self._data_version.next_version()
        self._changed(True)
        return True

    def create_if_absent(self, topic: str,
                         default_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> TopicConfig:
        """The topic's configuration, auto-created from the TBW102 template when absent.

        RocketMQ's ``createTopicInSendMessageMethod`` copies TBW102 (perm 7 when
        ``autoCreateTopicEnable``) and drops the INHERIT bit. The new topic gets
        *default_queue_nums* read and write queues and perm 6 (read-write). It bumps the data
        version and persists; an existing topic is returned untouched.
        """
        _check_int("default_queue_nums", default_queue_nums, 0, MAX_QUEUE_NUMS)
        with self._lock:
            existing = self._table.get(topic)
            if existing is not None:
                return existing
            config = TopicConfig(topic, read_queue_nums=default_queue_nums,
                                 write_queue_nums=default_queue_nums,
                                 perm=_TBW102_PERM & ~PERM_INHERIT)
            self._table[topic] = config
            self._data_version = self._data_version.next_version()
        self._changed(True)
        return config

    def load(self) -> bool:
        """Replace the table with the file's (or ``.bak``'s) content.

        Returns False when neither file exists or has content (empty table, fresh data
        version). Raises ``CorruptionError`` when neither can be decoded.
        """
        with self._lock:
            decoded = self._file.load(_decode)
            if decoded is None:
                self._table, self._data_version, self._extra = {}, DataVersion(), {}
                return False
            self._table, self._data_version, self._extra = decoded
            if self._file.loaded_path == self._file.bak_path:
                # <file> is missing or bad: write a good one now (a bad <file> is not rotated,
                # so .bak stays). Best effort; the next change writes it too.
                try:
                    self.persist()
                except OSError:
                    log.exception("%s: rewriting from %s failed", self.path, self._file.bak_path)
            return True

    def _snapshot(self) -> Any:
        doc = dict(self._extra)
        doc["dataVersion"] = self._version_bean()
        doc["topicConfigTable"] = {name: _config_to_bean(config)
                                   for name, config in self._table.items()}
        return doc

    def _changed(self, durable: bool) -> None:
        # RocketMQ: dataVersion.nextVersion() (done by the caller, under the lock); persist().
        # The snapshot is taken under the lock, so the file's counter matches its table.
        if durable:
            self.persist()
        else:
            self.persist_later()
        for listener in self.listeners:
            listener()
