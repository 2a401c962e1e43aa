"""The NameServer's KV config (``KVConfigManager``): namespace -> key -> value, in
``kvConfig.json`` as ``{"configTable": {namespace: {key: value}}}``, rewritten atomically after
every change. The one namespace with routing meaning is ``ORDER_TOPIC_CONFIG`` (topic ->
``"brokerA:4;brokerB:4"``)."""
from __future__ import annotations

import threading
from typing import Any

from rocketstore.store.configfile import ConfigFile

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """Thread-safe KV table persisted to ``path`` (None: memory only)."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._file = ConfigFile(path) if path else None
        self.table: dict[str, dict[str, str]] = {}
        if self._file is not None:
            self.table = self._file.load(_decode) or {}

    def _persist(self) -> None:
        if self._file is not None:
            self._file.persist({"configTable": self.table})

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self.table.setdefault(namespace, {})[key] = value
            self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            ns = self.table.get(namespace)
            if ns is not None and ns.pop(key, None) is not None:
                if not ns:
                    del self.table[namespace]
                self._persist()

    def namespace(self, namespace: str) -> dict[str, str]:
        with self._lock:
            return dict(self.table.get(namespace, {}))


def _decode(doc: Any) -> dict[str, dict[str, str]]:
    table = doc["configTable"]
    return {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
