"""Issue 12's scenarios from RocketMQ's documentation, end to end: real clients against a real
Broker on a tmp store. The transport is a parameter (``inprocess`` today; the wire-protocol work
adds ``tcp``), so every semantic is checked through the same client API."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from messaging_support import OK, Collector, client_kw, make_topic, open_broker, push, wait_until
from rocketstore.client import (ConsumeOrderlyStatus, LocalTransactionState, Message, Producer,
                                PullConsumer, SelectMessageQueueByHash, TransactionProducer)


@pytest.fixture(params=["inprocess", "tcp"])
def transport(request):
    return request.param


@pytest.fixture
def broker(tmp_path, transport):
    b = open_broker(tmp_path / "store", transport)
    yield b
    b.close()


# -- rebalance --------------------------------------------------------------------------------

def test_five_queues_two_consumers_take_3_and_2(broker, transport):
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "T5", 5)
    cs = [push("g5", broker, transport, Collector(), "T5") for _ in range(2)]
    try:
        wait_until(lambda: sorted(len(c.assignment("T5")) for c in cs) == [2, 3],
                   what="a 3 + 2 split")
        a, b = (c.assignment("T5") for c in cs)
        assert not a & b and len(a | b) == 5
        ids = sorted(c.client_id for c in cs)
        first = next(c for c in cs if c.client_id == ids[0])
        assert {mq.queue_id for mq in first.assignment("T5")} == {0, 1, 2}    # sorted, contiguous
    finally:
        for c in cs:
            c.shutdown()


def test_eight_consumers_on_six_queues_leave_two_idle(broker, transport):
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "T6", 6)
    cs = [push("g6", broker, transport, Collector(), "T6") for _ in range(8)]
    try:
        wait_until(lambda: sorted(len(c.assignment("T6")) for c in cs) == [0, 0] + [1] * 6,
                   what="6 consumers with one queue, 2 idle")
        owned = [mq for c in cs for mq in c.assignment("T6")]
        assert len(set(owned)) == 6
    finally:
        for c in cs:
            c.shutdown()


def test_join_and_leave_mid_stream_loses_nothing(broker, transport):
    total, cache = 3000, 100
    kw = dict(pull_threshold_for_queue=cache)
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TJ", 4)
        col = Collector()
        a = push("gj", broker, transport, col, "TJ", **kw)
        keys = []
        b = None
        for i in range(total):
            keys.append(p.send(Message("TJ", b"m%d" % i)).msg_id)
            if i == total // 3:
                b = push("gj", broker, transport, col, "TJ", **kw)        # joins
            if i == 2 * total // 3:
                a.shutdown()                                           # leaves cleanly
        col.wait_keys(keys)
        b.shutdown()
    dups = sum(col.seen[k] - 1 for k in keys)
    print(f"duplicates: {dups} of {total}")
    # at-least-once: nothing lost; duplicates only where a queue moved (2 queues at the join,
    # 2 at the leave), at most what the old owner had pulled past its committed offset:
    # its cache (pull_threshold_for_queue) plus one pull, per moved queue
    assert dups <= 4 * (cache + 1 + 32), dups


def test_concurrent_commit_is_the_smallest_offset_in_flight(broker, transport):
    """Pulled ranges 0-10, 10-20, 20-30; 10-20 is slow: the committed offset stays 10 until it
    finishes, then moves to 30."""
    with Producer("pg", **client_kw(broker, transport)) as p:
        mq = make_topic(p, "TM", 1)[0]
        # one queue holding offsets 0..29 ("create" is offset 0)
        for i in range(29):
            p.send(Message("TM", b"%d" % i), message_queue=mq)
        # all 30 visible before the first pull, so it brings them in one batch of 30 (sends
        # return before dispatch: a pull racing it brought 0..7, and no batch began at 10)
        wait_until(lambda: p.transport.get_max_offset(mq.broker_name, "TM", 0) == 30,
                   what="the 30 messages dispatched")
    release = threading.Event()
    started = threading.Event()
    done = collections.Counter()
    lock = threading.Lock()

    def listener(msgs, ctx):
        first = msgs[0].queue_offset
        if first == 10:
            started.set()
            release.wait(30)
        with lock:
            done[first] += len(msgs)
        return OK

    c = push("gm", broker, transport, listener, "TM", consume_message_batch_max_size=10,
             pull_batch_size=30, consume_thread_nums=3)
    try:
        assert started.wait(20)
        wait_until(lambda: done[0] == 10 and done[20] == 10, what="ranges 0-10 and 20-30")
        assert c.offset_store.clone_offset_table("TM") == {mq: 10}
        c.persist_consumer_offset()
        assert c.transport.query_consumer_offset(mq.broker_name, "gm", "TM", 0).value == 10
        release.set()
        wait_until(lambda: c.offset_store.clone_offset_table("TM") == {mq: 30},
                   what="the commit to move to 30")
    finally:
        release.set()
        c.shutdown()
    # shutdown persisted it to the broker
    with Producer("pg2", **client_kw(broker, transport)) as p2:
        assert p2.transport.query_consumer_offset(mq.broker_name, "gm", "TM", 0).value == 30


# -- retry, DLQ ---------------------------------------------------------------------------------

def test_failing_listener_reaches_dlq_after_max_reconsume_times_then_resend(broker, transport):
    from rocketstore.broker.dlq import DeadLetterQueue
    deliveries = []

    def always_fail(msgs, ctx):
        for m in msgs:
            if bytes(m.body) != b"poison":
                return OK
            deliveries.append((m.topic, m.reconsume_times, m.properties.get("RETRY_TOPIC")))
        raise RuntimeError("listener fails every time")

    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TD", 1)
        c = push("gd", broker, transport, always_fail, "TD", max_reconsume_times=2)
        sent = p.send(Message("TD", b"poison", tags="X", keys="k1"))
        try:
            dlq = DeadLetterQueue(broker, "gd")
            wait_until(lambda: len(dlq.list()) == 1, timeout=30, what="the dead letter")
            time.sleep(0.5)
        finally:
            c.shutdown()
    # 1 delivery + max_reconsume_times redeliveries, under the original topic
    assert deliveries == [("TD", 0, None), ("TD", 1, "TD"), ("TD", 2, "TD")]
    assert len(DeadLetterQueue(broker, "gd").list()) == 1
    dlq_msgs = broker.store.get_message("x", "%DLQ%gd", 0, 0, 32).messages
    assert len(dlq_msgs) == 1
    m = dlq_msgs[0]
    assert m.properties["RETRY_TOPIC"] == "TD"
    assert m.properties["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
    assert m.uniq_key == sent.msg_id
    assert m.reconsume_times == 3
    assert bytes(m.body) == b"poison"
    # a resend from the DLQ reaches the group's consumers again
    col = Collector()
    c2 = push("gd", broker, transport, col, "TD")
    try:
        DeadLetterQueue(broker, "gd").resend()
        with col.cond:
            assert col.cond.wait_for(lambda: any(bytes(x.body) == b"poison" for x in col.msgs),
                                     20)
    finally:
        c2.shutdown()


# -- orderly ------------------------------------------------------------------------------------

def test_orderly_per_order_and_a_failing_queue_suspends_only_itself(broker, transport):
    queues, orders, steps = 4, 8, 10
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TO", queues)
        sel = SelectMessageQueueByHash()
        for step in range(steps):
            for order in range(orders):
                r = p.send(Message("TO", b"%d:%d" % (order, step)), selector=sel, arg=order)
                assert r.message_queue.queue_id == order % queues
    seen = collections.defaultdict(list)
    fail_left = {"n": 5}
    lock = threading.Lock()
    others_done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            for m in msgs:
                if bytes(m.body) == b"create":
                    continue
                order, step = map(int, bytes(m.body).split(b":"))
                if order % queues == 1 and fail_left["n"] > 0:
                    fail_left["n"] -= 1
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                seen[order].append(step)
            if all(len(seen[o]) == steps for o in range(orders) if o % queues != 1):
                others_done.set()
        return ConsumeOrderlyStatus.SUCCESS

    c = push("go", broker, transport, listener, "TO", orderly=True,
             suspend_current_queue_time_millis=300)
    try:
        assert others_done.wait(30)
        with lock:
            # queue 1 was still failing while every other queue finished
            assert fail_left["n"] > 0 or any(len(seen[o]) < steps for o in (1, 5))
        wait_until(lambda: all(len(seen[o]) == steps for o in range(orders)), timeout=30,
                   what="queue 1 to recover")
        for o in range(orders):
            assert seen[o] == list(range(steps)), (o, seen[o])
    finally:
        c.shutdown()


# -- delay ------------------------------------------------------------------------------------

def test_delay_level_2_arrives_no_earlier_than_its_delay(broker, transport):
    col = Collector()
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TL", 1)
        c = push("gl", broker, transport, col, "TL")
        try:
            t0 = time.time()
            r = p.send(Message("TL", b"later", properties={"DELAY": "2"}))
            col.wait_keys([r.msg_id], timeout=20)
            arrived = time.time()
        finally:
            c.shutdown()
    (m,) = [x for x in col.msgs if x.uniq_key == r.msg_id]
    assert m.store_timestamp - m.born_timestamp >= 2000
    assert arrived - t0 >= 2.0 - 0.01


# -- transactions -------------------------------------------------------------------------------

class TxListener:
    def __init__(self, local, check=LocalTransactionState.UNKNOW):
        self.local = local
        self.check = check
        self.checked = []

    def execute_local_transaction(self, msg, arg):
        return self.local[arg]

    def check_local_transaction(self, msg):
        self.checked.append(msg.uniq_key)
        return self.check


def test_transactions_commit_rollback_and_unknown_resolved_by_check_back(broker, transport):
    col = Collector()
    local = {"c": LocalTransactionState.COMMIT_MESSAGE,
             "r": LocalTransactionState.ROLLBACK_MESSAGE, "u": LocalTransactionState.UNKNOW}
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TX", 2)
    c = push("gx", broker, transport, col, "TX")
    try:
        tp = TransactionProducer("txg", TxListener(local), **client_kw(broker, transport))
        tp.start()
        rc = tp.send_message_in_transaction(Message("TX", b"commit"), "c")
        rr = tp.send_message_in_transaction(Message("TX", b"rollback"), "r")
        ru = tp.send_message_in_transaction(Message("TX", b"unknown"), "u")
        assert rc.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert rr.local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
        assert ru.local_transaction_state is LocalTransactionState.UNKNOW
        col.wait_keys([rc.msg_id])
        tp.shutdown()                       # the producer that ran the transaction is gone
        replacement = TxListener(local, check=LocalTransactionState.COMMIT_MESSAGE)
        with TransactionProducer("txg", replacement, **client_kw(broker, transport)):
            col.wait_keys([ru.msg_id], timeout=30)
        assert ru.msg_id in replacement.checked
        time.sleep(0.3)
        assert rr.msg_id not in col.seen
        assert col.seen[rc.msg_id] == 1 and col.seen[ru.msg_id] == 1
    finally:
        c.shutdown()


# -- broadcasting, tags ----------------------------------------------------------------------

def test_broadcasting_delivers_every_message_to_every_consumer(broker, transport, tmp_path):
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TB", 3)
        cols = [Collector() for _ in range(3)]
        cs = [push("gb", broker, transport, col, "TB", message_model="BROADCASTING",
                   instance_name=f"inst{i}", offset_store_dir=tmp_path / "offsets")
              for i, col in enumerate(cols)]
        try:
            wait_until(lambda: all(len(c.assignment("TB")) == 3 for c in cs),
                       what="every consumer on every queue")
            keys = [p.send(Message("TB", b"%d" % i)).msg_id for i in range(60)]
            for col in cols:
                col.wait_keys(keys)
        finally:
            for c in cs:
                c.shutdown()
    from rocketstore.client.offset_store import decode_offset_table
    for c in cs:
        text = c.offset_store.path.read_text()
        assert '"offsetTable":{{' in text          # object-valued keys, RocketMQ's form
        table = decode_offset_table(text)
        assert {mq.queue_id for mq in table} == {0, 1, 2}
        assert sum(table.values()) == 61            # "create" + 60: every offset consumed
    # nothing was committed to the broker for a broadcasting group
    assert all(broker.store.query_offset("gb", "TB", q) == -1 for q in range(3))


def test_colliding_tag_hashes_never_deliver_the_wrong_tag(broker, transport):
    col = Collector()
    with Producer("pg", **client_kw(broker, transport)) as p:
        make_topic(p, "TT", 2)
        c = push("gt", broker, transport, col, "TT", expr="Aa")
        try:
            want = []
            for i in range(100):
                p.send(Message("TT", b"bb%d" % i, tags="BB"))     # same Java hash as "Aa"
                want.append(p.send(Message("TT", b"aa%d" % i, tags="Aa")).msg_id)
            col.wait_keys(want)
            time.sleep(0.3)
        finally:
            c.shutdown()
    assert {m.tags for m in col.msgs} == {"Aa"}


# -- restart ------------------------------------------------------------------------------------

def test_broker_close_reopen_keeps_offsets_delays_and_half_messages(tmp_path, transport):
    path = tmp_path / "store"
    b = open_broker(path, transport)
    col = Collector()
    local = {"u": LocalTransactionState.UNKNOW}
    try:
        with Producer("pg", **client_kw(b, transport)) as p:
            make_topic(p, "TR", 2)
            c = push("gr", b, transport, col, "TR")
            first = [p.send(Message("TR", b"a%d" % i)).msg_id for i in range(40)]
            col.wait_keys(first)
            c.shutdown()                                  # commits and persists its offsets
            delayed = p.send(Message("TR", b"delayed", properties={"DELAY": "2"})).msg_id
        tp = TransactionProducer("txr", TxListener(local), **client_kw(b, transport))
        tp.start()
        half = tp.send_message_in_transaction(Message("TR", b"half"), "u").msg_id
        tp.shutdown()
    finally:
        b.close()
    b = open_broker(path, transport)
    try:
        col2 = Collector()
        c = push("gr", b, transport, col2, "TR")
        resolver = TransactionProducer("txr", TxListener(
            local, check=LocalTransactionState.COMMIT_MESSAGE), **client_kw(b, transport))
        resolver.start()
        try:
            col2.wait_keys([delayed, half], timeout=30)
            time.sleep(0.3)
        finally:
            resolver.shutdown()
            c.shutdown()
        assert not set(first) & set(col2.seen)            # committed offsets survived
    finally:
        b.close()


# -- lite pull --------------------------------------------------------------------------------

def test_assigned_queues_stay_fixed_when_the_group_rebalances(broker, transport):
    # assign() means no rebalance: a rebalance of the group (here forced; in the wild a
    # NOTIFY_CONSUMER_IDS_CHANGED racing start()) must not add the topic's other queues
    with Producer("pa", **client_kw(broker, transport)) as p:
        q0, q1 = make_topic(p, "TA", 2)[:2]
        for i in range(6):
            p.send(Message("TA", b"%d" % i), message_queue=(q0, q1)[i % 2])
    pc = PullConsumer("ga", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                      **client_kw(broker, transport))
    pc.assign([q0])
    pc.start()
    try:
        pc.instance.do_rebalance()
        assert pc.assignment() == {q0}
        got = []
        while True:
            batch = pc.poll(500)
            if not batch:
                break
            got.extend(batch)
        assert {m.queue_id for m in got} == {q0.queue_id}
        assert [m.queue_offset for m in got] == list(range(len(got)))
    finally:
        pc.shutdown()


def test_pull_consumer_assign_poll_commit_seek_and_times(broker, transport):
    with Producer("pg", **client_kw(broker, transport)) as p:
        mq = make_topic(p, "TP", 1)[0]
        for i in range(19):
            p.send(Message("TP", b"%d" % (i + 1)), message_queue=mq)
    pc = PullConsumer("gp", consume_from_where="CONSUME_FROM_FIRST_OFFSET", auto_commit=False,
                      **client_kw(broker, transport))
    pc.assign([mq])
    pc.start()
    try:
        got = []
        while len(got) < 20:
            batch = pc.poll(5000)
            assert batch, "poll timed out"
            got.extend(batch)
        assert [m.queue_offset for m in got] == list(range(20))
        # nothing committed yet: the broker answers 0 for a queue whose first message is
        # still in memory (MESSAGING.md §3.7), the committed value after commit() is 20
        assert pc.committed(mq) == 0
        pc.commit()
        assert pc.committed(mq) == 20
        pc.seek(mq, 5)
        again = []
        while len(again) < 15:
            batch = pc.poll(5000)
            assert batch, "poll after seek timed out"
            again.extend(batch)
        assert [m.queue_offset for m in again] == list(range(5, 20))
        assert pc.poll(300) == []
        ts = got[10].store_timestamp
        assert pc.offsets_for_times({mq: ts})[mq] <= 10
        assert pc.offsets_for_times({mq: got[-1].store_timestamp + 60_000})[mq] == 20
        with pytest.raises(Exception, match="out of range"):
            pc.seek(mq, 21)
    finally:
        pc.shutdown()
