"""ProducerManager: producer groups' channels, for transaction check-backs (MESSAGING.md 2.5).

"new producer connected" is ``LogLimiter``'d (a client controls how often it connects)."""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

from rocketstore.broker.channels import ClientChannelInfo, is_active, is_writable, now_ms
from rocketstore.common.log_limit import LogLimiter

log = logging.getLogger("rocketstore.broker.producers")

GET_AVAILABLE_CHANNEL_RETRY_COUNT = 3


class ProducerManager:
    """``groupChannelTable`` (group -> channel -> info) and ``clientChannelTable``."""

    def __init__(self, channel_expired_ms: int = 120_000) -> None:
        self.channel_expired_ms = channel_expired_ms
        self._lock = threading.Lock()
        self._groups: dict[str, dict[Any, ClientChannelInfo]] = {}
        self._clients: dict[str, Any] = {}
        # channel -> its groups: a client's groups are bounded (``groups_after``), and a
        # closing channel leaves its own groups without a walk over every group
        self._by_channel: dict[Any, set[str]] = {}
        self._counter = itertools.count(1)
        self._connected = LogLimiter(log, logging.INFO, "new producer connected")
        self.log_limiters: tuple[LogLimiter, ...] = (self._connected,)   # flushed by the scan

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        with self._lock:
            channels = self._groups.setdefault(group, {})
            old = channels.get(info.channel)
            if old is None:
                channels[info.channel] = info
                self._by_channel.setdefault(info.channel, set()).add(group)
                self._connected.event(f"group {group} client {info.client_id}")
            else:
                old.last_update_timestamp = now_ms()
            self._clients[info.client_id] = info.channel

    def unregister_producer(self, group: str, channel: Any) -> None:
        with self._lock:
            channels = self._groups.get(group)
            if channels is None:
                return
            info = channels.pop(channel, None)
            if not channels:
                del self._groups[group]
            if info is not None:
                self._clients.pop(info.client_id, None)
                self._unindex(channel, group)

    def _unindex(self, channel: Any, group: str) -> None:
        mine = self._by_channel.get(channel)
        if mine is not None:
            mine.discard(group)
            if not mine:
                del self._by_channel[channel]

    def groups_after(self, channel: Any, groups: list[str]) -> int:
        """How many producer groups ``channel`` would be in once ``groups`` are registered."""
        with self._lock:
            mine = self._by_channel.get(channel, set())
            return len(mine) + len(set(groups) - mine)

    def do_channel_close_event(self, channel: Any) -> None:
        with self._lock:
            for group in self._by_channel.pop(channel, ()):
                channels = self._groups.get(group)
                if channels is None:
                    continue
                info = channels.pop(channel, None)
                if info is not None:
                    self._clients.pop(info.client_id, None)
                if not channels:
                    del self._groups[group]

    def scan_not_active_channel(self) -> list[tuple[str, str]]:
        dropped = []
        now = now_ms()
        self._connected.flush()
        with self._lock:
            for group, channels in list(self._groups.items()):
                for ch, info in list(channels.items()):
                    if now - info.last_update_timestamp > self.channel_expired_ms:
                        del channels[ch]
                        self._clients.pop(info.client_id, None)
                        self._unindex(ch, group)
                        dropped.append((group, info.client_id))
                if not channels:
                    del self._groups[group]
        return dropped

    def group_channels(self, group: str) -> list[Any]:
        with self._lock:
            return list(self._groups.get(group, {}))

    def group_infos(self, group: str) -> list[tuple[Any, ClientChannelInfo]] | None:
        """(channel, info) of each producer of ``group``; None when the group has none."""
        with self._lock:
            channels = self._groups.get(group)
            return None if channels is None else list(channels.items())

    def find_channel(self, client_id: str) -> Any:
        with self._lock:
            return self._clients.get(client_id)

    def get_available_channel(self, group: str) -> Any:
        """``getAvailableChannel``: round robin from a shared counter, up to 3 channels tried
        for one active and writable; else the last active one seen; else None."""
        with self._lock:
            channels = list(self._groups.get(group, {}))
        size = len(channels)
        if size == 0:
            return None
        last_active = None
        index = next(self._counter) % size
        channel = channels[index]
        ok = is_active(channel) and is_writable(channel)
        count = 0
        while count < GET_AVAILABLE_CHANNEL_RETRY_COUNT:
            count += 1
            if ok:
                return channel
            if is_active(channel):
                last_active = channel
            index = (index + 1) % size
            channel = channels[index]
            ok = is_active(channel) and is_writable(channel)
        return last_active
