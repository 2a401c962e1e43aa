"""HEART_BEAT cannot grow the broker without bound (stricter than 4.9.8; docs/protocol.md).

A heartbeat carries at most ``heartbeatMaxEntries`` consumer entries, producer entries and
subscriptions per consumer (default 1000), and a heartbeat auto-creates subscription groups
(each with its %RETRY% topic) only while the broker holds fewer than
``autoCreateSubscriptionGroupMax`` groups (default 20000). Beyond either: the heartbeat is
refused whole with a remark naming the setting, and nothing already stored is lost. Raw frames
against a real broker process.
"""
from __future__ import annotations

import json

from rawwire import RawClient  # tests/rawwire.py
from servers import start_broker, start_namesrv, wait_until

SUCCESS, SYSTEM_ERROR, GROUP_NOT_EXIST = 0, 1, 26
HEART_BEAT, GET_ALL_TOPIC_CONFIG, GET_ALL_GROUPS, UPDATE_BROKER_CONFIG = 34, 21, 201, 25
PULL_MESSAGE, UPDATE_AND_CREATE_TOPIC, FLAG_SUBSCRIPTION = 11, 17, 0x4
PULL_NOT_FOUND, SUBSCRIPTION_PARSE_FAILED = 19, 23
GET_PRODUCER_CONNECTION_LIST, UNREGISTER_CLIENT = 204, 35
PRECREATED = 7                      # TOOLS_CONSUMER, ... (subscription_group.PRECREATED_GROUPS)


def _consumer(group: str, topics: list[str], tags: list[str] = ()) -> dict:
    return {"groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [{"topic": t, "subString": "||".join(tags) or "*",
                                     "tagsSet": list(tags), "codeSet": [],
                                     "subVersion": 1} for t in topics]}


def _beat(c: RawClient, groups: list[str], producers: list[str] = (),
          topics: list[str] = ("T",), client: str = "c@1", tags: list[str] = ()) -> dict:
    body = json.dumps({"clientID": client, "producerDataSet": [{"groupName": p} for p in producers],
                       "consumerDataSet": [_consumer(g, list(topics), tags)
                                           for g in groups]}).encode()
    h, _ = c.call(HEART_BEAT, {}, body)
    return h


def _groups(c: RawClient) -> set[str]:
    h, body = c.call(GET_ALL_GROUPS, {})
    assert h["code"] == SUCCESS, h
    return set(json.loads(body)["subscriptionGroupTable"])


def _topics(c: RawClient) -> set[str]:
    h, body = c.call(GET_ALL_TOPIC_CONFIG, {})
    assert h["code"] == SUCCESS, h
    return set(json.loads(body)["topicConfigTable"])


def test_heartbeat_entries_and_auto_created_groups_are_bounded(tmp_path):
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr,
                          conf={"autoCreateSubscriptionGroupMax": str(PRECREATED + 6)})
    try:
        with RawClient(broker.addr) as c:
            # the default per-heartbeat bound: 1001 consumer entries, producers, subscriptions
            for kw in ({"groups": [f"G{i}" for i in range(1001)]},
                       {"groups": [], "producers": [f"P{i}" for i in range(1001)]},
                       {"groups": ["G0"], "topics": [f"T{i}" for i in range(1001)]}):
                h = _beat(c, **kw)
                assert h["code"] == SYSTEM_ERROR, h
                assert "heartbeatMaxEntries" in h["remark"] and "1000" in h["remark"], h
            assert "G0" not in _groups(c) and "%RETRY%G0" not in _topics(c)
            # the broker-wide bound on auto-created groups
            assert _beat(c, ["A1", "A2", "A3", "A4"])["code"] == SUCCESS
            h = _beat(c, ["A1", "B1", "B2", "B3"])       # 11 + 3 new > 13: refused whole
            assert h["code"] == GROUP_NOT_EXIST, h
            assert "autoCreateSubscriptionGroupMax" in h["remark"] and "13" in h["remark"], h
            groups = _groups(c)
            assert {"A1", "A2", "A3", "A4"} <= groups and not {"B1", "B2", "B3"} & groups
            assert "%RETRY%B1" not in _topics(c) and "%RETRY%A1" in _topics(c)
            # the groups it holds keep working, and it fills up to the bound exactly
            assert _beat(c, ["A1", "A2", "B1", "B2"])["code"] == SUCCESS
            assert _beat(c, ["B3"])["code"] == GROUP_NOT_EXIST
            assert len(_groups(c)) == PRECREATED + 6
            assert _beat(c, ["A1", "A2", "A3", "A4", "B1", "B2"])["code"] == SUCCESS
            # both bounds change at run time (updateBrokerConfig)
            h, _ = c.call(UPDATE_BROKER_CONFIG, {},
                          b"heartbeatMaxEntries=2\nautoCreateSubscriptionGroupMax=14\n")
            assert h["code"] == SUCCESS, h
            h = _beat(c, ["A1", "A2", "A3"])
            assert h["code"] == SYSTEM_ERROR and "heartbeatMaxEntries=2" in h["remark"], h
            assert _beat(c, ["B3"])["code"] == SUCCESS
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0
    groups = json.loads((tmp_path / "store" / "config" / "subscriptionGroup.json").read_text())
    assert {"A1", "A4", "B2"} <= set(groups["subscriptionGroupTable"])
    assert "B3" in groups["subscriptionGroupTable"]


def _producers(c: RawClient, group: str) -> list[str]:
    h, body = c.call(GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
    return sorted(x["clientId"] for x in json.loads(body)["connectionSet"]) \
        if h["code"] == SUCCESS else []


def test_a_client_is_in_at_most_client_max_producer_groups(tmp_path):
    """A producer group a client named stays registered for the channel expiry (120 s) after
    its last heartbeat naming it, so fresh names per beat piled up (1,000 per beat: ~8 MiB/s
    of one connection). Across its heartbeats a client is in at most
    ``clientMaxProducerGroups``; a beat past it is refused whole, naming the setting."""
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr, conf={"clientMaxProducerGroups": "5"})
    try:
        with RawClient(broker.addr) as c, RawClient(broker.addr) as other:
            assert _beat(c, [], ["P0", "P1", "P2"])["code"] == SUCCESS
            assert _beat(c, [], ["P3", "P4"])["code"] == SUCCESS
            h = _beat(c, [], ["P0", "P5"])
            assert h["code"] == SYSTEM_ERROR, h
            assert "would be in 6 producer groups (clientMaxProducerGroups=5)" in h["remark"], h
            assert _producers(c, "P5") == [] and _producers(c, "P4") == ["c@1"]
            assert _beat(c, [], ["P0", "P1", "P2", "P3", "P4"])["code"] == SUCCESS
            # per client: another connection has its own
            assert _beat(other, [], ["P0", "Q1", "Q2", "Q3", "Q4"], client="o@1")["code"] \
                == SUCCESS
            assert _producers(c, "P0") == ["c@1", "o@1"]
            # a group left makes room
            h, _ = c.call(UNREGISTER_CLIENT, {"clientID": "c@1", "producerGroup": "P4"})
            assert h["code"] == SUCCESS, h
            assert _beat(c, [], ["P5"])["code"] == SUCCESS
            assert _producers(c, "P4") == [] and _producers(c, "P5") == ["c@1"]
        # a closed connection leaves every group it was in
        with RawClient(broker.addr) as c:
            wait_until(lambda: _producers(c, "P0") == [] and _producers(c, "Q1") == [],
                       "the closed connections' producer groups gone", 10)
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def test_a_subscription_carries_at_most_heartbeat_max_entries_tags(tmp_path):
    """A subscription's tags are entries too: a heartbeat subscription with more than
    ``heartbeatMaxEntries`` tags is refused whole (SYSTEM_ERROR), and so is a pull whose own
    subscription expression has more (SUBSCRIPTION_PARSE_FAILED), before its tags are split and
    hashed on the event loop or held with the pull (a 250 KB expression is ~30,000 tags)."""
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    tags = [f"tag{i}" for i in range(1001)]
    try:
        with RawClient(broker.addr) as c:
            h = _beat(c, ["GT"], tags=tags)
            assert h["code"] == SYSTEM_ERROR, h
            assert "tagsSet has 1001 entries (heartbeatMaxEntries=1000)" in h["remark"], h
            assert "GT" not in _groups(c)
            assert _beat(c, ["GT"], tags=tags[:1000])["code"] == SUCCESS
            h, _ = c.call(UPDATE_AND_CREATE_TOPIC, {
                "topic": "TT", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
            assert h["code"] == SUCCESS, h

            def pull(expression: str) -> dict:
                h, _ = c.call(PULL_MESSAGE, {
                    "consumerGroup": "GT", "topic": "TT", "queueId": 0, "queueOffset": 0,
                    "maxMsgNums": 32, "sysFlag": FLAG_SUBSCRIPTION, "commitOffset": 0,
                    "suspendTimeoutMillis": 0, "subscription": expression, "subVersion": 0})
                return h
            h = pull("||".join(tags))
            assert h["code"] == SUBSCRIPTION_PARSE_FAILED, h
            assert "1001 tags (heartbeatMaxEntries=1000)" in h["remark"], h
            assert pull(" || ".join(tags[:1000]))["code"] == PULL_NOT_FOUND
            assert pull("*")["code"] == PULL_NOT_FOUND
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def test_the_proxy_announces_more_groups_than_one_heartbeat_may_carry(tmp_path):
    """The gRPC proxy carries all its clients' groups under one client id: it splits them
    into heartbeats below the broker's default ``heartbeatMaxEntries``."""
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.proxy.registry import HEARTBEAT_ENTRIES, Registry
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    transport = TcpTransport(ns.addr)
    registry = Registry(transport, lambda *a: None)
    try:
        n = HEARTBEAT_ENTRIES + 1
        with RawClient(broker.addr) as c:
            h, _ = c.call(UPDATE_BROKER_CONFIG, {}, f"heartbeatMaxEntries={HEARTBEAT_ENTRIES}"
                          .encode())
            assert h["code"] == SUCCESS, h
            for i in range(n):
                registry.add_consumer(f"PG{i}", {"T": "*"})
            registry.heartbeat_now()
            held = _groups(c)
            assert {f"PG{i}" for i in range(n)} <= held
            for g in ("PG0", f"PG{n - 1}"):
                h, _ = c.call(38, {"consumerGroup": g})      # GET_CONSUMER_LIST_BY_GROUP
                assert h["code"] == SUCCESS, (g, h)
    finally:
        registry.close()
        transport.close()
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def _consumer_ids(c: RawClient, group: str) -> list[str]:
    h, body = c.call(38, {"consumerGroup": group})           # GET_CONSUMER_LIST_BY_GROUP
    return sorted(json.loads(body)["consumerIdList"]) if h["code"] == SUCCESS else []


def test_a_new_client_id_on_a_connection_replaces_the_old_one(tmp_path):
    """One connection is one client: beats under ever new client IDs would otherwise leave
    each old ID in its groups until the 120 s expiry (piling registrations up per connection,
    ghosts in GET_CONSUMER_LIST_BY_GROUP)."""
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    try:
        with RawClient(broker.addr) as c, RawClient(broker.addr) as other:
            assert _beat(c, ["R1", "R2"], client="c@1")["code"] == SUCCESS
            assert _beat(other, ["R1"], client="o@1")["code"] == SUCCESS
            assert _consumer_ids(c, "R1") == ["c@1", "o@1"]
            assert _beat(c, ["R3"], client="c@2")["code"] == SUCCESS
            assert _consumer_ids(c, "R1") == ["o@1"] and _consumer_ids(c, "R2") == []
            assert _consumer_ids(c, "R3") == ["c@2"]
            assert _beat(c, ["R1"], client="c@2")["code"] == SUCCESS
            assert _consumer_ids(c, "R1") == ["c@2", "o@1"]
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def test_dropped_subscriptions_are_one_warning_per_heartbeat_and_rate_limited(tmp_path):
    """A topic absent from a member's heartbeat leaves its group's subscriptions, which the
    broker warns about. A client alternating a heartbeat with 300 topics and one without them
    wrote 300 warning lines per beat (1000 groups x 1000 topics: a million); now a heartbeat
    that drops any is one warning naming the client, the count and the first few, and a
    connection gets at most one such warning a minute (what is held back is counted into its
    next one). Another connection's drops are warned on their own."""
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    topics = [f"Drop{i}" for i in range(300)]
    try:
        with RawClient(broker.addr) as c, RawClient(broker.addr) as other:
            for _ in range(5):
                assert _beat(c, ["GD"], topics=topics)["code"] == SUCCESS
                assert _beat(c, ["GD"], topics=["T"])["code"] == SUCCESS
            assert _beat(other, ["GE"], topics=topics, client="c@2")["code"] == SUCCESS
            assert _beat(other, ["GE"], topics=["T"], client="c@2")["code"] == SUCCESS
    finally:
        assert broker.stop() == 0
        ns.stop()
    lines = [line for line in broker.output.splitlines()
             if "WARNING rocketstore.broker.consumers" in line]
    assert len(lines) == 2, "\n".join(lines[:5]) + f"\n... {len(lines)} lines"
    first, second = lines
    assert "c@1" in first and "300" in first and "GD/Drop0" in first, first
    assert "c@2" in second and "300" in second and "GE/Drop0" in second, second
