"""Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.4) against ``rocketstore namesrv`` and
``rocketstore broker`` running as processes.

Each client runs in a subprocess of its own (a native crash cannot take the test run down)
and prints what it saw as JSON. The store is then opened read-only to check what the broker
wrote.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rocketmq.client  # noqa: F401  (the test extra installs rocketmq==0.4.4)

from rocketstore import MessageStore, StoreConfig
from rocketstore.remoting import fastjson
from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

SHORT_DELAYS = " ".join(["1s"] * 18)
BROKER_CONF = {"messageDelayLevel": SHORT_DELAYS, "flushDiskType": "SYNC_FLUSH",
               "mappedFileSizeCommitLog": str(16 << 20)}

PRODUCE = textwrap.dedent("""
    import json, sys
    from rocketmq.client import Producer, Message
    namesrv, topic, n, orderly_n, batch_n = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    p = Producer("PG-cpp")
    p.set_namesrv_addr(namesrv)
    p.start()
    out = []
    def msg(i, kind):
        m = Message(topic)
        m.set_keys("k-%s-%d" % (kind, i))
        m.set_tags("Tag" + kind)
        m.set_property("seq", str(i))
        m.set_body(("%s-%d" % (kind, i)).encode())
        return m
    for i in range(n):
        r = p.send_sync(msg(i, "S"))
        out.append({"kind": "S", "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    for i in range(orderly_n):
        r = p.send_orderly(msg(i, "O"), i % 3)
        out.append({"kind": "O", "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    if batch_n:
        r = p.send_batch([msg(i, "B") for i in range(batch_n)])
        out.append({"kind": "B", "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    p.shutdown()
    print(json.dumps(out), flush=True)
""")

PUSH_CONSUME = textwrap.dedent("""
    import json, sys, threading, time
    from rocketmq.client import PushConsumer
    namesrv, group, topic, want, fail_first, timeout = (sys.argv[1], sys.argv[2], sys.argv[3],
        int(sys.argv[4]), sys.argv[5] == "1", float(sys.argv[6]))
    got, lock, done = [], threading.Lock(), threading.Event()
    failed = set()
    def on_message(m):
        rec = {"topic": m.topic, "tags": m.tags.decode(), "keys": m.keys.decode(),
               "body": m.body.decode(), "seq": m.get_property("seq").decode(),
               "id": m.id, "reconsume_times": m.reconsume_times,
               "queue_id": m.queue_id, "queue_offset": m.queue_offset}
        with lock:
            if fail_first and rec["keys"] not in failed:
                failed.add(rec["keys"])
                rec["failed"] = True
                got.append(rec)
                raise RuntimeError("fail once")
            got.append(rec)
            if len({r["keys"] for r in got if not r.get("failed")}) >= want:
                done.set()
    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    # rocketmq 0.4.4's subscribe() re-raises the listener's exception inside the ctypes
    # callback, which makes the returned status undefined: answer RECONSUME_LATER ourselves
    from rocketmq.client import RecvMessage, _to_bytes, dll, ffi_check
    from rocketmq.ffi import _CConsumeStatus
    def raw(consumer, msg):
        try:
            on_message(RecvMessage(msg))
        except RuntimeError:
            return _CConsumeStatus.RECONSUME_LATER.value
        return _CConsumeStatus.CONSUME_SUCCESS.value
    ffi_check(dll.Subscribe(c._handle, _to_bytes(topic), _to_bytes("*")))
    c._register_callback(raw)
    c.start()
    done.wait(timeout)
    time.sleep(0.5)
    c.shutdown()
    print(json.dumps(got), flush=True)
""")

PULL_CONSUME = textwrap.dedent("""
    import json, sys
    from rocketmq.client import PullConsumer
    namesrv, group, topic = sys.argv[1:4]
    c = PullConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.start()
    got = [{"body": m.body.decode(), "tags": m.tags.decode(), "queue_id": m.queue_id,
            "queue_offset": m.queue_offset} for m in c.pull(topic)]
    c.shutdown()
    print(json.dumps(got), flush=True)
""")


def run_client(tmp: Path, script: str, *args: object, timeout: float = 120) -> list[dict]:
    path = tmp / f"client_{abs(hash(script))}.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp, env=dict(os.environ, HOME=str(tmp)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def cluster(tmp_path):
    ns = start_namesrv(tmp_path)
    store = tmp_path / "store"
    broker = start_broker(store, ns.addr, BROKER_CONF)
    yield ns, broker, store
    assert broker.stop() == 0, broker.output[-3000:]
    assert ns.stop() == 0


def test_cpp_sends_are_stored_as_a_rocketmq_broker_stores_them(cluster, tmp_path):
    ns, broker, store = cluster
    res = run_client(tmp_path, PRODUCE, ns.addr, "CppT", 6, 6, 4)
    assert [r["status"] for r in res] == [0] * 13          # SEND_OK for each send
    # the client's UNIQ_KEY (the C++ client gives its batch wrapper none)
    assert all(len(r["msg_id"]) == 32 for r in res if r["kind"] != "B")
    assert broker.stop() == 0
    with MessageStore.open(str(store), StoreConfig(mapped_file_size_commit_log=16 << 20),
                           read_only=True) as s:
        msgs = [m for q in range(4) for m in
                s.get_message("check", "CppT", q, 0, max_msgs=64).messages]
        stored = {m.keys[0]: m for m in msgs if m.keys}
        # the C++ client's batch flag is "1", which RocketMQ reads as false: one record
        assert len(msgs) == 13
        for i in range(6):
            m = stored[f"k-S-{i}"]
            assert bytes(m.body) == f"S-{i}".encode() and m.tags == "TagS"
            props = m.properties
            assert props["seq"] == str(i) and props["CLUSTER"] == "DefaultCluster"
            assert "WAIT" not in props                       # not persisted (4.9.2+)
            assert m.born_host.startswith("127.0.0.1:") and m.store_host == broker.addr
        # orderly: the same arg lands in the same queue, in send order
        by_arg: dict[int, list] = {}
        for i in range(6):
            m = stored[f"k-O-{i}"]
            by_arg.setdefault(i % 3, []).append((m.queue_id, m.queue_offset))
        for seq in by_arg.values():
            assert len({q for q, _ in seq}) == 1 and [o for _, o in seq] == sorted(o for _, o in seq)


def test_cpp_push_consumer_gets_everything_exactly_as_sent(cluster, tmp_path):
    ns, broker, store = cluster
    run_client(tmp_path, PRODUCE, ns.addr, "CppP", 20, 0, 0)
    got = run_client(tmp_path, PUSH_CONSUME, ns.addr, "CG-cpp", "CppP", 20, "0", 60)
    assert sorted(r["body"] for r in got) == sorted(f"S-{i}" for i in range(20))
    for r in got:
        i = int(r["seq"])
        assert (r["topic"], r["tags"], r["keys"]) == ("CppP", "TagS", f"k-S-{i}")
        assert r["reconsume_times"] == 0 and len(r["id"]) == 32
    # offsets were committed: a restart of the same group gets nothing new
    again = run_client(tmp_path, PUSH_CONSUME, ns.addr, "CG-cpp", "CppP", 1, "0", 8)
    assert again == []


def test_cpp_listener_failure_is_retried_with_reconsume_times(cluster, tmp_path):
    ns, broker, store = cluster
    run_client(tmp_path, PRODUCE, ns.addr, "CppR", 5, 0, 0)
    got = run_client(tmp_path, PUSH_CONSUME, ns.addr, "CG-retry", "CppR", 5, "1", 90)
    failed = [r for r in got if r.get("failed")]
    ok = [r for r in got if not r.get("failed")]
    # every message failed once, then came back from %RETRY%CG-retry and was consumed; a
    # failure fails the C++ client's whole consume batch, so a message may come back more
    # than once before its own first failure
    assert sorted({r["keys"] for r in ok}) == [f"k-S-{i}" for i in range(5)]
    assert all(r["reconsume_times"] >= 1 and r["topic"] == "CppR" for r in ok)
    assert all(r["body"] == f"S-{r['seq']}" and r["tags"] == "TagS" for r in ok)
    assert {r["keys"] for r in failed} <= {r["keys"] for r in ok} and len(failed) >= 4
    first_tries = [r for r in failed if r["reconsume_times"] == 0]
    assert first_tries and all(r["topic"] == "CppR" for r in failed)


def test_cpp_pull_consumer_reads_every_queue(cluster, tmp_path):
    ns, broker, store = cluster
    run_client(tmp_path, PRODUCE, ns.addr, "CppQ", 12, 0, 0)
    got = run_client(tmp_path, PULL_CONSUME, ns.addr, "CG-pull", "CppQ")
    assert sorted(r["body"] for r in got) == sorted(f"S-{i}" for i in range(12))
    per_queue: dict[int, list[int]] = {}
    for r in got:
        per_queue.setdefault(r["queue_id"], []).append(r["queue_offset"])
    assert all(offs == list(range(len(offs))) for offs in per_queue.values())


def test_cpp_and_our_client_consume_each_others_messages(cluster, tmp_path):
    from rocketstore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
    ns, broker, store = cluster
    # the C++ client produces, our push consumer (over TCP) consumes
    run_client(tmp_path, PRODUCE, ns.addr, "CrossA", 8, 0, 0)
    got: list = []
    done = __import__("threading").Event()

    def listener(msgs, ctx):
        got.extend((m.topic, m.tags, m.keys, bytes(m.body), m.properties.get("seq")) for m in msgs)
        if len(got) >= 8:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer("cg-ours", namesrv_addr=ns.addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe("CrossA", "TagS")
    c.register_message_listener(listener)
    c.start()
    try:
        assert done.wait(60)
    finally:
        c.shutdown()
    assert sorted(got) == sorted(("CrossA", "TagS", [f"k-S-{i}"], f"S-{i}".encode(), str(i))
                                 for i in range(8))
    # our producer (over TCP) produces, the C++ push consumer consumes
    with Producer("pg-ours", namesrv_addr=ns.addr) as p:
        for i in range(6):
            m = Message("CrossB", f"S-{i}".encode(), tags="TagS", keys=[f"k-S-{i}"],
                        properties={"seq": str(i)})
            assert p.send(m).status.value == "SEND_OK"
    back = run_client(tmp_path, PUSH_CONSUME, ns.addr, "CG-cpp-x", "CrossB", 6, "0", 60)
    assert sorted((r["tags"], r["keys"], r["body"], r["seq"]) for r in back) == \
        sorted(("TagS", f"k-S-{i}", f"S-{i}", str(i)) for i in range(6))
    assert broker.stop() == 0          # SIGTERM: offsets persisted on the way out
    offsets = fastjson.loads((store / "config" / "consumerOffset.json").read_text())
    assert {"CrossA@cg-ours", "CrossB@CG-cpp-x"} <= set(offsets["offsetTable"])
