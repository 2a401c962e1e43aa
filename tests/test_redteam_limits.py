"""Red team, issue 20 items 6 and 7: no request may grow a server's memory without bound or
freeze the other clients (docs/protocol.md "Limits").

Real ``rocketstore namesrv``/``broker`` processes, attacked with hand-built frames
(tests/rawwire.py). Memory is the server's VmRSS from /proc; no assertion is timed tightly:
"answered" is asserted, with bounds (5 s) far above what a healthy server needs.
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib
from pathlib import Path

import pytest

from rawwire import RawClient, frame
from servers import start_broker, start_namesrv

SEND_MESSAGE, PULL_MESSAGE, UPDATE_AND_CREATE_TOPIC = 10, 11, 17
VIEW_MESSAGE_BY_ID, PUT_KV_CONFIG, REGISTER_BROKER = 33, 100, 103
GET_ROUTEINFO_BY_TOPIC, GET_TOPIC_STATS_INFO, GET_MAX_OFFSET = 105, 202, 30
SUCCESS, SYSTEM_BUSY = 0, 2
MIB = 1 << 20


def rss(pid: int) -> int:
    """The process's resident set in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class RssPeak:
    """Samples a process's RSS every 10 ms on a thread (a frozen server is sampled too)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = self.peak = rss(pid)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            try:
                self.peak = max(self.peak, rss(self.pid))
            except (OSError, AssertionError):
                return

    def stop(self) -> int:
        """Stop sampling; the growth over the baseline in bytes."""
        self._stop.set()
        self._t.join()
        return self.peak - self.baseline


def send_fields(topic: str) -> dict[str, object]:
    return {"producerGroup": "PG_redteam", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
            "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}


def send(client: RawClient, topic: str, body: bytes) -> dict:
    header, _ = client.call(SEND_MESSAGE, send_fields(topic), body)
    return header


def create_topic(client: RawClient, topic: str, queues: int) -> None:
    header, _ = client.call(UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
        "writeQueueNums": queues, "perm": 6, "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0, "order": "false"})
    assert header["code"] == SUCCESS, header


def flood(addr: str, frames: bytes, seconds: float) -> socket.socket:
    """A socket that sends ``frames`` (as much as the server takes within ``seconds``) and
    never reads; returned open (the caller closes it)."""
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(seconds)
    try:
        sock.sendall(frames)
    except (socket.timeout, OSError):
        pass        # the server stopped reading: what it holds is what we measure
    return sock


@pytest.fixture
def cluster(tmp_path: Path):
    ns = start_namesrv(tmp_path)
    started = []

    def broker(conf: dict[str, str] | None = None):
        b = start_broker(tmp_path / "store", ns.addr, conf)
        started.append(b)
        return b
    try:
        yield ns, broker
    finally:
        for b in started:
            b.stop()
        ns.stop()


# -- item 6: bounded memory per connection ------------------------------------------------------

def test_view_flood_from_connections_that_never_read_keeps_memory_bounded(cluster) -> None:
    ns, start = cluster
    broker = start()
    with RawClient(broker.addr) as c:
        h = send(c, "RedteamBig", b"v" * MIB)
        assert h["code"] == SUCCESS, h
        offset = int(h["extFields"]["msgId"][-16:], 16)
        mem = RssPeak(broker.proc.pid)
        frames = b"".join(frame(VIEW_MESSAGE_BY_ID, {"offset": offset}) for _ in range(2000))
        socks: list[socket.socket] = []
        ts = [threading.Thread(target=lambda: socks.append(flood(broker.addr, frames, 8.0)))
              for _ in range(2)]
        for t in ts:
            t.start()
        answered = 0
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline:
            h, _ = c.call(GET_MAX_OFFSET, {"topic": "RedteamBig", "queueId": 0})
            assert h["code"] == SUCCESS
            answered += 1
            time.sleep(0.1)
        for t in ts:
            t.join()
        grew = mem.stop()
        for s in socks:
            s.close()
    print(f"\nVIEW flood: broker RSS {mem.baseline / MIB:.0f} MB -> peak {mem.peak / MIB:.0f} "
          f"MB; {answered} calls of a third client answered")
    assert grew < 300 * MIB, f"RSS grew {grew / MIB:.0f} MB"


def test_namesrv_zlib_bomb_is_refused_with_bounded_memory(cluster) -> None:
    ns, _ = cluster
    comp = zlib.compressobj(9)
    zero = bytes(MIB)
    bomb = b"".join(comp.compress(zero) for _ in range(512)) + comp.flush()     # 512 MiB
    fields = {"brokerName": "evil", "brokerAddr": "10.0.0.1:10911", "clusterName": "C",
              "haServerAddr": "10.0.0.1:10912", "brokerId": 0, "compressed": "true",
              "bodyCrc32": 0}
    mem = RssPeak(ns.proc.pid)
    result: dict[str, object] = {}

    def attack() -> None:
        with RawClient(ns.addr, timeout=60) as evil:
            result["answer"] = evil.call(REGISTER_BROKER, fields, bomb)[0]
    t = threading.Thread(target=attack)
    t.start()
    with RawClient(ns.addr, timeout=30) as other:
        while t.is_alive():
            h, _ = other.call(GET_ROUTEINFO_BY_TOPIC, {"topic": "AnyTopic"})
            assert h["code"] == 17          # TOPIC_NOT_EXIST: answered meanwhile
            time.sleep(0.02)
        t.join()
        h, _ = other.call(GET_ROUTEINFO_BY_TOPIC, {"topic": "AnyTopic"})
        assert h["code"] == 17
    grew = mem.stop()
    answer = result["answer"]
    print(f"\nzlib bomb ({len(bomb)} B): namesrv RSS {mem.baseline / MIB:.0f} MB -> peak "
          f"{mem.peak / MIB:.0f} MB; answer {answer.get('code')} {answer.get('remark')!r}")
    assert grew < 100 * MIB, f"RSS grew {grew / MIB:.0f} MB"
    assert answer["code"] != SUCCESS
    assert "inflates past" in answer["remark"]


# -- item 7: no request freezes the others -------------------------------------------------------

def stats_flood(addr: str, topic: str, n: int, answers: list[int]) -> threading.Thread:
    """One socket pipelining ``n`` GET_TOPIC_STATS_INFO, its answers read on a thread."""
    client = RawClient(addr, timeout=120)
    client.send(b"".join(frame(GET_TOPIC_STATS_INFO, {"topic": topic}) for _ in range(n)))

    def drain() -> None:
        try:
            for _ in range(n):
                answers.append(client.read_response()[0]["code"])
        finally:
            client.close()
    t = threading.Thread(target=drain)
    t.start()
    return t


def test_sends_keep_being_answered_during_an_admin_flood(cluster) -> None:
    ns, start = cluster
    broker = start()
    with RawClient(broker.addr, timeout=60) as c:
        # BenchmarkTest: 1,024 queues, registered at start as by 4.9.8
        assert send(c, "RedteamSend", b"warm")["code"] == SUCCESS
        answers: list[int] = []
        t = stats_flood(broker.addr, "BenchmarkTest", 1000, answers)
        lat = []
        while t.is_alive() and len(lat) < 2000:
            t0 = time.monotonic()
            h = send(c, "RedteamSend", b"during the flood")
            lat.append(time.monotonic() - t0)
            assert h["code"] == SUCCESS
        t.join()
    lat.sort()
    print(f"\nsends during 1,000 GET_TOPIC_STATS_INFO: {len(lat)} sends, p50 "
          f"{lat[len(lat) // 2] * 1e3:.1f} ms, p99 {lat[int(len(lat) * .99)] * 1e3:.1f} ms, "
          f"max {lat[-1] * 1e3:.1f} ms; stats answers {len(answers)}")
    assert len(answers) == 1000 and set(answers) <= {SUCCESS, SYSTEM_BUSY}
    assert lat[-1] < 5.0, f"a send waited {lat[-1]:.1f} s"


def test_a_full_executor_answers_system_busy(cluster) -> None:
    ns, start = cluster
    broker = start({"adminBrokerThreadPoolNums": "1", "adminBrokerThreadPoolQueueCapacity": "1"})
    with RawClient(broker.addr, timeout=60) as c:
        # BenchmarkTest: 1,024 queues, registered at start as by 4.9.8
        answers: list[int] = []
        stats_flood(broker.addr, "BenchmarkTest", 200, answers).join()
        # the other kinds are not affected
        assert send(c, "RedteamSend", b"x")["code"] == SUCCESS
    assert len(answers) == 200
    assert SYSTEM_BUSY in answers and SUCCESS in answers, sorted(set(answers))


def test_an_oversize_header_closes_the_connection_on_its_length_word(cluster) -> None:
    ns, start = cluster
    broker = start()
    ext = ",".join(f'"k{i}":""' for i in range(950_000))
    header = ('{"code":10,"flag":0,"language":"JAVA","opaque":1,"version":395,'
              f'"extFields":{{{ext}}}}}').encode()
    assert len(header) > 11 * MIB
    with RawClient(broker.addr) as evil:
        # the length words and the first KiB only: a server that waits for the rest is fooled
        evil.send(struct.pack(">ii", 4 + len(header), len(header)) + header[:1024])
        assert evil.closed_by_server(5.0)
    with RawClient(broker.addr) as c:
        assert send(c, "RedteamSend", b"x")["code"] == SUCCESS


def test_too_many_ext_fields_close_the_connection(cluster) -> None:
    ns, start = cluster
    broker = start()
    with RawClient(broker.addr) as evil:
        fields = send_fields("RedteamSend")
        fields.update({f"x{i}": "" for i in range(5000)})       # a 60 KiB header
        evil.send(frame(SEND_MESSAGE, fields, b"x"))
        assert evil.closed_by_server(5.0)


def test_kv_value_over_the_limit_is_refused_naming_the_field(tmp_path: Path) -> None:
    ns = start_namesrv(tmp_path)
    try:
        with RawClient(ns.addr) as c:
            h, _ = c.call(PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v" * 100_000})
            assert h["code"] != SUCCESS
            assert "value" in h["remark"]
            h, _ = c.call(PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "ok"})
            assert h["code"] == SUCCESS
    finally:
        ns.stop()
    # acknowledged means on disk
    table = json.loads((tmp_path / "kvConfig.json").read_text())["configTable"]
    assert table == {"NS": {"k": "ok"}}


def test_acknowledged_and_auto_created_topics_are_on_disk(cluster, tmp_path: Path) -> None:
    """Batched config writes keep what an admin call acknowledged durable at once (kill -9
    right after the answer), and what sends auto-created once the broker stops."""
    ns, start = cluster
    broker = start()
    with RawClient(broker.addr) as c:
        create_topic(c, "AdminMade", 4)
    broker.kill()
    topics = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())
    assert "AdminMade" in topics["topicConfigTable"]
    broker = start()
    with RawClient(broker.addr) as c:
        for i in range(200):
            assert send(c, f"Auto{i}", b"x")["code"] == SUCCESS
    assert broker.stop() == 0
    table = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())
    assert {f"Auto{i}" for i in range(200)} <= set(table["topicConfigTable"])


# -- bounded flood/soak ---------------------------------------------------------------------------

@pytest.mark.stress
def test_soak_floods_of_every_kind(cluster) -> None:
    """Rounds of view floods from readers that never read, admin floods and KV writes, with
    a client sending throughout: RSS stays bounded and every send is answered."""
    ns, start = cluster
    broker = start()
    with RawClient(broker.addr, timeout=60) as c, RawClient(ns.addr) as nc:
        # BenchmarkTest: 1,024 queues, registered at start as by 4.9.8
        h = send(c, "RedteamBig", b"v" * MIB)
        offset = int(h["extFields"]["msgId"][-16:], 16)
        mem = RssPeak(broker.proc.pid)
        worst = 0.0
        views = b"".join(frame(VIEW_MESSAGE_BY_ID, {"offset": offset}) for _ in range(2000))
        for _round in range(5):
            socks: list[socket.socket] = []
            fl = [threading.Thread(target=lambda: socks.append(flood(broker.addr, views, 5.0)))
                  for _ in range(4)]
            for t in fl:
                t.start()
            answers: list[int] = []
            st = stats_flood(broker.addr, "BenchmarkTest", 500, answers)
            n = 0
            while st.is_alive() or any(t.is_alive() for t in fl):
                t0 = time.monotonic()
                assert send(c, "RedteamSend", b"soak")["code"] == SUCCESS
                worst = max(worst, time.monotonic() - t0)
                nc.call(PUT_KV_CONFIG, {"namespace": "NS", "key": f"k{n % 50}", "value": "v"})
                n += 1
            for t in fl:
                t.join()
            for s in socks:
                s.close()
        grew = mem.stop()
        print(f"\nsoak: RSS {mem.baseline / MIB:.0f} -> peak {mem.peak / MIB:.0f} MB, slowest "
              f"send {worst * 1e3:.0f} ms")
        assert grew < 400 * MIB
        assert worst < 5.0
