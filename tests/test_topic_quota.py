"""Sends auto-create topics only while the broker holds fewer than ``autoCreateTopicMax``
(stricter than 4.9.8, where with ``autoCreateTopicEnable`` on, the default, a client could grow
the topic table, ``topics.json`` and every NameServer registration without bound; docs/protocol.md
"Limits"). Past it a send to a new topic is answered as with auto-creation off
(``TOPIC_NOT_EXIST``), its remark naming the setting; topics already held, admin-created
topics and the retry/DLQ topics of the groups the broker holds keep working. Raw frames
against a real broker process.
"""
from __future__ import annotations

import json
import time

import pytest

from rawwire import RawClient, props_string  # tests/rawwire.py
from rocketstore import StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.client import Message, Producer
from rocketstore.errors import MQBrokerError
from servers import start_broker, start_namesrv

SUCCESS, TOPIC_NOT_EXIST = 0, 17
SEND_V2, HEART_BEAT, CONSUMER_SEND_MSG_BACK = 310, 34, 36
GET_ALL_TOPIC_CONFIG, UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG = 21, 17, 25
CAP = 50


def _send(c: RawClient, topic: str, body: bytes = b"x") -> dict:
    h, _ = c.call(SEND_V2, {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
                            "g": int(time.time() * 1000), "h": 0, "i": props_string({}),
                            "j": 0, "k": "false", "m": "false"}, body)
    return h


def _topics(c: RawClient) -> set[str]:
    h, body = c.call(GET_ALL_TOPIC_CONFIG, {})
    assert h["code"] == SUCCESS, h
    return set(json.loads(body)["topicConfigTable"])


def _beat(c: RawClient, group: str) -> dict:
    body = json.dumps({"clientID": "c@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "T0", "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}).encode()
    return c.call(HEART_BEAT, {}, body)[0]


def _refused(h: dict, topic: str, cap: int = CAP) -> bool:
    return (h["code"] == TOPIC_NOT_EXIST and f"autoCreateTopicMax={cap}" in h["remark"]
            and topic in h["remark"])


def test_sends_auto_create_at_most_auto_create_topic_max_topics(tmp_path):
    ns = start_namesrv(tmp_path)
    conf = {"autoCreateTopicMax": str(CAP)}
    broker = start_broker(tmp_path / "store", ns.addr, conf=conf)
    try:
        with RawClient(broker.addr) as c:
            for i in range(CAP):
                assert _send(c, f"T{i}")["code"] == SUCCESS, i
            h = _send(c, f"T{CAP}")
            assert _refused(h, f"T{CAP}"), h
            # a client's send to the retry topic of a group the broker does not hold is a
            # made-up topic like any other
            assert _refused(_send(c, "%RETRY%made_up"), "%RETRY%made_up")
            held = _topics(c)
            assert f"T{CAP}" not in held and "%RETRY%made_up" not in held
            assert {f"T{i}" for i in range(CAP)} <= held
            # what it holds keeps taking sends
            assert _send(c, "T0")["code"] == SUCCESS and _send(c, f"T{CAP - 1}")["code"] == 0
            # an admin-created topic is not bounded and takes sends
            h, _ = c.call(UPDATE_AND_CREATE_TOPIC, {
                "topic": "AdminT", "defaultTopic": "TBW102", "readQueueNums": 2,
                "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0, "order": "false"})
            assert h["code"] == SUCCESS, h
            assert _send(c, "AdminT")["code"] == SUCCESS
            # a held group's retry topic (heartbeat) and DLQ topic (send-back) are still made
            assert _beat(c, "G1")["code"] == SUCCESS
            assert "%RETRY%G1" in _topics(c)
            assert _send(c, "%RETRY%G1")["code"] == SUCCESS
            h = _send(c, "T0", b"to the DLQ")
            offset = int(h["extFields"]["msgId"][-16:], 16)
            h, _ = c.call(CONSUMER_SEND_MSG_BACK, {
                "offset": offset, "group": "G1", "delayLevel": 0, "originTopic": "T0",
                "originMsgId": h["extFields"]["msgId"], "unitMode": "false",
                "maxReconsumeTimes": 0})
            assert h["code"] == SUCCESS, h
            assert "%DLQ%G1" in _topics(c)
            # a run-time change (updateBrokerConfig) makes room
            h, _ = c.call(UPDATE_BROKER_CONFIG, {}, f"autoCreateTopicMax={CAP + 2}\n".encode())
            assert h["code"] == SUCCESS, h
            # AdminT counts too (topics.json keeps no record of how a topic was made)
            assert _send(c, f"T{CAP}")["code"] == SUCCESS
            assert _refused(_send(c, f"T{CAP + 1}"), f"T{CAP + 1}", CAP + 2)
        assert broker.stop() == 0, broker.output[-3000:]
        # the count is taken again from topics.json after a restart
        broker = start_broker(tmp_path / "store", ns.addr, conf=conf)
        with RawClient(broker.addr) as c:
            assert _refused(_send(c, "After"), "After")
            assert _send(c, "T1")["code"] == SUCCESS
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def test_the_in_process_send_path_is_bounded_too(tmp_path):
    """``Producer(broker=...)`` (the in-process send lane) creates a new topic through the
    broker's full send path, so the same bound holds."""
    with Broker.open(tmp_path / "b", BrokerConfig(auto_create_topic_max=2),
                     StoreConfig(mapped_file_size_commit_log=4 << 20)) as b, \
            Producer("pg_cap", broker=b, retry_times_when_send_failed=0) as p:
        p.send(Message("In1", b"1"))
        p.send(Message("In2", b"2"))
        with pytest.raises(MQBrokerError) as e:
            p.send(Message("In3", b"3"))
        assert e.value.code == TOPIC_NOT_EXIST and "autoCreateTopicMax=2" in str(e.value)
        assert b.topic_manager.select("In3") is None
        assert p.send(Message("In1", b"again")).queue_offset >= 0
