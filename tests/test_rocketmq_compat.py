"""rocketstore against the files of a real Apache RocketMQ 4.9.8 broker (shared fixture).

Every check reads a writable copy of the fixture store (``rocketmq_store``) and compares what
rocketstore decodes with ``expected.jsonl`` / ``put.jsonl``, which hold what RocketMQ's own
``MessageDecoder`` / ``DefaultMessageStore`` reported for the same bytes. ``refreader`` is the
independent struct-based oracle for anything rocketstore writes.

Facts of the fixture this relies on (fixtures/README.md): commit-log files of 65,536 bytes,
1,000 messages, 5 blank end-of-file records; RocketMQ 4.9.8 writes the properties string
without its final ``\\x02`` (rocketstore writes it, as 5.2+ does).
"""
from __future__ import annotations

import collections
import json
import os
import zlib

import pytest

import refreader
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._codec import check_record, decode, java_hash
from rocketstore.errors import InvalidMessageIdError

FILE_SIZE = 65536           # commitlogFileSize of the fixture
NUM_MESSAGES = 1000


CQ_FILE_SIZE = 2000         # cqFileSize: 100 units per consume-queue file


def _config() -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=FILE_SIZE,
                       mapped_file_size_consume_queue=CQ_FILE_SIZE,
                       max_hash_slot_num=100, max_index_num=400)


# -- expected.jsonl / put.jsonl ----------------------------------------------------------------

@pytest.fixture(scope="module")
def expected(fixture_root):
    with open(fixture_root / "expected.jsonl") as f:
        lines = [json.loads(line) for line in f]
    by_type = collections.defaultdict(list)
    for d in lines:
        by_type[d["type"]].append(d)
    return by_type


@pytest.fixture(scope="module")
def put_lines(fixture_root):
    with open(fixture_root / "put.jsonl") as f:
        return [json.loads(line) for line in f]


def _commitlog_files(root: str) -> dict[int, bytes]:
    """{file start offset: file bytes} of a store's commit-log directory."""
    d = os.path.join(root, "commitlog")
    out = {}
    for name in sorted(os.listdir(d)):
        if len(name) == 20 and name.isdigit():
            with open(os.path.join(d, name), "rb") as f:
                out[int(name)] = f.read()
    return out


def _record_bytes(files: dict[int, bytes], offset: int, size: int) -> bytes:
    start = offset - offset % FILE_SIZE
    pos = offset - start
    return files[start][pos:pos + size]


def _host(h: str):
    """Java's "0:0:0:0:0:0:0:1:40009" and rocketstore's "[::1]:40009" to one comparable form."""
    return refreader.parse_host(h)


def _assert_matches_line(m, e: dict) -> None:
    """Field-for-field comparison of a rocketstore MessageExt with one `msg` line."""
    where = f"msg at {e['physicalOffset']}"
    assert m is not None, where
    assert m.topic == e["topic"], where
    assert m.queue_id == e["queueId"], where
    assert m.queue_offset == e["queueOffset"], where
    assert m.commitlog_offset == e["physicalOffset"] == e["filePhysicalOffset"], where
    assert m.store_size == e["storeSize"], where
    assert m.body_crc == e["bodyCRC"], where
    assert bytes(m.stored_body) == bytes.fromhex(e["bodyHex"]), where
    assert zlib.crc32(bytes(m.stored_body)) & 0x7FFFFFFF == e["bodyCRC"], where
    if "bodyDecompressedHex" in e:
        assert e["sysFlag"] & 0x1, where
        assert bytes(m.body) == bytes.fromhex(e["bodyDecompressedHex"]), where
    else:
        assert bytes(m.body) == bytes.fromhex(e["bodyHex"]), where
    assert m.flag == e["flag"], where
    assert m.sys_flag == e["sysFlag"], where
    assert m.born_timestamp == e["bornTimestamp"], where
    assert _host(m.born_host) == _host(e["bornHost"]), where
    assert m.store_timestamp == e["storeTimestamp"], where
    assert _host(m.store_host) == _host(e["storeHost"]), where
    assert m.reconsume_times == e["reconsumeTimes"], where
    assert m.prepared_transaction_offset == e["preparedTransactionOffset"], where
    assert m.properties == e["properties"], where
    assert m.tags == e.get("tags"), where
    assert " ".join(m.keys) == e["keys"], where
    assert m.uniq_key == e["uniqKey"], where
    assert m.msg_id == e["msgId"], where
    assert m.magic & 0xFFFFFFFF == refreader.MAGIC_V1, where


# -- direct decoding of the files ----------------------------------------------------------------

def test_fixture_shape(expected):
    assert len(expected["msg"]) == NUM_MESSAGES
    assert len(expected["blank"]) == 5
    assert len(expected["cl_end"]) == 1
    assert expected["store"][0]["commitlogFileSize"] == FILE_SIZE


def test_codec_decode_every_msg_line(rocketmq_store, expected):
    files = _commitlog_files(rocketmq_store)
    assert all(len(b) == FILE_SIZE for b in files.values())
    for e in expected["msg"]:
        off = e["physicalOffset"]
        buf = files[off - off % FILE_SIZE]
        m = decode(buf, off % FILE_SIZE)
        _assert_matches_line(m, e)
        # with the CRC check too, and the raw (still compressed) body on request
        assert decode(buf, off % FILE_SIZE, check_crc=True).store_size == e["storeSize"]
        raw = decode(buf, off % FILE_SIZE, raw=True)
        assert bytes(raw.body) == bytes.fromhex(e["bodyHex"])
        assert check_record(buf, off % FILE_SIZE) == ("msg", e["storeSize"])


def test_codec_agrees_with_refreader_on_every_record(rocketmq_store):
    files = _commitlog_files(rocketmq_store)
    n = 0
    for name, pos, phy, rec in refreader.iter_commitlog(os.path.join(rocketmq_store, "commitlog"),
                                                        FILE_SIZE):
        if rec["kind"] != "msg":
            continue
        m = decode(files[int(name)], pos)
        assert m.commitlog_offset == rec["physical_offset"] == phy
        assert m.store_size == rec["total_size"]
        assert m.properties == rec["properties"]
        assert _host(m.born_host) == _host(rec["born_host"])
        assert bytes(m.stored_body) == rec["body"]
        n += 1
    assert n == NUM_MESSAGES


def test_fixture_properties_have_no_trailing_separator(rocketmq_store, expected):
    """RocketMQ 4.9.8 drops the final \\x02: re-encoding must reproduce that."""
    files = _commitlog_files(rocketmq_store)
    for e in expected["msg"][:50]:
        rec = refreader.decode_record(files[e["physicalOffset"] - e["physicalOffset"] % FILE_SIZE],
                                      e["physicalOffset"] % FILE_SIZE)
        assert not rec["properties_raw"].endswith(b"\x02")


def test_reencode_is_byte_identical(rocketmq_store, expected):
    files = _commitlog_files(rocketmq_store)
    for e in expected["msg"]:
        off = e["physicalOffset"]
        original = _record_bytes(files, off, e["storeSize"])
        m = decode(files[off - off % FILE_SIZE], off % FILE_SIZE)
        assert m.encode() == original, f"msg at {off}"
        assert m.copy().encode() == original, f"msg at {off} (copy)"


def test_tags_hash_matches_dispatched_tags_code(expected):
    """Normal messages: tagsCode = Java hashCode of TAGS (0 without tags) (docs/format.md §3)."""
    checked = 0
    for e in expected["msg"]:
        if e["topic"] == "SCHEDULE_TOPIC_XXXX":
            continue        # tags code is the delivery time there
        tags = e.get("tags")
        want = e["dispatch"]["tagsCode"]
        assert (java_hash(tags) if tags else 0) == want
        if tags:
            assert refreader.java_hash(tags) == want
        checked += 1
    assert checked > 900


# -- through the store -------------------------------------------------------------------------

def test_open_recovers_rocketmq_store(rocketmq_store, expected):
    cl_end = expected["cl_end"][0]["physicalOffset"]
    assert expected["recovered"][0]["maxPhyOffset"] == cl_end
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert sum(1 for _ in store.iter_messages()) == NUM_MESSAGES
        assert store.recovery["max_offset"] == cl_end
        assert store.recovery["files"] == 6
        assert store.recovery["last_exit_ok"] is True       # RocketMQ left no abort file
        assert store.get_max_phy_offset() == cl_end
        assert store.get_min_phy_offset() == expected["recovered"][0]["minPhyOffset"] == 0
        assert os.path.exists(os.path.join(rocketmq_store, "abort"))
    assert not os.path.exists(os.path.join(rocketmq_store, "abort"))


def test_store_reads_every_msg_line(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        for e in expected["msg"]:
            _assert_matches_line(store.look_message_by_offset(e["physicalOffset"]), e)
            if "bodyDecompressedHex" in e:
                raw = store.look_message_by_offset(e["physicalOffset"], raw=True)
                assert bytes(raw.body) == bytes.fromhex(e["bodyHex"])


def test_look_message_by_id_finds_each(rocketmq_store, expected):
    with MessageStore.open(rocketmq_store, _config()) as store:
        for e in expected["msg"]:
            m = store.look_message_by_id(e["msgId"])
            assert m is not None, e["msgId"]
            assert m.commitlog_offset == e["physicalOffset"]
            assert m.uniq_key == e["uniqKey"]
            # lower-case hex is the same id
            assert store.look_message_by_id(e["msgId"].lower()).commitlog_offset == e["physicalOffset"]
        # an offset inside a record is not a message; a malformed id is an error
        first = expected["msg"][0]
        inside = refreader.offset_msg_id("127.0.0.1", 10911, first["physicalOffset"] + 1)
        assert store.look_message_by_id(inside) is None
        with pytest.raises(InvalidMessageIdError):
            store.look_message_by_id(first["msgId"][:-1])


def test_blank_records_and_end_match_scan(rocketmq_store, expected):
    """`blank` lines and `cl_end` are what both rocketstore's and refreader's scans find."""
    want_blanks = [(b["physicalOffset"], b["size"]) for b in expected["blank"]]
    cl_end = expected["cl_end"][0]
    files = _commitlog_files(rocketmq_store)
    # rocketstore codec: walk every file record by record
    blanks, end = [], None
    for start, buf in sorted(files.items()):
        pos = 0
        while pos < FILE_SIZE:
            kind, size = check_record(buf, pos)
            if kind == "blank":
                blanks.append((start + pos, size))
                assert pos + size == FILE_SIZE          # the blank fills the file exactly
                break
            if kind == "invalid":
                end = start + pos
                break
            pos += size
    assert blanks == want_blanks
    assert end == cl_end["physicalOffset"]
    assert cl_end["file"] == f"{end - end % FILE_SIZE:020d}" and cl_end["pos"] == end % FILE_SIZE
    # refreader agrees
    ref_blanks, ref_end = [], None
    for name, pos, phy, rec in refreader.iter_commitlog(os.path.join(rocketmq_store, "commitlog")):
        if rec["kind"] == "blank":
            ref_blanks.append((phy, rec["size"]))
        elif rec["kind"] == "end":
            ref_end = (phy, rec["reason"])
    assert ref_blanks == want_blanks
    assert ref_end == (cl_end["physicalOffset"], cl_end["reason"])
    # and the store's own walker: a blank jumps to the next file, the end stops
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert store.get_max_phy_offset() == cl_end["physicalOffset"]
        for off, size in want_blanks:
            assert store.look_message_by_offset(off) is None
            assert store.commit_log.next_record(off) == (None, off + size)
        assert store.commit_log.next_record(cl_end["physicalOffset"]) == (None, -1)
        assert store.look_message_by_offset(cl_end["physicalOffset"]) is None


def test_iter_messages_yields_all_in_order(rocketmq_store, expected):
    want = [e["physicalOffset"] for e in expected["msg"]]
    with MessageStore.open(rocketmq_store, _config()) as store:
        got = [m.commitlog_offset for m in store.iter_messages()]
        assert got == want
        # from the middle (a record start in the third file)
        mid = len(want) // 2
        assert [m.commitlog_offset for m in store.iter_messages(want[mid])] == want[mid:]
        # from the first record of a file after a blank
        after_blank = expected["blank"][0]["physicalOffset"] + expected["blank"][0]["size"]
        i = want.index(after_blank)
        assert [m.commitlog_offset for m in store.iter_messages(after_blank)] == want[i:]


def test_queue_offsets_rebuilt_from_rocketmq(rocketmq_store, expected):
    counts = collections.Counter((e["topic"], e["queueId"]) for e in expected["msg"])
    summary = {(s["topic"], s["queueId"]): s["maxOffset"] for s in expected["cq_summary"]}
    with MessageStore.open(rocketmq_store, _config()) as store:
        for (topic, qid), max_offset in summary.items():
            assert store.commit_log.get_queue_offset(topic, qid) == max_offset == counts[(topic, qid)]
        assert store.commit_log.get_queue_offset("TopicA", 4) == 0
        assert store.commit_log.get_queue_offset("NoSuchTopic", 0) == 0


def test_put_after_rocketmq_continues_and_is_readable(rocketmq_store, expected, fixture_root):
    counts = collections.Counter((e["topic"], e["queueId"]) for e in expected["msg"])
    cl_end = expected["cl_end"][0]["physicalOffset"]
    puts = [("TopicA", 0), ("TopicB", 3), ("TopicA", 0), ("TopicNew", 2)]
    results = []
    with MessageStore.open(rocketmq_store, _config()) as store:
        for i, (topic, qid) in enumerate(puts):
            msg = Message(topic, f"after-rocketmq-{i}".encode(), tags=f"T{i}", keys=[f"k{i}"],
                          properties={"color": "зелёный"})
            results.append((store.put_message(msg, qid), topic, qid, msg))
        r0 = results[0][0]
        assert r0.ok and r0.commitlog_offset == cl_end
        assert r0.queue_offset == counts[("TopicA", 0)]
        assert results[1][0].queue_offset == counts[("TopicB", 3)]
        assert results[2][0].queue_offset == counts[("TopicA", 0)] + 1
        assert results[3][0].queue_offset == 0
        end = store.get_max_phy_offset()
        assert end == cl_end + sum(r.wrote_bytes for r, *_ in results)
    # refreader reads the new records, and the old ones still decode
    recs = {phy: rec for _, _, phy, rec in
            refreader.iter_commitlog(os.path.join(rocketmq_store, "commitlog"), FILE_SIZE)
            if rec["kind"] == "msg"}
    assert len(recs) == NUM_MESSAGES + len(puts)
    for r, topic, qid, msg in results:
        rec = recs[r.commitlog_offset]
        assert rec["topic"] == topic and rec["queue_id"] == qid
        assert rec["queue_offset"] == r.queue_offset and rec["total_size"] == r.wrote_bytes
        assert rec["body"] == msg.body
        assert rec["properties"]["TAGS"] == msg.tags
        assert rec["properties"]["color"] == "зелёный"
        assert len(rec["properties"]["UNIQ_KEY"]) == 32
        assert rec["properties_raw"].endswith(b"\x02")     # rocketstore writes it (5.2+)
        assert rec["store_host"] == "127.0.0.1:10911"
        assert rec["body_crc"] == refreader.body_crc(msg.body)
        assert refreader.offset_msg_id("127.0.0.1", 10911, r.commitlog_offset) == r.msg_id
    # RocketMQ's bytes are untouched: the first five files entirely, the last up to its end
    before = _commitlog_files(str(fixture_root / "store"))
    after = _commitlog_files(rocketmq_store)
    last = max(before)
    for start in before:
        if start != last:
            assert after[start] == before[start]
    assert after[last][:cl_end - last] == before[last][:cl_end - last]
    # reopen: everything readable, queue offsets continue
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert sum(1 for _ in store.iter_messages()) == NUM_MESSAGES + len(puts)
        assert store.get_max_phy_offset() == end
        for r, topic, qid, msg in results:
            m = store.look_message_by_offset(r.commitlog_offset)
            assert m.topic == topic and m.queue_offset == r.queue_offset
            assert bytes(m.body) == msg.body and m.tags == msg.tags and m.keys == msg.keys
            assert store.look_message_by_id(r.msg_id).commitlog_offset == r.commitlog_offset
        assert store.commit_log.get_queue_offset("TopicA", 0) == counts[("TopicA", 0)] + 2
        r = store.put_message(Message("TopicA", b"again"), 0)
        assert r.queue_offset == counts[("TopicA", 0)] + 2
        assert r.commitlog_offset == end
        # the old messages are still intact through the store
        for e in expected["msg"][::97]:
            _assert_matches_line(store.look_message_by_offset(e["physicalOffset"]), e)


def test_put_jsonl_agrees_with_decode(rocketmq_store, put_lines, expected):
    puts = [p for p in put_lines if p["type"] == "put"]
    done = [p for p in put_lines if p["type"] == "done"]
    assert len(puts) == NUM_MESSAGES and len(done) == 1
    files = _commitlog_files(rocketmq_store)
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert done[0]["maxPhyOffset"] == store.get_max_phy_offset()
        assert done[0]["messages"] == sum(1 for _ in store.iter_messages())
        for p in puts:
            off = p["physicalOffset"]
            m = decode(files[off - off % FILE_SIZE], off % FILE_SIZE)
            assert m.msg_id == p["msgId"], p
            assert m.commitlog_offset == off, p
            assert m.queue_offset == p["queueOffset"], p
            assert m.store_size == p["size"], p
            assert m.queue_id == p["queueId"], p
            assert m.topic == p["topic"], p
            assert m.uniq_key == p["uniqKey"], p
            s = store.look_message_by_id(p["msgId"])
            assert s is not None and s.commitlog_offset == off and s.store_size == p["size"]


def test_open_with_wrong_file_size_changes_nothing(rocketmq_store, fixture_root):
    """The fixture's 64 KiB files under another configured size: refused naming both values,
    files untouched, no abort left behind, lock released. Under the default (1 GiB) the
    store takes its size from the files instead."""
    from rocketstore import InvalidConfigError
    before = _commitlog_files(rocketmq_store)
    cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=CQ_FILE_SIZE,
                      max_hash_slot_num=100, max_index_num=400)
    with pytest.raises(InvalidConfigError) as ei:
        MessageStore.open(rocketmq_store, cfg)
    assert "mapped_file_size_commit_log=4096" in str(ei.value) and "65536" in str(ei.value)
    assert not os.path.exists(os.path.join(rocketmq_store, "abort"))
    assert _commitlog_files(rocketmq_store) == before
    assert sorted(os.listdir(os.path.join(rocketmq_store, "commitlog"))) == \
        sorted(os.listdir(fixture_root / "store" / "commitlog"))
    with MessageStore.open(rocketmq_store, StoreConfig(mapped_file_size_consume_queue=CQ_FILE_SIZE,
                                                       max_hash_slot_num=100,
                                                       max_index_num=400)) as store:
        assert store.config.mapped_file_size_commit_log == 65536
        assert sum(1 for _ in store.iter_messages()) == NUM_MESSAGES
    with MessageStore.open(rocketmq_store, _config()) as store:
        assert sum(1 for _ in store.iter_messages()) == NUM_MESSAGES
