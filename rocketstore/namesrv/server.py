"""The NameServer: RocketMQ's route registry on the remoting protocol (docs/protocol.md §2.16).

``NameServer`` answers broker registration (every 30 s; expiry after 120 s, scanned every
10 s; a closed broker connection removes the broker at once), route queries by topic
(``TopicRouteData``), cluster info, the topic list and the KV config (``ORDER_TOPIC_CONFIG``).
Unknown request codes get REQUEST_CODE_NOT_SUPPORTED (a Java NameServer sends nothing and the
caller times out; an answer is kinder and every client handles it).

Requests run by kind (rocketstore.namesrv.config): route lookups on the event loop, the
brokers' registrations (a body decoded, a compressed one inflated incrementally up to
``MAX_REGISTER_BODY``) on a pool of their own, the rest (KV writes, answered once on disk;
admin) on the default pool; each pool's queue is bounded and answers SYSTEM_BUSY when full.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import struct
import zlib
from typing import Any

from rocketstore.common import names
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import InvalidArgumentError, RemotingProtocolError
from rocketstore.namesrv.config import NAMESRV_KINDS, NamesrvConfig
from rocketstore.namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfigManager, KVLimits
from rocketstore.namesrv.routeinfo import BROKER_EXPIRE_S, RouteInfoManager
from rocketstore.remoting import fastjson
from rocketstore.common.codes import VERSION_V3_0_11, RequestCode
from rocketstore.remoting.command import MAX_FRAME, RemotingCommand
from rocketstore.remoting.connection import Connection
from rocketstore.remoting.executors import KindExecutors, RoutingProcessor, conf_key
from rocketstore.remoting.server import RemotingServer
from rocketstore.store.topics import MAX_QUEUE_NUMS

log = logging.getLogger("rocketstore.namesrv")

SCAN_INTERVAL_S = 10.0
SCAN_FIRST_S = 5.0
DEFAULT_THREAD_POOL_NUMS = 8      # NamesrvConfig.defaultThreadPoolNums
# an inflated REGISTER_BROKER body may not be larger than an uncompressed one can be (the frame)
MAX_REGISTER_BODY = MAX_FRAME
NO_ROUTE = ("No topic route info in name server for the topic: {}\n"
            "See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")


def _json_body(obj: Any) -> bytes:
    return fastjson.dumps(obj).encode("utf-8")


# what a route may say of a topic (TopicConfig's ranges): a registered writeQueueNums of 2**31
# would make every client that looks the topic up build two billion queues
_ROUTE_INTS = (("readQueueNums", MAX_QUEUE_NUMS), ("writeQueueNums", MAX_QUEUE_NUMS),
               ("perm", 15), ("topicSysFlag", 2**31 - 1))


def check_register_topics(topics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The topics of a registration, each checked as a topic the broker may hold: the name
    by ``rocketstore.common.names`` (the one rule), queue counts, perm and sys flag in
    ``TopicConfig``'s ranges. ``RemotingProtocolError`` naming the first field that is not."""
    for name, tc in topics.items():
        why = names.topic_problem(name)
        if why is not None:
            raise RemotingProtocolError(
                "REGISTER_BROKER refused: " + names.named("topicConfigTable", name, why))
        for key, high in _ROUTE_INTS:
            v = tc.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= high:
                raise RemotingProtocolError(
                    f"REGISTER_BROKER refused: topicConfigTable[{name!r}].{key}={v!r} is not "
                    f"an int in 0..{high}")
    return topics


def decode_register_body(body: bytes, compressed: bool,
                         version: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``REGISTER_BROKER``'s body -> (data version, topic configs by name), every topic
    checked (``check_register_topics``)."""
    dv, topics = _decode_register_body(body, compressed, version)
    return dv, check_register_topics(topics)


def _decode_register_body(body: bytes, compressed: bool,
                          version: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    if compressed:
        return _decode_compressed_register_body(body)
    if not body:
        return {}, {}
    doc = fastjson.loads(body)
    if not isinstance(doc, dict):
        raise RemotingProtocolError("REGISTER_BROKER body is not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper", {}) if version >= VERSION_V3_0_11 else doc
    if not isinstance(wrapper, dict):
        raise RemotingProtocolError("topicConfigSerializeWrapper is not a JSON object")
    table = wrapper.get("topicConfigTable") or {}
    dv = wrapper.get("dataVersion") or {}
    if not isinstance(table, dict) or not isinstance(dv, dict):
        raise RemotingProtocolError("topicConfigTable / dataVersion are not JSON objects")
    return dv, {str(k): v for k, v in table.items() if isinstance(v, dict)}


def inflate_bounded(body: bytes, limit: int = MAX_REGISTER_BODY) -> bytes:
    """zlib-inflate ``body``, refusing (``RemotingProtocolError``) an output over ``limit``
    bytes: it stops at ``limit + 1`` bytes whatever the ratio (a 1 MB bomb would be GBs)."""
    d = zlib.decompressobj()
    try:
        raw = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise RemotingProtocolError(f"compressed REGISTER_BROKER body: {e}") from None
    if len(raw) > limit or d.unconsumed_tail:
        raise RemotingProtocolError(
            f"compressed REGISTER_BROKER body inflates past {limit} bytes")
    return raw


def _decode_compressed_register_body(body: bytes) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    # RegisterBrokerBody.encode(true): a zlib stream of length-prefixed data version JSON, then
    # "name read write perm filterType" per topic
    raw = inflate_bounded(body)
    try:
        pos = 0

        def take() -> bytes:
            nonlocal pos
            (n,) = struct.unpack_from(">i", raw, pos)
            if n < 0 or pos + 4 + n > len(raw):
                raise RemotingProtocolError("compressed REGISTER_BROKER body: bad length")
            out = raw[pos + 4:pos + 4 + n]
            pos += 4 + n
            return out

        dv = fastjson.loads(take())
        (count,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        topics: dict[str, dict[str, Any]] = {}
        for _ in range(count):
            parts = take().decode("utf-8").split(" ")
            if len(parts) < 4:
                raise RemotingProtocolError("compressed REGISTER_BROKER body: bad topic entry")
            topics[parts[0]] = {"topicName": parts[0], "readQueueNums": int(parts[1]),
                                "writeQueueNums": int(parts[2]), "perm": int(parts[3])}
        return dv, topics
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise RemotingProtocolError(f"compressed REGISTER_BROKER body: {e}") from None


class NamesrvProcessor:
    """Maps NameServer request codes onto the route tables and the KV config."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager,
                 order_message_enable: bool = False,
                 executor: concurrent.futures.Executor | None = None) -> None:
        self.routes = routes
        self.kv = kv
        self.executor = executor
        self.order_message_enable = order_message_enable
        self._handlers = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.kv_list,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.GET_NAMESRV_CONFIG: self.namesrv_config,
        }
        # GET_NAMESRV_CONFIG's settings (NamesrvConfig / NettyServerConfig names); the
        # NameServer fills in what it knows at start
        self.settings: dict[str, str] = {"orderMessageEnable": str(order_message_enable).lower(),
                                         "defaultThreadPoolNums": str(DEFAULT_THREAD_POOL_NUMS)}

    def process(self, conn: Connection, cmd: RemotingCommand) -> Any:
        handler = self._handlers.get(cmd.code)     # type: ignore[call-overload]
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f" request type {cmd.code} not supported")
        return handler(conn, cmd)

    def connection_closed(self, conn: Connection) -> None:
        addr = self.routes.channel_closed(conn)
        if addr is not None:
            log.info("broker %s removed: its connection closed", addr)

    # -- brokers ------------------------------------------------------------------------------
    def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # decodes (inflates) a body of up to 16 MiB: on the registrations' pool, never the loop
        name = cmd.require("brokerName")
        addr = cmd.require("brokerAddr")
        cluster = cmd.require("clusterName")
        ha = cmd.require("haServerAddr")
        broker_id = cmd.int_field("brokerId", required=True)
        crc = cmd.int_field("bodyCrc32", 0)
        body = bytes(cmd.body)
        if crc != 0 and (zlib.crc32(body) & 0x7FFFFFFF) != crc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        dv, topics = decode_register_body(body, cmd.bool_field("compressed"), cmd.version)
        master_ha, master = self.routes.register_broker(cluster, addr, name, broker_id, ha, dv,
                                                        topics, channel=conn)
        conn.attributes["broker_addr"] = addr
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return cmd.response(ResponseCode.SUCCESS,
                            ext_fields={"haServerAddr": master_ha, "masterAddr": master},
                            body=_json_body({"table": order}) if order else None)

    def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.unregister_broker(cmd.require("clusterName"), cmd.require("brokerAddr"),
                                      cmd.require("brokerName"),
                                      cmd.int_field("brokerId", required=True))
        return cmd.response(ResponseCode.SUCCESS)

    def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        addr = cmd.require("brokerAddr")
        theirs = fastjson.loads(cmd.body) if cmd.body else {}
        ours = self.routes.data_version_of(addr)
        changed = ours is None or ours != theirs
        self.routes.touch(addr)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"changed": changed},
                            body=_json_body(ours) if ours is not None else None)

    def wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        n = self.routes.wipe_write_perm(cmd.require("brokerName"))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": n})

    def add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # the reverse of wipeWritePerm: the broker's queues take writes again now, without
        # waiting for its topic config to change (its registrations keep the routes' perms)
        n = self.routes.add_write_perm(cmd.require("brokerName"))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": n})

    def namesrv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # Configuration.getAllConfigsFormatString: name=value lines
        text = "".join(f"{k}={v}\n" for k, v in sorted(self.settings.items()))
        return cmd.response(ResponseCode.SUCCESS, body=text.encode("utf-8"))

    # -- clients and admin --------------------------------------------------------------------
    def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        order_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic) if self.order_message_enable else None
        route = self.routes.pickup_topic_route(topic, order_conf)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE.format(topic))
        return cmd.response(ResponseCode.SUCCESS, body=_json_body(route))

    def cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=_json_body(self.routes.cluster_info()))

    def topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=_json_body({"topicList": self.routes.topic_list()}))

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(cmd.require("topic"))
        return cmd.response(ResponseCode.SUCCESS)

    async def put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            done = self.kv.put_async(cmd.require("namespace"), cmd.require("key"),
                                     cmd.require("value"))
        except InvalidArgumentError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"PUT_KV_CONFIG refused: {e}")
        await asyncio.wrap_future(done)         # answered once durable
        return cmd.response(ResponseCode.SUCCESS)

    def get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns, key = cmd.require("namespace"), cmd.require("key")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"value": value})

    async def delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.wrap_future(self.kv.delete_async(cmd.require("namespace"),
                                                       cmd.require("key")))
        return cmd.response(ResponseCode.SUCCESS)

    def kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = cmd.require("namespace")
        table = self.kv.namespace(ns)
        if not table:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(ResponseCode.SUCCESS, body=_json_body({"table": table}))


class NameServer:
    """A NameServer on ``host:port``; async ``start``/``stop``, or ``serve_forever``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9876, *,
                 kv_config_path: str | None = None, order_message_enable: bool = False,
                 broker_expire_s: float = BROKER_EXPIRE_S,
                 scan_interval_s: float = SCAN_INTERVAL_S, kv_limits: KVLimits | None = None,
                 thread_pool_nums: int | None = None,
                 config: NamesrvConfig | None = None) -> None:
        """``config``: pools and connection limits (``NamesrvConfig``'s defaults);
        ``thread_pool_nums`` overrides its ``default_thread_pool_nums``."""
        config = config or NamesrvConfig()
        if thread_pool_nums is not None:
            config = dataclasses.replace(config, default_thread_pool_nums=thread_pool_nums)
        self.config = config
        self.routes = RouteInfoManager(broker_expire_s)
        self.kv = KVConfigManager(kv_config_path, kv_limits)
        self.executors = KindExecutors(NAMESRV_KINDS, config)
        self.processor = NamesrvProcessor(self.routes, self.kv, order_message_enable,
                                          self.executors.executor)
        self.server = RemotingServer(RoutingProcessor(self.processor, self.executors), host,
                                     port, limits=config.connection_limits())
        self.processor.settings.update({
            "kvConfigPath": kv_config_path or "", "brokerExpireSeconds": f"{broker_expire_s:g}",
            "scanNotActiveBrokerIntervalSeconds": f"{scan_interval_s:g}", "listenPort": str(port),
            **{conf_key(f.name): str(getattr(config, f.name))
               for f in dataclasses.fields(config)}})
        self.scan_interval_s = scan_interval_s
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def addr(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        self.processor.settings["listenPort"] = str(self.server.port)
        self._scan_task = asyncio.get_running_loop().create_task(self._scan())
        log.info("NameServer %s up", self.addr)

    async def _scan(self) -> None:
        await asyncio.sleep(min(SCAN_FIRST_S, self.scan_interval_s))
        while True:
            for addr in self.routes.scan_not_active_brokers():
                log.warning("broker %s expired: not registered for %.0f s", addr,
                            self.routes.broker_expire_s)
                self._close_broker_connection(addr)
            await asyncio.sleep(self.scan_interval_s)

    def _close_broker_connection(self, addr: str) -> None:
        # the expired broker's channel is closed, as RocketMQ's scanNotActiveBroker does
        for conn in list(self.server.connections):
            if conn.attributes.get("broker_addr") == addr:
                conn.close()

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
        await self.server.stop()
        self.executors.shutdown()
        self.kv.close()
        log.info("NameServer %s stopped", self.addr)
