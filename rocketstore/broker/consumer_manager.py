"""ConsumerManager: consumer groups registered by heartbeat (MESSAGING.md 2.4).

A group's subscription table is last-writer-wins across its members: a heartbeat adds the
topics it names, replaces a topic's subscription only with a newer ``sub_version``, and
removes the topics it does not name. A change (new channel, topic added or removed) sends
``NOTIFY_CONSUMER_IDS_CHANGED`` to every member when the broker and the group allow it;
so does an unregister or a closed channel. Channels not refreshed for 120 s are dropped by the
housekeeping scan, without a notification (the others notice at their next rebalance).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from rocketstore.broker.channels import ClientChannelInfo, call_oneway, now_ms
from rocketstore.common.protocol import (ConsumeFromWhere, ConsumeType, MessageModel,
                                         SubscriptionData)

log = logging.getLogger("rocketstore.broker.consumers")


class ConsumerGroupInfo:
    """One group's members and its subscription table (``ConsumerGroupInfo``)."""

    def __init__(self, group_name: str, consume_type: ConsumeType, message_model: MessageModel,
                 consume_from_where: ConsumeFromWhere) -> None:
        self.group_name = group_name
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.channel_info_table: dict[Any, ClientChannelInfo] = {}
        self.subscription_table: dict[str, SubscriptionData] = {}
        self.last_update_timestamp = now_ms()

    def update_channel(self, info: ClientChannelInfo, consume_type: ConsumeType,
                       message_model: MessageModel, consume_from_where: ConsumeFromWhere) -> bool:
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        old = self.channel_info_table.get(info.channel)
        if old is None:
            self.channel_info_table[info.channel] = info
            log.info("new consumer connected, group %s client %s", self.group_name, info.client_id)
            return True
        if old.client_id != info.client_id:
            log.error("consumer channel of group %s changed client id %s -> %s",
                      self.group_name, old.client_id, info.client_id)
            self.channel_info_table[info.channel] = info
        old.last_update_timestamp = now_ms()
        return False

    def update_subscription(self, subs: Iterable[SubscriptionData]) -> bool:
        updated = False
        named = set()
        for sub in subs:
            named.add(sub.topic)
            old = self.subscription_table.get(sub.topic)
            if old is None:
                self.subscription_table[sub.topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                self.subscription_table[sub.topic] = sub
        for topic in [t for t in self.subscription_table if t not in named]:
            log.warning("group %s drops subscription of %s (absent from a heartbeat)",
                        self.group_name, topic)
            del self.subscription_table[topic]
            updated = True
        self.last_update_timestamp = now_ms()
        return updated

    def find_subscription_data(self, topic: str) -> SubscriptionData | None:
        return self.subscription_table.get(topic)

    def all_channels(self) -> list[Any]:
        return list(self.channel_info_table)

    def all_client_ids(self) -> list[str]:
        return [i.client_id for i in self.channel_info_table.values()]


class ConsumerManager:
    """Groups by name; notifies members of membership changes (``notify`` callable: the
    broker's ``notifyConsumerIdsChanged`` to one channel)."""

    def __init__(self, notify_enabled: bool = True, channel_expired_ms: int = 120_000) -> None:
        self.notify_enabled = notify_enabled
        self.channel_expired_ms = channel_expired_ms
        self._lock = threading.RLock()
        self._table: dict[str, ConsumerGroupInfo] = {}

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        with self._lock:
            return self._table.get(group)

    def find_subscription_data(self, group: str, topic: str) -> SubscriptionData | None:
        with self._lock:
            info = self._table.get(group)
            return None if info is None else info.find_subscription_data(topic)

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._table)

    def register_consumer(self, group: str, info: ClientChannelInfo, consume_type: ConsumeType,
                          message_model: MessageModel, consume_from_where: ConsumeFromWhere,
                          subs: list[SubscriptionData], notify: bool) -> bool:
        """Add or refresh a member; returns whether the group changed."""
        with self._lock:
            g = self._table.get(group)
            if g is None:
                g = self._table[group] = ConsumerGroupInfo(group, consume_type, message_model,
                                                           consume_from_where)
            r1 = g.update_channel(info, consume_type, message_model, consume_from_where)
            r2 = g.update_subscription(subs)
            channels = g.all_channels()
        if (r1 or r2) and notify:
            self._notify(group, channels)
        return r1 or r2

    def unregister_consumer(self, group: str, channel: Any, notify: bool) -> None:
        with self._lock:
            g = self._table.get(group)
            if g is None or g.channel_info_table.pop(channel, None) is None:
                return
            if not g.channel_info_table:
                del self._table[group]
            channels = g.all_channels()
        if notify:
            self._notify(group, channels)

    def do_channel_close_event(self, channel: Any) -> None:
        """A client's connection closed: remove it from every group and tell the others."""
        changed = []
        with self._lock:
            for name, g in list(self._table.items()):
                if g.channel_info_table.pop(channel, None) is not None:
                    if not g.channel_info_table:
                        del self._table[name]
                    changed.append((name, g.all_channels()))
        for name, channels in changed:
            self._notify(name, channels)

    def scan_not_active_channel(self) -> list[tuple[str, str]]:
        """Drop channels silent for longer than the expiry (no notification); returns the
        (group, client id) pairs dropped."""
        dropped = []
        now = now_ms()
        with self._lock:
            for name, g in list(self._table.items()):
                for ch, info in list(g.channel_info_table.items()):
                    if now - info.last_update_timestamp > self.channel_expired_ms:
                        log.warning("consumer %s of group %s expired (no heartbeat for %d ms)",
                                    info.client_id, name, now - info.last_update_timestamp)
                        del g.channel_info_table[ch]
                        dropped.append((name, info.client_id))
                if not g.channel_info_table:
                    del self._table[name]
        return dropped

    def _notify(self, group: str, channels: list[Any]) -> None:
        if not self.notify_enabled:
            return
        for ch in channels:
            call_oneway("NOTIFY_CONSUMER_IDS_CHANGED", ch.notify_consumer_ids_changed, group)
