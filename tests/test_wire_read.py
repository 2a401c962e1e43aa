"""``rocketstore.spark.wire.read_split`` against a simulated broker queue: how PULL_MESSAGE
answers move a pipelined read (no broker process, no Spark)."""
from __future__ import annotations

from concurrent.futures import Future

import pytest

from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import MQBrokerError, RemotingProtocolError
from rocketstore.remoting.command import RemotingCommand
from rocketstore.spark.wire import WireOptions, WireSplit, read_split, resolve
from rocketstore.store._codec import encode_record, java_hash


def _record(offset: int, tags: str | None, topic: str = "T", queue_id: int = 1) -> bytes:
    return encode_record(topic=topic, body=b"m%d" % offset,
                         properties={"TAGS": tags} if tags else {}, queue_id=queue_id,
                         queue_offset=offset, physical_offset=1000 + offset,
                         born_timestamp=5, store_timestamp=100 + offset,
                         born_host="127.0.0.1:1", store_host="127.0.0.1:2")


def _answer(code: int, nxt: int, lo: int, hi: int, body: bytes = b"", remark: str | None = None):
    return RemotingCommand(code, remark=remark, body=body, ext_fields={
        "nextBeginOffset": str(nxt), "minOffset": str(lo), "maxOffset": str(hi)})


class Queue:
    """One queue of a broker: offsets [lo, hi), tags per offset; answers at most
    ``per_pull`` messages a pull (a broker's transfer limit) and filters by tag hash as a
    broker does (scanning at most ``scan`` units a pull)."""

    def __init__(self, lo: int, hi: int, tags=lambda off: None, per_pull=32,
                 scan: int = 64) -> None:
        self.lo, self.hi, self.tags, self.per_pull, self.scan = lo, hi, tags, per_pull, scan
        self.requests: list[tuple[str, int, int, int, str]] = []

    def pull_message_raw(self, broker, request):
        self.requests.append((broker, request.queue_offset, request.max_msg_nums,
                              request.sys_flag, request.subscription))
        f: Future = Future()
        f.set_result(self.answer(request.queue_offset, request.max_msg_nums, request.subscription))
        return f

    def answer(self, off: int, n: int, subscription: str):
        if off < self.lo:
            return _answer(ResponseCode.PULL_OFFSET_MOVED, self.lo, self.lo, self.hi)
        if off >= self.hi:
            return _answer(ResponseCode.PULL_NOT_FOUND, self.hi, self.lo, self.hi)
        codes = None if subscription == "*" else {java_hash(t) for t in subscription.split("||")}
        out, i = [], off
        limit = self.per_pull(off) if callable(self.per_pull) else self.per_pull
        while i < min(self.hi, off + self.scan) and len(out) < min(n, limit):
            t = self.tags(i)
            if codes is None or (t is not None and java_hash(t) in codes):
                out.append(_record(i, t))
            i += 1
        if not out:
            return _answer(ResponseCode.PULL_RETRY_IMMEDIATELY, i, self.lo, self.hi)
        return _answer(ResponseCode.SUCCESS, i, self.lo, self.hi, b"".join(out))


def _opts(**extra: str) -> WireOptions:
    return WireOptions.from_options({"namesrv": "h:1", "topics": "T", "pullBatchSize": "4",
                                     **extra})


def _rows(transport, split, opts=None):
    # answers decoded a few at a time: several RecordBatches per split
    batches = list(read_split(transport, split, opts or _opts(), batch_bytes=1000))
    return [r for b in batches for r in b.to_pylist()]


def test_pipelined_pulls_read_each_offset_once_in_order():
    q = Queue(0, 50)
    batches = list(read_split(q, WireSplit("T", "b", 1, 3, 41), _opts(), batch_bytes=1000))
    assert len(batches) > 2
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(3, 41))
    assert {(r["broker_name"], r["queue_id"], r["topic"]) for r in rows} == {("b", 1, "T")}
    assert rows[0]["body"] == b"m3" and rows[0]["commitlog_offset"] == 1003
    assert rows[0]["store_timestamp"].timestamp() == 0.103
    # explicit offsets, never past the split, subscription in the request, 4 in flight
    assert [o for _, o, _, _, _ in q.requests] == list(range(3, 41, 4))
    assert q.requests[-1][2] == 2
    assert {(b, f, s) for b, _, _, f, s in q.requests} == {("b", 0x4, "*")}


def test_a_broker_answering_fewer_than_asked_restarts_the_pipeline_where_it_ended():
    q = Queue(0, 30, per_pull=3)
    assert [r["queue_offset"] for r in _rows(q, WireSplit("T", "b", 1, 0, 30))] == list(range(30))
    # the first answer ends one short of the next pull in flight: the pulls in flight are
    # dropped and re-asked, 3 at a time from then on
    assert [o for _, o, _, _, _ in q.requests][:8] == [0, 4, 8, 12, 3, 6, 9, 12]


def test_the_step_grows_back_when_the_broker_sends_full_answers_again():
    # 3 a pull while the first 12 offsets are "on disk", then up to 32
    q = Queue(0, 200, per_pull=lambda off: 3 if off < 12 else 32)
    rows = _rows(q, WireSplit("T", "b", 1, 0, 200), _opts(pullBatchSize="16", pullDepth="1"))
    assert [r["queue_offset"] for r in rows] == list(range(200))
    asked = [n for _, _, n, _, _ in q.requests]
    # shrunk to 3 by the first answer, doubled after each 8 full answers in a row
    assert asked[:10] == [16] + [3] * 8 + [6] and asked[16:18] == [6, 12] and 16 in asked


def test_tags_are_compared_exactly_after_the_brokers_hash_filter():
    # "Aa" and "BB" share a Java hash code: the broker's filter lets both through
    assert java_hash("Aa") == java_hash("BB")
    tags = ["Aa", "BB", "C", None]
    q = Queue(0, 40, tags=lambda off: tags[off % 4], scan=6)
    rows = _rows(q, WireSplit("T", "b", 1, 0, 40), _opts(tags="Aa||C"))
    assert [(r["queue_offset"], r["tags"]) for r in rows] == \
        [(o, tags[o % 4]) for o in range(40) if tags[o % 4] in ("Aa", "C")]
    assert {s for *_, s in q.requests} == {"Aa||C"}
    # most units filtered out: pulls that scan no match answer PULL_RETRY_IMMEDIATELY
    sparse = Queue(0, 40, tags=lambda off: "C" if off % 10 == 9 else "Z", scan=6)
    rows = _rows(sparse, WireSplit("T", "b", 1, 0, 40), _opts(tags="C"))
    assert [r["queue_offset"] for r in rows] == [9, 19, 29, 39]


def test_offsets_deleted_by_retention_are_skipped():
    q = Queue(5, 9)
    assert [r["queue_offset"] for r in _rows(q, WireSplit("T", "b", 1, 0, 9))] == [5, 6, 7, 8]


def test_store_time_options_filter_rows():
    rows = _rows(Queue(0, 20), WireSplit("T", "b", 1, 0, 20),
                 _opts(startTimestamp="104", endTimestamp="110"))
    assert [r["queue_offset"] for r in rows] == list(range(4, 11))


class Scripted(Queue):
    def __init__(self, answer) -> None:
        super().__init__(0, 0)
        self.fixed = answer

    def answer(self, off, n, subscription):
        return self.fixed


@pytest.mark.parametrize("answer, end, error, text", [
    (_answer(ResponseCode.PULL_NOT_FOUND, 4, 0, 4), 6, MQBrokerError,
     r"T@b/1 offset 4: the queue holds \[0, 4\), the read wanted up to 6"),
    (_answer(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, 0, 0, 0, remark="no group"), 6,
     MQBrokerError, "T@b/1 offset 4: no group"),
    (_answer(ResponseCode.SUCCESS, 4, 0, 9), 6, RemotingProtocolError,
     "next offset 4, not past the request"),
    (_answer(ResponseCode.SUCCESS, 5, 0, 9, _record(4, None, topic="U")), 5, RemotingProtocolError,
     r"T@b/1 before offset 5: the record at byte 0 is of b'U'/1, not b'T'/1"),
    (_answer(ResponseCode.SUCCESS, 5, 0, 9, _record(4, None)[:-3]), 5, RemotingProtocolError,
     "no valid record at byte 0"),
])
def test_a_queue_that_cannot_serve_the_split_fails_the_read_naming_it(answer, end, error, text):
    with pytest.raises(error, match=text):
        _rows(Scripted(answer), WireSplit("T", "b", 1, 4, end))


def test_a_last_answer_short_of_the_split_end_pulls_on():
    # one pull asks for the whole rest; the broker sends 3 at a time
    q = Queue(0, 20, per_pull=3)
    rows = _rows(q, WireSplit("T", "b", 1, 0, 20), _opts(pullBatchSize="256"))
    assert [r["queue_offset"] for r in rows] == list(range(20))
    # the first answer shows the broker's limit: the pulls after it ask for 3 (then probe for
    # more after a full answer, and fall back)
    asked = [(o, n) for _, o, n, _, _ in q.requests]
    assert asked[:2] == [(0, 20), (3, 3)] and max(n for o, n in asked[1:]) <= 6


def test_resolve_earliest_latest_and_explicit_offsets():
    bounds = {("T", "a", 0): (2, 10), ("T", "a", 1): (0, 5), ("T", "b", 0): (0, 3)}
    assert resolve("earliest", bounds, "latest") == {("T", "a", 0): 2, ("T", "a", 1): 0, ("T", "b", 0): 0}
    assert resolve("latest", bounds, "earliest") == {("T", "a", 0): 10, ("T", "a", 1): 5, ("T", "b", 0): 3}
    given = {("T", "a", 0): 4, ("T", "a", 1): -1, ("T", "b", 0): -2}
    assert resolve(given, bounds, "earliest") == {("T", "a", 0): 4, ("T", "a", 1): 5, ("T", "b", 0): 0}
    assert resolve({("T", "a", 0): 4}, bounds, "latest") == {("T", "a", 0): 4, ("T", "a", 1): 5,
                                                              ("T", "b", 0): 3}
