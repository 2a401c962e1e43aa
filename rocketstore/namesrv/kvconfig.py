"""The NameServer's KV config (``KVConfigManager``): namespace -> key -> value, in
``kvConfig.json`` as ``{"configTable": {namespace: {key: value}}}``, rewritten atomically after
changes. The one namespace with routing meaning is ``ORDER_TOPIC_CONFIG`` (topic ->
``"brokerA:4;brokerB:4"``).

Writes are batched (``BatchedPersister``): a change is in the table at once and on disk when
the future ``put_async``/``delete_async`` returns is done; the NameServer answers PUT_KV_CONFIG
only then, so an acknowledged change is durable while a burst of changes costs a few file
writes, none on the event loop. Sizes are bounded (``KVLimits``) so the file, rewritten whole,
stays small.
"""
from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

from rocketstore.errors import InvalidArgumentError
from rocketstore.store.configfile import BatchedPersister, ConfigFile

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


@dataclass(frozen=True)
class KVLimits:
    """rocketstore's bounds on the KV table (RocketMQ has none): UTF-8 bytes of a namespace,
    a key and a value, and the number of entries."""

    max_name_bytes: int = 255
    max_value_bytes: int = 16 * 1024
    max_entries: int = 100_000


class KVConfigManager:
    """Thread-safe KV table persisted to ``path`` (None: memory only)."""

    def __init__(self, path: str | None, limits: KVLimits | None = None) -> None:
        self._lock = threading.Lock()
        self.limits = limits or KVLimits()
        self._file = ConfigFile(path) if path else None
        self.table: dict[str, dict[str, str]] = {}
        self._entries = 0
        self._persister: BatchedPersister | None = None
        if self._file is not None:
            self.table = self._file.load(_decode) or {}
            self._entries = sum(len(v) for v in self.table.values())
            self._persister = BatchedPersister(self._write, "kvConfig")

    def _write(self) -> None:
        assert self._file is not None
        with self._lock:
            doc = {"configTable": {ns: dict(kv) for ns, kv in self.table.items()}}
        self._file.persist(doc)

    def _persist(self) -> concurrent.futures.Future[None]:
        if self._persister is None:
            fut: concurrent.futures.Future[None] = concurrent.futures.Future()
            fut.set_result(None)
            return fut
        return self._persister.request()

    def check(self, namespace: str, key: str, value: str) -> None:
        """Raise ``InvalidArgumentError`` naming the field over its limit."""
        lim = self.limits
        for name, v in (("namespace", namespace), ("key", key)):
            if not v or len(v.encode("utf-8", "surrogatepass")) > lim.max_name_bytes:
                raise InvalidArgumentError(name, v, f"must be 1..{lim.max_name_bytes} bytes")
        if len(value.encode("utf-8", "surrogatepass")) > lim.max_value_bytes:
            raise InvalidArgumentError("value", value[:40],
                                       f"longer than {lim.max_value_bytes} bytes")

    def put_async(self, namespace: str, key: str, value: str) -> concurrent.futures.Future[None]:
        """Set a value now; the future is done when it is on disk."""
        self.check(namespace, key, value)
        with self._lock:
            ns = self.table.get(namespace)
            if (ns is None or key not in ns) and self._entries >= self.limits.max_entries:
                raise InvalidArgumentError("key", key, f"the KV config already holds "
                                           f"{self.limits.max_entries} entries")
            if ns is None:
                ns = self.table[namespace] = {}
            if key not in ns:
                self._entries += 1
            ns[key] = value
        return self._persist()

    def put(self, namespace: str, key: str, value: str) -> None:
        self.put_async(namespace, key, value).result()

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self.table.get(namespace, {}).get(key)

    def delete_async(self, namespace: str, key: str) -> concurrent.futures.Future[None]:
        """Remove a value now; the future is done when that is on disk."""
        with self._lock:
            ns = self.table.get(namespace)
            removed = ns is not None and ns.pop(key, None) is not None
            if removed:
                self._entries -= 1
                if not ns:
                    del self.table[namespace]
        if not removed:
            fut: concurrent.futures.Future[None] = concurrent.futures.Future()
            fut.set_result(None)
            return fut
        return self._persist()

    def delete(self, namespace: str, key: str) -> None:
        self.delete_async(namespace, key).result()

    def namespace(self, namespace: str) -> dict[str, str]:
        with self._lock:
            return dict(self.table.get(namespace, {}))

    def close(self) -> None:
        """Write what is pending and stop the writer thread."""
        if self._persister is not None:
            self._persister.close()


def _decode(doc: Any) -> dict[str, dict[str, str]]:
    table = doc["configTable"]
    return {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
