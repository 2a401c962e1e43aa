"""Rebalance strategies: MESSAGING.md §3.3 / §3.4 worked examples, per client."""
import hashlib

import pytest

from rocketstore.client.allocate import (AllocateMessageQueueAveragely,
                                         AllocateMessageQueueAveragelyByCircle,
                                         AllocateMessageQueueByConfig,
                                         AllocateMessageQueueByMachineRoom,
                                         AllocateMessageQueueConsistentHash, allocate_strategy)
from rocketstore.common import MessageQueue
from rocketstore.errors import MQClientError


def q(name):
    broker, qid = name.split("-")
    return MessageQueue("T", broker, int(qid))


def names(mqs):
    return [f"{m.broker_name}-{m.queue_id}" for m in mqs]


def assignment(strategy, mq_all, cids):
    return {c: names(strategy.allocate("g", c, mq_all, cids)) for c in cids}


AB5 = sorted(q(n) for n in ["B-2", "A-0", "B-0", "A-1", "B-1"])


@pytest.mark.parametrize("mq_all,cids,expected", [
    (AB5, ["c0", "c1"], {"c0": ["A-0", "A-1", "B-0"], "c1": ["B-1", "B-2"]}),
    (AB5, ["c0", "c1", "c2"], {"c0": ["A-0", "A-1"], "c1": ["B-0", "B-1"], "c2": ["B-2"]}),
    ([q(f"q-{i}") for i in range(8)], ["c0", "c1", "c2"],
     {"c0": ["q-0", "q-1", "q-2"], "c1": ["q-3", "q-4", "q-5"], "c2": ["q-6", "q-7"]}),
    ([q(f"q-{i}") for i in range(3)], ["c0", "c1", "c2", "c3", "c4"],
     {"c0": ["q-0"], "c1": ["q-1"], "c2": ["q-2"], "c3": [], "c4": []}),
    ([q("A-0"), q("B-0")], ["c0", "c1", "c2"], {"c0": ["A-0"], "c1": ["B-0"], "c2": []}),
    ([q(f"A-{i}") for i in range(4)], ["c0", "c1", "c2", "c3"],
     {"c0": ["A-0"], "c1": ["A-1"], "c2": ["A-2"], "c3": ["A-3"]}),
])
def test_avg_worked_examples(mq_all, cids, expected):
    assert assignment(AllocateMessageQueueAveragely(), mq_all, cids) == expected


def test_avg_5_queues_2_consumers_and_8_consumers_6_queues():
    five = [q(f"b-{i}") for i in range(5)]
    got = assignment(AllocateMessageQueueAveragely(), five, ["c0", "c1"])
    assert [len(v) for v in got.values()] == [3, 2]
    six = [q(f"b-{i}") for i in range(6)]
    cids = [f"c{i}" for i in range(8)]
    got = assignment(AllocateMessageQueueAveragely(), six, cids)
    assert sum(1 for v in got.values() if not v) == 2
    assert sorted(sum(got.values(), [])) == sorted(names(six))   # each queue exactly once


def test_avg_every_split_covers_each_queue_once():
    strat = AllocateMessageQueueAveragely()
    for n in range(1, 13):
        mqs = [q(f"b-{i}") for i in range(n)]
        for m in range(1, 10):
            cids = [f"c{i}" for i in range(m)]
            got = sum(assignment(strat, mqs, cids).values(), [])
            assert sorted(got) == sorted(names(mqs)), (n, m)


def test_unknown_client_gets_nothing():
    for s in (AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
              AllocateMessageQueueConsistentHash(), AllocateMessageQueueByMachineRoom(["x"])):
        assert s.allocate("g", "stranger", AB5, ["c0", "c1"]) == []


def test_avg_by_circle_example():
    assert assignment(AllocateMessageQueueAveragelyByCircle(), AB5, ["c0", "c1"]) == \
        {"c0": ["A-0", "B-0", "B-2"], "c1": ["A-1", "B-1"]}


def _md5_first4(key):
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


def test_consistent_hash_matches_the_ring_rule():
    mqs = [MessageQueue("TopicA", "broker-a", i) for i in range(16)]
    cids = ["10.0.0.1@1", "10.0.0.2@2", "10.0.0.3@3"]
    strat = AllocateMessageQueueConsistentHash(virtual_node_cnt=10)
    got = {c: strat.allocate("g", c, mqs, cids) for c in cids}
    ring = sorted((_md5_first4(f"{c}-{k}"), c) for c in cids for k in range(10))
    for mq in mqs:
        h = _md5_first4(f"MessageQueue [topic=TopicA, brokerName=broker-a, queueId={mq.queue_id}]")
        owner = next((c for hh, c in ring if hh >= h), ring[0][1])
        assert mq in got[owner]
    assert sorted(sum(got.values(), [])) == mqs
    # a client joining moves only the queues it takes (the point of a ring)
    more = {c: set(strat.allocate("g", c, mqs, cids + ["10.0.0.4@4"])) for c in cids}
    for c in cids:
        assert more[c] <= set(got[c])


def test_config_and_machine_room():
    fixed = [q("A-1")]
    assert AllocateMessageQueueByConfig(fixed).allocate("g", "anyone", AB5, ["c0"]) == fixed
    mqs = sorted([MessageQueue("T", f"{room}@b{i}", k) for room in ("hz", "sh")
                  for i in range(2) for k in range(2)])
    strat = AllocateMessageQueueByMachineRoom(["hz"])
    got = {c: strat.allocate("g", c, mqs, ["c0", "c1", "c2"]) for c in ("c0", "c1", "c2")}
    hz = [m for m in mqs if m.broker_name.startswith("hz@")]
    # 4 queues over 3 clients: one each by position, the 4th to c0
    assert got == {"c0": [hz[0], hz[3]], "c1": [hz[1]], "c2": [hz[2]]}


def test_strategy_by_name():
    assert allocate_strategy("AVG").name == "AVG"
    assert allocate_strategy("avg_by_circle").name == "AVG_BY_CIRCLE"
    assert allocate_strategy("CONSISTENT_HASH").name == "CONSISTENT_HASH"
    with pytest.raises(MQClientError, match="CONFIG.*AllocateMessageQueueByConfig"):
        allocate_strategy("CONFIG")
    with pytest.raises(MQClientError, match="not one of"):
        allocate_strategy("FAIREST")
