"""WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327) change only the write bit
of a broker's queue data in the routes: TBW102 keeps its INHERIT bit (4.9.8's 327 sets every
perm to 6). A real ``rocketstore namesrv`` process, hand-built frames (tests/rawwire.py)."""
from __future__ import annotations

import json
from pathlib import Path

from rawwire import RawClient
from servers import start_namesrv

WIPE_WRITE_PERM, REGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC, ADD_WRITE_PERM = 205, 103, 105, 327
SUCCESS = 0
PERMS = {"TBW102": 7, "Plain": 6, "ReadOnly": 4}


def route_perm(c: RawClient, topic: str) -> int:
    h, body = c.call(GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert h["code"] == SUCCESS, h
    (qd,) = json.loads(body)["queueDatas"]
    return qd["perm"]


def test_add_write_perm_only_adds_the_write_bit(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path)
    try:
        with RawClient(ns.addr) as c:
            table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": p}
                     for t, p in PERMS.items()}
            body = json.dumps({"topicConfigSerializeWrapper": {
                "topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}},
                "filterServerList": []}).encode()
            h, _ = c.call(REGISTER_BROKER, {
                "brokerName": "broker-p", "brokerAddr": "10.1.0.1:10911", "clusterName": "C",
                "haServerAddr": "10.1.0.1:10912", "brokerId": 0, "compressed": "false",
                "bodyCrc32": 0}, body)
            assert h["code"] == SUCCESS, h
            assert {t: route_perm(c, t) for t in PERMS} == PERMS
            h, _ = c.call(WIPE_WRITE_PERM, {"brokerName": "broker-p"})
            assert h["code"] == SUCCESS and h["extFields"]["wipeTopicCount"] == "3", h
            assert {t: route_perm(c, t) for t in PERMS} == {"TBW102": 5, "Plain": 4,
                                                          "ReadOnly": 4}
            h, _ = c.call(ADD_WRITE_PERM, {"brokerName": "broker-p"})
            assert h["code"] == SUCCESS and h["extFields"]["addTopicCount"] == "3", h
            # write added, every other bit kept: TBW102 still inherits
            assert {t: route_perm(c, t) for t in PERMS} == {"TBW102": 7, "Plain": 6,
                                                          "ReadOnly": 6}
    finally:
        ns.stop()
