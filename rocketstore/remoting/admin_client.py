"""A small RocketMQ admin client (what ``mqadmin`` does through ``MQAdminImpl``), over
``RemotingClient``: ask the NameServer where things are, then ask the brokers.

Every call raises ``AdminError`` (code and remark of the refusal) or ``TransportError``
(unreachable, timed out); ``rocketstore admin`` prints either as one line.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rocketstore.common.protocol import MessageQueue, ResponseCode
from rocketstore.errors import RocketStoreError, TransportError
from rocketstore.remoting import admin_bodies as bodies
from rocketstore.remoting import fastjson
from rocketstore.remoting.client import RemotingClient, split_addr
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.records import decode_records

RETRY_PREFIX = "%RETRY%"


class AdminError(RocketStoreError):
    """A server refused an admin request: ``code`` (``ResponseCode`` value) and its remark."""

    def __init__(self, what: str, code: int, remark: str | None) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        self.code = code
        self.remark = remark
        super().__init__(f"{what}: {name} ({code}){': ' + remark.strip() if remark else ''}")


class NameServerError(TransportError):
    """A NameServer could not be reached (or none was given): named as a NameServer."""

    def __str__(self) -> str:
        return f"NameServer {self.broker!r}: {self.reason}" if self.broker else self.reason


class AdminClient:
    """Admin calls against the NameServer(s) ``namesrv_addr`` (``host:port[;host:port]``)."""

    def __init__(self, namesrv_addr: str, timeout: float = 5.0, *,
                 allow_no_namesrv: bool = False, credentials: Any = None) -> None:
        """``allow_no_namesrv``: an empty address is fine (only broker calls by address).
        ``credentials`` (a ``rocketstore.acl.SessionCredentials``): sign every request, for
        brokers with plain ACL on (RocketMQ's ``AclClientRPCHook``)."""
        addrs = [a.strip() for a in str(namesrv_addr).split(";") if a.strip()]
        if not addrs and not allow_no_namesrv:
            raise NameServerError("", "no NameServer address given")
        for a in addrs:
            split_addr(a)               # a clear error for "localhost" or "host:abc"
        self.namesrv_addrs = addrs
        self.timeout = timeout
        self.client = RemotingClient(rpc_hook=credentials.sign if credentials else None)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------
    def invoke(self, addr: str, code: int, fields: dict[str, Any] | None = None,
               body: bytes | None = None, *, what: str = "", ok: Iterable[int] = ()
               ) -> RemotingCommand:
        """One request; a response other than SUCCESS (or a code in ``ok``) raises
        ``AdminError``."""
        r = self.client.invoke(addr, RemotingCommand.request(code, fields, body), self.timeout)
        if r.code != ResponseCode.SUCCESS and r.code not in set(ok):
            raise AdminError(what or f"{RequestCode(code).name} at {addr}", r.code, r.remark)
        return r

    def _namesrv(self, code: int, fields: dict[str, Any] | None = None, *, what: str = ""
                 ) -> RemotingCommand:
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                return self.invoke(addr, code, fields, what=what)
            except TransportError as e:
                last = NameServerError(addr, e.reason)      # the next NameServer may answer
        if last is None:
            raise NameServerError("", "no NameServer address given (-n host:port)")
        raise last

    # -- NameServer ---------------------------------------------------------------------------
    def cluster_info(self) -> dict[str, Any]:
        """``ClusterInfo``: ``brokerAddrTable`` (name -> {cluster, brokerName, brokerAddrs})
        and ``clusterAddrTable`` (cluster -> broker names)."""
        r = self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO, what="clusterList")
        doc = fastjson.loads(bytes(r.body)) if r.body else {}
        return {"brokerAddrTable": doc.get("brokerAddrTable") or {},
                "clusterAddrTable": doc.get("clusterAddrTable") or {}}

    def topic_list(self) -> list[str]:
        r = self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, what="topicList")
        doc = fastjson.loads(bytes(r.body)) if r.body else {}
        return sorted(str(t) for t in doc.get("topicList") or ())

    def topic_route(self, topic: str) -> dict[str, Any]:
        """``TopicRouteData``: ``brokerDatas`` and ``queueDatas``."""
        r = self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                          what=f"route of topic {topic}")
        return fastjson.loads(bytes(r.body))

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, of ``cluster`` (or of every cluster)."""
        info = self.cluster_info()
        names = None
        if cluster is not None:
            if cluster not in info["clusterAddrTable"]:
                raise AdminError(f"cluster {cluster}", ResponseCode.SYSTEM_ERROR,
                                 "no such cluster at the NameServer")
            names = set(info["clusterAddrTable"][cluster])
        out = {}
        for name, bd in info["brokerAddrTable"].items():
            addr = _master(bd)
            if addr is not None and (names is None or name in names):
                out[name] = addr
        return out

    def topic_masters(self, topic: str) -> dict[str, str]:
        """Broker name -> master address of the brokers ``topic`` is routed to."""
        return self._route_masters(topic)

    def _route_masters(self, topic: str) -> dict[str, str]:
        route = self.topic_route(topic)
        return {bd["brokerName"]: a for bd in route.get("brokerDatas") or ()
                if (a := _master(bd)) is not None}

    # -- topics -------------------------------------------------------------------------------
    def topic_stats(self, topic: str) -> dict[MessageQueue, bodies.TopicOffset]:
        out: dict[MessageQueue, bodies.TopicOffset] = {}
        for name, addr in sorted(self._route_masters(topic).items()):
            r = self.invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic},
                            what=f"topicStatus of {topic} at {name}")
            out.update(bodies.decode_topic_stats(bytes(r.body))[0])
        return dict(sorted(out.items()))

    def update_topic(self, topic: str, *, read_queue_nums: int = 8, write_queue_nums: int = 8,
                     perm: int = 6, order: bool = False, broker_addr: str | None = None,
                     cluster: str | None = None, attributes: str | None = None) -> list[str]:
        """Create or change ``topic`` on one broker, or on every master of ``cluster``;
        returns the broker addresses done. ``attributes``: RocketMQ 5's modification string,
        e.g. ``"+message.type=FIFO"`` (``rocketstore.store.topic_attributes``)."""
        if (broker_addr is None) == (cluster is None):
            raise AdminError("updateTopic", ResponseCode.INVALID_PARAMETER,
                             "give exactly one of a broker address (-b) or a cluster (-c)")
        addrs = [broker_addr] if broker_addr else sorted(self.master_addrs(cluster).values())
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
                  "writeQueueNums": write_queue_nums, "perm": perm,
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order}
        if attributes:
            fields["attributes"] = attributes
        for addr in addrs:
            self.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields,
                        what=f"updateTopic {topic} at {addr}")
        return addrs

    def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from the masters of ``cluster`` (every cluster when None), then
        from every NameServer; returns the broker addresses done."""
        addrs = sorted(self.master_addrs(cluster).values())
        for addr in addrs:
            self.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic},
                        what=f"deleteTopic {topic} at {addr}")
        for ns in self.namesrv_addrs:
            self.invoke(ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic},
                        what=f"deleteTopic {topic} at NameServer {ns}")
        return addrs

    # -- consumers ----------------------------------------------------------------------------
    def _group_masters(self, group: str, topic: str | None) -> dict[str, str]:
        # as MQAdminImpl: the group's retry topic says which brokers it lives on
        for t in ([topic] if topic else []) + [RETRY_PREFIX + group]:
            try:
                return self._route_masters(t)
            except AdminError as e:
                if e.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
        return self.master_addrs()

    def consume_stats(self, group: str, topic: str | None = None
                      ) -> tuple[dict[MessageQueue, bodies.OffsetWrapper], float]:
        """Per queue the broker offset, the group's offset and its last consumed time; and the
        group's consume rate (messages/s)."""
        table: dict[MessageQueue, bodies.OffsetWrapper] = {}
        tps = 0.0
        fields = {"consumerGroup": group, "topic": topic}
        for name, addr in sorted(self._group_masters(group, topic).items()):
            r = self.invoke(addr, RequestCode.GET_CONSUME_STATS, fields,
                            what=f"consumerProgress of {group} at {name}")
            t, rate = bodies.decode_consume_stats(bytes(r.body))
            table.update(t)
            tps += rate
        return dict(sorted(table.items())), tps

    def consumer_connection(self, group: str) -> dict[str, Any]:
        """``ConsumerConnection`` of the first broker that knows the group online."""
        last: AdminError | None = None
        for name, addr in sorted(self._group_masters(group, None).items()):
            try:
                r = self.invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                {"consumerGroup": group},
                                what=f"consumerConnection of {group} at {name}")
                return fastjson.loads(bytes(r.body))
            except AdminError as e:
                last = e
        raise last or AdminError(f"consumerConnection of {group}", ResponseCode.CONSUMER_NOT_ONLINE,
                                 "no broker knows the group")

    def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int,
                             force: bool = True) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` to the first message stored at or after
        ``timestamp_ms`` (-1: the end) on every broker of the topic; returns the new offsets."""
        out: dict[MessageQueue, int] = {}
        for name, addr in sorted(self._route_masters(topic).items()):
            what = f"resetOffsetByTime of {group} on {topic} at {name}"
            r = self.invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
                "topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": force},
                what=what, ok=(ResponseCode.CONSUMER_NOT_ONLINE,))
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                # nobody online (the broker writes nothing then, as 4.9.8): move the offsets
                # here, queue by queue, as mqadmin's resetOffsetByTimeOld does
                out.update(self._reset_offline(addr, name, group, topic, timestamp_ms, force,
                                               what))
            else:
                out.update(bodies.decode_reset_offsets(bytes(r.body)))
        return dict(sorted(out.items()))

    def _reset_offline(self, addr: str, name: str, group: str, topic: str, timestamp_ms: int,
                       force: bool, what: str) -> dict[MessageQueue, int]:
        r = self.invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, what=what)
        out: dict[MessageQueue, int] = {}
        for mq in sorted(bodies.decode_topic_stats(bytes(r.body))[0]):
            qid = mq.queue_id
            if timestamp_ms == -1:
                t = self.invoke(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": qid},
                                what=what)
            else:
                t = self.invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {
                    "topic": topic, "queueId": qid, "timestamp": timestamp_ms}, what=what)
            target = max(0, t.int_field("offset"))
            new = target
            if not force:
                c = self.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": qid}, what=what,
                    ok=(ResponseCode.QUERY_NOT_FOUND,))
                current = c.int_field("offset", -1) if c.code == ResponseCode.SUCCESS else -1
                if 0 <= current <= target:
                    new = current
            self.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": new},
                what=what)
            out[MessageQueue(topic, name, qid)] = new
        return out

    # -- messages -----------------------------------------------------------------------------
    def view_message(self, msg_id: str) -> Any:
        """The message with offset message id ``msg_id`` (store host + commit-log offset)."""
        from rocketstore.store._codec import decode_msg_id
        try:
            host, offset = decode_msg_id(msg_id)
        except (ValueError, RocketStoreError):
            raise AdminError(f"queryMsgById {msg_id}", ResponseCode.INVALID_PARAMETER,
                             "not an offset message id (32 or 56 hex digits)") from None
        r = self.invoke(host, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset},
                        what=f"queryMsgById {msg_id} at {host}")
        msgs = decode_records(r.body)
        if not msgs:
            raise AdminError(f"queryMsgById {msg_id}", ResponseCode.QUERY_NOT_FOUND, None)
        return msgs[0]

    def query_message(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                      end_ms: int | None = None, *, unique_key: bool = False) -> list[Any]:
        """Messages of ``topic`` whose keys hold ``key`` (``unique_key``: whose client message
        id is ``key``) from every broker of the topic, oldest first."""
        end = int(time.time() * 1000) if end_ms is None else end_ms
        fields: dict[str, Any] = {"topic": topic, "key": key, "maxNum": max_num,
                                  "beginTimestamp": begin_ms, "endTimestamp": end}
        if unique_key:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        found = []
        for name, addr in sorted(self._route_masters(topic).items()):
            r = self.invoke(addr, RequestCode.QUERY_MESSAGE, fields,
                            what=f"queryMsgByKey {key} at {name}",
                            ok=(ResponseCode.QUERY_NOT_FOUND,))
            if r.code == ResponseCode.SUCCESS:
                found.extend(decode_records(r.body))
        if unique_key:
            found = [m for m in found if m.uniq_key == key]
        found.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commitlog_offset))
        return found

    # -- brokers ------------------------------------------------------------------------------
    def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """``GET_BROKER_RUNTIME_INFO``'s key/value table."""
        split_addr(broker_addr)
        r = self.invoke(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO,
                        what=f"brokerStatus at {broker_addr}")
        return bodies.decode_kv_table(bytes(r.body))


    def _targets(self, what: str, broker_addr: str | None, cluster: str | None) -> list[str]:
        # mqadmin's -b (one broker) or -c (every master of a cluster)
        if (broker_addr is None) == (cluster is None):
            raise AdminError(what, ResponseCode.INVALID_PARAMETER,
                             "give exactly one of a broker address (-b) or a cluster (-c)")
        if broker_addr is not None:
            split_addr(broker_addr)
            return [broker_addr]
        return sorted(self.master_addrs(cluster).values())

    def broker_config(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings by RocketMQ name."""
        split_addr(broker_addr)
        r = self.invoke(broker_addr, RequestCode.GET_BROKER_CONFIG,
                        what=f"getBrokerConfig at {broker_addr}")
        return properties(bytes(r.body).decode("utf-8") if r.body else "")

    def update_broker_config(self, settings: dict[str, str], *, broker_addr: str | None = None,
                             cluster: str | None = None) -> list[str]:
        """UPDATE_BROKER_CONFIG on one broker or every master of ``cluster``; the addresses
        done. A setting the broker may not change at run time is refused (AdminError)."""
        addrs = self._targets("updateBrokerConfig", broker_addr, cluster)
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode("utf-8")
        for addr in addrs:
            self.invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body,
                        what=f"updateBrokerConfig at {addr}")
        return addrs

    def topic_configs(self, broker_addr: str) -> dict[str, Any]:
        """GET_ALL_TOPIC_CONFIG: {"dataVersion", "topicConfigTable"} of one broker."""
        r = self.invoke(broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG,
                        what=f"topic configs at {broker_addr}")
        return fastjson.loads(bytes(r.body))

    def topic_config(self, broker_addr: str, topic: str) -> dict[str, Any]:
        """GET_TOPIC_CONFIG (RocketMQ 5): one topic's config, with its ``attributes``."""
        r = self.invoke(broker_addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic},
                        what=f"topic config of {topic} at {broker_addr}")
        return fastjson.loads(bytes(r.body))

    def broker_consume_stats(self, broker_addr: str, order: bool = False
                             ) -> tuple[str, dict[str, list[tuple[
                                 dict[MessageQueue, bodies.OffsetWrapper], float]]], int]:
        """GET_BROKER_CONSUME_STATS: (broker address, group -> per topic (queues, tps),
        total diff)."""
        split_addr(broker_addr)
        r = self.invoke(broker_addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": order},
                        what=f"brokerConsumeStats at {broker_addr}")
        return bodies.decode_consume_stats_list(bytes(r.body))

    def clean_unused_topic(self, *, broker_addr: str | None = None,
                           cluster: str | None = None) -> list[str]:
        addrs = self._targets("cleanUnusedTopic", broker_addr, cluster)
        for addr in addrs:
            self.invoke(addr, RequestCode.CLEAN_UNUSED_TOPIC, what=f"cleanUnusedTopic at {addr}")
        return addrs

    def stats_data(self, broker_addr: str, name: str, key: str) -> dict[str, Any]:
        """VIEW_BROKER_STATS_DATA: ``BrokerStatsData`` (statsMinute/Hour/Day: sum, tps)."""
        r = self.invoke(broker_addr, RequestCode.VIEW_BROKER_STATS_DATA,
                        {"statsName": name, "statsKey": key},
                        what=f"stats {name} {key} at {broker_addr}")
        return fastjson.loads(bytes(r.body))

    # -- subscription groups and clients -----------------------------------------------------
    def update_sub_group(self, config: dict[str, Any], *, broker_addr: str | None = None,
                         cluster: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a ``SubscriptionGroupConfig`` (fastjson
        names; ``groupName`` required)."""
        addrs = self._targets("updateSubGroup", broker_addr, cluster)
        body = fastjson.dumps(config).encode()
        for addr in addrs:
            self.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body,
                        what=f"updateSubGroup {config.get('groupName')} at {addr}")
        return addrs

    def sub_group_configs(self, broker_addr: str) -> dict[str, Any]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: {"dataVersion", "subscriptionGroupTable"}."""
        r = self.invoke(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                        what=f"getConsumerConfig at {broker_addr}")
        return fastjson.loads(bytes(r.body))

    def delete_sub_group(self, group: str, *, broker_addr: str | None = None,
                         cluster: str | None = None, remove_offset: bool = False) -> list[str]:
        addrs = self._targets("deleteSubGroup", broker_addr, cluster)
        for addr in addrs:
            self.invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                        {"groupName": group, "removeOffset": remove_offset},
                        what=f"deleteSubGroup {group} at {addr}")
        return addrs

    def producer_connection(self, group: str, topic: str) -> list[dict[str, Any]]:
        """GET_PRODUCER_CONNECTION_LIST on the brokers of ``topic``: the group's producers."""
        seen: dict[str, dict[str, Any]] = {}
        last: AdminError | None = None
        for name, addr in sorted(self._route_masters(topic).items()):
            try:
                r = self.invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                {"producerGroup": group},
                                what=f"producerConnection of {group} at {name}")
            except AdminError as e:
                last = e
                continue
            for c in (fastjson.loads(bytes(r.body)) or {}).get("connectionSet") or ():
                seen.setdefault(str(c.get("clientId")), c)
        if not seen and last is not None:
            raise last
        return [seen[k] for k in sorted(seen)]

    def consumer_running_info(self, group: str, client_id: str, jstack: bool = False
                              ) -> bytes:
        """GET_CONSUMER_RUNNING_INFO relayed by a broker of the group to ``client_id``: the
        client's ``ConsumerRunningInfo`` JSON, bytes as the client wrote them."""
        last: AdminError | None = None
        for name, addr in sorted(self._group_masters(group, None).items()):
            try:
                r = self.invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, {
                    "consumerGroup": group, "clientId": client_id, "jstackEnable": jstack},
                    what=f"consumerStatus of {client_id} ({group}) via {name}")
                return bytes(r.body or b"")
            except AdminError as e:
                last = e
        raise last or AdminError(f"consumerStatus of {client_id}", ResponseCode.SYSTEM_ERROR,
                                 "no broker knows the group")

    def topic_consumed_by(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO on the brokers of ``topic``: the groups consuming it."""
        groups: set[str] = set()
        for name, addr in sorted(self._route_masters(topic).items()):
            r = self.invoke(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic},
                            what=f"consumers of {topic} at {name}")
            groups.update(str(g) for g in (fastjson.loads(bytes(r.body)) or {}).get(
                "groupList") or ())
        return sorted(groups)

    # -- NameServer settings ------------------------------------------------------------------
    def namesrv_config(self) -> dict[str, dict[str, str]]:
        """GET_NAMESRV_CONFIG of every NameServer: address -> settings."""
        out = {}
        for ns in self.namesrv_addrs:
            r = self.invoke(ns, RequestCode.GET_NAMESRV_CONFIG,
                            what=f"getNamesrvConfig at {ns}")
            out[ns] = properties(bytes(r.body).decode("utf-8") if r.body else "")
        return out

    def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """WIPE_WRITE_PERM_OF_BROKER at every NameServer: address -> topics changed."""
        return self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount",
                                broker_name, "wipeWritePerm")

    def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """ADD_WRITE_PERM_OF_BROKER at every NameServer: address -> topics changed."""
        return self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount",
                                broker_name, "addWritePerm")

    def _write_perm(self, code: int, field: str, broker_name: str, what: str
                    ) -> dict[str, int]:
        out = {}
        for ns in self.namesrv_addrs:
            r = self.invoke(ns, code, {"brokerName": broker_name},
                            what=f"{what} {broker_name} at NameServer {ns}")
            out[ns] = r.int_field(field, 0)
        return out


def properties(text: str) -> dict[str, str]:
    """``name=value`` lines (a Java properties text) as a dict."""
    from rocketstore.remoting.requests import parse_properties
    return parse_properties(text)


def _master(bd: dict[str, Any]) -> str | None:
    addrs = bd.get("brokerAddrs") or {}
    return addrs.get("0") or addrs.get(0)


__all__ = ["AdminClient", "AdminError"]
