"""``rocketstore proxy``: RocketMQ 5.x clients over gRPC, checked with the official Python client
(``rocketmq-python-client``, run in its own venv: tests/grpc_client.py) against a real NameServer,
broker and proxy process."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import grpc  # noqa: E402  (the `grpc` and `test` extras install it)

from grpc_client import CLIENT_VERSION, ClientVenv  # noqa: E402
from servers import ServerProcess, start_broker, start_namesrv  # noqa: E402

TOPICS = ("t_normal", "t_fifo", "t_tx", "t_delay", "t_dlq", "t_cross", "t_inval", "t_async",
          "t_orphan", "t_restart", "t_raw", "t_push", "t_cpp", "t_race")


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
    state: dict = {}
    ns = start_namesrv(tmp)
    # the check service looks at half messages 3 s old every second (orphan recovery test)
    broker = start_broker(tmp / "store", ns.addr, conf={"transactionCheckInterval": "1000",
                                                        "transactionTimeOut": "3000"})
    proxy = None
    try:
        with AdminClient(ns.addr) as admin:
            for t in TOPICS:
                admin.update_topic(t, read_queue_nums=4, write_queue_nums=4,
                                   broker_addr=broker.addr)
        proxy = start_proxy(ns.addr, tmp / "proxy")
        state = {"ns": ns, "broker": broker, "proxy": proxy, "tmp": tmp}
        yield state
    finally:
        for p in (state.get("proxy", proxy), broker, ns):
            if p is not None:
                assert p.stop() == 0, p.output[-3000:]


def start_proxy(ns: str, data_dir: Path) -> ServerProcess:
    return ServerProcess(["proxy", "--namesrv", ns, "--listen", "127.0.0.1:0", "--data-dir",
                          str(data_dir), "--fifo-group", "g_fifo", "--group-max-attempts",
                          "g_dlq=2", "--message-type", "t_fifo=FIFO", "--message-type",
                          "t_tx=TRANSACTION", "--message-type", "t_orphan=TRANSACTION",
                          "--message-type", "t_delay=DELAY"])


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
        c.shutdown()
        out(got=[view(m) for m in got], again=[view(m) for m in again])
    ''')
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


def _stub(addr: str, rpc: str, req_cls: str, resp_cls: str, stream: bool = False):
    from rocketstore.proxy import protocol as pb
    ch = grpc.insecure_channel(addr)
    kind = ch.unary_stream if stream else ch.unary_unary
    call = kind(f"/{pb.SERVICE}/{rpc}", request_serializer=pb.CLASSES[req_cls].SerializeToString,
                response_deserializer=pb.CLASSES[resp_cls].FromString)
    return ch, call


META = (("x-mq-client-id", "raw@1@0@test"), ("x-mq-language", "PYTHON"))


def test_raw_calls_status_frames_and_unimplemented(cluster):
    """What clients depend on, checked with raw gRPC calls (our own message classes): a missing
    client id, UNIMPLEMENTED for the pull family, ReceiveMessage's frames (status first,
    delivery timestamp last, also before any Telemetry settings and with queue id -1), the
    invisible-time bounds, and the Telemetry settings reply."""
    from rocketstore.proxy import protocol as pb
    addr = cluster["proxy"].addr
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ch, query = _stub(addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
    req = pb.QueryRouteRequest()
    req.topic.name = "t_raw"
    assert query(req, timeout=10).status.code == code("CLIENT_ID_REQUIRED")
    resp = query(req, metadata=META, timeout=10)
    assert resp.status.code == code("OK") and len(resp.message_queues) == 4
    # a 4.9 topic has no message.type: NORMAL only, as RocketMQ 5 reads it
    assert {tuple(q.accept_message_types) for q in resp.message_queues} == {
        (pb.enum_value("MessageType", "NORMAL"),)}
    req.topic.name = "no_such_topic"
    assert query(req, metadata=META, timeout=10).status.code == code("TOPIC_NOT_FOUND")

    pull = ch.unary_unary(f"/{pb.SERVICE}/PullMessage")
    with pytest.raises(grpc.RpcError) as e:
        pull(b"", metadata=META, timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED

    _, receive = _stub(addr, "ReceiveMessage", "ReceiveMessageRequest",
                       "ReceiveMessageResponse", stream=True)

    def frames(invisible_s: int, poll_s: int = 5) -> list:
        r = pb.ReceiveMessageRequest(batch_size=4)
        r.group.name = "g_raw"
        r.message_queue.topic.name = "t_raw"
        r.message_queue.id = -1
        r.invisible_duration.seconds = invisible_s
        r.long_polling_timeout.seconds = poll_s
        return list(receive(r, metadata=META, timeout=poll_s + 3))

    f = frames(9)                                   # under RocketMQ's 10 s minimum
    assert [x.WhichOneof("content") for x in f] == ["status", "delivery_timestamp"]
    assert f[0].status.code == code("ILLEGAL_INVISIBLE_TIME")
    f = frames(15)                                  # nothing there: MESSAGE_NOT_FOUND
    assert [x.WhichOneof("content") for x in f] == ["status", "delivery_timestamp"]
    assert f[0].status.code == code("MESSAGE_NOT_FOUND")

    _, send = _stub(addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    sr = pb.SendMessageRequest()
    m = sr.messages.add(body=b"raw")
    m.topic.name = "t_raw"
    m.system_properties.message_id = "01RAW"
    first = send(sr, metadata=META, timeout=10)
    assert first.status.code == code("OK")
    # a client retrying a send whose answer it lost sends the same message id again: stored
    # once, the first send's result returned (the Python client retries after its 3 s timeout)
    again = send(sr, metadata=META, timeout=10)
    assert again.status.code == code("OK")
    assert again.entries[0].message_id == "01RAW"
    m.body = b""
    assert send(sr, metadata=META, timeout=10).status.code == code("MESSAGE_BODY_EMPTY")
    m.body = b"raw"
    m.system_properties.message_group = "g1"        # a FIFO message to a NORMAL topic
    m.system_properties.message_id = "01RAW-FIFO"
    assert send(sr, metadata=META, timeout=10).status.code == code(
        "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE")
    m.system_properties.ClearField("message_group")
    m.system_properties.message_id = "01RAW"
    m.user_properties["UNIQ_KEY"] = "x"             # a reserved name
    assert send(sr, metadata=META, timeout=10).status.code == code(
        "ILLEGAL_MESSAGE_PROPERTY_KEY")
    f = frames(15)
    kinds = [x.WhichOneof("content") for x in f]
    assert kinds == ["status", "message", "delivery_timestamp"], kinds
    assert f[0].status.code == code("OK")
    got = f[1].message
    assert (got.body, got.system_properties.message_id, got.system_properties.delivery_attempt
            ) == (b"raw", "01RAW", 1)

    tele = ch.stream_stream(f"/{pb.SERVICE}/Telemetry",
                            request_serializer=pb.TelemetryCommand.SerializeToString,
                            response_deserializer=pb.TelemetryCommand.FromString)
    cmd = pb.TelemetryCommand()
    cmd.settings.client_type = pb.enum_value("ClientType", "PRODUCER")
    cmd.settings.publishing.topics.add(name="t_raw")
    cmd.settings.publishing.max_body_size = 128 << 20
    stream = tele(iter([cmd]), metadata=META, timeout=10)
    reply = next(stream)
    assert reply.status.code == code("OK")
    assert reply.settings.publishing.max_body_size == 4 << 20
    assert reply.settings.metric.on is False
    stream.cancel()
    ch.close()
    stored = [m for q in range(4) for m in _pull_all(cluster["ns"].addr, "t_raw", q)]
    assert [m.uniq_key for m in stored] == ["01RAW"]          # the retried send: stored once


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


def test_the_server_never_imports_a_rocketmq_client():
    """The 5.x client rewires logging at import and registers the same proto package
    (docs/grpc.md): nothing the proxy runs may import it (or the 4.x binding)."""
    import re
    root = Path(__file__).resolve().parent.parent / "rocketstore"
    offenders = [str(p) for p in root.rglob("*.py")
                 if re.search(r"^\s*(from|import)\s+rocketmq\b", p.read_text(), re.M)]
    assert offenders == []


def test_hmac_signature_vector():
    from rocketstore.proxy.auth import parse_authorization, sign
    assert sign("sk1", "20261126T134434Z") == "9a6b909dd2bdb5723d5bb8fcd4b3c834f5072b43"
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
                               "Signature=ab12")["Signature"] == "ab12"


ACL = """\
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [t_raw=PUB|SUB]
"""


def test_acl_signed_clients_and_topic_permissions(client_venv, cluster, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    proxy = ServerProcess(["proxy", "--namesrv", cluster["ns"].addr, "--listen", "127.0.0.1:0",
                           "--data-dir", str(tmp_path / "proxy"), "--acl-file", str(acl)])
    try:
        r = client_venv.run('''
            def attempt(ak, sk, topic):
                config = ClientConfiguration(ENDPOINT, Credentials(ak, sk))
                p = Producer(config, (topic,))
                try:
                    p.startup()
                    p.send(msg(topic, "signed"))
                    return "sent"
                except Exception as e:
                    return type(e).__name__ + ": " + str(e)
                finally:
                    try:
                        p.shutdown()
                    except Exception:
                        pass
            out(ok=attempt("rocketmq2", "12345678", "t_raw"),
                wrong_sk=attempt("rocketmq2", "87654321", "t_raw"),
                no_creds=attempt("", "", "t_raw"),
                denied=attempt("rocketmq2", "12345678", "t_normal"))
        ''', proxy.addr, cluster["tmp"] / "home")
        # the client reports a refused QueryRoute only as "failed to fetch route": the status
        # itself, with raw calls signed as the client signs
        from rocketstore.proxy import protocol as pb
        from rocketstore.proxy.auth import sign
        ch, query = _stub(proxy.addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
        req = pb.QueryRouteRequest()
        req.topic.name = "t_raw"
        date = "20261126T134434Z"

        def status(sk: str | None) -> tuple[int, str]:
            md = list(META) + [("x-mq-date-time", date)]
            if sk is not None:
                md.append(("authorization", f"MQv2-HMAC-SHA1 Credential=rocketmq2, "
                                            f"SignedHeaders=x-mq-date-time, "
                                            f"Signature={sign(sk, date)}"))
            st = query(req, metadata=md, timeout=10).status
            return st.code, st.message
        raw = {"ok": status("12345678"), "wrong": status("87654321"), "none": status(None)}
        ch.close()
    finally:
        assert proxy.stop() == 0
    unauthorized = pb.enum_value("Code", "UNAUTHORIZED")
    assert raw["ok"][0] == pb.enum_value("Code", "OK")
    assert raw["wrong"][0] == unauthorized and "signature" in raw["wrong"][1]
    assert raw["none"][0] == unauthorized
    assert r["ok"] == "sent"
    assert "failed to fetch" in r["wrong_sk"] and "failed to fetch" in r["no_creds"], r
    assert "40100" in r["denied"] and "PUB" in r["denied"], r["denied"]


def test_local_mode_in_the_broker_process(client_venv, tmp_path):
    """``grpcServerPort`` in broker.conf: the broker process serves 5.x clients itself."""
    import socket
    from rocketstore.remoting.admin_client import AdminClient
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr, conf={"grpcServerPort": str(port)})
    try:
        deadline = time.monotonic() + 30
        while "rocketstore proxy: listening on" not in broker.output:
            assert time.monotonic() < deadline, broker.output[-3000:]
            time.sleep(0.1)
        with AdminClient(ns.addr) as admin:
            admin.update_topic("t_local", read_queue_nums=2, write_queue_nums=2,
                               broker_addr=broker.addr)
        r = client_venv.run('''
            p = Producer(CONFIG, ("t_local",))
            p.startup()
            sent = p.send(msg("t_local", "local mode")).message_id
            p.shutdown()
            c = SimpleConsumer(CONFIG, "g_local", {"t_local": FilterExpression("*")}, 5)
            c.startup()
            got = receive_until(c, 1)
            for m in got:
                c.ack(m)
            c.shutdown()
            out(sent=sent, got=[view(m) for m in got])
        ''', f"127.0.0.1:{port}", tmp_path / "home")
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0
    assert [(m["id"], m["body"]) for m in r["got"]] == [(r["sent"], "local mode")]
    assert (tmp_path / "store" / "proxy" / "pop.journal").exists()


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


@pytest.mark.stress
def test_auto_renew_keeps_a_push_receipt_invisible_past_60_s(cluster):
    """A push consumer's receipt (auto_renew) outlives RocketMQ's 60 s while its client's
    Telemetry stream is open, and its first handle still acks."""
    from rocketstore.proxy import protocol as pb
    addr = cluster["proxy"].addr
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ch, send = _stub(addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    _, receive = _stub(addr, "ReceiveMessage", "ReceiveMessageRequest",
                       "ReceiveMessageResponse", stream=True)
    _, ack = _stub(addr, "AckMessage", "AckMessageRequest", "AckMessageResponse")
    sr = pb.SendMessageRequest()
    m = sr.messages.add(body=b"renew me")
    m.topic.name = "t_push"
    m.system_properties.message_id = "01RENEW"
    assert send(sr, metadata=META, timeout=10).status.code == code("OK")
    tele = ch.stream_stream(f"/{pb.SERVICE}/Telemetry",
                            request_serializer=pb.TelemetryCommand.SerializeToString,
                            response_deserializer=pb.TelemetryCommand.FromString)
    cmd = pb.TelemetryCommand()
    cmd.settings.client_type = pb.enum_value("ClientType", "PUSH_CONSUMER")
    cmd.settings.subscription.group.name = "g_renew"
    import threading
    closing = threading.Event()

    def commands():                 # the stream stays open, as a live client's does
        yield cmd
        closing.wait(300)
    stream = tele(commands(), metadata=META, timeout=300)
    assert next(stream).status.code == code("OK")

    def pop(client: str) -> list:
        r = pb.ReceiveMessageRequest(batch_size=32, auto_renew=True)
        r.group.name = "g_renew"
        r.message_queue.topic.name = "t_push"
        r.long_polling_timeout.seconds = 5
        md = (("x-mq-client-id", client),)
        return [f.message for f in receive(r, metadata=md, timeout=10)
                if f.WhichOneof("content") == "message"
                and f.message.system_properties.message_id == "01RENEW"]
    first = []
    deadline = time.monotonic() + 30
    while not first and time.monotonic() < deadline:
        first = pop(META[0][1])
    time.sleep(65)
    assert pop("other@2@0@test") == []                 # still invisible: renewed
    req = pb.AckMessageRequest()
    req.group.name, req.topic.name = "g_renew", "t_push"
    req.entries.add(message_id="01RENEW",
                    receipt_handle=first[0].system_properties.receipt_handle)
    assert ack(req, metadata=META, timeout=10).status.code == code("OK")
    closing.set()
    stream.cancel()
    ch.close()


def test_concurrent_receives_of_one_group_share_the_messages(cluster):
    """Consumers of one group receiving at the same time: every message goes to one of them."""
    from concurrent.futures import ThreadPoolExecutor
    from rocketstore.proxy import protocol as pb
    addr = cluster["proxy"].addr
    ch, send = _stub(addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    _, receive = _stub(addr, "ReceiveMessage", "ReceiveMessageRequest",
                       "ReceiveMessageResponse", stream=True)
    for i in range(16):
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"r%d" % i)
        m.topic.name = "t_race"
        m.system_properties.message_id = f"01RACE{i}"
        assert send(sr, metadata=META, timeout=10).status.code == pb.enum_value("Code", "OK")

    def pop(_: int) -> list[str]:
        r = pb.ReceiveMessageRequest(batch_size=4)    # 4 x 4: nobody waits out a long poll
        r.group.name = "g_race"
        r.message_queue.topic.name = "t_race"
        r.invisible_duration.seconds = 60
        r.long_polling_timeout.seconds = 5
        return [f.message.system_properties.message_id
                for f in receive(r, metadata=META, timeout=10)
                if f.WhichOneof("content") == "message"]
    got: list[str] = []
    while len(set(got)) < 16:
        with ThreadPoolExecutor(4) as pool:
            rounds = list(pool.map(pop, range(4)))
        assert any(rounds), got
        got += [mid for r in rounds for mid in r]
    ch.close()
    assert sorted(got) == sorted(f"01RACE{i}" for i in range(16))     # each exactly once


def test_a_taken_port_is_a_one_line_error(cluster, tmp_path):
    """Another proxy's port: exit 2 with one line, never a second server on the same port
    (grpc's SO_REUSEPORT default would let two share it)."""
    import subprocess
    import sys
    port = cluster["proxy"].addr.rsplit(":", 1)[1]
    p = subprocess.run([sys.executable, "-m", "rocketstore", "proxy", "--namesrv",
                        cluster["ns"].addr, "--listen", f"127.0.0.1:{port}", "--data-dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"rocketstore proxy: cannot listen on 127.0.0.1:{port}" in p.stderr
