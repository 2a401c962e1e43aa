"""UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) refuses a retryQueueNums outside what a topic may
have (0..65,535): the group's %RETRY% topic is created with that many queues at its consumers'
next heartbeat, and a value 4.9.8 takes (1,000,000) left the group unable to heartbeat. A real
broker process, hand-built frames (tests/rawwire.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rawwire import RawClient
from servers import start_broker, start_namesrv

HEART_BEAT, UPDATE_SUB_GROUP = 34, 200
SUCCESS, INVALID_PARAMETER = 0, 29


def heartbeat(group: str) -> bytes:
    return json.dumps({"clientID": "sg@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "SgT", "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}).encode()


@pytest.mark.parametrize("value", [1_000_000, -1])
def test_retry_queue_nums_out_of_range_is_refused(tmp_path: Path, value: int) -> None:
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    try:
        with RawClient(broker.addr) as c:
            h, _ = c.call(UPDATE_SUB_GROUP, {}, json.dumps(
                {"groupName": "SgG", "retryQueueNums": 2, "retryMaxTimes": 16}).encode())
            assert h["code"] == SUCCESS, h
            h, _ = c.call(UPDATE_SUB_GROUP, {}, json.dumps(
                {"groupName": "SgG", "retryQueueNums": value}).encode())
            assert h["code"] == INVALID_PARAMETER, h
            assert "retryQueueNums" in h["remark"] or "retry_queue_nums" in h["remark"], h
            # the group keeps its config, and its consumers can heartbeat
            h, _ = c.call(HEART_BEAT, {}, heartbeat("SgG"))
            assert h["code"] == SUCCESS, h
    finally:
        broker.stop()
        ns.stop()
