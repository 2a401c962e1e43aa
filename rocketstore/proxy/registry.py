"""The proxy's membership at the brokers, on behalf of its gRPC clients.

RocketMQ's proxy registers each gRPC consumer group (consume type CONSUME_ACTIVELY, with the
subscriptions from the client's settings) and each producer group (= topic name, what a 5.x
producer's transactions use) with the brokers. Here one remoting client id (the proxy's) carries
them all, refreshed by a heartbeat every 10 s: consumer groups so the broker lets the proxy
send a group's message to its DLQ, producer groups so the broker's transaction check service
finds a channel for a half message left open (``check_transaction_state``), which the proxy
forwards to a producer's Telemetry stream as a RecoverOrphanedTransactionCommand.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from rocketstore.client.subscription import build_subscription_data
from rocketstore.client.tcp import TcpTransport
from rocketstore.common import MessageExt
from rocketstore.common.protocol import (CheckTransactionStateRequest, ConsumeFromWhere,
                                         ConsumerData, ConsumeType, HeartbeatData, MessageModel,
                                         RemotingResult, ReplyMessageRequest, ResponseCode)
from rocketstore.errors import LimitExceededError, RocketStoreError
from rocketstore.proxy.limits import CONF_KEYS, ProxyLimits

log = logging.getLogger("rocketstore.proxy")

HEARTBEAT_S = 10.0
# groups per heartbeat: half the broker's default heartbeatMaxEntries (docs/protocol.md), so a
# proxy holding many clients' groups is announced in several heartbeats, never refused whole
HEARTBEAT_ENTRIES = 500


def filter_problem(expression: str) -> str | None:
    """Why a TAG filter cannot be announced, or None: the brokers refuse a heartbeat whose
    subscription has more than heartbeatMaxEntries tags, whole, with every other group it
    carries (counted before any split)."""
    n = expression.count("||") + 1
    if n > HEARTBEAT_ENTRIES:
        return (f"the filter expression has {n} tags (at most {HEARTBEAT_ENTRIES}: the "
                "brokers' heartbeatMaxEntries bounds a subscription's tags)")
    return None


class Registry:
    """Consumer groups and producer groups announced to every broker; a ``ClientChannel``."""

    def __init__(self, transport: TcpTransport,
                 on_check: Callable[[str, CheckTransactionStateRequest, MessageExt], None],
                 limits: ProxyLimits | None = None) -> None:
        self.transport = transport
        self.on_check = on_check
        self.client_id = f"{socket.gethostname()}@proxy-{os.getpid()}"
        self._lock = threading.Lock()
        self.limits = limits or ProxyLimits()
        self._consumers: dict[str, dict[str, str]] = {}     # group -> topic -> expression
        self._holders: dict[str, set[str]] = {}             # group -> its Telemetry clients
        self._used: dict[str, float] = {}                   # group -> last add (monotonic)
        self._producers: dict[str, set[str]] = {}           # topic -> its producer clients
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="proxy-heartbeat", daemon=True)
        self._thread.start()

    # ClientChannel ---------------------------------------------------------------------------
    def check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                msg: MessageExt) -> None:
        self.on_check(broker_name, request, msg)

    def notify_consumer_ids_changed(self, group: str) -> None:
        pass                                  # POP needs no rebalance

    def push_reply_message(self, request: ReplyMessageRequest) -> Future[RemotingResult]:
        """Request-reply is not a 5.x client feature: nobody here waits for a reply."""
        fut: Future[RemotingResult] = Future()
        fut.set_result(RemotingResult(ResponseCode.SYSTEM_ERROR,
                                      "no requester waits here (a gRPC proxy)"))
        return fut

    # membership ------------------------------------------------------------------------------
    def add_consumer(self, group: str, subscriptions: dict[str, str],
                     holder: str | None = None) -> bool:
        """Remember ``group``'s subscriptions (``holder``: the Telemetry client id that holds
        the group, None for a ReceiveMessage, which only keeps it from going idle); True when
        they are new (heartbeat now). Raises ``LimitExceededError`` past ``max_groups`` or
        ``max_subscriptions_per_group``."""
        lim = self.limits
        with self._lock:
            known = self._consumers.get(group)
            if known is None and len(self._consumers) >= lim.max_groups:
                self._expire_locked()         # no longer announced: the brokers expire them
                if len(self._consumers) >= lim.max_groups:
                    raise LimitExceededError(CONF_KEYS["max_groups"], lim.max_groups,
                                             f"the proxy holds {len(self._consumers)} consumer "
                                             f"groups, {group} would be one more", 42900)
            known = known or {}
            merged = {**known, **subscriptions}
            if len(merged) > lim.max_subscriptions_per_group:
                raise LimitExceededError(
                    CONF_KEYS["max_subscriptions_per_group"], lim.max_subscriptions_per_group,
                    f"group {group} would subscribe {len(merged)} topics", 40000)
            self._used[group] = time.monotonic()
            if holder is not None:
                self._holders.setdefault(group, set()).add(holder)
            if len(merged) == len(known) and all(known[t] == e for t, e in subscriptions.items()):
                return False
            self._consumers[group] = merged
        return True

    def set_producer(self, client: str, topics: list[str]) -> bool:
        """``client``'s producer topics are now ``topics`` (its latest settings); True when a
        topic is new to the proxy. Raises ``LimitExceededError`` past ``max_groups``."""
        with self._lock:
            new = set(topics) - set(self._producers)
            # what would be announced once this client's old topics are replaced
            after = {t for t, c in self._producers.items() if c != {client}} | set(topics)
            if new and len(after) > self.limits.max_groups:
                raise LimitExceededError(
                    CONF_KEYS["max_groups"], self.limits.max_groups,
                    f"the proxy would announce {len(after)} producer topics", 42900)
            self._drop_producer_locked(client)
            for t in topics:
                self._producers.setdefault(t, set()).add(client)
        return bool(new)

    def remove_client(self, client: str) -> list[str]:
        """``client`` left: its producer topics no one else has are no longer announced (the
        brokers expire them) and the consumer groups it was the last holder of are dropped;
        those groups are returned for ``leave``. Only the tables under the lock, no network:
        a caller being cancelled cannot leave the tables half updated."""
        gone = []
        with self._lock:
            self._drop_producer_locked(client)
            for group, holders in list(self._holders.items()):
                holders.discard(client)
                if not holders:
                    del self._holders[group]
                    self._used.pop(group, None)
                    if self._consumers.pop(group, None) is not None:
                        gone.append(group)
        return gone

    def _drop_producer_locked(self, client: str) -> None:
        for t, clients in list(self._producers.items()):
            clients.discard(client)
            if not clients:
                del self._producers[t]

    def _expire_locked(self) -> list[str]:
        """Consumer groups no client holds and no receive used for ``group_idle_ms``."""
        cutoff = time.monotonic() - self.limits.group_idle_ms / 1000
        idle = [g for g in self._consumers
                if g not in self._holders and self._used.get(g, 0) < cutoff]
        for g in idle:
            self._consumers.pop(g, None)
            self._used.pop(g, None)
        return idle

    def leave(self, groups: list[str]) -> None:
        """Leave ``groups`` at every broker (network; a failure is logged, the brokers then
        expire the group's clients)."""
        for group in groups:
            for broker in self.transport.broker_names():
                try:
                    self.transport.unregister_client(broker, self.client_id, None, group)
                except RocketStoreError as e:
                    log.warning("leaving group %s at %s failed: %s", group, broker, e)

    def sizes(self) -> dict[str, int]:
        """How many consumer groups and producer topics are announced (tests, metrics)."""
        with self._lock:
            return {"consumers": len(self._consumers), "producers": len(self._producers),
                    "holders": len(self._holders)}

    def heartbeat_now(self) -> None:
        with self._lock:
            idle = self._expire_locked()
            consumers = [ConsumerData(g, ConsumeType.CONSUME_ACTIVELY, MessageModel.CLUSTERING,
                                      ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                                      [build_subscription_data(t, e) for t, e in subs.items()])
                         for g, subs in self._consumers.items()]
            producers = sorted(self._producers)
        if idle:
            self.leave(idle)
        if not consumers and not producers:
            return
        n = HEARTBEAT_ENTRIES
        beats = [HeartbeatData(self.client_id, producers[i:i + n], consumers[i:i + n])
                 for i in range(0, max(len(consumers), len(producers)), n)]
        for broker in self.transport.broker_names():
            for data in beats:
                try:
                    self.transport.heartbeat(broker, data, self)
                except RocketStoreError as e:
                    log.warning("heartbeat to %s failed: %s", broker, e)

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.heartbeat_now()
            except Exception:               # noqa: BLE001 - next round retries
                log.exception("heartbeat")

    def close(self) -> None:
        self._stop.set()
