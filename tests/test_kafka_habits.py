"""Kafka's habits on the synchronous clients (issue 23 item 5): flush, close and context
managers, position / seek_to_* / commit(offsets) / commit_async / iteration, rebalance
callbacks, selector functions, Message's signature and a read body's repr. Real brokers,
in-process and over TCP."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from messaging_support import OK, client_kw, make_topic, open_broker, until
from rocketstore.client import (Message, MessageQueue, Producer, PullConsumer, PushConsumer,
                                SendStatus, TransactionProducer)
from rocketstore.errors import MQClientError


@pytest.fixture(params=["inprocess", "tcp"])
def transport(request):
    return request.param


@pytest.fixture
def broker(tmp_path, transport):
    b = open_broker(tmp_path / "store", transport)
    yield b
    b.close()


def test_flush_waits_until_every_async_send_is_answered(broker, transport):
    with Producer("fpg", **client_kw(broker, transport)) as p:
        make_topic(p, "FL", 2)
        futs = [p.send_async(Message("FL", b"%d" % i)) for i in range(300)]
        assert p.flush(timeout=60) == 0
        assert all(f.done() for f in futs)
        assert all(f.result().status is SendStatus.SEND_OK for f in futs)
        assert p.flush(timeout=0) == 0          # nothing left behind
        offsets = sorted((f.result().message_queue.queue_id, f.result().queue_offset)
                         for f in futs)
        assert len(set(offsets)) == 300


def test_close_and_context_managers_everywhere(broker, transport):
    kw = client_kw(broker, transport)
    p = Producer("cpg", **kw).start()
    mq = make_topic(p, "CL", 1)[0]
    p.close()
    with pytest.raises(MQClientError, match="not started"):
        p.send(Message("CL", b"x"))

    class Listener:
        def execute_local_transaction(self, msg, arg):
            return None

        def check_local_transaction(self, msg):
            return None
    with TransactionProducer("ctpg", Listener(), **kw) as tp:
        assert tp.transport is not None
    with pytest.raises(MQClientError, match="not started"):
        tp.transport

    push = PushConsumer("cpush", **kw)
    push.subscribe("CL", "*")
    push.register_message_listener(lambda msgs, ctx: OK)
    with push:
        assert push._running
    assert not push._running
    pull = PullConsumer("cpull", **kw)
    pull.assign([mq])
    with pull as c:
        assert c is pull and c.assignment() == {mq}
    with pytest.raises(MQClientError, match="not running"):
        pull.poll(10)
    pull2 = PullConsumer("cpull2", **kw)
    pull2.assign([mq])
    pull2.start()
    pull2.close()
    with pytest.raises(MQClientError, match="not running"):
        pull2.poll(10)


def test_a_selector_may_be_a_plain_function(broker, transport):
    with Producer("spg", **client_kw(broker, transport)) as p:
        make_topic(p, "SE", 4)
        for key in (0, 3, 2, 3):
            r = p.send(Message("SE", b"k"), selector=lambda mqs, msg, arg: mqs[arg], arg=key)
            assert r.message_queue.queue_id == key
        r = p.send_async(Message("SE", b"a"), selector=lambda mqs, msg, arg: mqs[-1]).result(10)
        assert r.message_queue.queue_id == 3
        with pytest.raises(MQClientError, match="neither a function"):
            p.send(Message("SE", b"x"), selector="queue-1")
        with pytest.raises(MQClientError, match="not one of the MessageQueues"):
            p.send(Message("SE", b"x"), selector=lambda mqs, msg, arg: 2)


def drain(consumer):
    return [m for m in consumer]


def test_position_seek_to_beginning_end_and_iteration(broker, transport):
    kw = client_kw(broker, transport)
    with Producer("ppg", **kw) as p:
        mq = make_topic(p, "PO", 1)[0]
        for i in range(10):
            p.send(Message("PO", b"%d" % i), message_queue=mq)
        with PullConsumer("pcg", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                          auto_commit=False, consumer_timeout_ms=800, **kw) as c:
            c.assign([mq])
            assert c.position(mq) == 0
            got = drain(c)
            assert [m.queue_offset for m in got] == list(range(11))
            assert [bytes(m.body) for m in got[1:]] == [b"%d" % i for i in range(10)]
            assert c.position(mq) == 11
            c.seek_to_beginning()
            assert c.position(mq) == 0
            assert [m.queue_offset for m in drain(c)] == list(range(11))
            c.seek(mq, 4)
            assert c.position(mq) == 4
            assert [m.queue_offset for m in drain(c)] == list(range(4, 11))
            c.seek_to_end([mq])
            assert c.position(mq) == 11
            assert drain(c) == []
            p.send(Message("PO", b"new"), message_queue=mq)
            assert [bytes(m.body) for m in drain(c)] == [b"new"]
            assert c.position(mq) == 12
            with pytest.raises(MQClientError, match="not assigned"):
                c.position(MessageQueue("PO", mq.broker_name, 7))


def test_commit_explicit_offsets_and_commit_async(broker, transport):
    kw = client_kw(broker, transport)
    with Producer("opg", **kw) as p:
        mq = make_topic(p, "OF", 1)[0]
        for i in range(5):
            p.send(Message("OF", b"%d" % i), message_queue=mq)
    with PullConsumer("ocg", consume_from_where="CONSUME_FROM_FIRST_OFFSET", auto_commit=False,
                      consumer_timeout_ms=800, **kw) as c:
        c.assign([mq])
        assert len(drain(c)) == 6
        assert c.commit(offsets={mq: 3}) == {mq: 3}
        until(lambda: c.committed(mq) == 3, "the explicit commit reaches the broker")
        assert c.position(mq) == 6                  # a commit does not move the position
        called = threading.Event()
        seen = {}

        def done(offsets, error):
            seen.update(offsets=offsets, error=error)
            called.set()
        fut = c.commit_async(callback=done)
        assert fut.result(10) == {mq: 6}
        assert called.wait(10) and seen == {"offsets": {mq: 6}, "error": None}
        until(lambda: c.committed(mq) == 6, "the async commit reaches the broker")
        assert c.commit_async(offsets={mq: 2}).result(10) == {mq: 2}
        until(lambda: c.committed(mq) == 2, "an explicit async commit reaches the broker")
        with pytest.raises(MQClientError, match="offset -1 of"):
            c.commit(offsets={mq: -1})
        with pytest.raises(MQClientError, match="not a MessageQueue"):
            c.commit(offsets={"OF": 1})
        with pytest.raises(MQClientError, match="dict of MessageQueue"):
            c.commit(offsets=[(mq, 1)])


class Recorder:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def on_assign(self, queues):
        with self.lock:
            self.events.append(("assign", frozenset(q.queue_id for q in queues)))

    def on_revoke(self, queues):
        with self.lock:
            self.events.append(("revoke", frozenset(q.queue_id for q in queues)))

    def owned(self):
        have = set()
        with self.lock:
            for kind, qs in self.events:
                have = have | qs if kind == "assign" else have - qs
        return have


def test_on_assign_and_on_revoke_follow_the_rebalance(broker, transport):
    kw = client_kw(broker, transport)
    with Producer("rpg", **kw) as p:
        make_topic(p, "RB", 4)
    r1, r2 = Recorder(), Recorder()
    c1 = PullConsumer("rcg", on_assign=r1.on_assign, on_revoke=r1.on_revoke, **kw)
    c1.subscribe("RB", "*")
    c1.start()
    try:
        until(lambda: r1.owned() == {0, 1, 2, 3}, "the only member gets every queue")
        assert r1.events[0] == ("assign", frozenset({0, 1, 2, 3}))
        c2 = PushConsumer("rcg", on_assign=r2.on_assign, on_revoke=r2.on_revoke, **kw)
        c2.subscribe("RB", "*")
        c2.register_message_listener(lambda msgs, ctx: OK)
        c2.start()
        try:
            until(lambda: len(r1.owned()) == 2 and r2.owned() == {0, 1, 2, 3} - r1.owned(),
                  "a second member takes half: one revokes what the other is assigned")
            assert ("revoke", frozenset({0, 1, 2, 3}) - r1.owned()) in r1.events
            assert {mq.queue_id for mq in c1.assignment()} == r1.owned()
        finally:
            c2.shutdown()
        assert r2.owned() == set() and r2.events[-1][0] == "revoke"    # leaving revokes all
        until(lambda: r1.owned() == {0, 1, 2, 3}, "the queues come back to the first")
    finally:
        c1.shutdown()
    assert r1.owned() == set()
    with pytest.raises(MQClientError, match="on_assign=.*not callable"):
        PullConsumer("rcg2", on_assign=42, **kw)


def test_message_signature_and_a_read_bodys_repr(broker, transport):
    sig = inspect.signature(Message)
    assert list(sig.parameters)[:6] == ["topic", "body", "tags", "keys", "properties", "flag"]
    assert sig.parameters["delay_level"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["tags"].default is None
    bound = sig.bind("SG", b"payload", tags="T", delay_level=0)
    m = Message(*bound.args, **bound.kwargs)
    assert "body=b'payload'" in repr(m)
    kw = client_kw(broker, transport)
    with Producer("gpg", **kw) as p:
        mq = make_topic(p, "SG", 1)[0]
        p.send(m, message_queue=mq)
        p.send(Message("SG", bytes(range(200))), message_queue=mq)
    with PullConsumer("gcg", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                      consumer_timeout_ms=800, **kw) as c:
        c.assign([mq])
        got = drain(c)
    assert isinstance(got[1].body, memoryview)          # still zero copy
    assert "body=b'payload'" in repr(got[1]) and "memory at" not in repr(got[1])
    assert repr(bytes(range(64)))[:-1] in repr(got[2]) and "(200 bytes)" in repr(got[2])


def test_the_docs_kafka_habits_example_runs_as_written(tmp_path):
    text = (Path(__file__).resolve().parent.parent / "docs" / "messaging.md").read_text()
    section = text[text.index("## asyncio and Kafka's habits"):]
    block = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "flush" in b)
    script = tmp_path / "example.py"
    script.write_text(block)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:6] == ["tags=None", "0", "[(1, 0, b'ann'), (1, 1, b'ann'), (2, 0, b'bob')]",
                       "[0, 1, 2, 3]", "2", "1 2"]
    assert out[6].startswith("MessageExt(topic='Clicks', queue_id=1, queue_offset=0, ")
    assert out[6].endswith(", body=b'ann')")
    assert out[7:] == ["[b'ann', b'ann']"]


def test_the_clients_are_importable_from_the_top_without_loading_them_early():
    code = ("import sys, rocketstore\n"
            "assert 'rocketstore.client' not in sys.modules\n"
            "from rocketstore import Producer, PullConsumer, PushConsumer, TransactionProducer\n"
            "import rocketstore.client as c\n"
            "assert (Producer, PullConsumer) == (c.Producer, c.PullConsumer)\n"
            "assert rocketstore.aio.AsyncProducer.__name__ == 'AsyncProducer'\n"
            "assert 'PullConsumer' in rocketstore.__all__\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_assigned_queues_call_no_rebalance_callback(broker, transport):
    kw = client_kw(broker, transport)
    with Producer("apg", **kw) as p:
        mq = make_topic(p, "AQ", 2)[0]
    r = Recorder()
    with PullConsumer("acg", on_assign=r.on_assign, on_revoke=r.on_revoke,
                      consumer_timeout_ms=300, **kw) as c:
        c.assign([mq])
        drain(c)
    assert r.events == []
