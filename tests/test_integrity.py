"""Whole-record integrity (issue 11 item 2, issue 16 items 1-2): the 5.x record CRC property
written by the store, and one check on every path that hands out a message.

Bytes on disk are checked with ``refreader`` (the docs/format.md oracle), never with rocketstore's
own codec.
"""
from __future__ import annotations

import os
import shutil
import struct

import pytest

import refreader
from conftest import corrupt
from test_cli import expected, jsonl, run  # noqa: F401 (expected: a fixture)
from rocketstore import CorruptionError, InvalidMessageError, Message, MessageStore, StoreConfig
from rocketstore.store import _codec, _columns

CFG = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20)
NO_CRC = CFG.replace(enabled_append_prop_crc=False)


def _records(root: str) -> dict[int, dict]:
    return {phy: rec for _, _, phy, rec in refreader.iter_commitlog(os.path.join(root, "commitlog"))
            if rec["kind"] == "msg"}


def _raw(root: str, phy: int, size: int) -> bytes:
    path = os.path.join(root, "commitlog", f"{phy - phy % CFG.mapped_file_size_commit_log:020d}")
    with open(path, "rb") as f:
        f.seek(phy % CFG.mapped_file_size_commit_log)
        return f.read(size)


def _file_of(root: str, phy: int) -> tuple[str, int]:
    size = CFG.mapped_file_size_commit_log
    return os.path.join(root, "commitlog", f"{phy - phy % size:020d}"), phy % size


def _touch_abort(root: str) -> None:
    with open(os.path.join(root, "abort"), "wb"):
        pass


# -- the property as written -------------------------------------------------------------------

def test_single_and_batch_puts_end_with_the_record_crc_property(store_dir):
    with MessageStore.open(store_dir, CFG) as store:
        one = store.put_message(Message("T", b"single", tags="a", properties={"CLUSTER": "c"}))
        batch = store.put_messages([Message("T", b"b%d" % i, keys=["k"]) for i in range(5)], 1)
        empty = store.put_message(Message("T", b""))
    recs = _records(store_dir)
    offsets = [one.commitlog_offset, *batch.commitlog_offsets, empty.commitlog_offset]
    assert sorted(recs) == sorted(offsets)
    for phy in offsets:
        rec = recs[phy]
        raw = _raw(store_dir, phy, rec["total_size"])
        # the last property, 20 bytes: "__CRC32#" \x01 <10 digits> \x02, after a \x02
        assert rec["properties_raw"].endswith(raw[-20:])
        assert raw[-20:-11] == b"__CRC32#\x01" and raw[-11:-1].isdigit() and raw[-1:] == b"\x02"
        assert raw[-21:-20] == b"\x02"
        # over every byte before it, offsets and store time included, least significant first
        assert refreader.record_crc_property(raw) == refreader.record_crc(raw)
        assert rec["properties"]["__CRC32#"] == raw[-11:-1].decode()
        assert rec["body_crc"] == refreader.body_crc(rec["body"])


def test_crc_property_separator_and_digit_order_match_createCrc32():
    # user properties without a trailing \x02 get one before the reserved bytes (CommitLog)
    rec = _codec.encode_record(topic="T", body=b"x", properties_raw=b"a\x01b", prop_crc=True,
                               queue_offset=3, physical_offset=1000, store_timestamp=17)
    m = _codec.decode(rec)
    assert bytes(rec[-26:]).startswith(b"\x00\x18a\x01b\x02__CRC32#\x01")   # length 24
    crc = refreader.record_crc(rec)
    assert rec[-11:-1] == f"{crc:010d}"[::-1].encode()
    assert m.properties == {"a": "b", "__CRC32#": f"{crc:010d}"[::-1]}
    assert _codec.check_reason(rec) == ""


def test_the_option_off_writes_rocketmqs_default_layout(store_dir):
    with MessageStore.open(store_dir, NO_CRC) as store:
        r = store.put_message(Message("T", b"x"))
        assert "__CRC32#" not in store.look_message_by_offset(r.commitlog_offset).properties
    assert b"__CRC32#" not in _records(store_dir)[r.commitlog_offset]["properties_raw"]


def test_a_given_crc_property_is_replaced_by_the_stores(store_dir):
    with MessageStore.open(store_dir, CFG) as store:
        r = store.put_message(Message("T", b"x", properties={"__CRC32#": "0000000000", "u": "1"}))
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.properties["u"] == "1"
    raw = _raw(store_dir, r.commitlog_offset, r.wrote_bytes)
    assert raw.count(b"__CRC32#") == 1
    assert refreader.record_crc_property(raw) == refreader.record_crc(raw)


def test_rocketmq_49_records_without_it_still_read_next_to_new_ones(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, StoreConfig(
            mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=2000,
            max_hash_slot_num=100, max_index_num=400)) as store:
        old = [m for m in store.iter_messages()]
        assert len(old) == len(expected["msg"])
        assert all("__CRC32#" not in m.properties for m in old)
        r = store.put_message(Message("TopicA", b"new"))
        m = store.look_message_by_offset(r.commitlog_offset)
        assert bytes(m.body) == b"new" and "__CRC32#" in m.properties
        assert store.bad_records() == []


# -- one check on every path that hands out a message --------------------------------------------

def _region_offset(raw: bytes, region: str) -> int:
    """Where in a record (v1, IPv4 hosts) a field sits."""
    return {"queue_id": 12, "flag": 16, "queue_offset": 27, "phy_offset": 35, "born_ts": 47,
            "born_host": 50, "store_ts": 63, "topic": raw.index(b"TopicX") + 2,
            "properties": raw.index(b"CLUSTER") + 1, "body": raw.index(b"payload") + 3,
            "crc_name": len(raw) - 17, "crc_digit": len(raw) - 5}[region]


REGIONS = ["queue_id", "flag", "queue_offset", "phy_offset", "born_ts", "born_host", "store_ts",
           "topic", "properties", "body", "crc_name", "crc_digit"]


@pytest.fixture
def damaged(store_dir, request):
    """A store of 10 messages (2 queues) whose record #4 has one byte flipped in ``region``."""
    region = request.param
    with MessageStore.open(store_dir, CFG) as store:
        rs = [store.put_message(Message("TopicX", b"payload-%d" % i, tags="t", keys=[f"k{i}"],
                                        properties={"CLUSTER": "c1"}), i % 2) for i in range(10)]
    victim = rs[4]
    raw = _raw(store_dir, victim.commitlog_offset, victim.wrote_bytes)
    at = _region_offset(raw, region)
    path, pos = _file_of(store_dir, victim.commitlog_offset)
    corrupt(path, pos + at, bytes([raw[at] ^ 0x01]))
    return store_dir, rs, victim


@pytest.mark.parametrize("damaged", REGIONS, indirect=True)
def test_a_flipped_byte_anywhere_is_never_handed_out(damaged):
    root, rs, victim = damaged
    with MessageStore.open(root, CFG, read_only=True) as store:
        assert store.look_message_by_offset(victim.commitlog_offset) is None
        assert store.look_message_by_id(victim.msg_id) is None
        got = store.get_message("g", "TopicX", 0, 0, 32)
        assert [bytes(m.body) for m in got.messages] == [b"payload-%d" % i for i in (0, 2, 6, 8)]
        assert victim.commitlog_offset not in [m.commitlog_offset for m in store.iter_messages()]
        assert len(list(store.iter_messages())) == 9
        assert store.query_message("TopicX", "k4", 32, 0, 2**62) == []
        assert [m.commitlog_offset for m in store.query_message("TopicX", "k6", 32, 0, 2**62)] \
            == [rs[6].commitlog_offset]
        assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]
        # the Spark read's decode
        cq = store.consume_queues.find("TopicX", 0)
        view = cq.units_view(0, cq.get_max_offset_in_queue())
        units = bytes(view)
        view.release()
        cols, _ = _columns.decode_units(units, None, store.commit_log_queue, b"TopicX", 0, 0)
        offsets, _ = cols["body"]
        assert len(offsets) == 5                # 4 rows


def test_iter_messages_checks_the_stored_physical_offset(store_dir):
    with MessageStore.open(store_dir, NO_CRC) as store:
        rs = [store.put_message(Message("T", b"m%d" % i)) for i in range(5)]
    path, pos = _file_of(store_dir, rs[2].commitlog_offset)
    corrupt(path, pos + 28, struct.pack(">q", 123456789))
    with MessageStore.open(store_dir, NO_CRC, read_only=True) as store:
        got = [(m.commitlog_offset, bytes(m.body)) for m in store.iter_messages()]
        assert got == [(r.commitlog_offset, b"m%d" % i) for i, r in enumerate(rs) if i != 2]
        assert 123456789 not in [m.commitlog_offset for m in store.iter_messages()]


def test_copy_refuses_a_record_damaged_since_it_was_read(store_dir):
    with MessageStore.open(store_dir, CFG) as store:
        r = store.put_message(Message("T", b"payload", properties={"CLUSTER": "c"}))
        m = store.look_message_by_offset(r.commitlog_offset)
        assert bytes(m.copy().body) == b"payload"
        mf = store.commit_log_queue.find_mapped_file_by_offset(r.commitlog_offset)
        raw = m.record()
        mf.write_at(r.commitlog_offset + raw.index(b"CLUSTER"), b"K")
        with pytest.raises(CorruptionError) as ei:
            m.copy()
        assert "record CRC" in str(ei.value)


def test_cli_get_query_export_leave_a_damaged_record_out_and_say_so(store_dir):
    with MessageStore.open(store_dir, CFG) as store:
        rs = [store.put_message(Message("T", b"body-%d" % i, keys=["key"],
                                        properties={"CLUSTER": "c"})) for i in range(4)]
    raw = _raw(store_dir, rs[1].commitlog_offset, rs[1].wrote_bytes)
    path, pos = _file_of(store_dir, rs[1].commitlog_offset)
    corrupt(path, pos + raw.index(b"CLUSTER"), b"X")
    where = f"commit-log offset {rs[1].commitlog_offset} skipped: record CRC (__CRC32#) mismatch"
    proc = run("get", store_dir, "--phy", str(rs[1].commitlog_offset), check_rc=2)
    assert proc.stdout == ""
    assert f"offset {rs[1].commitlog_offset}: the record there fails its integrity check " \
        "(record CRC (__CRC32#) mismatch)" in proc.stderr
    proc = run("get", store_dir, "T", "0", "0", "-n", "10", "--format", "jsonl", check_rc=1)
    assert [r["body"] for r in jsonl(proc.stdout)] == ["body-0", "body-2", "body-3"]
    assert where in proc.stderr
    proc = run("query", store_dir, "--topic", "T", "--key", "key", "--end", "2100-01-01T00:00",
               "--format", "jsonl", check_rc=1)
    assert sorted(r["body"] for r in jsonl(proc.stdout)) == ["body-0", "body-2", "body-3"]
    proc = run("export", store_dir, check_rc=1)
    assert [r["body"] for r in jsonl(proc.stdout)] == ["body-0", "body-2", "body-3"]
    assert where in proc.stderr
    proc = run("export", store_dir, "--topic", "T", check_rc=1)
    assert [r["body"] for r in jsonl(proc.stdout)] == ["body-0", "body-2", "body-3"]
    proc = run("verify", store_dir, check_rc=1)
    assert f"(offset {rs[1].commitlog_offset})" in proc.stdout
    assert "record CRC (__CRC32#) mismatch" in proc.stdout


# -- re-dispatch after a crash validates what it builds from (issue 16 item 1) -------------------

def _damage_and_reopen(root: str, cfg: StoreConfig, victim, raw: bytes, at: int, new: bytes):
    path, pos = _file_of(root, victim.commitlog_offset)
    corrupt(path, pos + at, new)
    _touch_abort(root)
    return MessageStore.open(root, cfg)


@pytest.mark.parametrize("cfg", [CFG, NO_CRC], ids=["record-crc", "body-crc-only"])
def test_queue_id_flipped_1_to_0_never_serves_queue_1s_message_from_queue_0(store_dir, cfg):
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"q%d-%d" % (i % 2, i // 2)), i % 2)
              for i in range(10)]
    victim = rs[5]                  # queue 1, offset 2
    raw = _raw(store_dir, victim.commitlog_offset, victim.wrote_bytes)
    with _damage_and_reopen(store_dir, cfg, victim, raw, 12, struct.pack(">i", 0)) as store:
        q0 = store.get_message("g", "T", 0, 0, 32)
        bodies0 = [bytes(m.body) for m in q0.messages]
        # queue 0's own messages, all of them, each at its own offset; never queue 1's
        assert b"q1-2" not in bodies0
        if cfg.enabled_append_prop_crc:
            assert bodies0 == [b"q0-%d" % i for i in range(5)]
            assert [m.queue_offset for m in q0.messages] == list(range(5))
            assert [bytes(m.body) for m in store.get_message("g", "T", 1, 0, 32).messages] == \
                [b"q1-%d" % i for i in range(5) if i != 2]
            assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]


@pytest.mark.parametrize("cfg", [CFG, NO_CRC], ids=["record-crc", "body-crc-only"])
def test_huge_queue_offset_does_not_fill_the_disk(store_dir, cfg):
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"m%d" % i)) for i in range(10)]
    victim = rs[6]
    raw = _raw(store_dir, victim.commitlog_offset, victim.wrote_bytes)
    with _damage_and_reopen(store_dir, cfg, victim, raw, 20, struct.pack(">q", 2**40)) as store:
        files = os.listdir(os.path.join(store_dir, "consumequeue", "T", "0"))
        assert len(files) == 1
        got = store.get_message("g", "T", 0, 0, 32)
        assert [bytes(m.body) for m in got.messages] == [b"m%d" % i for i in range(10) if i != 6]
        assert store.get_max_offset_in_queue("T", 0) == 10
        assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]
        assert store.put_message(Message("T", b"next")).queue_offset == 10


@pytest.mark.parametrize("cfg", [CFG, NO_CRC], ids=["record-crc", "body-crc-only"])
@pytest.mark.parametrize("name", [b"../../../escaped", b"Topic\x00ABCDEFGHIJ", b"Topic ABCDEFGHIJ"])
def test_an_on_disk_topic_never_becomes_a_path(store_dir, tmp_path, cfg, name):
    topic = "T" * len(name)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message(topic, b"m%d" % i)) for i in range(4)]
    victim = rs[2]
    raw = _raw(store_dir, victim.commitlog_offset, victim.wrote_bytes)
    at = raw.index(topic.encode())
    before = set(os.listdir(tmp_path))
    with _damage_and_reopen(store_dir, cfg, victim, raw, at, name) as store:
        assert store.get_max_phy_offset() == rs[-1].commitlog_offset + rs[-1].wrote_bytes
        assert [bytes(m.body) for m in store.get_message("g", topic, 0, 0, 32).messages] == \
            [b"m0", b"m1", b"m3"]
        assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]
        assert sorted(os.listdir(os.path.join(store_dir, "consumequeue"))) == [topic]
        assert store.put_message(Message(topic, b"after")).ok
    assert set(os.listdir(tmp_path)) == before
    assert not os.path.exists(os.path.join(store_dir, "..", "..", "..", "escaped"))
    shutil.rmtree(store_dir)


def test_crc32_equals_zlib_for_every_length_alignment_and_start(rand):
    """rs_crc32's own paths (carry-less multiply folding, slice-by-8 tables, zlib above)."""
    import zlib
    data = rand.randbytes(70_000)
    for n in [*range(0, 300), 511, 512, 513, 1024, 4095, 4096, 65_537]:
        for off in (0, 1, 7):
            chunk = data[off:off + n]
            start = rand.getrandbits(32)
            assert _codec.crc32(chunk) == zlib.crc32(chunk), (n, off)
            assert _codec.crc32(chunk, start) == zlib.crc32(chunk, start), (n, off)


# -- the bulk read ------------------------------------------------------------------------------

def test_get_message_bodies_returns_checked_bodies_in_one_buffer(store_dir):
    with MessageStore.open(store_dir, CFG) as store:
        rs = [store.put_message(Message("T", b"body-%d" % i * (i + 1), properties={"CLUSTER": "c"}))
              for i in range(50)]
        store.put_message(Message("T", b"other queue"), 1)
        assert store.wait_dispatched(10)
        b = store.get_message_bodies("T", 0, 0, 20)
        assert b.status.name == "FOUND" and len(b) == 20 and b.next_begin_offset == 20
        assert list(b.queue_offsets) == list(range(20))
        assert [bytes(x) for x in b] == [b"body-%d" % i * (i + 1) for i in range(20)]
        assert b.buffer[b.offsets[3]:b.offsets[4]] == b"body-3" * 4
        assert store.get_message_bodies("T", 0, 45, 100, max_bytes=20).next_begin_offset == 46
        assert store.get_message_bodies("T", 0, 50).status.name == "OFFSET_OVERFLOW_ONE"
        assert store.get_message_bodies("T", 0, 70).status.name == "OFFSET_OVERFLOW_BADLY"
        assert store.get_message_bodies("T", 5, 0).status.name == "NO_MESSAGE_IN_QUEUE"
        # a damaged record is left out (and reported), the rest still come
        mf = store.commit_log_queue.find_mapped_file_by_offset(rs[7].commitlog_offset)
        raw = store.look_message_by_offset(rs[7].commitlog_offset).record()
        mf.write_at(rs[7].commitlog_offset + raw.index(b"CLUSTER"), b"K")
        b = store.get_message_bodies("T", 0, 0, 1000)
        assert list(b.queue_offsets) == [i for i in range(50) if i != 7]
        assert b.next_begin_offset == 50
        assert [off for off, _ in store.bad_records()] == [rs[7].commitlog_offset]
        with pytest.raises(InvalidMessageError):
            store.get_message_bodies("T", 0, 0, 0)
