"""The broker's one send path: stored forms as a 4.9.8 broker writes them (MESSAGING.md 0.4,
1.10, 5.5, 10.2; docs/format.md §3, 11), result codes (1.11) and refusals."""
from __future__ import annotations

import json

import pytest

from rocketstore import Message, StoreConfig
from rocketstore.broker import Broker, BrokerConfig, PropertiesMap
from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, ResponseCode,
                                         SendMessageRequest)
from rocketstore.store.topics import TopicConfig

import refreader
from brokering import offset_of, send, stored, subscribe, wait_dispatched

SC = StoreConfig(mapped_file_size_commit_log=1 << 20)
LEVEL_MS = StoreConfig().delay_levels_ms()


@pytest.fixture
def broker(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        yield b


def test_java_hashmap_order_and_no_trailing_separator():
    m = PropertiesMap.from_dict({"TAGS": "Tag0", "KEYS": "k", "WAIT": "true", "color": "red",
                                 "UNIQ_KEY": "U"})
    assert list(m) == ["color", "KEYS", "UNIQ_KEY", "WAIT", "TAGS"]
    assert m.to_string() == "color\x01red\x02KEYS\x01k\x02UNIQ_KEY\x01U\x02WAIT\x01true\x02TAGS\x01Tag0"
    # a removed and re-added key goes last in its bucket (DELAY and WAIT share one)
    m = PropertiesMap.from_dict({"WAIT": "true", "DELAY": "3"})
    assert list(m) == ["WAIT", "DELAY"]
    m.remove("WAIT")
    m.put("WAIT", "true")
    assert list(m) == ["DELAY", "WAIT"]
    # growing past 12 entries doubles the table and re-orders by the new buckets
    big = PropertiesMap.from_dict({f"k{i}": "v" for i in range(13)})
    assert len(big) == 13 and set(big) == {f"k{i}" for i in range(13)}
    assert PropertiesMap.from_string(big.to_string()).to_dict() == big.to_dict()


def _client_props(rec_props):
    """The properties a 4.9.8 client sent for a fixture record, in the Java client's order:
    Message constructor (TAGS, KEYS, WAIT), user property, delay level, then UNIQ_KEY."""
    p = {}
    if "TAGS" in rec_props:
        p["TAGS"] = rec_props["TAGS"]
    p["KEYS"] = rec_props["KEYS"]
    p["WAIT"] = "true"
    if "color" in rec_props:
        p["color"] = rec_props["color"]
    if "DELAY" in rec_props:
        p["DELAY"] = rec_props["DELAY"]
    p["UNIQ_KEY"] = rec_props["UNIQ_KEY"]
    return p


def test_every_fixture_record_is_stored_with_4_9_8s_exact_properties(broker, fixture_root):
    """The 1,000 records RocketMQ 4.9.8 wrote, sent again through our broker: the stored
    properties bytes (order included), topic, queue and flags are the same."""
    checked = delayed = 0
    for _, _, _, rec in refreader.iter_commitlog(str(fixture_root / "store" / "commitlog")):
        if rec["kind"] != "msg":
            continue
        props = rec["properties"]
        topic = props.get("REAL_TOPIC", rec["topic"])
        qid = int(props.get("REAL_QID", rec["queue_id"]))
        sys_flag = rec["sys_flag"] & ~0x30          # host bits follow our hosts
        msg = Message(topic, rec["body"], properties=_client_props(props), flag=rec["flag"],
                      sys_flag=sys_flag, born_timestamp=rec["born_timestamp"])
        r = broker.send_message(SendMessageRequest("PG", topic, qid, [msg],
                                                   reconsume_times=rec["reconsume_times"])).result(10)
        assert r.code == ResponseCode.SUCCESS, r
        ext, ours = stored(broker, offset_of(r.msg_id))
        assert ours["properties_raw"] == rec["properties_raw"], (rec["physical_offset"], ours["properties_raw"])
        assert (ours["topic"], ours["queue_id"]) == (rec["topic"], rec["queue_id"])
        assert ours["sys_flag"] & ~0x30 == sys_flag and ours["flag"] == rec["flag"]
        assert ours["reconsume_times"] == rec["reconsume_times"]
        assert ours["body"] == rec["body"]
        checked += 1
        delayed += rec["topic"] == "SCHEDULE_TOPIC_XXXX"
    assert checked == 1000 and delayed > 20


def test_plain_send_stores_cluster_without_wait(broker):
    r = send(broker, "TopicA", b"hello", 1, props={"WAIT": "true", "UNIQ_KEY": "U1"}, tags="T")
    assert r.code == ResponseCode.SUCCESS and (r.queue_id, r.queue_offset) == (1, 0)
    ext, rec = stored(broker, offset_of(r.msg_id))
    assert r.msg_id == ext.msg_id
    assert rec["properties_raw"] == b"UNIQ_KEY\x01U1\x02CLUSTER\x01DefaultCluster\x02TAGS\x01T"
    assert (rec["topic"], rec["queue_id"], rec["sys_flag"]) == ("TopicA", 1, 0)
    # a message without a client id gets one, as a Java producer always sets it
    r2 = send(broker, "TopicA", b"noid", 1)
    assert len(stored(broker, offset_of(r2.msg_id))[0].uniq_key) == 32
    assert r2.queue_offset == 1


def test_delay_send_goes_to_the_schedule_queue_with_delivery_time_tags_code(broker):
    r = send(broker, "TopicD", b"later", 2, props={"WAIT": "true", "DELAY": "3", "UNIQ_KEY": "U"},
             tags="TagD")
    assert r.code == ResponseCode.SUCCESS and r.queue_id == 2     # the requested queue
    ext, rec = stored(broker, offset_of(r.msg_id))
    assert (rec["topic"], rec["queue_id"]) == ("SCHEDULE_TOPIC_XXXX", 2)
    assert rec["properties"] == {"REAL_TOPIC": "TopicD", "REAL_QID": "2", "DELAY": "3",
                                 "WAIT": "true", "UNIQ_KEY": "U", "CLUSTER": "DefaultCluster",
                                 "TAGS": "TagD"}
    assert not rec["properties_raw"].endswith(b"\x02")
    wait_dispatched(broker)
    unit = broker.store.consume_queues.find("SCHEDULE_TOPIC_XXXX", 2).get_unit(0)
    assert unit[2] == ext.store_timestamp + LEVEL_MS[3]
    # a level above the last is clamped to it (18: queue 17)
    r = send(broker, "TopicD", b"x", 0, props={"DELAY": "40"})
    _, rec = stored(broker, offset_of(r.msg_id))
    assert (rec["queue_id"], rec["properties"]["DELAY"]) == (17, "18")
    # DELAY <= 0 is no delay
    r = send(broker, "TopicD", b"x", 0, props={"DELAY": "0"})
    assert stored(broker, offset_of(r.msg_id))[1]["topic"] == "TopicD"


def test_transaction_half_message_rewrite(broker):
    props = {"TRAN_MSG": "true", "PGROUP": "txg", "WAIT": "true", "UNIQ_KEY": "U", "k": "v"}
    msg = Message("TopicT", b"half", properties=props, sys_flag=0x4)
    r = broker.send_message(SendMessageRequest("txg", "TopicT", 3, [msg])).result(10)
    assert r.code == ResponseCode.SUCCESS and r.queue_id == 3 and r.queue_offset == 0
    ext, rec = stored(broker, offset_of(r.msg_id))
    assert (rec["topic"], rec["queue_id"]) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0)
    assert rec["sys_flag"] & 0xC == 0          # NOT type: it gets a queue offset and a unit
    assert rec["properties"] == {**props, "REAL_TOPIC": "TopicT", "REAL_QID": "3",
                                 "CLUSTER": "DefaultCluster"}
    wait_dispatched(broker)
    assert broker.store.get_max_offset_in_queue("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
    assert broker.store.get_max_offset_in_queue("TopicT", 3) == 0


def test_reject_transaction_message(store_dir):
    with Broker.open(store_dir, BrokerConfig(reject_transaction_message=True), SC) as b:
        r = send(b, "TopicT", props={"TRAN_MSG": "true", "PGROUP": "g"})
        assert r.code == ResponseCode.NO_PERMISSION


def test_retry_send_over_max_reconsume_goes_to_dlq(broker):
    # below the max: stays in the retry topic, through its delay
    r = send(broker, "%RETRY%cg", b"r", 0, props={"DELAY": "5", "UNIQ_KEY": "U"},
             reconsume_times=2, max_reconsume_times=3)
    assert stored(broker, offset_of(r.msg_id))[1]["properties"]["REAL_TOPIC"] == "%RETRY%cg"
    r = send(broker, "%RETRY%cg", b"d", 0, props={"UNIQ_KEY": "U"}, reconsume_times=3,
             max_reconsume_times=3)
    ext, rec = stored(broker, offset_of(r.msg_id))
    assert (rec["topic"], rec["queue_id"]) == ("%DLQ%cg", 0)
    dlq = broker.topic_manager.select("%DLQ%cg")
    assert (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)
    # the client fallback carries DELAY = 3 + n: 4.9.8 lets it overwrite DELAY=0 (5.6)
    r = send(broker, "%RETRY%cg", b"d2", 0, props={"DELAY": "19"}, reconsume_times=16)
    ext, rec = stored(broker, offset_of(r.msg_id))
    assert (rec["topic"], rec["properties"]["REAL_TOPIC"]) == ("SCHEDULE_TOPIC_XXXX", "%DLQ%cg")
    # without a header max the group's retryMaxTimes (16) applies
    r = send(broker, "%RETRY%cg", b"d3", 0, reconsume_times=15)
    assert stored(broker, offset_of(r.msg_id))[1]["topic"] == "%RETRY%cg"


def test_consumer_send_back_to_retry_then_dlq(broker):
    subscribe(broker, "cg", "TopicR")
    r = send(broker, "TopicR", b"body", 1, props={"UNIQ_KEY": "U", "WAIT": "true"}, tags="A")
    orig, orig_rec = stored(broker, offset_of(r.msg_id))
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "cg", orig.commitlog_offset, 0, "U", "TopicR", max_reconsume_times=16)).result(10)
    assert back.code == ResponseCode.SUCCESS
    wait_dispatched(broker)
    sched = broker.store.get_message("x", "SCHEDULE_TOPIC_XXXX", 2, 0).messages   # level 3
    assert len(sched) == 1
    ext, rec = stored(broker, sched[0].commitlog_offset)
    p = rec["properties"]
    assert p["REAL_TOPIC"] == "%RETRY%cg" and p["REAL_QID"] == "0" and p["DELAY"] == "3"
    assert p["RETRY_TOPIC"] == "TopicR" and p["WAIT"] == "false"
    assert p["ORIGIN_MESSAGE_ID"] == orig.msg_id            # the offset id, not UNIQ_KEY
    assert p["UNIQ_KEY"] == "U" and p["TAGS"] == "A"
    assert rec["reconsume_times"] == 1
    assert (rec["born_timestamp"], rec["sys_flag"]) == (orig_rec["born_timestamp"], orig_rec["sys_flag"])
    assert broker.topic_manager.select("%RETRY%cg").perm == 6
    wait_dispatched(broker)
    assert broker.store.consume_queues.find("SCHEDULE_TOPIC_XXXX", 2).get_unit(0)[2] == \
        ext.store_timestamp + LEVEL_MS[3]
    # at the max: the DLQ, queue 0, DELAY=0 and no schedule rewrite
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "cg", ext.commitlog_offset, 0, max_reconsume_times=1)).result(10)
    assert back.code == ResponseCode.SUCCESS
    wait_dispatched(broker)
    dlq = broker.store.get_message("x", "%DLQ%cg", 0, 0).messages
    assert len(dlq) == 1
    _, drec = stored(broker, dlq[0].commitlog_offset)
    assert drec["properties"]["DELAY"] == "0" and drec["reconsume_times"] == 2
    assert drec["properties"]["ORIGIN_MESSAGE_ID"] == orig.msg_id      # kept from the first
    assert drec["properties"]["RETRY_TOPIC"] == "TopicR"
    # delay level -1: straight to the DLQ
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "cg", orig.commitlog_offset, -1, max_reconsume_times=16)).result(10)
    assert back.code == ResponseCode.SUCCESS
    wait_dispatched(broker)
    assert broker.store.get_max_offset_in_queue("%DLQ%cg", 0) == 2
    # an offset that is not a record
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest("cg", 7, 0)).result(10)
    assert back.code == ResponseCode.SYSTEM_ERROR


def test_send_back_with_no_retry_queues_drops_the_message(broker):
    subscribe(broker, "g0", "TopicR")
    from rocketstore.broker.subscription_group import SubscriptionGroupConfig
    broker.subscription_groups.update(SubscriptionGroupConfig("g0", retry_queue_nums=0))
    r = send(broker, "TopicR", b"body")
    before = broker.store.get_max_phy_offset()
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "g0", offset_of(r.msg_id), 0)).result(10)
    assert back.code == ResponseCode.SUCCESS
    assert broker.store.get_max_phy_offset() == before


def test_send_back_only_of_a_topic_the_group_consumes(broker):
    # the record at the offset must be of a topic the group's consumers subscribe (or its retry
    # topic): else a consumer could copy any message into its retry topic and read it
    r = send(broker, "Private", b"secret body")
    subscribe(broker, "cg", "TopicR")
    before = broker.store.get_max_phy_offset()
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "cg", offset_of(r.msg_id), 0)).result(10)
    assert back.code == ResponseCode.NO_PERMISSION and "Private" in back.remark
    assert broker.store.get_max_phy_offset() == before
    # an offline group subscribes nothing
    back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
        "nobody-online", offset_of(r.msg_id), 0)).result(10)
    assert back.code in (ResponseCode.NO_PERMISSION, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
    assert broker.store.get_max_phy_offset() == before


def test_auto_create_rules(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        send(b, "New4", default_topic_queue_nums=4)
        tc = b.topic_manager.select("New4")
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
        send(b, "New16", default_topic_queue_nums=16)          # min with TBW102's 8
        assert b.topic_manager.select("New16").write_queue_nums == 8
        r = send(b, "New4", queue_id=4)
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[4]" in r.remark
        r = send(b, "NoTemplate", default_topic="NotThere")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
    with Broker.open(store_dir, BrokerConfig(auto_create_topic_enable=False), SC) as b:
        # the old TBW102 in topics.json lends no INHERIT bit any more
        assert send(b, "Other").code == ResponseCode.TOPIC_NOT_EXIST
        assert send(b, "%RETRY%grp").code == ResponseCode.SUCCESS       # retry: 1 queue, perm 6
        tc = b.topic_manager.select("%RETRY%grp")
        assert (tc.write_queue_nums, tc.perm) == (1, 6)
        assert send(b, "New4").code == ResponseCode.SUCCESS


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                                   "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                                   "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"])
def test_forbidden_topics_answer_no_permission(broker, topic):
    r = send(broker, topic)
    assert r.code == ResponseCode.NO_PERMISSION and topic in r.remark


def test_perm_rules_of_a_plain_send(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        b.topic_manager.update(TopicConfig("ReadOnly", 2, 2, perm=4))
        # 4.9.8 does not check the topic's write perm on a send (routes do that)
        assert send(b, "ReadOnly", queue_id=1).code == ResponseCode.SUCCESS
        b.topic_manager.update(TopicConfig("Ordered", 2, 2, order=True))
        # the request's topic is checked (a wire request has no validated Message)
        bad = [Message("Fine", b"x")]
        r = b.send_message(SendMessageRequest("PG", "bad topic!", 0, bad)).result(10)
        assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
        r = b.send_message(SendMessageRequest("PG", "T" * 128, 0, bad)).result(10)
        assert r.code == ResponseCode.SYSTEM_ERROR and "max length" in r.remark
    with Broker.open(store_dir, BrokerConfig(broker_permission=4), SC) as b:
        assert send(b, "Ordered", queue_id=0).code == ResponseCode.NO_PERMISSION
        assert send(b, "ReadOnly", queue_id=0).code == ResponseCode.SUCCESS
        r = b.consumer_send_msg_back(ConsumerSendMsgBackRequest("cg", 0, 0)).result(10)
        assert r.code == ResponseCode.NO_PERMISSION
    with Broker.open(store_dir, BrokerConfig(start_accept_send_request_time_stamp=1 << 50),
                     SC) as b:
        assert send(b, "ReadOnly").code == ResponseCode.SYSTEM_ERROR


def test_batch_appends_the_batch_properties_to_each_message(broker):
    msgs = [Message("TopicB", b"m%d" % i, tags="t", properties={"UNIQ_KEY": f"U{i}", "WAIT": "true"})
            for i in range(3)]
    r = send(broker, "TopicB", queue_id=0, batch=msgs)
    assert r.code == ResponseCode.SUCCESS and r.queue_offset == 0
    wait_dispatched(broker)
    got = broker.store.get_message("x", "TopicB", 0, 0).messages
    assert len(got) == 3
    raw = stored(broker, got[1].commitlog_offset)[1]["properties_raw"]
    own = PropertiesMap.from_dict({"UNIQ_KEY": "U1", "WAIT": "true", "TAGS": "t"}).to_string()
    batch = PropertiesMap.from_dict({"WAIT": "true", "CLUSTER": "DefaultCluster"}).to_string()
    assert raw == (own + "\x02" + batch).encode()
    bad = [Message("TopicB", b"d", properties={"DELAY": "2"})]
    assert send(broker, "TopicB", queue_id=0, batch=bad).code == ResponseCode.MESSAGE_ILLEGAL
    assert send(broker, "%RETRY%x", queue_id=0, batch=msgs[:1]).code == ResponseCode.MESSAGE_ILLEGAL


def test_store_status_maps_to_response_codes(broker):
    broker.store.commit_log.set_not_writeable(OSError(28, "No space left on device"))
    try:
        r = send(broker, "TopicS")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and r.remark
    finally:
        broker.store.commit_log.set_not_writeable(None)
    assert send(broker, "TopicS").code == ResponseCode.SUCCESS


def test_topics_and_subscription_groups_json(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        send(b, "Auto")
        b.subscription_groups.find("cgroup")
    import rocketstore.store.configfile as cf
    with open(f"{store_dir}/config/topics.json") as f:
        topics = cf.loads(f.read())["topicConfigTable"]
    assert set(topics) >= {"SELF_TEST_TOPIC", "TBW102", "BenchmarkTest", "DefaultCluster",
                           "broker-a", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX",
                           "DefaultCluster_REPLY_TOPIC", "Auto"}
    assert "RMQ_SYS_TRANS_HALF_TOPIC" not in topics     # not registered at start in 4.9.8
    assert topics["TBW102"] == {"order": False, "perm": 7, "readQueueNums": 8,
                                "topicFilterType": "SINGLE_TAG", "topicName": "TBW102",
                                "topicSysFlag": 0, "writeQueueNums": 8}
    assert (topics["BenchmarkTest"]["readQueueNums"], topics["SCHEDULE_TOPIC_XXXX"]["readQueueNums"]) == (1024, 18)
    assert topics["Auto"]["perm"] == 6 and topics["Auto"]["writeQueueNums"] == 4
    with open(f"{store_dir}/config/subscriptionGroup.json") as f:
        text = f.read()
    doc = json.loads(text)
    assert doc["subscriptionGroupTable"]["cgroup"] == {
        "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
        "consumeFromMinEnable": True, "groupName": "cgroup",
        "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1}
    assert doc["dataVersion"]["counter"] >= 1
    assert text.startswith('{\n\t"dataVersion":{')             # fastjson pretty layout
    assert "TOOLS_CONSUMER" in doc["subscriptionGroupTable"]    # pre-created groups reach the file


def test_memoized_order_matches_the_map(rand):
    from rocketstore.broker.inner import java_properties
    for _ in range(200):
        keys = rand.sample([f"k{i}" for i in range(40)] + ["WAIT", "TAGS", "KEYS"],
                           rand.randint(1, 20))
        props = {k: f"v-{k}" for k in keys}
        m = PropertiesMap.from_dict(props)
        m.put("CLUSTER", "c")
        removes = ("WAIT",) if "WAIT" in props else ()
        for k in removes:
            m.remove(k)
        string, entries = java_properties(props, (("CLUSTER", "c"),), removes)
        assert string == m.to_string() and entries == m.to_dict()
