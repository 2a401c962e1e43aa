"""Recovery after a crash (docs/format.md §8.4): where it starts, what it truncates, what it
re-dispatches, and the report it leaves in ``store.recovery``."""
from __future__ import annotations

import os
import struct
import time

import pytest

from conftest import corrupt
from rocketstore import Message, MessageStore, StoreConfig

FIXTURE_CFG = dict(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=2000,
                   max_hash_slot_num=100, max_index_num=400)


def _recovered_line(expected_lines):
    return next(e for e in expected_lines if e["type"] == "recovered")


def _touch_abort(root):
    open(os.path.join(root, "abort"), "w").close()


def test_rocketmq_store_recovers_abnormally_to_its_recovered_line(rocketmq_store, expected_lines):
    want = _recovered_line(expected_lines)
    _touch_abort(rocketmq_store)
    with MessageStore.open(rocketmq_store, StoreConfig(**FIXTURE_CFG)) as store:
        assert store.recovery["last_exit_ok"] is False
        assert store.get_max_phy_offset() == want["maxPhyOffset"]
        assert store.get_min_phy_offset() == want["minPhyOffset"]
        # nothing re-dispatched twice: queues still equal RocketMQ's summary
        for e in expected_lines:
            if e["type"] == "cq_summary":
                assert store.get_max_offset_in_queue(e["topic"], e["queueId"]) == e["maxOffset"]
    assert not os.path.exists(os.path.join(rocketmq_store, "abort"))


def test_torn_last_record_is_truncated_and_reported(rocketmq_store, expected_lines):
    msgs = [e for e in expected_lines if e["type"] == "msg"]
    last = msgs[-1]
    name = f"{last['physicalOffset'] - last['physicalOffset'] % 65536:020d}"
    path = os.path.join(rocketmq_store, "commitlog", name)
    pos = last["physicalOffset"] % 65536
    # keep its header, tear its body (the CRC covers the body only): flip its first byte,
    # which follows the 84-byte fixed part and the 4-byte body length (IPv4 hosts)
    assert last["sysFlag"] & 0x30 == 0 and last["bodyHex"]
    first = bytes.fromhex(last["bodyHex"][:2])[0]
    corrupt(path, pos + 88, bytes([first ^ 0xFF]))
    _touch_abort(rocketmq_store)
    with MessageStore.open(rocketmq_store, StoreConfig(**FIXTURE_CFG)) as store:
        assert store.get_max_phy_offset() == last["physicalOffset"]
        assert store.recovery["torn_record_bytes"] == last["storeSize"]
        assert store.look_message_by_offset(last["physicalOffset"]) is None
        assert store.look_message_by_offset(msgs[-2]["physicalOffset"]) is not None
        # the consume queue no longer points at the torn record
        assert store.get_max_offset_in_queue(last["topic"], last["queueId"]) == last["queueOffset"]


def test_zeroed_checkpoint_falls_back_to_a_full_scan(rocketmq_store):
    with open(os.path.join(rocketmq_store, "checkpoint"), "r+b") as f:
        f.write(bytes(4096))
    _touch_abort(rocketmq_store)
    with MessageStore.open(rocketmq_store, StoreConfig(**FIXTURE_CFG)) as store:
        assert store.recovery["files_scanned"] == store.recovery["files"]
        assert store.recovery["redispatched_from"] == 0
        assert sum(1 for _ in store.iter_messages()) == 1000


def test_abnormal_recovery_starts_at_the_checkpoint_file(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=400)
    with MessageStore.open(store_dir, cfg) as store:
        for i in range(200):
            store.put_message(Message("T", b"m%03d" % i, keys=f"k{i}"), i % 2)
            # a put takes well under a millisecond now: without a pause several files start in
            # the same millisecond and recovery rightly starts at the last of them
            time.sleep(0.002)
        assert store.wait_dispatched(10)    # queues and index complete before the "crash"
        mid = store.commit_log_queue.files[len(store.commit_log_queue.files) // 2]
        first_ts = store.look_message_by_offset(mid.file_from_offset).store_timestamp
    # the checkpoint says everything up to that file's first record was durable
    with open(os.path.join(store_dir, "checkpoint"), "r+b") as f:
        f.write(struct.pack(">qq", first_ts + 3000, first_ts + 3000))
    _touch_abort(store_dir)
    with MessageStore.open(store_dir, cfg) as store:
        rec = store.recovery
        assert 0 < rec["files_scanned"] < rec["files"]
        assert rec["redispatched_from"] <= mid.file_from_offset
        for i in range(200):
            [m] = store.query_message("T", f"k{i}")
            assert bytes(m.body) == b"m%03d" % i
        assert store.get_max_offset_in_queue("T", 0) == 100


def test_garbage_after_the_end_is_truncated(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=8192)
    with MessageStore.open(store_dir, cfg) as store:
        for _ in range(10):
            store.put_message(Message("T", b"x" * 100))
        assert store.wait_dispatched(10)
        end = store.get_max_phy_offset()
        path = store.commit_log_queue.last_file().path
        base = store.commit_log_queue.last_file().file_from_offset
    corrupt(path, end - base, os.urandom(300))
    _touch_abort(store_dir)
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_max_phy_offset() == end
        nxt = store.put_message(Message("T", b"after"))
        assert nxt.commitlog_offset == end and nxt.queue_offset == 10
    with MessageStore.open(store_dir, cfg) as store:
        assert bytes(store.look_message_by_offset(end).body) == b"after"


@pytest.mark.parametrize("where", ["magic", "size"])
def test_damaged_middle_record_is_skipped_reported_and_what_follows_kept(store_dir, where):
    """docs/recovery.md: a record whose framing is broken, with valid records after it in
    the last file, is damage, not the torn end: recovery resynchronises on the next valid
    record and reports the damaged range (issue 21: 7 intact records were dropped)."""
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 16)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"body-%d" % i)) for i in range(20)]
        assert store.wait_dispatched(10)
        end = store.get_max_phy_offset()
        path = store.commit_log_queue.files[0].path
    victim = rs[12]
    pos = victim.commitlog_offset
    patch = {"magic": (pos + 4, b"\x00\x00\x00\x01"), "size": (pos, b"\x7f\xff\xff\xff"),
             "crc": (pos + victim.wrote_bytes - 50, b"\x00")}[where]
    if where == "crc":
        # flip a body byte: position of the body depends on the layout, so flip the last
        # body byte found by searching for it
        with open(path, "rb") as f:
            data = f.read()
        i = data.index(b"body-12", pos)
        patch = (i, b"B")
    corrupt(path, *patch)
    _touch_abort(store_dir)
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_max_phy_offset() == end
        assert store.look_message_by_offset(rs[11].commitlog_offset) is not None
        assert store.look_message_by_offset(pos) is None
        assert [off for off, _ in store.bad_records()] == [pos]
        assert store.recovery["bytes_resynced"] == victim.wrote_bytes
        got = store.get_message("g", "T", 0, 0, 32)
        assert [bytes(m.body) for m in got.messages] == [b"body-%d" % i for i in range(20)
                                                        if i != 12]
        assert store.get_max_offset_in_queue("T", 0) == 20


@pytest.mark.parametrize("crc", [True, False], ids=["record-crc", "body-crc-only"])
def test_damaged_body_mid_log_is_skipped_and_later_data_kept(store_dir, crc):
    """docs/recovery.md: a record whose framing is intact but whose check fails (a flipped body
    byte) is skipped by recovery; what follows it stays, in its queue, reported."""
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 16, enabled_append_prop_crc=crc)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"body-%d" % i)) for i in range(20)]
        assert store.wait_dispatched(10)
        end = store.get_max_phy_offset()
        path = store.commit_log_queue.files[0].path
    with open(path, "rb") as f:
        i = f.read().index(b"body-12", rs[12].commitlog_offset)
    corrupt(path, i, b"B")
    _touch_abort(store_dir)
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_max_phy_offset() == end
        assert [off for off, _ in store.bad_records()] == [rs[12].commitlog_offset]
        assert store.look_message_by_offset(rs[12].commitlog_offset) is None
        got = store.get_message("g", "T", 0, 0, 32)
        assert [bytes(m.body) for m in got.messages] == [b"body-%d" % i for i in range(20)
                                                        if i != 12]
        assert store.get_max_offset_in_queue("T", 0) == 20
        nxt = store.put_message(Message("T", b"after"))
        assert nxt.commitlog_offset == end and nxt.queue_offset == 20


def test_broken_framing_in_an_older_file_is_skipped_and_the_rest_of_the_file_kept(store_dir):
    """docs/recovery.md: a record whose framing is broken (its magic code) inside an older
    file: recovery resynchronises on the next valid record of that file and reports the
    damaged range; every other record stays readable, in its queue (issue 21: the rest of
    the file used to be blanked)."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"body-%03d" % i + bytes(200))) for i in range(40)]
        assert store.wait_dispatched(10)
        files = [mf.path for mf in store.commit_log_queue.files]
    assert len(files) >= 3
    victim = next(r for r in rs if 4096 + 500 < r.commitlog_offset < 8192 - 500)
    corrupt(files[1], victim.commitlog_offset - 4096 + 4, b"\x00\x00\x00\x01")
    _touch_abort(store_dir)
    kept = [r for r in rs if r is not victim]
    with MessageStore.open(store_dir, cfg) as store:
        assert store.recovery["bytes_blanked"] == 0
        assert store.recovery["bytes_resynced"] == victim.wrote_bytes
        assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]
        assert store.get_max_phy_offset() == rs[-1].commitlog_offset + rs[-1].wrote_bytes
        first = store.get_message("g", "T", 0, 0, 32)
        got = first.messages + store.get_message("g", "T", 0, first.next_begin_offset, 32).messages
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in kept]
        nxt = store.put_message(Message("T", b"after"))
        assert nxt.queue_offset == 40
    assert [m.commitlog_offset for m in MessageStore.open(store_dir, cfg, read_only=True)
            .iter_messages()] == [r.commitlog_offset for r in kept] + [nxt.commitlog_offset]


def test_broken_framing_at_the_end_of_an_older_file_blanks_the_rest(store_dir):
    """No valid record after the damage in its file, intact files after it: the rest of that
    file is closed with a blank record (RocketMQ's readers see a valid log), reported."""
    import refreader
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message("T", b"body-%03d" % i + bytes(200))) for i in range(40)]
        assert store.wait_dispatched(10)
        files = [mf.path for mf in store.commit_log_queue.files]
    assert len(files) >= 3
    victim = [r for r in rs if 4096 <= r.commitlog_offset < 8192][-1]
    corrupt(files[1], victim.commitlog_offset - 4096 + 4, b"\x00\x00\x00\x01")
    _touch_abort(store_dir)
    kept = [r for r in rs if r is not victim]
    with MessageStore.open(store_dir, cfg) as store:
        assert store.recovery["bytes_blanked"] == 8192 - victim.commitlog_offset
        assert [off for off, _ in store.bad_records()] == [victim.commitlog_offset]
        first = store.get_message("g", "T", 0, 0, 32)
        got = first.messages + store.get_message("g", "T", 0, first.next_begin_offset, 32).messages
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in kept]
        nxt = store.put_message(Message("T", b"after"))
        assert nxt.queue_offset == 40
    walked = [(phy, rec["kind"]) for _, _, phy, rec in
              refreader.iter_commitlog(os.path.join(store_dir, "commitlog"), 4096)]
    assert (victim.commitlog_offset, "blank") in walked
    assert [phy for phy, kind in walked if kind == "msg"] == \
        [r.commitlog_offset for r in kept] + [nxt.commitlog_offset]
