"""Issue 26 item 2: the admin request codes mqadmin sends, against real ``rocketstore namesrv``
and ``broker`` processes, through our admin client and CLI and, for the relayed
GET_CONSUMER_RUNNING_INFO and UPDATE_BROKER_CONFIG's refusals, as raw frames
(tests/rawwire.py). Before this change every code here answered "request type N not
supported"."""
from __future__ import annotations

import json
import os
import time

import pytest

from messaging_support import until
from rawwire import RawClient, frame
from rocketstore.cli import main
from rocketstore.client.producer import Producer
from rocketstore.client.pull_consumer import PullConsumer
from rocketstore.errors import MQBrokerError
from rocketstore.remoting.admin_client import AdminClient, AdminError
from rocketstore.store import Message
from servers import start_broker, start_namesrv  # tests/servers.py

SUCCESS, SYSTEM_ERROR, NO_PERMISSION, INVALID_PARAMETER = 0, 1, 16, 29
HEART_BEAT, UPDATE_BROKER_CONFIG, GET_BROKER_CONFIG = 34, 25, 26
GET_CONSUMER_RUNNING_INFO = 307


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin-parity")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    try:
        yield ns.addr, broker.addr, tmp / "store"
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


def admin_cli(capsys, *argv: str, rc: int = 0) -> str:
    code = main(["admin", *argv])
    out, err = capsys.readouterr()
    assert code == rc, f"exit {code}: {err}"
    return out if rc == 0 else err


def send(ns: str, topic: str, n: int, group: str = "pg-parity") -> None:
    with Producer(group, namesrv_addr=ns) as p:
        for i in range(n):
            p.send(Message(topic, f"m{i}".encode()))


def consume(ns: str, group: str, topic: str, n: int) -> int:
    c = PullConsumer(group, namesrv_addr=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     auto_commit=False)
    c.subscribe(topic)
    c.start()
    got = 0
    try:
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            got += len(c.poll(1000))
        c.commit()
    finally:
        c.shutdown()
    return got


def route_perm(admin: AdminClient, topic: str) -> int:
    """The topic's perm in its route (-1 before the broker registered it)."""
    try:
        return int(admin.topic_route(topic)["queueDatas"][0]["perm"])
    except AdminError as e:
        if e.code != 17:        # TOPIC_NOT_EXIST
            raise
        return -1


# -- subscription groups (200, 201, 207) --------------------------------------------------------

def test_sub_group_create_read_delete(cluster, capsys):
    ns, addr, store = cluster
    with AdminClient(ns) as admin:
        admin.update_sub_group({"groupName": "G_SUB", "retryMaxTimes": 3,
                                "consumeBroadcastEnable": False}, broker_addr=addr)
        table = admin.sub_group_configs(addr)["subscriptionGroupTable"]
        assert table["G_SUB"]["retryMaxTimes"] == 3
        assert table["G_SUB"]["consumeBroadcastEnable"] is False
        assert table["G_SUB"]["retryQueueNums"] == 1          # 4.9.8's default
        # on disk when the call returns
        on_disk = json.loads((store / "config" / "subscriptionGroup.json").read_text())
        assert on_disk["subscriptionGroupTable"]["G_SUB"]["retryMaxTimes"] == 3

        # a group name that is a path, a field of the wrong type: refused, nothing stored
        for bad, field in (({"groupName": "../x"}, "groupName"),
                           ({"groupName": "G_BAD", "retryMaxTimes": "many"}, "retry_max_times")):
            with pytest.raises(AdminError) as e:
                admin.update_sub_group(bad, broker_addr=addr)
            assert e.value.code == INVALID_PARAMETER and field in e.value.remark
        assert "G_BAD" not in admin.sub_group_configs(addr)["subscriptionGroupTable"]

        # deleteSubGroup -r true drops the group's offsets too
        admin.invoke(addr, 15, {"consumerGroup": "G_SUB", "topic": "TBW102", "queueId": 0,
                                "commitOffset": 5})
        admin.delete_sub_group("G_SUB", broker_addr=addr, remove_offset=True)
        assert "G_SUB" not in admin.sub_group_configs(addr)["subscriptionGroupTable"]
        r = admin.invoke(addr, 14, {"consumerGroup": "G_SUB", "topic": "TBW102", "queueId": 0},
                         ok=(22,))
        assert r.code == 22 or r.int_field("offset") == 0, "the committed offset survived"

    # the CLI, with mqadmin's letters
    admin_cli(capsys, "updateSubGroup", "-n", ns, "-b", addr, "-g", "G_CLI", "-r", "5",
              "-s", "false")
    doc = json.loads(admin_cli(capsys, "getConsumerConfig", "-n", ns, "-g", "G_CLI", "--json"))
    assert doc[0]["brokerAddr"] == addr
    assert doc[0]["config"]["retryMaxTimes"] == 5 and doc[0]["config"]["consumeEnable"] is False
    admin_cli(capsys, "deleteSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "G_CLI")
    err = admin_cli(capsys, "getConsumerConfig", "-n", ns, "-g", "G_CLI", rc=2)
    assert "G_CLI" in err


def test_all_topic_config(cluster):
    """GET_ALL_TOPIC_CONFIG (21), what mqadmin's exportMetadata reads."""
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_ALLCFG", broker_addr=addr, read_queue_nums=3, write_queue_nums=3,
                           order=True)
        doc = admin.topic_configs(addr)
    tc = doc["topicConfigTable"]["T_ALLCFG"]
    assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"], tc["order"]) == (3, 3, 6, True)
    assert doc["dataVersion"]["counter"] >= 1


# -- producers (204) ------------------------------------------------------------------------------

def test_producer_connection(cluster, capsys):
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_PROD", broker_addr=addr)
        with Producer("PG_CONN", namesrv_addr=ns) as p:
            p.send(Message("T_PROD", b"x"))       # started: its heartbeat registered it
            conns = admin.producer_connection("PG_CONN", "T_PROD")
            client_id = p._instance.client_id
            assert [c["clientId"] for c in conns] == [client_id]
            assert conns[0]["language"] == "PYTHON" and conns[0]["clientAddr"]
            out = admin_cli(capsys, "producerConnection", "-n", ns, "-g", "PG_CONN", "-t",
                            "T_PROD")
            assert client_id in out
        with pytest.raises(AdminError) as e:
            admin.producer_connection("PG_NOBODY", "T_PROD")
        assert e.value.code == SYSTEM_ERROR and "PG_NOBODY" in e.value.remark


# -- GET_CONSUMER_RUNNING_INFO relayed to the client (307) --------------------------------------

def heartbeat(client_id: str, group: str, topic: str) -> bytes:
    return json.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}).encode()


def test_consumer_running_info_is_relayed_raw(cluster):
    """The broker forwards 307 (same fields and body) over the consumer's own connection and
    passes its answer back byte for byte: here the invalid JSON the C++ client writes."""
    ns, addr, _ = cluster
    answer = b'{"properties":{"consumeType":"CONSUME_PASSIVELY"},"mqTable":}'
    with RawClient(addr) as consumer, RawClient(addr) as tool:
        h, _ = consumer.call(HEART_BEAT, {}, heartbeat("raw-consumer@1", "G_RUN", "TBW102"))
        assert h["code"] == SUCCESS
        fields = {"consumerGroup": "G_RUN", "clientId": "raw-consumer@1",
                  "jstackEnable": "false"}
        # an admin's credentials stay with the broker (no ACL here: they are just fields)
        tool.send(frame(GET_CONSUMER_RUNNING_INFO, dict(fields, AccessKey="ak", Signature="s"),
                        opaque=4242))
        while True:                     # skip NOTIFY_CONSUMER_IDS_CHANGED and the like
            pushed, body = consumer.read_frame()
            if pushed["code"] == GET_CONSUMER_RUNNING_INFO:
                break
        assert pushed["extFields"] == fields and not pushed.get("flag", 0) & 1
        consumer.send(frame(SUCCESS, {}, answer, opaque=pushed["opaque"], flag=1))
        h, body = tool.read_response(4242)
        assert h["code"] == SUCCESS and body == answer

        # through our admin client too
        with AdminClient(ns) as admin:
            import threading

            def answer_once() -> None:
                while True:
                    p, _ = consumer.read_frame()
                    if p["code"] == GET_CONSUMER_RUNNING_INFO:
                        consumer.send(frame(SUCCESS, {}, b'{"jstack":"x"}', opaque=p["opaque"],
                                            flag=1))
                        return
            t = threading.Thread(target=answer_once)
            t.start()
            # the group has no retry topic route: the admin client asks every master
            assert admin.consumer_running_info("G_RUN", "raw-consumer@1") == b'{"jstack":"x"}'
            t.join()

        # a client the group does not have: 4.9.8's refusal
        h, _ = tool.call(GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G_RUN",
                                                     "clientId": "nobody@1"})
        assert h["code"] == SYSTEM_ERROR
        assert h["remark"] == "The Consumer <G_RUN> <nobody@1> not online"
        # a group name that is a path never reaches the handler
        h, _ = tool.call(GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "../G", "clientId": "x"})
        assert h["code"] == INVALID_PARAMETER and "consumerGroup" in h["remark"]


@pytest.mark.stress
def test_consumer_running_info_unanswered_raw(cluster):
    """A consumer that never answers: after Broker2Client's 10 s, CONSUME_MSG_TIMEOUT (207)
    naming it, and its connection stays (it is still a member of the group)."""
    _, addr, _ = cluster
    with RawClient(addr) as consumer, RawClient(addr, timeout=60) as tool:
        h, _ = consumer.call(HEART_BEAT, {}, heartbeat("mute@1", "G_MUTE", "TBW102"))
        assert h["code"] == SUCCESS
        h, _ = tool.call(GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G_MUTE",
                                                     "clientId": "mute@1"})
        assert h["code"] == 207 and h["remark"].startswith("consumer <G_MUTE> <mute@1> Timeout")
        h, _ = consumer.call(HEART_BEAT, {}, heartbeat("mute@1", "G_MUTE", "TBW102"))
        assert h["code"] == SUCCESS


def test_consumer_status_of_our_push_consumer(cluster, capsys):
    """rocketstore's own consumer answers the relayed 307 with a ConsumerRunningInfo Java's
    mqadmin parses: properties, subscriptions, a ProcessQueueInfo per queue it holds."""
    from rocketstore.client import ConsumeConcurrentlyStatus, PushConsumer
    from rocketstore.remoting import admin_bodies, fastjson
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_STATUS", broker_addr=addr, read_queue_nums=2, write_queue_nums=2)
        until(lambda: route_perm(admin, "T_STATUS") == 6, "T_STATUS routed")
        c = PushConsumer("G_STATUS", namesrv_addr=ns)
        c.subscribe("T_STATUS", "TagA || TagB")
        c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        c.start()
        try:
            until(lambda: len(c.assignment("T_STATUS")) == 2, "both queues held")
            doc = fastjson.loads(admin.consumer_running_info("G_STATUS", c.client_id))
            props = doc["properties"]
            assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert props["PROP_CONSUME_ORDERLY"] == "false" and props["PROP_NAMESERVER_ADDR"] == ns
            assert props["messageModel"] == "CLUSTERING"
            table = admin_bodies.decode_mq_map(doc["mqTable"], "mqTable")
            assert sorted(mq.queue_id for mq in table if mq.topic == "T_STATUS") == [0, 1]
            assert all(v["droped"] is False for v in table.values())
            subs = {s["topic"]: s for s in doc["subscriptionSet"]}
            assert subs["T_STATUS"]["tagsSet"] == ["TagA", "TagB"]
            assert "%RETRY%G_STATUS" in subs
            stacks = fastjson.loads(admin.consumer_running_info("G_STATUS", c.client_id,
                                                                jstack=True))["jstack"]
            assert "MainThread" in stacks
            rows = json.loads(admin_cli(capsys, "consumerStatus", "-n", ns, "-g", "G_STATUS",
                                        "--json"))
            assert rows == [{"clientId": c.client_id, "answered": "yes", "bytes": rows[0]["bytes"]}]
        finally:
            c.shutdown()


# -- broker settings (26, 25) ---------------------------------------------------------------------

def props(body: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in body.decode().splitlines() if "=" in line)


def test_broker_config_whitelist_raw(cluster):
    ns, addr, store = cluster
    with RawClient(addr) as c:
        h, body = c.call(GET_BROKER_CONFIG)
        assert h["code"] == SUCCESS and "version" in h["extFields"]
        before = props(body)
        assert before["brokerName"] == "broker-a"
        assert before["brokerClusterName"] == "DefaultCluster"
        assert before["rejectTransactionMessage"] == "false"

        # paths, ports, names: refused with 4.9.8's words and the settings that may change
        for text, name in ((b"storePathRootDir=/tmp/elsewhere\n", "storePathRootDir"),
                           (b"storePathCommitLog=/tmp/cl\n", "storePathCommitLog"),
                           (b"listenPort=1\n", "listenPort"),
                           (b"aclFile=/etc/passwd\n", "aclFile"),
                           (b"rejectTransactionMessage=true\nbrokerName=evil\n", "brokerName")):
            h, _ = c.call(UPDATE_BROKER_CONFIG, {}, text)
            assert h["code"] == NO_PERMISSION, text
            assert h["remark"].startswith("Can not update config in black list.")
            assert name in h["remark"] and "brokerPermission" in h["remark"]
        for text, word in ((b"noSuchSetting=1\n", "noSuchSetting"),
                           (b"brokerPermission=abc\n", "brokerPermission"),
                           (b"brokerPermission=99\n", "brokerPermission=99"),
                           (b"rejectTransactionMessage=maybe\n", "rejectTransactionMessage")):
            h, _ = c.call(UPDATE_BROKER_CONFIG, {}, text)
            assert h["code"] == INVALID_PARAMETER and word in h["remark"], (text, h)
        # nothing of a refused request was applied (the mixed one above included)
        h, body = c.call(GET_BROKER_CONFIG)
        assert props(body) == before

        # a whitelisted one takes effect at once: sends refused until the given time
        v0 = json.loads(h["extFields"]["version"])["counter"]
        h, _ = c.call(UPDATE_BROKER_CONFIG, {}, b"startAcceptSendRequestTimeStamp=9999999999999\n")
        assert h["code"] == SUCCESS
        h, _ = c.call(GET_BROKER_CONFIG)
        assert json.loads(h["extFields"]["version"])["counter"] == v0 + 1
        changed = props(c.call(GET_BROKER_CONFIG)[1])
        assert changed["startAcceptSendRequestTimeStamp"] == "9999999999999"
    with AdminClient(ns) as admin:
        admin.update_topic("T_CFG", broker_addr=addr)
        with Producer("PG_CFG", namesrv_addr=ns, retry_times_when_send_failed=0) as p:
            with pytest.raises(MQBrokerError) as e:
                p.send(Message("T_CFG", b"x"))
            assert "broker unable to service" in str(e.value)
            admin.update_broker_config({"startAcceptSendRequestTimeStamp": "0"}, broker_addr=addr)
            assert p.send(Message("T_CFG", b"x")).queue_offset == 0


def test_broker_permission_reaches_the_nameserver(cluster, capsys):
    """brokerPermission changed at run time: the broker registers again at once and the
    route carries the new perm (4.9.8 bumps the topic data version and re-registers)."""
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_PERM", broker_addr=addr)
        until(lambda: route_perm(admin, "T_PERM") == 6, "T_PERM routed")
        admin_cli(capsys, "updateBrokerConfig", "-n", ns, "-b", addr, "-k", "brokerPermission",
                  "-v", "4")
        until(lambda: route_perm(admin, "T_PERM") == 4, "read-only route")
        assert admin.broker_config(addr)["brokerPermission"] == "4"
        admin.update_broker_config({"brokerPermission": "6"}, cluster="DefaultCluster")
        until(lambda: route_perm(admin, "T_PERM") == 6, "writable route again")
    out = admin_cli(capsys, "getBrokerConfig", "-n", ns, "-b", addr)
    assert "brokerPermission" in out and "6" in out


# -- NameServer (319, 327) ------------------------------------------------------------------------

def test_wipe_then_add_write_perm(cluster, capsys):
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_WIPE", broker_addr=addr)
        until(lambda: route_perm(admin, "T_WIPE") == 6, "T_WIPE routed")
        wiped = admin.wipe_write_perm("broker-a")
        assert wiped[ns] >= 1 and route_perm(admin, "T_WIPE") == 4
        doc = json.loads(admin_cli(capsys, "addWritePerm", "-n", ns, "-b", "broker-a", "--json"))
        assert doc[ns] == wiped[ns]
        assert route_perm(admin, "T_WIPE") == 6
        with Producer("PG_WIPE", namesrv_addr=ns) as p:
            assert p.send(Message("T_WIPE", b"x")).queue_offset == 0


def test_namesrv_config(cluster, capsys):
    ns, _, _ = cluster
    with AdminClient(ns) as admin:
        cfg = admin.namesrv_config()[ns]
    assert cfg["listenPort"] == ns.rsplit(":", 1)[1]
    assert cfg["orderMessageEnable"] == "false" and cfg["kvConfigPath"].endswith("kvConfig.json")
    out = admin_cli(capsys, "getNamesrvConfig", "-n", ns)
    assert "listenPort" in out


# -- who consumes, stats, broker consume stats (300, 315, 317) ----------------------------------

def test_consumers_stats_and_broker_consume_stats(cluster, capsys):
    ns, addr, _ = cluster
    with AdminClient(ns) as admin:
        admin.update_topic("T_STATS", broker_addr=addr, read_queue_nums=2, write_queue_nums=2)
        send(ns, "T_STATS", 8)
        assert consume(ns, "G_STATS", "T_STATS", 8) == 8
        assert "G_STATS" in admin.topic_consumed_by("T_STATS")
        # two messages of queue 0 not consumed: the group's offset moved back by two
        q0 = int(admin.consume_stats("G_STATS", "T_STATS")[0][
            next(mq for mq in admin.consume_stats("G_STATS", "T_STATS")[0]
                 if mq.queue_id == 0)].consumer_offset)
        assert q0 >= 2
        admin.invoke(addr, 15, {"consumerGroup": "G_STATS", "topic": "T_STATS", "queueId": 0,
                                "commitOffset": q0 - 2})

        put = admin.stats_data(addr, "TOPIC_PUT_NUMS", "T_STATS")
        assert put["statsDay"]["sum"] == 8 and put["statsMinute"]["sum"] == 8
        assert put["statsMinute"]["tps"] > 0
        got = admin.stats_data(addr, "GROUP_GET_NUMS", "T_STATS@G_STATS")
        assert got["statsDay"]["sum"] == 8
        with pytest.raises(AdminError) as e:
            admin.stats_data(addr, "TOPIC_PUT_NUMS", "T_NEVER")
        assert e.value.code == SYSTEM_ERROR
        assert e.value.remark == "The stats <TOPIC_PUT_NUMS> <T_NEVER> not exist"

        broker_addr, groups, total = admin.broker_consume_stats(addr)
        assert broker_addr == addr
        stats = groups["G_STATS"]
        queues = {mq.queue_id: o for table, _ in stats for mq, o in table.items()
                  if mq.topic == "T_STATS"}
        assert sorted(queues) == [0, 1]
        assert sum(o.broker_offset for o in queues.values()) == 8
        assert sum(o.consumer_offset for o in queues.values()) == 6
        assert total >= 2
        _, only_ordered, _ = admin.broker_consume_stats(addr, order=True)
        assert not any(mq.topic == "T_STATS" for s in only_ordered.values()
                       for table, _ in s for mq in table)

    rows = json.loads(admin_cli(capsys, "statsAll", "-n", ns, "-t", "T_STATS", "--json"))
    row = next(r for r in rows if r["group"] == "G_STATS")
    assert row["inMsg24Hour"] == 8 and row["outMsg24Hour"] == 8
    assert row["accumulation"] == 2
    rows = json.loads(admin_cli(capsys, "topicList", "-n", ns, "-c", "--json"))
    assert {"cluster": "DefaultCluster", "topic": "T_STATS",
            "consumerGroup": "G_STATS"} in rows
    out = admin_cli(capsys, "brokerConsumeStats", "-n", ns, "-b", addr)
    assert "G_STATS" in out and "Diff Total" in out


# -- clusterList's #Hour and #SPACE --------------------------------------------------------------

def rocketmq_disk_ratio(path: str) -> float:
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100


def test_cluster_list_hour_and_space(cluster, capsys):
    ns, addr, store = cluster
    send(ns, "T_HOUR", 1)
    with AdminClient(ns) as admin:
        kv = admin.broker_runtime_info(addr)
    # 4.9.8's figures: the commit-log directory's used percent, rounded up, over used+usable
    expected = rocketmq_disk_ratio(str(store / "commitlog"))
    assert abs(float(kv["commitLogDiskRatio"]) - expected) <= 0.01
    assert float(kv["commitLogDiskRatio"]) > 0
    earliest = int(kv["earliestMessageTimeStamp"])
    assert 0 < earliest <= int(time.time() * 1000)
    doc = json.loads(admin_cli(capsys, "clusterList", "-n", ns, "--json"))
    b = doc["brokers"][0]
    assert b["addr"] == addr and b["version"] == "V4_9_8"
    assert 0 <= float(b["hour"]) < 1                   # the first message is minutes old
    assert len(b["space"].split(".")[1]) == 4              # mqadmin's "%.4f"
    assert abs(float(b["space"]) - float(kv["commitLogDiskRatio"])) <= 0.01


# -- cleanUnusedTopic (316) -----------------------------------------------------------------------

def test_clean_unused_topic(tmp_path, capsys):
    """Consume queues of a topic the broker has no config for go; configured ones stay."""
    ns = start_namesrv(tmp_path)
    store = tmp_path / "store"
    broker = start_broker(store, ns.addr)
    try:
        send(ns.addr, "T_KEEP", 1)
        send(ns.addr, "T_ORPHAN", 1)
        # a transaction left open: its half message waits in RMQ_SYS_TRANS_HALF_TOPIC, whose
        # config the check service creates only when it first runs (60 s)
        from rocketstore.client.producer import TransactionProducer
        from rocketstore.common.protocol import LocalTransactionState as S

        class Undecided:
            def execute_local_transaction(self, msg, arg):
                return S.UNKNOW

            def check_local_transaction(self, msg):
                return S.UNKNOW
        with TransactionProducer("PG_TX_OPEN", Undecided(), namesrv_addr=ns.addr) as tp:
            tp.send_message_in_transaction(Message("T_KEEP", b"half"))
        half = store / "consumequeue" / "RMQ_SYS_TRANS_HALF_TOPIC"
        until(lambda: (store / "consumequeue" / "T_ORPHAN").exists() and half.exists(),
              "T_ORPHAN and the half message dispatched")
        assert broker.stop() == 0
        topics = store / "config" / "topics.json"
        doc = json.loads(topics.read_text())
        del doc["topicConfigTable"]["T_ORPHAN"]
        topics.write_text(json.dumps(doc))
        broker = start_broker(store, ns.addr)
        admin_cli(capsys, "cleanUnusedTopic", "-n", ns.addr, "-b", broker.addr)
        assert not (store / "consumequeue" / "T_ORPHAN").exists()
        assert (store / "consumequeue" / "T_KEEP").exists()
        assert half.exists(), "the open transaction's half message was dropped"
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


# -- the ACL path: the new codes are checked like every other ------------------------------------

ACL_YML = """
accounts:
  - accessKey: plainUser
    secretKey: plainSecret1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: adminUser
    secretKey: adminSecret1
    admin: true
"""


def test_new_codes_pass_the_acl(tmp_path):
    from rocketstore.acl.signature import SessionCredentials
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    ns = start_namesrv(tmp_path)
    broker = start_broker(store, ns.addr, {"aclEnable": "true"})
    try:
        addr = broker.addr
        plain = AdminClient(ns.addr, credentials=SessionCredentials("plainUser", "plainSecret1"))
        boss = AdminClient(ns.addr, credentials=SessionCredentials("adminUser", "adminSecret1"))
        unsigned = AdminClient(ns.addr)
        with plain, boss, unsigned:
            # admin-only codes (RocketMQ's Permission.ADMIN_CODE): 25, 200, 207
            for call in (lambda a: a.update_broker_config({"rejectTransactionMessage": "true"},
                                                          broker_addr=addr),
                         lambda a: a.update_sub_group({"groupName": "G_ACL"}, broker_addr=addr),
                         lambda a: a.delete_sub_group("G_ACL", broker_addr=addr)):
                with pytest.raises(AdminError) as e:
                    call(plain)
                assert e.value.code != SUCCESS and "admin" in (e.value.remark or "").lower()
                with pytest.raises(AdminError):
                    call(unsigned)
            assert boss.broker_config(addr)["rejectTransactionMessage"] == "false"
            # reads need a valid signature only, as on 4.9.8: the handler answers
            with pytest.raises(AdminError) as e:
                plain.invoke(addr, 204, {"producerGroup": "G_NONE"})
            assert e.value.remark == "the producer group[G_NONE] not exist"
            with pytest.raises(AdminError) as e:
                unsigned.invoke(addr, 204, {"producerGroup": "G_NONE"})
            assert "accessKey" in (e.value.remark or "")
            # the admin account may
            boss.update_broker_config({"rejectTransactionMessage": "true"}, broker_addr=addr)
            boss.update_sub_group({"groupName": "G_ACL"}, broker_addr=addr)
            assert "G_ACL" in boss.sub_group_configs(addr)["subscriptionGroupTable"]
            assert plain.broker_config(addr)["rejectTransactionMessage"] == "true"
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


def test_consume_stats_list_in_fastjson_form():
    """ConsumeStatsList (317) as fastjson writes it: per group a list of ConsumeStats whose
    offset tables are keyed by the queue object; a Java broker's body reads back."""
    from rocketstore.common.protocol import MessageQueue
    from rocketstore.remoting import admin_bodies as b
    mq = MessageQueue("T", "broker-a", 0)
    body = b.encode_consume_stats_list("127.0.0.1:10911",
                                       [("G", [({mq: b.OffsetWrapper(9, 4, 0, 77)}, 1.5)]),
                                        ("TOOLS_CONSUMER", [])], 5)
    assert body == (b'{"brokerAddr":"127.0.0.1:10911","consumeStatsList":[{"G":[{"consumeTps"'
                    b':1.5,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
                    b'{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":77,"pullOffset":0}'
                    b'}}]},{"TOOLS_CONSUMER":[]}],"totalDiff":5}')
    addr, groups, total = b.decode_consume_stats_list(body)
    assert (addr, total, groups["TOOLS_CONSUMER"]) == ("127.0.0.1:10911", 5, [])
    (table, tps), = groups["G"]
    assert tps == 1.5 and table[mq].lag == 5
