"""Where RocketMQ 4.9.8's own tools saw a difference (issue 26 items 1 and 3), checked against
real ``rocketstore namesrv`` / ``rocketstore broker`` processes with the frames a Java client
sends (tests/rawwire.py): SEARCH_OFFSET_BY_TIMESTAMP's boundary, and request-reply (SEND_REPLY
_MESSAGE(_V2) 324/325 pushed to the requester as PUSH_REPLY_MESSAGE_TO_CLIENT 326)."""
from __future__ import annotations

import json
import struct
import time
from typing import Any

import pytest

from rawwire import RawClient, props_string  # noqa: E402  (tests/rawwire.py)
from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

SEND_V2, SEARCH_OFFSET, VIEW_MESSAGE, UPDATE_TOPIC, HEART_BEAT = 310, 29, 33, 17, 34
SEND_REPLY, SEND_REPLY_V2, PUSH_REPLY = 324, 325, 326
SUCCESS, SYSTEM_ERROR = 0, 1
CLUSTER = "DefaultCluster"
REPLY_TOPIC = f"{CLUSTER}_REPLY_TOPIC"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wire-parity")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr, {"mappedFileSizeCommitLog": str(16 << 20)})
    for topic in ("Times", "Requests"):
        with RawClient(broker.addr) as c:
            h, _ = c.call(UPDATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 1,
                "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0, "order": "false"})
            assert h["code"] == SUCCESS, h
    yield ns, broker
    assert broker.stop() == 0, broker.output[-3000:]
    assert ns.stop() == 0


def v2_header(topic: str, props: dict[str, str], group: str = "PG-parity", queue: int = 0
              ) -> dict[str, Any]:
    return {"a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue, "f": 0,
            "g": int(time.time() * 1000), "h": 0, "i": props_string(props), "j": 0, "k": "false"}


def store_time(c: RawClient, msg_id: str) -> int:
    """The store timestamp of the record a send answered ``msg_id`` for (VIEW_MESSAGE_BY_ID:
    the record as stored; with an IPv4 born host the store time is its bytes 56..64)."""
    h, body = c.call(VIEW_MESSAGE, {"offset": int(msg_id[-16:], 16)})
    assert h["code"] == SUCCESS, h
    return struct.unpack_from(">q", body, 56)[0]


def wait_max_offset(c: RawClient, topic: str, at_least: int) -> int:
    """GET_MAX_OFFSET once every message sent so far is dispatched to the consume queue."""
    deadline = time.monotonic() + 30
    while True:
        h, _ = c.call(30, {"topic": topic, "queueId": 0})
        n = int(h["extFields"]["offset"])
        if n >= at_least or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


# -- item 3: SEARCH_OFFSET_BY_TIMESTAMP ------------------------------------------------------

def test_search_offset_keeps_lower_and_honours_a_5x_boundary(cluster):
    """Two messages at t0 < t1. A 4.9.8 broker answers the nearest message (0 between them,
    1 after t1); ours answers RocketMQ 5's LOWER rule when no boundary is sent (1, then the
    max offset 2), and a 5.x client's ``boundaryType`` is honoured."""
    _, broker = cluster
    with RawClient(broker.addr) as c:
        times, offsets = [], []
        for i in range(2):
            prev = times[-1] if times else None
            while True:                 # the two store times must differ by 2 ms at least
                h, _ = c.call(SEND_V2, v2_header("Times", {"UNIQ_KEY": f"t{i}-{time.time()}"}),
                              b"x")
                assert h["code"] == SUCCESS, h
                t = store_time(c, h["extFields"]["msgId"])
                if prev is None or t >= prev + 2:
                    break
                time.sleep(0.005)       # a message too close: stored but not looked at
            times.append(t)
            offsets.append(int(h["extFields"]["queueOffset"]))
        t0, t1 = times
        first, second = offsets
        n = wait_max_offset(c, "Times", second + 1)

        def search(ts: int, **extra: str) -> int:
            h, _ = c.call(SEARCH_OFFSET, {"topic": "Times", "queueId": 0, "timestamp": ts,
                                          **extra})
            assert h["code"] == SUCCESS, h
            return int(h["extFields"]["offset"])

        between = (t0 + t1) // 2
        assert t0 < between < t1
        # what a 4.9.8 client sends (no boundary): LOWER
        assert search(between) == second
        assert search(t1 + 10_000) == n
        # RocketMQ 5's header field, by its enum name
        assert search(between, boundaryType="LOWER") == second
        assert search(between, boundaryType="UPPER") == first
        assert search(t1 + 10_000, boundaryType="UPPER") == second
        assert search(t1, boundaryType="upper") == second
        assert search(t0, boundaryType="LOWER") == first
        # our TCP client sends the field when given a boundary, nothing otherwise
        from rocketstore.client.tcp import TcpTransport
        t = TcpTransport(cluster[0].addr)
        try:
            assert t.search_offset("broker-a", "Times", 0, between) == second
            assert t.search_offset("broker-a", "Times", 0, between, "UPPER") == first
        finally:
            t.close()
        # anything else is refused with the field named, not guessed
        h, _ = c.call(SEARCH_OFFSET, {"topic": "Times", "queueId": 0, "timestamp": between,
                                      "boundaryType": "NEAREST"})
        assert h["code"] == SYSTEM_ERROR and "boundaryType" in h["remark"], h
