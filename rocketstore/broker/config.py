"""BrokerConfig: RocketMQ 4.9.8's ``BrokerConfig`` settings the broker acts on, in snake_case.

Defaults are 4.9.8's, except ``broker_name`` (RocketMQ uses the host name; a fixed
``broker-a`` keeps routes and offset ids stable across machines). ``message_delay_level``
lives in ``StoreConfig``, as ``messageDelayLevel`` lives in RocketMQ's ``MessageStoreConfig``;
so does ``flush_consumer_offset_interval`` (the store owns ``consumerOffset.json``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from rocketstore.errors import InvalidConfigError
from rocketstore.common.constants import PermName
from rocketstore.proxy.limits import ProxyLimits as _LIMITS     # no grpc import: plain data

if TYPE_CHECKING:
    from rocketstore.acl.signature import SessionCredentials

_CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings (RocketMQ ``BrokerConfig`` names in snake_case).

    Examples
    --------
    >>> BrokerConfig().default_topic_queue_nums, BrokerConfig().transaction_check_interval
    (8, 60000)
    """

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    broker_permission: int = int(PermName.PERM_READ | PermName.PERM_WRITE)
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    trace_topic_enable: bool = False
    reject_transaction_message: bool = False
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    notify_consumer_ids_changed_enable: bool = True
    slave_read_enable: bool = False
    start_accept_send_request_time_stamp: int = 0
    filter_support_retry: bool = False
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    store_reply_message_enable: bool = True
    # ClientHousekeepingService / RebalanceLockManager constants, settable for tests
    channel_expired_timeout: int = 120_000       # ConsumerManager.CHANNEL_EXPIRED_TIMEOUT
    scan_not_active_channel_interval: int = 10_000
    rebalance_lock_max_live_time: int = 60_000   # rocketmq.broker.rebalance.lockMaxLiveTime
    long_polling_check_interval: int = 5000      # PullRequestHoldService's periodic check
    # registerNameServerPeriod: re-registration with the NameServers (clamped to 10-60 s)
    register_name_server_period: int = 30_000
    # plain ACL (docs/acl.md): off unless acl_enable; acl_file "" is <store dir>/conf/plain_acl.yml
    acl_enable: bool = False
    acl_file: str = ""
    # what this broker signs its own requests with (a slave's metadata sync to a master with ACL
    # on, NameServer registration): RocketMQ 5.3's innerClientAuthenticationCredentials, a JSON
    # object {"accessKey": ..., "secretKey": ...}; "" signs nothing. Never shown (repr, config).
    inner_client_authentication_credentials: str = field(default="", repr=False)
    # bounds on what clients may make the broker hold (stricter than 4.9.8; docs/protocol.md):
    # entries per HEART_BEAT (consumers, producers, subscriptions of one consumer), and the
    # subscription groups past which nothing more is auto-created
    heartbeat_max_entries: int = 1000
    # producer groups one client (connection) is in, across its heartbeats (rocketstore's
    # own; the gRPC proxy announces up to grpcMaxGroups producer topics as one client)
    client_max_producer_groups: int = 20_000
    auto_create_subscription_group_max: int = 20_000
    # topics past which sends auto-create none (counted however made, except system topics
    # and held groups' %RETRY%/%DLQ% ones; docs/protocol.md "Limits")
    auto_create_topic_max: int = 20_000
    # rocketstore's own (rocketstore.broker.metrics): counters on by default, /metrics opt-in
    metrics_enable: bool = True                  # per-topic/group counters, runtime info
    metrics_port: int = 0                        # Prometheus /metrics on broker_ip1 (0: off)
    # RocketMQ 5's local-mode proxy in the broker process (rocketstore.proxy; 0: off)
    grpc_server_port: int = 0
    # its bounds on what 5.x clients make it hold (docs/grpc.md "Limits"): ProxyLimits'
    # defaults, defined there once
    grpc_max_clients: int = _LIMITS.max_clients
    grpc_max_topics_per_client: int = _LIMITS.max_topics_per_client
    grpc_max_groups: int = _LIMITS.max_groups
    grpc_max_subscriptions_per_group: int = _LIMITS.max_subscriptions_per_group
    grpc_group_idle_millis: int = _LIMITS.group_idle_ms
    grpc_route_cache_max: int = _LIMITS.route_cache_max
    grpc_max_pending_delay_messages: int = _LIMITS.max_pending_delay_messages
    grpc_max_polling_receives: int = _LIMITS.max_polling_receives
    grpc_max_polling_receives_per_connection: int = _LIMITS.max_polling_receives_per_connection
    grpc_auth_max_skew_seconds: int = _LIMITS.auth_max_skew_s
    # the zones 5.x clients sign their dates in: "any", or e.g. "UTC,+08:00" (docs/grpc.md)
    grpc_auth_client_zones: str = "any"
    # RocketMQ 5's enableMixedMessageType: may a topic's message.type attribute be MIXED
    enable_mixed_message_type: bool = False
    # request executors by kind (rocketstore.remoting.executors, docs/protocol.md "Limits"):
    # 4.9.8's thread counts and queue capacities; a full queue answers SYSTEM_BUSY. Send and
    # pull are answered on the event loop, their capacity bounds the requests in flight.
    send_message_thread_pool_nums: int = 1
    pull_message_thread_pool_nums: int = 16 + _CORES * 2
    query_message_thread_pool_nums: int = 8 + _CORES
    admin_broker_thread_pool_nums: int = 16
    client_manage_thread_pool_nums: int = 32
    consumer_manage_thread_pool_nums: int = 32
    heartbeat_thread_pool_nums: int = min(32, _CORES)
    end_transaction_thread_pool_nums: int = 8 + _CORES * 2
    send_thread_pool_queue_capacity: int = 10_000
    pull_thread_pool_queue_capacity: int = 100_000
    query_thread_pool_queue_capacity: int = 20_000
    client_manager_thread_pool_queue_capacity: int = 1_000_000
    consumer_manager_thread_pool_queue_capacity: int = 1_000_000
    heartbeat_thread_pool_queue_capacity: int = 50_000
    end_transaction_pool_queue_capacity: int = 100_000
    admin_broker_thread_pool_queue_capacity: int = 10_000    # RocketMQ 5's (4.9.8: unbounded)
    # per connection (rocketstore.remoting.connection.ConnectionLimits): requests being
    # answered, and bytes of answers not yet written, before the connection stops reading
    server_max_in_flight_requests: int = 1024
    server_max_pending_response_bytes: int = 4 << 20
    # long-poll pulls one connection may have held at once (past it: SYSTEM_BUSY); they do
    # not count as in flight. A consumer holds one per queue it reads from this broker
    server_max_held_pulls: int = 1024
    # and the bytes they keep (rocketstore.remoting.broker_processor.held_pull_bytes: ~1 KiB
    # plus twice the subscription expression), per connection and in all; past it: SYSTEM_BUSY
    server_max_held_pull_bytes: int = 8 << 20
    max_held_pull_bytes: int = 256 << 20
    # request header limits (rocketstore's; RocketMQ only bounds the 16 MiB frame)
    server_max_header_bytes: int = 256 << 10
    server_max_ext_fields: int = 1024
    # RocketMQ 5.x's name: every record the broker writes carries the record CRC property
    # (a CRC over the whole record: TAGS, KEYS, topic and the other unchecked fields). Off by
    # default: 4.9.8's records, byte for byte, which leave those fields unprotected
    # (docs/durability.md). A StoreConfig.enabled_append_prop_crc given explicitly wins.
    enabled_append_prop_crc: bool = False
    # master/slave replication (docs/replication.md; RocketMQ 4.9.8 keeps these in
    # MessageStoreConfig, the names are the same): ASYNC_MASTER, SYNC_MASTER or SLAVE. A master's
    # broker_id is 0; a slave's must be >= 1. The HA port is always listen_port + 1.
    broker_role: str = "ASYNC_MASTER"
    broker_ip2: str = "127.0.0.1"               # the address sent as haServerAddr
    ha_master_address: str = ""                 # slave: master's HA host:port ("": from NameServer)
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3000                   # SYNC_MASTER: wait for the slave's ack
    access_message_in_memory_max_ratio: int = 40
    offset_check_in_slave: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            want = {"str": str, "int": int, "bool": bool}[f.type if isinstance(f.type, str) else f.type.__name__]
            if want is int and (isinstance(v, bool) or not isinstance(v, int)):
                raise InvalidConfigError(f.name, v, "must be an int", "BrokerConfig")
            if want is not int and not isinstance(v, want):
                raise InvalidConfigError(f.name, v, f"must be a {want.__name__}", "BrokerConfig")
        if not self.broker_name or not self.broker_cluster_name:
            raise InvalidConfigError("broker_name", self.broker_name, "must not be empty",
                                     "BrokerConfig")
        if not 0 <= self.broker_permission <= 15:
            raise InvalidConfigError("broker_permission", self.broker_permission,
                                     "PermName bits: READ 4, WRITE 2, INHERIT 1", "BrokerConfig")
        if not 1 <= self.default_topic_queue_nums <= 65535:
            raise InvalidConfigError("default_topic_queue_nums", self.default_topic_queue_nums,
                                     "must be in 1..65535", "BrokerConfig")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise InvalidConfigError("broker_role", self.broker_role,
                                     "must be ASYNC_MASTER, SYNC_MASTER or SLAVE", "BrokerConfig")
        if self.broker_role == "SLAVE" and self.broker_id <= 0:
            raise InvalidConfigError("broker_id", self.broker_id, "a SLAVE's brokerId must be > 0",
                                     "BrokerConfig")
        if self.broker_role != "SLAVE" and self.broker_id != 0:
            object.__setattr__(self, "broker_id", 0)   # as BrokerStartup: a master is always 0
        if self.inner_client_authentication_credentials:
            object.__setattr__(self, "_inner_credentials", _parse_credentials(
                self.inner_client_authentication_credentials))
        if not 0 <= self.metrics_port < 65536:
            raise InvalidConfigError("metrics_port", self.metrics_port, "must be 0 (off) or a "
                                     "TCP port", "BrokerConfig")
        if not 0 <= self.grpc_server_port < 65536:
            raise InvalidConfigError("grpc_server_port", self.grpc_server_port, "must be 0 (off) "
                                     "or a TCP port", "BrokerConfig")
        for name in ("short_polling_time_mills", "transaction_time_out",
                     "transaction_check_interval", "channel_expired_timeout",
                     "scan_not_active_channel_interval", "rebalance_lock_max_live_time",
                     "long_polling_check_interval", "register_name_server_period",
                     "ha_send_heartbeat_interval", "ha_housekeeping_interval",
                     "ha_transfer_batch_size", "ha_slave_fallbehind_max", "slave_timeout",
                     "heartbeat_max_entries", "auto_create_subscription_group_max",
                     "max_held_pull_bytes", "client_max_producer_groups",
                     "grpc_auth_max_skew_seconds", "auto_create_topic_max",
                     *(f.name for f in fields(self) if f.name.endswith(
                         ("_thread_pool_nums", "_queue_capacity"))
                       or f.name.startswith(("server_", "grpc_max", "grpc_group", "grpc_route")))):
            if getattr(self, name) <= 0:
                raise InvalidConfigError(name, getattr(self, name), "must be positive",
                                         "BrokerConfig")

    @property
    def inner_credentials(self) -> SessionCredentials | None:
        """The credentials of ``inner_client_authentication_credentials``, or None."""
        return getattr(self, "_inner_credentials", None)

    def acl_path(self, store_dir: str) -> str:
        """The plain ACL file: ``aclFile``, else ``<store dir>/conf/plain_acl.yml``."""
        return self.acl_file or os.path.join(store_dir, "conf", "plain_acl.yml")

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:listenPort``, the address clients and offset ids use."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        """``brokerIP2:haListenPort``: the HA port is always the listen port + 1."""
        return f"{self.broker_ip2}:{self.listen_port + 1}"


def _parse_credentials(text: str) -> SessionCredentials:
    """``{"accessKey": ..., "secretKey": ...}`` (and an optional ``securityToken``), as 5.3
    reads it into a ``SessionCredentials``; errors never repeat the text (it holds a secret)."""
    import json

    from rocketstore.acl.signature import SessionCredentials
    setting = "inner_client_authentication_credentials"
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise InvalidConfigError(setting, "***", 'must be a JSON object {"accessKey": ..., '
                                 '"secretKey": ...}', "BrokerConfig")
    for key in ("accessKey", "secretKey"):
        v = doc.get(key)
        if not isinstance(v, str) or not v:
            raise InvalidConfigError(setting, "***", f"{key} must be a non-empty string",
                                     "BrokerConfig")
    token = doc.get("securityToken")
    if token is not None and not isinstance(token, str):
        raise InvalidConfigError(setting, "***", "securityToken must be a string",
                                 "BrokerConfig")
    return SessionCredentials(doc["accessKey"], doc["secretKey"], token)
