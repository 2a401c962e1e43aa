"""Bulk tag scans of a queue (MessageStore.match_offsets / count_matches) across consume-queue
files, against what get_message returns."""
from __future__ import annotations

import pytest

from rocketstore import InvalidMessageError, Message, MessageStore, StoreConfig


@pytest.fixture
def store(store_dir, rand):
    cfg = StoreConfig(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=400)
    tags_of = []
    with MessageStore.open(store_dir, cfg) as s:
        for i in range(700):
            t = rand.choice(["A", "B", "C", "Aa", "BB"])      # "Aa" and "BB" collide
            tags_of.append(t)
            s.put_message(Message("T", b"%d" % i, tags=t), 0)
        assert s.wait_dispatched(10)
        s.tags_of = tags_of
        yield s


def test_match_offsets_equal_the_units_whose_tag_hash_matches(store):
    want = [i for i, t in enumerate(store.tags_of) if t in ("A", "C")]
    assert store.match_offsets("T", 0, ["A", "C"]).tolist() == want
    assert store.count_matches("T", 0, "A || C") == len(want)


def test_range_bounds_cross_consume_queue_files(store):
    # 20 units per file: [15, 245) spans a dozen files, starting and ending mid-file
    want = [i for i, t in enumerate(store.tags_of) if t == "B" and 15 <= i < 245]
    assert store.match_offsets("T", 0, "B", 15, 245).tolist() == want
    assert store.count_matches("T", 0, "B", 15, 245) == len(want)
    assert store.count_matches("T", 0, "B", 300, 300) == 0


def test_hash_collisions_match_by_code_but_get_drops_them(store):
    # the bulk scan is the consume-queue filter: "Aa" and "BB" share a Java hash
    both = [i for i, t in enumerate(store.tags_of) if t in ("Aa", "BB")]
    assert store.match_offsets("T", 0, "Aa").tolist() == both
    got, offset = [], 0
    while offset < 700:
        r = store.get_message("g", "T", 0, offset, 32, tags="Aa")
        got += [m.queue_offset for m in r.messages]
        offset = r.next_begin_offset
    assert got == [i for i, t in enumerate(store.tags_of) if t == "Aa"]


def test_no_tags_counts_every_unit_and_unknown_queue_counts_none(store):
    assert store.count_matches("T", 0, None) == 700
    assert store.count_matches("T", 0, "*", 10, 20) == 10
    assert store.count_matches("Nope", 0, "A") == 0
    assert store.match_offsets("T", 5, "A").tolist() == []


def test_more_than_eight_tags_is_refused(store):
    with pytest.raises(InvalidMessageError, match="tags"):
        store.count_matches("T", 0, [f"t{i}" for i in range(9)])
