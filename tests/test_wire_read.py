"""``rocketstore.spark.wire.read_split`` against a scripted transport: how each PULL_MESSAGE
answer moves the read (no broker, no Spark)."""
from __future__ import annotations

from concurrent.futures import Future

import pytest

from rocketstore.common.protocol import PullMessageResponse, ResponseCode
from rocketstore.errors import MQBrokerError, RemotingProtocolError
from rocketstore.spark.wire import WireOptions, WireSplit, read_split, resolve
from rocketstore.store._codec import decode, encode_record


def _msg(offset: int, tags: str | None = None):
    props = {"TAGS": tags} if tags else {}
    rec = encode_record(topic="T", body=b"m%d" % offset, properties=props, queue_id=1,
                        queue_offset=offset, physical_offset=1000 + offset,
                        born_timestamp=5, store_timestamp=7, born_host="127.0.0.1:1",
                        store_host="127.0.0.1:2")
    return decode(rec)


class Scripted:
    """Answers pulls from a list; records each request."""

    def __init__(self, answers: list[PullMessageResponse]) -> None:
        self.answers = answers
        self.requests = []

    def pull_message(self, broker, request):
        self.requests.append((broker, request.queue_offset, request.max_msg_nums,
                              request.sys_flag, request.subscription))
        f: Future = Future()
        f.set_result(self.answers.pop(0))
        return f


OPTS = WireOptions.from_options({"namesrv": "h:1", "topics": "T", "pullBatchSize": "4"})


def _rows(transport, split, opts=OPTS):
    return [r for b in read_split(transport, split, opts, batch_rows=3) for r in b.to_pylist()]


def test_pulls_advance_by_the_brokers_next_offset_and_stop_at_the_end():
    t = Scripted([
        PullMessageResponse(ResponseCode.SUCCESS, 4, 0, 20, [_msg(i) for i in range(2, 4)]),
        PullMessageResponse(ResponseCode.PULL_RETRY_IMMEDIATELY, 6, 0, 20),
        # a broker may scan past the split: rows from 8 on are not the split's
        PullMessageResponse(ResponseCode.SUCCESS, 9, 0, 20, [_msg(i) for i in range(6, 9)]),
    ])
    rows = _rows(t, WireSplit("T", "b", 1, 2, 8))
    assert [r["queue_offset"] for r in rows] == [2, 3, 6, 7]
    assert {(r["broker_name"], r["queue_id"], r["topic"]) for r in rows} == {("b", 1, "T")}
    assert rows[0]["body"] == b"m2" and rows[0]["commitlog_offset"] == 1002
    # explicit offsets, never more than the split needs, subscription in the request
    assert [(o, n) for _, o, n, _, _ in t.requests] == [(2, 4), (4, 4), (6, 2)]
    assert {(b, f, s) for b, _, _, f, s in t.requests} == {("b", 0x4, "*")}


def test_offsets_deleted_by_retention_are_skipped():
    t = Scripted([PullMessageResponse(ResponseCode.PULL_OFFSET_MOVED, 5, 5, 9),
                  PullMessageResponse(ResponseCode.SUCCESS, 7, 5, 9, [_msg(5), _msg(6)])])
    assert [r["queue_offset"] for r in _rows(t, WireSplit("T", "b", 1, 0, 7))] == [5, 6]


def test_tags_are_compared_exactly_after_the_brokers_hash_filter():
    opts = WireOptions.from_options({"namesrv": "h:1", "topics": "T", "tags": "A||B"})
    t = Scripted([PullMessageResponse(ResponseCode.SUCCESS, 3, 0, 3,
                                      [_msg(0, "A"), _msg(1, "Collides"), _msg(2, "B")])])
    assert [r["tags"] for r in _rows(t, WireSplit("T", "b", 1, 0, 3), opts)] == ["A", "B"]
    assert t.requests[0][4] == "A||B"


@pytest.mark.parametrize("answer, error, text", [
    (PullMessageResponse(ResponseCode.PULL_NOT_FOUND, 4, 0, 4), MQBrokerError,
     r"T@b/1 offset 4: the queue holds \[0, 4\), the read wanted up to 6"),
    (PullMessageResponse(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, 0, remark="no group"),
     MQBrokerError, "T@b/1 offset 4: no group"),
    (PullMessageResponse(ResponseCode.SUCCESS, 4, 0, 9, []), RemotingProtocolError,
     "next offset 4, not past the request"),
])
def test_a_queue_that_cannot_serve_the_split_fails_the_read_naming_it(answer, error, text):
    with pytest.raises(error, match=text):
        _rows(Scripted([answer]), WireSplit("T", "b", 1, 4, 6))


def test_resolve_earliest_latest_and_explicit_offsets():
    bounds = {("T", "a", 0): (2, 10), ("T", "a", 1): (0, 5), ("T", "b", 0): (0, 3)}
    assert resolve("earliest", bounds, "latest") == {("T", "a", 0): 2, ("T", "a", 1): 0, ("T", "b", 0): 0}
    assert resolve("latest", bounds, "earliest") == {("T", "a", 0): 10, ("T", "a", 1): 5, ("T", "b", 0): 3}
    given = {("T", "a", 0): 4, ("T", "a", 1): -1, ("T", "b", 0): -2}
    assert resolve(given, bounds, "earliest") == {("T", "a", 0): 4, ("T", "a", 1): 5, ("T", "b", 0): 0}
    assert resolve({("T", "a", 0): 4}, bounds, "latest") == {("T", "a", 0): 4, ("T", "a", 1): 5,
                                                              ("T", "b", 0): 3}
