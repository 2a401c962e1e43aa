"""Issue 24 items 4 and 5: a SLAVE broker's refusals, its metadata sync from the master, routes
with both nodes, and reads from the slave (HA.md §1.4, §4, §5, checklist 22-26, 28).

Real processes (tests/servers.py): a NameServer, a master and a SLAVE (``brokerRole=SLAVE``,
``brokerId=1``, the same ``brokerName``) registered with it. Without byte replication the slave
holds no messages of its own; where a test needs the slave to have the master's data, it stops
the master cleanly, copies its store directory to the slave's and starts both (said in its
docstring). Refusals are raw frames (tests/rawwire.py).
"""
from __future__ import annotations

import functools
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from rawwire import RawClient, props_string, recv_frame  # tests/rawwire.py
from servers import start_broker, start_namesrv, wait_until  # tests/servers.py

SEND_V2, PULL, QUERY_OFFSET, UPDATE_OFFSET, SEND_BATCH = 310, 11, 14, 15, 320
UPDATE_TOPIC, DELETE_TOPIC, UPDATE_GROUP, DELETE_GROUP = 17, 215, 200, 207
SEND_BACK, END_TX, REGISTER_BROKER, GET_ROUTE, RUNTIME_INFO = 36, 37, 103, 105, 28
GET_ALL_TOPICS, GET_ALL_OFFSETS, GET_ALL_DELAY, GET_ALL_GROUPS = 21, 43, 45, 201
SUCCESS, SYSTEM_ERROR, SLAVE_NOT_AVAILABLE, SERVICE_NOT_AVAILABLE = 0, 1, 11, 14
PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, TOPIC_NOT_EXIST = 19, 20, 17
WAIT_S = 60.0           # a deadline for polling, never a timing assertion
SLAVE_REMARK = "Can't modify topic or subscription group from slave broker"
# the master steers lagging consumers to the slave: slaveReadEnable with a 0 % memory share
MASTER_CONF = {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "0",
               "messageDelayLevel": "1s 1s 1s", "flushDelayOffsetInterval": "1000"}
SLAVE_CONF = {"brokerRole": "SLAVE", "brokerId": "1", "messageDelayLevel": "1s 1s 1s"}


_wait = functools.partial(wait_until, within=WAIT_S)   # tests/servers.py


def _send(c: RawClient, topic: str, body: bytes, props: dict[str, str] | None = None,
          queue_id: int = 0) -> tuple[dict, bytes]:
    return c.call(SEND_V2, {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id,
                            "f": 0, "g": int(time.time() * 1000), "h": 0,
                            "i": props_string(props or {}), "j": 0, "k": "false", "m": "false"},
                  body)


def _pull(c: RawClient, topic: str, offset: int, group: str = "CG", sys_flag: int = 4,
          commit: int = 0) -> dict:
    h, _ = c.call(PULL, {"consumerGroup": group, "topic": topic, "queueId": 0,
                         "queueOffset": offset, "maxMsgNums": 1, "sysFlag": sys_flag,
                         "commitOffset": commit, "suspendTimeoutMillis": 0,
                         "subscription": "*", "subVersion": 0})
    return h


def _query_offset(c: RawClient, topic: str, group: str) -> int:
    h, _ = c.call(QUERY_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0})
    return int(h["extFields"]["offset"]) if h["code"] == SUCCESS else -1


def _create_topic(c: RawClient, topic: str, queues: int = 1) -> dict:
    h, _ = c.call(UPDATE_TOPIC, {"topic": topic, "readQueueNums": queues,
                                 "writeQueueNums": queues, "perm": 6,
                                 "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                 "order": "false"})
    return h


def _route(ns_addr: str, topic: str) -> dict | None:
    with RawClient(ns_addr) as c:
        h, body = c.call(GET_ROUTE, {"topic": topic})
    if h["code"] != SUCCESS:
        return None
    from rocketstore.remoting import fastjson
    return fastjson.loads(body)


def _config(store: Path, name: str) -> dict:
    from rocketstore.remoting import fastjson
    p = store / "config" / name
    return fastjson.loads(p.read_text()) if p.exists() else {}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A NameServer, a master and its SLAVE, for the whole module."""
    tmp = tmp_path_factory.mktemp("ha_meta")
    (tmp / "m").mkdir()
    (tmp / "s").mkdir()
    ns = start_namesrv(tmp)
    master = start_broker(tmp / "m" / "store", ns.addr, conf=MASTER_CONF)
    slave = start_broker(tmp / "s" / "store", ns.addr, conf=SLAVE_CONF)
    try:
        yield ns, master, slave, tmp
    finally:
        slave.stop()
        master.stop()
        ns.stop()


# -- HA.md §1.4, checklist 22: what a slave refuses ---------------------------------------------

def test_slave_refuses_writes_and_admin_changes(pair):
    ns, master, slave, tmp = pair
    with RawClient(slave.addr) as c:
        h, _ = _send(c, "RefusedOnSlave", b"x")
        assert h["code"] == SERVICE_NOT_AVAILABLE
        assert "messages are put to the slave" in h["remark"]
        batch = b"".join(  # MessageDecoder.encodeMessages: one record per message
            (20 + 1 + 2).to_bytes(4, "big") + b"\x00" * 4 + b"\x00" * 4 + b"\x00" * 4
            + (1).to_bytes(4, "big") + b"b" + (0).to_bytes(2, "big") for _ in range(2))
        h, _ = c.call(SEND_BATCH, {"a": "PG", "b": "RefusedOnSlave", "c": "TBW102", "d": 4,
                                   "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
                                   "i": "", "j": 0, "k": "false", "m": "true"}, batch)
        assert h["code"] == SERVICE_NOT_AVAILABLE
        h, _ = c.call(SEND_BACK, {"group": "CG", "offset": 0, "delayLevel": 0,
                                  "originMsgId": "0" * 32, "originTopic": "RefusedOnSlave",
                                  "unitMode": "false", "maxReconsumeTimes": 16})
        assert h["code"] == SERVICE_NOT_AVAILABLE
        h, _ = c.call(END_TX, {"producerGroup": "PG", "tranStateTableOffset": 0,
                               "commitLogOffset": 0, "commitOrRollback": 8,
                               "fromTransactionCheck": "false", "msgId": "0" * 32})
        assert h["code"] == SLAVE_NOT_AVAILABLE and not h.get("remark")
        for code, ext, body in (
                (UPDATE_TOPIC, {"topic": "NewOnSlave", "readQueueNums": 1, "writeQueueNums": 1,
                                "perm": 6, "topicFilterType": "SINGLE_TAG"}, b""),
                (DELETE_TOPIC, {"topic": "TBW102"}, b""),
                (UPDATE_GROUP, None, json.dumps({"groupName": "GroupOnSlave"}).encode()),
                (DELETE_GROUP, {"groupName": "TOOLS_CONSUMER"}, b"")):
            h, _ = c.call(code, ext, body)
            assert (h["code"], h.get("remark")) == (SYSTEM_ERROR, SLAVE_REMARK), code
        # consumer offsets are the one write a slave takes (a consumer whose master is gone)
        h, _ = c.call(UPDATE_OFFSET, {"consumerGroup": "CGoff", "topic": "TBW102",
                                      "queueId": 0, "commitOffset": 42})
        assert h["code"] == SUCCESS
        assert _query_offset(c, "TBW102", "CGoff") == 42
    # nothing of the refused requests reached the slave's files
    topics = _config(tmp / "s" / "store", "topics.json").get("topicConfigTable", {})
    assert "RefusedOnSlave" not in topics and "NewOnSlave" not in topics and "TBW102" in topics


# -- HA.md §4.3/§4.4, checklist 24: registration and routes ---------------------------------

def _register(ns_addr: str, name: str, addr: str, broker_id: int, ha: str,
              topics: dict | None = None) -> tuple[RawClient, dict]:
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1},
        "topicConfigTable": topics or {}}}).encode()
    c = RawClient(ns_addr)
    h, _ = c.call(REGISTER_BROKER, {"brokerName": name, "brokerAddr": addr,
                                    "clusterName": "DefaultCluster", "haServerAddr": ha,
                                    "brokerId": broker_id, "compressed": "false",
                                    "bodyCrc32": 0}, body)
    return c, h


def test_routes_list_master_and_slave_and_a_slave_learns_its_master(pair):
    ns, master, slave, tmp = pair
    with RawClient(master.addr) as c:
        assert _create_topic(c, "RouteBoth")["code"] == SUCCESS
    route = None

    def both() -> bool:
        nonlocal route
        route = _route(ns.addr, "RouteBoth")
        return route is not None and len(route["brokerDatas"][0]["brokerAddrs"]) == 2
    _wait(both, "route with master and slave")
    assert route is not None
    addrs = {int(k): v for k, v in route["brokerDatas"][0]["brokerAddrs"].items()}
    assert addrs == {0: master.addr, 1: slave.addr}
    # a (raw) slave's registration is answered with its master's address and HA address
    host, port = master.addr.rsplit(":", 1)
    c, h = _register(ns.addr, "broker-a", "127.0.0.1:1", 2, "127.0.0.1:2",
                     {"OnlyOnASlave": {"topicName": "OnlyOnASlave", "readQueueNums": 1,
                                       "writeQueueNums": 1, "perm": 6}})
    with c:
        assert h["code"] == SUCCESS
        assert h["extFields"]["masterAddr"] == master.addr
        assert h["extFields"]["haServerAddr"] == f"{host}:{int(port) + 1}"
        # a slave's topics make no route
        assert _route(ns.addr, "OnlyOnASlave") is None
    # a slave of a broker name without a master learns nothing
    c, h = _register(ns.addr, "broker-nomaster", "127.0.0.1:3", 1, "127.0.0.1:4")
    with c:
        assert h["code"] == SUCCESS
        assert not h.get("extFields", {}).get("masterAddr")
        assert not h.get("extFields", {}).get("haServerAddr")


# -- HA.md §4.1/§4.2, checklist 23: metadata sync --------------------------------------------

def test_slave_copies_topics_groups_offsets_and_delay_offsets(pair):
    ns, master, slave, tmp = pair
    sstore = tmp / "s" / "store"
    with RawClient(master.addr) as c:
        assert _create_topic(c, "SyncedTopic", 2)["code"] == SUCCESS
        h, _ = c.call(UPDATE_GROUP, None, json.dumps(
            {"groupName": "SyncedGroup", "whichBrokerWhenConsumeSlowly": 1, "brokerId": 0,
             "retryMaxTimes": 3}).encode())
        assert h["code"] == SUCCESS
        h, _ = c.call(UPDATE_OFFSET, {"consumerGroup": "SyncedGroup", "topic": "SyncedTopic",
                                      "queueId": 1, "commitOffset": 7})
        assert h["code"] == SUCCESS
        # a delayed message delivered: the delay progress of level 1 moves
        h, _ = _send(c, "SyncedTopic", b"later", {"DELAY": "1"})
        assert h["code"] == SUCCESS

        def delay_body() -> bytes:
            h, body = c.call(GET_ALL_DELAY, None)
            assert h["code"] == SUCCESS
            return body
        _wait(lambda: b"1:1" in delay_body(), "level 1 delivered on the master")

    def synced() -> bool:
        topics = _config(sstore, "topics.json")
        groups = _config(sstore, "subscriptionGroup.json")
        offsets = _config(sstore, "consumerOffset.json").get("offsetTable", {})
        delay = sstore / "config" / "delayOffset.json"
        return ("SyncedTopic" in topics.get("topicConfigTable", {})
                and "SyncedGroup" in groups.get("subscriptionGroupTable", {})
                and {int(q): o for q, o in offsets.get("SyncedTopic@SyncedGroup", {}).items()}
                == {1: 7}
                and delay.exists() and "1:1" in delay.read_text())
    _wait(synced, "the slave's config files hold the master's metadata")
    topics = _config(sstore, "topics.json")
    assert topics["topicConfigTable"]["SyncedTopic"]["readQueueNums"] == 2
    from rocketstore.remoting import fastjson

    def same_version() -> bool:
        # the slave takes the master's data version with its table (RocketMQ: assignNewOne)
        with RawClient(master.addr) as c:
            h, body = c.call(GET_ALL_TOPICS, None)
        assert h["code"] == SUCCESS
        mine = _config(sstore, "topics.json")
        theirs = fastjson.loads(body)

        def version(doc: dict) -> dict:
            return {k: v for k, v in doc["dataVersion"].items() if v is not None}
        return (theirs["topicConfigTable"] == mine["topicConfigTable"]
                and version(theirs) == version(mine))
    _wait(same_version, "the slave's topics.json is the master's table and version")
    group = _config(sstore, "subscriptionGroup.json")["subscriptionGroupTable"]["SyncedGroup"]
    assert group["retryMaxTimes"] == 3
    with RawClient(master.addr) as c:
        _, delay_master = c.call(GET_ALL_DELAY, None)
    # delayOffset.json is the master's string as answered (written, not re-encoded)
    _wait(lambda: (sstore / "config" / "delayOffset.json").read_bytes() == delay_master,
          "delayOffset.json equals the master's answer")
    # the slave serves reads of the synced topic (pulls of an unknown topic: TOPIC_NOT_EXIST)
    with RawClient(slave.addr) as c:
        assert _pull(c, "NeverCreated", 0)["code"] == TOPIC_NOT_EXIST
        assert _pull(c, "SyncedTopic", 0)["code"] in (SUCCESS, PULL_NOT_FOUND)


# -- HA.md §5.2/§5.4, checklist 26: suggestWhichBrokerId and a slave's pull answers ----------

def test_pull_suggestion_and_slave_offset_rules(pair):
    ns, master, slave, tmp = pair
    with RawClient(master.addr) as c:
        assert _create_topic(c, "SuggestT")["code"] == SUCCESS
        for i in range(3):
            assert _send(c, "SuggestT", b"m%d" % i)[0]["code"] == SUCCESS
        # master, slaveReadEnable, consumer beyond the (0 %) in-memory share: the slave
        _wait(lambda: _pull(c, "SuggestT", 0)["code"] == SUCCESS, "dispatched")
        h = _pull(c, "SuggestT", 0)
        assert h["code"] == SUCCESS and int(h["extFields"]["suggestWhichBrokerId"]) == 1
        # the group's whichBrokerWhenConsumeSlowly is what is suggested
        h2, _ = c.call(UPDATE_GROUP, None, json.dumps(
            {"groupName": "SlowTo2", "whichBrokerWhenConsumeSlowly": 2}).encode())
        assert h2["code"] == SUCCESS
        h = _pull(c, "SuggestT", 0, group="SlowTo2")
        assert int(h["extFields"]["suggestWhichBrokerId"]) == 2
    _wait(lambda: "SuggestT" in _config(tmp / "s" / "store", "topics.json").get(
        "topicConfigTable", {}), "topic synced to the slave")
    with RawClient(slave.addr) as c:
        # offset 1000 is beyond the slave's queue (replicated or not): it keeps the
        # consumer's offset and asks it to retry (offsetCheckInSlave=false)
        h = _pull(c, "SuggestT", 1000)
        assert h["code"] == PULL_RETRY_IMMEDIATELY
        assert int(h["extFields"]["nextBeginOffset"]) == 1000
        assert int(h["extFields"]["suggestWhichBrokerId"]) == 0
        # the commit flag of a pull is ignored on a slave
        _pull(c, "SuggestT", 0, group="CGcommit", sys_flag=4 | 1, commit=2)
        assert _query_offset(c, "SuggestT", "CGcommit") != 2


# -- HA.md §5.3/§5.6, checklist 25/28: the client reads from the slave -----------------------

@pytest.fixture
def copied_pair(tmp_path: Path):
    """A master with 40 messages on ``FailT`` and a slave started on a copy of its store
    (stopped cleanly, copied, both started): the slave holds the same data without
    replication."""
    from rocketstore.client import Message, Producer
    ns = start_namesrv(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "s").mkdir()
    mstore, sstore = tmp_path / "m" / "store", tmp_path / "s" / "store"
    master = start_broker(mstore, ns.addr, conf=MASTER_CONF)
    slave = None
    try:
        with RawClient(master.addr) as c:
            assert _create_topic(c, "FailT", 2)["code"] == SUCCESS
        p = Producer("PG-fail", namesrv_addr=ns.addr)
        p.start()
        try:
            for i in range(40):
                p.send(Message("FailT", b"m%02d" % i))
        finally:
            p.shutdown()
        assert master.stop() == 0
        shutil.copytree(mstore, sstore)
        master = start_broker(mstore, ns.addr, conf=MASTER_CONF)
        slave = start_broker(sstore, ns.addr, conf=SLAVE_CONF)
        _wait(lambda: (r := _route(ns.addr, "FailT")) is not None
              and len(r["brokerDatas"][0]["brokerAddrs"]) == 2, "route with both nodes")
        yield ns, master, slave
    finally:
        if slave is not None:
            slave.stop()
        master.kill()
        ns.stop()


def _runtime(addr: str) -> dict:
    from rocketstore.remoting import fastjson
    with RawClient(addr) as c:
        h, body = c.call(RUNTIME_INFO, None)
    return fastjson.loads(body)["table"]


def test_consumer_follows_suggestion_and_continues_from_slave_after_master_kill(copied_pair):
    """The store of the slave is a copy of the master's (see ``copied_pair``)."""
    from rocketstore.client import (ConsumeConcurrentlyStatus, Message, MessageQueue,
                                    Producer, PushConsumer)
    from rocketstore.errors import MQClientError, TransportError
    ns, master, slave = copied_pair
    got: list[bytes] = []
    lock = threading.Lock()
    release = threading.Event()

    def listener(msgs, ctx):
        with lock:
            got.extend(bytes(m.body) for m in msgs)
            n = len(got)
        if n >= 10:
            release.wait(WAIT_S)        # hold the rest until the master is dead
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer("CG-fail", namesrv_addr=ns.addr,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=2,
                     pull_threshold_for_queue=2, consume_thread_nums=1,
                     poll_name_server_interval=1000)
    c.subscribe("FailT", "*")
    c.register_message_listener(listener)
    c.start()
    p = Producer("PG-after", namesrv_addr=ns.addr, poll_name_server_interval=1000,
                 retry_times_when_send_failed=0)
    try:
        _wait(lambda: len(got) >= 10, "first deliveries")
        # the master suggested the slave (slaveReadEnable, consumer beyond 0 % of RAM), the
        # client followed: the slave served pulls while the master was alive
        t = c.instance.transport
        assert int(_runtime(slave.addr)["msgGetTotalTodayNow"]) > 0
        with lock:
            before_kill = len(got)
        master.kill()                   # kill -9
        release.set()
        _wait(lambda: len(got) >= 40, "all 40 messages, the rest from the slave")
        with lock:
            assert sorted(set(got)) == sorted(b"m%02d" % i for i in range(40))
        assert before_kill < 40         # some were pulled after the kill: from the slave
        # offsets are committed to the slave (the only node left)
        c.instance.persist_all_consumer_offset()
        with RawClient(slave.addr) as rc:
            _wait(lambda: sum(max(0, _query_offset_q(rc, "FailT", "CG-fail", q))
                              for q in (0, 1)) == 40, "offsets committed on the slave")
        # a broker name with no master takes no writes, and no queue locks
        _wait(lambda: _no_master_route(ns.addr), "route without the master")
        p.start()
        with pytest.raises(MQClientError):
            p.send(Message("FailT", b"no master"))
        with pytest.raises(TransportError):
            t.lock_batch_mq("broker-a", "CG-fail", c.client_id,
                            {MessageQueue("FailT", "broker-a", 0)})
    finally:
        release.set()
        p.shutdown()
        c.shutdown()


def _query_offset_q(c: RawClient, topic: str, group: str, queue_id: int) -> int:
    h, _ = c.call(QUERY_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id})
    return int(h["extFields"]["offset"]) if h["code"] == SUCCESS else -1


def _no_master_route(ns_addr: str) -> bool:
    r = _route(ns_addr, "FailT")
    return r is not None and "0" not in {str(k) for k in r["brokerDatas"][0]["brokerAddrs"]}


def test_a_slave_gets_no_master_address_once_the_master_is_not_alive():
    """RouteInfoManager.registerBroker answers a slave with its master's addresses only while
    the master is in the live table. An UNREGISTER_BROKER naming the master's address with
    another id drops the address from the live table but not from ``brokerAddrs`` (4.9.8
    does the same); a slave registering then learned the dead master's address."""
    from rocketstore.namesrv.routeinfo import RouteInfoManager
    routes = RouteInfoManager()
    dv = {"counter": 1, "timestamp": 1}
    routes.register_broker("c", "127.0.0.1:10911", "b", 0, "127.0.0.1:10912", dv, {})
    assert routes.register_broker("c", "127.0.0.1:10921", "b", 1, "127.0.0.1:10922", dv, {}) \
        == ("127.0.0.1:10912", "127.0.0.1:10911")
    routes.unregister_broker("c", "127.0.0.1:10911", "b", 5)
    assert routes.register_broker("c", "127.0.0.1:10921", "b", 1, "127.0.0.1:10922", dv, {}) \
        == (None, None)


# -- HA.md §4.2, §7.2: a rocketstore slave of a master that answers as Apache RocketMQ's ----------

# what a 4.9.8 master's encode() answers: fastjson, integer keys unquoted
JAVA_TOPICS = (b'{"dataVersion":{"counter":5,"timestamp":1700000000000},"topicConfigTable":'
               b'{"JavaTopic":{"order":false,"perm":6,"readQueueNums":3,"topicFilterType":'
               b'"SINGLE_TAG","topicName":"JavaTopic","topicSysFlag":0,"writeQueueNums":3}}}')
JAVA_OFFSETS = b'{"offsetTable":{"JavaTopic@JavaGroup":{0:12,1:7}}}'
JAVA_DELAY = b'{"offsetTable":{1:340,2:0}}'
JAVA_GROUPS = (b'{"dataVersion":{"counter":2,"timestamp":1700000000001},"subscriptionGroupTable":'
               b'{"JavaGroup":{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,'
               b'"consumeFromMinEnable":true,"groupName":"JavaGroup",'
               b'"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":5,"retryQueueNums":1,'
               b'"whichBrokerWhenConsumeSlowly":1}}}')


class _FakeMaster:
    """Two listening sockets (port and port - 2) that answer the four metadata requests with a
    Java master's bodies and record (port, code, extFields, body length) of each request."""

    def __init__(self) -> None:
        import socket
        from rocketstore.remoting.broker_server import free_port_pair
        self.port = free_port_pair()
        self.seen: list[tuple[int, int, dict, int]] = []
        self.socks = []
        for port in (self.port, self.port - 2):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            self.socks.append(s)
            threading.Thread(target=self._accept, args=(s, port), daemon=True).start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self, s, port: int) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, port), daemon=True).start()

    def _serve(self, conn, port: int) -> None:
        import struct
        bodies = {GET_ALL_TOPICS: JAVA_TOPICS, GET_ALL_OFFSETS: JAVA_OFFSETS,
                  GET_ALL_DELAY: JAVA_DELAY, GET_ALL_GROUPS: JAVA_GROUPS}
        buf = b""
        with conn:
            while True:
                got = recv_frame(conn, buf)
                if got is None:
                    return
                header, request_body, buf = got
                body_len = len(request_body)
                code = header["code"]
                self.seen.append((port, code, header.get("extFields") or {}, body_len))
                body = bodies.get(code, b"")
                rh = json.dumps({"code": 0 if code in bodies else 1, "flag": 1,
                                 "opaque": header["opaque"], "language": "JAVA",
                                 "version": 409}).encode()
                conn.sendall(struct.pack(">ii", 4 + len(rh) + len(body), len(rh)) + rh + body)

    def close(self) -> None:
        for s in self.socks:
            s.close()


def test_slave_syncs_from_a_master_answering_as_rocketmq(tmp_path: Path):
    """A master that registers with the NameServer and answers as 4.9.8's does (fastjson
    bodies, unquoted integer keys): the slave asks GET_ALL_TOPIC_CONFIG on port - 2, the
    other three on the port, with no header fields and no body, and writes what it got."""
    fake = _FakeMaster()
    ns = start_namesrv(tmp_path)
    reg = None
    slave = None
    try:
        reg, h = _register(ns.addr, "broker-j", fake.addr, 0, "127.0.0.1:1")
        assert h["code"] == SUCCESS
        (tmp_path / "s").mkdir()
        store = tmp_path / "s" / "store"
        slave = start_broker(store, ns.addr, conf=SLAVE_CONF, name="broker-j")

        def synced() -> bool:
            offsets = _config(store, "consumerOffset.json").get("offsetTable", {})
            return ("JavaTopic" in _config(store, "topics.json").get("topicConfigTable", {})
                    and "JavaGroup" in _config(store, "subscriptionGroup.json").get(
                        "subscriptionGroupTable", {})
                    and "JavaTopic@JavaGroup" in offsets
                    and (store / "config" / "delayOffset.json").exists())
        _wait(synced, "the slave wrote the master's metadata")
        by_code = {code: (port, ext, n) for port, code, ext, n in fake.seen}
        assert by_code[GET_ALL_TOPICS][0] == fake.port - 2
        for code in (GET_ALL_OFFSETS, GET_ALL_DELAY, GET_ALL_GROUPS):
            assert by_code[code][0] == fake.port
        assert all(ext == {} and n == 0 for _, ext, n in by_code.values())
        topics = _config(store, "topics.json")
        assert topics["dataVersion"]["counter"] == 5
        assert topics["dataVersion"]["timestamp"] == 1700000000000
        assert topics["topicConfigTable"]["JavaTopic"]["readQueueNums"] == 3
        offsets = _config(store, "consumerOffset.json")["offsetTable"]["JavaTopic@JavaGroup"]
        assert {int(q): o for q, o in offsets.items()} == {0: 12, 1: 7}
        assert (store / "config" / "delayOffset.json").read_bytes() == JAVA_DELAY
        groups = _config(store, "subscriptionGroup.json")
        assert groups["subscriptionGroupTable"]["JavaGroup"]["retryMaxTimes"] == 5
        assert groups["dataVersion"]["counter"] == 2
    finally:
        if slave is not None:
            slave.stop()
        if reg is not None:
            reg.close()
        ns.stop()
        fake.close()


def test_registered_ha_address_uses_broker_ip2_else_broker_ip1():
    """``haServerAddr`` is brokerIP2:port+1; left unset, brokerIP2 follows brokerIP1 (as both
    default to the machine's address in RocketMQ), so a slave on another host can reach it."""
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.remoting.broker_server import BrokerServer
    from rocketstore.store.config import StoreConfig
    got = []
    for bc in (BrokerConfig(), BrokerConfig(broker_ip1="10.0.0.1"),
               BrokerConfig(broker_ip1="10.0.0.1", broker_ip2="10.0.0.2", listen_port=20911)):
        server = BrokerServer("/nonexistent", bc, StoreConfig())
        got.append(server.ha_server_addr)
        server._executor.shutdown()
    assert got == ["127.0.0.1:10912", "10.0.0.1:10912", "10.0.0.2:20912"]
