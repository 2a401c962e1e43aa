"""Proves the docs/format.md oracle (tests/refreader.py) against a real RocketMQ 4.9.8 store.

The fixture in /work/shared/fixtures/rocketmq-4.9.8 was written by RocketMQ's own
DefaultMessageStore; expected.jsonl is what RocketMQ's MessageDecoder / checkMessageAndReturnSize
read back from it. If these tests pass, refreader is a trustworthy oracle for the Cython codec.
"""

import json
import os
import shutil
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refreader as rr  # noqa: E402

from conftest import FIXTURE_ROOT as FIXTURE  # noqa: E402  (the one place that finds it)
FILE_SIZE = 65536
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_LEVEL_18_MS = 2 * 3600 * 1000      # default messageDelayLevel "... 1h 2h", level 18 = 2h


def test_fixture_is_present():
    # the oracle is proven against RocketMQ's own files: their absence is a failure, not a skip
    assert FIXTURE.is_dir(), f"RocketMQ 4.9.8 fixture missing at {FIXTURE}"


# ---------------------------------------------------------------------------------------------
# fixture helpers

@pytest.fixture(scope="module")
def expected():
    by_type = {}
    with open(FIXTURE / "expected.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            by_type.setdefault(d["type"], []).append(d)
    return by_type


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    dst = tmp_path_factory.mktemp("rmq498") / "store"
    shutil.copytree(FIXTURE / "store", dst)
    return dst


@pytest.fixture(scope="module")
def commitlog(store):
    """{file start offset: file bytes}"""
    d = store / "commitlog"
    return {int(n): (d / n).read_bytes() for n in sorted(os.listdir(d))}


def at(commitlog, phy):
    """(file bytes, position in file) of absolute commit-log offset ``phy``."""
    start = phy - phy % FILE_SIZE
    return commitlog[start], phy - start


def split_host(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


# ---------------------------------------------------------------------------------------------
# the real store, field for field

def test_every_msg_line_matches_decoded_record(expected, commitlog):
    msgs = expected["msg"]
    assert len(msgs) == 1000
    for m in msgs:
        buf, pos = at(commitlog, m["physicalOffset"])
        r = rr.decode_record(buf, pos)
        assert r["kind"] == "msg"
        assert r["magic"] == rr.MAGIC_V1
        got = {
            "bodyCRC": r["body_crc"],
            "bodyHex": r["body"].hex(),
            "bornHost": r["born_host"],
            "bornTimestamp": r["born_timestamp"],
            "flag": r["flag"],
            "msgId": rr.offset_msg_id(*split_host(r["store_host"]), r["physical_offset"]),
            "physicalOffset": r["physical_offset"],
            "filePhysicalOffset": r["physical_offset"],
            "preparedTransactionOffset": r["prepared_transaction_offset"],
            "properties": r["properties"],
            "queueId": r["queue_id"],
            "queueOffset": r["queue_offset"],
            "reconsumeTimes": r["reconsume_times"],
            "storeHost": r["store_host"],
            "storeSize": r["total_size"],
            "storeTimestamp": r["store_timestamp"],
            "sysFlag": r["sys_flag"],
            "topic": r["topic"],
        }
        want = {k: m[k] for k in got}
        assert got == want, f"record at {m['physicalOffset']}"
        assert rr.body_crc(r["body"]) == m["bodyCRC"]
        assert m["dispatch"]["msgSize"] == r["total_size"]
        assert m.get("tags") == r["properties"].get("TAGS")
        assert m.get("keys") == r["properties"].get("KEYS")
        assert m.get("uniqKey") == r["properties"].get("UNIQ_KEY")
        if r["sys_flag"] & 0x1:                      # compressed (0x301 = zlib)
            assert zlib.decompress(r["body"]).hex() == m["bodyDecompressedHex"]
        else:
            assert "bodyDecompressedHex" not in m


def test_ipv6_born_host_rendering(expected, commitlog):
    v6 = [m for m in expected["msg"] if m["sysFlag"] & rr.BORNHOST_V6_FLAG]
    assert len(v6) == 20
    for m in v6:
        assert m["bornHost"].startswith("0:0:0:0:0:0:0:1:")   # Java getHostAddress, no "::"
        buf, pos = at(commitlog, m["physicalOffset"])
        r = rr.decode_record(buf, pos)
        assert r["born_host"] == m["bornHost"]
        assert r["total_size"] == rr.record_size(
            len(r["body"]), len(r["topic"].encode()), len(r["properties_raw"]), born_v6=True)


def test_encode_is_exact_inverse_of_decode(expected, commitlog):
    for m in expected["msg"]:
        buf, pos = at(commitlog, m["physicalOffset"])
        r = rr.decode_record(buf, pos)
        original = bytes(buf[pos:pos + r["total_size"]])
        assert rr.encode_record(r) == original
        # also from the parsed dict alone (4.9.8 writes no trailing \x02, see encode_properties)
        assert not r["properties_raw"].endswith(b"\x02")
        assert rr.encode_properties(r["properties"], trailing=False) == r["properties_raw"]
        r2 = dict(r)
        del r2["properties_raw"]
        r2["properties"] = rr.parse_properties(r["properties_raw"])
        r2_bytes = rr.encode_record(r2)
        assert len(r2_bytes) == r["total_size"] + 1          # default encoding adds the \x02
        r3 = rr.decode_record(rr.encode_record(dict(r2, total_size=len(r2_bytes))), 0)
        assert r3["properties"] == r["properties"] and r3["body"] == r["body"]
        assert r["total_size"] == rr.record_size(
            len(r["body"]), len(r["topic"].encode()), len(r["properties_raw"]),
            born_v6=bool(r["sys_flag"] & 0x10), store_v6=bool(r["sys_flag"] & 0x20))


def test_iter_commitlog_walks_msgs_blanks_and_end(expected, store, commitlog):
    items = list(rr.iter_commitlog(str(store / "commitlog"), file_size=FILE_SIZE))
    msgs = [(n, p, o, r) for n, p, o, r in items if r["kind"] == "msg"]
    blanks = [(n, p, o, r) for n, p, o, r in items if r["kind"] == "blank"]
    ends = [(n, p, o, r) for n, p, o, r in items if r["kind"] == "end"]

    assert [o for _, _, o, _ in msgs] == [m["physicalOffset"] for m in expected["msg"]]
    for n, p, o, r in msgs:
        assert int(n) + p == o == r["physical_offset"]
        assert len(n) == 20

    assert [{"physicalOffset": o, "size": r["size"], "type": "blank"} for _, _, o, r in blanks] \
        == expected["blank"]
    for n, p, o, r in blanks:
        assert r["magic"] == rr.BLANK_MAGIC
        assert o + r["size"] == int(n) + FILE_SIZE          # a blank fills its file to the end
        assert r["size"] >= rr.END_FILE_MIN_BLANK_LENGTH
        assert rr.encode_record(r) == commitlog[int(n)][p:p + 8]

    (cl_end,) = expected["cl_end"]
    assert len(ends) == 1 and items[-1] == ends[0]
    n, p, o, r = ends[0]
    assert (n, p, o, "zero") == (cl_end["file"], cl_end["pos"], cl_end["physicalOffset"],
                                 cl_end["reason"])
    assert r["reason"] == "zero"
    assert expected["recovered"][0]["maxPhyOffset"] == o
    # data really ends there: the rest of the last file is zeros
    assert not any(commitlog[int(n)][p:])


def test_put_results_match(commitlog):
    with open(FIXTURE / "put.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    puts = [p for p in lines if p["type"] == "put"]
    (done,) = [p for p in lines if p["type"] == "done"]
    assert len(puts) == done["messages"] == 1000
    last = max(puts, key=lambda p: p["physicalOffset"])
    assert last["physicalOffset"] + last["size"] == done["maxPhyOffset"]
    for p in puts:
        buf, pos = at(commitlog, p["physicalOffset"])
        r = rr.decode_record(buf, pos)
        assert r["total_size"] == p["size"]
        assert r["queue_offset"] == p["queueOffset"]
        assert r["properties"]["UNIQ_KEY"] == p["uniqKey"]
        assert rr.offset_msg_id(*split_host(r["store_host"]), r["physical_offset"]) == p["msgId"]
        # put results report the stored topic: delayed messages already rewritten by 4.9.8
        assert (r["topic"], r["queue_id"]) == (p["topic"], p["queueId"])
        if r["topic"] == SCHEDULE_TOPIC:
            assert r["queue_id"] == 17 and r["properties"]["DELAY"] == "18"
            assert r["properties"]["REAL_TOPIC"] in ("TopicA", "TopicB")


def test_tags_code_is_java_hash_of_tags(expected):
    seen_tagged = seen_untagged = seen_delayed = 0
    for m in expected["msg"]:
        code = m["dispatch"]["tagsCode"]
        if m["topic"] == SCHEDULE_TOPIC:
            assert code == m["storeTimestamp"] + DELAY_LEVEL_18_MS
            seen_delayed += 1
            continue
        tags = m["properties"].get("TAGS")
        if tags:
            assert code == rr.java_hash(tags)
            seen_tagged += 1
        else:
            assert code == 0
            seen_untagged += 1
    assert seen_tagged and seen_untagged and seen_delayed
    assert rr.java_hash("Tag0") == 2598902


# ---------------------------------------------------------------------------------------------
# docs/format.md vectors and synthetic cases

def _msg(**over):
    d = {
        "kind": "msg", "total_size": 0, "magic": rr.MAGIC_V1, "body_crc": 0, "queue_id": 3,
        "flag": -1, "queue_offset": 7, "physical_offset": 1580, "sys_flag": 0,
        "born_timestamp": 1700000000000, "born_host": "10.0.0.1:53000",
        "store_timestamp": 1700000000123, "store_host": "192.168.1.2:10911",
        "reconsume_times": 2, "prepared_transaction_offset": -5, "body": b"", "topic": "T",
        "properties": {},
    }
    d.update(over)
    return d


def test_format_md_size_vector_158():
    body = b"Once, there was a chance for me!"
    props = rr.encode_properties({"KEYS": "1700000000000", "TAGS": "TAG1"})
    assert (len(body), len(props)) == (32, 29)
    assert rr.record_size(32, 6, 29) == 158
    assert rr.record_size(0, 0, 0) == 91
    rec = _msg(total_size=158, body=body, body_crc=rr.body_crc(body), topic="FooBar",
               properties_raw=props)
    raw = rr.encode_record(rec)
    assert len(raw) == 158
    back = rr.decode_record(raw, 0)
    assert back["properties"] == {"KEYS": "1700000000000", "TAGS": "TAG1"}
    assert back["body"] == body and back["topic"] == "FooBar" and back["flag"] == -1
    assert rr.encode_record(back) == raw


def test_v2_topic_and_ipv6_hosts_roundtrip():
    topic = "%RETRY%" + "g" * 200                        # > 127 chars -> magic v2
    body = bytes(range(256))
    props = rr.encode_properties({"ORIGIN_MESSAGE_ID": "X", "color": "красный"})
    size = rr.record_size(len(body), len(topic), len(props), born_v6=True, store_v6=True, v2=True)
    assert size == 91 + 12 + 12 + 1 + len(body) + len(topic) + len(props)
    rec = _msg(magic=rr.MAGIC_V2, sys_flag=0x30 | 0x8, total_size=size, body=body,
               body_crc=rr.body_crc(body), topic=topic, properties_raw=props,
               born_host="0:0:0:0:0:0:0:1:40009", store_host="fe80:0:0:0:0:0:0:abc:10911")
    raw = rr.encode_record(rec)
    assert len(raw) == size
    back = rr.decode_record(b"\0" * 5 + raw + b"\0" * 8, 5)
    assert back["topic"] == topic and back["magic"] == rr.MAGIC_V2
    assert back["born_host"] == "0:0:0:0:0:0:0:1:40009"
    assert back["store_host"] == "fe80:0:0:0:0:0:0:abc:10911"
    assert back["properties"]["color"] == "красный"
    assert rr.encode_record(back) == raw
    # v1 cannot hold it
    with pytest.raises(ValueError):
        rr.encode_record(dict(rec, magic=rr.MAGIC_V1))
    # IPv4-mapped v6 address renders as IPv4 (InetAddress.getByAddress) and still round-trips
    mapped = rr.encode_record(dict(rec, store_host="::ffff:1.2.3.4:99"))
    assert rr.decode_record(mapped, 0)["store_host"] == "1.2.3.4:99"
    assert rr.encode_record(rr.decode_record(mapped, 0)) == mapped


def test_offset_msg_id():
    assert rr.offset_msg_id("127.0.0.1", 10911, 0) == "7F00000100002A9F0000000000000000"
    assert rr.offset_msg_id("127.0.0.1", 10911, 8622) == "7F00000100002A9F00000000000021AE"
    v6 = rr.offset_msg_id("0:0:0:0:0:0:0:1", 10911, 1)
    assert len(v6) == 56
    assert v6 == "0" * 31 + "1" + "00002A9F" + "0" * 15 + "1"
    assert rr.offset_msg_id("::ffff:127.0.0.1", 10911, 0) == "7F00000100002A9F0000000000000000"


def test_java_hash():
    assert rr.java_hash("Aa") == rr.java_hash("BB") == 2112
    assert rr.java_hash("") == 0
    # non-BMP: hashed over the UTF-16 surrogate pair D83D DE00
    assert rr.java_hash("\U0001F600") == 31 * 0xD83D + 0xDE00 == 1772899
    assert rr.java_hash("polygenelubricants") == -2**31    # overflow wraps to a signed int
    assert rr.java_hash("TagA") == 2598919                  # checked with OpenJDK 17
    assert rr.java_hash("TagA||TagB") == _slow_java_hash("TagA||TagB")


def _slow_java_hash(s):
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10),
                                           0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_parse_properties_rules():
    P = rr.parse_properties
    assert P(b"") == {}
    assert P(b"a\x01b") == {"a": "b"}                              # no trailing separator
    assert P(b"a\x01b\x02") == {"a": "b"}
    assert P(b"a\x01\x02\x01b\x02ab\x02") == {}                     # empty value/key, no \x01
    assert P(b"k\x01v1\x02k\x01v2\x02") == {"k": "v2"}              # later duplicates win
    assert P(b"a\x01b\x01c\x02") == {"a": "b\x01c"}                 # first \x01 splits
    assert P(b"\x02\x02x\x01y\x02\x02") == {"x": "y"}
    assert P("ключ\x01значение\x02".encode()) == {"ключ": "значение"}
    assert P(b"bad\xff\x01v") == {"bad\ufffd": "v"}                 # invalid UTF-8 -> U+FFFD
    d = {"KEYS": "a b", "TAGS": "t", "none": None}
    assert rr.encode_properties(d) == b"KEYS\x01a b\x02TAGS\x01t\x02"
    assert rr.encode_properties(d, trailing=False) == b"KEYS\x01a b\x02TAGS\x01t"
    assert rr.encode_properties({}, trailing=False) == b""
    assert P(rr.encode_properties(d)) == {"KEYS": "a b", "TAGS": "t"}


def test_body_crc():
    assert rr.body_crc(b"") == 0
    assert rr.body_crc(b"Once, there was a chance for me!") == \
        zlib.crc32(b"Once, there was a chance for me!") & 0x7FFFFFFF
    assert all(rr.body_crc(bytes([i]) * 7) >= 0 for i in range(256))


def test_decode_errors_and_end():
    good = rr.encode_record(_msg(total_size=rr.record_size(3, 1, 0), body=b"abc"))
    assert rr.decode_record(good, 0)["body"] == b"abc"
    assert rr.decode_record(good + bytes(16), len(good)) == {"kind": "end", "reason": "zero"}
    assert rr.decode_record(good, len(good))["kind"] == "end"

    bad_magic = good[:4] + b"\x12\x34\x56\x78" + good[8:]
    with pytest.raises(ValueError, match="magic"):
        rr.decode_record(bad_magic, 0)
    with pytest.raises(ValueError, match="past"):
        rr.decode_record(good[:-1], 0)                              # TOTALSIZE past the buffer
    too_long = rr.encode_record(_msg(total_size=rr.record_size(3, 1, 0) + 4, body=b"abc"))
    with pytest.raises(ValueError):
        rr.decode_record(too_long + bytes(4), 0)                    # fields don't add up
    body_past = rr.encode_record(_msg(total_size=rr.record_size(3, 1, 0), body=b"abc",
                                      topic="TT"))
    with pytest.raises(ValueError):
        rr.decode_record(body_past[:-1], 0)
    with pytest.raises(ValueError, match="past"):
        rr.decode_record(rr.encode_record({"kind": "blank", "size": 100}), 0)
    with pytest.raises(ValueError):
        rr.decode_record(b"\x00\x00\x01", 0)
