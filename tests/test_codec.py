"""rocketstore.store._codec against the docs/format.md oracle (tests/refreader.py), sections 1 and 7.

Records written by ``encode_record`` are decoded by the independent struct reader and by
``decode``; ``check_record`` is fed truncated, corrupted and mis-sized records; hashes, CRCs and
message ids are compared with their reference definitions; ``Message`` validation is checked
field by field at its limits.
"""
import ipaddress
import os
import pickle
import random
import re
import struct
import sys
import zlib

import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refreader as rr  # noqa: E402

from rocketstore.store import _codec as codec  # noqa: E402
from rocketstore.errors import (  # noqa: E402
    InvalidMessageError, InvalidMessageIdError, InvalidMessageTypeError,
)

# hypothesis: no example database (tests create no files in the tree), no deadline (CI jitter)
HYP = settings(database=None, deadline=None, max_examples=300)

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"
# text pools for properties/tags/keys: Latin-1, Cyrillic, CJK, emoji (4-byte UTF-8)
TEXT_POOLS = [
    "abcxyzABC019_-.:/ =",
    "éàüßñøÅ",
    "абвгдеёжзПРИВЕТ",
    "中文字符日本語한국어",
    "😀🚀🎉𝄞",
]
UNIQ_RE = re.compile(r"^[0-9A-F]{32}$")


def rand_text(rand, lo=1, hi=12):
    pool = "".join(rand.sample(TEXT_POOLS, rand.randint(1, len(TEXT_POOLS))))
    return "".join(rand.choice(pool) for _ in range(rand.randint(lo, hi)))


def rand_topic(rand):
    if rand.random() < 0.2:      # %RETRY% topics may be longer than 127 chars (v2 magic)
        return "%RETRY%" + "".join(rand.choice(TOPIC_CHARS)
                                   for _ in range(rand.randint(1, 248)))
    return "".join(rand.choice(TOPIC_CHARS) for _ in range(rand.randint(1, 127)))


def rand_host(rand, v6):
    port = rand.randint(0, 65535)
    if v6:
        addr = ipaddress.IPv6Address(rand.getrandbits(128))
        if addr.ipv4_mapped is not None:
            addr = ipaddress.IPv6Address("2001:db8::1")
        return f"[{addr}]:{port}"
    return f"{ipaddress.IPv4Address(rand.getrandbits(32))}:{port}"


def norm_host(hostport):
    """'1.2.3.4:5', '[::1]:5' (rocketstore) and '0:0:...:1:5' (Java style) -> (ip, port)."""
    addr, port = rr.parse_host(hostport)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr, port


def i32(rand):
    return rand.randint(-2**31, 2**31 - 1)


def i64(rand):
    return rand.randint(-2**63, 2**63 - 1)


def rand_fields(rand):
    born_v6 = rand.random() < 0.3
    store_v6 = rand.random() < 0.3
    body_kind = rand.random()
    if body_kind < 0.15:
        body = b""
    else:
        body = rand.randbytes(rand.randint(1, 400))
    props = {}
    for _ in range(rand.randint(0, 5)):
        props[rand_text(rand)] = rand_text(rand)
    if rand.random() < 0.5:
        props["TAGS"] = rand_text(rand)
    if rand.random() < 0.5:
        props["KEYS"] = " ".join(rand_text(rand).replace(" ", "") or "k"
                                 for _ in range(rand.randint(1, 3)))
    return dict(
        topic=rand_topic(rand),
        body=body,
        properties=props,
        queue_id=i32(rand),
        flag=i32(rand),
        queue_offset=i64(rand),
        physical_offset=i64(rand),
        # host bits 0x10/0x20 are set by encode_record from the addresses
        sys_flag=i32(rand) & ~0x30,
        born_timestamp=i64(rand),
        born_host=rand_host(rand, born_v6),
        store_timestamp=i64(rand),
        store_host=rand_host(rand, store_v6),
        reconsume_times=i32(rand),
        prepared_transaction_offset=i64(rand),
    )


def expected_sys_flag(fields):
    sf = fields["sys_flag"]
    if fields["born_host"].startswith("["):
        sf |= rr.BORNHOST_V6_FLAG
    if fields["store_host"].startswith("["):
        sf |= rr.STOREHOST_V6_FLAG
    return sf


def assert_ref_equals(ref, fields, raw_props=None):
    """Every field the oracle decoded equals what was asked for."""
    body = fields["body"]
    topic_b = fields["topic"].encode()
    props_b = raw_props if raw_props is not None else rr.encode_properties(fields["properties"])
    born_v6 = fields["born_host"].startswith("[")
    store_v6 = fields["store_host"].startswith("[")
    v2 = len(topic_b) > 127
    assert ref["kind"] == "msg"
    assert ref["total_size"] == rr.record_size(len(body), len(topic_b), len(props_b),
                                               born_v6, store_v6, v2)
    assert ref["magic"] == (rr.MAGIC_V2 if v2 else rr.MAGIC_V1)
    assert ref["body_crc"] == rr.body_crc(body)
    for k in ("queue_id", "flag", "queue_offset", "born_timestamp", "store_timestamp",
              "reconsume_times", "prepared_transaction_offset"):
        assert ref[k] == fields[k], k
    assert ref["physical_offset"] == fields["physical_offset"]
    assert ref["sys_flag"] == expected_sys_flag(fields)
    assert norm_host(ref["born_host"]) == norm_host(fields["born_host"])
    assert norm_host(ref["store_host"]) == norm_host(fields["store_host"])
    assert ref["body"] == body
    assert ref["topic"] == fields["topic"]
    assert ref["properties_raw"] == props_b
    assert ref["properties"] == fields["properties"]


def assert_ext_equals(m, fields):
    """Every field of a decoded MessageExt equals what was asked for."""
    body = fields["body"]
    topic_b = fields["topic"].encode()
    v2 = len(topic_b) > 127
    assert m.topic == fields["topic"]
    assert bytes(m.body) == body
    assert bytes(m.stored_body) == body
    assert m.properties == fields["properties"]
    assert m.tags == fields["properties"].get("TAGS")
    assert m.flag == fields["flag"]
    assert m.queue_id == fields["queue_id"]
    assert m.queue_offset == fields["queue_offset"]
    assert m.commitlog_offset == fields["physical_offset"]
    assert m.body_crc == rr.body_crc(body)
    assert m.sys_flag == expected_sys_flag(fields)
    assert m.born_timestamp == fields["born_timestamp"]
    assert norm_host(m.born_host) == norm_host(fields["born_host"])
    assert m.store_timestamp == fields["store_timestamp"]
    assert norm_host(m.store_host) == norm_host(fields["store_host"])
    assert m.reconsume_times == fields["reconsume_times"]
    assert m.prepared_transaction_offset == fields["prepared_transaction_offset"]
    assert m.magic & 0xFFFFFFFF == (rr.MAGIC_V2 if v2 else rr.MAGIC_V1)
    ip, port = norm_host(fields["store_host"])
    assert m.msg_id == rr.offset_msg_id(str(ip), port, fields["physical_offset"])


# ---------------------------------------------------------------------------------------------
# encode_record vs the reference reader

def test_random_records_decode_identically_in_reference_reader(rand):
    for _ in range(400):
        fields = rand_fields(rand)
        rec = codec.encode_record(**fields)
        ref = rr.decode_record(rec, 0)
        assert_ref_equals(ref, fields)
        assert ref["total_size"] == len(rec)
        # the oracle's encoder writes the very same bytes
        assert rr.encode_record(ref) == rec


def test_random_records_decode_identically_in_codec(rand):
    for _ in range(400):
        fields = rand_fields(rand)
        rec = codec.encode_record(**fields)
        # raw: random sysflags may claim compression; the stored bytes are what is compared
        m = codec.decode(rec, 0, check_crc=True, raw=True)
        assert m.store_size == len(rec)
        assert_ext_equals(m, fields)
        # re-encoding a decoded record gives the same bytes
        assert m.encode() == rec
        assert m.copy().encode() == rec


def test_record_decodes_at_nonzero_position_in_a_larger_buffer(rand):
    recs = [codec.encode_record(**rand_fields(rand)) for _ in range(20)]
    buf = b"".join(recs)
    pos = 0
    for rec in recs:
        assert codec.check_record(buf, pos) == ("msg", len(rec))
        assert codec.decode(buf, pos, raw=True).encode() == rec
        assert rr.decode_record(buf, pos)["total_size"] == len(rec)
        pos += len(rec)
    assert pos == len(buf)


def test_ipv6_born_and_store_hosts_set_both_sysflag_bits():
    rec = codec.encode_record(topic="T", body=b"x", born_host="[::1]:40009",
                              store_host="[fe80::1:2]:10911", physical_offset=77)
    ref = rr.decode_record(rec, 0)
    assert ref["sys_flag"] & 0x30 == 0x30
    assert ref["born_host"] == "0:0:0:0:0:0:0:1:40009"
    assert ref["store_host"] == "fe80:0:0:0:0:0:1:2:10911"
    assert ref["total_size"] == rr.record_size(1, 1, 0, born_v6=True, store_v6=True)
    assert len(rec) == 91 + 1 + 1 + 24          # two 12-byte IPv6 extensions
    m = codec.decode(rec)
    assert m.born_host == "[::1]:40009"
    assert m.store_host == "[fe80::1:2]:10911"
    assert len(m.msg_id) == 56
    assert m.msg_id == rr.offset_msg_id("fe80::1:2", 10911, 77)


def test_only_born_host_ipv6_sets_only_bornhost_bit():
    rec = codec.encode_record(topic="T", body=b"x", born_host="[::1]:1",
                              store_host="10.0.0.1:10911")
    ref = rr.decode_record(rec, 0)
    assert ref["sys_flag"] & 0x30 == 0x10
    assert ref["store_host"] == "10.0.0.1:10911"


def test_only_store_host_ipv6_sets_only_storehost_bit():
    rec = codec.encode_record(topic="T", body=b"x", born_host="10.0.0.2:5",
                              store_host="[2001:db8::7]:10911")
    ref = rr.decode_record(rec, 0)
    assert ref["sys_flag"] & 0x30 == 0x20
    assert ref["born_host"] == "10.0.0.2:5"
    assert ref["store_host"] == "2001:db8:0:0:0:0:0:7:10911"


def test_retry_topic_of_128_chars_uses_v2_magic_with_short_topic_length():
    topic = "%RETRY%" + "g" * 121
    assert len(topic) == 128
    rec = codec.encode_record(topic=topic, body=b"b")
    ref = rr.decode_record(rec, 0)
    assert ref["magic"] == rr.MAGIC_V2
    assert ref["topic"] == topic
    assert ref["total_size"] == rr.record_size(1, 128, 0, v2=True) == len(rec)
    # the topic length is a 2-byte short right after the body
    body_end = 84 + 4 + 1
    assert struct.unpack_from(">h", rec, body_end)[0] == 128
    m = codec.decode(rec)
    assert m.topic == topic and m.magic & 0xFFFFFFFF == rr.MAGIC_V2


def test_topic_of_127_chars_stays_v1_with_byte_topic_length():
    topic = "t" * 127
    rec = codec.encode_record(topic=topic, body=b"")
    ref = rr.decode_record(rec, 0)
    assert ref["magic"] == rr.MAGIC_V1
    assert rec[84 + 4] == 127
    assert len(rec) == 91 + 127


def test_255_char_retry_topic_round_trips_in_v2():
    topic = "%RETRY%" + "x" * 248
    m = codec.Message(topic, b"body")
    rec = codec.encode_record(topic=m.topic, body=m.body)
    ref = rr.decode_record(rec, 0)
    assert ref["magic"] == rr.MAGIC_V2 and ref["topic"] == topic


def test_empty_body_has_crc_zero():
    rec = codec.encode_record(topic="T", body=b"")
    ref = rr.decode_record(rec, 0)
    assert ref["body_crc"] == 0 and ref["body"] == b""
    assert struct.unpack_from(">i", rec, 8)[0] == 0
    assert codec.check_record(rec, 0, True) == ("msg", 91 + 1)
    assert codec.body_crc(b"") == 0
    m = codec.decode(rec, check_crc=True)
    assert bytes(m.body) == b"" and m.body_crc == 0


def test_non_ascii_properties_tags_keys_are_utf8_on_disk():
    msg = codec.Message("T", b"b", tags="тег-中文-😀", keys=["ключ", "鍵", "🔑"],
                        properties={"имя": "значение", "名前": "値", "e😀": "v🚀"})
    props = msg.properties
    rec = codec.encode_record(topic=msg.topic, body=msg.body, properties=props)
    ref = rr.decode_record(rec, 0)
    assert ref["properties"] == props
    assert ref["properties"]["KEYS"] == "ключ 鍵 🔑"
    assert ref["properties_raw"] == rr.encode_properties(props)
    # the PROPERTIES length counts UTF-8 bytes, not characters
    raw = rr.encode_properties(props)
    assert len(raw) > len(raw.decode())
    assert struct.unpack_from(">h", rec, len(rec) - len(raw) - 2)[0] == len(raw)
    m = codec.decode(rec)
    assert m.tags == "тег-中文-😀"
    assert m.keys == ["ключ", "鍵", "🔑"]
    assert m.properties == props


def test_properties_raw_without_trailing_separator_as_written_by_4_9_8():
    raw = rr.encode_properties({"KEYS": "k1", "TAGS": "t"}, trailing=False)
    rec = codec.encode_record(topic="T", body=b"x", properties_raw=raw)
    ref = rr.decode_record(rec, 0)
    assert ref["properties_raw"] == raw and not raw.endswith(b"\x02")
    m = codec.decode(rec)
    assert m.properties == {"KEYS": "k1", "TAGS": "t"}
    assert m.encode() == rec        # the missing trailing \x02 is remembered


def test_format_md_vector_is_158_bytes():
    """docs/format.md §1.1: FooBar, 32-byte body, KEYS=<13 digits> and TAGS=TAG1 -> 158 bytes."""
    keys = "1700000000000"
    assert len(keys) == 13
    msg = codec.Message("FooBar", b"Once, there was a chance for me!",
                        properties={"KEYS": keys, "TAGS": "TAG1"})
    rec = codec.encode_record(topic=msg.topic, body=msg.body, properties=msg.properties)
    assert len(rec) == 158
    assert struct.unpack_from(">i", rec, 0)[0] == 158
    ref = rr.decode_record(rec, 0)
    assert ref["total_size"] == 158
    assert len(ref["properties_raw"]) == 29
    assert ref["properties"] == {"KEYS": keys, "TAGS": "TAG1"}
    assert 10 * len(rec) == 1580


# ---------------------------------------------------------------------------------------------
# check_record / decode on bad input

def sample_records():
    return [
        codec.encode_record(topic="FooBar", body=b"Once, there was a chance for me!",
                            properties={"KEYS": "1700000000000", "TAGS": "TAG1"}),
        codec.encode_record(topic="%RETRY%" + "g" * 200, body=b"\x00" * 50,
                            born_host="[::1]:40009", store_host="[::2]:10911",
                            properties={"имя": "😀"}),
        codec.encode_record(topic="T", body=b""),
    ]


def test_blank_record_is_reported_with_its_size():
    blank = struct.pack(">iI", 4000, rr.BLANK_MAGIC)
    assert codec.check_record(blank + bytes(3992)) == ("blank", 4000)
    assert codec.check_record(struct.pack(">iI", 8, rr.BLANK_MAGIC)) == ("blank", 8)
    assert codec.decode(blank + bytes(3992)) is None


def test_blank_record_longer_than_the_rest_of_the_buffer_is_invalid():
    # a blank fills the rest of its file exactly; one claiming more is not a blank
    assert codec.check_record(struct.pack(">iI", 4000, rr.BLANK_MAGIC)) == ("invalid", -1)
    assert codec.check_record(struct.pack(">iI", 7, rr.BLANK_MAGIC) + bytes(8)) == ("invalid", -1)


def test_zero_bytes_are_not_a_record():
    assert codec.check_record(bytes(200)) == ("invalid", -1)
    assert codec.check_record(b"") == ("invalid", -1)
    with pytest.raises(ValueError):
        codec.decode(bytes(200))


@pytest.mark.parametrize("idx", range(3))
def test_every_prefix_of_a_record_is_invalid(idx):
    rec = sample_records()[idx]
    for n in range(len(rec)):
        prefix = rec[:n]
        assert codec.check_record(prefix, 0, True) == ("invalid", -1), n
        assert codec.check_record(prefix, 0, False) == ("invalid", -1), n
        with pytest.raises(ValueError):
            codec.decode(prefix)
    assert codec.check_record(rec) == ("msg", len(rec))


def test_tailing_reader_fed_one_byte_at_a_time_sees_nothing_partial():
    recs = sample_records()
    stream = b"".join(recs)
    buf = bytearray()
    pos = 0
    seen = []
    for b in stream:
        buf.append(b)
        while True:
            kind, size = codec.check_record(buf, pos)
            if kind != "msg":
                break
            seen.append(bytes(buf[pos:pos + size]))
            pos += size
    assert seen == recs
    assert pos == len(stream)


def test_bad_body_crc_is_invalid_only_when_checked():
    rec = bytearray(sample_records()[0])
    body_pos = 84 + 4
    rec[body_pos] ^= 0x01
    assert codec.check_record(bytes(rec), 0, True) == ("invalid", -1)
    assert codec.check_record(bytes(rec), 0, False) == ("msg", len(rec))
    with pytest.raises(ValueError):
        codec.decode(bytes(rec), check_crc=True)
    assert codec.decode(bytes(rec), check_crc=False) is not None
    # a wrong BODYCRC field, body intact
    rec = bytearray(sample_records()[0])
    struct.pack_into(">i", rec, 8, struct.unpack_from(">i", rec, 8)[0] ^ 0x10)
    assert codec.check_record(bytes(rec), 0, True) == ("invalid", -1)


def test_totalsize_larger_than_the_fields_is_minus_2():
    rec = sample_records()[0]
    longer = struct.pack(">i", len(rec) + 1) + rec[4:] + b"\x00"
    assert codec.check_record(longer) == ("invalid", -2)
    with pytest.raises(ValueError, match="TOTALSIZE"):
        codec.decode(longer)


def test_totalsize_smaller_than_the_fields_is_rejected():
    rec = sample_records()[0]
    shorter = struct.pack(">i", len(rec) - 1) + rec[4:-1]
    kind, code = codec.check_record(shorter)
    assert kind == "invalid" and code in (-1, -2)


def test_bad_magic_is_invalid():
    rec = bytearray(sample_records()[0])
    struct.pack_into(">I", rec, 4, 0xDEADBEEF)
    assert codec.check_record(bytes(rec)) == ("invalid", -1)


def test_single_byte_corruptions_never_crash_and_agree_with_reference(rand):
    """Differential fuzz: whatever the codec accepts, the oracle decodes to the same size."""
    for rec in sample_records():
        for _ in range(1500):
            buf = bytearray(rec)
            i = rand.randrange(len(buf))
            buf[i] = rand.randrange(256)
            buf = bytes(buf)
            kind, size = codec.check_record(buf, 0, True)
            try:
                ref = rr.decode_record(buf, 0)
            except ValueError:
                ref = None
            if kind == "msg":
                assert ref is not None and ref["kind"] == "msg", (i, buf[i])
                assert ref["total_size"] == size
                assert rr.body_crc(ref["body"]) == ref["body_crc"]
                codec.decode(buf, check_crc=True, raw=True)
            elif kind == "invalid":
                assert size in (-1, -2)
                if ref is not None and ref["kind"] == "msg":
                    # the oracle does not check CRCs, nor take NUL in the properties for a
                    # zeroed sector: the only accepted differences
                    assert rr.body_crc(ref["body"]) != ref["body_crc"] \
                        or b"\x00" in ref["properties_raw"], (i, buf[i])


def test_position_outside_buffer_raises_value_error():
    rec = sample_records()[0]
    with pytest.raises(ValueError):
        codec.check_record(rec, len(rec) + 1)
    with pytest.raises(ValueError):
        codec.check_record(rec, -1)
    with pytest.raises(ValueError):
        codec.decode(rec, len(rec) + 1)
    assert codec.check_record(rec, len(rec)) == ("invalid", -1)


# ---------------------------------------------------------------------------------------------
# hashes and CRCs

@pytest.mark.parametrize("s", [
    "", "a", "TagA", "TAG1", "Aa", "BB", "hello world", "x" * 1000,
    "Привет, мир", "Ёё", "中文标签", "日本語のタグ", "한국어",
    "😀", "emoji 😀🚀🎉 mix", "𝄞", "\U0010FFFF", "\x00\x7f\x80\u07ff\u0800\uffff",
    "\ud83d\ude00", "\ud800", "\udfff", "a\udc00b",
])
def test_java_hash_matches_reference(s):
    assert codec.java_hash(s) == rr.java_hash(s)


def test_java_hash_known_values():
    # values of java.lang.String.hashCode
    assert codec.java_hash("") == 0
    assert codec.java_hash("a") == 97
    assert codec.java_hash("Aa") == codec.java_hash("BB") == 2112
    assert codec.java_hash("hello") == 99162322
    assert codec.java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE


@HYP
@given(st.text())
def test_java_hash_matches_reference_for_random_unicode(s):
    assert codec.java_hash(s) == rr.java_hash(s)


@HYP
@given(st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
               | st.characters(min_codepoint=0x10000)))
def test_java_hash_matches_reference_for_surrogates_and_astral(s):
    assert codec.java_hash(s) == rr.java_hash(s)


@HYP
@given(st.binary(max_size=5000))
def test_body_crc_is_zlib_crc32_masked(b):
    assert codec.body_crc(b) == zlib.crc32(b) & 0x7FFFFFFF == rr.body_crc(b)
    assert codec.crc32(b) == zlib.crc32(b)


def test_body_crc_of_high_bit_crc_is_masked():
    # find a body whose zlib CRC has the top bit set: the mask must clear it
    i = 0
    while zlib.crc32(str(i).encode()) < 0x80000000:
        i += 1
    b = str(i).encode()
    assert codec.body_crc(b) == zlib.crc32(b) - 0x80000000
    assert codec.body_crc(bytearray(b)) == codec.body_crc(memoryview(b))


def test_crc32_continues_from_a_value():
    a, b = b"hello ", b"world"
    assert codec.crc32(b, codec.crc32(a)) == zlib.crc32(a + b)


def test_crc32_equals_zlib_at_every_length_alignment_and_start_value():
    # the folding CRC (>= 64 bytes) must agree with zlib wherever its 64- and 16-byte steps
    # and the tail split a buffer, from any start value (a continued CRC)
    data = memoryview(bytes(random.Random(11).randrange(256) for _ in range(700)))
    for start in (0, 1, 0xFFFFFFFF, 0x12345678):
        for off in range(0, 16, 3):
            for n in list(range(0, 260)) + [511, 512, 513, 640, 655]:
                piece = data[off:off + n]
                assert codec.crc32(piece, start) == zlib.crc32(piece, start), (start, off, n)
                assert codec.body_crc(piece) == zlib.crc32(piece) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# message ids (docs/format.md §7)

def test_msg_id_of_localhost_10911_offset_0():
    host = codec.encode_host("127.0.0.1:10911")
    assert host == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert codec.format_msg_id(host, 0) == "7F00000100002A9F0000000000000000"


def test_msg_id_ipv4_is_32_uppercase_hex(rand):
    for _ in range(200):
        hp = rand_host(rand, False)
        off = rand.randint(0, 2**63 - 1)
        mid = codec.format_msg_id(codec.encode_host(hp), off)
        assert re.fullmatch(r"[0-9A-F]{32}", mid)
        ip, port = norm_host(hp)
        assert mid == rr.offset_msg_id(str(ip), port, off)
        assert codec.decode_msg_id(mid) == (hp, off)


def test_msg_id_ipv6_is_56_uppercase_hex(rand):
    for _ in range(200):
        hp = rand_host(rand, True)
        off = rand.randint(0, 2**63 - 1)
        mid = codec.format_msg_id(codec.encode_host(hp), off)
        assert re.fullmatch(r"[0-9A-F]{56}", mid)
        ip, port = norm_host(hp)
        assert mid == rr.offset_msg_id(str(ip), port, off)
        host, off2 = codec.decode_msg_id(mid)
        assert off2 == off and norm_host(host) == (ip, port)


def test_decode_msg_id_accepts_lowercase():
    assert codec.decode_msg_id("7f00000100002a9f0000000000000400") == ("127.0.0.1:10911", 1024)


@pytest.mark.parametrize("bad", [
    "", "7F", "7F00000100002A9F000000000000000",       # 31
    "7F00000100002A9F00000000000000000",               # 33
    "7F00000100002A9F0000000000000000" + "00" * 6,     # 44
    "7F00000100002A9F000000000000000G",                # non-hex, 32 chars
    "Z" * 56,                                          # non-hex, 56 chars
    "7F00000100002A9F00000000000000é0",                # non-ASCII, 32 chars
])
def test_decode_msg_id_rejects_wrong_length_or_non_hex(bad):
    with pytest.raises(InvalidMessageIdError) as ei:
        codec.decode_msg_id(bad)
    assert isinstance(ei.value, ValueError)
    assert repr(bad) in str(ei.value)


@pytest.mark.parametrize("bad", [
    " " * 32,                                          # fromhex skips whitespace: 0 bytes
    " " * 56,                                          # 0 bytes
    "7F 00 00 01 00 00 2A 9F 00 00 00",                # 32 chars, 11 bytes
    "7F000001 00002A9F 00000000000000",                # 32 chars, 15 bytes
    "7F00000100002A9F" + "00" * 12 + " " * 16,         # 56 chars, 20 bytes
])
def test_decode_msg_id_rejects_whitespace_padded_ids(bad):
    """A 32/56-char string with spaces is not hex; it must not decode to fewer bytes.

    ``bytes.fromhex`` skips whitespace, so without a check these decode fewer than 16/28
    bytes and the host is read past the end of a short buffer.
    """
    assert len(bad) in (32, 56)
    with pytest.raises(InvalidMessageIdError):
        codec.decode_msg_id(bad)


@pytest.mark.parametrize("bad", [None, 123, b"7F00000100002A9F0000000000000000"])
def test_decode_msg_id_of_a_non_str_is_invalid_message_id(bad):
    with pytest.raises((InvalidMessageIdError, TypeError)):
        codec.decode_msg_id(bad)


def test_invalid_message_id_error_is_value_error_subclass():
    assert issubclass(InvalidMessageIdError, ValueError)


# ---------------------------------------------------------------------------------------------
# Message validation

BAD_MESSAGES = [
    # (kwargs, field named in the message, error class)
    (dict(topic="", body=b""), "topic", InvalidMessageError),
    (dict(topic="a b", body=b""), "topic", InvalidMessageError),
    (dict(topic="a/b", body=b""), "topic", InvalidMessageError),
    (dict(topic="тема", body=b""), "topic", InvalidMessageError),
    (dict(topic="t" * 128, body=b""), "topic", InvalidMessageError),
    (dict(topic="%RETRY%" + "g" * 249, body=b""), "topic", InvalidMessageError),
    (dict(topic="T", body=b"", tags="a\x01b"), "tags", InvalidMessageError),
    (dict(topic="T", body=b"", tags="a\x02b"), "tags", InvalidMessageError),
    (dict(topic="T", body=b"", keys="k\x01"), "keys", InvalidMessageError),
    (dict(topic="T", body=b"", keys="k\x02"), "keys", InvalidMessageError),
    (dict(topic="T", body=b"", keys=["ok", "k\x02"]), "keys", InvalidMessageError),
    (dict(topic="T", body=b"", keys=["has space"]), "keys", InvalidMessageError),
    (dict(topic="T", body=b"", properties={"n\x01": "v"}), "properties", InvalidMessageError),
    (dict(topic="T", body=b"", properties={"n\x02": "v"}), "properties", InvalidMessageError),
    (dict(topic="T", body=b"", properties={"n": "v\x01"}), "properties", InvalidMessageError),
    (dict(topic="T", body=b"", properties={"n": "v\x02"}), "properties", InvalidMessageError),
    (dict(topic="T", body=123), "body", InvalidMessageTypeError),
    (dict(topic="T", body="text"), "body", InvalidMessageTypeError),
    (dict(topic="T", body=None), "body", InvalidMessageTypeError),
    (dict(topic=b"T", body=b""), "topic", InvalidMessageTypeError),
    (dict(topic=None, body=b""), "topic", InvalidMessageTypeError),
    (dict(topic="T", body=b"", flag="1"), "flag", InvalidMessageTypeError),
    (dict(topic="T", body=b"", flag=1.0), "flag", InvalidMessageTypeError),
    (dict(topic="T", body=b"", flag=2**31), "flag", InvalidMessageError),
    (dict(topic="T", body=b"", properties=[("a", "b")]), "properties", InvalidMessageTypeError),
    (dict(topic="T", body=b"", properties={"a": 1}), "properties", InvalidMessageTypeError),
    (dict(topic="T", body=b"", properties={1: "a"}), "properties", InvalidMessageTypeError),
    (dict(topic="T", body=b"", tags=5), "tags", InvalidMessageTypeError),
    (dict(topic="T", body=b"", keys=5), "keys", InvalidMessageTypeError),
    (dict(topic="T", body=b"", delay_level=-1), "delay_level", InvalidMessageError),
    (dict(topic="T", body=b"", delay_level=2**31), "delay_level", InvalidMessageError),
    (dict(topic="T", body=b"", delay_level="3"), "delay_level", InvalidMessageTypeError),
    (dict(topic="T", body=b"", delay_level=True), "delay_level", InvalidMessageTypeError),
]


@pytest.mark.parametrize("kwargs,field,exc", BAD_MESSAGES,
                         ids=[f"{i}-{f}" for i, (_, f, _) in enumerate(BAD_MESSAGES)])
def test_bad_message_raises_naming_the_field(kwargs, field, exc):
    with pytest.raises(exc) as ei:
        codec.Message(**kwargs)
    assert field in str(ei.value)
    assert ei.value.field.startswith(field)
    # input errors are also the matching built-ins
    assert isinstance(ei.value, ValueError if exc is InvalidMessageError else TypeError)


def test_topic_length_limits_name_the_limit():
    with pytest.raises(InvalidMessageError) as ei:
        codec.Message("t" * 128, b"")
    assert ei.value.limit == 127 and "127" in str(ei.value)
    with pytest.raises(InvalidMessageError) as ei:
        codec.Message("%RETRY%" + "g" * 249, b"")
    assert ei.value.limit == 255 and "255" in str(ei.value)
    # and the longest accepted ones
    assert codec.Message("t" * 127, b"").topic == "t" * 127
    assert codec.Message("%RETRY%" + "g" * 248, b"").topic == "%RETRY%" + "g" * 248


def test_properties_over_32767_bytes_are_properties_size_exceeded():
    with pytest.raises(InvalidMessageError) as ei:
        codec.Message("T", b"", properties={"big": "x" * 40000})
    assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
    assert "properties" in str(ei.value)
    assert "PROPERTIES_SIZE_EXCEEDED" in str(ei.value)
    assert ei.value.limit == 32767


def test_properties_limit_counts_the_uniq_key_the_store_adds():
    # "a\x01" + value + "\x02" = n + 3 bytes; the store adds 42 bytes of UNIQ_KEY: n + 45 <= 32767
    ok = codec.Message("T", b"", properties={"a": "x" * 32722})
    assert ok.needs_uniq_key
    with pytest.raises(InvalidMessageError) as ei:
        codec.Message("T", b"", properties={"a": "x" * 32723})
    assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
    # with its own UNIQ_KEY the message gets none added: the same budget
    uniq = "0" * 32
    codec.Message("T", b"", properties={"UNIQ_KEY": uniq, "a": "x" * 32722})
    with pytest.raises(InvalidMessageError):
        codec.Message("T", b"", properties={"UNIQ_KEY": uniq, "a": "x" * 32723})


def test_properties_limit_counts_utf8_bytes_not_characters():
    # "é" is 2 bytes: 16362 of them = 32724 bytes + 3 + 42 > 32767
    with pytest.raises(InvalidMessageError) as ei:
        codec.Message("T", b"", properties={"a": "é" * 16362})
    assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
    codec.Message("T", b"", properties={"a": "é" * 16361})


def test_message_is_immutable_and_keeps_tags_keys_properties():
    m = codec.Message("T", bytearray(b"abc"), tags="TagA", keys=["k1", "k2"],
                      properties={"p": "v"}, flag=7)
    assert m.body == b"abc" and isinstance(m.body, bytes)
    assert m.tags == "TagA" and m.keys == ["k1", "k2"]
    assert m.properties == {"p": "v", "TAGS": "TagA", "KEYS": "k1 k2"}
    props = m.properties
    props["x"] = "y"
    assert "x" not in m.properties
    with pytest.raises(AttributeError):
        m.topic = "U"
    with pytest.raises(AttributeError):
        m.flag = 1


def test_delay_level_is_the_delay_property():
    m = codec.Message("T", b"x", tags="A", delay_level=3)
    assert m.delay_level == 3
    assert m.properties == {"TAGS": "A", "DELAY": "3"}
    # the explicit argument wins over a DELAY in properties, which is then not stored twice
    m = codec.Message("T", b"x", properties={"DELAY": "1", "p": "v"}, delay_level=4)
    assert m.delay_level == 4 and m.properties == {"p": "v", "DELAY": "4"}
    # 0 (the default) leaves the properties alone: no delay, or the one they carry
    assert codec.Message("T", b"x").delay_level == 0
    assert "DELAY" not in codec.Message("T", b"x", delay_level=0).properties
    assert codec.Message("T", b"x", properties={"DELAY": "2"}).delay_level == 2
    # survives pickling (a message handed to another process)
    assert pickle.loads(pickle.dumps(codec.Message("T", b"x", delay_level=5))).delay_level == 5


def test_message_rejects_host_sysflag_bits():
    for bit in (0x10, 0x20):
        with pytest.raises(InvalidMessageError) as ei:
            codec.Message("T", b"", sys_flag=bit)
        assert "sys_flag" in str(ei.value)


# ---------------------------------------------------------------------------------------------
# properties and UNIQ_KEY ids

def test_properties_round_trip_and_parse_rules():
    d = {"KEYS": "a b", "TAGS": "т", "名": "😀"}
    raw = codec.encode_properties(d)
    assert raw == rr.encode_properties(d)
    assert codec.parse_properties(raw) == d == rr.parse_properties(raw)
    # segments without a non-empty name and value are dropped; later duplicates win
    raw = b"\x01v\x02k\x01\x02ab\x02k\x011\x02k\x012"
    assert codec.parse_properties(raw) == rr.parse_properties(raw) == {"k": "2"}


def test_uniq_ids_are_32_uppercase_hex_and_distinct_over_100k():
    gen = codec.UniqIdGenerator()
    ids = [gen.next() for _ in range(100_000)]
    assert all(UNIQ_RE.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    # the fixed prefix is the IP (127.0.0.1 = 7F000001) then the pid
    assert ids[0].startswith("7F000001")
    assert ids[0][8:12] == f"{os.getpid() & 0xFFFF:04X}"


@pytest.mark.parametrize("topic", ["T", "x" * 200])
@pytest.mark.parametrize("born_host", ["1.2.3.4:5", "[::1]:9"])
def test_properties_bytes_are_the_stored_segment_verbatim(topic, born_host):
    # a 4.9.x string: no trailing \x02, writer's order; parsing and re-encoding would change both
    raw = b"WAIT\x01true\x02TAGS\x01d"
    rec = codec.encode_record(topic=topic, body=b"abc", properties_raw=raw, born_host=born_host,
                              store_host="[::2]:3")
    m = codec.decode(rec)
    assert m.properties_bytes == raw and m.properties == {"WAIT": "true", "TAGS": "d"}


def test_decode_all_reads_a_body_of_records_in_one_pass(rand):
    """``decode_all`` (a pull response's body): the messages ``decode`` reads record by
    record, a blank record ends them, a damaged record raises naming its position, and
    ``client=True`` hands them out as a consumer (msg_id is the UNIQ_KEY)."""
    fields = [rand_fields(rand) for _ in range(30)]
    for f in fields:
        f["sys_flag"] &= ~0x1                   # not compressed: bodies compared as they are
        f["properties"]["UNIQ_KEY"] = "%032X" % rand.getrandbits(128)
    recs = [codec.encode_record(**f) for f in fields]
    buf = b"".join(recs)
    got = codec.decode_all(buf)
    assert [m.encode() for m in got] == recs
    for m, f in zip(got, fields):
        assert_ext_equals(m, f)
    clients = codec.decode_all(buf, client=True)
    assert [m.msg_id for m in clients] == [f["properties"]["UNIQ_KEY"] for f in fields]
    assert codec.decode_all(b"") == []
    blank = struct.pack(">iI", 8, rr.BLANK_MAGIC)
    assert len(codec.decode_all(recs[0] + blank + recs[1])) == 1
    bad = bytearray(buf)
    bad[len(recs[0]) + 4] ^= 0xFF               # the second record's magic
    with pytest.raises(ValueError, match=f"position {len(recs[0])}"):
        codec.decode_all(bytes(bad))
