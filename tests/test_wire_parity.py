"""Where RocketMQ 4.9.8's own tools saw a difference (issue 26 items 1 and 3), checked against
real ``rocketstore namesrv`` / ``rocketstore broker`` processes with the frames a Java client
sends (tests/rawwire.py): SEARCH_OFFSET_BY_TIMESTAMP's boundary, and request-reply (SEND_REPLY
_MESSAGE(_V2) 324/325 pushed to the requester as PUSH_REPLY_MESSAGE_TO_CLIENT 326)."""
from __future__ import annotations

import importlib.util
import json
import struct
import time
from typing import Any

import pytest

from rawwire import RawClient, frame, props_string  # noqa: E402  (tests/rawwire.py)
from servers import ServerProcess, start_broker, start_namesrv  # noqa: E402

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
        # send until the last two were stored 2 ms apart or more: t0 < between < t1, and
        # every message before them was stored at t0 or earlier
        times: list[int] = []
        offsets: list[int] = []
        for i in range(10_000):
            h, _ = c.call(SEND_V2, v2_header("Times", {"UNIQ_KEY": f"t{i}-{time.time()}"}),
                          b"x")
            assert h["code"] == SUCCESS, h
            times.append(store_time(c, h["extFields"]["msgId"]))
            offsets.append(int(h["extFields"]["queueOffset"]))
            if len(times) >= 2 and times[-1] >= times[-2] + 2:
                break
            time.sleep(0.005)
        t0, t1 = times[-2:]
        first, second = offsets[-2:]
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
        assert search(t1, boundaryType="LOWER") == second
        assert search(t0, boundaryType="UPPER") == first
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


# -- item 1: request-reply -------------------------------------------------------------------

def producer_heartbeat(client_id: str, group: str) -> bytes:
    return json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": group}],
                       "consumerDataSet": []}).encode()


def reply_props(correlation_id: str, reply_to: str) -> dict[str, str]:
    """What ``MessageUtil.createReplyMessage`` puts on a reply (plus the client's UNIQ_KEY)."""
    return {"MSG_TYPE": "reply", "CORRELATION_ID": correlation_id, "REPLY_TO_CLIENT": reply_to,
            "TTL": "3000", "UNIQ_KEY": f"reply-{correlation_id}"}


def reply_topic_max(c: RawClient) -> int:
    h, _ = c.call(30, {"topic": REPLY_TOPIC, "queueId": 0})
    assert h["code"] == SUCCESS, h
    return int(h["extFields"]["offset"])


@pytest.mark.parametrize("code", [SEND_REPLY_V2, SEND_REPLY])
def test_a_java_replier_reaches_the_requester_connection_as_326(cluster, code):
    """A 325 (or 324, long-named header) from a Java-like replier is pushed to the connection
    the requester's client id heartbeated on, as PUSH_REPLY_MESSAGE_TO_CLIENT with
    ReplyMessageRequestHeader's fields; the replier is answered once the requester took it,
    and the reply is stored in the reply topic (storeReplyMessageEnable)."""
    _, broker = cluster
    with RawClient(broker.addr) as requester, RawClient(broker.addr) as replier:
        h, _ = requester.call(HEART_BEAT, {}, producer_heartbeat(f"req@{code}", "PG-req"))
        assert h["code"] == SUCCESS, h
        stored_before = reply_topic_max(replier)
        props = reply_props(f"corr-{code}", f"req@{code}")
        header = v2_header(REPLY_TOPIC, props, group="PG-replier")
        if code == SEND_REPLY:      # SendMessageRequestHeader's long names
            header = {"producerGroup": "PG-replier", "topic": REPLY_TOPIC,
                      "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 0,
                      "sysFlag": 0, "bornTimestamp": header["g"], "flag": 0,
                      "properties": props_string(props), "reconsumeTimes": 0,
                      "unitMode": "false"}
        replier.send(frame(code, header, b"the answer", opaque=7001))
        push, body = requester.read_frame()
        assert push["code"] == PUSH_REPLY and not push.get("flag", 0) & 1, push
        ext = push["extFields"]
        assert body == b"the answer"
        assert ext["topic"] == REPLY_TOPIC and ext["producerGroup"] == "PG-replier"
        assert ext["queueId"] == "0" and ext["sysFlag"] == "0" and ext["flag"] == "0"
        assert ext["bornTimestamp"] == str(header.get("g", header.get("bornTimestamp")))
        assert ext["storeHost"] == broker.addr
        assert ext["bornHost"].startswith("127.0.0.1:")
        assert int(ext["storeTimestamp"]) > 0
        pushed = dict(p.split("\x01", 1) for p in ext["properties"].split("\x02") if p)
        assert {k: pushed[k] for k in props} == props
        assert int(pushed["PUSH_REPLY_TIME"]) >= int(ext["storeTimestamp"])
        # nothing answered yet: the replier waits for the requester
        requester.send(frame(0, {}, opaque=push["opaque"], flag=1))
        h, _ = replier.read_response(7001)
        assert h["code"] == SUCCESS, h
        assert h["extFields"]["queueId"] == "0"
        # stored as sent (no PUSH_REPLY_TIME, no CLUSTER): the answer names its record
        msg_id = h["extFields"]["msgId"]
        assert msg_id != "0" and int(h["extFields"]["queueOffset"]) >= stored_before
        h, record = replier.call(VIEW_MESSAGE, {"offset": int(msg_id[-16:], 16)})
        assert h["code"] == SUCCESS, h
        assert props_string(props).encode().rstrip(b"\x02") in record
        assert b"the answer" in record and REPLY_TOPIC.encode() in record
        assert b"PUSH_REPLY_TIME" not in record and b"CLUSTER" not in record


def test_a_reply_nobody_can_take_is_a_system_error(cluster):
    """No REPLY_TO_CLIENT, an unknown client id, a requester that answers an error: SYSTEM_ERROR
    with 4.9.8's remarks."""
    _, broker = cluster
    with RawClient(broker.addr) as replier:
        props = reply_props("corr-x", "nobody@1")
        h, _ = replier.call(SEND_REPLY_V2, v2_header(REPLY_TOPIC, props), b"lost")
        assert h["code"] == SYSTEM_ERROR, h
        assert h["remark"] == "push reply message fail, channel of <nobody@1> not found.", h
        del props["REPLY_TO_CLIENT"]
        h, _ = replier.call(SEND_REPLY_V2, v2_header(REPLY_TOPIC, props), b"lost")
        assert h["code"] == SYSTEM_ERROR, h
        assert h["remark"] == "reply message properties[REPLY_TO_CLIENT] is null", h
        with RawClient(broker.addr) as requester:
            h, _ = requester.call(HEART_BEAT, {}, producer_heartbeat("sick@1", "PG-req"))
            assert h["code"] == SUCCESS, h
            replier.send(frame(SEND_REPLY_V2, v2_header(REPLY_TOPIC, reply_props("c", "sick@1")),
                               b"x", opaque=7002))
            push, _ = requester.read_frame()
            assert push["code"] == PUSH_REPLY
            requester.send(frame(1, {}, opaque=push["opaque"], flag=1))
            h, _ = replier.read_response(7002)
            assert h["code"] == SYSTEM_ERROR and h["remark"] == "push reply message to sick@1fail."


def test_request_reply_between_our_clients_over_tcp(cluster):
    """``Producer.request`` / ``request_async`` against a PushConsumer that answers with
    ``create_reply_message`` + ``send``; a request nobody answers raises RequestTimeoutError."""
    from rocketstore.client import (ConsumeConcurrentlyStatus, Message, Producer, PushConsumer,
                                    create_reply_message)
    from rocketstore.errors import RequestTimeoutError
    ns, _ = cluster
    with Producer("PG-requester", namesrv_addr=ns.addr) as requester, \
            Producer("PG-replier", namesrv_addr=ns.addr) as replier:
        def listener(msgs, ctx):
            for m in msgs:
                r = create_reply_message(m, b"re:" + bytes(m.body))
                if bytes(m.body) == b"n1":      # an async send of a reply is a reply too
                    replier.send_async(r).result(30)
                else:
                    replier.send(r)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        c = PushConsumer("CG-replier", namesrv_addr=ns.addr,
                         consume_from_where="CONSUME_FROM_LAST_OFFSET")
        c.subscribe("Requests", "*")
        c.register_message_listener(listener)
        c.start()
        try:
            r = requester.request(Message("Requests", b"ping"), 30_000)
            assert bytes(r.body) == b"re:ping" and r.topic == REPLY_TOPIC
            assert r.properties["MSG_TYPE"] == "reply" and "ARRIVE_TIME" in r.properties
            assert r.store_host  # where the broker stored it
            futs = [requester.request_async(Message("Requests", f"n{i}".encode()), 30_000)
                    for i in range(3)]
            assert sorted(bytes(f.result(60).body) for f in futs) == [b"re:n0", b"re:n1", b"re:n2"]
        finally:
            c.shutdown()
        with pytest.raises(RequestTimeoutError) as ei:
            requester.request(Message("Times", b"nobody answers Times"), 500)
        assert ei.value.sent and "<Times>" in str(ei.value)
        late = requester.request_async(Message("Times", b"nor this"), 300)
        with pytest.raises(RequestTimeoutError):
            late.result(30)


# -- item 5: the servers' event loop --------------------------------------------------------

def test_servers_log_which_event_loop_they_run(cluster, tmp_path):
    """uvloop when installed (pyproject's server and test extras install it), else asyncio;
    ROCKETSTORE_EVENT_LOOP=asyncio keeps a server on asyncio's loop."""
    ns, broker = cluster
    expected = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert f"event loop: {expected}" in broker.output, broker.output
    assert f"event loop: {expected}" in ns.output, ns.output
    p = ServerProcess(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                       str(tmp_path / "kv.json")], env={"ROCKETSTORE_EVENT_LOOP": "asyncio"})
    try:
        assert "event loop: asyncio" in p.output, p.output
    finally:
        assert p.stop() == 0


def test_event_loop_choice(monkeypatch):
    from rocketstore.remoting.server import loop_name, new_event_loop

    def made(**kw: bool) -> str:
        loop = new_event_loop(**kw)
        try:
            return loop_name(loop)
        finally:
            loop.close()
    installed = importlib.util.find_spec("uvloop") is not None
    monkeypatch.delenv("ROCKETSTORE_EVENT_LOOP", raising=False)
    assert made() == ("uvloop" if installed else "asyncio")
    assert made(use_uvloop=False) == "asyncio"
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", "asyncio")
    assert made() == "asyncio"
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", "uvloop")
    assert made(use_uvloop=False) == "asyncio"     # a loop that must not be uvloop stays so
    if installed:
        assert made() == "uvloop"
    else:
        with pytest.raises(ImportError, match="rocketstore\\[server\\]"):
            made()
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", "tokio")
    with pytest.raises(ValueError, match="ROCKETSTORE_EVENT_LOOP='tokio'"):
        made()
