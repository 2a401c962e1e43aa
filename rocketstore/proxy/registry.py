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
from collections.abc import Callable
from concurrent.futures import Future

from rocketstore.client.subscription import build_subscription_data
from rocketstore.client.tcp import TcpTransport
from rocketstore.common import MessageExt
from rocketstore.common.protocol import (CheckTransactionStateRequest, ConsumeFromWhere,
                                         ConsumerData, ConsumeType, HeartbeatData, MessageModel,
                                         RemotingResult, ReplyMessageRequest, ResponseCode)
from rocketstore.errors import RocketStoreError

log = logging.getLogger("rocketstore.proxy")

HEARTBEAT_S = 10.0
# groups per heartbeat: half the broker's default heartbeatMaxEntries (docs/protocol.md), so a
# proxy holding many clients' groups is announced in several heartbeats, never refused whole
HEARTBEAT_ENTRIES = 500


class Registry:
    """Consumer groups and producer groups announced to every broker; a ``ClientChannel``."""

    def __init__(self, transport: TcpTransport,
                 on_check: Callable[[str, CheckTransactionStateRequest, MessageExt], None]
                 ) -> None:
        self.transport = transport
        self.on_check = on_check
        self.client_id = f"{socket.gethostname()}@proxy-{os.getpid()}"
        self._lock = threading.Lock()
        self._consumers: dict[str, dict[str, str]] = {}     # group -> topic -> expression
        self._producers: set[str] = set()
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
    def add_consumer(self, group: str, subscriptions: dict[str, str]) -> bool:
        """Remember ``group``'s subscriptions; True when they are new (heartbeat now)."""
        with self._lock:
            known = self._consumers.get(group, {})
            if all(known.get(t) == e for t, e in subscriptions.items()):
                return False
            self._consumers[group] = {**known, **subscriptions}
        return True

    def remove_consumer(self, group: str) -> None:
        """Its last client left: stop announcing ``group`` and leave it at every broker."""
        with self._lock:
            if self._consumers.pop(group, None) is None:
                return
        for broker in self.transport.broker_names():
            try:
                self.transport.unregister_client(broker, self.client_id, None, group)
            except RocketStoreError as e:
                log.warning("leaving group %s at %s failed: %s", group, broker, e)

    def add_producer(self, topics: list[str]) -> bool:
        with self._lock:
            new = set(topics) - self._producers
            self._producers |= new
        return bool(new)

    def heartbeat_now(self) -> None:
        with self._lock:
            consumers = [ConsumerData(g, ConsumeType.CONSUME_ACTIVELY, MessageModel.CLUSTERING,
                                      ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                                      [build_subscription_data(t, e) for t, e in subs.items()])
                         for g, subs in self._consumers.items()]
            producers = sorted(self._producers)
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
