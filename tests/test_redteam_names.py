"""Red team, issue 20 items 1, 3 and 4: names that are paths, transactions that commit what is
not a half message, and records that stall the schedule or the transaction check.

Every attack is a raw remoting frame (tests/rawwire.py) sent to a real ``rocketstore broker``
process; what is asserted is what a user relies on: files still on disk, messages still
delivered, nothing written where the request pointed.
"""
from __future__ import annotations

import functools
import json
import struct
import time
from pathlib import Path

import pytest

from rawwire import RawClient, props_string  # tests/rawwire.py
from servers import start_broker, start_namesrv, wait_until  # tests/servers.py

SEND_V2, PULL, QUERY_OFFSET, UPDATE_OFFSET = 310, 11, 14, 15
GET_MAX_OFFSET, VIEW_BY_ID, HEART_BEAT, SEND_BACK, END_TX, CHECK_TX = 30, 33, 34, 36, 37, 39
UPDATE_TOPIC, DELETE_TOPIC = 17, 215
SUCCESS, SYSTEM_ERROR, MESSAGE_ILLEGAL, INVALID_PARAMETER = 0, 1, 13, 29
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
WAIT_S = 60.0           # a deadline for polling, never a timing assertion

# delay level 1 = 1 s, so delayed deliveries come quickly; short transaction check rounds
CONF = {"messageDelayLevel": "1s 1s 1s 1s 5s", "transactionTimeOut": "1000",
        "transactionCheckInterval": "500", "flushDelayOffsetInterval": "1000"}


def _send(c: RawClient, topic: str, body: bytes, props: dict[str, str] | None = None,
          queue_id: int = 0, group: str = "PG") -> tuple[dict, bytes]:
    return c.call(SEND_V2, {"a": group, "b": topic, "c": "TBW102", "d": 4, "e": queue_id,
                            "f": 0, "g": int(time.time() * 1000), "h": 0,
                            "i": props_string(props or {}), "j": 0, "k": "false", "m": "false"},
                  body)


def _max_offset(c: RawClient, topic: str, queue_id: int = 0) -> int:
    h, _ = c.call(GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    assert h["code"] == SUCCESS, h
    return int(h["extFields"]["offset"])


def _pull(c: RawClient, topic: str, offset: int, group: str = "CG", n: int = 32) -> list[bytes]:
    """The bodies of up to ``n`` messages from ``offset`` (records parsed by hand)."""
    h, body = c.call(PULL, {"consumerGroup": group, "topic": topic, "queueId": 0,
                            "queueOffset": offset, "maxMsgNums": n, "sysFlag": 4,
                            "commitOffset": 0, "suspendTimeoutMillis": 0,
                            "subscription": "*", "subVersion": 0})
    if h["code"] != SUCCESS:
        return []
    return [r["body"] for r in _records(body)]


def _records(data: bytes) -> list[dict]:
    """RocketMQ 4.9 records (IPv4 hosts) -> body, properties, commit-log and queue offsets."""
    out, pos = [], 0
    while pos < len(data):
        (total,) = struct.unpack_from(">i", data, pos)
        qoff, phy, sysflag = struct.unpack_from(">qqi", data, pos + 20)
        p = pos + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
        p += 8 if not sysflag & 0x10 else 20      # born host
        p += 8
        p += 8 if not sysflag & 0x20 else 20      # store host
        p += 4 + 8
        (blen,) = struct.unpack_from(">i", data, p)
        body = data[p + 4:p + 4 + blen]
        p += 4 + blen
        tlen = data[p]
        p += 1 + tlen
        (plen,) = struct.unpack_from(">h", data, p)
        props = data[p + 2:p + 2 + plen].decode()
        out.append({"body": body, "props": props, "phy": phy, "qoff": qoff})
        pos += total
    return out


_wait = functools.partial(wait_until, within=WAIT_S)   # tests/servers.py


@pytest.fixture
def cluster(tmp_path: Path):
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr, conf=CONF)
    try:
        yield tmp_path, broker
    finally:
        broker.stop()
        ns.stop()


# -- item 1: no path from a request ------------------------------------------------------------

def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_delete_topic_with_path_names_deletes_nothing(cluster):
    tmp, broker = cluster
    store = tmp / "store"
    outside = tmp / "x"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    with RawClient(broker.addr) as c:
        h, _ = _send(c, "KeptTopic", b"first")
        assert h["code"] == SUCCESS, h
        _wait(lambda: _pull(c, "KeptTopic", 0) == [b"first"], "the first message pulled")
        before = _tree(store)
        for name in ("commitlog", "config", "consumequeue/KeptTopic"):
            assert any(k.startswith(name) for k in before), (name, before)
        for topic in ("../../x", "../commitlog", "..", ".", "../config", "KeptTopic/../.."):
            h, _ = c.call(DELETE_TOPIC, {"topic": topic})
            assert h["code"] == SYSTEM_ERROR and "topic" in h["remark"], (topic, h)
        assert (outside / "precious").read_bytes() == b"keep me"
        after = _tree(store)
        lost = [k for k in before if k not in after and not k.endswith((".bak", ".tmp"))]
        assert not lost, lost
        h, _ = _send(c, "KeptTopic", b"second")
        assert h["code"] == SUCCESS, h
        _wait(lambda: _pull(c, "KeptTopic", 0) == [b"first", b"second"], "both pulled")


def test_delete_topic_of_an_unknown_valid_name_touches_no_directory(cluster):
    """A directory the broker's queue table does not know is never removed (cleanUnusedTopic
    works from the in-memory table, not from the request string)."""
    tmp, broker = cluster
    stray = tmp / "store" / "consumequeue" / "NotATopicOfMine"
    stray.mkdir(parents=True)
    (stray / "keep").write_bytes(b"x")
    with RawClient(broker.addr) as c:
        h, _ = c.call(DELETE_TOPIC, {"topic": "NotATopicOfMine"})
        assert h["code"] == SUCCESS, h
    assert (stray / "keep").read_bytes() == b"x"


LONG_TOPIC, LONG_GROUP = "T" * 128, "G" * 256


@pytest.mark.parametrize("code, fields, field", [
    (UPDATE_TOPIC, {"topic": LONG_TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
     "topic"),
    (UPDATE_TOPIC, {"topic": "a/b", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}, "topic"),
    (PULL, {"consumerGroup": LONG_GROUP, "topic": "KeptTopic", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 1, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0},
     "consumerGroup"),
    (PULL, {"consumerGroup": "CG", "topic": "a/b", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 1, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0},
     "topic"),
    (QUERY_OFFSET, {"consumerGroup": "a/b", "topic": "KeptTopic", "queueId": 0},
     "consumerGroup"),
    (UPDATE_OFFSET, {"consumerGroup": LONG_GROUP, "topic": "KeptTopic", "queueId": 0,
                     "commitOffset": 1}, "consumerGroup"),
    (UPDATE_OFFSET, {"consumerGroup": "CG", "topic": "../x", "queueId": 0, "commitOffset": 1},
     "topic"),
    (GET_MAX_OFFSET, {"topic": LONG_TOPIC, "queueId": 0}, "topic"),
    (SEND_BACK, {"group": "a/b", "offset": 0, "delayLevel": 1}, "group"),
    (SEND_BACK, {"group": "G" * 300, "offset": 0, "delayLevel": 1}, "group"),
    (SEND_V2, {"a": "PG", "b": LONG_TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0,
               "h": 0}, "topic"),
    (SEND_V2, {"a": "a/b", "b": "KeptTopic", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0,
               "h": 0}, "producerGroup"),
])
def test_invalid_names_are_refused_naming_the_field(cluster, code, fields, field):
    tmp, broker = cluster
    with RawClient(broker.addr) as c:
        h, _ = _send(c, "KeptTopic", b"m")
        assert h["code"] == SUCCESS
        h, _ = c.call(code, fields, b"body")
        assert h["code"] in (SYSTEM_ERROR, INVALID_PARAMETER), h
        assert field in h["remark"], h
        # nothing was stored under the name
        h, _ = c.call(UPDATE_OFFSET, {"consumerGroup": "Probe", "topic": "KeptTopic",
                                      "queueId": 0, "commitOffset": 0})
    broker.stop()
    config = tmp / "store" / "config"
    for f in config.glob("*.json"):
        text = f.read_text()
        assert LONG_GROUP not in text and LONG_TOPIC not in text and "a/b" not in text, f.name
        assert "G" * 300 not in text and "../x" not in text, f.name


def test_heartbeat_with_a_path_group_is_refused(cluster):
    tmp, broker = cluster
    with RawClient(broker.addr) as c:
        body = json.dumps({"clientID": "raw@1", "producerDataSet": [],
                           "consumerDataSet": [{"groupName": "../../g", "consumeType":
                                                "CONSUME_PASSIVELY", "messageModel":
                                                "CLUSTERING", "consumeFromWhere":
                                                "CONSUME_FROM_LAST_OFFSET",
                                                "subscriptionDataSet": [], "unitMode": False}]})
        h, _ = c.call(HEART_BEAT, {}, body.encode())
        assert h["code"] != SUCCESS and "groupName" in h["remark"], h
    broker.stop()
    for f in (tmp / "store" / "config").glob("*.json"):
        assert "../../g" not in f.read_text(), f.name


# -- item 3: END_TRANSACTION commits only half messages ----------------------------------------

def _offset_of(msg_id: str) -> int:
    return int(msg_id[-16:], 16)        # offset message id: host(8 hex) port(8 hex) offset(16)


def test_client_send_with_broker_only_properties_is_refused(cluster):
    _, broker = cluster
    with RawClient(broker.addr) as c:
        for props in ({"REAL_TOPIC": "Secret", "REAL_QID": "0", "PGROUP": "PG"},
                      {"REAL_QID": "2147483647"},
                      {"TRAN_MSG": "true", "PGROUP": "PG", "TRAN_PREPARED_QUEUE_OFFSET": "0"},
                      {"TRAN_MSG": "true", "PGROUP": "PG", "TRANSACTION_CHECK_TIMES": "99"}):
            h, _ = _send(c, "Victim", b"evil", props)
            assert h["code"] == MESSAGE_ILLEGAL, (props, h)
            assert any(k in h["remark"] for k in props if k not in ("PGROUP", "TRAN_MSG")), h
        assert _max_offset(c, "Victim") == 0
        # the Java consumer's fallback send-back (a copy of a delivered message to %RETRY%
        # with DELAY) keeps the copied REAL_TOPIC/REAL_QID: the broker overwrites them
        h, _ = _send(c, "%RETRY%CG", b"fallback",
                     {"REAL_TOPIC": "Victim", "REAL_QID": "0", "DELAY": "1",
                      "RETRY_TOPIC": "Victim"})
        assert h["code"] == SUCCESS, h


def test_end_transaction_of_a_non_half_record_writes_nothing(cluster):
    """A delayed message delivered to its topic keeps REAL_TOPIC/REAL_QID on disk (as 4.9.8);
    it and its SCHEDULE_TOPIC_XXXX original are no half messages and must not be committed."""
    _, broker = cluster
    with RawClient(broker.addr) as c:
        h, _ = _send(c, "Plain", b"delayed", {"DELAY": "1", "PGROUP": "PG"})
        assert h["code"] == SUCCESS, h
        scheduled_at = _offset_of(h["extFields"]["msgId"])
        _wait(lambda: _max_offset(c, "Plain") == 1, "the delayed message delivered")
        delivered = _records(c.call(PULL, {
            "consumerGroup": "CG", "topic": "Plain", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 1, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subscription": "*", "subVersion": 0})[1])[0]
        assert "REAL_TOPIC\x01Plain" in delivered["props"]
        for phy, qoff in ((delivered["phy"], delivered["qoff"]), (scheduled_at, 0)):
            for commit in (8, 12):                  # COMMIT, ROLLBACK
                h, _ = c.call(END_TX, {"producerGroup": "PG", "tranStateTableOffset": qoff,
                                       "commitLogOffset": phy, "commitOrRollback": commit,
                                       "fromTransactionCheck": "false"})
                assert h["code"] != SUCCESS, h
        assert _max_offset(c, "Plain") == 1
        assert _max_offset(c, "RMQ_SYS_TRANS_OP_HALF_TOPIC") == 0


def test_end_transaction_needs_the_half_of_that_group(cluster):
    _, broker = cluster
    with RawClient(broker.addr) as c:
        h, _ = _send(c, "TxTopic", b"half", {"TRAN_MSG": "true", "PGROUP": "TxPG"},
                     group="TxPG")
        assert h["code"] == SUCCESS, h
        phy = _offset_of(h["extFields"]["msgId"])
        qoff = int(h["extFields"]["queueOffset"])
        for group, q in (("OtherPG", qoff), ("TxPG", qoff + 1)):
            h, _ = c.call(END_TX, {"producerGroup": group, "tranStateTableOffset": q,
                                   "commitLogOffset": phy, "commitOrRollback": 8})
            assert h["code"] != SUCCESS, h
        assert _max_offset(c, "TxTopic") == 0
        h, _ = c.call(END_TX, {"producerGroup": "TxPG", "tranStateTableOffset": qoff,
                               "commitLogOffset": phy, "commitOrRollback": 8})
        assert h["code"] == SUCCESS, h
        _wait(lambda: _pull(c, "TxTopic", 0) == [b"half"], "the committed message")


# -- item 4: nothing blocks the schedule or the transaction check -----------------------------

def test_send_back_with_bad_group_stores_nothing_and_the_level_flows(cluster):
    _, broker = cluster
    with RawClient(broker.addr) as c:
        h, _ = _send(c, "Src", b"consumed")
        assert h["code"] == SUCCESS
        phy = _offset_of(h["extFields"]["msgId"])
        before = _max_offset(c, SCHEDULE, 0)
        for group in ("a/b", "G" * 300, "../../etc"):
            h, _ = c.call(SEND_BACK, {"group": group, "offset": phy, "delayLevel": 1,
                                      "originMsgId": "x", "originTopic": "Src"})
            assert h["code"] != SUCCESS and "group" in h["remark"], h
        assert _max_offset(c, SCHEDULE, 0) == before
        h, _ = _send(c, "Later", b"later", {"DELAY": "1"})
        assert h["code"] == SUCCESS
        _wait(lambda: _pull(c, "Later", 0) == [b"later"], "the later delayed message")


def _poison_store(store_dir: Path) -> None:
    """Records a broker can never deliver, written straight into SCHEDULE_TOPIC_XXXX level 1
    (as a pre-fix broker's send-back or a forged END_TRANSACTION left them)."""
    from rocketstore.store import MessageStore, StoreConfig
    from rocketstore.store.types import Message
    cfg = StoreConfig(message_delay_level=CONF["messageDelayLevel"])
    with MessageStore.open(str(store_dir), cfg) as st:
        born = int(time.time() * 1000)
        for real, qid, body in (("%RETRY%a/b", "0", b"poison-path"),
                                ("%RETRY%" + "G" * 300, "0", b"poison-long"),
                                (SCHEDULE, "0", b"poison-loop"),
                                ("%RETRY%BadQidG", "x", b"to-the-dlq"),
                                ("%RETRY%BigG", "0", b"b" * 4096)):
            props = props_string({"REAL_TOPIC": real, "REAL_QID": qid, "DELAY": "1",
                                  "RETRY_TOPIC": "Src"})
            r = st.put_message(Message.from_properties_string(SCHEDULE, body, props,
                                                              born_timestamp=born), 0)
            assert r.ok, r


def test_poisoned_schedule_level_recovers(tmp_path: Path):
    _poison_store(tmp_path / "store")
    ns = start_namesrv(tmp_path)
    # a lower maxMessageSize than when the 4 KiB record was scheduled: its put is refused
    broker = start_broker(tmp_path / "store", ns.addr, conf={**CONF, "maxMessageSize": "2048"})
    try:
        with RawClient(broker.addr) as c:
            h, _ = _send(c, "Later", b"later", {"DELAY": "1"})
            assert h["code"] == SUCCESS, h
            _wait(lambda: _pull(c, "Later", 0) == [b"later"], "the later delayed message")
            # the retry without a queue went to its group's dead-letter queue
            _wait(lambda: _pull(c, "%DLQ%BadQidG", 0) == [b"to-the-dlq"], "the DLQ copy")
            assert _max_offset(c, SCHEDULE, 0) == 6      # nothing was re-scheduled
    finally:
        broker.stop()
        ns.stop()
    assert broker.output.count("undeliverable") == 5, broker.output
    for body in ("poison-path", "poison-long", "poison-loop", "to-the-dlq", "bbbb"):
        assert body not in broker.output            # offsets and ids are logged, not bodies


def test_half_at_the_property_limit_does_not_stop_the_check(cluster):
    _, broker = cluster
    with RawClient(broker.addr) as c:
        body = json.dumps({"clientID": "raw@1", "producerDataSet": [{"groupName": "TxPG"}],
                           "consumerDataSet": []})
        h, _ = c.call(HEART_BEAT, {}, body.encode())
        assert h["code"] == SUCCESS, h
        # the stored half: the client's properties plus CLUSTER, REAL_TOPIC, REAL_QID; sized to
        # leave less room than TRANSACTION_CHECK_TIMES needs under the 32,767-byte limit
        base = {"TRAN_MSG": "true", "PGROUP": "TxPG", "UNIQ_KEY": "A" * 32}
        fixed = sum(len(k) + len(v) + 2 for k, v in base.items())
        added = sum(len(k) + len(v) + 2 for k, v in (("CLUSTER", "DefaultCluster"),
                                                     ("REAL_TOPIC", "TxBig"), ("REAL_QID", "0")))
        pad = 32767 - 10 - fixed - added - len("PAD") - 2
        h, _ = _send(c, "TxBig", b"big", {**base, "PAD": "p" * pad}, group="TxPG")
        assert h["code"] == SUCCESS, h
        h2, view = c.call(VIEW_BY_ID, {"offset": _offset_of(h["extFields"]["msgId"])})
        stored = _records(view)[0]["props"]
        assert 32767 - 26 < len(stored.encode()) <= 32767, len(stored)
        h, _ = _send(c, "TxBig", b"small", {"TRAN_MSG": "true", "PGROUP": "TxPG",
                                            "UNIQ_KEY": "B" * 32}, group="TxPG")
        assert h["code"] == SUCCESS, h
        deadline = time.monotonic() + WAIT_S
        c.sock.settimeout(1.0)
        while True:
            assert time.monotonic() < deadline, "no check of the half after the big one"
            try:
                hdr, rec = c.read_frame()
            except TimeoutError:
                continue
            if hdr["code"] == CHECK_TX and "B" * 32 in _records(rec)[0]["props"]:
                break


# -- the same rules in process (Broker entry points, the store) --------------------------------

def test_in_process_entry_points_apply_the_same_rules(tmp_path: Path):
    from rocketstore import Message
    from rocketstore.broker import Broker, BrokerConfig
    from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, HeartbeatData,
                                             PullMessageRequest, ResponseCode, SendMessageRequest)
    from rocketstore.errors import InvalidNameError
    with Broker.open(str(tmp_path / "store"), BrokerConfig()) as b:
        r = b.send_message(SendMessageRequest("PG", "Victim", 0, [Message(
            "Victim", b"x", properties={"REAL_TOPIC": "Secret", "REAL_QID": "0"})])).result(10)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "REAL_QID" in r.remark
        r = b.send_message(SendMessageRequest("a/b", "Victim", 0, [Message("Victim", b"x")]))
        assert r.result(10).code == ResponseCode.INVALID_PARAMETER
        r = b.pull_message(PullMessageRequest("../g", "Victim", 0, 0, 1, 0, 0, 0)).result(10)
        assert r.code == ResponseCode.INVALID_PARAMETER and "consumer_group" in r.remark
        r = b.consumer_send_msg_back(ConsumerSendMsgBackRequest("G" * 250, 0, 1)).result(10)
        assert r.code == ResponseCode.INVALID_PARAMETER      # its %RETRY% topic: over 255
        with pytest.raises(InvalidNameError, match="group"):
            b.update_consumer_offset("a/b", "Victim", 0, 1)
        with pytest.raises(InvalidNameError, match="producer_groups"):
            b.heartbeat(HeartbeatData("c", ["../pg"], []), object())
        assert "a/b" not in b.subscription_groups.all() and "../g" not in \
            b.subscription_groups.all()


def test_store_delete_topic_never_leaves_its_queue_table(tmp_path: Path):
    from rocketstore.store import MessageStore
    from rocketstore.store.types import Message
    root = tmp_path / "store"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep").write_bytes(b"k")
    with MessageStore.open(str(root)) as st:
        assert st.put_message(Message("T1", b"m"), 0).ok
        st.dispatch_service.do_dispatch()
        before = _tree(root)
        for topic in ("../../x", "../commitlog", "..", ".", "../config", "consumequeue"):
            st.delete_topic(topic)
        assert (tmp_path / "x" / "keep").read_bytes() == b"k"
        assert all(k in _tree(root) for k in before if k.startswith(("commitlog", "consume")))
        assert st.delete_topic("T1") == [0]
        assert not (root / "consumequeue" / "T1").exists()
