"""Index files against a real Apache RocketMQ 4.9.8 store (shared fixture, docs/format.md §6).

What RocketMQ's own code reported for the fixture (``expected.jsonl``): each index file's
header (``index_file``) and, for every KEYS token and UNIQ_KEY, the offsets its IndexService
returned and the messages its queryMessage returned with ``keyMatches`` (``key``).

How the ``key`` lines were made, read off the data: ``indexPhyOffsets`` are in ascending
commit-log order, while ``IndexService.queryOffset`` walks files newest first and each chain
newest first (descending offsets). So they are the list after
``DefaultMessageStore.queryMessage``'s ``Collections.sort``, i.e. the raw walk reversed. Every
message of a key is listed (at most 49 per key), so maxNum was at least 49 (RocketMQ caps it at
``maxMsgsNumBatch`` = 64) and the time window held the whole store (begin 0, end "now" or
``Long.MAX_VALUE``): the raw walk here uses max_num=64, begin=0, end=2**63-1.

rocketstore reads RocketMQ's index files, answers the same raw walk, verifies candidates for
``query_message``, and from the commit log alone rebuilds index files with the same entries
in the same order, file by file.

Always on a writable copy (``rocketmq_store``), never the fixture directory itself.
"""
from __future__ import annotations

import collections
import os
import shutil

import pytest

import refreader
from rocketstore import MessageStore, StoreConfig
from rocketstore.store._indexfile import IndexFile, index_file_size, key_hash

CL_FILE_SIZE = 65536        # commit-log files of the fixture
CQ_FILE_SIZE = 2000         # consume-queue files of the fixture: 100 units
SLOTS, INDEX_NUM = 100, 400  # index files of the fixture
END = 2**63 - 1


def _config(**kw) -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=CL_FILE_SIZE,
                       mapped_file_size_consume_queue=CQ_FILE_SIZE,
                       max_hash_slot_num=SLOTS, max_index_num=INDEX_NUM, **kw)


@pytest.fixture(scope="module")
def expected(expected_lines):
    by_type = collections.defaultdict(list)
    for d in expected_lines:
        by_type[d["type"]].append(d)
    return by_type


def _index_dir(root) -> str:
    return os.path.join(root, "index")


def _entries_of_dir(root) -> list[tuple[str, dict]]:
    return refreader.read_index_dir(_index_dir(root), SLOTS, INDEX_NUM)


# -- the oracle on the fixture ------------------------------------------------------------------

def test_fixture_index_lines_shape(expected):
    assert len(expected["index_file"]) == 6
    assert len(expected["key"]) == 2008
    assert all(d["indexPhyOffsets"] for d in expected["key"])
    assert expected["summary"][0]["keysNotFound"] == 0


def test_reference_reader_reads_rocketmq_index_files(rocketmq_store, expected):
    """refreader's index reader (docs/format.md §6.1) on RocketMQ's files: the headers are the
    `index_file` lines, chains are consistent, and the entries are exactly the keys of every
    record in commit-log order (UNIQ_KEY then KEYS tokens, docs/format.md §6.3)."""
    files = _entries_of_dir(rocketmq_store)
    want = {d["name"]: {k: v for k, v in d.items() if k not in ("name", "type")}
            for d in expected["index_file"]}
    assert [n for n, _ in files] == sorted(want)
    for name, idx in files:
        assert idx["size"] == index_file_size(SLOTS, INDEX_NUM) == 8440
        assert idx["header"] == want[name], name
        assert refreader.check_index_file(idx) == [], name
    keys = []
    for _, _, phy, rec in refreader.iter_commitlog(os.path.join(rocketmq_store, "commitlog")):
        if rec["kind"] == "msg":
            keys += [(refreader.index_key_hash(rec["topic"], k), phy)
                     for k in refreader.index_keys_of_record(rec)]
    got = [(e["key_hash"], e["phy_offset"]) for _, idx in files for e in idx["entries"]]
    assert got == keys
    assert len(got) == 2200


def test_reference_chain_walk_equals_key_lines(rocketmq_store, expected):
    idx = [i for _, i in _entries_of_dir(rocketmq_store)]
    for d in expected["key"]:
        raw = refreader.index_query_offsets(idx, d["topic"], d["key"], 64, 0, END)
        assert raw[::-1] == d["indexPhyOffsets"], d


# -- rocketstore reading RocketMQ's files -------------------------------------------------------

def test_index_file_lines_equal_indexfile_headers(rocketmq_store, expected):
    index_dir = _index_dir(rocketmq_store)
    for d in expected["index_file"]:
        f = IndexFile(os.path.join(index_dir, d["name"]), SLOTS, INDEX_NUM, read_only=True)
        try:
            assert f.file_name == d["name"]
            assert f.header_dict() == {k: v for k, v in d.items() if k not in ("name", "type")}
            assert f.is_full() == (d["indexCount"] >= INDEX_NUM)
            ref = refreader.read_index_file(f.path, SLOTS, INDEX_NUM)
            assert f.entries() == [(e["number"], e["key_hash"], e["phy_offset"],
                                    e["time_diff"], e["prev"]) for e in ref["entries"]]
        finally:
            f.close()


def test_index_service_loads_rocketmq_files(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        files = store.index_service.files
        assert [f.file_name for f in files] == [d["name"] for d in expected["index_file"]]
        for f, d in zip(files, expected["index_file"]):
            assert f.header_dict() == {k: v for k, v in d.items() if k not in ("name", "type")}
        assert store.index_service.last_indexed_offset() == expected["index_file"][-1]["endPhyOffset"]
        # a clean shutdown: nothing is re-indexed
        assert store.recovery["last_exit_ok"] is True
        assert [f.index_count for f in files] == [d["indexCount"] for d in expected["index_file"]]


def test_raw_chain_walk_equals_rocketmq_index_phy_offsets(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        svc = store.index_service
        for d in expected["key"]:
            raw = svc.query_offsets(d["topic"], d["key"], 64, 0, END)
            # newest file first, each chain newest first: descending offsets
            assert raw == sorted(raw, reverse=True), d
            assert raw[::-1] == d["indexPhyOffsets"], d
        # max_num takes the newest ones first
        d = next(d for d in expected["key"] if len(d["indexPhyOffsets"]) == 49)
        assert svc.query_offsets(d["topic"], d["key"], 10, 0, END) == d["indexPhyOffsets"][::-1][:10]
        # a window after the last store time finds nothing
        last_ts = expected["index_file"][-1]["endTimestamp"]
        assert svc.query_offsets(d["topic"], d["key"], 64, last_ts + 1000, END) == []


def test_query_message_equals_rocketmq_key_matches(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        for d in expected["key"]:
            want = [q["physicalOffset"] for q in d["queryMessage"] if q["keyMatches"]]
            wrong = {q["physicalOffset"] for q in d["queryMessage"] if not q["keyMatches"]}
            got = store.query_message(d["topic"], d["key"])
            offs = [m.commitlog_offset for m in got]
            assert offs == want, d
            assert not wrong & set(offs)
            for m in got:
                assert m.topic == d["topic"]
                assert d["key"] in m.keys or m.uniq_key == d["key"]


def test_query_message_by_uniq_key_on_fixture(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        for d in expected["msg"][::7]:
            got = store.query_message_by_uniq_key(d["topic"], d["uniqKey"])
            assert [m.commitlog_offset for m in got] == [d["physicalOffset"]]
            assert got[0].msg_id == d["msgId"]
            assert store.look_message_by_id(d["msgId"]).uniq_key == d["uniqKey"]


# -- rebuilding RocketMQ's index from the commit log ----------------------------------------

@pytest.mark.parametrize("drop", [("index",), ("index", "consumequeue")])
def test_rebuilt_index_equals_rocketmqs(rocketmq_store, fixture_root, expected, drop):
    """Delete index/ (and consumequeue/): the index rocketstore rebuilds by dispatching the
    commit log holds RocketMQ's entries in the same order, file by file (names and creation
    times aside), with the same header counts, offsets and timestamps."""
    theirs = refreader.read_index_dir(str(fixture_root / "store" / "index"), SLOTS, INDEX_NUM)
    for d in drop:
        shutil.rmtree(os.path.join(rocketmq_store, d))
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert store.recovery["redispatched_from"] == 0
        files = store.index_service.files
        assert len(files) == len(theirs)
        names = [f.file_name for f in files]
        mine_live = [(f.header_dict(), [(e[1], e[2], e[4]) for e in f.entries()]) for f in files]
    assert len(set(names)) == len(names) and names == sorted(names)
    mine = refreader.read_index_dir(_index_dir(rocketmq_store), SLOTS, INDEX_NUM)
    assert [n for n, _ in mine] == names
    for (name, m), (tname, t), (hdr, live) in zip(mine, theirs, mine_live):
        assert [(e["key_hash"], e["phy_offset"], e["prev"]) for e in m["entries"]] == \
            [(e["key_hash"], e["phy_offset"], e["prev"]) for e in t["entries"]], (name, tname)
        assert m["slots"] == t["slots"], (name, tname)
        assert m["header"] == t["header"], (name, tname)
        assert hdr == t["header"]
        assert live == [(e["key_hash"], e["phy_offset"], e["prev"]) for e in t["entries"]]
        assert refreader.check_index_file(m) == []
    # the rebuilt store answers every key as RocketMQ did
    with MessageStore.open(rocketmq_store, _config()) as store:
        for d in expected["key"][::5]:
            assert store.index_service.query_offsets(d["topic"], d["key"], 64, 0, END)[::-1] \
                == d["indexPhyOffsets"]
            assert [m.commitlog_offset for m in store.query_message(d["topic"], d["key"])] == \
                [q["physicalOffset"] for q in d["queryMessage"] if q["keyMatches"]]


def test_key_hash_matches_reference_on_fixture_keys(expected):
    for d in expected["key"]:
        assert key_hash(d["topic"], d["key"]) == refreader.index_key_hash(d["topic"], d["key"])
