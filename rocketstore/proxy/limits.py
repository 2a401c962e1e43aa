"""Bounds on what 5.x clients can make the proxy hold (docs/grpc.md "Limits").

Every table the proxy keeps for its clients is bounded: entries leave when their client does or
after an idle time, caches are LRU, and past a cap the call is refused with a 5.x status code
and a message naming the setting. Defaults are far above real use. Each setting has a
broker.conf name (``grpc...``) for the proxy inside the broker, and ``rocketstore proxy
--limit NAME=N`` takes the same names.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclasses.dataclass(frozen=True)
class ProxyLimits:
    """The proxy's bounds; the field docs below name the broker.conf key (``CONF_KEYS``)."""

    # client ids with an open Telemetry stream (one stream per client id; a new stream under
    # the same id ends the old one). Past it: TOO_MANY_REQUESTS on the new stream
    max_clients: int = 10_000
    # topics in one client's settings (a producer's topics, a consumer's subscriptions);
    # past it: BAD_REQUEST on the settings, nothing registered
    max_topics_per_client: int = 1_000
    # consumer groups, and producer topics, the proxy announces to the brokers for its
    # clients (each); past it a new one is TOO_MANY_REQUESTS
    max_groups: int = 10_000
    # topics one consumer group subscribes through the proxy (at most the broker's
    # heartbeatMaxEntries, 1000); past it: BAD_REQUEST
    max_subscriptions_per_group: int = 1_000
    # a consumer group no Telemetry client holds leaves the brokers after this long without
    # a ReceiveMessage (RocketMQ's 120 s channel expiry)
    group_idle_ms: int = 120_000
    # topics whose route and message type are cached (LRU; RocketMQ 5's
    # topicRouteServiceCacheMaxNum)
    route_cache_max: int = 20_000
    # delay messages waiting in the proxy's timer (each an entry in memory and the journal);
    # past it a DELAY send is TOO_MANY_REQUESTS, as RocketMQ 5's timer flow control
    max_pending_delay_messages: int = 1_000_000
    # ReceiveMessage calls in progress (each a task waiting up to its long-polling time,
    # woken by every new message, re-popping its queues each time): in all, and per gRPC
    # connection. Past either: TOO_MANY_REQUESTS, nothing registered
    max_polling_receives: int = 100_000
    max_polling_receives_per_connection: int = 1_024
    # ACL on: how far (seconds) a signed x-mq-date-time may be from the proxy's clock, read in
    # any zone's local time (clients sign local time marked Z): a captured authorization header
    # works this long, not forever (AWS SigV4's 15 minutes; docs/grpc.md "Authentication")
    auth_max_skew_s: int = 900

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{CONF_KEYS[f.name]}={v!r}: must be a positive integer")


# ProxyLimits field -> its broker.conf / --limit name
CONF_KEYS = {"max_clients": "grpcMaxClients", "max_topics_per_client": "grpcMaxTopicsPerClient",
             "max_groups": "grpcMaxGroups",
             "max_subscriptions_per_group": "grpcMaxSubscriptionsPerGroup",
             "group_idle_ms": "grpcGroupIdleMillis", "route_cache_max": "grpcRouteCacheMax",
             "max_pending_delay_messages": "grpcMaxPendingDelayMessages",
             "max_polling_receives": "grpcMaxPollingReceives",
             "max_polling_receives_per_connection": "grpcMaxPollingReceivesPerConnection",
             "auth_max_skew_s": "grpcAuthMaxSkewSeconds"}


def limits_from(values: dict[str, int]) -> ProxyLimits:
    """``ProxyLimits`` from ``{conf key: value}`` (``ValueError`` names an unknown key)."""
    by_key = {v: k for k, v in CONF_KEYS.items()}
    unknown = sorted(set(values) - set(by_key))
    if unknown:
        raise ValueError(f"unknown proxy limit {unknown[0]!r}: expected one of "
                         f"{', '.join(CONF_KEYS.values())}")
    return ProxyLimits(**{by_key[k]: v for k, v in values.items()})


class TtlLru(Generic[K, V]):
    """A cache of at most ``cap`` entries, each fresh for ``ttl_s``: the least recently used
    one goes first, so asking for many names (that exist or not) never grows it past ``cap``."""

    def __init__(self, cap: int, ttl_s: float) -> None:
        self.cap, self.ttl_s = cap, ttl_s
        self._d: collections.OrderedDict[K, tuple[float, V]] = collections.OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(hit, value): a miss when absent or stale."""
        hit = self._d.get(key)
        if hit is None or time.monotonic() - hit[0] >= self.ttl_s:
            return False, None
        self._d.move_to_end(key)
        return True, hit[1]

    def put(self, key: K, value: V) -> None:
        self._d[key] = (time.monotonic(), value)
        self._d.move_to_end(key)
        while len(self._d) > self.cap:
            self._d.popitem(last=False)

    def pop(self, key: K, default: Any = None) -> Any:
        hit = self._d.pop(key, None)
        return default if hit is None else hit[1]

    def __len__(self) -> int:
        return len(self._d)
