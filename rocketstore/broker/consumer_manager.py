"""ConsumerManager: consumer groups registered by heartbeat (MESSAGING.md 2.4).

A group's subscription table is last-writer-wins across its members: a heartbeat adds the
topics it names, replaces a topic's subscription only with a newer ``sub_version``, and
removes the topics it does not name (one warning per heartbeat, at most one per connection a
minute: ``DropWarnings``). A change (new channel, topic added or removed) sends
``NOTIFY_CONSUMER_IDS_CHANGED`` to every member when the broker and the group allow it;
so does an unregister or a closed channel. Channels not refreshed for 120 s are dropped by the
housekeeping scan, without a notification (the others notice at their next rebalance).
Lines a client triggers by connecting (a new member, a channel changing client id) are
``LogLimiter``'d, and a scan writes one line for the channels it expires.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from rocketstore.broker.channels import ClientChannelInfo, call_oneway, now_ms
from rocketstore.common.log_limit import LOG_NAMED, LogLimiter
from rocketstore.common.protocol import (ConsumeFromWhere, ConsumeType, MessageModel,
                                         SubscriptionData)

log = logging.getLogger("rocketstore.broker.consumers")

DROP_WARN_INTERVAL_S = 60.0     # at most one dropped-subscriptions warning per channel
DROP_WARN_NAMED = 5             # dropped subscriptions a warning names


class DropWarnings:
    """Subscriptions dropped by heartbeats, warned about once per heartbeat (how many, the
    first few) and at most once per channel every ``interval_s``; what is held back is
    counted into that channel's next warning. A line per dropped topic let a client that
    alternates two heartbeats write a million lines per beat (1,000 groups of 1,000 topics)."""

    def __init__(self, interval_s: float = DROP_WARN_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        # channel -> [time of its last warning (monotonic), drops held back since]
        self._state: dict[Any, list[float]] = {}

    def report(self, channel: Any, client_id: str, dropped: list[tuple[str, str]]) -> None:
        """One heartbeat of ``client_id`` on ``channel`` dropped these (group, topic)."""
        if not dropped:
            return
        now = time.monotonic()
        with self._lock:
            st = self._state.get(channel)
            if st is not None and now - st[0] < self.interval_s:
                st[1] += len(dropped)
                return
            held = int(st[1]) if st is not None else 0
            self._state[channel] = [now, 0]
        named = ", ".join(f"{g}/{t}" for g, t in dropped[:DROP_WARN_NAMED])
        log.warning("heartbeat of %s dropped %d subscriptions (group/topic absent from it): "
                    "%s%s%s", client_id, len(dropped), named,
                    ", ..." if len(dropped) > DROP_WARN_NAMED else "",
                    f"; {held} more dropped by its heartbeats since its last such warning"
                    if held else "")

    def forget(self, channel: Any) -> None:
        """The channel is gone (closed or expired)."""
        with self._lock:
            self._state.pop(channel, None)


class ConsumerGroupInfo:
    """One group's members and its subscription table (``ConsumerGroupInfo``)."""

    def __init__(self, group_name: str, consume_type: ConsumeType, message_model: MessageModel,
                 consume_from_where: ConsumeFromWhere,
                 logs: tuple[LogLimiter, LogLimiter] | None = None) -> None:
        """``logs``: where a new member and a channel changing client id are logged (the
        manager's limiters; else a fresh pair, unshared)."""
        self.group_name = group_name
        self.logs = logs or _consumer_logs()
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
            self.logs[0].event(f"group {self.group_name} client {info.client_id}")
            return True
        if old.client_id != info.client_id:
            self.logs[1].event(f"group {self.group_name} {old.client_id} -> {info.client_id}")
            self.channel_info_table[info.channel] = info
        old.last_update_timestamp = now_ms()
        return False

    def update_subscription(self, subs: Iterable[SubscriptionData],
                            dropped: list[tuple[str, str]] | None = None) -> bool:
        """Apply a member's subscriptions; the (group, topic) pairs it removes are appended to
        ``dropped``. Returns whether the table changed."""
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
            if dropped is not None:
                dropped.append((self.group_name, topic))
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


def _consumer_logs() -> tuple[LogLimiter, LogLimiter]:
    return (LogLimiter(log, logging.INFO, "new consumer connected"),
            LogLimiter(log, logging.ERROR, "consumer channel changed client id"))


class ConsumerManager:
    """Groups by name; notifies members of membership changes (``notify`` callable: the
    broker's ``notifyConsumerIdsChanged`` to one channel)."""

    def __init__(self, notify_enabled: bool = True, channel_expired_ms: int = 120_000) -> None:
        self.notify_enabled = notify_enabled
        self.channel_expired_ms = channel_expired_ms
        self._lock = threading.RLock()
        self._table: dict[str, ConsumerGroupInfo] = {}
        self.drop_warnings = DropWarnings()
        self._logs = _consumer_logs()
        self.log_limiters: tuple[LogLimiter, ...] = self._logs    # flushed by the scan

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
                          subs: list[SubscriptionData], notify: bool,
                          dropped: list[tuple[str, str]] | None = None) -> bool:
        """Add or refresh a member; returns whether the group changed. Subscriptions it
        drops are appended to ``dropped`` for the caller to report (one heartbeat, one
        warning: ``drop_warnings``); without it they are reported here."""
        mine: list[tuple[str, str]] = [] if dropped is None else dropped
        with self._lock:
            g = self._table.get(group)
            if g is None:
                g = self._table[group] = ConsumerGroupInfo(group, consume_type, message_model,
                                                           consume_from_where, self._logs)
            r1 = g.update_channel(info, consume_type, message_model, consume_from_where)
            r2 = g.update_subscription(subs, mine)
            channels = g.all_channels()
        if dropped is None:
            self.drop_warnings.report(info.channel, info.client_id, mine)
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
        self.drop_warnings.forget(channel)
        with self._lock:
            for name, g in list(self._table.items()):
                if g.channel_info_table.pop(channel, None) is not None:
                    if not g.channel_info_table:
                        del self._table[name]
                    changed.append((name, g.all_channels()))
        for name, channels in changed:
            self._notify(name, channels)

    def scan_not_active_channel(self) -> list[tuple[str, str]]:
        """Drop channels silent for longer than the expiry (no notification; one warning
        for the scan, naming the first few); returns the (group, client id) pairs dropped."""
        dropped = []
        now = now_ms()
        for limiter in self.log_limiters:
            limiter.flush()
        with self._lock:
            for name, g in list(self._table.items()):
                for ch, info in list(g.channel_info_table.items()):
                    if now - info.last_update_timestamp > self.channel_expired_ms:
                        del g.channel_info_table[ch]
                        self.drop_warnings.forget(ch)
                        dropped.append((name, info.client_id))
                if not g.channel_info_table:
                    del self._table[name]
        if dropped:
            log.warning("%d consumer channels expired (no heartbeat for %d ms): %s%s",
                        len(dropped), self.channel_expired_ms,
                        ", ".join(f"{g}/{c}" for g, c in dropped[:LOG_NAMED]),
                        ", ..." if len(dropped) > LOG_NAMED else "")
        return dropped

    def _notify(self, group: str, channels: list[Any]) -> None:
        if not self.notify_enabled:
            return
        for ch in channels:
            call_oneway("NOTIFY_CONSUMER_IDS_CHANGED", ch.notify_consumer_ids_changed, group)
