"""REGISTER_BROKER's topics are checked as topics a broker may hold (docs/protocol.md): a body
naming a topic that is not a valid name, or with queue counts, perm or sys flag outside
``TopicConfig``'s ranges, is refused whole with SYSTEM_ERROR naming the field, and the routes
keep what was registered before. 4.9.8 takes any value, so one registration could make every
client that looks a topic up build 2**31 queues. A real ``rocketstore namesrv`` process,
hand-built frames (tests/rawwire.py)."""
from __future__ import annotations

import json
from pathlib import Path

from rawwire import RawClient
from servers import start_namesrv

REGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC = 103, 105
SUCCESS, SYSTEM_ERROR, TOPIC_NOT_EXIST = 0, 1, 17


def register(c: RawClient, topics: dict[str, dict], counter: int) -> dict:
    body = json.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": topics, "dataVersion": {"timestamp": 1, "counter": counter}},
        "filterServerList": []}).encode()
    h, _ = c.call(REGISTER_BROKER, {
        "brokerName": "broker-r", "brokerAddr": "10.2.0.1:10911", "clusterName": "C",
        "haServerAddr": "10.2.0.1:10912", "brokerId": 0, "compressed": "false",
        "bodyCrc32": 0}, body)
    return h


def topic(name: str, **kw: object) -> dict:
    return {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, **kw}


def test_a_registration_with_a_bad_topic_is_refused_naming_it(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path)
    try:
        with RawClient(ns.addr) as c:
            assert register(c, {"Good": topic("Good")}, 1)["code"] == SUCCESS
            bad = [("Poison", topic("Poison", writeQueueNums=2**31 - 1), "writeQueueNums"),
                   ("Poison", topic("Poison", readQueueNums=-1), "readQueueNums"),
                   ("Poison", topic("Poison", perm=255), "perm"),
                   ("Poison", topic("Poison", perm="6"), "perm"),
                   ("a/../b", topic("a/../b"), "topicConfigTable"),
                   ("T" * 200, topic("T" * 200), "topicConfigTable")]
            for i, (name, tc, field) in enumerate(bad):
                h = register(c, {"Good": topic("Good", writeQueueNums=8), name: tc}, 2 + i)
                assert h["code"] == SYSTEM_ERROR, (name, h)
                assert field in h["remark"] and "REGISTER_BROKER" in h["remark"], h
                h, _ = c.call(GET_ROUTEINFO_BY_TOPIC, {"topic": name})
                assert h["code"] != SUCCESS, name
            # nothing of the refused registrations was kept
            h, body = c.call(GET_ROUTEINFO_BY_TOPIC, {"topic": "Good"})
            assert h["code"] == SUCCESS
            assert json.loads(body)["queueDatas"][0]["writeQueueNums"] == 4
    finally:
        ns.stop()
