"""LOCK_BATCH_MQ over the wire locks only queues this broker serves: a client cannot grow the
broker's lock table with queues that do not exist (4.9.8 records every one it is sent, and
never forgets them). A real broker process, hand-built frames (tests/rawwire.py)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from rawwire import RawClient
from servers import start_broker, start_namesrv

SEND_MESSAGE, HEART_BEAT, LOCK_BATCH_MQ = 10, 34, 41
SUCCESS = 0


def test_only_served_queues_are_locked(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)      # broker-a
    try:
        with RawClient(broker.addr) as c:
            h, _ = c.call(SEND_MESSAGE, {
                "producerGroup": "PG_lock", "topic": "LockT", "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
                "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}, b"x")
            assert h["code"] == SUCCESS, h
            hb = {"clientID": "locker@1", "producerDataSet": [], "consumerDataSet": [{
                "groupName": "LockG", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False, "subscriptionDataSet": [{
                    "topic": "LockT", "subString": "*", "tagsSet": [], "codeSet": [],
                    "subVersion": 1}]}]}
            h, _ = c.call(HEART_BEAT, {}, json.dumps(hb).encode())
            assert h["code"] == SUCCESS, h
            mqs = [{"topic": "LockT", "brokerName": "broker-a", "queueId": i}
                   for i in range(5000)]
            mqs += [{"topic": "NoSuchTopic", "brokerName": "broker-a", "queueId": 0},
                    {"topic": "LockT", "brokerName": "broker-z", "queueId": 1}]
            h, body = c.call(LOCK_BATCH_MQ, {}, json.dumps({
                "consumerGroup": "LockG", "clientId": "locker@1", "mqSet": mqs}).encode())
            assert h["code"] == SUCCESS, h
            locked = json.loads(body)["lockOKMQSet"]
            assert sorted((m["topic"], m["brokerName"], m["queueId"]) for m in locked) == [
                ("LockT", "broker-a", i) for i in range(4)]
    finally:
        broker.stop()
        ns.stop()
