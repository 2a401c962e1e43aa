"""The wire's send lane (issue 22): SEND_MESSAGE(_V2) of a plain message, after the ACL and
name checks every request gets, is stored by the lane of its (producer group, topic) in one C
step once a full send passed its checks. It must store and answer what the full path
(``Broker.send_wire_now``) stores and answers, count each send once, and hand every change of
what the checks read back to the full path."""
from __future__ import annotations

import dataclasses
import sys

import pytest

from rocketstore.broker import broker as broker_mod
from rocketstore.common import ResponseCode
from rocketstore.remoting import requests
from rocketstore.remoting.broker_processor import BrokerProcessor
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import Connection

TOPIC = "WireLane"


PEER = "10.1.2.3:4567"
# how a send reaches the lane: the send handler given the decoded request, or the whole
# processor (``BrokerProcessor.process``), where a warm lane takes it from the header's text
VIA = "handler"


@pytest.fixture(params=["handler", "process"], autouse=True)
def via(request, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "VIA", request.param)
    return request.param


@pytest.fixture
def broker(inproc_broker):
    return inproc_broker


def _conn() -> Connection:
    conn = Connection(None)
    conn.peer = PEER
    return conn


def _command(i: int, *, topic: str = TOPIC, queue_id: int = 1, group: str = "pg_wire",
             props: str | None = None, flag: int = 0, **more: str) -> RemotingCommand:
    fields = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
              "g": str(1_700_000_000_000 + i), "h": str(flag),
              "i": props if props is not None else
              f"UNIQ_KEY\x01U{i:030d}\x02KEYS\x01k{i}\x02TAGS\x01t{i % 3}\x02WAIT\x01true",
              "j": "0", "k": "false", "m": "false", **more}
    return RemotingCommand(310, opaque=100 + i, ext_fields=fields, body=b"body-%d" % i)


def _send(proc: BrokerProcessor, i: int, **kw):
    cmd = _command(i, **kw)
    if VIA == "process":
        return proc.process(_conn(), cmd)
    return proc.send(None, cmd, requests.decode(cmd, PEER))


def _stored(broker, queue_id: int = 1, topic: str = TOPIC):
    broker.store.wait_dispatched()
    r = broker.store.get_message("g", topic, queue_id, 0, 64)
    return [(m.topic, m.queue_id, m.queue_offset, bytes(m.body), m.flag, m.sys_flag,
             m.born_timestamp, m.born_host, m.reconsume_times, m.properties)
            for m in r.messages]


def _counting(broker, monkeypatch) -> list:
    calls: list = []
    orig = broker.send_wire_now

    def counted(req):
        calls.append(req)
        return orig(req)
    monkeypatch.setattr(broker, "send_wire_now", counted)
    return calls


def test_wire_sends_after_the_first_take_the_lane_and_store_what_the_full_path_stores(
        broker, tmp_path, monkeypatch):
    from rocketstore import StoreConfig
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    full_calls = _counting(broker, monkeypatch)
    proc = BrokerProcessor(broker)
    answers = [_send(proc, i, flag=i % 5) for i in range(20)]
    # the first two only: the first auto-created the topic, the second passed the checks
    # with its config and warmed the lane
    assert len(full_calls) == 2
    # a second broker whose lane is never taken (every send through send_wire_now)
    ref = Broker.open(tmp_path / "ref", BrokerConfig(),
                      StoreConfig(mapped_file_size_commit_log=4 << 20))
    try:
        ref_proc = BrokerProcessor(ref)
        monkeypatch.setattr(ref, "wire_send_lane", lambda req: _FullOnly(ref))
        ref_answers = [_send(ref_proc, i, flag=i % 5) for i in range(20)]
        ref.store.wait_dispatched()
        broker.store.wait_dispatched()
        assert _stored(broker) == _stored(ref) and len(_stored(broker)) == 20
        # the answers: same header bytes (offsets, ids, opaque) but for the broker's own
        # message ids (its store host), here the same address
        assert [a.encode() for a in answers] == [a.encode() for a in ref_answers]
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
    finally:
        ref.close()
    puts, put_bytes, failed, _, _ = broker.metrics.counters()
    assert puts[TOPIC] == 20 and put_bytes[TOPIC] == sum(len(b"body-%d" % i) for i in range(20))
    assert not failed


class _FullOnly:
    """A lane that never takes a send."""

    def __init__(self, broker):
        self.broker = broker

    def send_wire(self, w):
        return None

    def send_wire_full(self, w):
        return self.broker.send_wire_now(w)


def test_what_the_lane_leaves_to_the_full_path(broker, monkeypatch):
    """Non-ASCII or transactional properties, a queue out of range, a delay: the full path
    (which stores or refuses them as before); a changed topic config: the full path, whose
    refusal is 4.9.8's."""
    full_calls = _counting(broker, monkeypatch)
    proc = BrokerProcessor(broker)
    _send(proc, 0)                              # auto-creates the topic
    _send(proc, 1)                              # warms the lane
    assert len(full_calls) == 2
    _send(proc, 2, props="UNIQ_KEY\x01U\u00e4\x02WAIT\x01true")          # not ASCII
    _send(proc, 3, props="UNIQ_KEY\x01U3\x02DELAY\x013\x02WAIT\x01true")  # a delay
    _send(proc, 4, props="UNIQ_KEY\x01U4\x02TRAN_MSG\x01true", flag=0)   # props only
    r = _send(proc, 5, queue_id=9)                                        # beyond 4 queues
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert len(full_calls) == 6
    assert _send(proc, 6).code == ResponseCode.SUCCESS
    assert len(full_calls) == 6                 # plain again: the lane
    # a new config of the topic (one queue): the full path, which refuses queue 1 as 4.9.8
    tc = broker.topic_manager.table.peek(TOPIC)
    broker.topic_manager.update(dataclasses.replace(tc, read_queue_nums=1, write_queue_nums=1))
    r = _send(proc, 7)
    assert len(full_calls) == 7 and r.code == ResponseCode.SYSTEM_ERROR
    _, _, failed, _, _ = broker.metrics.counters()
    assert failed[TOPIC] == 2                   # the two bad queue ids, counted once each
    assert _send(proc, 8, queue_id=0).code == ResponseCode.SUCCESS and len(full_calls) == 8
    assert _send(proc, 9, queue_id=0).code == ResponseCode.SUCCESS and len(full_calls) == 8
    puts, _, _, _, _ = broker.metrics.counters()
    assert puts[TOPIC] == 8                     # every stored send counted once


def test_the_wire_send_lane_table_is_bounded(broker, monkeypatch):
    monkeypatch.setattr(broker_mod, "MAX_WIRE_SEND_LANES", 8)
    proc = BrokerProcessor(broker)
    for i in range(30):
        for k in range(3):      # created, warmed, then its header text remembered
            assert _send(proc, 3 * i + k, group=f"pg{i}").code == ResponseCode.SUCCESS
        assert len(broker._wire_send_lanes) <= 8
        assert len(proc._header_lanes) <= 8
    # 30 texts remembered, cleared at 8: the last 6
    assert len(proc._header_lanes) == 6


def test_a_refused_send_does_not_open_the_lane(broker, monkeypatch):
    """The wire path answers a refusal as a completed Future: it must not count as a send
    that passed the checks (the broker's accept-time guard refused every send; with the lane
    opened by the first refusal, the second was stored)."""
    import time
    full_calls = _counting(broker, monkeypatch)
    proc = BrokerProcessor(broker)
    _send(proc, 0)
    sp = broker.send_processor
    sp.cfg = dataclasses.replace(
        sp.cfg, start_accept_send_request_time_stamp=int(time.time() * 1000) + 60_000)
    for i in (1, 2, 3):
        r = _send(proc, i)
        assert r.code == ResponseCode.SYSTEM_ERROR, i
        assert b"broker unable to service" in r.encode()
    assert len(full_calls) == 4
    assert len(_stored(broker)) == 1


def test_a_broker_without_write_permission_sends_each_through_the_full_path(broker,
                                                                            monkeypatch):
    """4.9.8 refuses a send to an order topic while the broker lacks write permission; which
    topics are ordered the NameServer may change at any time, so no send of such a broker
    takes the lane."""
    full_calls = _counting(broker, monkeypatch)
    proc = BrokerProcessor(broker)
    _send(proc, 0)
    _send(proc, 1)
    assert _send(proc, 2).code == ResponseCode.SUCCESS and len(full_calls) == 2
    sp = broker.send_processor
    monkeypatch.setattr(sp, "_broker_writable", False)
    monkeypatch.setattr(sp.topics, "is_order_topic", lambda topic: True)
    r = _send(proc, 3)
    assert len(full_calls) == 3 and r.code == ResponseCode.NO_PERMISSION
    assert len(_stored(broker)) == 3

