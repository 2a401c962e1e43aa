"""``rocketstore proxy`` with the official RocketMQ 5.x Python client (``rocketmq-python-client``,
run in its own venv: tests/grpc_client.py) against a real NameServer, broker and proxy process:
sends of every type, simple and push consumption, redelivery, DLQ, FIFO, transactions, delays,
a proxy crash, 4.x clients on the same topics."""
from __future__ import annotations

import os
import time

import pytest

from grpc_support import client_venv, cluster  # noqa: F401  (fixtures)
from grpc_support import _pull_all, run, start_proxy


def test_send_receive_ack(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_normal",))
        p.startup()
        ids = [p.send(msg("t_normal", f"hello {i}", tag="TagA", keys=("k%d" % i,),
                          props={"color": "red"})).message_id for i in range(3)]
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_simple", {"t_normal": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 3)
        for m in got:
            c.ack(m)
        c.shutdown()
        out(ids=ids, got=[view(m) for m in got])
    ''')
    got = sorted(r["got"], key=lambda m: m["body"])
    assert [m["body"] for m in got] == ["hello 0", "hello 1", "hello 2"]
    assert sorted(m["id"] for m in got) == sorted(r["ids"])
    for i, m in enumerate(got):
        assert m["tag"] == "TagA" and m["keys"] == [f"k{i}"] and m["props"] == {"color": "red"}
        assert m["attempt"] == 1 and m["topic"] == "t_normal"
    # (that an acked message never comes back: test_pop_state_survives_a_proxy_crash)


def test_change_invisible_duration_redelivers_with_next_attempt(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_inval",))
        p.startup()
        sent = p.send(msg("t_inval", "nack me")).message_id
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_inval", {"t_inval": FilterExpression("*")}, 5)
        c.startup()
        first = receive_until(c, 1, invisible=30)[0]
        old_handle = first.receipt_handle
        c.change_invisible_duration(first, 1)
        t0 = time.time()
        second = receive_until(c, 1, invisible=30)[0]
        waited = time.time() - t0
        first.receipt_handle = old_handle
        try:
            c.ack(first)
            stale = "acked"
        except Exception as e:
            stale = type(e).__name__ + ": " + str(e)
        c.ack(second)
        c.shutdown()
        # a long poll shorter than RocketMQ's 5 s minimum cannot fit the client's deadline
        short = SimpleConsumer(CONFIG, "g_inval", {"t_inval": FilterExpression("*")}, 2)
        short.startup()
        try:
            short.receive(1, 15)
            polling = "received"
        except Exception as e:
            polling = type(e).__name__ + ": " + str(e)
        short.shutdown()
        out(sent=sent, first=view(first), second=view(second), waited=waited, stale=stale,
            polling=polling)
    ''')
    assert r["first"]["id"] == r["second"]["id"] == r["sent"]
    assert (r["first"]["attempt"], r["second"]["attempt"]) == (1, 2)
    assert r["waited"] >= 0.9                     # invisible for the 1 s asked, not less
    assert "BadRequest" in r["stale"] and "40013" in r["stale"], r["stale"]
    assert "40018" in r["polling"], r["polling"]          # ILLEGAL_POLLING_TIME


def test_max_attempts_then_dead_letter_queue(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_dlq",))
        p.startup()
        sent = p.send(msg("t_dlq", "poison", tag="P")).message_id
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_dlq", {"t_dlq": FilterExpression("*")}, 5)
        c.startup()
        attempts = []
        for _ in range(2):
            m = receive_until(c, 1, invisible=30)[0]
            attempts.append(m.delivery_attempt)
            c.change_invisible_duration(m, 1)
        time.sleep(1.2)
        rest = c.receive(32, 10)
        c.shutdown()
        out(sent=sent, attempts=attempts, rest=len(rest))
    ''')
    assert r["attempts"] == [1, 2] and r["rest"] == 0      # g_dlq: at most 2 deliveries
    dead = _pull_all(cluster["ns"].addr, "%DLQ%g_dlq")
    assert [(m.uniq_key, bytes(m.body), m.tags) for m in dead] == [(r["sent"], b"poison", "P")]


def test_fifo_group_in_order_and_redelivered_in_place(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_fifo", "t_normal"))
        p.startup()
        for i in range(5):
            for g in ("ga", "gb"):
                p.send(msg("t_fifo", f"{g}-{i}", group=g))
        try:        # a NORMAL topic's queues do not accept FIFO: the client refuses locally
            p.send(msg("t_normal", "misplaced", group="ga"))
            misplaced = "sent"
        except Exception as e:
            misplaced = type(e).__name__ + ": " + str(e)
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_fifo", {"t_fifo": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 10, invisible=30)
        first_ga = next(m for m in got if m.message_group == "ga")
        for m in got:
            if m is not first_ga:
                c.ack(m)
        c.change_invisible_duration(first_ga, 1)
        again = receive_until(c, 1, invisible=30)
        for m in again:
            c.ack(m)
        c.shutdown()
        out(got=[view(m) for m in got], again=[view(m) for m in again], misplaced=misplaced)
    ''')
    assert "IllegalArgument" in r["misplaced"], r["misplaced"]
    for g in ("ga", "gb"):
        seq = [m["body"] for m in r["got"] if m["group"] == g]
        assert seq == [f"{g}-{i}" for i in range(5)], seq       # per-group order
    assert all(m["type"] == "FIFO" or m["type"] == 2 for m in r["got"]), r["got"][0]["type"]
    assert [(m["body"], m["attempt"]) for m in r["again"]] == [("ga-0", 2)]


def test_async_send(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_async",))
        p.startup()
        futs = [p.send_async(msg("t_async", f"a{i}")) for i in range(20)]
        ids = [f.result(timeout=10).message_id for f in futs]
        try:                         # t_async is NORMAL: the client itself refuses a FIFO send
            p.send(msg("t_async", "fifo", group="g1"))
            fifo = "sent"
        except Exception as e:
            fifo = type(e).__name__
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_async", {"t_async": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 20)
        for m in got:
            c.ack(m)
        c.shutdown()
        out(ids=ids, got=sorted(m.message_id for m in got), fifo=fifo)
    ''')
    assert len(set(r["ids"])) == 20 and r["got"] == sorted(r["ids"])
    assert r["fifo"] == "IllegalArgumentException"


def test_5x_and_4x_clients_read_each_other(client_venv, cluster):
    from rocketstore.client import Message, Producer, PullConsumer
    ns = cluster["ns"].addr
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_cross",))
        p.startup()
        sent = p.send(msg("t_cross", "from5x", tag="T5", keys=("k5a", "k5b"),
                          props={"p5": "v5"})).message_id
        p.shutdown()
        out(sent=sent)
    ''')
    consumer = PullConsumer("g_cross4", namesrv_addr=ns,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe("t_cross")
    consumer.start()
    try:
        got: list = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += consumer.poll(1000)
    finally:
        consumer.shutdown()
    assert len(got) == 1
    m = got[0]
    assert (bytes(m.body), m.tags, sorted(m.keys), m.uniq_key) == (
        b"from5x", "T5", ["k5a", "k5b"], r["sent"])
    assert m.properties["p5"] == "v5"

    producer = Producer("pg_cross4", namesrv_addr=ns).start()
    try:
        res = producer.send(Message("t_cross", b"from4x", tags="T4", keys=["k4"],
                                    properties={"p4": "v4"}))
    finally:
        producer.shutdown()
    r = run(client_venv, cluster, '''
        c = SimpleConsumer(CONFIG, "g_cross5", {"t_cross": FilterExpression("T4")}, 5)
        c.startup()
        got = receive_until(c, 1)
        for m in got:
            c.ack(m)
        c.shutdown()
        out(got=[view(m) for m in got])
    ''')
    assert [(g["body"], g["tag"], g["keys"], g["props"], g["id"]) for g in r["got"]] == [
        ("from4x", "T4", ["k4"], {"p4": "v4"}, res.msg_id)]


def test_transactions_commit_and_rollback(client_venv, cluster):
    r = run(client_venv, cluster, '''
        class Checker(TransactionChecker):
            def check(self, message):
                return TransactionResolution.COMMIT
        p = Producer(CONFIG, ("t_tx",), Checker())
        p.startup()
        tx = p.begin_transaction()
        committed = p.send(msg("t_tx", "commit me"), tx).message_id
        tx.commit()
        tx = p.begin_transaction()
        rolled = p.send(msg("t_tx", "roll me back"), tx).message_id
        tx.rollback()
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_tx", {"t_tx": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 1)
        for m in got:
            c.ack(m)
        c.shutdown()
        out(committed=committed, rolled=rolled, got=[view(m) for m in got])
    ''')
    assert [(m["id"], m["body"]) for m in r["got"]] == [(r["committed"], "commit me")]
    # the topic holds the committed message only: the rolled-back one never reached it
    stored = [m for q in range(4) for m in _pull_all(cluster["ns"].addr, "t_tx", q)]
    assert [(m.uniq_key, bytes(m.body)) for m in stored] == [(r["committed"], b"commit me")]


def test_delay_message_never_early(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_delay",))
        p.startup()
        deliver_at = int(time.time()) + 3
        sent = p.send(msg("t_delay", "later", deliver_at=deliver_at)).message_id
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_delay", {"t_delay": FilterExpression("*")}, 5)
        c.startup()
        got = []
        seen_at = None
        end = time.time() + 20
        while not got and time.time() < end:
            got = c.receive(32, 15)
            seen_at = time.time()
        for m in got:
            c.ack(m)
        c.shutdown()
        out(sent=sent, deliver_at=deliver_at, seen_at=seen_at, got=[view(m) for m in got])
    ''')
    assert [m["id"] for m in r["got"]] == [r["sent"]]
    assert r["seen_at"] >= r["deliver_at"]                 # never early
    assert r["got"][0]["type"] in ("DELAY", 3)


def test_orphan_transaction_resolved_through_telemetry(client_venv, cluster):
    r = run(client_venv, cluster, '''
        import threading
        asked = []
        class Checker(TransactionChecker):
            def check(self, message):
                asked.append(message.message_id)
                return TransactionResolution.COMMIT
        p = Producer(CONFIG, ("t_orphan",), Checker())
        p.startup()
        tx = p.begin_transaction()
        sent = p.send(msg("t_orphan", "decided by the checker"), tx).message_id
        # no commit: the broker's check reaches the checker through the proxy's Telemetry
        c = SimpleConsumer(CONFIG, "g_orphan", {"t_orphan": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 1, limit=40)
        for m in got:
            c.ack(m)
        c.shutdown()
        p.shutdown()
        out(sent=sent, asked=asked, got=[view(m) for m in got])
    ''')
    assert r["sent"] in r["asked"]
    assert [(m["id"], m["body"]) for m in r["got"]] == [(r["sent"], "decided by the checker")]


def test_pop_state_survives_a_proxy_crash(client_venv, cluster):
    """kill -9 the proxy between receive and redelivery: the acked message never comes back,
    the one left invisible comes back once its invisibility ends, as attempt 2."""
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_restart",))
        p.startup()
        ids = [p.send(msg("t_restart", b)).message_id for b in ("acked", "pending")]
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_restart", {"t_restart": FilterExpression("*")}, 5)
        c.startup()
        got = {m.body.decode(): m for m in receive_until(c, 2, invisible=30)}
        c.ack(got["acked"])
        c.change_invisible_duration(got["pending"], 3)
        out(ids=ids, attempt=got["pending"].delivery_attempt)
        os._exit(0)                  # no NotifyClientTermination: the proxy is about to die
    ''')
    cluster["proxy"].kill()
    cluster["proxy"] = start_proxy(cluster["ns"].addr, cluster["tmp"] / "proxy")
    r2 = run(client_venv, cluster, '''
        c = SimpleConsumer(CONFIG, "g_restart", {"t_restart": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 1, limit=20)
        for m in got:
            c.ack(m)
        rest = c.receive(32, 10)
        c.shutdown()
        out(got=[view(m) for m in got], rest=len(rest))
    ''')
    assert r["attempt"] == 1
    assert [(m["body"], m["id"], m["attempt"]) for m in r2["got"]] == [
        ("pending", r["ids"][1], 2)]
    assert r2["rest"] == 0


def test_descriptors_match_the_official_client(client_venv, cluster, tmp_path):
    """Our protocol tables (rocketstore/proxy/protocol.py) against the descriptors the 5.x
    client was generated from: every message/field we declare has the client's number, type,
    label and presence, every enum value its number."""
    from rocketstore.proxy import protocol
    path = tmp_path / "ours.pb"
    path.write_bytes(protocol.file_descriptor_proto().SerializeToString())
    r = run(client_venv, cluster, f'''
        from google.protobuf import descriptor_pb2
        from rocketmq.grpc_protocol import definition_pb2, service_pb2
        ours = descriptor_pb2.FileDescriptorProto.FromString(open({str(path)!r}, "rb").read())
        theirs = {{}}
        for mod in (definition_pb2, service_pb2):
            fdp = descriptor_pb2.FileDescriptorProto()
            mod.DESCRIPTOR.CopyToProto(fdp)
            theirs.update({{m.name: m for m in fdp.message_type}})
            theirs.update({{"enum " + e.name: e for e in fdp.enum_type}})
        diffs, fields = [], 0
        def cmp(a, b, where):
            global fields
            tf = {{f.name: f for f in b.field}}
            for f in a.field:
                fields += 1
                g = tf.get(f.name)
                if g is None:
                    diffs.append(where + "." + f.name + " missing")
                    continue
                mine = (f.number, f.type, f.label, f.type_name.split(".")[-1], f.proto3_optional)
                them = (g.number, g.type, g.label, g.type_name.split(".")[-1], g.proto3_optional)
                if mine != them:
                    diffs.append(f"{{where}}.{{f.name}}: ours {{mine}} theirs {{them}}")
            tn = {{n.name: n for n in b.nested_type}}
            for n in a.nested_type:
                cmp(n, tn[n.name], where + "." + n.name)
        for m in ours.message_type:
            if m.name not in theirs:
                diffs.append(m.name + " missing")
            else:
                cmp(m, theirs[m.name], m.name)
        for e in ours.enum_type:
            t = {{v.name: v.number for v in theirs["enum " + e.name].value}}
            for v in e.value:
                if t.get(v.name) != v.number:
                    diffs.append(f"enum {{e.name}}.{{v.name}}")
        svc = {{m.name: (m.input_type.name, m.output_type.name, m.client_streaming,
                         m.server_streaming)
               for m in service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods}}
        for m in ours.service[0].method:
            mine = (m.input_type.split(".")[-1], m.output_type.split(".")[-1],
                    m.client_streaming, m.server_streaming)
            if svc.get(m.name) != mine:
                diffs.append("rpc " + m.name)
        out(diffs=diffs, fields=fields, messages=len(ours.message_type))
    ''')
    assert r["diffs"] == []
    assert r["messages"] >= 50 and r["fields"] >= 150


def test_push_consumer_acks_and_retries_a_failure(client_venv, cluster):
    r = run(client_venv, cluster, '''
        import threading
        from rocketmq import ConsumeResult, MessageListener, PushConsumer
        seen, lock = [], threading.Lock()
        class Listener(MessageListener):
            def consume(self, m):
                with lock:
                    seen.append((m.body.decode(), m.delivery_attempt, m.message_id))
                fail = m.body == b"p0" and m.delivery_attempt == 1
                return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS
        p = Producer(CONFIG, ("t_push",))
        p.startup()
        ids = {f"p{i}": p.send(msg("t_push", f"p{i}")).message_id for i in range(5)}
        p.shutdown()
        c = PushConsumer(CONFIG, "g_push", Listener(), {"t_push": FilterExpression("*")})
        c.startup()
        end = time.time() + 40
        while time.time() < end:
            with lock:
                if ("p0", 2, ids["p0"]) in seen and len(seen) >= 6:
                    break
            time.sleep(0.1)
        time.sleep(1.5)                      # nothing more may come: all acked
        with lock:
            out(seen=seen, ids=ids)
        os._exit(0)
    ''')
    seen = sorted(map(tuple, r["seen"]))
    want = sorted([("p0", 1, r["ids"]["p0"]), ("p0", 2, r["ids"]["p0"])] +
                  [(f"p{i}", 1, r["ids"][f"p{i}"]) for i in range(1, 5)])
    assert seen == want


CPP = """
import json, sys, threading, time
from rocketmq.client import Message, Producer, PushConsumer
namesrv = sys.argv[1]
p = Producer("pg_cpp")
p.set_namesrv_addr(namesrv)
p.start()
m = Message("t_cpp")
m.set_tags("TC")
m.set_keys("kc")
m.set_property("pc", "vc")
m.set_body(b"from-cpp")
sent = p.send_sync(m).msg_id
p.shutdown()
got, done = [], threading.Event()
def on_message(msg):
    got.append({"body": msg.body.decode(), "tags": msg.tags.decode() if isinstance(msg.tags, bytes)
                else msg.tags, "id": msg.id,
                "prop": msg.get_property("p5").decode() if msg.get_property("p5") else None})
    if any(g["body"] == "from-5x" for g in got):
        done.set()
c = PushConsumer("g_cpp4")
c.set_namesrv_addr(namesrv)
c.subscribe("t_cpp", on_message)
print("READY " + sent, flush=True)
c.start()
done.wait(60)
c.shutdown()
print("RESULT " + json.dumps(got), flush=True)
"""


def test_cpp_4x_client_and_5x_client_read_each_other(client_venv, cluster, tmp_path):
    """The C++ 4.x client (PyPI rocketmq 0.4.4) sends to and consumes from the broker the 5.x
    client reaches through the proxy: each reads what the other sent."""
    import subprocess
    import sys
    script = tmp_path / "cpp.py"
    script.write_text(CPP)
    proc = subprocess.Popen([sys.executable, str(script), cluster["ns"].addr],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)))
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("READY "), ready + proc.stderr.read()[-2000:]
        cpp_id = ready.split()[1]
        r = run(client_venv, cluster, '''
            c = SimpleConsumer(CONFIG, "g_cpp5", {"t_cpp": FilterExpression("TC")}, 5)
            c.startup()
            got = receive_until(c, 1)
            for m in got:
                c.ack(m)
            c.shutdown()
            p = Producer(CONFIG, ("t_cpp",))
            p.startup()
            sent = p.send(msg("t_cpp", "from-5x", tag="T5", props={"p5": "v5"})).message_id
            p.shutdown()
            out(got=[view(m) for m in got], sent=sent)
        ''')
        rest, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert [(m["body"], m["tag"], m["keys"], m["props"], m["id"]) for m in r["got"]] == [
        ("from-cpp", "TC", ["kc"], {"pc": "vc"}, cpp_id)]
    lines = [x for x in rest.splitlines() if x.startswith("RESULT ")]
    assert lines, err[-2000:]
    import json
    by_body = {g["body"]: g for g in json.loads(lines[-1][7:])}
    assert by_body["from-5x"]["id"] == r["sent"] and by_body["from-5x"]["prop"] == "v5"
    assert by_body["from-5x"]["tags"] == "T5"


@pytest.mark.stress
def test_invisibility_expiry_redelivers_without_a_nack(client_venv, cluster):
    """No ack, no nack: the message comes back once the 10 s invisibility ends, attempt 2."""
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_inval",))
        p.startup()
        sent = p.send(msg("t_inval", "forgotten")).message_id
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_expiry", {"t_inval": FilterExpression("*")}, 5)
        c.startup()
        first = [m for m in receive_until(c, 1, invisible=10) if m.message_id == sent][0]
        t0 = time.time()
        second = []
        while not second and time.time() - t0 < 30:
            second = [m for m in c.receive(32, 10) if m.message_id == sent]
        waited = time.time() - t0
        c.ack(second[0])
        c.shutdown()
        out(first=view(first), second=view(second[0]), waited=waited)
    ''')
    assert (r["first"]["attempt"], r["second"]["attempt"]) == (1, 2)
    assert r["waited"] >= 9.5


def test_a_group_leaves_the_broker_with_its_last_client(client_venv, cluster):
    """While a 5.x consumer is up, the proxy is a member of its group at the broker (so the
    broker takes the group's dead letters from it); after the client shuts down it is not, so
    4.x consumers of the same group do not share their queues with a member that never pulls."""
    import subprocess
    import textwrap
    from grpc_client import PRELUDE
    from rocketstore.client.tcp import TcpTransport
    code = PRELUDE + textwrap.dedent('''
        c = SimpleConsumer(CONFIG, "g_leave", {"t_normal": FilterExpression("*")}, 5)
        c.startup()
        time.sleep(1.5)
        print("UP", flush=True)
        sys.stdin.readline()
        c.shutdown()
        print("DOWN", flush=True)
    ''')
    home = cluster["tmp"] / "home"
    home.mkdir(exist_ok=True)
    t = TcpTransport(cluster["ns"].addr)
    p = subprocess.Popen([str(client_venv.python), "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=home,
                         env=dict(os.environ, HOME=str(home), PYTHONPATH="",
                                  PROXY_ENDPOINT=cluster["proxy"].addr))
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "UP"
        members_during = t.get_consumer_id_list("broker-a", "g_leave")
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "DOWN"
        p.wait(30)
        members_after = t.get_consumer_id_list("broker-a", "g_leave")
    finally:
        t.close()
        if p.poll() is None:
            p.kill()
        p.communicate()
    assert len(members_during) == 1 and "proxy" in members_during[0]
    assert members_after == []
