"""Red team (issue 20, items 2, 5, 8): the ACL checks what runs, a client is its connection,
malformed input is one log line. Everything is sent as raw frames (tests/rawwire.py) to real
``rocketstore broker`` / ``rocketstore namesrv`` processes; what is asserted is what a user
relies on: what is stored in which queue, who stays registered, where a group's offsets are,
what the server logs and that it keeps serving."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import struct
import threading
import time
from typing import Any

import pytest

from rawwire import RawClient, frame, props_string  # noqa: E402  (tests/rawwire.py)
from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

SEND_MESSAGE, SEND_V2, SEND_BATCH = 10, 310, 320
PULL, QUERY_OFFSET, UPDATE_OFFSET, GET_MAX_OFFSET = 11, 14, 15, 30
HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST = 34, 35, 38
UPDATE_TOPIC, RESET_OFFSET, LOCK_BATCH_MQ = 17, 222, 41
QUERY_DATA_VERSION, REGISTER_BROKER = 322, 103
SUCCESS, SYSTEM_ERROR, NO_PERMISSION, CONSUMER_NOT_ONLINE = 0, 1, 16, 206
# an ACL refusal is answered as 4.9.8 answers it: SYSTEM_ERROR with its AclException text
ACL_REFUSED = SYSTEM_ERROR
ACL_EXC = "org.apache.rocketmq.acl.common.AclException: "


ACL_YML = """
accounts:
  - accessKey: limited01
    secretKey: limited-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Allowed=PUB|SUB
      - Secret=DENY
    groupPerms:
      - VictimG=DENY
  - accessKey: admin0001
    secretKey: admin-secret
    admin: true
"""
KEYS = {"limited01": "limited-secret", "admin0001": "admin-secret"}


def sign(ext: dict[str, Any], body: bytes, ak: str) -> dict[str, str]:
    """AclClientRPCHook's rule, written out here: HmacSHA1 over the values sorted by name,
    then the body, Base64."""
    fields = {k: str(v) for k, v in ext.items()}
    fields["AccessKey"] = ak
    content = "".join(fields[k] for k in sorted(fields)).encode() + body
    fields["Signature"] = base64.b64encode(
        hmac.new(KEYS[ak].encode(), content, hashlib.sha1).digest()).decode()
    return fields


def call(addr: str, code: int, ext: dict[str, Any], body: bytes = b"", ak: str = "admin0001",
         client: RawClient | None = None) -> tuple[dict[str, Any], bytes]:
    if client is not None:
        return client.call(code, sign(ext, body, ak), body)
    with RawClient(addr) as c:
        return c.call(code, sign(ext, body, ak), body)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redteam-acl")
    store = tmp / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    ns = start_namesrv(tmp)
    broker = start_broker(store, ns.addr, {"aclEnable": "true",
                                           "mappedFileSizeCommitLog": str(16 << 20)})
    for topic in ("Allowed", "Secret"):
        h, _ = call(broker.addr, UPDATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4,
            "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert h["code"] == SUCCESS, h
    yield ns, broker
    assert broker.stop() == 0, broker.output[-3000:]
    assert ns.stop() == 0


def max_offset(addr: str, topic: str, qid: int) -> int:
    h, _ = call(addr, GET_MAX_OFFSET, {"topic": topic, "queueId": qid})
    assert h["code"] == SUCCESS, h
    return int(h["extFields"]["offset"])


def settle(addr: str) -> None:
    """Wait until everything sent so far is in its consume queue: a marker sent now (to
    Allowed's queue 3) is dispatched after every earlier message (commit-log order)."""
    h, _ = call(addr, SEND_V2, v2_header("Allowed", e=3), b"marker")
    assert h["code"] == SUCCESS, h
    q = int(h["extFields"]["queueOffset"])
    wait_for(lambda: max_offset(addr, "Allowed", 3) > q, "the marker's dispatch")


def stored(addr: str, topic: str, queues: tuple[int, ...] = (0, 1, 2, 3)) -> int:
    """Messages in ``queues`` of ``topic`` once all sent so far is dispatched."""
    settle(addr)
    return sum(max_offset(addr, topic, qid) for qid in queues)


def v2_header(b_topic: str, **extra: Any) -> dict[str, Any]:
    return {"a": "PG-red", "b": b_topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
            "g": int(time.time() * 1000), "h": 0, "i": props_string({"UNIQ_KEY": "red"}),
            "j": 0, "k": "false", **extra}


def batch_body(*bodies: bytes) -> bytes:
    out = b""
    for b in bodies:
        props = b""
        out += struct.pack(">iiiii", 20 + len(b) + 2 + len(props), 0, 0, 0, len(b)) + b
        out += struct.pack(">h", len(props)) + props
    return out


# -- item 2: the ACL checks what is executed -------------------------------------------------

def test_limited_account_is_refused_on_secret(acl_broker):
    _, broker = acl_broker
    h, _ = call(broker.addr, SEND_V2, v2_header("Secret"), b"direct", ak="limited01")
    # 4.9.8's remark first (exceptionSimpleDesc of the AclException), then our wording
    assert h["code"] == ACL_REFUSED, h
    assert h["remark"] == (
        ACL_EXC + "No default permission for topic:Secret, org.apache.rocketmq.acl.plain."
        "PlainPermissionManager.checkPerm(PlainPermissionManager.java:611); No permission for "
        "topic:Secret: accessKey=limited01 has DENY, the request needs PUB"), h
    h, _ = call(broker.addr, SEND_V2, v2_header("Allowed"), b"fine", ak="limited01")
    assert h["code"] == SUCCESS, h
    assert stored(broker.addr, "Secret") == 0


@pytest.mark.parametrize("code, make", [
    (SEND_V2, lambda b: (v2_header(b, topic="Secret"), b"smuggled")),
    (SEND_BATCH, lambda b: (v2_header(b, topic="Secret", m="true"), batch_body(b"s1", b"s2"))),
    # the long-named code: one-letter names must not override its long ones either
    (SEND_MESSAGE, lambda b: ({"producerGroup": "PG-red", "topic": b, "defaultTopic": "TBW102",
                               "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                               "bornTimestamp": 1, "flag": 0, "b": "Secret"}, b"smuggled")),
], ids=["v2", "batch", "send_message"])
@pytest.mark.parametrize("named", ["Allowed", "RMQ_SYS_TRACE_TOPIC"])
def test_a_second_topic_field_never_reaches_a_denied_topic(acl_broker, code, make, named):
    _, broker = acl_broker
    secret_before = stored(broker.addr, "Secret")
    allowed_before = stored(broker.addr, "Allowed", (0,))
    ext, body = make(named)
    h, _ = call(broker.addr, code, ext, body, ak="limited01")
    assert stored(broker.addr, "Secret") == secret_before == 0, h
    if named == "Allowed":
        # executed as what the ACL checked: a send to Allowed
        assert h["code"] == SUCCESS, h
        n = 2 if code == SEND_BATCH else 1
        assert stored(broker.addr, "Allowed", (0,)) == allowed_before + n


def test_trace_topic_exemption_covers_only_a_send_to_the_trace_topic(acl_broker):
    _, broker = acl_broker
    # a send into %RETRY%VictimG is checked against the group it belongs to, whatever the
    # producer group says (VictimG is DENY for limited01)
    h, _ = call(broker.addr, SEND_V2, v2_header("%RETRY%VictimG", a="RMQ_SYS_TRACE_TOPIC"),
                b"x", ak="limited01")
    assert h["code"] == ACL_REFUSED and "group:VictimG" in h["remark"], h
    # a pull of Secret naming the trace topic anywhere else is still refused
    h, _ = call(broker.addr, PULL, {
        "consumerGroup": "RMQ_SYS_TRACE_TOPIC", "topic": "Secret", "queueId": 0,
        "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "b": "RMQ_SYS_TRACE_TOPIC"}, ak="limited01")
    assert h["code"] == ACL_REFUSED and "topic:Secret" in h["remark"], h


# -- item 5: a client is its connection --------------------------------------------------------

def heartbeat(client_id: str, group: str, topic: str = "Allowed") -> bytes:
    return json.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}).encode()


def consumers(addr: str, group: str) -> list[str]:
    h, body = call(addr, GET_CONSUMER_LIST, {"consumerGroup": group})
    return json.loads(body)["consumerIdList"] if h["code"] == SUCCESS else []


def test_unregister_from_another_connection_removes_nothing(acl_broker):
    _, broker = acl_broker
    with RawClient(broker.addr) as victim:
        h, _ = call(broker.addr, HEART_BEAT, {}, heartbeat("victim@1", "SharedG"),
                    ak="limited01", client=victim)
        assert h["code"] == SUCCESS, h
        assert consumers(broker.addr, "SharedG") == ["victim@1"]
        with RawClient(broker.addr) as stranger:
            h, _ = call(broker.addr, UNREGISTER_CLIENT, {
                "clientID": "victim@1", "consumerGroup": "SharedG", "producerGroup": ""},
                ak="limited01", client=stranger)
            assert h["code"] == SUCCESS, h
            assert consumers(broker.addr, "SharedG") == ["victim@1"]
            # the stranger, registered under the victim's id, removes only itself
            h, _ = call(broker.addr, HEART_BEAT, {}, heartbeat("victim@1", "SharedG"),
                        ak="limited01", client=stranger)
            h, _ = call(broker.addr, UNREGISTER_CLIENT, {
                "clientID": "victim@1", "consumerGroup": "SharedG"},
                ak="limited01", client=stranger)
            assert h["code"] == SUCCESS
            assert consumers(broker.addr, "SharedG") == ["victim@1"]
        # the victim's own unregister works
        h, _ = call(broker.addr, UNREGISTER_CLIENT, {
            "clientID": "victim@1", "consumerGroup": "SharedG"}, ak="limited01", client=victim)
        assert h["code"] == SUCCESS
        assert consumers(broker.addr, "SharedG") == []


def lock_body(group: str, client_id: str, qids: tuple[int, ...]) -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [
        {"topic": "Allowed", "brokerName": "broker-a", "queueId": q} for q in qids]}).encode()


def test_orderly_locks_belong_to_the_connection(acl_broker):
    """A stranger naming the victim's clientId can neither unlock the victim's orderly queues
    nor lock in its name; the victim keeps its locks (UNLOCK 42 / LOCK 41)."""
    _, broker = acl_broker
    with RawClient(broker.addr) as victim, RawClient(broker.addr) as stranger:
        h, _ = call(broker.addr, HEART_BEAT, {}, heartbeat("owner@1", "LockG"), ak="limited01",
                    client=victim)
        assert h["code"] == SUCCESS
        h, body = call(broker.addr, LOCK_BATCH_MQ, {}, lock_body("LockG", "owner@1", (0, 1)),
                       ak="limited01", client=victim)
        assert h["code"] == SUCCESS and len(json.loads(body)["lockOKMQSet"]) == 2, (h, body)
        # the stranger (no heartbeat of that id on its connection) is refused, in both ways
        for code in (42, LOCK_BATCH_MQ):
            h, _ = call(broker.addr, code, {}, lock_body("LockG", "owner@1", (0, 1)),
                        ak="limited01", client=stranger)
            assert h["code"] == NO_PERMISSION and "owner@1" in h["remark"], h
        # a second client of the group cannot take the victim's queues: they are still locked
        h, _ = call(broker.addr, HEART_BEAT, {}, heartbeat("other@2", "LockG"), ak="limited01",
                    client=stranger)
        h, body = call(broker.addr, LOCK_BATCH_MQ, {}, lock_body("LockG", "other@2", (0, 1, 2)),
                       ak="limited01", client=stranger)
        assert h["code"] == SUCCESS
        assert [mq["queueId"] for mq in json.loads(body)["lockOKMQSet"]] == [2]


def test_send_back_cannot_copy_a_denied_topic_into_the_retry_topic(acl_broker):
    """CONSUMER_SEND_MSG_BACK (36) names a commit-log offset; the ACL checks only the group.
    A consumer must not get a message of a topic it may not read copied into its own retry
    topic (4.9.8 copies whatever record the offset names)."""
    _, broker = acl_broker
    # Vault: denied to limited01 by its default topic permission (Secret stays empty for the
    # other tests of this module)
    h, _ = call(broker.addr, UPDATE_TOPIC, {
        "topic": "Vault", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4,
        "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert h["code"] == SUCCESS, h
    h, _ = call(broker.addr, SEND_V2, v2_header("Vault", e=1), b"top secret")   # the admin
    assert h["code"] == SUCCESS, h
    offset = int(h["extFields"]["msgId"][-16:], 16)
    with RawClient(broker.addr) as thief:
        h, _ = call(broker.addr, HEART_BEAT, {}, heartbeat("thief@1", "ThiefG"), ak="limited01",
                    client=thief)
        assert h["code"] == SUCCESS, h
        h, _ = call(broker.addr, 36, {"group": "ThiefG", "offset": offset, "delayLevel": -1,
                                      "originMsgId": "x", "originTopic": "Allowed",
                                      "unitMode": "false", "maxReconsumeTimes": 16},
                    ak="limited01", client=thief)
        assert h["code"] == NO_PERMISSION and "Vault" in h["remark"], h
    # nothing reached the group's DLQ (delay -1) or retry topic
    for topic in ("%DLQ%ThiefG", "%RETRY%ThiefG"):
        h, _ = call(broker.addr, GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        assert h["code"] != SUCCESS or int(h["extFields"]["offset"]) == 0, (topic, h)


def committed(addr: str, group: str, qid: int = 0) -> int:
    h, _ = call(addr, QUERY_OFFSET, {"consumerGroup": group, "topic": "Allowed", "queueId": qid})
    assert h["code"] == SUCCESS, h
    return int(h["extFields"]["offset"])


def reset(group: str, ts: int = -1) -> dict[str, Any]:
    return {"topic": "Allowed", "group": group, "timestamp": ts, "isForce": "true"}


def test_reset_offset_needs_the_offset_update_permission_and_an_online_group(acl_broker):
    _, broker = acl_broker
    addr = broker.addr
    for _ in range(3):
        call(addr, SEND_V2, v2_header("Allowed", e=0), b"m", ak="limited01")
    settle(addr)
    upd = {"consumerGroup": "VictimG", "topic": "Allowed", "queueId": 0, "commitOffset": 2}
    h, _ = call(addr, UPDATE_OFFSET, upd)                        # the admin may
    assert h["code"] == SUCCESS
    assert committed(addr, "VictimG") == 2
    h, _ = call(addr, UPDATE_OFFSET, dict(upd, commitOffset=0), ak="limited01")
    assert h["code"] == ACL_REFUSED and "group:VictimG" in h["remark"]
    # the reset is an offset update: refused too, and nothing moved
    h, _ = call(addr, RESET_OFFSET, reset("VictimG"), ak="limited01")
    assert h["code"] == ACL_REFUSED and "group:VictimG" in h["remark"], h
    assert committed(addr, "VictimG") == 2
    # nobody of the group online: CONSUMER_NOT_ONLINE, as 4.9.8, and nothing written
    h, _ = call(addr, RESET_OFFSET, reset("VictimG"))
    assert h["code"] == CONSUMER_NOT_ONLINE and "VictimG" in h["remark"], h
    assert committed(addr, "VictimG") == 2
    # online: the broker moves the offsets and answers them
    with RawClient(addr) as online:
        h, _ = call(addr, HEART_BEAT, {}, heartbeat("online@1", "OnlineG"), ak="limited01",
                    client=online)
        assert h["code"] == SUCCESS
        h, _ = call(addr, UPDATE_OFFSET, dict(upd, consumerGroup="OnlineG", commitOffset=1),
                    ak="limited01")
        assert h["code"] == SUCCESS
        h, body = call(addr, RESET_OFFSET, reset("OnlineG"), ak="limited01")
        assert h["code"] == SUCCESS, h
        assert committed(addr, "OnlineG") == stored(addr, "Allowed", (0,)) >= 3


# -- item 8: malformed input is a one-line log ------------------------------------------------

BAD_HEADERS = {
    "deeply_nested": b'{"code":105,"extFields":{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}}",
    "nested_object": b'{"code":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    "code_1e400": b'{"code":1e400,"flag":0,"opaque":1,"version":1}',
    "code_infinity": b'{"code":Infinity,"flag":0,"opaque":1}',
    "opaque_minus_infinity": b'{"code":105,"flag":0,"opaque":-Infinity}',
    "code_nan": b'{"code":NaN,"flag":0,"opaque":1}',
    "ext_1e400": b'{"code":105,"flag":0,"opaque":1,"extFields":{"topic":1e400}}',
    "not_an_object": b"[1,2,3]",
    "a_string": b'"code"',
    "code_is_a_list": b'{"code":[105],"flag":0,"opaque":1}',
    "code_is_text": b'{"code":"get-route","flag":0,"opaque":1}',
    "code_past_int": b'{"code":99999999999999999999,"flag":0,"opaque":1}',
    "ext_is_a_list": b'{"code":105,"flag":0,"opaque":1,"extFields":["topic"]}',
    "ext_value_is_an_object": b'{"code":105,"flag":0,"opaque":1,"extFields":{"topic":{"a":1}}}',
    "not_utf8": b'{"code":105,"remark":"\xff\xfe"}',
}


def wait_for(cond, what: str, limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def closed_with_one_warning(server: Any, data: bytes) -> list[str]:
    """Send ``data`` on a new connection; the server closes it; returns the log lines it
    wrote meanwhile (after its WARNING about this connection appeared) that are about this
    connection, or are tracebacks (the module's servers are shared: a line another test
    caused may arrive meanwhile)."""
    mark = len(server.log)
    with RawClient(server.addr) as c:
        port = c.sock.getsockname()[1]
        c.send(data)
        assert c.closed_by_server(30), "the server kept the connection open"
    peer = f"127.0.0.1:{port}"
    wait_for(lambda: any(peer in line or "Fatal error" in line for line in server.log[mark:]),
             "the server's log line")
    time.sleep(0.2)             # a second line about it would come right after the first
    return [line for line in server.log[mark:]
            if peer in line or "Traceback" in line or "Fatal error" in line
            or line.startswith((" ", "\t"))]


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_malformed_header_closes_with_one_warning(acl_broker, name):
    ns, broker = acl_broker
    header = BAD_HEADERS[name]
    for server in (broker, ns):
        lines = closed_with_one_warning(server, frame(0, header=header))
        text = "".join(lines)
        assert "Traceback" not in text and "Fatal error" not in text, text[-3000:]
        warnings = [line for line in lines if " WARNING " in line]
        assert len(warnings) == 1, text[-3000:]
        assert "closing 127.0.0.1:" in warnings[0]
    # both keep serving everyone else
    assert stored(broker.addr, "Secret") == 0
    with RawClient(ns.addr) as c:
        h, _ = c.call(106, {})       # GET_BROKER_CLUSTER_INFO
        assert h["code"] == SUCCESS


BAD_BODIES = [
    (HEART_BEAT, {}, b"[1,2]"),
    (HEART_BEAT, {}, b'{"clientID":"x","consumerDataSet":[1]}'),
    (HEART_BEAT, {}, b'{"clientID":"x","consumerDataSet":[{"groupName":"G",'
                     b'"subscriptionDataSet":"abc"}]}'),
    (HEART_BEAT, {}, b'{"clientID":"x","consumerDataSet":[{"groupName":"G",'
                     b'"subscriptionDataSet":[{"topic":"Allowed","subVersion":1e400}]}]}'),
    (HEART_BEAT, {}, b'{"clientID":"x","producerDataSet":[{"groupName":NaN}]}'),
    (HEART_BEAT, {}, b'{"clientID":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    (LOCK_BATCH_MQ, {}, b'{"consumerGroup":"G","clientId":"c","mqSet":[5]}'),
    (LOCK_BATCH_MQ, {}, b'{"consumerGroup":"G","clientId":"c","mqSet":{"a":1}}'),
    (LOCK_BATCH_MQ, {}, b'"just text"'),
    (GET_MAX_OFFSET, {"topic": "Allowed", "queueId": "9" * 30}, b""),
]


@pytest.mark.parametrize("code, ext, body", BAD_BODIES)
def test_malformed_body_is_an_error_answer_not_a_traceback(acl_broker, code, ext, body):
    _, broker = acl_broker
    mark = len(broker.log)
    with RawClient(broker.addr) as c:
        h, _ = call(broker.addr, code, ext, body, client=c)
        assert h["code"] == SYSTEM_ERROR and h.get("remark"), h
        # the connection stays usable
        h, _ = call(broker.addr, GET_MAX_OFFSET, {"topic": "Allowed", "queueId": 0}, client=c)
        assert h["code"] == SUCCESS
    text = "".join(broker.log[mark:])
    assert "Traceback" not in text, text[-3000:]


def test_namesrv_malformed_bodies_answer_errors(acl_broker):
    ns, _ = acl_broker
    mark = len(ns.log)
    with RawClient(ns.addr) as c:
        h, _ = c.call(QUERY_DATA_VERSION, {"brokerAddr": "1.2.3.4:5"},
                      b"[" * 100_000 + b"]" * 100_000)
        assert h["code"] == SYSTEM_ERROR and h.get("remark"), h
        h, _ = c.call(REGISTER_BROKER, {"brokerName": "b", "brokerAddr": "1.2.3.4:5",
                                        "clusterName": "c", "haServerAddr": "", "brokerId": 0},
                      b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":1e400}},'
                      b'"dataVersion":{}}}')
        assert h["code"] == SYSTEM_ERROR and h.get("remark"), h
        h, _ = c.call(106, {})
        assert h["code"] == SUCCESS
    assert "Traceback" not in "".join(ns.log[mark:])


# -- the admin CLI on malformed replies --------------------------------------------------------

class FakeServer:
    """Answers every request with SUCCESS and a fixed body (a malformed NameServer)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                try:
                    while True:
                        chunk = conn.recv(1 << 16)
                        if not chunk:
                            break
                        buf += chunk
                        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                            n = struct.unpack(">i", buf[:4])[0]
                            hlen = struct.unpack(">i", buf[4:8])[0] & 0xFFFFFF
                            req = json.loads(buf[8:8 + hlen])
                            buf = buf[4 + n:]
                            header = json.dumps({"code": 0, "flag": 1, "opaque": req["opaque"],
                                                 "language": "JAVA", "version": 395,
                                                 "extFields": {}}).encode()
                            conn.sendall(struct.pack(">ii", 4 + len(header) + len(self.body),
                                                     len(header)) + header + self.body)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("command, body", [
    (["clusterList"], b'{"brokerAddrTable":{},"clusterAddrTable":{"c":5}}'),
    (["clusterList"], b'{"brokerAddrTable":{"b":"x"},"clusterAddrTable":{"c":["b"]}}'),
    (["topicRoute", "-t", "T"], b"[1,2]"),
    (["topicRoute", "-t", "T"], b'{"brokerDatas":[3],"queueDatas":[{"brokerName":1}]}'),
    (["topicList"], b'{"topicList":5}'),
    (["topicList"], b"NaN"),
])
def test_admin_cli_exits_2_on_a_malformed_reply(capsys, command, body):
    from rocketstore.cli import main
    server = FakeServer(body)
    try:
        rc = main(["admin", command[0], "-n", server.addr, *command[1:]])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err


def test_a_reply_needs_pub_on_the_reply_topic(acl_broker):
    """SEND_REPLY_MESSAGE_V2 (325) writes into the reply topic: checked as a send (4.9.8 asks
    a valid signature only), refused as 4.9.8 refuses."""
    _, broker = acl_broker
    h, _ = call(broker.addr, 325, v2_header("DefaultCluster_REPLY_TOPIC", i=props_string({
        "MSG_TYPE": "reply", "CORRELATION_ID": "c", "REPLY_TO_CLIENT": "x@1"})), b"r",
        ak="limited01")
    assert h["code"] == ACL_REFUSED, h
    assert h["remark"].startswith(ACL_EXC + "No default permission for "
                                  "topic:DefaultCluster_REPLY_TOPIC, "), h
