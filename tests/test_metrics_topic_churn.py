"""Deleting a topic drops its metrics (put/get counters, the send lanes' counters, rate
snapshots), so creating, sending to and deleting topics does not grow the broker's memory
without bound; a lane still holding a deleted topic's counter counts a re-created topic's
sends into the re-created topic's fresh counter.

An in-process broker: deletions in process (``Broker.delete_topic``), then, served over TCP,
as raw DELETE_TOPIC_IN_BROKER frames.
"""
from __future__ import annotations

import pytest

from messaging_support import _serve, open_broker
from rawwire import RawClient
from rocketstore.common.protocol import PullMessageRequest, ResponseCode, SendMessageRequest
from rocketstore.store import Message
from rocketstore.store.topics import TopicConfig

DELETE_TOPIC_IN_BROKER, SUCCESS = 215, 0


def _topics_in(metrics) -> set[str]:
    with metrics._lock:
        return (set(metrics.put_msgs) | set(metrics.put_bytes) | set(metrics.put_failed)
                | set(metrics._lane_puts) | {t for _, t in metrics.get_msgs}
                | {t for _, t in metrics.get_bytes} | set(metrics._older.puts)
                | set(metrics._newer.puts) | {t for _, t in metrics._newer.gets})


def _churn(broker, t: str, first: bool = False) -> None:
    """Create ``t`` by sends (a lane's, its C path's, a request's) and count a pull."""
    m = broker.metrics
    lane = broker.send_lane("pg", t)
    for _ in range(2):          # the first send creates the topic, the second is C's
        r = lane.send(Message(t, b"abc"), 0)
        assert getattr(r, "code", 0) == 0, r
    r = broker.send_message(SendMessageRequest("pg", t, 0, [Message(t, b"de")]))
    assert r.result(10).code == ResponseCode.SUCCESS
    broker.store.dispatch_service.do_dispatch()      # its queue has the three
    p = broker.pull_message(PullMessageRequest(consumer_group="cg", topic=t, queue_id=0,
                                               queue_offset=0, max_msg_nums=8,
                                               sys_flag=0x4, subscription="*"))
    assert len(p.result(10).messages) == 3
    if first:
        m._newer.t -= 10.0      # a rate window is over: the next snapshot holds the topic
        m.rates()
        assert t in m._newer.puts
        puts, put_bytes, _, gets, _ = m.counters()
        assert puts[t] == 3 and put_bytes[t] == 8 and gets[("cg", t)] == 3


# each deletion rewrites the store's table of deleted topics (kept until retention passes
# them), so n deletions cost O(n^2): 2,000 take 25-90 s here, under --run-stress
@pytest.mark.parametrize("n", [400, pytest.param(2000, marks=pytest.mark.stress)])
def test_deleted_topics_leave_the_metrics(tmp_path, n):
    from rocketstore.remoting.broker_server import free_port_pair
    broker = open_broker(tmp_path / "store", listen_port=free_port_pair())
    m = broker.metrics
    try:
        for i in range(n):
            _churn(broker, f"churn_{i}", first=i == 0)
            broker.delete_topic(f"churn_{i}")
        assert _topics_in(m) == set()

        # a lane that counted into a deleted topic's counter: the re-created topic's sends
        # count into its new counter (seen by the metrics), from the C path too
        t = "churn_again"
        lane = broker.send_lane("pg", t)
        for _ in range(2):
            lane.send(Message(t, b"abc"), 0)
        broker.delete_topic(t)
        assert t not in _topics_in(m)
        for _ in range(3):
            lane.send(Message(t, b"abcd"), 0)
        assert lane.warm
        puts, put_bytes, _, _, _ = m.counters()
        assert puts[t] == 3 and put_bytes[t] == 12, (puts.get(t), put_bytes.get(t))

        _serve(broker)                  # DELETE_TOPIC_IN_BROKER over the wire drops them too
        with RawClient(f"127.0.0.1:{broker.config.listen_port}") as c:
            for i in range(5):
                _churn(broker, f"wired_{i}")
                h, _ = c.call(DELETE_TOPIC_IN_BROKER, {"topic": f"wired_{i}"})
                assert h["code"] == SUCCESS, h
        assert not {t for t in _topics_in(m) if t.startswith("wired_")}
    finally:
        broker.close()


def test_refused_sends_to_made_up_topics_share_one_failure_count(tmp_path):
    """A send refused for a topic the broker does not hold is counted under one shared key
    (``NO_SUCH_TOPIC``), not under its made-up name: 5,000 distinct names leave the failure
    table one entry long, while a held topic keeps its own failure count."""
    from rocketstore.broker.metrics import NO_SUCH_TOPIC
    broker = open_broker(tmp_path / "store", auto_create_topic_enable=False)
    m = broker.metrics
    try:
        broker.topic_manager.update(TopicConfig("held", 1, 1, 6))
        for i in range(5000):
            r = broker.send_message(SendMessageRequest("pg", f"made_up_{i}", 0,
                                                       [Message(f"made_up_{i}", b"x")]))
            assert r.result(10).code == ResponseCode.TOPIC_NOT_EXIST
        # a held topic's refusal (no such queue) is counted under its name
        r = broker.send_message(SendMessageRequest("pg", "held", 5, [Message("held", b"x")]))
        assert r.result(10).code == ResponseCode.SYSTEM_ERROR
        _, _, failed, _, _ = m.counters()
        assert failed == {NO_SUCH_TOPIC: 5000, "held": 1}
        assert len(_topics_in(m)) <= 2
    finally:
        broker.close()
