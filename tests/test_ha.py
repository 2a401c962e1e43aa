"""Master/slave replication (rocketstore.ha, docs/replication.md) with real processes on
127.0.0.1: a master (``rocketstore broker`` with ``brokerRole``) under a NameServer and a SLAVE
following it over the HA port (``haMasterAddress`` = master's listen port + 1).

What a user relies on: the slave's commit log is byte-identical to the master's and its
consume queues are the same files; a SYNC_MASTER answers SEND_OK only once the slave holds the
bytes, FLUSH_SLAVE_TIMEOUT (12) for a paused slave and SLAVE_NOT_AVAILABLE (11) for a stopped
one; a slave that was down catches up; a new empty slave takes the master's last file and opens
as a standalone store; after a master kill -9 every SEND_OK message is on the slave; a slave
ahead of its (wiped) master is refused and keeps its bytes.
"""
from __future__ import annotations

import os
import signal
import time
from collections import deque
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.client import Message, Producer, SendStatus
from servers import ServerProcess, start_broker, start_namesrv  # noqa: E402

FILE = 256 * 1024            # small commit-log files: replication crosses file boundaries
BASE = {"mappedFileSizeCommitLog": str(FILE), "haSendHeartbeatInterval": "500",
        "slaveTimeout": "1500"}


def conf(**kw: str) -> dict[str, str]:
    return {**BASE, **kw}


def ha_addr(master: ServerProcess) -> str:
    host, port = master.addr.rsplit(":", 1)
    return f"{host}:{int(port) + 1}"


_started: list[ServerProcess] = []


def _broker(*args, **kw) -> ServerProcess:
    sp = start_broker(*args, **kw)
    _started.append(sp)
    return sp


@pytest.fixture(autouse=True)
def _reap_brokers():
    """A failing test leaves no broker running (a paused one is resumed first)."""
    yield
    while _started:
        sp = _started.pop()
        if sp.proc.poll() is None:
            os.kill(sp.proc.pid, signal.SIGCONT)
            sp.kill()


def start_slave(tmp: Path, master: ServerProcess, **kw: str) -> ServerProcess:
    d = tmp / "slave"
    d.mkdir(exist_ok=True)
    return _broker(d / "store", "", conf(brokerRole="SLAVE", brokerId="1",
                                              haMasterAddress=ha_addr(master), **kw))


def start_master(tmp: Path, ns: ServerProcess, role: str, store: str = "master",
                 listen: str = "127.0.0.1:0") -> ServerProcess:
    d = tmp / store
    d.mkdir(exist_ok=True)
    return _broker(d / "store", ns.addr, conf(brokerRole=role), listen=listen)


def wait_until(pred, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def log_size(store: Path) -> int:
    """Bytes of records in a store's commit log (files end in zeros past the data)."""
    files = sorted(f for f in (store / "commitlog").iterdir() if f.name.isdigit()) \
        if (store / "commitlog").exists() else []
    for f in reversed(files):           # a pre-allocated next file holds only zeros
        data = f.read_bytes().rstrip(b"\0")
        if data:
            return int(f.name) + len(data)
    return 0


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def producer(ns: ServerProcess, timeout_ms: int = 10_000) -> Producer:
    return Producer("ha-test-group", namesrv_addr=ns.addr, send_msg_timeout=timeout_ms,
                    retry_times_when_send_failed=0).start()


def mixed_sends(p: Producer, n: int, topic: str = "HaTopic") -> list:
    """``n`` messages: single sends of varied sizes, tags and keys, and batches of 50;
    pipelined (futures). Returns the SendResults."""
    futs = []
    i = 0
    while i < n:
        if i % 1000 < 500:
            body = (b"m%07d-" % i) * (1 + i % 37)
            futs.append(p.send_future(Message(topic, body, tags=f"T{i % 5}", keys=f"k{i}")))
            i += 1
        else:
            k = min(50, n - i)
            futs.append(p.send_batch_future([Message(topic, b"b%07d" % (i + j)) for j in range(k)]))
            i += k
    return [f.result(60) for f in futs]


@pytest.fixture
def ns(tmp_path):
    srv = start_namesrv(tmp_path)
    yield srv
    srv.stop()


def _replicated_identical(tmp_path, ns, n):
    master = start_master(tmp_path, ns, "SYNC_MASTER")
    slave = start_slave(tmp_path, master)
    p = producer(ns)
    try:
        results = mixed_sends(p, n)
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        # SEND_OK under SYNC_MASTER: the slave already holds every byte of it
        end = max(int(r.offset_msg_id.split(",")[-1][-16:], 16) for r in results)
        assert log_size(tmp_path / "slave" / "store") > end
    finally:
        p.shutdown()
    assert master.stop() == 0
    assert slave.stop() == 0
    m, s = tmp_path / "master" / "store", tmp_path / "slave" / "store"
    assert log_size(m) > 3 * FILE            # several files replicated
    assert tree(m / "commitlog") == tree(s / "commitlog")
    assert tree(m / "consumequeue") == tree(s / "consumequeue")
    # the slave's store opens on its own and serves the same messages
    with MessageStore.open(s, StoreConfig(mapped_file_size_commit_log=FILE)) as st:
        assert sum(q.max_offset for q in st.list_queues("HaTopic")) == n


def test_sync_master_slave_byte_identical(tmp_path, ns):
    _replicated_identical(tmp_path, ns, 10_000)


@pytest.mark.stress
def test_sync_master_slave_byte_identical_100k(tmp_path, ns):
    _replicated_identical(tmp_path, ns, 100_000)


def test_paused_slave_12_stopped_slave_11_then_catch_up(tmp_path, ns):
    master = start_master(tmp_path, ns, "SYNC_MASTER")
    slave = start_slave(tmp_path, master)
    s_store = tmp_path / "slave" / "store"
    p = producer(ns)
    try:
        assert p.send(Message("HaTopic", b"first")).status == SendStatus.SEND_OK
        # paused slave: the connection stays up, no ack comes -> FLUSH_SLAVE_TIMEOUT after
        # slaveTimeout, and the message is stored on the master
        os.kill(slave.proc.pid, signal.SIGSTOP)
        try:
            before = log_size(s_store)
            m_before = log_size(tmp_path / "master" / "store")
            t0 = time.monotonic()
            r = p.send(Message("HaTopic", b"while paused"))
            waited = time.monotonic() - t0
            assert r.status == SendStatus.FLUSH_SLAVE_TIMEOUT
            # stored on the master: the answer names it, as SEND_OK does
            assert r.offset_msg_id is not None and r.queue_offset >= 0
            assert waited >= 1.0                                  # it waited for the ack
            assert log_size(tmp_path / "master" / "store") > m_before   # stored there
            assert log_size(s_store) == before
        finally:
            os.kill(slave.proc.pid, signal.SIGCONT)
        m_size = lambda: log_size(tmp_path / "master" / "store")  # noqa: E731
        wait_until(lambda: log_size(s_store) == m_size(), what="slave resumes")
        assert p.send(Message("HaTopic", b"resumed")).status == SendStatus.SEND_OK
        # stopped slave: the master sees the close -> SLAVE_NOT_AVAILABLE without waiting
        assert slave.stop() == 0
        wait_until(lambda: p.send(Message("HaTopic", b"probe")).status
                   == SendStatus.SLAVE_NOT_AVAILABLE, what="code 11")
        down = mixed_sends(p, 600)
        assert {r.status for r in down} == {SendStatus.SLAVE_NOT_AVAILABLE}
        # restarted: reports its recovered end, the master streams the rest
        slave = start_slave(tmp_path, master)
        wait_until(lambda: p.send(Message("HaTopic", b"back")).status == SendStatus.SEND_OK,
                   what="slave back")
    finally:
        p.shutdown()
    assert master.stop() == 0
    assert slave.stop() == 0
    m = tmp_path / "master" / "store"
    assert tree(m / "commitlog") == tree(s_store / "commitlog")
    assert tree(m / "consumequeue") == tree(s_store / "consumequeue")


def test_async_master_never_waits(tmp_path, ns):
    master = start_master(tmp_path, ns, "ASYNC_MASTER")
    p = producer(ns)
    try:
        # no slave at all: ASYNC_MASTER answers SEND_OK (a SYNC_MASTER would answer 11)
        assert {r.status for r in mixed_sends(p, 300)} == {SendStatus.SEND_OK}
    finally:
        p.shutdown()
    assert master.stop() == 0


def test_new_empty_slave_gets_last_file_and_opens_standalone(tmp_path, ns):
    master = start_master(tmp_path, ns, "ASYNC_MASTER")
    p = producer(ns)
    try:
        mixed_sends(p, 4000)            # several files of history
        m = tmp_path / "master" / "store"
        files = sorted(f.name for f in (m / "commitlog").iterdir())
        assert len(files) >= 3
        slave = start_slave(tmp_path, master)
        s = tmp_path / "slave" / "store"
        wait_until(lambda: log_size(s) == log_size(m), what="slave caught up")
        mixed_sends(p, 200)             # live traffic after the catch-up
        wait_until(lambda: log_size(s) == log_size(m), what="slave follows")
    finally:
        p.shutdown()
    assert slave.stop() == 0
    assert master.stop() == 0
    m_files = sorted((m / "commitlog").iterdir())
    s_files = sorted((s / "commitlog").iterdir())
    # only the master's last file at the time it connected, and what followed
    assert s_files[0].name in files and s_files[0].name == files[-1]
    for f in s_files:
        assert f.read_bytes() == (m / "commitlog" / f.name).read_bytes()
    assert len(m_files) > len(s_files)
    with MessageStore.open(s, StoreConfig(mapped_file_size_commit_log=FILE)) as st, \
            MessageStore.open(m, StoreConfig(mapped_file_size_commit_log=FILE)) as mt:
        for q in mt.list_queues("HaTopic"):
            assert st.get_max_offset_in_queue("HaTopic", q.queue_id) == q.max_offset
            lo = st.get_min_offset_in_queue("HaTopic", q.queue_id)
            assert lo > 0           # history before the slave's first file is not there
            got = st.get_message("g", "HaTopic", q.queue_id, lo, 4)
            want = mt.get_message("g", "HaTopic", q.queue_id, lo, 4)
            assert [x.body for x in got.messages] == [x.body for x in want.messages]


def test_master_kill9_sync_master_every_send_ok_on_slave(tmp_path, ns):
    master = start_master(tmp_path, ns, "SYNC_MASTER")
    slave = start_slave(tmp_path, master)
    p = producer(ns, timeout_ms=3000)
    ok: dict[int, bytes] = {}
    window: deque = deque()

    def settle() -> None:
        body, f = window.popleft()
        try:
            r = f.result(30)
        except Exception:  # noqa: BLE001 - sends to a dead master fail: fine
            return
        if r.status == SendStatus.SEND_OK:
            ok[int(r.offset_msg_id[-16:], 16)] = body
    try:
        i = killed_at = 0
        while not killed_at or i < killed_at + 200:
            body = b"kill-%06d" % i
            window.append((body, p.send_future(Message("HaTopic", body, keys=f"k{i}"))))
            i += 1
            if len(window) >= 32:           # 32 sends in flight
                settle()
            if not killed_at and len(ok) >= 1000:
                master.kill()               # SIGKILL with sends in flight
                killed_at = i
        while window:
            settle()
    finally:
        p.shutdown()
    assert len(ok) >= 1000
    assert slave.stop() == 0
    with MessageStore.open(tmp_path / "slave" / "store",
                           StoreConfig(mapped_file_size_commit_log=FILE)) as st:
        for offset, body in ok.items():
            got = st.look_message_by_offset(offset)
            assert got is not None and got.body == body, offset


def test_slave_ahead_of_wiped_master_is_refused_and_keeps_its_bytes(tmp_path, ns):
    master = start_master(tmp_path, ns, "ASYNC_MASTER")
    slave = start_slave(tmp_path, master)
    p = producer(ns)
    s = tmp_path / "slave" / "store"
    try:
        mixed_sends(p, 500)
        m = tmp_path / "master" / "store"
        wait_until(lambda: log_size(s) == log_size(m) > 0, what="replicated")
        ahead = log_size(s)
        kept = tree(s / "commitlog")
        addr = master.addr
        assert master.stop() == 0
        # the master comes back on the same port with a new, empty store
        master = start_master(tmp_path, ns, "SYNC_MASTER", store="master2", listen=addr)
        # 4.9.8 has no truncation protocol: the master refuses a slave reporting beyond its
        # end (closes the connection at its next report) and sends nothing
        wait_until(lambda: "beyond this commit log's end" in master.output, what="refusal")
        # and a report past its end acknowledges nothing: its own sends are not counted
        r = p.send(Message("HaTopic", b"new history"))
        assert r.status in (SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE)
        assert log_size(s) == ahead
    finally:
        p.shutdown()
    assert master.stop() == 0
    assert slave.stop() == 0
    assert tree(s / "commitlog") == kept


def test_slave_kill9_mid_stream_recovers_and_catches_up(tmp_path, ns):
    """A slave killed while frames arrive (its log may end inside a record) recovers on
    restart, reports its recovered end, and becomes byte-identical again."""
    master = start_master(tmp_path, ns, "ASYNC_MASTER")
    slave = start_slave(tmp_path, master)
    s, m = tmp_path / "slave" / "store", tmp_path / "master" / "store"
    p = producer(ns)
    try:
        futs = [p.send_future(Message("HaTopic", b"%06d" % i * 300)) for i in range(1500)]
        wait_until(lambda: log_size(s) > 100_000, what="replicating")
        slave.kill()
        futs += [p.send_future(Message("HaTopic", b"%06d" % i * 300)) for i in range(1500)]
        assert {f.result(60).status for f in futs} == {SendStatus.SEND_OK}
        slave = start_slave(tmp_path, master)
        wait_until(lambda: log_size(s) == log_size(m), what="caught up")
    finally:
        p.shutdown()
    assert slave.stop() == 0
    assert master.stop() == 0
    assert tree(m / "commitlog") == tree(s / "commitlog")
    assert tree(m / "consumequeue") == tree(s / "consumequeue")


def test_async_master_kill9_loss_window(tmp_path):
    """ASYNC_MASTER's loss window (tools/bench_ha.py --loss-window): steady sends, the master
    killed -9 mid-stream. The slave holds a byte-identical prefix of the master's commit log,
    every message on it was sent (none invented, none twice), every SEND_OK message below its
    end is on it, and the SEND_OK messages beyond (the window) are on the master's disk."""
    import importlib
    import sys
    tools = str(Path(__file__).resolve().parent.parent / "tools")
    sys.path.insert(0, tools)
    try:
        bench_ha = importlib.import_module("bench_ha")
    finally:
        sys.path.remove(tools)
    res = bench_ha.loss_window(tmp_path, rate=1000, seconds=1.5, file_size=FILE)
    assert len(res.ok) >= 1000 and res.failed > 0          # killed mid-stream
    assert res.slave_end > 0
    m_log, s_log = res.master_store / "commitlog", res.slave_store / "commitlog"
    for f in sorted(p for p in s_log.iterdir() if p.name.isdigit()):
        start = int(f.name)
        if start >= res.slave_end:
            continue
        n = min(FILE, res.slave_end - start)
        assert f.read_bytes()[:n] == (m_log / f.name).read_bytes()[:n], f.name
    sent = set(res.sent)
    ok = {off: body for off, body, _ in res.ok}
    with MessageStore.open(res.slave_store, StoreConfig(mapped_file_size_commit_log=FILE),
                           read_only=True) as st:
        on_slave = [(m.commitlog_offset, bytes(m.body)) for m in st.iter_messages()
                    if m.topic == "BenchHaLoss"]
    bodies = [b for _, b in on_slave]
    assert len(bodies) == len(set(bodies)) and set(bodies) <= sent
    held = dict(on_slave)
    for off, body in ok.items():
        if off < res.slave_end:
            assert held.get(off) == body, off
    assert bench_ha.on_master_disk(res) == len(res.absent)
    assert "covering" in bench_ha.loss_report(res, 1000)
