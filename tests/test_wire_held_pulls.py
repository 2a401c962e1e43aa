"""Held long-poll pulls are bounded (docs/protocol.md "Limits"): per connection
(``serverMaxHeldPulls``) and per broker (``pullThreadPoolQueueCapacity``); past a bound the
pull is answered SYSTEM_BUSY naming it, a held pull never stops its connection's other
requests, and a closed connection's held pulls are freed at once, not at their deadline.

A real broker process attacked with hand-built frames (tests/rawwire.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from rawwire import RawClient, frame
from servers import start_broker, start_namesrv

SEND_MESSAGE, PULL_MESSAGE, GET_MAX_OFFSET = 10, 11, 30
SUCCESS, SYSTEM_BUSY = 0, 2
TOPIC = "HeldPulls"
SUSPEND_SUB = 0x2 | 0x4


@pytest.fixture
def cluster(tmp_path: Path):
    ns = start_namesrv(tmp_path)
    started = []

    def broker(conf: dict[str, str]):
        b = start_broker(tmp_path / "store", ns.addr, conf)
        started.append(b)
        return b
    try:
        yield broker
    finally:
        for b in started:
            b.stop()
        ns.stop()


def send(c: RawClient, body: bytes = b"x") -> dict:
    header, _ = c.call(SEND_MESSAGE, {
        "producerGroup": "PG_held", "topic": TOPIC, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
        "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}, body)
    assert header["code"] == SUCCESS, header
    end = int(header["extFields"]["queueOffset"]) + 1
    deadline = time.monotonic() + 10.0
    # dispatched to the consume queue (asynchronously): a bounded wait
    while int(max_offset(c)["extFields"]["offset"]) < end and time.monotonic() < deadline:
        time.sleep(0.01)
    return header


def pull_frame(opaque: int, offset: int, suspend_ms: int, subscription: str = "*",
               **extra: str) -> bytes:
    """A pull of queue 0 from ``offset`` that the broker holds when nothing is there."""
    return frame(PULL_MESSAGE, {
        "consumerGroup": "CG_held", "topic": TOPIC, "queueId": 0, "queueOffset": offset,
        "maxMsgNums": 32, "sysFlag": SUSPEND_SUB, "commitOffset": 0,
        "suspendTimeoutMillis": suspend_ms, "subscription": subscription, "subVersion": 0,
        **extra}, opaque=opaque)


def max_offset(c: RawClient) -> dict:
    header, _ = c.call(GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
    return header


def pull_is_held(c: RawClient, opaque: int, offset: int, suspend_ms: int,
                 subscription: str = "*") -> dict | None:
    """Send a pull, then a GET_MAX_OFFSET: None when the pull was held (the second request is
    answered first), else the pull's answer."""
    c.send(pull_frame(opaque, offset, suspend_ms, subscription))
    ask = opaque + 100_000
    c.send(frame(GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0}, opaque=ask))
    first, _ = c.read_response()
    if first["opaque"] == ask:
        return None
    assert first["opaque"] == opaque, first
    second, _ = c.read_response()
    assert second["opaque"] == ask, second
    return first


def test_held_pulls_per_connection_are_bounded_and_never_stall_the_connection(cluster) -> None:
    # fewer requests in flight than held pulls: a held pull must not count as one
    broker = cluster({"serverMaxHeldPulls": "4", "serverMaxInFlightRequests": "2"})
    with RawClient(broker.addr) as a, RawClient(broker.addr) as b, \
            RawClient(broker.addr) as producer:
        end = int(send(producer)["extFields"]["queueOffset"]) + 1
        for i in range(4):
            assert pull_is_held(a, 1000 + i, end, 20_000) is None, i
        # the other requests of the same connection are answered meanwhile
        assert max_offset(a)["code"] == SUCCESS
        busy = pull_is_held(a, 1010, end, 20_000)
        assert busy is not None and busy["code"] == SYSTEM_BUSY, busy
        assert "serverMaxHeldPulls" in busy["remark"] and "4" in busy["remark"], busy
        # another connection is not affected
        assert pull_is_held(b, 2000, end, 20_000) is None
        # an arrival answers every held pull, and the connection may hold pulls again
        send(producer)
        got = {}
        for _ in range(4):
            h, body = a.read_response()
            got[h["opaque"]] = (h["code"], len(body))
        assert set(got) == {1000, 1001, 1002, 1003}
        assert all(code == SUCCESS and n > 0 for code, n in got.values()), got
        h, _ = b.read_response(2000)
        assert h["code"] == SUCCESS
        assert pull_is_held(a, 1020, end + 1, 20_000) is None


def test_held_pulls_per_broker_are_bounded_and_a_closed_connection_frees_its_own(cluster) -> None:
    # held for 10 minutes: only the close can free them within this test
    broker = cluster({"pullThreadPoolQueueCapacity": "3"})
    with RawClient(broker.addr) as b, RawClient(broker.addr) as producer:
        end = int(send(producer)["extFields"]["queueOffset"]) + 1
        a = RawClient(broker.addr)
        for i in range(3):
            assert pull_is_held(a, 3000 + i, end, 600_000) is None, i
        busy = pull_is_held(b, 4000, end, 600_000)
        assert busy is not None and busy["code"] == SYSTEM_BUSY, busy
        assert "pullThreadPoolQueueCapacity" in busy["remark"], busy
        assert max_offset(b)["code"] == SUCCESS        # the other kinds go on
        a.close()
        # the broker sees the close when it reads it: a bounded wait, not a timed assertion
        deadline = time.monotonic() + 10.0
        held = 0
        opaque = 4100
        while held < 3 and time.monotonic() < deadline:
            answer = pull_is_held(b, opaque, end, 600_000)
            opaque += 1
            if answer is None:
                held += 1
            else:
                assert answer["code"] == SYSTEM_BUSY, answer
                time.sleep(0.05)
        assert held == 3, "the closed connection's held pulls were not freed"
        busy = pull_is_held(b, 4999, end, 600_000)
        assert busy is not None and busy["code"] == SYSTEM_BUSY
        # one arrival answers the three held by b
        send(producer)
        codes = [b.read_response()[0]["code"] for _ in range(3)]
        assert codes == [SUCCESS] * 3


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith("VmRSS"))


def test_the_bytes_held_pulls_keep_are_bounded(cluster) -> None:
    """What held pulls keep is bounded in bytes, per connection (serverMaxHeldPullBytes) and
    in all (maxHeldPullBytes), counted from their subscription (twice: the expression and its
    tags) plus 1 KiB; past either the pull is SYSTEM_BUSY naming it. The rest of a held pull's
    header is not kept: 1,024 held pulls with 256 KiB headers held ~260 MiB before."""
    broker = cluster({"serverMaxHeldPullBytes": "600000", "maxHeldPullBytes": "1400000"})
    big = "a" * 250_000                 # one tag: counted 1024 + 16 (names) + 2 * 250,000
    with RawClient(broker.addr) as b, RawClient(broker.addr) as c, \
            RawClient(broker.addr) as d, RawClient(broker.addr) as producer:
        end = int(send(producer)["extFields"]["queueOffset"]) + 1
        a = RawClient(broker.addr)
        assert pull_is_held(a, 1, end, 600_000, big) is None
        busy = pull_is_held(a, 2, end, 600_000, big)
        assert busy is not None and busy["code"] == SYSTEM_BUSY, busy
        assert "serverMaxHeldPullBytes 600000" in busy["remark"], busy
        assert pull_is_held(a, 3, end, 600_000) is None           # a small one still fits
        assert pull_is_held(b, 4, end, 600_000, big) is None
        busy = pull_is_held(c, 5, end, 600_000, big)                # 1,504,162 in all
        assert busy is not None and busy["code"] == SYSTEM_BUSY, busy
        assert "maxHeldPullBytes 1400000" in busy["remark"], busy
        # 256 held pulls whose headers carry 250 KB of fields nobody reads: not kept
        before = rss_mib(broker.proc.pid)
        for i in range(256):
            d.send(pull_frame(100 + i, end, 600_000, junk="j" * 250_000))
        assert max_offset(d)["code"] == SUCCESS    # answered after every pull was held
        grown = rss_mib(broker.proc.pid) - before
        # kept headers would be >= 64 MiB; what the connection buffered while a loaded broker
        # caught up with 64 MB of frames comes and goes (1-10 MiB here, 33 once on a loaded CI)
        assert grown < 48, f"the broker grew {grown} MiB holding 256 pulls (64 MB of headers)"
        # a closed connection's held pulls free their bytes
        a.close()
        deadline = time.monotonic() + 10.0
        answer = pull_is_held(c, 6, end, 600_000, big)
        while answer is not None and time.monotonic() < deadline:
            assert answer["code"] == SYSTEM_BUSY, answer
            time.sleep(0.05)
            answer = pull_is_held(c, 7, end, 600_000, big)
        assert answer is None, "the closed connection's held pull bytes were not freed"
