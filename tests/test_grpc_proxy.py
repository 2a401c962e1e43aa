"""``rocketstore proxy``: RocketMQ 5.x clients over gRPC, checked with the official Python client
(``rocketmq-python-client``, run in its own venv: tests/grpc_client.py) against a real NameServer,
broker and proxy process."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")     # the `grpc` and `test` extras install it

from grpc_client import CLIENT_VERSION, ClientVenv  # noqa: E402
from servers import ServerProcess, start_broker, start_namesrv  # noqa: E402

TOPICS = ("t_normal", "t_fifo", "t_tx", "t_delay", "t_dlq", "t_cross", "t_inval", "t_async")


@pytest.fixture(scope="session")
def client_venv(request) -> ClientVenv:
    where = os.environ.get("ROCKETSTORE_GRPC_CLIENT_VENV")
    root = Path(where) if where else request.config.cache.mkdir(
        f"rocketmq-python-client-{CLIENT_VERSION}")
    venv = ClientVenv(root)
    venv.ensure()
    return venv


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from rocketstore.remoting.admin_client import AdminClient
    tmp = tmp_path_factory.mktemp("grpc")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    proxy = None
    try:
        with AdminClient(ns.addr) as admin:
            for t in TOPICS:
                admin.update_topic(t, read_queue_nums=4, write_queue_nums=4,
                                   broker_addr=broker.addr)
        proxy = ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                               "--data-dir", str(tmp / "proxy"), "--fifo-group", "g_fifo",
                               "--group-max-attempts", "g_dlq=2"])
        yield {"ns": ns, "broker": broker, "proxy": proxy, "tmp": tmp}
    finally:
        for p in (proxy, broker, ns):
            if p is not None:
                assert p.stop() == 0, p.output[-3000:]


def run(client_venv, cluster, script: str, **kw) -> dict:
    return client_venv.run(script, cluster["proxy"].addr, cluster["tmp"] / "home", **kw)


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
        again = c.receive(32, 15)
        c.shutdown()
        out(ids=ids, got=[view(m) for m in got], again=len(again))
    ''')
    got = sorted(r["got"], key=lambda m: m["body"])
    assert [m["body"] for m in got] == ["hello 0", "hello 1", "hello 2"]
    assert sorted(m["id"] for m in got) == sorted(r["ids"])
    for i, m in enumerate(got):
        assert m["tag"] == "TagA" and m["keys"] == [f"k{i}"] and m["props"] == {"color": "red"}
        assert m["attempt"] == 1 and m["topic"] == "t_normal"
    assert r["again"] == 0                      # acked: never delivered again


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
        rest = c.receive(32, 10)
        c.shutdown()
        out(sent=sent, first=view(first), second=view(second), waited=waited, stale=stale,
            rest=len(rest))
    ''')
    assert r["first"]["id"] == r["second"]["id"] == r["sent"]
    assert (r["first"]["attempt"], r["second"]["attempt"]) == (1, 2)
    assert r["waited"] >= 0.9                     # invisible for the 1 s asked, not less
    assert "BadRequest" in r["stale"] and "40013" in r["stale"], r["stale"]
    assert r["rest"] == 0


def _pull_all(ns: str, topic: str, queue_id: int = 0):
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.common.protocol import PullMessageRequest, ResponseCode
    t = TcpTransport(ns)
    try:
        r = t.pull_message("broker-a", PullMessageRequest(
            consumer_group="g_check", topic=topic, queue_id=queue_id, queue_offset=0,
            max_msg_nums=32, sys_flag=0x4, subscription="*")).result(10)
        return r.messages if r.code == ResponseCode.SUCCESS else []
    finally:
        t.close()


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
        p = Producer(CONFIG, ("t_fifo",))
        p.startup()
        for i in range(5):
            for g in ("ga", "gb"):
                p.send(msg("t_fifo", f"{g}-{i}", group=g))
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
        rest = c.receive(32, 10)
        c.shutdown()
        out(got=[view(m) for m in got], again=[view(m) for m in again], rest=len(rest))
    ''')
    for g in ("ga", "gb"):
        seq = [m["body"] for m in r["got"] if m["group"] == g]
        assert seq == [f"{g}-{i}" for i in range(5)], seq       # per-group order
    assert all(m["type"] == "FIFO" or m["type"] == 2 for m in r["got"]), r["got"][0]["type"]
    assert [(m["body"], m["attempt"]) for m in r["again"]] == [("ga-0", 2)]
    assert r["rest"] == 0


def test_async_send(client_venv, cluster):
    r = run(client_venv, cluster, '''
        p = Producer(CONFIG, ("t_async",))
        p.startup()
        futs = [p.send_async(msg("t_async", f"a{i}")) for i in range(20)]
        ids = [f.result(timeout=10).message_id for f in futs]
        p.shutdown()
        c = SimpleConsumer(CONFIG, "g_async", {"t_async": FilterExpression("*")}, 5)
        c.startup()
        got = receive_until(c, 20)
        for m in got:
            c.ack(m)
        c.shutdown()
        out(ids=ids, got=sorted(m.message_id for m in got))
    ''')
    assert len(set(r["ids"])) == 20 and r["got"] == sorted(r["ids"])


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
        rest = c.receive(32, 10)
        c.shutdown()
        out(committed=committed, rolled=rolled, got=[view(m) for m in got], rest=len(rest))
    ''')
    assert [(m["id"], m["body"]) for m in r["got"]] == [(r["committed"], "commit me")]
    assert r["rest"] == 0


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
