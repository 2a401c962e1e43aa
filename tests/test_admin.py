"""``rocketstore admin``: every command against real ``rocketstore namesrv`` and ``broker``
processes, through the CLI's ``main(argv)`` (output captured) and, for the exit-code and
one-line-error contract, as a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from messaging_support import until
from rocketstore.cli import main
from rocketstore.client.producer import Producer
from rocketstore.client.pull_consumer import PullConsumer
from rocketstore.store import Message
from servers import REPO, start_broker, start_namesrv  # tests/servers.py


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    try:
        yield ns.addr, broker.addr
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


def admin(capsys, *argv: str, rc: int = 0) -> str:
    """Run ``rocketstore admin ARGV``; returns stdout, checks the exit code."""
    code = main(["admin", *argv])
    out, err = capsys.readouterr()
    assert code == rc, f"exit {code}: {err}"
    return out if rc == 0 else err


def admin_json(capsys, *argv: str):
    return json.loads(admin(capsys, *argv, "--json"))


def send(ns: str, topic: str, bodies: list[str], keys: str | None = None) -> list:
    with Producer("pg-admin-test", namesrv_addr=ns) as p:
        return [p.send(Message(topic, b.encode(), keys=keys)) for b in bodies]


def consume_all(ns: str, group: str, topic: str, n: int) -> list[str]:
    """Poll ``n`` messages of ``topic`` as ``group`` (from the first offset), commit, leave."""
    c = PullConsumer(group, namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     auto_commit=False)
    c.subscribe(topic)
    c.start()
    got: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [bytes(m.body).decode() for m in c.poll(1000)]
        c.commit()
    finally:
        c.shutdown()
    return got


def test_cluster_list(cluster, capsys):
    ns, addr = cluster
    out = admin(capsys, "clusterList", "-n", ns)
    assert out.splitlines()[0].split() == ["cluster", "broker", "name", "id", "address",
                                           "version", "in", "tps", "out", "tps", "#Hour",
                                           "#SPACE"]
    row = out.splitlines()[2].split()
    assert row[:5] == ["DefaultCluster", "broker-a", "0", addr, "V4_9_8"]
    doc = admin_json(capsys, "clusterList", "-n", ns)
    assert doc["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert doc["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": addr}


def test_topic_lifecycle(cluster, capsys):
    ns, addr = cluster
    out = admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminT1", "-r", "3", "-w", "3")
    assert addr in out and "AdminT1" in out
    until(lambda: "AdminT1" in admin_json(capsys, "topicList", "-n", ns)["topicList"],
          "AdminT1 registered")
    assert "AdminT1" in admin(capsys, "topicList", "-n", ns).split()
    route = admin_json(capsys, "topicRoute", "-n", ns, "-t", "AdminT1")
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
            for q in route["queueDatas"]] == [("broker-a", 3, 3, 6)]
    rows = admin(capsys, "topicRoute", "-n", ns, "-t", "AdminT1").splitlines()[2:]
    assert rows[0].split() == ["broker-a", addr, "3", "3", "6"]

    send(ns, "AdminT1", ["a", "b", "c", "d", "e"])
    status = until(lambda: (lambda st: st if sum(s["maxOffset"] for s in st) == 5 else None)(
        admin_json(capsys, "topicStatus", "-n", ns, "-t", "AdminT1")), "5 messages dispatched")
    assert [s["queueId"] for s in status] == [0, 1, 2]
    assert all(s["lastUpdateTimestamp"] > 0 for s in status if s["maxOffset"] > 0)
    table = admin(capsys, "topicStatus", "-n", ns, "-t", "AdminT1").splitlines()
    assert len(table) == 2 + 3

    # changing the queue count shows in the route
    admin(capsys, "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "AdminT1", "-r", "4",
          "-w", "4")
    until(lambda: admin_json(capsys, "topicRoute", "-n", ns, "-t",
                             "AdminT1")["queueDatas"][0]["writeQueueNums"] == 4, "4 queues")

    out = admin(capsys, "deleteTopic", "-n", ns, "-t", "AdminT1")
    assert "deleted topic AdminT1 from 1 broker" in out
    assert "AdminT1" not in admin_json(capsys, "topicList", "-n", ns)["topicList"]
    err = admin(capsys, "topicRoute", "-n", ns, "-t", "AdminT1", rc=2)
    assert "TOPIC_NOT_EXIST" in err and len(err.strip().splitlines()) == 1
    err = admin(capsys, "topicStatus", "-n", ns, "-t", "AdminT1", rc=2)
    assert "TOPIC_NOT_EXIST" in err
    # its queues went with it (RocketMQ's cleanUnusedTopic): created again, it starts empty
    admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminT1", "-r", "3", "-w", "3")
    status = until(lambda: admin_json(capsys, "topicStatus", "-n", ns, "-t", "AdminT1"),
                   "AdminT1 created again")
    assert [(s["minOffset"], s["maxOffset"]) for s in status] == [(0, 0)] * 3


def test_send_and_query(cluster, capsys):
    ns, addr = cluster
    doc = admin_json(capsys, "sendMessage", "-n", ns, "-t", "AdminT2", "-p", "hello admin",
                     "-k", "order-42", "-c", "TagA")
    assert doc["status"] == "SEND_OK" and doc["brokerName"] == "broker-a"
    by_id = admin_json(capsys, "queryMsgById", "-n", ns, "-i", doc["offsetMsgId"])
    assert by_id["body"] == "hello admin" and by_id["keys"] == ["order-42"]
    assert by_id["tags"] == "TagA" and by_id["msgId"] == doc["msgId"]
    assert by_id["queueOffset"] == doc["queueOffset"]
    table = admin(capsys, "queryMsgById", "-n", ns, "-i", doc["offsetMsgId"])
    assert "hello admin" in table and "order-42" in table
    # the client id (UNIQ_KEY) is found through the index when the topic is given; the index
    # is built by the store's dispatch thread a moment after SEND_OK, hence the wait
    def by_uniq_key():
        code = main(["admin", "queryMsgById", "-n", ns, "-i", doc["msgId"], "-t", "AdminT2",
                     "--json"])
        out = capsys.readouterr().out
        return json.loads(out) if code == 0 else None
    by_uniq = until(by_uniq_key, "client message id indexed")
    assert by_uniq["offsetMsgId"] == doc["offsetMsgId"]

    def by_key():
        code = main(["admin", "queryMsgByKey", "-n", ns, "-t", "AdminT2", "-k", "order-42",
                     "--json"])
        out = capsys.readouterr().out
        return json.loads(out) if code == 0 else None
    found = until(by_key, "key indexed")
    assert [(m["body"], m["offsetMsgId"]) for m in found] == [("hello admin", doc["offsetMsgId"])]
    err = admin(capsys, "queryMsgByKey", "-n", ns, "-t", "AdminT2", "-k", "no-such-key", rc=2)
    assert "no message of topic AdminT2 has key 'no-such-key'" in err


def test_consumer_progress_connection_and_reset(cluster, capsys):
    ns, addr = cluster
    admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminT3", "-r", "2", "-w", "2")
    until(lambda: "AdminT3" in admin_json(capsys, "topicList", "-n", ns)["topicList"],
          "AdminT3 registered")
    before = int(time.time() * 1000) - 1
    first = [f"m{i}" for i in range(10)]
    send(ns, "AdminT3", first)

    # online: the group's connection and subscription
    c = PullConsumer("cg-admin", namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     auto_commit=False)
    c.subscribe("AdminT3")
    c.start()
    got: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += [bytes(m.body).decode() for m in c.poll(1000)]
        c.commit()
        conn = admin_json(capsys, "consumerConnection", "-n", ns, "-g", "cg-admin")
        assert [x["clientId"] for x in conn["connectionSet"]] == [c.instance.client_id]
        assert conn["subscriptionTable"]["AdminT3"]["subString"] == "*"
        assert conn["consumeType"] == "CONSUME_ACTIVELY"
        assert conn["connectionSet"][0]["language"] == "PYTHON"   # what our client says
        assert conn["connectionSet"][0]["version"] == 409
        out = admin(capsys, "consumerConnection", "-n", ns, "-g", "cg-admin")
        assert c.instance.client_id in out and "AdminT3: *" in out
    finally:
        c.shutdown()
    assert sorted(got) == sorted(first)

    send(ns, "AdminT3", ["late-1", "late-2", "late-3"])
    progress = until(lambda: (lambda p: p if sum(r["brokerOffset"] for r in p["offsetTable"])
                              == 13 else None)(
        admin_json(capsys, "consumerProgress", "-n", ns, "-g", "cg-admin", "-t", "AdminT3")),
        "13 messages dispatched")
    rows = progress["offsetTable"]
    assert sum(r["brokerOffset"] for r in rows) == 13
    assert sum(r["consumerOffset"] for r in rows) == 10
    assert progress["diffTotal"] == 13 - 10 == sum(r["lag"] for r in rows)
    # without -t: the topics the group has offsets on
    progress_all = admin_json(capsys, "consumerProgress", "-n", ns, "-g", "cg-admin")
    assert {r["topic"] for r in progress_all["offsetTable"]} >= {"AdminT3"}
    table = admin(capsys, "consumerProgress", "-n", ns, "-g", "cg-admin", "-t", "AdminT3")
    assert "lag total: 3" in table

    # nobody online now: the broker moves the offsets itself
    reset = admin_json(capsys, "resetOffsetByTime", "-n", ns, "-g", "cg-admin", "-t", "AdminT3",
                       "-s", str(before))
    assert [r["offset"] for r in reset["offsetTable"]] == [0, 0]
    progress = admin_json(capsys, "consumerProgress", "-n", ns, "-g", "cg-admin", "-t", "AdminT3")
    assert progress["diffTotal"] == 13
    again = consume_all(ns, "cg-admin", "AdminT3", 13)
    assert sorted(again) == sorted(first + ["late-1", "late-2", "late-3"])
    assert admin_json(capsys, "consumerProgress", "-n", ns, "-g", "cg-admin", "-t",
                      "AdminT3")["diffTotal"] == 0

    # -s -1: to the end (skip everything)
    send(ns, "AdminT3", ["skipped"])
    until(lambda: sum(s["maxOffset"] for s in admin_json(capsys, "topicStatus", "-n", ns, "-t",
                                                         "AdminT3")) == 14, "14 dispatched")
    reset = admin_json(capsys, "resetOffsetByTime", "-n", ns, "-g", "cg-admin", "-t", "AdminT3",
                       "-s", "-1")
    assert sum(r["offset"] for r in reset["offsetTable"]) == 14
    err = admin(capsys, "consumerConnection", "-n", ns, "-g", "cg-admin", rc=2)
    assert "CONSUMER_NOT_ONLINE" in err
    err = admin(capsys, "resetOffsetByTime", "-n", ns, "-g", "cg-never", "-t", "AdminT3", "-s",
                "now", rc=2)
    assert "cg-never" in err and len(err.strip().splitlines()) == 1


def test_broker_status(cluster, capsys):
    ns, addr = cluster
    send(ns, "AdminT4", ["x" * 100, "y" * 100])
    info = admin_json(capsys, "brokerStatus", "-b", addr)
    assert info["brokerVersionDesc"] == "V4_9_8" and info["brokerName"] == "broker-a"
    assert int(info["msgPutTotalTodayNow"]) >= 2
    assert int(info["putBytesTotal"]) >= 200
    # disk figures are cached for 5 s (an earlier clusterList may have read them first)
    until(lambda: int(admin_json(capsys, "brokerStatus", "-b", addr)["diskUsed.commitlog"]) > 0,
          "the commit log's blocks counted")
    assert info["commitLogDirCapacity"].startswith("Total : ")
    table = admin(capsys, "brokerStatus", "-b", addr)
    assert table.splitlines()[0].split() == ["key", "value"]
    assert any(line.split()[:1] == ["putTps"] for line in table.splitlines())
    # through the NameServer: every master, keyed by address
    every = admin_json(capsys, "brokerStatus", "-n", ns)
    assert list(every) == [addr]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore", "admin", *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_errors_are_one_line_with_nonzero_exit(cluster):
    ns, addr = cluster
    p = run_cli("topicRoute", "-n", ns, "-t", "NoSuchTopic")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1
    assert p.stderr.startswith("rocketstore admin topicRoute: ") and "TOPIC_NOT_EXIST" in p.stderr
    p = run_cli("clusterList", "-n", "127.0.0.1:1", "--timeout", "2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "127.0.0.1:1" in p.stderr
    p = run_cli("topicRoute", "-n", ns)
    assert p.returncode == 2 and p.stderr.strip() == "rocketstore admin topicRoute: -t TOPIC " \
                                                     "is required"
    p = run_cli("updateTopic", "-n", ns, "-t", "bad topic!", "-b", addr)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "illegal characters" in p.stderr
    p = run_cli("queryMsgById", "-n", ns, "-i", "not-an-id")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not-an-id" in p.stderr
    p = run_cli("noSuchCommand", "-n", ns)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    # system topics are not the admin's to change or delete
    p = run_cli("deleteTopic", "-n", ns, "-t", "TBW102")
    assert p.returncode == 2 and "INVALID_PARAMETER" in p.stderr and "system topic" in p.stderr
    p = run_cli("updateTopic", "-n", ns, "-t", "SCHEDULE_TOPIC_XXXX", "-b", addr)
    assert p.returncode == 2 and "conflict with system topic" in p.stderr


def test_reset_reaches_a_running_push_consumer(cluster, capsys):
    """The broker pushes RESET_CONSUMER_CLIENT_OFFSET to the group's online client: a running
    consumer drops its queues and consumes again from the reset offsets."""
    import threading

    from rocketstore.client import ConsumeConcurrentlyStatus, PushConsumer
    ns, addr = cluster
    admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminT5", "-r", "2", "-w", "2")
    until(lambda: "AdminT5" in admin_json(capsys, "topicList", "-n", ns)["topicList"],
          "AdminT5 registered")
    before = int(time.time() * 1000) - 1
    bodies = [f"r{i}" for i in range(6)]
    send(ns, "AdminT5", bodies)
    got: list[str] = []
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.extend(bytes(m.body).decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer("cg-live", namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe("AdminT5", "*")
    c.register_message_listener(listener)
    c.start()
    try:
        until(lambda: len(got) >= 6, "first delivery")
        c.instance.persist_all_consumer_offset()
        until(lambda: admin_json(capsys, "consumerProgress", "-n", ns, "-g", "cg-live", "-t",
                                 "AdminT5")["diffTotal"] == 0, "offsets committed")
        reset = admin_json(capsys, "resetOffsetByTime", "-n", ns, "-g", "cg-live", "-t",
                           "AdminT5", "-s", str(before))
        assert [r["offset"] for r in reset["offsetTable"]] == [0, 0]
        until(lambda: len(got) >= 12, "second delivery after the reset")
        with lock:
            assert sorted(got) == sorted(bodies + bodies)
    finally:
        c.shutdown()


def test_bodies_in_fastjson_form():
    """Queue-keyed maps go out as fastjson writes them (the queue object as the key), and a
    Java broker's body reads back."""
    from rocketstore.common.protocol import MessageQueue
    from rocketstore.remoting import admin_bodies as b
    mq0, mq1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    body = b.encode_consume_stats({mq1: b.OffsetWrapper(9, 4, 4, 77),
                                   mq0: b.OffsetWrapper(5, 5, 5, 0)}, 1.5)
    assert body == (b'{"consumeTps":1.5,"offsetTable":{'
                    b'{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":5,'
                    b'"consumerOffset":5,"lastTimestamp":0,"pullOffset":5},'
                    b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"brokerOffset":9,'
                    b'"consumerOffset":4,"lastTimestamp":77,"pullOffset":4}}}')
    table, tps = b.decode_consume_stats(body)
    assert tps == 1.5 and table[mq1].lag == 5 and table[mq0].lag == 0
    # what a Java 4.9 broker writes for TopicStatsTable (no topicPutTps there)
    java = (b'{"offsetTable":{{"brokerName":"b1","queueId":3,"topic":"X"}:'
            b'{"lastUpdateTimestamp":1700000000000,"maxOffset":12,"minOffset":2}}}')
    stats, put_tps = b.decode_topic_stats(java)
    assert stats == {MessageQueue("X", "b1", 3): b.TopicOffset(2, 12, 1700000000000)}
    assert put_tps == 0.0
    assert b.decode_reset_offsets(b.encode_reset_offsets({mq0: 3})) == {mq0: 3}
    assert b.encode_reset_offsets_for_c({mq0: 3}) == (
        b'{"offsetTable":[{"brokerName":"broker-a","offset":3,"queueId":0,"topic":"T"}]}')
    assert b.decode_kv_table(b.encode_kv_table({"b": "2", "a": "1"})) == {"a": "1", "b": "2"}
    from rocketstore.errors import RemotingProtocolError
    with pytest.raises(RemotingProtocolError, match="not a message queue"):
        b.decode_consume_stats(b'{"offsetTable":{"nope":{}}}')


def test_topic_message_type_attribute(cluster, capsys):
    """updateTopic -a sets RocketMQ 5's message.type on the broker (what the gRPC proxy
    serves, docs/grpc.md); topicList -a shows it, NORMAL for a topic without one; a wrong
    value is a one-line error naming it."""
    ns, addr = cluster
    out = admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminFifo", "-r", "2",
                "-w", "2", "-a", "+message.type=FIFO")
    assert out.splitlines()[2].split() == [addr, "AdminFifo", "2", "2", "6",
                                           "message.type=FIFO"]
    admin(capsys, "updateTopic", "-n", ns, "-b", addr, "-t", "AdminPlain", "-r", "2", "-w", "2")
    until(lambda: {"AdminFifo", "AdminPlain"} <= set(
        admin_json(capsys, "topicList", "-n", ns)["topicList"]), "topics registered")
    rows = {r.split()[0]: r.split()[1:] for r in
            admin(capsys, "topicList", "-n", ns, "-a").splitlines()[2:]}
    assert rows["AdminFifo"] == ["broker-a", "FIFO", "message.type=FIFO"]
    assert rows["AdminPlain"] == ["broker-a", "NORMAL", "-"]
    p = run_cli("updateTopic", "-n", ns, "-b", addr, "-t", "AdminFifo", "-a",
                "+message.type=ORDERED")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "INVALID_PARAMETER" in p.stderr and "ORDERED" in p.stderr, p.stderr
    doc = admin_json(capsys, "topicList", "-n", ns, "-a")
    assert {"topic": "AdminFifo", "brokerName": "broker-a",
            "attributes": {"message.type": "FIFO"}} in doc
