"""The NameServer's request kinds and limits (docs/protocol.md "Limits").

RocketMQ 4.9.8's NameServer runs every request on one executor (``serverWorkerThreads``, 8
threads) with an unbounded queue, so a flood of registrations delays every route lookup
behind it and queues without bound. Here, as on the broker (rocketstore.remoting.executors):

* route lookups (GET_ROUTEINFO_BY_TOPIC, what every client asks every 30 s), GET_KV_CONFIG and
  GET_NAMESRV_CONFIG are answered on the event loop (a table lookup), never behind a queue;
* the brokers' own traffic (REGISTER_BROKER with bodies of up to 16 MiB, UNREGISTER_BROKER,
  QUERY_DATA_VERSION) runs on a pool of its own;
* everything else (cluster info, the topic list, KV writes, admin) on the default pool,
  ``defaultThreadPoolNums`` threads (4.9.8's count);
* each pool's queue is bounded (RocketMQ 5's ``defaultThreadPoolQueueCapacity``, 10,000; the
  registrations' is rocketstore's own); past it, SYSTEM_BUSY naming the setting.

Per connection, the broker's ``ConnectionLimits`` apply, and a request still being answered
also reserves its body's size: a peer pipelining 16 MiB registrations holds about one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rocketstore.common.codes import RequestCode as R
from rocketstore.errors import InvalidConfigError
from rocketstore.remoting.connection import MAX_IN_FLIGHT, WRITE_HIGH_WATER, ConnectionLimits
from rocketstore.remoting.command import MAX_EXT_FIELDS, MAX_HEADER
from rocketstore.remoting.executors import INLINE, RESERVE_DEFAULT, KindTable

DEFAULT, REGISTER = "default", "register"

NAMESRV_KINDS = KindTable(
    kind_by_code={
        R.GET_ROUTEINFO_BY_TOPIC: INLINE, R.GET_KV_CONFIG: INLINE, R.GET_NAMESRV_CONFIG: INLINE,
        R.REGISTER_BROKER: REGISTER, R.UNREGISTER_BROKER: REGISTER,
        R.QUERY_DATA_VERSION: REGISTER,
    },
    default=DEFAULT,
    settings={
        DEFAULT: ("default_thread_pool_nums", "default_thread_pool_queue_capacity"),
        REGISTER: ("register_broker_thread_pool_nums",
                   "register_broker_thread_pool_queue_capacity"),
    },
    on_loop=frozenset(), fallback=DEFAULT, prefix="namesrv")


@dataclass(frozen=True)
class NamesrvConfig:
    """The NameServer's pools and per-connection limits; namesrv.properties keys are the
    camelCase names (``rocketstore namesrv -c FILE``)."""

    default_thread_pool_nums: int = 8                   # 4.9.8's serverWorkerThreads
    default_thread_pool_queue_capacity: int = 10_000    # RocketMQ 5's (4.9.8: unbounded)
    register_broker_thread_pool_nums: int = 2
    register_broker_thread_pool_queue_capacity: int = 1_000
    server_max_in_flight_requests: int = MAX_IN_FLIGHT
    server_max_pending_response_bytes: int = WRITE_HIGH_WATER
    server_max_header_bytes: int = MAX_HEADER
    server_max_ext_fields: int = MAX_EXT_FIELDS

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidConfigError(f.name, v, "must be a positive int", "NamesrvConfig")

    def connection_limits(self) -> ConnectionLimits:
        """What each connection may hold (``ConnectionLimits``)."""
        return ConnectionLimits(max_in_flight=self.server_max_in_flight_requests,
                                max_pending_bytes=self.server_max_pending_response_bytes,
                                max_header=self.server_max_header_bytes,
                                max_ext_fields=self.server_max_ext_fields,
                                reserve_default=RESERVE_DEFAULT, reserve_body=True)
