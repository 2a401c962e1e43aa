"""Push and lite pull consumers against a real Broker: send-back details, broadcasting
failures, start positions, filters, configuration errors, subscribe-mode pulls."""
from __future__ import annotations

import threading
import time

import pytest

from messaging_support import OK, LATER, Collector, make_topic, open_broker, wait_until
from rocketstore.client import (ConsumeConcurrentlyStatus, LocalTransactionState, Message,
                                Producer, PullConsumer, PushConsumer, TransactionProducer)
from rocketstore.client.offset_store import ReadOffsetType
from rocketstore.errors import MQClientError


@pytest.fixture
def broker(tmp_path):
    b = open_broker(tmp_path / "store")
    yield b
    b.close()


def consumer(broker, group, topic, listener, expr="*", **kw):
    kw.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    c = PushConsumer(group, broker=broker, **kw)
    c.subscribe(topic, expr)
    c.register_message_listener(listener)
    return c.start()


def queue_bodies(broker, topic, qid=0):
    return [bytes(m.body) for m in broker.store.get_message("x", topic, qid, 0, 64).messages]


def test_ack_index_sends_back_only_the_rest(broker):
    with Producer("pg", broker=broker) as p:
        mq = make_topic(p, "TA", 1)[0]
        for i in range(4):
            p.send(Message("TA", b"m%d" % i), message_queue=mq)
    # the first pull must see all five in one batch: sends return before dispatch
    assert broker.store.wait_dispatched(10)
    calls = []

    def listener(msgs, ctx):
        calls.append([bytes(m.body) for m in msgs])
        if len(msgs) == 5 and bytes(msgs[0].body) == b"create":
            ctx.ack_index = 2                        # create, m0, m1 done; m2, m3 retried
        return OK

    c = consumer(broker, "ga", "TA", listener, consume_message_batch_max_size=8)
    try:
        wait_until(lambda: sum(len(x) for x in calls) >= 7,
                   what=lambda: f"the two retried messages (batches so far: {calls})")
    finally:
        c.shutdown()
    assert calls[0] == [b"create", b"m0", b"m1", b"m2", b"m3"]
    assert sorted(b for x in calls[1:] for b in x) == [b"m2", b"m3"]
    assert broker.store.query_offset("ga", "TA", 0) == 5


def test_delay_level_minus_one_goes_straight_to_the_dlq(broker):
    def listener(msgs, ctx):
        if bytes(msgs[0].body) == b"bad":
            ctx.delay_level_when_next_consume = -1
            return LATER
        return OK

    with Producer("pg", broker=broker) as p:
        make_topic(p, "TQ", 1)
        c = consumer(broker, "gq", "TQ", listener)
        try:
            r = p.send(Message("TQ", b"bad"))
            wait_until(lambda: queue_bodies(broker, "%DLQ%gq") == [b"bad"], what="the DLQ copy")
        finally:
            c.shutdown()
    (m,) = broker.store.get_message("x", "%DLQ%gq", 0, 0, 8).messages
    assert m.uniq_key == r.msg_id and m.reconsume_times == 1


def test_broadcasting_failures_are_dropped_not_retried(broker, tmp_path):
    seen = []

    def failing(msgs, ctx):
        seen.extend(bytes(m.body) for m in msgs)
        return LATER

    with Producer("pg", broker=broker) as p:
        make_topic(p, "TBF", 1)
        c = consumer(broker, "gbf", "TBF", failing, message_model="BROADCASTING",
                     offset_store_dir=tmp_path / "off")
        try:
            p.send(Message("TBF", b"once"))
            wait_until(lambda: b"once" in seen, what="the delivery")
            time.sleep(1.5)
        finally:
            c.shutdown()
    assert seen.count(b"once") == 1                  # not redelivered
    assert broker.topic_manager.select("%RETRY%gbf") is None or \
        queue_bodies(broker, "%RETRY%gbf") == []
    from rocketstore.client.offset_store import decode_offset_table
    # the offset moved past the failed message, in the local file only
    assert list(decode_offset_table(c.offset_store.path.read_text()).values()) == [2]
    assert broker.store.query_offset("gbf", "TBF", 0) == -1


def test_start_position_rules(broker):
    """§3.7: a new group starts where consume_from_where says only when the broker has no
    offset for it; with the queue's first message still in memory the broker answers 0, so
    even CONSUME_FROM_LAST_OFFSET reads the history (RocketMQ issues #334, #617). A committed
    offset always wins."""
    with Producer("pg", broker=broker) as p:
        make_topic(p, "TS", 1)
        for i in range(5):
            p.send(Message("TS", b"old%d" % i))
        col = Collector()
        c = consumer(broker, "gts", "TS", col, consume_from_where="CONSUME_FROM_LAST_OFFSET")
        try:
            wait_until(lambda: len(col.msgs) == 6, what="the history")
        finally:
            c.shutdown()
        assert broker.store.query_offset("gts", "TS", 0) == 6
        r = p.send(Message("TS", b"new"))
        col2 = Collector()
        c = consumer(broker, "gts", "TS", col2, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        try:
            col2.wait_keys([r.msg_id])
            time.sleep(0.3)
        finally:
            c.shutdown()
    assert [bytes(m.body) for m in col2.msgs] == [b"new"]     # from the committed 6, not 0


def test_tag_expression_with_two_tags_and_untagged(broker):
    col = Collector()
    with Producer("pg", broker=broker) as p:
        make_topic(p, "TG", 2)
        c = consumer(broker, "gtg", "TG", col, expr="A || B")
        try:
            want = [p.send(Message("TG", b"a", tags="A")).msg_id,
                    p.send(Message("TG", b"b", tags="B")).msg_id]
            p.send(Message("TG", b"c", tags="C"))
            p.send(Message("TG", b"none"))
            col.wait_keys(want)
            time.sleep(0.3)
        finally:
            c.shutdown()
    assert sorted(bytes(m.body) for m in col.msgs) == [b"a", b"b"]


def test_shutdown_hands_queues_over_at_once(broker):
    with Producer("pg", broker=broker) as p:
        make_topic(p, "TH", 4)
    a = consumer(broker, "gh", "TH", Collector())
    b = consumer(broker, "gh", "TH", Collector())
    try:
        wait_until(lambda: len(a.assignment("TH")) == 2 and len(b.assignment("TH")) == 2,
                   what="2 + 2")
        t0 = time.monotonic()
        a.shutdown()
        # the broker notifies b: no waiting for the 20 s rebalance timer
        wait_until(lambda: len(b.assignment("TH")) == 4, timeout=10, what="b owning all 4")
        assert time.monotonic() - t0 < 10
    finally:
        a.shutdown()
        b.shutdown()


def test_consumer_configuration_errors(broker):
    c = PushConsumer("gc", broker=broker)
    with pytest.raises(MQClientError, match="register_message_listener"):
        c.start()
    c.register_message_listener(lambda m, x: OK)
    with pytest.raises(MQClientError, match="subscribe"):
        c.start()
    with pytest.raises(MQClientError, match="message_model 'CLUSTER'"):
        PushConsumer("gc", broker=broker, message_model="CLUSTER")
    with pytest.raises(MQClientError, match=r"pull_batch_size 0 is out of range \[1, 1024\]"):
        PushConsumer("gc", broker=broker, pull_batch_size=0)
    with pytest.raises(MQClientError, match="DEFAULT_CONSUMER is reserved"):
        d = PushConsumer("DEFAULT_CONSUMER", broker=broker)
        d.subscribe("T", "*")
        d.register_message_listener(lambda m, x: OK)
        d.start()
    with pytest.raises(MQClientError, match="names no tag"):
        c.subscribe("T", "||")
    pc = PullConsumer("gp", broker=broker)
    pc.subscribe("T", "*")
    with pytest.raises(MQClientError, match="mutually exclusive"):
        pc.assign([])


def test_pull_consumers_in_subscribe_mode_split_queues_and_auto_commit(broker):
    with Producer("pg", broker=broker) as p:
        make_topic(p, "TL", 4)
        keys = {p.send(Message("TL", b"%d" % i)).msg_id for i in range(40)}
    pcs = [PullConsumer("gl", broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                        auto_commit_interval_ms=0) for _ in range(2)]
    for pc in pcs:
        pc.subscribe("TL", "*")
        pc.start()
    try:
        wait_until(lambda: [len(pc.assignment("TL")) for pc in pcs] == [2, 2], what="2 + 2")
        got = set()
        deadline = time.monotonic() + 20
        while not keys <= got and time.monotonic() < deadline:
            for pc in pcs:
                got.update(m.uniq_key for m in pc.poll(100))
        assert keys <= got
        for pc in pcs:
            pc.poll(10)                      # auto-commit runs in poll
        committed = sum(pcs[0].committed(mq) for mq in
                        pcs[0].fetch_message_queues("TL"))
        assert committed == 41               # "create" + 40
    finally:
        for pc in pcs:
            pc.shutdown()


class _Raising:
    def __init__(self):
        self.checks = 0

    def execute_local_transaction(self, msg, arg):
        raise RuntimeError("local transaction crashed")

    def check_local_transaction(self, msg):
        self.checks += 1
        if self.checks == 1:
            raise RuntimeError("check crashed once")
        return LocalTransactionState.ROLLBACK_MESSAGE


def test_transaction_listener_exceptions_count_as_unknown(broker):
    col = Collector()
    with Producer("pg", broker=broker) as p:
        make_topic(p, "TXE", 1)
    c = consumer(broker, "gxe", "TXE", col)
    listener = _Raising()
    try:
        with TransactionProducer("txe", listener, broker=broker) as tp:
            r = tp.send_message_in_transaction(Message("TXE", b"x"), None)
            assert r.local_transaction_state is LocalTransactionState.UNKNOW
            wait_until(lambda: listener.checks >= 2, timeout=20, what="two check-backs")
            time.sleep(0.5)
        assert r.msg_id not in col.seen                # rolled back at the second check
    finally:
        c.shutdown()
    with pytest.raises(MQClientError, match="execute_local_transaction"):
        TransactionProducer("txe", object(), broker=broker)


def test_listener_returning_none_or_raising_is_reconsume_later(broker):
    attempts = []
    done = threading.Event()

    def listener(msgs, ctx):
        if bytes(msgs[0].body) == b"create":
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        attempts.append(msgs[0].reconsume_times)
        if len(attempts) >= 3:
            done.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        if len(attempts) == 1:
            return None
        raise ValueError("listener bug")

    with Producer("pg", broker=broker) as p:
        make_topic(p, "TN", 1)
        c = consumer(broker, "gn", "TN", listener)
        try:
            p.send(Message("TN", b"x"))
            assert done.wait(20)
        finally:
            c.shutdown()
    assert attempts == [0, 1, 2]          # None and an exception both meant RECONSUME_LATER


def test_pull_consumer_small_cache_still_delivers_everything_in_order(broker):
    with Producer("pg", broker=broker) as p:
        mq = make_topic(p, "TC", 1)[0]
        for i in range(99):
            p.send(Message("TC", b"%d" % i), message_queue=mq)
    pc = PullConsumer("gcc", broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                      pull_batch_size=4, pull_threshold_for_queue=5)
    pc.assign([mq])
    with pc:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got.extend(m.queue_offset for m in pc.poll(1000))
    assert got == list(range(100))


def test_slow_listener_calls_run_in_parallel_and_fast_ones_all_complete(broker):
    """One pull's messages are consumed by one runner while the listener is fast; a slow
    (I/O-bound) listener fans the pull out over the consume threads, as RocketMQ's one
    task per consume request does."""
    with Producer("pg", broker=broker) as p:
        mq = make_topic(p, "TS", 1)[0]
        p.send_batch([Message("TS", b"s%d" % i) for i in range(31)], message_queue=mq)
    assert broker.store.wait_dispatched(10)
    lock = threading.Lock()
    running = [0]
    peak = [0]
    seen: list[bytes] = []

    def listener(msgs, ctx):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
            seen.extend(bytes(m.body) for m in msgs)
        return OK

    c = consumer(broker, "gs", "TS", listener, consume_thread_nums=8)
    try:
        wait_until(lambda: len(seen) >= 32, what=lambda: f"32 messages ({len(seen)} so far)")
        wait_until(lambda: c.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == 32,
                   what="the offset after the last message")
    finally:
        c.shutdown()
    assert sorted(seen) == sorted([b"create"] + [b"s%d" % i for i in range(31)])
    assert len(seen) == 32                                  # each once
    assert peak[0] >= 4, f"slow calls ran {peak[0]} at a time with 8 consume threads"


def test_a_hung_listener_call_does_not_hold_back_the_rest_of_its_pull(broker):
    """The first call of a pull blocks (a hung I/O call) after fast calls: the pull's other
    messages are still consumed on other threads meanwhile, as with RocketMQ's task per
    listener call."""
    with Producer("pg", broker=broker) as p:
        mq = make_topic(p, "TH", 1)[0]
        p.send_batch([Message("TH", b"h%d" % i) for i in range(31)], message_queue=mq)
    assert broker.store.wait_dispatched(10)
    release = threading.Event()
    seen: list[bytes] = []

    def listener(msgs, ctx):
        body = bytes(msgs[0].body)
        if body == b"h5":
            release.wait(30)
        seen.append(body)
        return OK

    c = consumer(broker, "gh", "TH", listener, consume_thread_nums=4)
    try:
        wait_until(lambda: len(seen) >= 31,
                   what=lambda: f"31 messages while h5 hangs ({len(seen)} so far)")
        assert b"h5" not in seen
        release.set()
        wait_until(lambda: len(seen) >= 32, what="h5 after its release")
        wait_until(lambda: c.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == 32,
                   what="the offset after the last message")
    finally:
        release.set()
        c.shutdown()
    assert sorted(seen) == sorted([b"create"] + [b"h%d" % i for i in range(31)])


def test_one_message_listener_sends_back_only_the_failed_message_of_a_pull(broker):
    """One pull of 20, a one-message listener: the calls run in one pass, and the one call
    that answers RECONSUME_LATER sends only its message to the retry topic (once); the
    rest are consumed once each and the committed offset passes all 21."""
    with Producer("pg", broker=broker) as p:
        mq = make_topic(p, "T1", 1)[0]
        p.send_batch([Message("T1", b"o%d" % i) for i in range(20)], message_queue=mq)
    assert broker.store.wait_dispatched(10)
    seen: list[tuple[bytes, int]] = []
    contexts = []

    def listener(msgs, ctx):
        assert len(msgs) == 1
        contexts.append(ctx)
        body = bytes(msgs[0].body)
        seen.append((body, msgs[0].reconsume_times))
        if body == b"o7" and msgs[0].reconsume_times == 0:
            ctx.delay_level_when_next_consume = 1          # 1 s: the retry comes back soon
            return LATER
        return OK

    c = consumer(broker, "g1", "T1", listener)
    try:
        wait_until(lambda: (b"o7", 1) in seen, what=lambda: f"o7's retry (seen {seen})")
        wait_until(lambda: c.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == 21,
                   what="the offset after the last message")
    finally:
        c.shutdown()
    first = [b for b, rt in seen if rt == 0]
    assert sorted(first) == sorted([b"create"] + [b"o%d" % i for i in range(20)])
    assert [b for b, rt in seen if rt > 0] == [b"o7"]
    assert queue_bodies(broker, "%RETRY%g1") == [b"o7"]
    # each call had its own context, at the defaults when the listener was called
    assert len({id(x) for x in contexts}) == len(contexts)
    assert all(x.message_queue.topic in ("T1", "%RETRY%g1") for x in contexts)
