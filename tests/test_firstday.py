"""A user's first day (issue 23): the tools agree with the store they look at.

* ``verify`` and ``recover`` use the store's own delay table (``config/broker.properties``,
  written by the broker at start, or ``--delay-levels``), so a clean demo store verifies, and
  recover rebuilds the delayed messages' consume-queue units (their tags code is the delivery
  time) exactly as the broker wrote them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, check_rc: int | None = 0, env: dict[str, str] | None = None,
        cwd: str | Path = REPO) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    e.pop("ROCKETSTORE_TRACEBACK", None)
    e.pop("NAMESRV_ADDR", None)
    e.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "rocketstore", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def schedule_units(root: Path) -> dict[str, bytes]:
    """Every SCHEDULE_TOPIC_XXXX consume-queue file's bytes (units carry delivery times)."""
    base = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX"
    return {str(p.relative_to(base)): p.read_bytes().rstrip(b"\0")
            for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """``rocketstore demo --keep`` (small): one-second delay levels, a delayed message and
    retries (both through SCHEDULE_TOPIC_XXXX)."""
    d = tmp_path_factory.mktemp("demo") / "demo"
    run("demo", "--keep", "--dir", str(d), "--messages", "300", "--queues", "2",
        "--file-size", str(1 << 20))
    return d


# -- 1. the delay table ---------------------------------------------------------------------

def test_demo_store_verifies_clean(demo_store):
    assert schedule_units(demo_store), "the demo wrote no delayed message"
    props = (demo_store / "config" / "broker.properties").read_text()
    assert "messageDelayLevel=" + " ".join(["1s"] * 18) in props.splitlines()
    p = run("verify", str(demo_store), check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert p.stdout.rstrip().endswith(": OK")


def test_stat_names_the_delay_table(demo_store):
    doc = json.loads(run("stat", str(demo_store), "--json").stdout)
    assert doc["delay_levels"] == {"levels": " ".join(["1s"] * 18),
                                   "source": "config/broker.properties"}
    text = run("stat", str(demo_store)).stdout
    assert "delays" in text and "config/broker.properties" in text


def test_recover_keeps_delivery_times(demo_store, tmp_path):
    import shutil
    copy = tmp_path / "demo"
    shutil.copytree(demo_store, copy)
    before = schedule_units(copy)
    run("recover", str(copy))
    assert schedule_units(copy) == before
    run("verify", str(copy))


def test_rocketmq_fixture_verifies_clean(rocketmq_store):
    # RocketMQ 4.9.8 wrote it with its default levels and no broker.properties
    p = run("verify", rocketmq_store, check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:]
    doc = json.loads(run("stat", rocketmq_store, "--json").stdout)
    assert doc["delay_levels"]["source"] == "default"


@pytest.fixture(scope="module")
def custom_store(tmp_path_factory) -> Path:
    """A broker store written with a custom messageDelayLevel whose broker.properties is gone
    (as a RocketMQ broker started with -c elsewhere leaves it)."""
    from rocketstore import StoreConfig
    from rocketstore.broker import Broker, BrokerConfig
    from rocketstore.client import Message, Producer
    root = tmp_path_factory.mktemp("custom") / "store"
    levels = "3s 7s 2m 1h"
    with Broker.open(root, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20,
                                                       message_delay_level=levels)) as broker:
        p = Producer("pg", broker=broker).start()
        try:
            for i in range(20):
                p.send(Message("Later", b"x%d" % i, properties={"DELAY": str(1 + i % 4)}))
        finally:
            p.shutdown()
    assert f"messageDelayLevel={levels}" in (root / "config" / "broker.properties").read_text()
    (root / "config" / "broker.properties").unlink()
    return root


def test_custom_levels_without_a_record_need_the_option(custom_store):
    p = run("verify", str(custom_store), check_rc=1)
    assert "--delay-levels" in p.stdout
    p = run("verify", str(custom_store), "--delay-levels", "3s 7s 2m 1h", check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:]
    doc = json.loads(run("stat", str(custom_store), "--json", "--delay-levels",
                         "3s 7s 2m 1h").stdout)
    assert doc["delay_levels"] == {"levels": "3s 7s 2m 1h", "source": "--delay-levels"}
    text = run("stat", str(custom_store)).stdout
    assert "--delay-levels" in text          # it cannot know: it says how to tell it


def test_recover_with_custom_levels(custom_store, tmp_path):
    import shutil
    copy = tmp_path / "store"
    shutil.copytree(custom_store, copy)
    before = schedule_units(copy)
    run("recover", str(copy), "--delay-levels", "3s 7s 2m 1h")
    assert schedule_units(copy) == before
    run("verify", str(copy), "--delay-levels", "3s 7s 2m 1h")


def test_bad_delay_levels_option_is_one_line(demo_store):
    p = run("verify", str(demo_store), "--delay-levels", "1s 5x", check_rc=2)
    assert "5x" in p.stderr and len(p.stderr.strip().splitlines()) == 1


# -- 2. one msg_id --------------------------------------------------------------------------

def _consume(consumer_cls, n: int, **kw) -> list:
    """``n`` messages of topic Ids polled from the first offset (a PullConsumer)."""
    import time
    c = consumer_cls("g-ids", consume_from_where="CONSUME_FROM_FIRST_OFFSET", **kw)
    c.subscribe("Ids")
    c.start()
    got: list = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += c.poll(1000)
    finally:
        c.shutdown()
    return got


def _check_ids(sent, got) -> None:
    assert len(got) == len(sent)
    by_body = {bytes(m.body): m for m in got}
    for r, body in sent:
        m = by_body[body]
        assert m.msg_id == r.msg_id                 # what send() returned: the UNIQ_KEY
        assert m.msg_id == m.uniq_key
        assert m.offset_msg_id == r.offset_msg_id   # the broker's offset id beside it


def test_consumer_msg_id_is_what_send_returned_in_process(tmp_path):
    import threading
    from rocketstore.broker import Broker, BrokerConfig
    from rocketstore.client import (ConsumeConcurrentlyStatus, Message, Producer,
                                    PullConsumer, PushConsumer)
    with Broker.open(tmp_path / "store", BrokerConfig()) as broker:
        with Producer("pg", broker=broker) as p:
            sent = [(p.send(Message("Ids", b"m%d" % i)), b"m%d" % i) for i in range(5)]
        _check_ids(sent, _consume(PullConsumer, 5, broker=broker))
        pushed: list = []
        done = threading.Event()

        def listener(msgs, ctx):
            pushed.extend(m.copy() for m in msgs)   # a copy keeps the consumer's view
            if len(pushed) >= 5:
                done.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        c = PushConsumer("g-push", broker=broker, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("Ids", "*")
        c.register_message_listener(listener)
        c.start()
        try:
            assert done.wait(30)
        finally:
            c.shutdown()
        _check_ids(sent, pushed)
        # the store's own reading keeps RocketMQ's MessageExt.getMsgId: the offset id
        m = broker.store.look_message_by_id(sent[0][0].offset_msg_id)
        assert m.msg_id == m.offset_msg_id == sent[0][0].offset_msg_id
        assert not m.is_client_message


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    from servers import start_broker, start_namesrv
    tmp = tmp_path_factory.mktemp("wire")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr)
    try:
        yield ns, broker
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


def test_consumer_msg_id_is_what_send_returned_over_tcp(wire):
    from rocketstore.client import Message, Producer, PullConsumer
    ns, _ = wire
    with Producer("pg", namesrv_addr=ns.addr) as p:
        sent = [(p.send(Message("Ids", b"w%d" % i)), b"w%d" % i) for i in range(5)]
    _check_ids(sent, _consume(PullConsumer, 5, namesrv_addr=ns.addr))


def _admin(*argv: str, rc: int = 0, env: dict[str, str] | None = None):
    p = run("admin", *argv, check_rc=rc, env=env)
    return p


def _until(fn, what: str, timeout: float = 30.0):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_query_msg_by_id_falls_back_to_the_uniq_key(wire):
    from rocketstore.client import Message, Producer
    ns, broker = wire
    bport = int(broker.addr.rsplit(":", 1)[1])
    nport = int(ns.addr.rsplit(":", 1)[1])
    # client ids that read as offset ids: 127.0.0.1 + a port + an offset. One names the
    # broker at an offset where no record starts, one the NameServer (no broker), one a
    # port beyond 65535; each must be found as the UNIQ_KEY it is
    keys = [f"7F000001{bport:08X}{1:016X}", f"7F000001{nport:08X}{64:016X}",
            f"7F000001{0x12345678:08X}{0:016X}"]
    with Producer("pg", namesrv_addr=ns.addr) as p:
        sent = [p.send(Message("ByUniq", b"u%d" % i, properties={"UNIQ_KEY": k}))
                for i, k in enumerate(keys)]
    assert [r.msg_id for r in sent] == keys
    for i, (k, r) in enumerate(zip(keys, sent)):
        def found():
            p = _admin("queryMsgById", "-n", ns.addr, "-i", k, "-t", "ByUniq", "--json",
                       rc=None)
            return json.loads(p.stdout) if p.returncode == 0 else None
        doc = _until(found, f"{k} indexed")
        assert doc["msgId"] == k and doc["offsetMsgId"] == r.offset_msg_id
        assert doc["body"] == f"u{i}"
    # the offset id itself still works, without -t
    doc = json.loads(_admin("queryMsgById", "-n", ns.addr, "-i", sent[0].offset_msg_id,
                            "--json").stdout)
    assert doc["msgId"] == keys[0] and doc["offsetMsgId"] == sent[0].offset_msg_id
    # a UNIQ_KEY without -t: mqadmin needs the topic for the index; say so
    err = _admin("queryMsgById", "-n", ns.addr, "-i", keys[0], rc=2).stderr
    assert "-t TOPIC" in err and len(err.strip().splitlines()) == 1


# -- 7. a 5.x client gets a clear answer ----------------------------------------------------

def _grpc_hello(addr: str) -> bytes:
    """What a RocketMQ 5.x (gRPC) client sends first: the HTTP/2 preface and a SETTINGS
    frame. Returns what the server sent back before closing."""
    from rawwire import RawClient
    c = RawClient(addr)
    try:
        c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        got = b""
        while True:
            chunk = c.sock.recv(4096)
            if not chunk:
                return got
            got += chunk
    finally:
        c.sock.close()


@pytest.mark.parametrize("server", ["namesrv", "broker"])
def test_grpc_client_is_named_and_closed(wire, server):
    ns, broker = wire
    proc = ns if server == "namesrv" else broker
    assert _grpc_hello(proc.addr) == b""          # closed, nothing sent back
    line = _until(lambda: [ln for ln in proc.log if "gRPC (RocketMQ 5.x client)" in ln],
                  "the server's log line")
    assert len(line) == 1 and "not served on this port" in line[0]
    assert not any("frame length 1347569952" in ln for ln in proc.log)
    # the server goes on serving remoting clients
    from rawwire import RawClient, frame
    c = RawClient(proc.addr)
    try:
        c.send(frame(105 if server == "namesrv" else 28, {"topic": "TBW102"}
                     if server == "namesrv" else {}))
        header, _ = c.read_frame()
        assert "code" in header
    finally:
        c.sock.close()


def test_frame_decoder_names_foreign_openings_only_at_the_start():
    from rocketstore.errors import RemotingProtocolError
    from rocketstore.remoting.command import FrameDecoder, RemotingCommand
    d = FrameDecoder()
    with pytest.raises(RemotingProtocolError, match=r"gRPC \(RocketMQ 5.x client\)"):
        d.feed(b"PRI ")                   # four bytes are enough to tell
    d = FrameDecoder()
    with pytest.raises(RemotingProtocolError, match="TLS handshake"):
        d.feed(b"\x16\x03\x01\x02\x00\x01\xfc\x03\x03")
    # after a good frame, the same bytes are only a bad length
    d = FrameDecoder()
    good = RemotingCommand.request(28, {}).encode()
    assert len(d.feed(good)) == 1
    with pytest.raises(RemotingProtocolError, match="frame length 1347569952 outside"):
        d.feed(b"PRI * HTTP/2.0")


# -- 6. the CLI ----------------------------------------------------------------------------

def _all_parsers():
    """(prog, parser) of the command and every subcommand, however deep."""
    import argparse
    from rocketstore.cli import build_parser
    todo = [build_parser()]
    while todo:
        p = todo.pop()
        yield p.prog, p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo.extend(dict.fromkeys(a.choices.values()))


def test_every_option_has_help():
    import argparse
    missing = [f"{prog} {'/'.join(a.option_strings) or a.dest}"
               for prog, p in _all_parsers() for a in p._actions
               if not isinstance(a, argparse._SubParsersAction)
               and a.help != argparse.SUPPRESS and not (a.help or "").strip()]
    assert missing == []


def test_unknown_flag_names_its_subcommand(demo_store):
    err = run("stat", str(demo_store), "--bogus", check_rc=2).stderr
    assert err.startswith("rocketstore stat: unrecognized arguments: --bogus")
    assert "rocketstore stat --help" in err
    err = run("admin", "clusterList", "-n", "127.0.0.1:1", "--bogus", check_rc=2).stderr
    assert err.startswith("rocketstore admin clusterList: unrecognized arguments: --bogus")
    err = run("offsets", "show", str(demo_store), "--bogus", check_rc=2).stderr
    assert err.startswith("rocketstore offsets show: unrecognized arguments")


def test_stat_says_the_disk_actually_used(tmp_path):
    from rocketstore import Message, MessageStore, StoreConfig
    root = tmp_path / "sparse"
    with MessageStore.open(str(root), StoreConfig(mapped_file_size_commit_log=64 << 20,
                                                  allocation_extent=1 << 20)) as store:
        store.put_message(Message("T", b"x" * 100), 0)
    cl = json.loads(run("stat", str(root), "--json").stdout)["commit_log"]
    files = list((root / "commitlog").iterdir())
    du = sum(p.stat().st_blocks * 512 for p in files)
    assert cl["bytes_on_disk"] == du < 64 << 20          # what du says, not the file length
    assert cl["file_bytes"] == sum(p.stat().st_size for p in files)
    assert f"{du:,} bytes on disk" in run("stat", str(root)).stdout


def test_offsets_show_and_reset_json(demo_store, tmp_path):
    import shutil
    doc = json.loads(run("offsets", "show", str(demo_store), "--group", "demo-orders",
                         "--json").stdout)
    assert doc and {"group", "topic", "queue", "offset", "min", "max", "lag"} <= doc[0].keys()
    assert {d["group"] for d in doc} == {"demo-orders"}
    copy = tmp_path / "d"
    shutil.copytree(demo_store, copy)
    doc = json.loads(run("offsets", "reset", str(copy), "--group", "demo-orders", "--topic",
                         "Orders", "--to-earliest", "--dry-run", "--json").stdout)
    assert [d["new"] for d in doc] == [d["min"] for d in doc]


def test_dlq_list_with_nothing_exits_0(demo_store):
    p = run("dlq", "list", str(demo_store), "--group", "nobody")
    assert "no dead letters for group nobody" in p.stdout
    assert run("dlq", "list", str(demo_store), "--group", "nobody", "--json").stdout == ""


def test_failed_import_leaves_no_store(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"topic": "T", "queue_id": 0}\n')          # no body
    target = tmp_path / "new-store"
    err = run("import", str(target), str(bad), check_rc=2).stderr
    assert "missing field 'body'" in err
    assert not target.exists()
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    run("import", str(empty), str(bad), check_rc=2)
    assert list(empty.iterdir()) == []


@pytest.fixture(scope="module")
def acl_wire(tmp_path_factory):
    """A broker with plain ACL on: one admin account."""
    from servers import start_broker, start_namesrv
    tmp = tmp_path_factory.mktemp("acl")
    acl = tmp / "plain_acl.yml"
    acl.write_text("globalWhiteRemoteAddresses: []\naccounts:\n"
                   "  - accessKey: rocketAdmin\n    secretKey: s3cret-admin\n"
                   "    whiteRemoteAddress:\n    admin: true\n    defaultTopicPerm: PUB|SUB\n"
                   "    defaultGroupPerm: PUB|SUB\n")
    ns = start_namesrv(tmp)
    broker = start_broker(tmp / "store", ns.addr, conf={"aclEnable": "true",
                                                        "aclFile": str(acl)})
    try:
        yield ns, broker
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0


def test_admin_against_a_secured_broker(acl_wire):
    ns, broker = acl_wire
    argv = ("updateTopic", "-b", broker.addr, "-t", "Secured", "-r", "2", "-w", "2")
    err = _admin(*argv, "-n", ns.addr, rc=2).stderr            # unsigned: refused
    assert len(err.strip().splitlines()) == 1
    _admin(*argv, "-n", ns.addr, "--access-key", "rocketAdmin", "--secret-key", "s3cret-admin")
    # the same from the environment, NameServer from NAMESRV_ADDR as mqadmin reads it
    env = {"NAMESRV_ADDR": ns.addr, "ROCKETSTORE_ACCESS_KEY": "rocketAdmin",
           "ROCKETSTORE_SECRET_KEY": "s3cret-admin"}
    out = _admin("sendMessage", "-t", "Secured", "-p", "hi", "--json", env=env).stdout
    assert json.loads(out)["status"] == "SEND_OK"
    doc = json.loads(_admin("brokerStatus", "-b", broker.addr, "--json", env=env).stdout)
    assert doc
    err = _admin("brokerStatus", "-b", broker.addr, env={"ROCKETSTORE_ACCESS_KEY": "x"},
                 rc=2).stderr
    assert "--secret-key (or ROCKETSTORE_SECRET_KEY)" in err


def test_admin_names_the_nameserver():
    err = _admin("clusterList", "-n", "127.0.0.1:1", rc=2).stderr
    assert "NameServer '127.0.0.1:1'" in err and "broker" not in err
    err = _admin("topicList", rc=2).stderr
    assert "NAMESRV_ADDR" in err
