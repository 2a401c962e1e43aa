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
