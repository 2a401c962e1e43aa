"""The gRPC proxy's delay timer against hostile 5.x clients.

A waiting delay message is an entry of the proxy's POP journal. Its group used to be the valid
group name ``__timer__`` with pop time 0, so any client could ack it (and so destroy the message),
move its deliver time, or forward it to a DLQ by naming that group in a receipt-handle RPC. And
every timer round, and every long-polling receive's round, scanned everything in flight, which
stalls the event loop once many messages wait. A real NameServer and broker (processes) and the
proxy on its own thread; every call is a raw gRPC call.
"""
from __future__ import annotations

import time
import types

import pytest

from grpc_support import _pull_all, _stub, local_proxy, md, status_code
from servers import wait_until

TOPIC = "t_tg_delay"


_md, _code = md, status_code


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_proxy(tmp_path_factory.mktemp("grpc_timer"), {TOPIC: "DELAY"}) as both:
        yield both


def test_no_client_can_ack_move_forward_or_recall_a_waiting_delay_message(cluster):
    """Ack, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue naming the timer's
    old group (a valid name: no such entry any more) or its journal group (not a valid name)
    with a receipt handle forged from the timer's queue offset are refused, so is a
    RecallMessage whose handle has the right offset but not the message's id or deliver
    time, and the delay message still arrives in its queue when due."""
    from rocketstore.proxy import convert, protocol as pb
    from rocketstore.proxy.timer import TIMER_GROUP
    local, ns = cluster
    svc = local.server.service
    ch, send = _stub(local.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    sr = pb.SendMessageRequest()
    m = sr.messages.add(body=b"due in 3 s")
    m.topic.name = TOPIC
    m.system_properties.message_id = "01TIMERGUARD0001"
    convert._set_ms(m.system_properties.delivery_timestamp, int(time.time() * 1000) + 3000)
    r = send(sr, metadata=_md("c@timer-owner"), timeout=10)
    assert r.status.code == _code("OK"), r.status
    ch.close()
    keys = [k for k in svc.state.inflight if k[0] == TIMER_GROUP]
    assert len(keys) == 1
    _, topic, broker, qid, off = keys[0]
    forged = f"{off} 0 0 0 0 {broker} {qid} {off} -1"
    ach, ack = _stub(local.addr, "AckMessage", "AckMessageRequest", "AckMessageResponse")
    cch, change = _stub(local.addr, "ChangeInvisibleDuration",
                        "ChangeInvisibleDurationRequest", "ChangeInvisibleDurationResponse")
    fch, forward = _stub(local.addr, "ForwardMessageToDeadLetterQueue",
                         "ForwardMessageToDeadLetterQueueRequest",
                         "ForwardMessageToDeadLetterQueueResponse")
    for group, expected in (("__timer__", "INVALID_RECEIPT_HANDLE"),
                            (TIMER_GROUP, "ILLEGAL_CONSUMER_GROUP")):
        a = pb.AckMessageRequest()
        a.group.name, a.topic.name = group, TOPIC
        a.entries.add(message_id="01TIMERGUARD0001", receipt_handle=forged)
        assert ack(a, metadata=_md("c@hostile"), timeout=10).status.code == _code(expected)
        c = pb.ChangeInvisibleDurationRequest()
        c.group.name, c.topic.name, c.receipt_handle = group, TOPIC, forged
        c.invisible_duration.seconds = 3600
        assert change(c, metadata=_md("c@hostile"), timeout=10).status.code == _code(expected)
        f = pb.ForwardMessageToDeadLetterQueueRequest()
        f.group.name, f.topic.name, f.receipt_handle = group, TOPIC, forged
        assert forward(f, metadata=_md("c@hostile"), timeout=10).status.code == _code(expected)
    # RecallMessage with handles forged from the guessable journal key: the deliver time or
    # the message id is not the waiting message's
    from rocketstore.proxy.timer import recall_handle
    rch, recall = _stub(local.addr, "RecallMessage", "RecallMessageRequest",
                        "RecallMessageResponse")
    deliver_ms = svc.state.inflight[keys[0]].visible_at
    for forged_handle in (recall_handle(keys[0], deliver_ms, "01GUESSEDMESSAGEID"),
                          recall_handle(keys[0], deliver_ms + 1, "01TIMERGUARD0001")):
        rq = pb.RecallMessageRequest(recall_handle=forged_handle)
        rq.topic.name = TOPIC
        assert recall(rq, metadata=_md("c@hostile"), timeout=10).status.code == _code("NOT_FOUND")
    for c in (ach, cch, fch, rch):
        c.close()
    assert keys[0] in svc.state.inflight
    wait_until(lambda: any(bytes(x.body) == b"due in 3 s"
                           for x in _pull_all(ns.addr, TOPIC, qid)),
               "the delay message delivered to its queue", 30)
    wait_until(lambda: keys[0] not in svc.state.inflight, "the timer entry dropped", 10)


class _NoScan(dict):
    """An in-flight table that fails a test when anything walks all of it."""

    def items(self):
        raise AssertionError("scanned every in-flight entry")

    def values(self):
        raise AssertionError("scanned every in-flight entry")

    def __iter__(self):
        raise AssertionError("scanned every in-flight entry")


def test_timer_rounds_and_receive_waits_do_not_scan_everything_in_flight(tmp_path):
    """50,000 consumers' messages in flight and three delay messages: a timer round takes
    the due ones (earliest first) and the next deliver time, and a receive's wait its next
    visibility, without walking the in-flight table (a round runs on the event loop every
    second and at each new delay message; a receive's wait every half second)."""
    from rocketstore.proxy.popstate import InFlight, PopState
    from rocketstore.proxy.timer import TIMER_GROUP, DelayTimer
    state = PopState(str(tmp_path / "pop.journal"))
    now = int(time.time() * 1000)
    state.record_pops(None, [(("g", "t", "b", 0, i), InFlight(now, now + 600_000 + i, 1, i))
                             for i in range(50_000)])
    state.record_pops(None, [((TIMER_GROUP, "t", "b", 0, 1), InFlight(0, now - 5, 0, -1)),
                             ((TIMER_GROUP, "t", "b", 0, 2), InFlight(0, now - 10, 0, -1)),
                             ((TIMER_GROUP, "t", "b", 0, 3), InFlight(0, now + 5000, 0, -1))])
    timer = DelayTimer(types.SimpleNamespace(state=state))
    assert timer.pending == 3
    state.inflight = _NoScan(state.inflight)
    due, later = timer._due(now)
    assert [k[4] for k, _ in due] == [2, 1] and later == now + 5000
    assert state.next_visible() == now - 10       # the two due ones are still in flight
    timer._forget(due[0][0])
    timer._forget(due[1][0])
    assert timer.pending == 1 and state.next_visible() == now + 5000
    assert timer._due(now) == ([], now + 5000)
    state.close()


def test_a_journal_of_the_old_timer_group_is_moved_and_kept(tmp_path):
    """Delay messages journaled under the old group name are moved to the timer's own group at
    start (durably: a reopened journal has them there), none lost, none left reachable."""
    from rocketstore.proxy.popstate import InFlight, PopState
    from rocketstore.proxy.timer import TIMER_GROUP, DelayTimer
    path = str(tmp_path / "pop.journal")
    state = PopState(path)
    later = int(time.time() * 1000) + 60_000
    state.record_pops(None, [(("__timer__", "t", "b", 0, 7), InFlight(0, later, 0, -1)),
                             (("__timer__", "t", "b", 1, 8), InFlight(0, later + 1, 0, -1))])
    timer = DelayTimer(types.SimpleNamespace(state=state))
    assert timer.pending == 2
    state.close()
    again = PopState(path)
    assert sorted(again.inflight) == [(TIMER_GROUP, "t", "b", 0, 7), (TIMER_GROUP, "t", "b", 1, 8)]
    assert again.inflight[(TIMER_GROUP, "t", "b", 1, 8)].visible_at == later + 1
    again.close()
