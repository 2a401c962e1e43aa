"""The NameServer over real sockets: registration, routes, liveness, KV config, bad frames."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib

import pytest

from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import TransportError
from rocketstore.namesrv import NameServer
from rocketstore.remoting import fastjson
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.server import LoopThread


def topic_cfg(name: str, queues: int = 4, perm: int = 6) -> dict:
    return {"order": False, "perm": perm, "readQueueNums": queues, "topicFilterType": "SINGLE_TAG",
            "topicName": name, "topicSysFlag": 0, "writeQueueNums": queues}


def register_body(topics: dict, counter: int = 1) -> bytes:
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1700000000000 + counter},
        "topicConfigTable": topics}}).encode()


def register(client, ns, name="broker-a", addr="10.0.0.1:10911", broker_id=0, topics=None,
             counter=1, cluster="DefaultCluster", crc=None, body=None, compressed=False):
    body = body if body is not None else register_body(topics or {"T": topic_cfg("T")}, counter)
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
           "haServerAddr": addr.rsplit(":", 1)[0] + ":10912", "brokerId": broker_id,
           "compressed": compressed, "bodyCrc32": crc if crc is not None else zlib.crc32(body) & 0x7FFFFFFF}
    return client.invoke(ns.addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body))


def route(client, ns, topic):
    r = client.invoke(ns.addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    return r.code, (json.loads(r.body) if r.code == 0 else r.remark)


@pytest.fixture
def loop():
    lt = LoopThread(use_uvloop=False)
    yield lt
    lt.stop()


@pytest.fixture
def ns(loop, tmp_path):
    server = NameServer("127.0.0.1", 0, kv_config_path=str(tmp_path / "kvConfig.json"),
                        broker_expire_s=0.6, scan_interval_s=0.1)
    loop.run(server.start())
    yield server
    loop.run(server.stop())


@pytest.fixture
def client(loop):
    c = RemotingClient(loop=loop)
    yield c
    c.close()


def test_route_after_registration_has_quoted_broker_ids(client, ns):
    assert register(client, ns, topics={"T": topic_cfg("T", 2), "U": topic_cfg("U", 3, 7)}).code == 0
    register(client, ns, name="broker-b", addr="10.0.0.2:10911", topics={"T": topic_cfg("T", 3)})
    code, r = route(client, ns, "T")
    assert code == ResponseCode.SUCCESS
    assert r["brokerDatas"] == [
        {"brokerAddrs": {"0": "10.0.0.1:10911"}, "brokerName": "broker-a", "cluster": "DefaultCluster"},
        {"brokerAddrs": {"0": "10.0.0.2:10911"}, "brokerName": "broker-b", "cluster": "DefaultCluster"}]
    assert r["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 2, "topicSysFlag": 0, "writeQueueNums": 2},
        {"brokerName": "broker-b", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0, "writeQueueNums": 3}]
    assert r["filterServerTable"] == {} and "orderTopicConf" not in r
    code, remark = route(client, ns, "Nope")
    assert code == ResponseCode.TOPIC_NOT_EXIST
    assert remark.startswith("No topic route info in name server for the topic: Nope")


def test_reregistration_updates_but_never_removes_topics(client, ns):
    register(client, ns, topics={"T": topic_cfg("T", 2), "Old": topic_cfg("Old")}, counter=1)
    register(client, ns, topics={"T": topic_cfg("T", 8)}, counter=2)       # Old not listed
    assert route(client, ns, "T")[1]["queueDatas"][0]["writeQueueNums"] == 8
    assert route(client, ns, "Old")[0] == ResponseCode.SUCCESS
    # same data version: the topic table is not re-read
    register(client, ns, topics={"T": topic_cfg("T", 1)}, counter=2)
    assert route(client, ns, "T")[1]["queueDatas"][0]["writeQueueNums"] == 8


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _ProbedLock:
    """The route tables' lock, with ``probe()`` run on each release by a registration thread
    while that registration's topics are partly applied (the first topic in the table, the
    last not yet): what other connections get at that moment."""

    def __init__(self, routes, first: str, last: str, probe) -> None:
        self.inner, self.routes, self.first, self.last = routes._lock, routes, first, last
        self.probe, self.fired = probe, False

    def __enter__(self) -> None:
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()
        table = self.routes.topic_queue_table
        if not self.fired and not _on_event_loop() and self.first in table \
                and self.last not in table:
            self.fired = True
            self.probe()


def test_route_lookups_are_answered_while_a_big_registration_is_applied(client, ns):
    """A master registering thousands of topics does not hold the route tables for all of
    them at once: a GET_ROUTEINFO_BY_TOPIC on another connection is answered while the
    registration is half applied (4.9.8 holds its write lock over the whole table; 200,000
    topics held every route lookup ~200 ms here), and the registration then completes."""
    from rawwire import RawClient
    register(client, ns, name="broker-s", addr="10.0.0.9:10911",
             topics={"Small": topic_cfg("Small")})
    n = 5000
    seen = []

    def lookup() -> None:
        with RawClient(ns.addr) as c:
            h, body = c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Small"})
        seen.append((h["code"], json.loads(body)["brokerDatas"][0]["brokerName"],
                     f"Big{n - 1}" in ns.routes.topic_queue_table))

    ns.routes._lock = _ProbedLock(ns.routes, "Big0", f"Big{n - 1}", lookup)
    r = register(client, ns, topics={f"Big{i}": topic_cfg(f"Big{i}") for i in range(n)})
    assert r.code == ResponseCode.SUCCESS
    assert seen == [(ResponseCode.SUCCESS, "broker-s", False)]   # answered mid-registration
    assert route(client, ns, f"Big{n - 1}")[0] == ResponseCode.SUCCESS
    assert len(ns.routes.topic_list()) == n + 1


def test_a_broker_leaving_mid_registration_keeps_none_of_its_topics(client, ns):
    """The registration is applied in steps: a broker that unregisters (or whose connection
    closes, or expires) between two steps loses its topics, and the steps left do not bring
    them back."""
    n = 5000
    ns.routes._lock = _ProbedLock(ns.routes, "Big0", f"Big{n - 1}", lambda: (
        ns.routes.unregister_broker("DefaultCluster", "10.0.0.1:10911", "broker-a", 0)))
    r = register(client, ns, topics={f"Big{i}": topic_cfg(f"Big{i}") for i in range(n)})
    assert r.code == ResponseCode.SUCCESS
    assert ns.routes._lock.fired
    assert ns.routes.topic_list() == []
    assert route(client, ns, f"Big{n - 1}")[0] == ResponseCode.TOPIC_NOT_EXIST


class _WalkCountingTable(dict):
    """The topic table, counting how often it is walked whole."""
    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()

    def keys(self):
        type(self).walks += 1
        return super().keys()

    def items(self):
        type(self).walks += 1
        return super().items()

    def values(self):
        type(self).walks += 1
        return super().values()


def test_a_broker_leaving_touches_only_its_own_topics(loop, client, ns):
    """Any peer can register as a broker and close its connection; that removal runs on the
    event loop, under the route lock. It costs the leaving broker's topics, not the whole
    table: walking 200,000 topics for a one-topic broker held every lookup ~60 ms per
    connect-register-close. The other brokers' routes stay, and so do write-perm changes."""
    _WalkCountingTable.walks = 0
    ns.routes.topic_queue_table = _WalkCountingTable()
    register(client, ns, topics={f"Keep{i}": topic_cfg(f"Keep{i}") for i in range(2000)})
    for i in range(3):
        c = RemotingClient(loop=loop)
        register(c, ns, name="broker-z", addr="10.0.0.5:10911", topics={
            "Shared": topic_cfg("Shared"), f"Z{i}": topic_cfg(f"Z{i}")}, counter=i + 1)
        assert route(client, ns, f"Z{i}")[0] == ResponseCode.SUCCESS
        c.close()
        deadline = time.monotonic() + 5
        while route(client, ns, f"Z{i}")[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert route(client, ns, f"Z{i}")[0] == ResponseCode.TOPIC_NOT_EXIST
    assert route(client, ns, "Shared")[0] == ResponseCode.TOPIC_NOT_EXIST
    assert route(client, ns, "Keep1999")[0] == ResponseCode.SUCCESS
    # the broker's own topics only, for the perm codes and DELETE_TOPIC_IN_NAMESRV too
    assert ns.routes.wipe_write_perm("broker-a") == 2000
    assert route(client, ns, "Keep7")[1]["queueDatas"][0]["perm"] == 4
    assert ns.routes.add_write_perm("broker-a") == 2000
    ns.routes.delete_topic("Keep7")
    assert route(client, ns, "Keep7")[0] == ResponseCode.TOPIC_NOT_EXIST
    assert ns.routes.wipe_write_perm("broker-a") == 1999
    assert _WalkCountingTable.walks == 0


def test_slave_gets_master_addresses_and_appears_in_the_route(client, ns):
    register(client, ns)
    r = register(client, ns, addr="10.0.0.9:10911", broker_id=1, topics={"T": topic_cfg("T", 1)})
    assert r.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}
    code, rt = route(client, ns, "T")
    assert rt["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.9:10911"}
    assert rt["queueDatas"][0]["writeQueueNums"] == 4        # slaves do not change queue data


def test_broker_expires_without_registration(loop, client, ns):
    broker_side = RemotingClient(loop=loop)
    register(broker_side, ns)
    assert route(client, ns, "T")[0] == 0
    deadline = time.monotonic() + 10
    while route(client, ns, "T")[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert route(client, ns, "T")[0] == ResponseCode.TOPIC_NOT_EXIST
    # the expired broker's connection is closed, as RocketMQ's scanNotActiveBroker does
    deadline = time.monotonic() + 5
    while any(c.attributes.get("broker_addr") for c in list(ns.server.connections)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(c.attributes.get("broker_addr") for c in list(ns.server.connections))
    assert len(ns.server.connections) == 1          # the querying client's stays open
    broker_side.close()
    info = json.loads(client.invoke(ns.addr, RemotingCommand.request(
        RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_closed_broker_connection_removes_it_at_once(loop, ns):
    c = RemotingClient(loop=loop)
    register(c, ns, name="broker-z", addr="10.0.0.5:10911", topics={"Z": topic_cfg("Z")})
    other = RemotingClient(loop=loop)
    assert route(other, ns, "Z")[0] == 0
    c.close()
    deadline = time.monotonic() + 5
    while route(other, ns, "Z")[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert route(other, ns, "Z")[0] == ResponseCode.TOPIC_NOT_EXIST
    other.close()


def test_unregister_cluster_info_and_topic_list(client, ns):
    register(client, ns, topics={"T": topic_cfg("T"), "U": topic_cfg("U")})
    register(client, ns, name="broker-b", addr="10.0.0.2:10911", cluster="C2",
             topics={"T": topic_cfg("T")})
    info = json.loads(client.invoke(ns.addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"], "C2": ["broker-b"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "10.0.0.2:10911"}
    tl = json.loads(client.invoke(ns.addr, RemotingCommand.request(
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
    assert tl == {"topicList": ["T", "U"]}
    r = client.invoke(ns.addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911", "clusterName": "DefaultCluster",
        "brokerId": 0}))
    assert r.code == 0
    assert route(client, ns, "U")[0] == ResponseCode.TOPIC_NOT_EXIST      # only on broker-a
    assert [q["brokerName"] for q in route(client, ns, "T")[1]["queueDatas"]] == ["broker-b"]


def test_kv_config_persists_in_rocketmq_json(loop, client, ns, tmp_path):
    def kv(code, **ext):
        return client.invoke(ns.addr, RemotingCommand.request(code, ext))
    assert kv(RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T",
              value="broker-a:4;broker-b:4").code == 0
    r = kv(RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T")
    assert r.code == 0 and r.ext_fields["value"] == "broker-a:4;broker-b:4"
    missing = kv(RequestCode.GET_KV_CONFIG, namespace="N", key="k")
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "No config item, Namespace: N Key: k"
    lst = kv(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ORDER_TOPIC_CONFIG")
    assert json.loads(lst.body) == {"table": {"T": "broker-a:4;broker-b:4"}}
    on_disk = fastjson.loads((tmp_path / "kvConfig.json").read_text())
    assert on_disk == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4;broker-b:4"}}}
    # the broker's registration response carries the namespace (it marks those topics order)
    assert json.loads(register(client, ns).body) == {"table": {"T": "broker-a:4;broker-b:4"}}
    # a restarted NameServer reads it back; orderMessageEnable serves it in routes
    again = NameServer("127.0.0.1", 0, kv_config_path=str(tmp_path / "kvConfig.json"),
                       order_message_enable=True)
    loop.run(again.start())
    try:
        register(client, again)
        assert route(client, again, "T")[1]["orderTopicConf"] == "broker-a:4;broker-b:4"
    finally:
        loop.run(again.stop())
    assert kv(RequestCode.DELETE_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T").code == 0
    assert fastjson.loads((tmp_path / "kvConfig.json").read_text()) == {"configTable": {}}


def test_register_checks_crc_and_reads_the_compressed_body(client, ns):
    bad = register(client, ns, crc=12345)
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark == "crc32 not match"
    dv = b'{"counter":3,"timestamp":1}'
    entries = [b"C 2 2 6 SINGLE_TAG"]
    raw = struct.pack(">i", len(dv)) + dv + struct.pack(">i", len(entries))
    raw += b"".join(struct.pack(">i", len(e)) + e for e in entries) + struct.pack(">i", 2) + b"[]"
    assert register(client, ns, body=zlib.compress(raw, 9), compressed=True).code == 0
    assert route(client, ns, "C")[1]["queueDatas"][0]["readQueueNums"] == 2


def test_unknown_code_and_missing_field_get_answers(client, ns):
    r = client.invoke(ns.addr, RemotingCommand.request(9999))
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert r.remark == " request type 9999 not supported"
    r = client.invoke(ns.addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
    assert r.code == ResponseCode.SYSTEM_ERROR and "the custom field <topic> is null" in r.remark


def _raw(ns) -> socket.socket:
    host, port = ns.addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


@pytest.mark.parametrize("junk", [
    struct.pack(">i", -1) + b"abcd",                               # negative length
    struct.pack(">i", 0x7FFFFFFF) + b"abcd",                       # huge length
    struct.pack(">ii", 12, 500) + b"{}{}{}{}",                     # header past the frame
    struct.pack(">ii", 10, 6) + b"{code:",                         # broken JSON
])
def test_malformed_frames_close_only_that_connection(client, ns, junk):
    register(client, ns)
    s = _raw(ns)
    s.sendall(junk)
    s.settimeout(5)
    assert s.recv(100) == b""          # closed by the server, nothing answered
    s.close()
    assert route(client, ns, "T")[0] == 0      # a well-behaved client is unaffected


def test_half_a_frame_then_silence_does_not_block_others(client, ns):
    register(client, ns)
    s = _raw(ns)
    s.sendall(struct.pack(">i", 1000) + b"{")
    assert route(client, ns, "T")[0] == 0
    s.close()


def test_idle_connections_are_closed(loop):
    server = NameServer("127.0.0.1", 0)
    server.server.idle_timeout = 0.3
    loop.run(server.start())
    try:
        s = _raw(server)
        s.settimeout(10)
        t0 = time.monotonic()
        assert s.recv(10) == b""
        assert time.monotonic() - t0 < 5
        s.close()
    finally:
        loop.run(server.stop())


def test_client_timeout_and_refused_connection_are_transport_errors(loop):
    c = RemotingClient(loop=loop, connect_timeout=1)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(TransportError, match="connect failed"):
        c.invoke(f"127.0.0.1:{port}", RemotingCommand.request(105, {"topic": "T"}))
    with pytest.raises(TransportError, match="not host:port"):
        c.invoke("nohost", RemotingCommand.request(105))
    with socket.socket() as mute:          # accepts, never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        with pytest.raises(TransportError, match="no response within 0.2 s"):
            c.invoke(f"127.0.0.1:{mute.getsockname()[1]}", RemotingCommand.request(105), timeout=0.2)
    c.close()
    with pytest.raises(TransportError, match="closed"):
        c.invoke("127.0.0.1:1", RemotingCommand.request(105))


def test_namesrv_command_serves_and_stops_on_sigterm(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore", "namesrv", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = ""
        while not line.startswith("rocketstore namesrv: listening on"):
            line = proc.stderr.readline()
            assert line, "namesrv exited before listening"
        addr = line.strip().rsplit(" ", 1)[1]
        assert addr.startswith("127.0.0.1:")
        c = RemotingClient()
        try:
            r = c.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "X"}))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_namesrv_command_refuses_a_bad_listen_address():
    proc = subprocess.run([sys.executable, "-m", "rocketstore", "namesrv", "--listen", "127.0.0.1:99999"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rocketstore namesrv: --listen '127.0.0.1:99999': the port must "
                                   "be a number 0-65535")
