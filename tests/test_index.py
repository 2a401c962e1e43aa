"""Index files and lookups by key (docs/format.md §6, 8.1): IndexFile, IndexService, query_message.

RocketMQ's capacity rule and file rolling, keys sharing one Java hashCode (the index matches
32-bit hashes; ``query_message`` must verify), time windows (the index keeps whole seconds
after each file's begin time), reopen and re-dispatch without duplicate entries, a SIGKILL
crash (the checkpoint's ``indexMsgTimestamp`` rule, every acknowledged key found), and index
bytes checked against ``refreader``'s struct reader of docs/format.md §6.

Every store here uses small index files (100 slots x 400 entries, the fixture's geometry)
so files fill and roll; the only sleep is one 1.3 s pause in the time-window fixture.
"""
from __future__ import annotations

import collections
import itertools
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import refreader
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._indexfile import IndexFile, index_file_size, key_hash

REPO = Path(__file__).resolve().parent.parent
SLOTS, INDEX_NUM = 100, 400
END = 2**63 - 1
TX_NOT, TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0x0, 0x4, 0x8, 0xC
SMALL = dict(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=2000,
             max_hash_slot_num=SLOTS, max_index_num=INDEX_NUM)


def _config(**kw) -> StoreConfig:
    return StoreConfig(**{**SMALL, **kw})


def _index_dir(root: str) -> str:
    return os.path.join(root, "index")


def _disk_files(root: str, slots: int = SLOTS, num: int = INDEX_NUM):
    return refreader.read_index_dir(_index_dir(root), slots, num)


def _ckpt_index_ts(root: str) -> int:
    with open(os.path.join(root, "checkpoint"), "rb") as f:
        return struct.unpack_from(">q", f.read(24), 16)[0]


def _set_ckpt_index_ts(root: str, ts: int) -> None:
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.seek(16)
        f.write(struct.pack(">q", ts))


def _records(root: str):
    """Decoded ``msg`` records of a store's commit log (refreader), in log order."""
    return [(phy, rec) for _, _, phy, rec in
            refreader.iter_commitlog(os.path.join(root, "commitlog")) if rec["kind"] == "msg"]


def _expected_entries(root: str) -> list[tuple[int, int]]:
    """(key hash, commit-log offset) of every key dispatch must index, in log order."""
    return [(refreader.index_key_hash(rec["topic"], k), phy) for phy, rec in _records(root)
            for k in refreader.index_keys_of_record(rec)]


def _entry_triples(idx) -> list[tuple[int, int, int]]:
    return [(e["key_hash"], e["phy_offset"], e["prev"]) for e in idx["entries"]]


def _collide(blocks: int) -> list[str]:
    """Strings of ``blocks`` blocks, each "Aa" or "BB": all share one Java hashCode."""
    return ["".join(p) for p in itertools.product(("Aa", "BB"), repeat=blocks)]


def _name_ms(name: str) -> float:
    """An index file name (yyyyMMddHHmmssSSS, local time) -> epoch seconds."""
    return time.mktime(time.strptime(name[:14], "%Y%m%d%H%M%S")) + int(name[14:]) / 1000


# -- IndexFile: capacity, header, putKey ------------------------------------------------------

def test_key_hash_is_abs_java_hash_of_topic_hash_key(rand):
    for topic, key in [("T", "k"), ("TopicA", "key-1"), ("AaTopic", "BB"), ("T", "ключ"),
                       ("T", "\U0001F600"), ("", "")]:
        assert key_hash(topic, key) == abs(refreader.java_hash(f"{topic}#{key}"))
        assert key_hash(topic, key) == refreader.index_key_hash(topic, key)
    for _ in range(200):
        k = "".join(chr(rand.randrange(0x20, 0xD7FF)) for _ in range(rand.randrange(12)))
        assert key_hash("Rand", k) == refreader.index_key_hash("Rand", k)


def test_key_hash_of_integer_min_value_is_zero():
    """docs/format.md §6.2: Math.abs(Integer.MIN_VALUE) stays negative -> 0. Build a key whose
    "T#key" hashes to MIN_VALUE: a prefix, then three chars chosen to land on it."""
    target = 0x80000000
    for n in itertools.count():
        prefix = f"x{n}"
        h = refreader.java_hash(f"T#{prefix}") & 0xFFFFFFFF
        rest = (target - h * 31**3) & 0xFFFFFFFF        # = c1 * 961 + c2 * 31 + c3
        c3 = 0x40 + (rest - 0x40) % 31
        rem = (rest - c3) // 31                         # = c1 * 31 + c2
        c2 = 0x40 + (rem - 0x40) % 31
        c1 = (rem - c2) // 31
        if 0x20 <= c1 < 0xD800:
            key = prefix + chr(c1) + chr(c2) + chr(c3)
            break
    assert refreader.java_hash(f"T#{key}") == -2**31
    assert refreader.index_key_hash("T", key) == 0
    assert key_hash("T", key) == 0


def test_index_file_holds_index_num_minus_one_keys(tmp_path):
    """RocketMQ's capacity rule: entry 0 is never used, so 400 entries hold 399 keys and the
    400th putKey fails (isWriteFull: indexCount >= indexNum)."""
    path = str(tmp_path / "20240101000000000")
    f = IndexFile(path, SLOTS, INDEX_NUM, create=True)
    t0 = 1_700_000_000_000
    try:
        assert f.header_dict()["indexCount"] == 1 and not f.is_full()
        for i in range(INDEX_NUM - 1):
            assert f.put_key("T", f"k{i}", 1000 + i * 10, t0 + i * 7), i
        assert f.is_full()
        assert f.put_key("T", "one-too-many", 99_999, t0 + 9999) is False
        hdr = f.header_dict()
        assert hdr["indexCount"] == INDEX_NUM
        assert hdr["beginPhyOffset"] == 1000 and hdr["endPhyOffset"] == 1000 + 398 * 10
        assert hdr["beginTimestamp"] == t0 and hdr["endTimestamp"] == t0 + 398 * 7
        entries = f.entries()
        assert len(entries) == INDEX_NUM - 1
        f.flush()
    finally:
        f.close()
    assert os.path.getsize(path) == index_file_size(SLOTS, INDEX_NUM) == 8440
    ref = refreader.read_index_file(path, SLOTS, INDEX_NUM)
    assert ref["header"] == hdr
    assert refreader.check_index_file(ref) == []
    assert [(e["number"], e["key_hash"], e["phy_offset"], e["time_diff"], e["prev"])
            for e in ref["entries"]] == entries
    for i, e in enumerate(ref["entries"]):
        assert e["key_hash"] == refreader.index_key_hash("T", f"k{i}")
        assert e["time_diff"] == (i * 7) // 1000
    # the whole file can be walked for every key by the reference chain walk
    for i in range(0, INDEX_NUM - 1, 37):
        assert refreader.index_query_offsets([ref], "T", f"k{i}", 64, 0, END) == [1000 + i * 10]


def test_new_index_file_header_starts_from_previous_end(tmp_path):
    """docs/format.md §6.3: a new file's header starts from the previous file's end values; the
    first putKey (indexCount <= 1) then sets beginPhyOffset/beginTimestamp to its message,
    after timeDiff was computed against the carried-over begin time (6.2's order)."""
    prev_phy, prev_ts = 123_456, 1_700_000_000_000
    path = str(tmp_path / "20240101000000001")
    f = IndexFile(path, SLOTS, INDEX_NUM, create=True, prev_end_phy=prev_phy, prev_end_ts=prev_ts)
    try:
        want = {"beginTimestamp": prev_ts, "endTimestamp": prev_ts, "beginPhyOffset": prev_phy,
                "endPhyOffset": prev_phy, "hashSlotCount": 0, "indexCount": 1}
        assert f.header_dict() == want
        assert refreader.read_index_file(path, SLOTS, INDEX_NUM)["header"] == want
        assert f.put_key("T", "first", 200_000, prev_ts + 5_500)
        assert f.put_key("T", "second", 200_100, prev_ts + 5_600)
        assert f.header_dict() == {"beginTimestamp": prev_ts + 5_500,
                                   "endTimestamp": prev_ts + 5_600, "beginPhyOffset": 200_000,
                                   "endPhyOffset": 200_100, "hashSlotCount": 2, "indexCount": 3}
        assert [e[3] for e in f.entries()] == [5, 0]
    finally:
        f.close()


def test_put_key_time_diff_clamps(tmp_path):
    """timeDiff = (store - begin) / 1000 clamped to [0, Integer.MAX_VALUE] (docs/format.md §6.2)."""
    f = IndexFile(str(tmp_path / "20240101000000002"), SLOTS, INDEX_NUM, create=True)
    t0 = 1_700_000_000_000
    try:
        assert f.put_key("T", "a", 0, t0)
        assert f.put_key("T", "b", 1, t0 - 10_000)          # clock went back
        assert f.put_key("T", "c", 2, t0 + 2**31 * 1000 + 5000)
        assert f.put_key("T", "d", 3, t0 + 1999)
        assert [e[3] for e in f.entries()] == [0, 0, 2**31 - 1, 1]
    finally:
        f.close()


def test_slot_chain_newest_first_and_hash_filtered(tmp_path):
    """Keys whose hashes differ but share a slot (hash % 100) are on one chain; the walk
    returns only equal hashes, newest first."""
    f = IndexFile(str(tmp_path / "20240101000000003"), SLOTS, INDEX_NUM, create=True)
    t0 = 1_700_000_000_000
    by_slot = collections.defaultdict(list)
    for i in range(2000):
        by_slot[key_hash("T", f"s{i}") % SLOTS].append(f"s{i}")
    slot_keys = next(v for v in by_slot.values() if len(v) >= 3)[:3]
    try:
        for n, k in enumerate(slot_keys * 3):
            assert f.put_key("T", k, n * 100, t0 + n)
        for j, k in enumerate(slot_keys):
            assert f.select_phy_offsets(key_hash("T", k), 64, 0, END) == \
                [(j + 6) * 100, (j + 3) * 100, j * 100]
            assert f.select_phy_offsets(key_hash("T", k), 2, 0, END) == [(j + 6) * 100, (j + 3) * 100]
        assert f.header_dict()["hashSlotCount"] == 1
    finally:
        f.close()


def test_a_damaged_chain_link_that_loops_ends_the_walk(tmp_path):
    """A chain's links run from newer entries to older ones. Garbage that points an entry's
    link forward (a loop of two or more entries) ends the walk there: the query returns the
    entries before the loop once, and the membership check returns (it used to append the
    loop's offsets until memory ran out, and to spin forever)."""
    path = str(tmp_path / "20240101000000004")
    f = IndexFile(path, SLOTS, INDEX_NUM, create=True)
    t0 = 1_700_000_000_000
    h = key_hash("T", "k")
    try:
        for n in range(3):
            assert f.put_key("T", "k", 1000 + n, t0 + n)        # entries 1, 2, 3
        assert f.select_phy_offsets(h, 1 << 30, 0, END) == [1002, 1001, 1000]
    finally:
        f.close()
    # entry 2's link (prev, 4 bytes at +16) pointed at entry 3 (newer): 3 -> 2 -> 3 -> 2 ...
    with open(path, "r+b") as fh:
        fh.seek(40 + SLOTS * 4 + 2 * 20 + 16)
        fh.write(struct.pack(">i", 3))
    f = IndexFile(path, SLOTS, INDEX_NUM)
    try:
        assert f.select_phy_offsets(h, 1 << 30, 0, END) == [1002, 1001]
        assert f.bad_links == 1                             # counted: the store reports it
        assert not f.has_entry(h, 999)
        assert f.has_entry(h, 1001)
    finally:
        f.close()


# -- IndexService through the store: rolling ----------------------------------------------------

def test_store_rolls_index_files_with_carried_over_header(store_dir):
    """133 messages of 3 keys (UNIQ_KEY + 2) fill file 1 exactly (399 entries); then messages of
    4 keys: file 2 fills in the middle of one (399 = 99 x 4 + 3), whose last key opens file 3.
    A file's begin values are its first entry's message: for a message split over two files
    that is the previous file's end (docs/format.md §6.2, 6.3)."""
    t_start = time.time()
    offsets, times = [], {}
    with MessageStore.open(store_dir, _config()) as store:
        for i in range(133 + 120):
            n = 2 if i < 133 else 3
            r = store.put_message(Message("Roll", b"b%d" % i, keys=[f"r{i}-{j}" for j in range(n)]))
            assert r.ok
            offsets.append(r.commitlog_offset)
            times[r.commitlog_offset] = store.look_message_by_offset(r.commitlog_offset).store_timestamp
        assert store.wait_dispatched(10)
        files = store.index_service.files
        live = [(f.file_name, f.header_dict()) for f in files]
        assert [f.is_full() for f in files] == [True, True, False]
    t_end = time.time()
    disk = _disk_files(store_dir)
    assert [n for n, _ in disk] == [n for n, _ in live]
    names = [n for n, _ in disk]
    assert all(len(n) == 17 and n.isdigit() for n in names)
    assert len(set(names)) == 3 and names == sorted(names)
    for n in names:
        assert t_start - 1 <= _name_ms(n) <= t_end + 1, n      # local time of creation
    for (name, idx), (_, hdr) in zip(disk, live):
        assert idx["header"] == hdr
        assert refreader.check_index_file(idx) == [], name
        first, last = idx["entries"][0], idx["entries"][-1]
        assert hdr["beginPhyOffset"] == first["phy_offset"]
        assert hdr["beginTimestamp"] == times[first["phy_offset"]]
        assert hdr["endPhyOffset"] == last["phy_offset"]
        assert hdr["endTimestamp"] == times[last["phy_offset"]]
    h1, h2, h3 = (idx["header"] for _, idx in disk)
    assert h1["indexCount"] == h2["indexCount"] == INDEX_NUM
    assert h3["indexCount"] == 1 + 1 + 20 * 4
    # file 1 -> 2: no message split; file 2 begins with the next message
    assert h1["endPhyOffset"] == offsets[132] and h2["beginPhyOffset"] == offsets[133]
    # file 2 -> 3: message 232 split 3 + 1: file 3 begins with the previous end values
    assert h2["endPhyOffset"] == offsets[232] == h3["beginPhyOffset"]
    assert h3["beginTimestamp"] == h2["endTimestamp"]
    assert [e["phy_offset"] for e in disk[2][1]["entries"][:2]] == [offsets[232], offsets[233]]
    # every entry is the key dispatch had to index, in order, across the files
    assert [(e["key_hash"], e["phy_offset"]) for _, idx in disk for e in idx["entries"]] == \
        _expected_entries(store_dir)


def test_reopen_after_exactly_full_file_starts_new_file_from_its_end(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        for i in range(133):
            store.put_message(Message("Full", b"x", keys=[f"f{i}a", f"f{i}b"]))
        assert store.wait_dispatched(10)
        assert len(store.index_service.files) == 1
        end = store.index_service.files[0].header_dict()
        assert end["indexCount"] == INDEX_NUM
    with MessageStore.open(store_dir, _config()) as store:
        files = store.index_service.files
        assert len(files) == 2 and files[0].is_full()
        new = files[1].header_dict()
        assert new == {"beginTimestamp": end["endTimestamp"], "endTimestamp": end["endTimestamp"],
                       "beginPhyOffset": end["endPhyOffset"], "endPhyOffset": end["endPhyOffset"],
                       "hashSlotCount": 0, "indexCount": 1}
        assert files[1].file_name != files[0].file_name
        on_disk = refreader.read_index_file(files[1].path, SLOTS, INDEX_NUM)
        assert on_disk["header"] == new and on_disk["entries"] == []
        r = store.put_message(Message("Full", b"x", keys="after"))
        assert store.wait_dispatched(10, until=r)
        assert [m.commitlog_offset for m in store.query_message("Full", "after")] == [r.commitlog_offset]
        assert files[1].header_dict()["beginPhyOffset"] == r.commitlog_offset
        assert [m.commitlog_offset for m in store.query_message("Full", "f0a")] == [0]


# -- hash collisions --------------------------------------------------------------------------

def test_colliding_keys_each_find_only_their_message(store_dir):
    """2^11 keys of blocks "Aa"/"BB" share one Java hashCode, so "C#key" shares one index hash
    and every key is on one chain through several files. query_message verifies each
    candidate against the stored record: exactly the right message per key."""
    keys = _collide(11)
    assert len(keys) == 2048 and len({key_hash("C", k) for k in keys}) == 1
    cfg = _config(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=1000,
                  max_index_num=1500)
    with MessageStore.open(store_dir, cfg) as store:
        off = {}
        for k in keys:
            r = store.put_message(Message("C", k.encode(), keys=k))
            assert r.ok
            off[k] = r.commitlog_offset
        assert store.wait_dispatched(10)
        assert len(store.index_service.files) >= 3
        for k in keys:
            got = store.query_message("C", k)
            assert [m.commitlog_offset for m in got] == [off[k]], k
            assert got[0].body == k.encode() and got[0].keys == [k]
        # the raw walk (RocketMQ's queryOffset) returns hash-colliding candidates: the newest
        # 64 entries of the chain, almost none of them the key asked for
        by_off = {v: k for k, v in off.items()}
        for k in (keys[0], keys[1000], keys[-1]):
            raw = store.index_service.query_offsets("C", k, 64, 0, END)
            assert len(raw) == 64
            assert raw == sorted(raw, reverse=True)
            assert {by_off[o] for o in raw} - {k}
            assert raw == [off[x] for x in keys[::-1][:64]]
        # one more message with a key already used: both found, in commit-log order
        r = store.put_message(Message("C", b"again", keys=keys[5]))
        assert store.wait_dispatched(10, until=r)
        assert [m.commitlog_offset for m in store.query_message("C", keys[5])] == \
            [off[keys[5]], r.commitlog_offset]


def test_topic_and_key_collisions_aa_bb(store_dir):
    """docs/format.md §6.4: "AaTopic#BB", "AaTopic#Aa" and "BBTopic#BB" share a hash."""
    assert len({key_hash("AaTopic", "BB"), key_hash("AaTopic", "Aa"),
                key_hash("BBTopic", "BB"), key_hash("BBTopic", "Aa")}) == 1
    assert key_hash("AaTopic", "BB") == abs(-10606476)
    with MessageStore.open(store_dir, _config()) as store:
        r = store.put_message(Message("BBTopic", b"bb", keys="BB"))
        assert store.wait_dispatched(10, until=r)
        bb = r.commitlog_offset
        # only BBTopic holds key BB: the raw walk finds it for AaTopic too, query_message not
        assert store.index_service.query_offsets("AaTopic", "BB", 64, 0, END) == [bb]
        assert store.query_message("AaTopic", "BB") == []
        assert store.query_message("AaTopic", "Aa") == []
        assert store.query_message("BBTopic", "Aa") == []
        assert [m.commitlog_offset for m in store.query_message("BBTopic", "BB")] == [bb]
        r = store.put_message(Message("AaTopic", b"aa", keys="Aa"))
        assert store.wait_dispatched(10, until=r)
        aa = r.commitlog_offset
        assert store.index_service.query_offsets("AaTopic", "BB", 64, 0, END) == [aa, bb]
        assert [m.commitlog_offset for m in store.query_message("AaTopic", "Aa")] == [aa]
        assert store.query_message("AaTopic", "BB") == []
        assert [m.commitlog_offset for m in store.query_message("BBTopic", "BB")] == [bb]
        # a key that is a prefix/suffix of a KEYS token is not a match
        assert store.query_message("BBTopic", "B") == []


def test_query_message_caps_at_max_msgs_num_batch(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        offs = [store.put_message(Message("Cap", b"%d" % i, keys="same")).commitlog_offset
                for i in range(70)]
        assert store.wait_dispatched(10)
        got = [m.commitlog_offset for m in store.query_message("Cap", "same", max_num=1000)]
        assert got == offs[-64:]                    # the newest 64, in commit-log order
        assert [m.commitlog_offset for m in store.query_message("Cap", "same", max_num=5)] == offs[-5:]
        uniq = "7F0000011234ABCD000000000000BEEF"
        dup = [store.put_message(Message("Cap", b"u", properties={"UNIQ_KEY": uniq})).commitlog_offset
               for _ in range(40)]
        assert store.wait_dispatched(10)
        got = store.query_message_by_uniq_key("Cap", uniq)
        assert [m.commitlog_offset for m in got] == dup[-32:]
        assert all(m.uniq_key == uniq for m in got)


def test_raw_query_offsets_caps_max_num_at_max_msgs_num_batch(store_dir):
    """docs/format.md §6.4: IndexService.queryOffset starts with maxNum = min(maxNum,
    maxMsgsNumBatch = 64), so the raw walk never returns more than 64 offsets."""
    with MessageStore.open(store_dir, _config()) as store:
        offs = [store.put_message(Message("Cap", b"%d" % i, keys="same")).commitlog_offset
                for i in range(70)]
        assert store.wait_dispatched(10)
        assert store.index_service.query_offsets("Cap", "same", 10, 0, END) == offs[::-1][:10]
        assert store.index_service.query_offsets("Cap", "same", 1000, 0, END) == offs[::-1][:64]


# -- time windows ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def timed_store(tmp_path_factory):
    """Messages A, B, then 1.3 s later C, D, all with key "k" plus an own key; one index
    file whose begin time is A's store time, so C and D are 1 whole second after it in the
    index (timeDiff = 1) while stored ~1.3 s after A."""
    root = str(tmp_path_factory.mktemp("timed") / "store")
    store = MessageStore.open(root, _config())
    msgs = {}

    def put(name):
        r = store.put_message(Message("Time", name.encode(), keys=["k", name]))
        m = store.look_message_by_offset(r.commitlog_offset)
        msgs[name] = (r.commitlog_offset, m.store_timestamp)

    put("A")
    put("B")
    time.sleep(1.3)
    put("C")
    put("D")
    assert store.wait_dispatched(10)
    try:
        yield store, root, msgs
    finally:
        store.close()


def test_time_window_entries_hold_whole_seconds(timed_store):
    store, root, msgs = timed_store
    (name, idx), = _disk_files(root)
    ta = msgs["A"][1]
    assert idx["header"]["beginTimestamp"] == ta
    assert idx["header"]["endTimestamp"] == msgs["D"][1]
    for e in idx["entries"]:
        t = next(t for o, t in msgs.values() if o == e["phy_offset"])
        assert e["time_diff"] == (t - ta) // 1000
    assert msgs["C"][1] - ta >= 1300 and (msgs["C"][1] - ta) % 1000 != 0


def _windows(msgs, idx):
    """Interesting [begin, end] edges: each store time and the index's time, +-1 ms."""
    ta = idx["header"]["beginTimestamp"]
    pts = set()
    for _, t in msgs.values():
        tr = ta + (t - ta) // 1000 * 1000
        pts |= {t - 1, t, t + 1, tr - 1, tr, tr + 1}
    pts = sorted(pts)
    return [(lo, hi) for lo in pts for hi in pts if lo <= hi] + [(0, END)]


def test_raw_query_offsets_time_window_is_rocketmqs(timed_store):
    """The raw walk compares begin/end with beginTimestamp + timeDiff*1000 (docs/format.md §6.4): a
    message stored 1.3 s after the file's begin is found by [begin+1000, begin+1000] and not
    by its own store time. rocketstore's query_offsets equals the reference walk."""
    store, root, msgs = timed_store
    (name, idx), = _disk_files(root)
    ta = idx["header"]["beginTimestamp"]
    newest_first = sorted(msgs.values(), reverse=True)
    for lo, hi in _windows(msgs, idx):
        want = [o for o, t in newest_first if lo <= ta + (t - ta) // 1000 * 1000 <= hi]
        assert store.index_service.query_offsets("Time", "k", 64, lo, hi) == want, (lo, hi)
        assert refreader.index_query_offsets([idx], "Time", "k", 64, lo, hi) == want, (lo, hi)
    oc, tc = msgs["C"]
    assert oc not in store.index_service.query_offsets("Time", "k", 64, tc, tc)
    assert oc in store.index_service.query_offsets("Time", "k", 64, ta + 1000, ta + 1000)


def _check_query_window(store, msgs, names, own_only=False):
    for n in names:
        _, t = msgs[n]
        for lo in (t - 1, t, t + 1):
            for hi in (t - 1, t, t + 1):
                if lo > hi:
                    continue
                own = [m.commitlog_offset for m in store.query_message("Time", n, begin_ts=lo,
                                                                         end_ts=hi)]
                assert own == ([msgs[n][0]] if lo <= t <= hi else []), (n, lo - t, hi - t)
                if own_only:
                    continue
                want = sorted(o for o, ts in msgs.values() if lo <= ts <= hi)
                got = [m.commitlog_offset for m in store.query_message("Time", "k", begin_ts=lo,
                                                                         end_ts=hi)]
                assert got == want, (n, lo - t, hi - t)


def test_query_message_window_edges_of_file_first_message(timed_store):
    """A is the file's first message: its index time is its store time, so begin_ts/end_ts
    equal to it include A and one ms outside excludes it."""
    store, _, msgs = timed_store
    _check_query_window(store, msgs, ["A"], own_only=True)
    assert [m.commitlog_offset for m in store.query_message("Time", "k")] == \
        sorted(o for o, _ in msgs.values())
    assert [m.commitlog_offset for m in store.query_message("Time", "k", 64, 0, END)] == \
        sorted(o for o, _ in msgs.values())


def test_query_message_window_edges_are_store_time_ms(timed_store):
    """query_message documents messages "stored in [begin_ts, end_ts] ms" and verifies each
    candidate against its record, so every message must be found by begin_ts = end_ts = its
    store time and not by a window ending 1 ms before it or starting 1 ms after it. The
    index alone holds B at A's time (same second) and C, D at A + 1000 ms; the window must be
    checked against the record's real store time (widening the index window by the second
    the index truncates), not the index's time."""
    store, _, msgs = timed_store
    _check_query_window(store, msgs, ["A", "B", "C", "D"])


# -- reopen, re-dispatch, no duplicates -------------------------------------------------------

def _put_keyed(store, n, prefix="m", topic="Re", nkeys=2):
    out = []
    for i in range(n):
        keys = [f"{prefix}{i}-{j}" for j in range(nkeys)]
        r = store.put_message(Message(topic, b"%d" % i, keys=keys), i % 4)
        assert r.ok
        out.append((r.commitlog_offset, keys))
    return out


def test_reopen_finds_keys_and_redispatch_adds_no_entries(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        put = _put_keyed(store, 300)            # 900 entries: 3 files, none split
        assert store.wait_dispatched(10)
        uniq = {o: store.look_message_by_offset(o).uniq_key for o, _ in put}
        before = [_entry_triples(i) for _, i in _disk_files(store_dir)]
        assert len(before) == 3
        # the dispatcher goes over everything again: the index skips what it has
        store.dispatch_core.reput_offset = 0
        store.dispatch_service.do_dispatch()
        assert [_entry_triples(i) for _, i in _disk_files(store_dir)] == before
    flat = [x for f in before for x in f]
    assert [(h, p) for h, p, _ in flat] == _expected_entries(store_dir)

    def check(store):
        for o, keys in put[::7]:
            for k in keys:
                assert [m.commitlog_offset for m in store.query_message("Re", k)] == [o]
            assert [m.commitlog_offset for m in store.query_message_by_uniq_key("Re", uniq[o])] == [o]

    with MessageStore.open(store_dir, _config()) as store:
        check(store)
        assert store.recovery["messages_redispatched"] == 0
    assert [_entry_triples(i) for _, i in _disk_files(store_dir)] == before
    # an unclean exit whose checkpoint covers every file: files kept, nothing added
    open(os.path.join(store_dir, "abort"), "w").close()
    with MessageStore.open(store_dir, _config()) as store:
        assert store.recovery["last_exit_ok"] is False
        check(store)
    assert [_entry_triples(i) for _, i in _disk_files(store_dir)] == before


@pytest.mark.parametrize("keep", [0, 1, 2])
def test_crash_drops_index_files_newer_than_checkpoint_and_rebuilds(store_dir, keep):
    """docs/format.md §6.3 load(lastExitOK=false): files whose endTimestamp > the checkpoint's
    indexMsgTimestamp are destroyed; re-dispatch rebuilds them entry for entry."""
    with MessageStore.open(store_dir, _config()) as store:
        put = []
        for i in range(300):        # 133 messages of 3 keys per file: 3 files, none split
            put += _put_keyed(store, 1, prefix=f"p{i}-")
            if i in (132, 265):
                time.sleep(0.003)   # each file's end time is older than the next file's
        assert store.wait_dispatched(10)
    before = _disk_files(store_dir)
    assert len(before) == 3
    ckpt = before[keep - 1][1]["header"]["endTimestamp"] if keep else 0
    _set_ckpt_index_ts(store_dir, ckpt)
    open(os.path.join(store_dir, "abort"), "w").close()
    kept = [n for n, i in before if i["header"]["endTimestamp"] <= ckpt]
    assert kept == [n for n, _ in before[:keep]]
    with MessageStore.open(store_dir, _config()) as store:
        names = [f.file_name for f in store.index_service.files]
        for o, keys in put[::5]:
            for k in keys:
                assert [m.commitlog_offset for m in store.query_message("Re", k)] == [o]
    after = _disk_files(store_dir)
    assert [n for n, _ in after] == names
    assert names[:keep] == kept
    assert not set(names[keep:]) & {n for n, _ in before}
    assert [_entry_triples(i) for _, i in after] == [_entry_triples(i) for _, i in before]
    assert [i["header"] for _, i in after] == [i["header"] for _, i in before]


def test_crash_rebuilds_a_file_ending_in_the_checkpoints_millisecond(store_dir):
    """An index file begun in the millisecond the previous full file ended, whose header
    reached the disk but whose later entries did not (same-millisecond puts are the common
    case under load): its end time equals the checkpoint's indexMsgTimestamp, yet the
    checkpoint vouches only for the file it flushed. It must be rebuilt, or its lost keys
    are never found again (the header's count and end offset say they were indexed)."""
    with MessageStore.open(store_dir, _config()) as store:
        put = _put_keyed(store, 200)            # 600 entries: one full file, one partly
        assert store.wait_dispatched(10)
    before = _disk_files(store_dir)
    assert len(before) == 2
    full, part = before[0][1]["header"], before[1][1]["header"]
    t = full["endTimestamp"]
    path = os.path.join(_index_dir(store_dir), before[1][0])
    with open(path, "r+b") as f:
        # the second file's puts all in the first file's last millisecond
        f.write(struct.pack(">qq", t, t))
        # its last entries lost: zeros where the header counts them
        tail = 40 + SLOTS * 4 + (part["indexCount"] // 2) * 20
        f.seek(tail)
        f.write(bytes(os.path.getsize(path) - tail))
    _set_ckpt_index_ts(store_dir, t)
    open(os.path.join(store_dir, "abort"), "w").close()
    with MessageStore.open(store_dir, _config()) as store:
        for o, keys in put:
            for k in keys:
                assert [m.commitlog_offset for m in store.query_message("Re", k)] == [o], k
    after = _disk_files(store_dir)
    assert after[0][0] == before[0][0]          # the flushed file is kept as it was
    assert [_entry_triples(i) for _, i in after] == [_entry_triples(i) for _, i in before]


# -- SIGKILL --------------------------------------------------------------------------------

CRASH_CHILD = """
    import os, struct, sys, time
    from rocketstore import Message, MessageStore, StoreConfig
    root, nkeys, settle_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = StoreConfig(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=2000,
                      max_hash_slot_num=100, max_index_num=400)
    store = MessageStore.open(root, cfg)

    def ckpt_index_ts():
        with open(os.path.join(root, "checkpoint"), "rb") as f:
            return struct.unpack_from(">q", f.read(24), 16)[0]

    i = 0
    while True:
        if i == settle_at:
            # let the dispatcher catch up and the full files' flush reach the checkpoint
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                files = store.index_service.files
                full = [f for f in files if f.is_full()]
                if (store.dispatch_behind_bytes() == 0 and full
                        and ckpt_index_ts() == full[-1].end_timestamp):
                    break
                time.sleep(0.001)
            time.sleep(0.003)
            print("settled", flush=True)
        keys = " ".join("c%d-%d" % (i, j) for j in range(nkeys))
        r = store.put_message(Message("Crash", b"body-%d" % i, keys=keys), i % 4)
        assert r.ok, r.status
        print(i, r.commitlog_offset, flush=True)
        i += 1
        if i % 10 == 0:
            time.sleep(0.001)
"""


def _crash_run(root: str, nkeys: int, settle_at: int, kill_after: int) -> dict[int, int]:
    """A child puts messages of ``nkeys`` keys (plus its UNIQ_KEY) with the dispatch thread
    running, waits at message ``settle_at`` for dispatch and the index checkpoint, and is
    SIGKILLed once ``kill_after`` puts were acknowledged. Returns {i: commit-log offset}."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CRASH_CHILD), root, str(nkeys),
                          str(settle_at)], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    acked: dict[int, int] = {}
    settled = False
    try:
        for line in p.stdout:
            if line == "settled\n":
                settled = True
                continue
            i, off = map(int, line.split())
            acked[i] = off
            if len(acked) >= kill_after:
                break
        else:
            raise AssertionError(f"child ended early: {p.wait()} {p.stderr.read()}")
        os.kill(p.pid, signal.SIGKILL)
        rest = p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL
    for line in rest.splitlines(keepends=True):
        if line.endswith("\n") and line != "settled\n":
            i, off = map(int, line.split())
            acked[i] = off
    assert settled and sorted(acked) == list(range(len(acked)))
    return acked


def _check_crash(root: str, acked: dict[int, int], nkeys: int, redo_last_kept: bool = False) -> None:
    """Reopen after the kill: the checkpoint rule decided which files survived, every
    acknowledged message is found by each key and by its UNIQ_KEY (exactly once), and the
    index entries are exactly the keys of the stored records. ``redo_last_kept``: entries of
    the message at the last kept file's endPhyOffset may appear twice (RocketMQ re-indexes
    that message: it skips only offsets < endPhyOffset, docs/format.md §6.3)."""
    before = _disk_files(root)
    ckpt = _ckpt_index_ts(root)
    assert os.path.exists(os.path.join(root, "abort"))
    assert ckpt > 0
    survivors = [n for n, i in before if i["header"]["endTimestamp"] <= ckpt]
    dropped = [n for n, i in before if i["header"]["endTimestamp"] > ckpt]
    assert survivors and dropped
    with MessageStore.open(root, _config()) as store:
        assert store.recovery["last_exit_ok"] is False
        names = [f.file_name for f in store.index_service.files]
        # docs/format.md §6.3: files newer than indexMsgTimestamp were dropped, the others kept
        assert [n for n in names if n in {x for x, _ in before}] == survivors
        assert not any(os.path.exists(os.path.join(_index_dir(root), n)) for n in dropped)
        missing = []
        for i, off in sorted(acked.items()):
            m = store.look_message_by_offset(off)
            assert m is not None and m.body == b"body-%d" % i
            if [x.commitlog_offset for x in store.query_message_by_uniq_key("Crash", m.uniq_key)] != [off]:
                missing.append(m.uniq_key)
            for j in range(nkeys):
                if [x.commitlog_offset for x in store.query_message("Crash", f"c{i}-{j}")] != [off]:
                    missing.append(f"c{i}-{j}")
        assert missing == [], f"{len(missing)} acknowledged keys not found: {missing[:10]}"
    # no duplicate and no missing entry: the entries are exactly the keys of the stored records
    entries = collections.Counter((e["key_hash"], e["phy_offset"])
                                  for _, idx in _disk_files(root) for e in idx["entries"])
    want = collections.Counter(_expected_entries(root))
    assert set(o for _, o in want) >= set(acked.values())
    extra, lost = entries - want, want - entries
    assert not lost, sorted(lost.items())[:10]
    if redo_last_kept:
        redo = [i for n, i in before if n == survivors[-1]][0]["header"]["endPhyOffset"]
        extra = collections.Counter({k: c for k, c in extra.items()
                                     if k[1] != redo or c > want[k]})
    assert not extra, sorted(extra.items())[:10]
    for _, idx in _disk_files(root):
        assert refreader.check_index_file(idx) == []


def test_crash_sigkill_every_acked_key_found_once(store_dir, rand):
    """Messages of UNIQ_KEY + 2 keys: 399 entries = 133 messages, so no message is split over
    two files. Killed at a random point after the second file filled and was flushed."""
    kill_after = rand.randint(300, 380)      # file 3 (messages 266-398) never fills
    acked = _crash_run(store_dir, nkeys=2, settle_at=280, kill_after=kill_after)
    _check_crash(store_dir, acked, nkeys=2)


def test_crash_sigkill_keeps_keys_of_message_split_over_files(store_dir):
    """Messages of UNIQ_KEY + 3 keys: file 1 fills after 3 keys of message 99 (399 = 99 x 4 + 3),
    its 4th key ("c99-2") is entry 1 of file 2. File 1 is flushed and the checkpoint takes its
    end time (message 99's); later messages make file 2 newer. After SIGKILL, load keeps file 1
    and drops file 2 (docs/format.md §6.3): re-dispatch must index message 99's last key again
    (RocketMQ skips only offsets < the last file's endPhyOffset, so message 99 is redone)."""
    acked = _crash_run(store_dir, nkeys=3, settle_at=150, kill_after=165)
    _check_crash(store_dir, acked, nkeys=3, redo_last_kept=True)


# -- bytes against the reference reader ------------------------------------------------------

def test_index_bytes_match_reference_reader(store_dir, rand):
    """Random KEYS (0-4 tokens, some repeated, extra spaces) over several topics: every
    entry's hash is abs(java_hash(topic#key)) of the key dispatch had to index, in order; slot
    chains are consistent; header counts and times match; timeDiff from beginTimestamp."""
    topics = ["IdxA", "IdxB", "Idx%C"]
    with MessageStore.open(store_dir, _config()) as store:
        for i in range(500):
            toks = [rand.choice([f"k{rand.randrange(60)}", f"u{i}", "ключ", "Aa", "BB"])
                    for _ in range(rand.randrange(5))]
            keys = (" " * rand.randrange(1, 3)).join(toks)
            props = {"KEYS": keys} if keys else None
            r = store.put_message(Message(rand.choice(topics), b"x" * rand.randrange(50),
                                          properties=props), rand.randrange(4))
            assert r.ok
    files = _disk_files(store_dir)
    assert len(files) >= 3
    recs = dict(_records(store_dir))
    want = _expected_entries(store_dir)
    assert [(e["key_hash"], e["phy_offset"]) for _, i in files for e in i["entries"]] == want
    for name, idx in files:
        assert refreader.check_index_file(idx) == [], name
        hdr = idx["header"]
        assert hdr["indexCount"] == len(idx["entries"]) + 1
        assert hdr["beginTimestamp"] == recs[idx["entries"][0]["phy_offset"]]["store_timestamp"]
        assert hdr["endTimestamp"] == recs[idx["entries"][-1]["phy_offset"]]["store_timestamp"]
        for e in idx["entries"]:
            t = recs[e["phy_offset"]]["store_timestamp"]
            assert e["time_diff"] == max(0, (t - hdr["beginTimestamp"]) // 1000)
    assert all(i["header"]["indexCount"] == INDEX_NUM for _, i in files[:-1])
    # the reference walk and the store's raw walk agree on every key
    idxs = [i for _, i in files]
    with MessageStore.open(store_dir, _config()) as store:
        for phy, rec in list(recs.items())[::3]:
            for k in refreader.index_keys_of_record(rec):
                raw = store.index_service.query_offsets(rec["topic"], k, 64, 0, END)
                assert raw == refreader.index_query_offsets(idxs, rec["topic"], k, 64, 0, END)
                got = [m.commitlog_offset for m in store.query_message(rec["topic"], k)]
                holders = [o for o, r2 in recs.items() if r2["topic"] == rec["topic"]
                           and k in refreader.index_keys_of_record(r2)]
                assert phy in holders
                assert got == sorted(holders)[-64:], (rec["topic"], k)


# -- transactions, disabled index, allocation -----------------------------------------------------

def test_rollback_not_indexed_prepared_and_commit_indexed(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        offs = {}
        for tx in (TX_NOT, TX_PREPARED, TX_COMMIT, TX_ROLLBACK):
            r = store.put_message(Message("Tx", b"x", keys=f"tx{tx}", sys_flag=tx))
            assert r.ok
            offs[tx] = r.commitlog_offset
        assert store.wait_dispatched(10)
        uniq = {tx: store.look_message_by_offset(o).uniq_key for tx, o in offs.items()}
        for tx in (TX_NOT, TX_PREPARED, TX_COMMIT):
            assert [m.commitlog_offset for m in store.query_message("Tx", f"tx{tx}")] == [offs[tx]]
            assert [m.commitlog_offset for m in store.query_message_by_uniq_key("Tx", uniq[tx])] == [offs[tx]]
        assert store.query_message("Tx", f"tx{TX_ROLLBACK}") == []
        assert store.index_service.query_offsets("Tx", f"tx{TX_ROLLBACK}", 64, 0, END) == []
        assert store.query_message_by_uniq_key("Tx", uniq[TX_ROLLBACK]) == []
    (name, idx), = _disk_files(store_dir)
    phys = [e["phy_offset"] for e in idx["entries"]]
    assert offs[TX_ROLLBACK] not in phys
    assert phys == [offs[TX_NOT]] * 2 + [offs[TX_PREPARED]] * 2 + [offs[TX_COMMIT]] * 2
    assert [(e["key_hash"], e["phy_offset"]) for e in idx["entries"]] == _expected_entries(store_dir)


def test_message_index_disabled_writes_no_index(store_dir):
    with MessageStore.open(store_dir, _config(message_index_enable=False)) as store:
        r = store.put_message(Message("NoIdx", b"x", keys="k"))
        assert r.ok
        assert store.wait_dispatched(10, until=r)
        assert store.query_message("NoIdx", "k") == []
        assert store.index_service.files == []
    assert not os.path.exists(_index_dir(store_dir))
    with MessageStore.open(store_dir, _config(message_index_enable=False)) as store:
        store.put_message(Message("NoIdx", b"y", keys="k"))
    assert not os.path.exists(_index_dir(store_dir))
    assert _ckpt_index_ts(store_dir) == 0


def test_default_index_file_is_sparse(store_dir):
    """A default index file is 420,000,040 bytes (5 M slots, 20 M entries, docs/format.md §6.1) but
    entries are allocated a chunk at a time: a small store does not take 420 MB of disk."""
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=65536,
                                                  mapped_file_size_consume_queue=2000)) as store:
        for i in range(50):
            store.put_message(Message("Sparse", b"x", keys=f"s{i}"))
        assert store.wait_dispatched(10)
        (f,) = store.index_service.files
        assert [m.commitlog_offset for m in store.query_message("Sparse", "s7")] != []
        path = f.path
    st = os.stat(path)
    assert st.st_size == index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert st.st_blocks * 512 < 64 * 1024 * 1024, st.st_blocks * 512
    idx = refreader.read_index_file(path, 5_000_000, 20_000_000)
    assert idx["header"]["indexCount"] == 101
    assert refreader.check_index_file(idx) == []
