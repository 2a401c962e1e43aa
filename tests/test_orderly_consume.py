"""The orderly push consumer (MESSAGING.md §6), whose calls run in C (``run_orderly``): each
queue's messages in queue order, one call at a time per queue, committed as they succeed; a
suspend, a failure or a context without auto-commit comes back to the service's rules."""
from __future__ import annotations

import threading
import time

import pytest

from rocketstore.broker.broker import Broker
from rocketstore.client import (ConsumeOrderlyContext, ConsumeOrderlyStatus, Message,
                                MessageQueue, Producer, PushConsumer)

TOPIC = "OrderlyC"
GROUP = "cg_orderly_c"


@pytest.fixture
def broker(inproc_broker):
    return inproc_broker


def fill(broker: Broker, per_queue: int, queues: int = 2) -> None:
    with Producer("pg_orderly_c", broker=broker, default_topic_queue_nums=queues) as p:
        for i in range(per_queue):
            for q in range(queues):
                p.send(Message(TOPIC, b"%d-%d" % (q, i)), message_queue=MessageQueue(
                    TOPIC, broker.config.broker_name, q))
    broker.store.wait_dispatched()


def consume(broker: Broker, listener, total: int, **kw) -> PushConsumer:
    c = PushConsumer(GROUP, broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **kw)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener, orderly=True)
    c.start()
    return c


def wait(cond, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.01)


def test_a_one_message_listener_gets_each_queue_in_order_once_and_commits(broker):
    """2 queues x 600 messages, one per call: every queue's bodies in send order, none
    twice, no two calls of a queue at once, the contexts as the API says, and the
    committed offsets at the queue ends after shutdown."""
    fill(broker, 600)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    busy: set[int] = set()
    overlap: list[int] = []
    contexts: list[ConsumeOrderlyContext] = []

    def listener(msgs, ctx):
        q = ctx.message_queue.queue_id
        if q in busy:
            overlap.append(q)
        busy.add(q)
        assert len(msgs) == 1
        got[q].append(bytes(msgs[0].body))
        if len(contexts) < 3:
            contexts.append(ctx)
        busy.discard(q)
        return ConsumeOrderlyStatus.SUCCESS
    c = consume(broker, listener, 1200)
    try:
        wait(lambda: sum(map(len, got.values())) >= 1200, "1,200 messages consumed")
    finally:
        c.shutdown()
    for q in (0, 1):
        assert got[q] == [b"%d-%d" % (q, i) for i in range(600)]
        assert broker.store.query_offset(GROUP, TOPIC, q) == 600
    assert overlap == []
    ctx = contexts[0]
    assert type(ctx) is ConsumeOrderlyContext
    assert ctx.auto_commit is True and ctx.suspend_current_queue_time_millis == -1
    assert ctx == ConsumeOrderlyContext(ctx.message_queue)
    assert "auto_commit=True" in repr(ctx)


def test_a_suspend_or_a_failure_offers_the_same_messages_again_in_order(broker):
    """A call answering SUSPEND (with its own suspend time) and a call that raises: the same
    message comes back next, nothing after it is consumed before it, and reconsume counts
    grow in memory as §6.4 says."""
    fill(broker, 40, queues=1)
    seen: list[tuple[bytes, int]] = []
    tries: dict[bytes, int] = {}

    def listener(msgs, ctx):
        body = bytes(msgs[0].body)
        tries[body] = tries.get(body, 0) + 1
        seen.append((body, tries[body]))
        if body == b"0-5" and tries[body] < 3:
            ctx.suspend_current_queue_time_millis = 10
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if body == b"0-9" and tries[body] < 2:
            raise RuntimeError("listener failed")
        return ConsumeOrderlyStatus.SUCCESS
    c = consume(broker, listener, 40)
    try:
        wait(lambda: len({b for b, _ in seen}) >= 40, "40 messages consumed")
    finally:
        c.shutdown()            # persists the committed offsets
    assert broker.store.query_offset(GROUP, TOPIC, 0) == 40
    bodies = [b for b, _ in seen]
    assert bodies[:8] == [b"0-%d" % i for i in range(5)] + [b"0-5"] * 3
    i9 = bodies.index(b"0-9")
    assert bodies[i9:i9 + 3] == [b"0-9", b"0-9", b"0-10"]
    firsts = [b for b, n in seen if n == 1]
    assert firsts == [b"0-%d" % i for i in range(40)]
    assert tries[b"0-5"] == 3 and tries[b"0-9"] == 2


def test_without_auto_commit_a_success_commits_nothing(broker):
    """A listener that turns auto-commit off: its SUCCESS calls go back to the service's
    rules, which commit nothing (the messages stay taken), so the offset stays at 0."""
    fill(broker, 10, queues=1)
    n = [0]
    done = threading.Event()

    def listener(msgs, ctx):
        ctx.auto_commit = False
        n[0] += len(msgs)
        if n[0] >= 10:
            done.set()
        return ConsumeOrderlyStatus.SUCCESS
    c = consume(broker, listener, 10)
    try:
        assert done.wait(20)
        time.sleep(0.2)
    finally:
        c.shutdown()
    assert n[0] == 10
    assert broker.store.query_offset(GROUP, TOPIC, 0) in (-1, 0)
