"""``rocketstore proxy`` on the wire: raw gRPC calls built from our own protocol tables (status
frames, codes, concurrency, auto-renew), authentication against plain ACL, local mode in the
broker process, and the server's own hygiene (ports, imports)."""
from __future__ import annotations

import datetime
import time
from pathlib import Path

import grpc  # the `grpc` and `test` extras install it
import pytest

from grpc_support import client_venv, cluster  # noqa: F401  (fixtures)
from grpc_support import META, _pull_all, _stub, run
from servers import ServerProcess, start_broker, start_namesrv


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
    r = pb.ReceiveMessageRequest(batch_size=4)      # SQL92 filters are not served
    r.group.name, r.message_queue.topic.name = "g_raw", "t_raw"
    r.invisible_duration.seconds = 15
    r.filter_expression.type = pb.enum_value("FilterType", "SQL")
    r.filter_expression.expression = "a > 1"
    f = list(receive(r, metadata=META, timeout=10))
    assert f[0].status.code == code("ILLEGAL_FILTER_EXPRESSION") and len(f) == 2
    f = frames(15)                                  # nothing there: MESSAGE_NOT_FOUND
    assert [x.WhichOneof("content") for x in f] == ["status", "delivery_timestamp"]
    assert f[0].status.code == code("MESSAGE_NOT_FOUND")
    # a 20 s long poll under a 6.2 s deadline: the proxy answers before the deadline (a late
    # answer is DEADLINE_EXCEEDED for the client, and what it popped stays invisible)
    r = pb.ReceiveMessageRequest(batch_size=4)
    r.group.name, r.message_queue.topic.name, r.message_queue.id = "g_raw", "t_raw", -1
    r.invisible_duration.seconds = 15
    r.long_polling_timeout.seconds = 20
    f = list(receive(r, metadata=META, timeout=6.2))
    assert [x.WhichOneof("content") for x in f] == ["status", "delivery_timestamp"]
    assert f[0].status.code == code("MESSAGE_NOT_FOUND")

    _, send = _stub(addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    sr = pb.SendMessageRequest()
    m = sr.messages.add(body=b"raw")
    m.topic.name = "t_raw"
    m.system_properties.message_id = "01RAW"
    m.system_properties.queue_id = -1               # advisory: the proxy picks the queue
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


def test_the_server_never_imports_a_rocketmq_client():
    """The 5.x client rewires logging at import and registers the same proto package
    (docs/grpc.md): nothing the servers run may import it (or the 4.x binding); the
    benchmarks in rocketstore/tools drive clients and are not servers."""
    import re
    root = Path(__file__).resolve().parent.parent / "rocketstore"
    offenders = [str(p) for p in root.rglob("*.py")
                 if "tools" not in p.relative_to(root).parts     # benchmarks drive clients
                 and re.search(r"^\s*(from|import)\s+rocketmq\b", p.read_text(), re.M)]
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
            attempt = send_as
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
        # signed as the client signs: its (here UTC) time now
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")

        def status(sk: str | None, date: str = date) -> tuple[int, str]:
            md = list(META) + [("x-mq-date-time", date)]
            if sk is not None:
                md.append(("authorization", f"MQv2-HMAC-SHA1 Credential=rocketmq2, "
                                            f"SignedHeaders=x-mq-date-time, "
                                            f"Signature={sign(sk, date)}"))
            st = query(req, metadata=md, timeout=10).status
            return st.code, st.message
        raw = {"ok": status("12345678"), "wrong": status("87654321"), "none": status(None),
               # a correctly signed but stale date (a replayed header) is refused
               "skewed": status("12345678", "19991231T235959Z")}
        ch.close()
    finally:
        assert proxy.stop() == 0
    unauthorized = pb.enum_value("Code", "UNAUTHORIZED")
    assert raw["ok"][0] == pb.enum_value("Code", "OK")
    assert raw["skewed"][0] == unauthorized and "grpcAuthMaxSkewSeconds" in raw["skewed"][1]
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


def test_a_broker_kill_loses_no_unacked_message(tmp_path):
    """kill -9 the broker between receive and redelivery (the proxy stays up): the acked message
    never comes back, the un-acked one does, as attempt 2, from the restarted broker."""
    from rocketstore.proxy import protocol as pb
    from rocketstore.remoting.admin_client import AdminClient
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    proxy = None
    try:
        with AdminClient(ns.addr) as admin:
            admin.update_topic("t_bk", read_queue_nums=2, write_queue_nums=2,
                               broker_addr=broker.addr)
        proxy = ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                               "--data-dir", str(tmp_path / "proxy")])
        ch, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
        _, receive = _stub(proxy.addr, "ReceiveMessage", "ReceiveMessageRequest",
                           "ReceiveMessageResponse", stream=True)
        _, ack = _stub(proxy.addr, "AckMessage", "AckMessageRequest", "AckMessageResponse")
        _, nack = _stub(proxy.addr, "ChangeInvisibleDuration", "ChangeInvisibleDurationRequest",
                        "ChangeInvisibleDurationResponse")
        for body in ("acked", "pending"):
            sr = pb.SendMessageRequest()
            m = sr.messages.add(body=body.encode())
            m.topic.name = "t_bk"
            m.system_properties.message_id = "01BK-" + body
            assert send(sr, metadata=META, timeout=10).status.code == code("OK")

        def pop() -> dict:
            r = pb.ReceiveMessageRequest(batch_size=8)
            r.group.name = "g_bk"
            r.message_queue.topic.name = "t_bk"
            r.invisible_duration.seconds = 60
            r.long_polling_timeout.seconds = 5
            return {f.message.body.decode(): f.message for f in
                    receive(r, metadata=META, timeout=10) if f.WhichOneof("content") == "message"}
        got: dict = {}
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got.update(pop())
        a = pb.AckMessageRequest()
        a.group.name, a.topic.name = "g_bk", "t_bk"
        a.entries.add(message_id="01BK-acked",
                      receipt_handle=got["acked"].system_properties.receipt_handle)
        assert ack(a, metadata=META, timeout=10).status.code == code("OK")
        n = pb.ChangeInvisibleDurationRequest(
            receipt_handle=got["pending"].system_properties.receipt_handle,
            message_id="01BK-pending")
        n.group.name, n.topic.name = "g_bk", "t_bk"
        n.invisible_duration.seconds = 2
        assert nack(n, metadata=META, timeout=10).status.code == code("OK")

        broker.kill()
        broker = start_broker(tmp_path / "store", ns.addr)
        again: dict = {}
        deadline = time.monotonic() + 60
        while "pending" not in again and time.monotonic() < deadline:
            try:
                again.update(pop())
            except grpc.RpcError:
                time.sleep(0.5)
        assert list(again) == ["pending"]
        assert again["pending"].system_properties.delivery_attempt == 2
        ch.close()
    finally:
        for p in (proxy, broker, ns):
            if p is not None:
                p.stop()


def test_end_transaction_after_a_proxy_crash(cluster, tmp_path):
    """A half message sent through one proxy process is committed through the next one (the
    transaction's offsets are in the journal, not only in memory)."""
    from rocketstore.proxy import protocol as pb
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ns = cluster["ns"]
    proxy = None

    def start() -> ServerProcess:
        return ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                              "--data-dir", str(tmp_path / "proxy"), "--message-type",
                              "t_txc=TRANSACTION"])
    try:
        proxy = start()
        ch, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"half")
        m.topic.name = "t_txc"
        m.system_properties.message_id = "01TXC"
        m.system_properties.message_type = pb.enum_value("MessageType", "TRANSACTION")
        sent = send(sr, metadata=META, timeout=10)
        assert sent.status.code == code("OK")
        ch.close()
        proxy.kill()
        proxy = start()
        ch, end = _stub(proxy.addr, "EndTransaction", "EndTransactionRequest",
                        "EndTransactionResponse")
        req = pb.EndTransactionRequest(message_id="01TXC",
                                       transaction_id=sent.entries[0].transaction_id,
                                       resolution=pb.enum_value("TransactionResolution",
                                                                "COMMIT"))
        req.topic.name = "t_txc"
        assert end(req, metadata=META, timeout=10).status.code == code("OK")
        ch.close()
        stored: list = []
        deadline = time.monotonic() + 20
        while not stored and time.monotonic() < deadline:
            stored = _pull_topic(ns.addr, "t_txc")
            time.sleep(0.2)
        assert [(m.uniq_key, bytes(m.body)) for m in stored] == [("01TXC", b"half")]
    finally:
        if proxy is not None:
            assert proxy.stop() == 0


def test_a_delay_survives_a_proxy_crash(cluster, tmp_path):
    """A delay message scheduled through one proxy process is delivered by the next one, once,
    not before its time."""
    from rocketstore.proxy import protocol as pb
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ns = cluster["ns"]
    proxy = None

    def start() -> ServerProcess:
        return ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                              "--data-dir", str(tmp_path / "proxy"), "--message-type",
                              "t_dl=DELAY"])
    try:
        proxy = start()
        ch, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"later")
        m.topic.name = "t_dl"
        m.system_properties.message_id = "01DL"
        due_ms = int(time.time() * 1000) + 4000
        m.system_properties.delivery_timestamp.seconds = due_ms // 1000
        m.system_properties.delivery_timestamp.nanos = due_ms % 1000 * 1_000_000
        assert send(sr, metadata=META, timeout=10).status.code == code("OK")
        ch.close()
        proxy.kill()
        assert _pull_topic(ns.addr, "t_dl") == []            # not there before its time
        proxy = start()
        stored: list = []
        deadline = time.monotonic() + 30
        while not stored and time.monotonic() < deadline:
            stored = _pull_topic(ns.addr, "t_dl")
            time.sleep(0.2)
        time.sleep(1.5)                                     # and only once
        stored = _pull_topic(ns.addr, "t_dl")
        assert [(m.uniq_key, bytes(m.body)) for m in stored] == [("01DL", b"later")]
        assert stored[0].store_timestamp >= due_ms
        assert stored[0].properties["TIMER_DELIVER_MS"] == str(due_ms)
    finally:
        if proxy is not None:
            assert proxy.stop() == 0



def _pull_topic(ns: str, topic: str) -> list:
    return [m for q in range(4) for m in _pull_all(ns, topic, q)]


def test_recall_a_delay_message_before_its_time(cluster):
    from rocketstore.proxy import protocol as pb
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ns, addr = cluster["ns"], cluster["proxy"].addr
    ch, send = _stub(addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    _, recall = _stub(addr, "RecallMessage", "RecallMessageRequest", "RecallMessageResponse")
    sr = pb.SendMessageRequest()
    m = sr.messages.add(body=b"never")
    m.topic.name = "t_delay"
    m.system_properties.message_id = "01RECALL"
    due_ms = int(time.time() * 1000) + 3000
    m.system_properties.delivery_timestamp.seconds = due_ms // 1000 + 1
    sent = send(sr, metadata=META, timeout=10)
    assert sent.status.code == code("OK") and sent.entries[0].recall_handle
    req = pb.RecallMessageRequest(recall_handle=sent.entries[0].recall_handle)
    req.topic.name = "t_delay"
    r = recall(req, metadata=META, timeout=10)
    assert (r.status.code, r.message_id) == (code("OK"), "01RECALL")
    assert recall(req, metadata=META, timeout=10).status.code == code("NOT_FOUND")
    req.recall_handle = "bm90IGEgaGFuZGxl"                  # base64 of "not a handle"
    assert recall(req, metadata=META, timeout=10).status.code == code("BAD_REQUEST")
    ch.close()
    time.sleep(max(0.0, (due_ms + 2500) / 1000 - time.time()))
    assert "01RECALL" not in {m.uniq_key for m in _pull_topic(ns.addr, "t_delay")}


def test_topic_message_type_is_kept_by_the_broker(tmp_path):
    """A topic's RocketMQ 5 ``message.type`` lives in the broker's topic config: set through
    UPDATE_AND_CREATE_TOPIC's ``attributes`` (raw frames, as mqadmin updateTopic -a sends it),
    validated, written to topics.json, read by the proxy (no --message-type option) for
    QueryRoute and the send type check, kept by an update that does not name it and by a
    kill -9 and restart of the broker."""
    import json
    from rocketstore.proxy import protocol as pb
    from rawwire import RawClient
    code = lambda name: pb.enum_value("Code", name)     # noqa: E731
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    proxy = None
    create = {"topic": "t_attr", "defaultTopic": "TBW102", "readQueueNums": 2,
              "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": 0, "order": "false"}
    topics_json = tmp_path / "store" / "config" / "topics.json"
    try:
        with RawClient(broker.addr) as c:
            for attrs, words in (("+message.type=BOGUS", ("message.type", "BOGUS", "FIFO")),
                                 ("+queue.type=BatchCQ", ("unsupported", "queue.type")),
                                 ("-message.type", ("created", "+key=value")),
                                 ("message.type=FIFO", ("+key=value",)),
                                 ("+message.type=MIXED", ("MIXED", "enableMixedMessageType"))):
                h, _ = c.call(17, {**create, "attributes": attrs})
                assert h["code"] == 29, (attrs, h)          # INVALID_PARAMETER
                assert all(w in h.get("remark", "") for w in words), (attrs, h)
            h, _ = c.call(351, {"topic": "t_attr"})
            assert h["code"] == 17                          # TOPIC_NOT_EXIST: nothing created
            h, _ = c.call(17, {**create, "attributes": "+message.type=FIFO"})
            assert h["code"] == 0, h
            h, body = c.call(351, {"topic": "t_attr"})
            assert h["code"] == 0 and json.loads(body)["attributes"] == {"message.type": "FIFO"}
        on_disk = json.loads(topics_json.read_text())["topicConfigTable"]["t_attr"]
        assert on_disk["attributes"] == {"message.type": "FIFO"}

        proxy = ServerProcess(["proxy", "--namesrv", ns.addr, "--listen", "127.0.0.1:0",
                               "--data-dir", str(tmp_path / "proxy")])
        ch, query = _stub(proxy.addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
        _, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")

        def accepts() -> set:
            req = pb.QueryRouteRequest()
            req.topic.name = "t_attr"
            resp = query(req, metadata=META, timeout=10)
            assert resp.status.code == code("OK"), resp.status
            return {tuple(q.accept_message_types) for q in resp.message_queues}

        def send_one(group: str | None, mid: str) -> int:
            sr = pb.SendMessageRequest()
            m = sr.messages.add(body=b"x")
            m.topic.name = "t_attr"
            m.system_properties.message_id = mid
            if group:
                m.system_properties.message_group = group
            return send(sr, metadata=META, timeout=10).status.code

        assert accepts() == {(pb.enum_value("MessageType", "FIFO"),)}
        assert send_one("g1", "01ATTR-1") == code("OK")
        # a NORMAL message to a FIFO topic: refused as RocketMQ 5's proxy refuses it
        assert send_one(None, "01ATTR-2") == code("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE")

        # a 4.9-style update (no attributes header) changes the queues and keeps the type
        with RawClient(broker.addr) as c:
            h, _ = c.call(17, {**create, "readQueueNums": 4, "writeQueueNums": 4})
            assert h["code"] == 0, h
        on_disk = json.loads(topics_json.read_text())["topicConfigTable"]["t_attr"]
        assert (on_disk["writeQueueNums"], on_disk["attributes"]) == (4, {"message.type": "FIFO"})

        broker.kill()
        broker = start_broker(tmp_path / "store", ns.addr)
        with RawClient(broker.addr) as c:
            h, body = c.call(351, {"topic": "t_attr"})
            assert h["code"] == 0 and json.loads(body)["attributes"] == {"message.type": "FIFO"}
            # removing the attribute makes it a NORMAL topic again
            h, _ = c.call(17, {**create, "attributes": "-message.type"})
            assert h["code"] == 0, h
            h, body = c.call(351, {"topic": "t_attr"})
            assert json.loads(body)["attributes"] == {}
        deadline = time.monotonic() + 30                    # the proxy's cache: 5 s
        while accepts() != {(pb.enum_value("MessageType", "NORMAL"),)}:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert send_one(None, "01ATTR-3") == code("OK")
        ch.close()
    finally:
        for p in (proxy, broker, ns):
            if p is not None:
                p.stop()
