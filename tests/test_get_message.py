"""get_message and the queue-offset lookups around it (docs/format.md §3, 5.4, 13).

Every status of the docs/format.md §13 table at its boundary with the ``next_begin_offset`` the
table gives; the batch-full rules (``isTheBatchFull``); tag filters including a Java hashCode
collision; zero-copy bodies that outlive the store; long polling; offsets by store time with
runs of equal timestamps; consumer offsets.

Consume-queue bytes are checked by reading the files directly (docs/format.md §5.1 layout) and tag
codes against ``refreader.java_hash``, never against rocketstore's own helpers.
"""
from __future__ import annotations

import json
import os
import struct
import threading
import time

import pytest

import refreader
from rocketstore import (GetMessageStatus, InvalidMessageError, Message, MessageStore,
                         StoreConfig)
from rocketstore.errors import StoreReadOnlyError
from rocketstore.store.status import BoundaryType

S = GetMessageStatus
CL_SIZE = 4096
FILLER_SIZE = 0x7FFFFFFF


def _config(**kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", CL_SIZE)
    return StoreConfig(**kw)


def _cq_units(root: str, topic: str, qid: int) -> list[tuple[int, int, int]]:
    """Every unit of a consume queue read from its files (docs/format.md §5.1), up to the first
    zero-size unit: (commit-log offset, size, tags code)."""
    d = os.path.join(root, "consumequeue", topic, str(qid))
    out = []
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        for pos in range(0, len(data) - 19, 20):
            phy, size, code = struct.unpack_from(">qiq", data, pos)
            if size == 0:
                return out
            out.append((phy, size, code))
    return out


def _put_n(store, topic, qid, n, body=lambda i: b"m%05d" % i, tags=lambda i: None):
    """Put ``n`` messages and wait until everything put so far is readable."""
    puts = [store.put_message(Message(topic, body(i), tags=tags(i)), qid) for i in range(n)]
    assert store.wait_dispatched(10)
    return puts


def _bodies(result) -> list[bytes]:
    return [bytes(m.body) for m in result.messages]


# -- statuses and next_begin_offset (docs/format.md §13 table) ----------------------------------------

@pytest.mark.parametrize("offset", [0, 1, 7, 2**40])
def test_unknown_queue_is_no_message_in_queue(store_dir, offset):
    with MessageStore.open(store_dir, _config()) as store:
        store.put_message(Message("Known", b"x"), 1)
        assert store.wait_dispatched(10)
        for topic, qid in [("Nope", 0), ("Known", 0), ("Known", 2)]:
            r = store.get_message("g", topic, qid, offset)
            assert r.status is S.NO_MESSAGE_IN_QUEUE
            assert r.next_begin_offset == 0
            assert r.messages == [] and (r.min_offset, r.max_offset) == (0, 0)
            assert store.get_min_offset_in_queue(topic, qid) == 0
            assert store.get_max_offset_in_queue(topic, qid) == 0


def test_empty_store_is_no_message_in_queue(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        r = store.get_message("g", "T", 0, 0)
        assert (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)


def test_statuses_around_max_offset(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 3, 10)
        assert store.get_max_offset_in_queue("T", 3) == 10
        r = store.get_message("g", "T", 3, 9)
        assert r.status is S.FOUND and r.next_begin_offset == 10
        assert [m.queue_offset for m in r] == [9] and _bodies(r) == [b"m00009"]
        r = store.get_message("g", "T", 3, 10)            # offset == max
        assert (r.status, r.next_begin_offset, r.messages) == (S.OFFSET_OVERFLOW_ONE, 10, [])
        for off in (11, 12, 10**6):                      # offset > max -> back to max
            r = store.get_message("g", "T", 3, off)
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 10)
        r = store.get_message("g", "T", 3, 0)
        assert r.status is S.FOUND and r.next_begin_offset == 10
        assert [m.queue_offset for m in r] == list(range(10))
        assert (r.min_offset, r.max_offset) == (0, 10)


def test_negative_offset_is_offset_too_small(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 3)
        r = store.get_message("g", "T", 0, -1)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, 0)


def test_offset_too_small_with_filler_units(store_dir):
    """A queue whose first unit is not 0 (its offset table says 5, e.g. restored on a slave or
    after its consume-queue files were cleaned) starts with filler units (docs/format.md §5.1)."""
    with MessageStore.open(store_dir, _config()) as store:
        store.commit_log.set_queue_offset("F", 0, 5)
        r = store.put_message(Message("F", b"first real"), 0)
        assert r.queue_offset == 5
        _put_n(store, "F", 0, 2)
        assert store.get_min_offset_in_queue("F", 0) == 5
        assert store.get_max_offset_in_queue("F", 0) == 8
        for off in range(5):
            g = store.get_message("g", "F", 0, off)
            assert (g.status, g.next_begin_offset, g.messages) == (S.OFFSET_TOO_SMALL, 5, [])
            assert store.get_message_store_timestamp("F", 0, off) == -1
        g = store.get_message("g", "F", 0, 5)
        assert g.status is S.FOUND and g.next_begin_offset == 8
        assert _bodies(g) == [b"first real", b"m00000", b"m00001"]
        assert [m.queue_offset for m in g] == [5, 6, 7]
    # on disk: five fillers, then the real units
    units = _cq_units(store_dir, "F", 0)
    assert units[:5] == [(0, FILLER_SIZE, 0)] * 5
    assert units[5][0] == r.commitlog_offset and len(units) == 8
    with MessageStore.open(store_dir, _config()) as store:     # recovery keeps the min
        assert store.get_min_offset_in_queue("F", 0) == 5
        g = store.get_message("g", "F", 0, 4)
        assert (g.status, g.next_begin_offset) == (S.OFFSET_TOO_SMALL, 5)
        assert store.put_message(Message("F", b"after reopen"), 0).queue_offset == 8


def test_offset_too_small_after_oldest_commit_log_file_deleted(store_dir):
    """The commit log's oldest file was deleted (as the clean service does): the queue's min
    offset moves to the first unit whose record is still stored (docs/format.md §5.3)."""
    cfg = _config()
    with MessageStore.open(store_dir, cfg) as store:
        puts = []
        for i in range(80):
            puts.append(store.put_message(Message("T", b"t%03d" % i + bytes(60)), 0))
            store.put_message(Message("Other", bytes(40)), 1)
        assert store.get_max_phy_offset() > 3 * CL_SIZE
    os.unlink(os.path.join(store_dir, "commitlog", f"{0:020d}"))
    first_kept = next(r.queue_offset for r in puts if r.commitlog_offset >= CL_SIZE)
    assert first_kept > 0
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_min_phy_offset() == CL_SIZE
        assert store.get_min_offset_in_queue("T", 0) == first_kept
        for off in (0, first_kept - 1):
            r = store.get_message("g", "T", 0, off)
            assert (r.status, r.next_begin_offset, r.messages) == \
                (S.OFFSET_TOO_SMALL, first_kept, [])
            assert r.min_offset == first_kept and r.max_offset == 80
        r = store.get_message("g", "T", 0, first_kept, max_msgs=10)
        assert r.status is S.FOUND
        assert [m.queue_offset for m in r] == list(range(first_kept, first_kept + 10))
        assert _bodies(r) == [b"t%03d" % i + bytes(60) for i in range(first_kept, first_kept + 10)]
        assert r.next_begin_offset == first_kept + 10
        # times: records below the commit log's min are too old (docs/format.md §5.4)
        assert store.get_message_store_timestamp("T", 0, first_kept - 1) == -1
        ts = store.get_message_store_timestamp("T", 0, first_kept)
        assert ts == r.messages[0].store_timestamp
        assert store.get_offset_in_queue_by_time("T", 0, 0) == first_kept
        assert store.get_offset_in_queue_by_time("T", 0, 0, "UPPER") == 0
        assert store.get_offset_in_queue_by_time("T", 0, 2**62) == 80
        assert store.get_offset_in_queue_by_time("T", 0, 2**62, "UPPER") == 79


def test_min_offset_skips_consume_queue_files_whose_data_is_gone(store_dir):
    """Several commit-log files deleted (the consume-queue clean has not run): whole queue
    files point below the commit log's min, and the min offset lands past them, on the
    first unit whose record is still stored."""
    cfg = _config(mapped_file_size_consume_queue=400)      # 20 units per queue file
    with MessageStore.open(store_dir, cfg) as store:
        puts = _put_n(store, "T", 0, 100, body=lambda i: b"r%03d" % i + bytes(80))
    # delete every commit-log file that holds one of units 0..39
    last_dead = max(r.commitlog_offset for r in puts[:40]) // CL_SIZE
    for k in range(last_dead + 1):
        os.unlink(os.path.join(store_dir, "commitlog", f"{k * CL_SIZE:020d}"))
    min_phy = (last_dead + 1) * CL_SIZE
    alive = [r.queue_offset for r in puts if r.commitlog_offset >= min_phy]
    assert alive == list(range(alive[0], 100)) and alive[0] >= 40
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_min_phy_offset() == min_phy
        assert store.get_min_offset_in_queue("T", 0) == alive[0]
        for off in (0, 20, 39, alive[0] - 1):
            r = store.get_message("g", "T", 0, off)
            assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, alive[0])
        r = store.get_message("g", "T", 0, alive[0])
        end = (alive[0] // 20 + 1) * 20
        assert r.status is S.FOUND and r.next_begin_offset == end
        assert _bodies(r) == [b"r%03d" % i + bytes(80) for i in range(alive[0], end)]
        assert store.get_offset_in_queue_by_time("T", 0, 0) == alive[0]


def test_next_begin_offset_stops_at_consume_queue_file_end(store_dir):
    # one call reads units of one consume-queue file (4.9.x; 5.x travels 1 file)
    cfg = _config(mapped_file_size_consume_queue=400)
    with MessageStore.open(store_dir, cfg) as store:
        _put_n(store, "T", 0, 45)
        r = store.get_message("g", "T", 0, 15, max_msgs=100)
        assert [m.queue_offset for m in r] == list(range(15, 20))
        assert r.next_begin_offset == 20 and r.units_scanned == 5
        r = store.get_message("g", "T", 0, 19, max_msgs=100)     # last unit of a file
        assert [m.queue_offset for m in r] == [19] and r.next_begin_offset == 20
        r = store.get_message("g", "T", 0, 20, max_msgs=100)     # first unit of the next
        assert [m.queue_offset for m in r] == list(range(20, 40)) and r.next_begin_offset == 40
        r = store.get_message("g", "T", 0, 40, max_msgs=100)     # last file, partly written
        assert [m.queue_offset for m in r] == list(range(40, 45)) and r.next_begin_offset == 45


# -- batch size (isTheBatchFull) ------------------------------------------------------------

@pytest.mark.parametrize("max_msgs", [1, 2, 7, 31])
def test_max_msgs_respected(store_dir, max_msgs):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 40)
        for start in (0, 5, 39):
            r = store.get_message("g", "T", 0, start, max_msgs=max_msgs)
            want = list(range(start, min(start + max_msgs, 40)))
            assert [m.queue_offset for m in r] == want
            assert r.next_begin_offset == start + len(want)


def test_bad_max_msgs(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 2)
        for bad in (0, -1):
            with pytest.raises(InvalidMessageError):
                store.get_message("g", "T", 0, 0, max_msgs=bad)


def test_in_memory_count_cap_is_32(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 70)
        r = store.get_message("g", "T", 0, 0, max_msgs=64)
        assert len(r) == 32 and r.next_begin_offset == 32 and r.units_scanned == 32
        r = store.get_message("g", "T", 0, 32, max_msgs=64)
        assert [m.queue_offset for m in r] == list(range(32, 64))
        r = store.get_message("g", "T", 0, 64, max_msgs=64)
        assert [m.queue_offset for m in r] == list(range(64, 70)) and r.next_begin_offset == 70


def test_in_memory_count_cap_configurable(store_dir):
    with MessageStore.open(store_dir, _config(max_transfer_count_on_message_in_memory=5)) as store:
        _put_n(store, "T", 0, 12)
        r = store.get_message("g", "T", 0, 0, max_msgs=32)
        assert len(r) == 5 and r.next_begin_offset == 5


def test_in_disk_count_cap_is_8(store_dir):
    # accessMessageInMemoryMaxRatio 0: every message counts as "on disk"
    with MessageStore.open(store_dir, _config(access_message_in_memory_max_ratio=0)) as store:
        _put_n(store, "T", 0, 20)
        r = store.get_message("g", "T", 0, 0, max_msgs=32)
        assert len(r) == 8 and r.next_begin_offset == 8
        assert r.suggest_pulling_from_slave


def _equal_sized(store, n):
    puts = _put_n(store, "T", 0, n, body=lambda i: b"%06d" % i + bytes(94), tags=lambda i: "TagA")
    sizes = {r.wrote_bytes for r in puts}
    assert len(sizes) == 1
    return sizes.pop()


def test_in_memory_bytes_cap(store_dir):
    with MessageStore.open(store_dir + ".probe", _config()) as probe:
        size = _equal_sized(probe, 1)
    # total + size > cap -> full: a cap of exactly 3 sizes holds 3
    for cap, want in ((3 * size, 3), (3 * size - 1, 2), (1, 1)):
        d = f"{store_dir}.{cap}"
        with MessageStore.open(d, _config(max_transfer_bytes_on_message_in_memory=cap)) as store:
            _equal_sized(store, 10)
            r = store.get_message("g", "T", 0, 0, max_msgs=32)
            assert len(r) == want, cap           # never full before the first message
            assert r.buffer_total_size == want * size
            assert r.next_begin_offset == want


def test_default_in_memory_bytes_cap_is_256_kib(store_dir):
    with MessageStore.open(store_dir, _config(mapped_file_size_commit_log=1 << 20)) as store:
        _put_n(store, "T", 0, 6, body=lambda i: bytes([i]) * 100_000)
        r = store.get_message("g", "T", 0, 0, max_msgs=32)
        # 2 x ~100 KB fit in 256 KiB, a third would not
        assert [m.queue_offset for m in r] == [0, 1] and r.next_begin_offset == 2
        assert _bodies(r) == [bytes([0]) * 100_000, bytes([1]) * 100_000]


def test_max_bytes(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        size = _equal_sized(store, 10)
        assert size > 100
        for max_bytes, want in ((3 * size, 3), (3 * size - 1, 2), (size, 1), (1, 1),
                                (100 * size, 10)):
            r = store.get_message("g", "T", 0, 0, max_msgs=32, max_bytes=max_bytes)
            assert len(r) == want, max_bytes
            assert r.buffer_total_size == want * size
            assert r.next_begin_offset == want
            assert sum(m.store_size for m in r) == r.buffer_total_size


# -- tag filters -----------------------------------------------------------------------------

TAG_CYCLE = ["A", "B", "C", None, "A"]


def _tagged_store(store_dir, n=25):
    store = MessageStore.open(store_dir, _config())
    puts = _put_n(store, "T", 0, n, tags=lambda i: TAG_CYCLE[i % len(TAG_CYCLE)])
    assert [r.queue_offset for r in puts] == list(range(n))
    return store


@pytest.mark.parametrize("expr, wanted", [
    ("A", {"A"}),
    ("B", {"B"}),
    ("A || B", {"A", "B"}),
    ("A||C", {"A", "C"}),
    ("  C  ||   A ", {"A", "C"}),
    (["B", "C"], {"B", "C"}),
    (("A",), {"A"}),
    ("*", None),
    (None, None),
    (["*"], None),
])
def test_tag_filter(store_dir, expr, wanted):
    with _tagged_store(store_dir) as store:
        for start in (0, 3, 24):
            r = store.get_message("g", "T", 0, start, tags=expr)
            exp = [i for i in range(start, 25)
                   if wanted is None or TAG_CYCLE[i % len(TAG_CYCLE)] in wanted]
            assert [m.queue_offset for m in r] == exp
            assert all(m.tags == TAG_CYCLE[m.queue_offset % len(TAG_CYCLE)] for m in r)
            assert _bodies(r) == [b"m%05d" % i for i in exp]
            assert r.status is (S.FOUND if exp else S.NO_MATCHED_MESSAGE)
            # every unit up to the end was scanned and consumed
            assert r.units_scanned == 25 - start and r.next_begin_offset == 25


def test_tag_filter_respects_max_msgs(store_dir):
    with _tagged_store(store_dir) as store:
        r = store.get_message("g", "T", 0, 0, max_msgs=3, tags="A")
        # A sits at 0, 4, 5, 9, 10, ...: the batch is full when unit 9 comes up
        assert [m.queue_offset for m in r] == [0, 4, 5]
        assert r.next_begin_offset == 6
        r = store.get_message("g", "T", 0, r.next_begin_offset, max_msgs=3, tags="A")
        assert [m.queue_offset for m in r] == [9, 10, 14]


def test_no_matched_message(store_dir):
    with _tagged_store(store_dir) as store:
        for start in (0, 11, 24):
            r = store.get_message("g", "T", 0, start, tags="Z")
            assert r.status is S.NO_MATCHED_MESSAGE and r.messages == []
            assert r.units_scanned == 25 - start
            assert r.next_begin_offset == start + r.units_scanned == 25


def test_no_matched_message_scan_is_bounded(store_dir):
    # max(16000 bytes, max_msgs * 20) of units per call: 800 by default
    with MessageStore.open(store_dir, _config(mapped_file_size_commit_log=1 << 20)) as store:
        store.put_messages([Message("T", b"b", tags="B") for _ in range(1100)], 0)
        assert store.wait_dispatched(10)
        r = store.get_message("g", "T", 0, 0, tags="A")
        assert (r.status, r.units_scanned, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800, 800)
        r = store.get_message("g", "T", 0, 800, tags="A")
        assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1100)
        r = store.get_message("g", "T", 0, 0, max_msgs=1000, tags="A")
        assert r.next_begin_offset == 1000


def test_hash_collision_aa_bb(store_dir):
    assert refreader.java_hash("Aa") == refreader.java_hash("BB") == 2112
    tags = ["Aa", "BB", "BB", "Aa", "BB", "Aa", "Aa", "BB"]
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "C", 0, len(tags), tags=lambda i: tags[i])
        units = _cq_units(store_dir, "C", 0)
        assert [u[2] for u in units] == [2112] * len(tags)     # the consume queue cannot tell
        for want in ("Aa", "BB"):
            r = store.get_message("g", "C", 0, 0, tags=want)
            exp = [i for i, t in enumerate(tags) if t == want]
            assert [m.queue_offset for m in r] == exp
            assert [m.tags for m in r] == [want] * len(exp)
            assert r.units_scanned == len(tags) and r.next_begin_offset == len(tags)
        # a queue of BB only: nothing for Aa, though every unit's code matches
        _put_n(store, "C", 1, 6, tags=lambda i: "BB")
        r = store.get_message("g", "C", 1, 0, tags="Aa")
        assert r.status is S.NO_MATCHED_MESSAGE and r.messages == []
        assert r.units_scanned == 6 and r.next_begin_offset == 6
        r = store.get_message("g", "C", 1, 2, tags=["Aa", "BB"])
        assert [m.queue_offset for m in r] == [2, 3, 4, 5]


def test_hash_zero_tag_does_not_match_untagged(store_dir):
    # untagged messages have tags code 0; so does this tag
    zero = "pollinating sandboxes"
    assert refreader.java_hash(zero) == 0
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "Z", 0, 6, tags=lambda i: zero if i == 4 else None)
        assert [u[2] for u in _cq_units(store_dir, "Z", 0)] == [0] * 6
        r = store.get_message("g", "Z", 0, 0, tags=zero)
        assert [m.queue_offset for m in r] == [4] and r.units_scanned == 6
        r = store.get_message("g", "Z", 0, 0, tags="\x00")      # hash 0 too, matches none
        assert r.status is S.NO_MATCHED_MESSAGE and r.next_begin_offset == 6


def test_more_than_8_tags_raise(store_dir):
    with _tagged_store(store_dir) as store:
        nine = [f"t{i}" for i in range(9)]
        with pytest.raises(InvalidMessageError):
            store.get_message("g", "T", 0, 0, tags=nine)
        with pytest.raises(InvalidMessageError):
            store.get_message("g", "T", 0, 0, tags=" || ".join(nine))
        # 8 is fine, and so are 9 names of which only 8 differ
        r = store.get_message("g", "T", 0, 0, tags=nine[:7] + ["A"])
        assert r.status is S.FOUND and {m.tags for m in r} == {"A"}
        r = store.get_message("g", "T", 0, 0, tags=nine[:7] + ["A", "t0"])
        assert r.status is S.FOUND


def test_empty_tag_expression_subscribes_to_all(store_dir):
    """RocketMQ's FilterAPI.buildSubscriptionData treats an empty subscription string like
    "*" (SUB_ALL); a consumer subscribing with "" must not skip every message."""
    with _tagged_store(store_dir) as store:
        r = store.get_message("g", "T", 0, 0, tags="")
        assert r.status is S.FOUND
        assert [m.queue_offset for m in r] == list(range(25))


@pytest.mark.parametrize("tag", ["标签", "tág", "😀", "Ωmega", "ß"])
def test_non_ascii_tags(store_dir, tag):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "U", 0, 6, tags=lambda i: tag if i % 2 else "plain")
        codes = [u[2] for u in _cq_units(store_dir, "U", 0)]
        assert codes == [refreader.java_hash("plain"), refreader.java_hash(tag)] * 3
        r = store.get_message("g", "U", 0, 0, tags=tag)
        assert [m.queue_offset for m in r] == [1, 3, 5]
        assert [m.tags for m in r] == [tag] * 3
        r = store.get_message("g", "U", 0, 0, tags=f"plain || {tag}")
        assert len(r) == 6


# -- zero-copy bodies ------------------------------------------------------------------------

def test_bodies_are_zero_copy_views(store_dir, rand):
    bodies = [rand.randbytes(rand.randint(0, 900)) for _ in range(40)]
    with MessageStore.open(store_dir, _config()) as store:
        for b in bodies:
            store.put_message(Message("T", b), 0)
        assert store.get_max_phy_offset() > 3 * CL_SIZE          # spans several files
        assert store.wait_dispatched(10)
        got = []
        off = 0
        while off < len(bodies):
            r = store.get_message("g", "T", 0, off)
            assert r.status is S.FOUND
            for m in r:
                assert isinstance(m.body, memoryview)
                assert m.body.readonly
                assert m.body_size == len(m.body)
            got.extend(r.messages)
            off = r.next_begin_offset
        assert [bytes(m.body) for m in got] == bodies


def test_messages_stay_readable_after_close(store_dir, rand):
    bodies = [rand.randbytes(rand.randint(1, 700)) for _ in range(20)]
    store = MessageStore.open(store_dir, _config())
    for b in bodies:
        store.put_message(Message("T", b, tags="X"), 0)
    assert store.wait_dispatched(10)
    r = store.get_message("g", "T", 0, 0)
    views = [m.body for m in r]
    store.close()
    assert [bytes(v) for v in views] == bodies
    assert [m.tags for m in r] == ["X"] * 20 and [m.queue_offset for m in r] == list(range(20))
    assert [bytes(m.body) for m in r] == bodies
    del store
    import gc
    gc.collect()
    assert [bytes(v) for v in views] == bodies


# -- long polling ------------------------------------------------------------------------------

class _Getter(threading.Thread):
    """Runs one get in a thread; keeps its result, its exception and how long it took."""

    def __init__(self, store, *args, **kwargs):
        super().__init__(daemon=True)
        self.store, self.args, self.kwargs = store, args, kwargs
        self.result = self.error = None
        self.elapsed = None
        self.started = threading.Event()

    def run(self):
        self.started.set()
        t0 = time.monotonic()
        try:
            self.result = self.store.get_message(*self.args, **self.kwargs)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        self.elapsed = time.monotonic() - t0

    def finish(self, timeout=15.0):
        self.join(timeout)
        assert not self.is_alive(), "get did not return"
        if self.error is not None:
            raise self.error
        return self.result


def test_long_poll_woken_by_put(store_dir):
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=CL_SIZE)) as store:
        _put_n(store, "T", 0, 3)
        deadline = time.monotonic() + 10
        while store.get_max_offset_in_queue("T", 0) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        g = _Getter(store, "g", "T", 0, 3, timeout_ms=5000)
        g.start()
        g.started.wait()
        time.sleep(0.1)                           # let it wait: the put comes later
        store.put_message(Message("T", b"wake up"), 0)
        r = g.finish()
        assert r.status is S.FOUND
        assert _bodies(r) == [b"wake up"] and r.next_begin_offset == 4
        assert g.elapsed < 2.0                    # correctness bound: woken, not timed out


def test_long_poll_on_empty_queue_woken_by_first_put(store_dir):
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=CL_SIZE)) as store:
        g = _Getter(store, "g", "Fresh", 2, 0, timeout_ms=5000)
        g.start()
        g.started.wait()
        time.sleep(0.1)
        store.put_message(Message("Fresh", b"first"), 2)
        r = g.finish()
        assert r.status is S.FOUND and _bodies(r) == [b"first"]
        assert g.elapsed < 2.0


def test_long_poll_times_out_with_overflow_one(store_dir):
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=CL_SIZE)) as store:
        store.put_message(Message("T", b"x"), 0)
        store.get_message("g", "T", 0, 0, timeout_ms=5000)        # waits until dispatched
        t0 = time.monotonic()
        # a put to another queue does not end the wait
        threading.Timer(0.05, lambda: store.put_message(Message("T", b"other"), 1)).start()
        r = store.get_message("g", "T", 0, 1, timeout_ms=400)
        elapsed = time.monotonic() - t0
        assert (r.status, r.next_begin_offset, r.messages) == (S.OFFSET_OVERFLOW_ONE, 1, [])
        assert 0.35 <= elapsed < 5.0
        t0 = time.monotonic()
        r = store.get_message("g", "None", 0, 0, timeout_ms=200)
        assert r.status is S.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0
        assert time.monotonic() - t0 >= 0.15


def test_long_poll_not_for_other_statuses(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 3)
        t0 = time.monotonic()
        for off in (0, 5):                        # FOUND and OVERFLOW_BADLY answer at once
            store.get_message("g", "T", 0, off, timeout_ms=3000)
        assert time.monotonic() - t0 < 2.0


def test_long_poll_result_describes_queue_at_return(store_dir):
    """A get at offset 5 of an empty queue waits; the first message arrives meanwhile. What
    it returns must describe the queue when it returns (max 1, offset 5 > max ->
    OFFSET_OVERFLOW_BADLY, next 1), not the empty queue it saw before waiting."""
    cfg = StoreConfig(mapped_file_size_commit_log=CL_SIZE)
    with MessageStore.open(store_dir, cfg) as store:
        timer = threading.Timer(0.1, lambda: store.put_message(Message("T", b"x"), 0))
        timer.start()
        r = store.get_message("g", "T", 0, 5, timeout_ms=600)
        timer.join()
        assert store.get_max_offset_in_queue("T", 0) == 1
        assert (r.status, r.next_begin_offset, r.max_offset) == \
            (S.OFFSET_OVERFLOW_BADLY, 1, 1), r


def test_close_wakes_long_poll(store_dir):
    store = MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=CL_SIZE))
    g = _Getter(store, "g", "T", 0, 0, timeout_ms=10_000)
    g.start()
    g.started.wait()
    time.sleep(0.1)
    store.close()
    g.join(5.0)
    assert not g.is_alive(), "a waiting get outlived close() by 5 s"


def test_close_during_gets_and_puts(store_dir):
    """Readers and a writer race close(): each stops with StoreClosedError (or finishes a
    call begun before), nothing crashes, and bodies already returned stay intact."""
    from rocketstore import StoreClosedError

    def expected(m):
        if m.queue_id == 0 and m.queue_offset >= 100:
            return b"w" * 50
        return b"%05d" % (2 * m.queue_offset + m.queue_id) * 20

    for round_ in range(3):
        root = f"{store_dir}-{round_}"
        store = MessageStore.open(root, StoreConfig(mapped_file_size_commit_log=CL_SIZE,
                                                    mapped_file_size_consume_queue=400))
        for i in range(200):
            store.put_message(Message("T", b"%05d" % i * 20, tags="A" if i % 2 else "B"), i % 2)
        errors, kept = [], []

        def reader(qid):
            off = 0
            try:
                while True:
                    r = store.get_message("g", "T", qid, off, tags="A" if qid else None,
                                          timeout_ms=5)
                    kept.extend(r.messages)
                    off = r.next_begin_offset if r.next_begin_offset < 100 else 0
                    store.get_offset_in_queue_by_time("T", qid, int(time.time() * 1000))
                    store.get_message_store_timestamp("T", qid, off)
            except StoreClosedError:
                pass
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def writer():
            try:
                while True:
                    store.put_message(Message("T", b"w" * 50), 0)
            except StoreClosedError:
                pass
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(q,)) for q in (0, 1, 0)]
        threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        time.sleep(0.05)
        store.close()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        assert errors == []
        assert kept and all(bytes(m.body) == expected(m) for m in kept)


# -- offsets by time (docs/format.md §5.4, 5.x BoundaryType) ---------------------------------------

def _wait_next_ms(last_ms: int, gap: int = 2) -> None:
    while time.time() * 1000 < last_ms + gap:
        time.sleep(0.001)


def _put_runs(store, topic, qid, run_sizes):
    """Put batches (one store timestamp each) a few ms apart; returns [(ts, first, last)]."""
    runs = []
    for n in run_sizes:
        r = store.put_messages([Message(topic, b"%s-%d" % (topic.encode(), i) + bytes(250))
                                for i in range(n)], qid)
        assert store.wait_dispatched(10, until=r)
        ts = store.get_message_store_timestamp(topic, qid, r.queue_offset)
        runs.append((ts, r.queue_offset, r.queue_offset + n - 1))
        _wait_next_ms(ts)
    return runs


def test_offset_by_time_runs_of_equal_timestamps(store_dir):
    cfg = _config(mapped_file_size_consume_queue=140)          # 7 units per file
    with MessageStore.open(store_dir, cfg) as store:
        runs = _put_runs(store, "T", 0, [3, 1, 5, 8, 2, 1, 4, 6])
        assert store.get_max_phy_offset() > 2 * CL_SIZE
        # one batch = one store timestamp; batches strictly increasing
        for ts, first, last in runs:
            assert {store.get_message_store_timestamp("T", 0, o)
                    for o in range(first, last + 1)} == {ts}
            assert [store.get_message("g", "T", 0, o, max_msgs=1).messages[0].store_timestamp
                    for o in range(first, last + 1)] == [ts] * (last - first + 1)
        assert all(a[0] + 2 <= b[0] for a, b in zip(runs, runs[1:]))
        mx = store.get_max_offset_in_queue("T", 0)
        for i, (ts, first, last) in enumerate(runs):
            assert store.get_offset_in_queue_by_time("T", 0, ts) == first
            assert store.get_offset_in_queue_by_time("T", 0, ts, BoundaryType.LOWER) == first
            assert store.get_offset_in_queue_by_time("T", 0, ts, BoundaryType.UPPER) == last
            assert store.get_offset_in_queue_by_time("T", 0, ts, "UPPER") == last
            assert store.get_offset_in_queue_by_time("T", 0, ts, "upper") == last
            # between runs: LOWER closest above, UPPER closest below
            nxt_first = runs[i + 1][1] if i + 1 < len(runs) else mx
            assert store.get_offset_in_queue_by_time("T", 0, ts + 1) == nxt_first
            assert store.get_offset_in_queue_by_time("T", 0, ts + 1, "UPPER") == last
        before, after = runs[0][0] - 1, runs[-1][0] + 1
        assert store.get_offset_in_queue_by_time("T", 0, before) == 0          # min
        assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("T", 0, before, "UPPER") == 0
        assert store.get_offset_in_queue_by_time("T", 0, after) == mx
        assert store.get_offset_in_queue_by_time("T", 0, after, "UPPER") == mx - 1
        assert store.get_offset_in_queue_by_time("T", 0, 2**62, "UPPER") == mx - 1
        assert store.get_offset_in_queue_by_time("Nope", 0, runs[0][0]) == 0
        assert store.get_offset_in_queue_by_time("Nope", 0, runs[0][0], "UPPER") == 0
        with pytest.raises(InvalidMessageError):
            store.get_offset_in_queue_by_time("T", 0, runs[0][0], "MIDDLE")


def test_offset_by_time_with_min_above_zero(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        store.commit_log.set_queue_offset("F", 0, 5)
        runs = _put_runs(store, "F", 0, [2, 3])
        assert runs[0][1] == 5
        before, after = runs[0][0] - 1, runs[-1][0] + 1
        assert store.get_offset_in_queue_by_time("F", 0, before) == 5            # LOWER -> min
        assert store.get_offset_in_queue_by_time("F", 0, before, "UPPER") == 0   # UPPER -> 0
        assert store.get_offset_in_queue_by_time("F", 0, runs[0][0]) == 5
        assert store.get_offset_in_queue_by_time("F", 0, runs[0][0], "UPPER") == 6
        assert store.get_offset_in_queue_by_time("F", 0, runs[1][0], "UPPER") == 9
        assert store.get_offset_in_queue_by_time("F", 0, after) == 10
        assert store.get_offset_in_queue_by_time("F", 0, after, "UPPER") == 9


def test_offset_by_time_survives_reopen(store_dir):
    cfg = _config(mapped_file_size_consume_queue=100)
    with MessageStore.open(store_dir, cfg) as store:
        runs = _put_runs(store, "T", 1, [4, 4, 4])
    with MessageStore.open(store_dir, cfg) as store:
        for ts, first, last in runs:
            assert store.get_offset_in_queue_by_time("T", 1, ts) == first
            assert store.get_offset_in_queue_by_time("T", 1, ts, "UPPER") == last


def test_get_message_store_timestamp(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        before = int(time.time() * 1000)
        _put_n(store, "T", 0, 30)
        after = int(time.time() * 1000)
        r = store.get_message("g", "T", 0, 0)
        stamps = [store.get_message_store_timestamp("T", 0, o) for o in range(30)]
        assert stamps == [m.store_timestamp for m in r]
        assert all(before <= s <= after for s in stamps) and stamps == sorted(stamps)
        assert store.get_message_store_timestamp("T", 0, 30) == -1      # max: nothing there
        assert store.get_message_store_timestamp("T", 0, 10**6) == -1
        assert store.get_message_store_timestamp("T", 0, -1) == -1
        assert store.get_message_store_timestamp("Nope", 0, 0) == -1


def test_store_timestamp_of_huge_offset_is_minus_one(store_dir):
    """Queue offsets far past the max name no unit: index * 20 must not wrap to unit 0."""
    with MessageStore.open(store_dir, _config()) as store:
        _put_n(store, "T", 0, 5)
        for off in (2**59, 2**62, 2**62 + 3, 2**63 - 1):
            assert store.get_message_store_timestamp("T", 0, off) == -1, off


# -- consumer offsets ------------------------------------------------------------------------

def test_consumer_offsets_round_trip_and_persist(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        assert store.query_offset("g1", "T", 0) == -1
        store.commit_offset("g1", "T", 0, 17)
        store.commit_offset("g1", "T", 3, 4)
        store.commit_offset("g2", "T", 0, 99)
        store.commit_offset("g1", "Other", 0, 1)
        assert store.query_offset("g1", "T", 0) == 17
        store.commit_offset("g1", "T", 0, 12)             # a reset backwards replaces it
        assert store.query_offset("g1", "T", 0) == 12
        assert store.query_offset("g1", "T", 1) == -1
        assert store.query_offset("g3", "T", 0) == -1
    path = os.path.join(store_dir, "config", "consumerOffset.json")
    assert os.path.isfile(path)
    with open(path) as f:
        text = f.read()
    assert "T@g1" in text and "T@g2" in text and "Other@g1" in text
    with MessageStore.open(store_dir, _config()) as store:
        assert store.query_offset("g1", "T", 0) == 12
        assert store.query_offset("g1", "T", 3) == 4
        assert store.query_offset("g2", "T", 0) == 99
        assert store.query_offset("g1", "Other", 0) == 1
        assert store.query_offset("g2", "T", 3) == -1
    with MessageStore.open(store_dir, _config(), read_only=True) as ro:
        assert ro.query_offset("g1", "T", 0) == 12
        with pytest.raises(StoreReadOnlyError):
            ro.commit_offset("g1", "T", 0, 13)


def test_consume_loop_with_committed_offsets(store_dir, rand):
    """A consumer pulling with next_begin_offset and committing sees every message once."""
    with MessageStore.open(store_dir, _config(mapped_file_size_consume_queue=200)) as store:
        bodies = [rand.randbytes(rand.randint(0, 200)) for _ in range(150)]
        for b in bodies:
            store.put_message(Message("T", b, tags=rand.choice(["A", "B"])), 0)
        assert store.wait_dispatched(10)
        seen = []
        off = max(0, store.query_offset("g", "T", 0))
        while True:
            r = store.get_message("g", "T", 0, off, max_msgs=rand.randint(1, 40))
            if r.status is S.OFFSET_OVERFLOW_ONE:
                break
            assert r.status is S.FOUND
            seen.extend(bytes(m.body) for m in r)
            off = r.next_begin_offset
            store.commit_offset("g", "T", 0, off)
        assert seen == bodies and store.query_offset("g", "T", 0) == 150
    with MessageStore.open(store_dir, _config(mapped_file_size_consume_queue=200)) as store:
        off = store.query_offset("g", "T", 0)
        assert store.get_message("g", "T", 0, off).status is S.OFFSET_OVERFLOW_ONE


def test_store_json_is_fastjson_like(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        store.commit_offset("g", "T", 7, 3)
    with open(os.path.join(store_dir, "config", "consumerOffset.json")) as f:
        text = f.read()
    # fastjson writes integer map keys unquoted; a lenient parse after quoting them works
    import re
    doc = json.loads(re.sub(r"([{,])\s*(-?\d+)\s*:", r'\1"\2":', text))
    assert doc["offsetTable"]["T@g"] == {"7": 3}


def test_tag_filtered_long_poll_waits_past_non_matching_messages_for_a_match(store_dir):
    """docs/recovery.md: a consumer subscribed to tag A is not answered NO_MATCHED_MESSAGE
    because a B arrived; the poll goes on past it until an A or the timeout."""
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=CL_SIZE)) as store:
        g = _Getter(store, "g", "T", 0, 0, tags="A", timeout_ms=5000)
        g.start()
        g.started.wait()
        time.sleep(0.1)
        store.put_message(Message("T", b"b1", tags="B"), 0)
        time.sleep(0.2)
        store.put_message(Message("T", b"b2", tags="B"), 0)
        time.sleep(0.2)
        store.put_message(Message("T", b"a", tags="A"), 0)
        r = g.finish()
        assert r.status is S.FOUND and _bodies(r) == [b"a"] and r.next_begin_offset == 3
        assert 0.4 <= g.elapsed < 4.0
        # only non-matching ones until the timeout: nothing new past them, the next pull
        # starts after them
        threading.Timer(0.05, lambda: store.put_message(Message("T", b"b3", tags="B"), 0)).start()
        t0 = time.monotonic()
        r = store.get_message("g", "T", 0, 3, tags="A", timeout_ms=500)
        assert (r.status, r.next_begin_offset, r.messages) == (S.OFFSET_OVERFLOW_ONE, 4, [])
        assert time.monotonic() - t0 >= 0.45


@pytest.mark.parametrize("cap", [32, 200])
def test_a_damaged_record_in_a_batch_is_skipped_and_the_batch_still_filled(store_dir, cap):
    """A record that fails its check is never handed out, and is reported; its room in the
    batch goes to the next unit, so a full batch stays full and in queue order (200: more
    records than one check pass takes)."""
    cfg = _config(mapped_file_size_commit_log=1 << 20,
                  max_transfer_count_on_message_in_memory=cap)
    with MessageStore.open(store_dir, cfg) as store:
        puts = _put_n(store, "T", 0, 300)
        victim = puts[20]
        path = os.path.join(store_dir, "commitlog", "%020d" % 0)
        fd = os.open(path, os.O_RDWR)
        try:
            # one byte of its body flipped in the file (the store's mapping sees the page)
            rec = os.pread(fd, victim.wrote_bytes, victim.commitlog_offset)
            at = victim.commitlog_offset + rec.index(b"m00020") + 5
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x01]), at)
        finally:
            os.close(fd)
        r = store.get_message("g", "T", 0, 0, max_msgs=cap)
        want = [i for i in range(cap + 1) if i != 20]
        assert r.status is S.FOUND
        assert [m.queue_offset for m in r] == want
        assert _bodies(r) == [b"m%05d" % i for i in want]
        assert r.next_begin_offset == cap + 1
        assert victim.commitlog_offset in {off for off, _ in store.bad_records()}
        # a read starting at the damaged record goes on past it
        r = store.get_message("g", "T", 0, 20, max_msgs=4)
        assert [m.queue_offset for m in r] == [21, 22, 23, 24]
