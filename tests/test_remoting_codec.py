"""The remoting frame and command codec against the byte forms of docs/protocol.md §1 and §4."""
from __future__ import annotations

import json
import struct

import pytest

from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting import fastjson
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import (FLAG_ONEWAY, FLAG_RESPONSE, SERIALIZE_ROCKETMQ,
                                          FrameDecoder, RemotingCommand, decode_frame,
                                          encode_binary_header)


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def test_round_trip_keeps_every_field_and_writes_ext_values_as_strings():
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                  {"a": "T", "e": 3, "m": False, "z": None}, b"\x00body\xff")
    cmd.opaque = 77
    data = cmd.encode()
    (length, word) = struct.unpack_from(">ii", data)
    assert length == len(data) - 4 and word >> 24 == 0          # JSON, type byte 0
    header = json.loads(data[8:8 + (word & 0xFFFFFF)])
    # every extFields value a JSON string (the C++ client ignores others); None dropped
    assert header["extFields"] == {"a": "T", "e": "3", "m": "false"}
    assert header["language"] == "JAVA" and header["version"] == 409 and header["code"] == 310
    back = decode_frame(data[4:])
    assert (back.code, back.opaque, back.flag, back.ext_fields, back.body) == \
        (310, 77, 0, {"a": "T", "e": "3", "m": "false"}, b"\x00body\xff")
    assert back.remark is None


def test_cpp_style_header_with_numbers_newline_and_empty_remark():
    # what the C++ 1.2.x client sends: ints as JSON numbers, remark "", jsoncpp's trailing \n
    header = (b'{"code":10,"extFields":{"AccessKey":"","queueId":3,"sysFlag":0,"flag":0,'
              b'"bornTimestamp":"1700000000000","unitMode":"1","properties":"TAGS\\u0001A\\u0002"},'
              b'"flag":0,"language":"CPP","opaque":3,"remark":"","version":63}\n')
    cmd = decode_frame(frame(header, b"hi")[4:])
    assert cmd.language == LanguageCode.CPP and cmd.version == 63 and cmd.remark == ""
    assert cmd.int_field("queueId") == 3 and cmd.ext_fields["queueId"] == "3"
    assert cmd.ext_fields["properties"] == "TAGS\x01A\x02"
    assert cmd.int_field("bornTimestamp") == 1700000000000
    # Java's Boolean.parseBoolean: the C++ "1" reads as false, as a Java broker reads it
    assert cmd.bool_field("unitMode") is False
    assert cmd.body == b"hi" and not cmd.is_response and not cmd.is_oneway


def test_flags_classify_on_bit_zero_only():
    assert RemotingCommand(0, flag=FLAG_RESPONSE | FLAG_ONEWAY).is_response   # C++ replies: 3
    assert not RemotingCommand(0, flag=FLAG_RESPONSE | FLAG_ONEWAY).is_oneway
    assert RemotingCommand(0, flag=FLAG_ONEWAY).is_oneway


def test_field_rules():
    cmd = RemotingCommand(11, ext_fields={"n": "x12", "b": "TRUE", "e": ""})
    assert cmd.int_field("n", 5) == 5            # unparseable keeps the default, as Java does
    assert cmd.int_field("e", 7) == 7
    assert cmd.bool_field("b") is True and cmd.bool_field("absent", True) is True
    with pytest.raises(RemotingProtocolError, match=r"the custom field <topic> is null"):
        cmd.require("topic")
    with pytest.raises(RemotingProtocolError, match=r"<queueId>"):
        cmd.int_field("queueId", required=True)


def test_rocketmq_binary_header_decodes_with_4_9_8_rules():
    cmd = RemotingCommand(105, opaque=9, flag=0, remark="",
                          ext_fields={"topic": "TopicTest", "empty": ""},
                          language=LanguageCode.JAVA, version=409)
    hdr = encode_binary_header(cmd)
    back = decode_frame(frame(hdr, b"B", stype=SERIALIZE_ROCKETMQ)[4:])
    assert back.serialize_type == SERIALIZE_ROCKETMQ
    assert (back.code, back.opaque, back.version, back.language) == (105, 9, 409, LanguageCode.JAVA)
    # a zero-length remark and a zero-length value decode as absent (4.9.8)
    assert back.remark is None and back.ext_fields == {"topic": "TopicTest"}
    assert back.body == b"B"


@pytest.mark.parametrize("hdr, match", [
    (struct.pack(">hbhiii", 105, 0, 409, 1, 0, 1000) + b"x" * 8, "remark length"),
    (struct.pack(">hbhiii", 105, 0, 409, 1, 0, 0) + struct.pack(">i", 999), "extFields length"),
    (struct.pack(">hbhiii", 105, 0, 409, 1, 0, 0) + struct.pack(">i", 6) + struct.pack(">h", 40) + b"abcd",
     "key past"),
    (b"\x00\x01", "too short"),
])
def test_binary_header_lengths_past_the_header_are_refused(hdr, match):
    with pytest.raises(RemotingProtocolError, match=match):
        decode_frame(frame(hdr, stype=SERIALIZE_ROCKETMQ)[4:])


def test_frames_split_across_any_chunk_boundary():
    cmds = [RemotingCommand.request(34, {"i": i}, b"x" * i) for i in range(5)]
    stream = b"".join(c.encode() for c in cmds)
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):                 # one byte at a time
        got += dec.feed(stream[i:i + 1])
    assert [c.ext_fields["i"] for c in got] == ["0", "1", "2", "3", "4"]
    assert [len(c.body) for c in got] == [0, 1, 2, 3, 4] and dec.buffered == 0
    dec2 = FrameDecoder()
    assert len(dec2.feed(stream)) == 5            # all in one chunk
    half = cmds[0].encode()[:10]
    assert FrameDecoder().feed(half) == []        # half a frame waits


def _fields(c: RemotingCommand) -> tuple:
    return (c.code, c.opaque, c.flag, c.remark, c.ext_fields, bytes(c.body), c.language,
            c.version, c.serialize_type)


def test_the_cython_splitter_decodes_every_frame_as_decode_frame_does():
    """FrameDecoder.feed splits and reads the common JSON header in Cython
    (``_wire.split_frames``); every field of every command equals ``decode_frame``'s, for the
    common shape, the other JSON shapes and binary headers, whole or byte by byte."""
    frames = [
        RemotingCommand.request(310, {"a": "pg", "b": "T", "g": 1700000000000}, b"body").encode(),
        frame(b'{"code":11,"language":"CPP","version":317,"opaque":7,"flag":0,'
              b'"remark":"r","extFields":{"x":"1","y":null}}', b"\x00\x01"),
        frame(b'{"code":34,"language":"PYTHON","opaque":8,"flag":2}'),
        frame(b'{"code":35,"language":"NO_SUCH_LANGUAGE","opaque":9,"extFields":{}}'),
        frame(b'{"code": "36", "opaque": 10}'),          # text number: the strict reader
        frame(encode_binary_header(RemotingCommand.request(37, {"k": "v"}, b"")),
              b"bin", stype=SERIALIZE_ROCKETMQ),
        frame(b'{"code":38,"remark":"\\u00e9t\\u00e9","extFields":{"k\\"":"v\\n"}}'),
    ]
    want = [_fields(decode_frame(f[4:])) for f in frames]
    stream = b"".join(frames)
    assert [_fields(c) for c in FrameDecoder().feed(stream)] == want
    dec, got = FrameDecoder(), []
    for i in range(len(stream)):
        got += dec.feed(stream[i:i + 1])
    assert [_fields(c) for c in got] == want and dec.buffered == 0


@pytest.mark.parametrize("data, match", [
    (struct.pack(">i", -5) + b"zzzz", "frame length -5"),
    (struct.pack(">i", 2) + b"zz", "frame length 2"),
    (struct.pack(">i", 16 * 1024 * 1024), "frame length"),
    (struct.pack(">ii", 8, 100) + b"{}{}", "header length 100"),
    (frame(b"not json"), "not JSON"),
    (frame(b"[1,2]"), "not a JSON object"),
    (frame(b'{"code":"x"}'), "not a number"),
    (frame(b'{"opaque":1}'), "missing"),
    (frame(b'{"code":1,"extFields":[1]}'), "extFields"),
    (frame(b"{}", stype=7), "serialize type 7"),
    (frame(b'\xff\xfe'), "not JSON"),
])
def test_malformed_frames_raise_a_protocol_error(data, match):
    with pytest.raises(RemotingProtocolError, match=match):
        FrameDecoder().feed(data)


def test_response_keeps_the_request_opaque():
    req = RemotingCommand(105, opaque=4242)
    resp = req.response(17, "no route", {"x": 1})
    assert resp.opaque == 4242 and resp.is_response and resp.ext_fields == {"x": "1"}
    assert decode_frame(resp.encode()[4:]).remark == "no route"


def test_fastjson_reads_java_forms():
    assert fastjson.loads('{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}') == \
        {"brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}}
    doc = fastjson.loads('{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:5,'
                         '{"brokerName":"b","queueId":1,"topic":"t"}:-1}}')
    assert sorted(fastjson.mq_key(k) for k in doc["offsetTable"]) == [("t", "b", 0), ("t", "b", 1)]
    assert sorted(doc["offsetTable"].values()) == [-1, 5]
    assert fastjson.loads(b'{"a":[1,2.5,true,null,"s\\u0001"]}') == {"a": [1, 2.5, True, None, "s\x01"]}
    assert fastjson.loads(fastjson.dumps_int_keys({0: {"x": [1]}, "k": 2})) == {0: {"x": [1]}, "k": 2}
    assert fastjson.dumps_int_keys({0: "a"}) == '{0:"a"}'


@pytest.mark.parametrize("text", ['{0:}', '{"a" 1}', '[1,', '{"a":1} x', '{', 'nul'])
def test_fastjson_refuses_garbage_with_a_protocol_error(text):
    with pytest.raises(RemotingProtocolError, match="not JSON at character"):
        fastjson.loads(text)


@pytest.mark.parametrize("text, want", [
    ("1700000000000", 1700000000000), ("-1", -1), ("", 0), ("-0", 0), ("007", 7),
    ("9223372036854775807", 9223372036854775807),
    ("-9223372036854775808", -9223372036854775808),
    (" 12", 12), ("1_0", 10), ("+3", 3),          # what Python's int() takes: the strict path
    ("9223372036854775808", "outside Java's long range"),
    ("-9223372036854775809", "outside Java's long range"),
    ("12x", "not a number"), ("-", "not a number"),
])
def test_send_header_numbers_read_in_c_as_the_strict_reader_does(text, want):
    """decode_send_wire reads plain decimal header numbers in C (``_wire.send_header``) and
    hands every other text to the Python reader: both give the same values and errors."""
    from rocketstore.remoting.headers import decode_send_wire
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": text,
           "h": "0", "i": "K\x01v\x02", "j": "2", "l": "5", "m": "false"}
    cmd = RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), ext_fields=ext, body=b"b")
    if isinstance(want, str):
        with pytest.raises(RemotingProtocolError, match=want):
            decode_send_wire(cmd, "1.2.3.4:5")
        return
    w = decode_send_wire(cmd, "1.2.3.4:5")
    assert (w.producer_group, w.topic, w.default_topic, w.default_topic_queue_nums, w.queue_id,
            w.sys_flag, w.born_timestamp, w.flag, w.properties, w.reconsume_times,
            w.max_reconsume_times, w.batch, w.body, w.born_host) == \
        ("pg", "T", "TBW102", 4, 1, 0, want, 0, "K\x01v\x02", 2, 5, False, b"b", "1.2.3.4:5")


def test_the_tcp_clients_batch_body_in_c_equals_the_entry_by_entry_encoding():
    """``send_batch`` over TCP builds its SEND_BATCH_MESSAGE body in one C pass
    (``batch_body``); it is byte for byte what the entry-by-entry encoder writes, which the
    fixture tests hold to 4.9.8's ``MessageDecoder.encodeMessages``."""
    from rocketstore.client.sending import stamp
    from rocketstore.common import Message
    from rocketstore.client.tcp import properties_string
    from rocketstore.remoting.headers import encode_batch_body
    from rocketstore.store._codec import batch_body, encode_properties
    msgs = [Message("T", b"body %d" % i, tags="tag", keys=["k1", "k2"],
                    properties={"x": "1", "zz": "\u00e9t\u00e9", "WAIT": "false"}, flag=i)
            for i in range(5)] + [Message("T", b"q"), Message("T", b"\x00" * 300, keys="one")]
    stamped, _ = stamp(msgs)
    for batch in (msgs, stamped):
        assert [properties_string(m) for m in batch] == \
            [encode_properties(m.properties).decode() for m in batch]
        assert batch_body(batch) == encode_batch_body(
            [(bytes(m.body), m.flag, properties_string(m)) for m in batch])


def test_headers_written_in_c_are_what_the_json_module_writes():
    """``header_json`` writes a text-only header in C; the bytes are json.dumps' (separators
    without spaces, non-ASCII kept) for every character class a field may hold: control
    characters (the properties' \\x01/\\x02), quotes, backslashes, non-ASCII, astral."""
    import json
    import random
    from rocketstore.remoting._wire import encode_header
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    rnd = random.Random(7)
    alphabet = [chr(c) for c in range(0, 0x80)] + ["\u00e9", "\u4e2d", "\U0001F600", "\u2028"]
    for i in range(300):
        ext = {"".join(rnd.choices(alphabet, k=rnd.randrange(1, 6))):
               "".join(rnd.choices(alphabet, k=rnd.randrange(0, 40))) for _ in range(rnd.randrange(0, 8))}
        remark = None if i % 3 else "".join(rnd.choices(alphabet, k=rnd.randrange(0, 20)))
        cmd = RemotingCommand(rnd.randrange(0, 400), opaque=rnd.randrange(0, 1 << 31),
                              flag=rnd.randrange(0, 4), remark=remark, ext_fields=ext)
        want = {"code": cmd.code, "extFields": ext, "flag": cmd.flag, "language": "JAVA",
                "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
        if remark is not None:
            want["remark"] = remark
        assert cmd.header_json() == dumps(want).encode()
        assert encode_header(cmd.code, ext, cmd.flag, "JAVA", cmd.opaque, cmd.version,
                             remark) == dumps(want).encode()
    # a field that is not text is left to the json module (a number stays a JSON number)
    assert encode_header(10, {"a": 1}, 0, "JAVA", 1, 1, None) is None
    assert RemotingCommand(10, ext_fields={"a": 1}).header_json().startswith(
        b'{"code":10,"extFields":{"a":1},')


def test_a_damaged_pull_body_is_a_protocol_error_naming_the_record():
    """``decode_records`` (every wire reader's decoding of a pull/view/query body): stored
    records come back as messages (from a memoryview too); a damaged record fails as
    a protocol error naming its position, not a ValueError from the codec."""
    from rocketstore.remoting.records import decode_records
    from rocketstore.store._codec import encode_record
    recs = [encode_record(topic="T", body=b"body%d" % i, queue_offset=i,
                          physical_offset=100 * i, properties={"UNIQ_KEY": "%032X" % i})
            for i in range(3)]
    body = b"".join(recs)
    msgs = decode_records(memoryview(body), client=True)
    assert [bytes(m.body) for m in msgs] == [b"body0", b"body1", b"body2"]
    assert [m.msg_id for m in msgs] == ["%032X" % i for i in range(3)]
    bad = bytearray(body)
    bad[len(recs[0]) + 4] ^= 0xFF                         # the second record's magic
    with pytest.raises(RemotingProtocolError, match=f"pull body: .*position {len(recs[0])}"):
        decode_records(bytes(bad))
