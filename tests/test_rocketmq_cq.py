"""Consume queues against a real Apache RocketMQ 4.9.8 store (shared fixture).

What RocketMQ's own code reported for the fixture (``expected.jsonl``): every consume-queue
unit (``cq``), each queue's min/max (``cq_summary``), what a consumer pulling every queue from
offset 0 gets (``pull``: in topic, queue, queue-offset order; ``msgId`` is the client's id, the
UNIQ_KEY; bodies decompressed) and the loaded ``consumerOffset.json`` (``consumer_offset``).
rocketstore reads the broker's consume queues, pulls the same messages, and — from the commit
log alone — rebuilds consume-queue files byte-identical to RocketMQ's.

Always on a writable copy (``rocketmq_store``), never the fixture directory itself.
"""
from __future__ import annotations

import collections
import os
import shutil
import struct

import pytest

from refreader import java_hash
from rocketstore import GetMessageStatus, Message, MessageStore, StoreConfig
from rocketstore.store._consumequeue import ConsumeQueue

CL_FILE_SIZE = 65536        # commit-log files of the fixture
CQ_FILE_SIZE = 2000         # consume-queue files of the fixture: 100 units
UNIT = struct.Struct(">qiq")


def _config(**kw) -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=CL_FILE_SIZE,
                       mapped_file_size_consume_queue=CQ_FILE_SIZE,
                       max_hash_slot_num=100, max_index_num=400, **kw)


@pytest.fixture(scope="module")
def expected(expected_lines):
    by_type = collections.defaultdict(list)
    for d in expected_lines:
        by_type[d["type"]].append(d)
    return by_type


def _cq_tree(root) -> dict[str, bytes]:
    base = os.path.join(root, "consumequeue")
    out = {}
    for d, _, names in os.walk(base):
        for name in names:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, base)] = f.read()
    return out


# -- the fixture's units -----------------------------------------------------------------------

def test_fixture_cq_lines_shape(expected):
    cq = expected["cq"]
    assert len(cq) == 1000 and all(d["matchesCommitLog"] for d in cq)
    assert len(expected["cq_summary"]) == 26
    assert len(expected["pull"]) == 1000
    assert len(expected["consumer_offset"]) == 12


def test_struct_read_of_fixture_files_equals_cq_lines(rocketmq_store, expected):
    """The oracle itself: the fixture's files hold exactly the `cq` lines (docs/format.md §5.1)."""
    tree = _cq_tree(rocketmq_store)
    units = {}
    for rel, data in tree.items():
        topic, qid, name = rel.split(os.sep)
        assert len(data) == CQ_FILE_SIZE
        for p in range(0, len(data), 20):
            u = UNIT.unpack_from(data, p)
            if u[1]:
                units[(topic, int(qid), (int(name) + p) // 20)] = u
    assert units == {(d["topic"], d["queueId"], d["cqOffset"]):
                     (d["physicalOffset"], d["size"], d["tagsCode"]) for d in expected["cq"]}


def test_consume_queue_class_reads_every_unit(rocketmq_store, expected):
    root = os.path.join(rocketmq_store, "consumequeue")
    queues = {}
    for d in expected["cq"]:
        key = (d["topic"], d["queueId"])
        if key not in queues:
            cq = ConsumeQueue(root, d["topic"], d["queueId"], CQ_FILE_SIZE)
            cq.load()
            cq.recover()
            queues[key] = cq
        assert queues[key].get_unit(d["cqOffset"]) == (d["physicalOffset"], d["size"], d["tagsCode"]), d
    for s in expected["cq_summary"]:
        cq = queues.get((s["topic"], s["queueId"]))
        if cq is None:
            assert s["maxOffset"] == 0 and s["maxPhysicOffset"] == -1
            continue
        assert cq.get_max_offset_in_queue() == s["maxOffset"]
        assert cq.max_physic_offset == s["maxPhysicOffset"]
        assert cq.get_unit(s["maxOffset"]) is None
    for cq in queues.values():
        cq.close()


def test_store_reads_every_unit_and_summary(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert store.recovery["last_exit_ok"] is True
        assert store.recovery["messages_redispatched"] == 0
        for d in expected["cq"]:
            cq = store.consume_queues.find(d["topic"], d["queueId"])
            assert cq.get_unit(d["cqOffset"]) == (d["physicalOffset"], d["size"], d["tagsCode"]), d
        for s in expected["cq_summary"]:
            topic, qid = s["topic"], s["queueId"]
            assert store.get_min_offset_in_queue(topic, qid) == s["minOffset"], s
            assert store.get_max_offset_in_queue(topic, qid) == s["maxOffset"], s
            cq = store.consume_queues.find(topic, qid)
            assert (cq.max_physic_offset if cq is not None else -1) == s["maxPhysicOffset"], s
        # every unit still points at its record, as RocketMQ's dispatch made it
        for d in expected["cq"]:
            m = store.look_message_by_offset(d["physicalOffset"])
            assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (
                d["topic"], d["queueId"], d["cqOffset"], d["size"])
            assert store.dispatch_core.tags_code_of(m) == d["tagsCode"]


def test_store_read_only_reads_every_unit(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config(), read_only=True) as store:
        for s in expected["cq_summary"]:
            assert store.get_max_offset_in_queue(s["topic"], s["queueId"]) == s["maxOffset"]
            assert store.get_min_offset_in_queue(s["topic"], s["queueId"]) == s["minOffset"]
        for d in expected["cq"][::37]:
            cq = store.consume_queues.find(d["topic"], d["queueId"])
            assert cq.get_unit(d["cqOffset"]) == (d["physicalOffset"], d["size"], d["tagsCode"])


# -- pulling ------------------------------------------------------------------------------------

def _pull_queue(store, topic: str, qid: int, max_msgs: int = 32):
    got = []
    offset = 0
    max_offset = store.get_max_offset_in_queue(topic, qid)
    while offset < max_offset:
        r = store.get_message("OracleGroup", topic, qid, offset, max_msgs=max_msgs)
        assert r.status is GetMessageStatus.FOUND, (topic, qid, offset, r)
        assert r.min_offset == 0 and r.max_offset == max_offset
        assert r.next_begin_offset == offset + len(r.messages)
        got.extend(r.messages)
        offset = r.next_begin_offset
    assert offset == max_offset
    r = store.get_message("OracleGroup", topic, qid, offset)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    return got


def _pulled(messages) -> list[tuple]:
    return [(m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.uniq_key, bytes(m.body).hex())
            for m in messages]


def _pull_lines(expected) -> list[tuple]:
    return [(d["topic"], d["queueId"], d["queueOffset"], d["physicalOffset"], d["msgId"], d["bodyHex"])
            for d in expected["pull"]]


@pytest.mark.parametrize("max_msgs", [32, 7])
def test_pull_every_queue_from_zero_equals_pull_lines(rocketmq_store, expected, max_msgs):
    queues = list(dict.fromkeys((d["topic"], d["queueId"]) for d in expected["pull"]))
    with MessageStore.open(rocketmq_store, _config()) as store:
        got = []
        for topic, qid in queues:
            got.extend(_pulled(_pull_queue(store, topic, qid, max_msgs)))
    assert got == _pull_lines(expected)


def test_pull_with_tag_filter(rocketmq_store, expected):
    msgs = {d["physicalOffset"]: d for d in expected["msg"]}
    with MessageStore.open(rocketmq_store, _config()) as store:
        for topic, qid in (("TopicA", 0), ("TopicB", 3)):
            want_tags = sorted({msgs[d["physicalOffset"]]["tags"] for d in expected["pull"]
                                if (d["topic"], d["queueId"]) == (topic, qid)} - {None})[:2]
            want = [d["physicalOffset"] for d in expected["pull"]
                    if (d["topic"], d["queueId"]) == (topic, qid)
                    and msgs[d["physicalOffset"]]["tags"] in want_tags]
            got, offset = [], 0
            while True:
                r = store.get_message("g", topic, qid, offset, tags=" || ".join(want_tags))
                if r.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
                    break
                got.extend(m.commitlog_offset for m in r.messages)
                offset = r.next_begin_offset
            assert got == want and want


def test_consumer_offsets_load(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        for d in expected["consumer_offset"]:
            topic, group = d["topicAtGroup"].split("@")
            assert store.query_offset(group, topic, d["queueId"]) == d["offset"], d
        assert store.query_offset("OracleGroup", "TopicA", 9) == -1
        assert store.query_offset("NoSuchGroup", "TopicA", 0) == -1


# -- rebuilding RocketMQ's consume queues ---------------------------------------------------------

@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_rebuilt_consume_queues_are_byte_identical(rocketmq_store, fixture_root, expected, crashed):
    shutil.rmtree(os.path.join(rocketmq_store, "consumequeue"))
    if crashed:
        open(os.path.join(rocketmq_store, "abort"), "w").close()
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert store.recovery["redispatched_from"] == 0
        assert store.recovery["messages_redispatched"] == 1000
        for s in expected["cq_summary"]:
            assert store.get_max_offset_in_queue(s["topic"], s["queueId"]) == s["maxOffset"]
            assert store.get_min_offset_in_queue(s["topic"], s["queueId"]) == s["minOffset"]
    rebuilt = _cq_tree(rocketmq_store)
    original = _cq_tree(fixture_root / "store")
    assert sorted(rebuilt) == sorted(original)
    for rel in original:
        assert rebuilt[rel] == original[rel], rel


def test_rebuilt_store_pulls_the_same(rocketmq_store, expected):
    shutil.rmtree(os.path.join(rocketmq_store, "consumequeue"))
    queues = list(dict.fromkeys((d["topic"], d["queueId"]) for d in expected["pull"]))
    with MessageStore.open(rocketmq_store, _config()) as store:
        got = []
        for topic, qid in queues:
            got.extend(_pulled(_pull_queue(store, topic, qid)))
    assert got == _pull_lines(expected)


def test_puts_after_rocketmq_extend_its_consume_queues(rocketmq_store, fixture_root, expected):
    """New units go after RocketMQ's in the same files; RocketMQ's bytes stay as they were."""
    summary = {(s["topic"], s["queueId"]): s for s in expected["cq_summary"]}
    with MessageStore.open(rocketmq_store, _config()) as store:
        r = store.put_message(Message("TopicA", b"new", tags="Tag1"), 0)
        assert store.wait_dispatched(10, until=r)
        assert r.queue_offset == summary[("TopicA", 0)]["maxOffset"]
        assert r.commitlog_offset == expected["cl_end"][0]["physicalOffset"]
        assert store.get_max_offset_in_queue("TopicA", 0) == r.queue_offset + 1
    original = _cq_tree(fixture_root / "store")
    now = _cq_tree(rocketmq_store)
    rel = os.path.join("TopicA", "0", "%020d" % CQ_FILE_SIZE)
    pos = (r.queue_offset * 20) % CQ_FILE_SIZE
    assert now[rel][:pos] == original[rel][:pos]
    assert UNIT.unpack_from(now[rel], pos) == (r.commitlog_offset, r.wrote_bytes, java_hash("Tag1"))
    assert now[rel][pos + 20:] == b"\x00" * (CQ_FILE_SIZE - pos - 20)
    for other in original:
        if other != rel:
            assert now[other] == original[other], other
