"""The broker's send path from the wire (issue 22): the properties string rewritten in bytes
as 4.9.8 stores it, the record written without a ``Message``; byte-identity with the records
RocketMQ 4.9.8 wrote, sent as raw frames to a real broker process."""
from __future__ import annotations

import json
import random
import string
import struct

import pytest

from test_broker_send import _client_props  # noqa: E402  (tests/test_broker_send.py)

from rocketstore import StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker import send as send_module
from rocketstore.broker.inner import java_properties
from rocketstore.common.protocol import ResponseCode, SendMessageResponse
from rocketstore.common.sends import WireSend
from rocketstore.errors import InvalidMessageError, RemotingProtocolError
from rocketstore.remoting import headers
from rocketstore.remoting._wire import json_header, stored_properties
from rocketstore.common.codes import LanguageCode
from rocketstore.remoting.command import (_LANGUAGE_NAMES, RemotingCommand, _decode_json_header,
                                          decode_frame)
from rocketstore.store._codec import parse_properties

import refreader
from brokering import offset_of
from rawwire import RawClient, frame
from servers import start_broker, start_namesrv

SEND_V2 = 310
CLUSTER = b"DefaultCluster"


def _map_path(props: bytes, cluster: str, uniq: str) -> tuple[bytes, bool]:
    """What the broker's map path stores for a client's properties string (and whether a
    sync flush waits): string2messageProperties, UNIQ_KEY when absent, CLUSTER, WAIT out."""
    user = parse_properties(props)
    if "UNIQ_KEY" not in user:
        user["UNIQ_KEY"] = uniq
    wait = user.get("WAIT")
    s, _ = java_properties(user, (("CLUSTER", cluster),), ("WAIT",) if wait is not None else ())
    return s.encode(), wait is None or wait.lower() == "true"


def test_stored_properties_is_the_java_map_path_for_any_key_set():
    """Random key sets (short keys collide in buckets; up to 45 keys grow the table to 64),
    duplicates, malformed segments, WAIT in any case, with and without UNIQ_KEY/CLUSTER."""
    rnd = random.Random(22)
    for _ in range(5000):
        keys = ["".join(rnd.choice(string.ascii_letters + "_") for _ in range(rnd.randint(1, 4)))
                for _ in range(rnd.randint(0, 40))]
        for extra, p in (("WAIT", .3), ("UNIQ_KEY", .5), ("CLUSTER", .1), ("TAGS", .5)):
            if rnd.random() < p:
                keys.append(extra)
        rnd.shuffle(keys)
        segs = [k + "\x01" + rnd.choice(["v", "true", "TRUE", "false", "x\x01y", ""]) for k in keys]
        if rnd.random() < .2:
            segs.insert(rnd.randint(0, len(segs)), rnd.choice(["junk", "\x01v", "", "k\x01"]))
        props = "\x02".join(segs) + rnd.choice(["", "\x02"])
        got = stored_properties(props.encode(), CLUSTER, lambda: "ABCDEF0123")
        assert got == _map_path(props.encode(), "DefaultCluster", "ABCDEF0123"), props


@pytest.mark.parametrize("props", [
    b"DELAY\x013\x02UNIQ_KEY\x01U", b"TRAN_MSG\x01true", b"REAL_TOPIC\x01T", b"REAL_QID\x011",
    b"TRAN_PREPARED_QUEUE_OFFSET\x011", b"TRANSACTION_CHECK_TIMES\x011", b"__CRC32#\x0112",
    "KEYS\x01caf\u00e9".encode(), b"KEYS\x01a\x00b",
    b"\x02".join(b"k%d\x01v" % i for i in range(70)),
])
def test_other_shapes_are_left_to_the_map_path(props):
    assert stored_properties(props, CLUSTER, lambda: "U") is None


def _wire(topic: str, props: str, body: bytes = b"b", **kw) -> WireSend:
    f = dict(producer_group="PG", topic=topic, default_topic="TBW102",
             default_topic_queue_nums=4, queue_id=1, sys_flag=0, born_timestamp=1700000000000,
             flag=0, properties=props, reconsume_times=0, max_reconsume_times=None,
             batch=False, body=body, born_host="10.0.0.1:5555")
    f.update(kw)
    return WireSend(**f)


def test_plain_send_builds_no_message_and_other_sends_do(store_dir, monkeypatch):
    """The common shape is stored from its bytes (the request is never turned into
    ``Message`` objects); a delayed send, a retry topic, a batch take the map path."""
    built: list[str] = []
    real = send_module.send_request

    def spy(w):
        built.append(w.topic)
        return real(w)
    monkeypatch.setattr(send_module, "send_request", spy)
    with Broker.open(store_dir, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20)) as b:
        r = b.send_wire(_wire("Plain", "TAGS\x01t\x02WAIT\x01true\x02UNIQ_KEY\x01U1")).result(10)
        assert r.code == ResponseCode.SUCCESS and (r.queue_id, r.queue_offset) == (1, 0)
        ext = b.store.look_message_by_offset(offset_of(r.msg_id))
        assert (ext.topic, ext.queue_id, ext.born_host, ext.born_timestamp, bytes(ext.body)) == \
            ("Plain", 1, "10.0.0.1:5555", 1700000000000, b"b")
        assert ext.properties == {"UNIQ_KEY": "U1", "CLUSTER": "DefaultCluster", "TAGS": "t"}
        assert built == []
        r = b.send_wire(_wire("Later", "DELAY\x012\x02UNIQ_KEY\x01U2")).result(10)
        assert r.code == ResponseCode.SUCCESS and built == ["Later"]
        # a client send naming a broker-only property is still refused (by the map path)
        r = b.send_wire(_wire("Plain", "REAL_TOPIC\x01Secret\x02UNIQ_KEY\x01U3")).result(10)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "REAL_TOPIC" in r.remark
        # a flag outside Java's int is the map path's to refuse
        with pytest.raises(InvalidMessageError, match="flag"):
            b.send_wire(_wire("Plain", "UNIQ_KEY\x01U4", flag=1 << 40))


def _client_string(rec_props: dict[str, str]) -> str:
    """The Java client's properties string for a fixture record (its map's order)."""
    return "\x02".join(f"{k}\x01{v}" for k, v in _client_props(rec_props).items())


def test_fixture_records_sent_as_raw_frames_are_stored_as_4_9_8_stored_them(tmp_path, fixture_root):
    """The 1,000 records RocketMQ 4.9.8 wrote, sent again as SEND_MESSAGE_V2 frames to a
    broker process: the stored properties bytes (order included), topic, queue, flags and
    body are 4.9.8's (delayed ones via the schedule topic, as there)."""
    recs = [rec for _, _, _, rec in refreader.iter_commitlog(str(fixture_root / "store" / "commitlog"))
            if rec["kind"] == "msg"]
    assert len(recs) == 1000
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    try:
        with RawClient(broker.addr) as c:
            for i, rec in enumerate(recs):
                props = rec["properties"]
                ext = {"a": "PG", "b": props.get("REAL_TOPIC", rec["topic"]), "c": "TBW102",
                       "d": 4, "e": int(props.get("REAL_QID", rec["queue_id"])),
                       "f": rec["sys_flag"] & ~0x30, "g": rec["born_timestamp"],
                       "h": rec["flag"], "i": _client_string(props),
                       "j": rec["reconsume_times"], "k": "false"}
                c.send(frame(SEND_V2, ext, rec["body"], opaque=i + 1))
            for i in range(len(recs)):
                h, _ = c.read_response()
                assert h["code"] == 0, h
    finally:
        assert broker.stop() == 0
        ns.stop()
    ours = [rec for _, _, _, rec in refreader.iter_commitlog(str(tmp_path / "store" / "commitlog"))
            if rec["kind"] == "msg"]
    assert len(ours) == 1000
    # the order of arrival is the order of the fixture
    for theirs, mine in zip(recs, ours):
        assert mine["properties_raw"] == theirs["properties_raw"], theirs["physical_offset"]
        assert (mine["topic"], mine["queue_id"]) == (theirs["topic"], theirs["queue_id"])
        assert mine["sys_flag"] & ~0x30 == theirs["sys_flag"] & ~0x30
        assert (mine["flag"], mine["reconsume_times"], mine["body"], mine["born_timestamp"]) == \
            (theirs["flag"], theirs["reconsume_times"], theirs["body"], theirs["born_timestamp"])


# -- headers read in place ---------------------------------------------------------------------

_HEADERS = [
    {"code": 310, "extFields": {"a": "PG", "b": "T", "d": 4, "i": "UNIQ_KEY\x01x\x02WAIT\x01true",
                                "k": False, "n": None}, "flag": 0, "language": "JAVA",
     "opaque": 12, "serializeTypeCurrentRPC": "JSON", "version": 395},
    {"code": 11, "language": "CPP", "version": 0, "opaque": -5, "flag": 2, "remark": "r\u00e9",
     "extFields": {}},
    {"code": 0, "remark": None, "extFields": None, "x": [1], "language": "PYTHON"},
    {"code": 1, "extFields": {"q": 1.5}},
    {"code": "310", "extFields": {}},
    {"code": 1, "opaque": 2 ** 31},
    {"code": 1, "extFields": {"k": "a\"b\\c\n\t\b\f\r/\u00e9\u4e2d\x00", "\x01": "x"}},
    {"code": 310, "remark": "\u00e9",
     "extFields": {"i": "KEYS\x01caf\u00e9\x02TAGS\x01\u4e2d\x02X\x01\U0001F600"}},
]


def _strict(h: bytes):
    try:
        c = _decode_json_header(h)
    except RemotingProtocolError:
        return "refused"
    return (c.code, c.opaque, c.flag, c.version, c.language, c.remark, c.ext_fields)


def test_headers_read_in_place_are_what_the_strict_reader_reads():
    """``_wire.json_header`` takes a subset of what the strict JSON reader takes and returns
    the same fields; it reads the common headers (escaped properties included) itself. Random
    byte damage (NaN, -0, 01, 1e5, bad UTF-8, surrogates, nesting ...) never makes it accept
    what the strict reader refuses."""
    rnd = random.Random(7)
    fast_reads = 0
    for doc in _HEADERS:
        for seps in ((",", ":"), (", ", ": ")):
            h = json.dumps(doc, separators=seps, ensure_ascii=rnd.random() < .5).encode()
            cases = [h, b"  " + h + b"\n"]
            for _ in range(1500):
                b = bytearray(h)
                i = rnd.randrange(len(b))
                op = rnd.random()
                if op < .4:
                    b[i] = rnd.randrange(256)
                elif op < .6:
                    del b[i]
                elif op < .8:
                    b.insert(i, rnd.choice(b'{}[]",:-0123456789 \\\x00\x01\xff\xc3tnfe.E'))
                else:
                    b[i:i] = rnd.choice([b"-0", b"01", b"1e5", b"NaN", b"Infinity", b"null",
                                         b"true", b'""', b"{}", b"\xed\xa0\x80", b"\\ud800"])
                cases.append(bytes(b))
            for c in cases:
                got = json_header(c)
                if got is None:
                    continue
                fast_reads += 1
                code, opaque, flag, version, lang, remark, ext = got
                language = LanguageCode.JAVA if lang is None else \
                    _LANGUAGE_NAMES.get(lang, LanguageCode.OTHER)
                assert _strict(c) == (code, opaque, flag, version, language, remark, ext), c
    assert fast_reads > 1000
    # what clients send is read in place: escaped \x01/\x02, non-ASCII raw or escaped
    for doc in (_HEADERS[0], _HEADERS[1], _HEADERS[6]):
        for ascii_only in (True, False):
            assert json_header(json.dumps(doc, ensure_ascii=ascii_only).encode()) is not None


@pytest.mark.parametrize("header", [
    b'{"code":1,"opaque":NaN}', b'{"code":1,"opaque":1e400}', b'{"code":1,"x":Infinity}',
    b'{"code":1,"extFields":{"a":"b"}} x', b'{"code":1,"extFields":{"a":{"b":"c"}}}',
    b'{"code":1,"x":' + b"[" * 5000 + b"]" * 5000 + b"}", b'{"code":1,"remark":"\xff"}',
    b'{"code":01}', b'{"code":1,"flag":"x"}', b'{"opaque":1}',
])
def test_malformed_headers_are_refused_naming_the_problem(header):
    # the fast reader leaves them to the strict one, which refuses each
    assert json_header(header) is None
    frame_bytes = struct.pack(">i", len(header)) + header
    with pytest.raises(RemotingProtocolError):
        decode_frame(frame_bytes)


@pytest.mark.parametrize("opaque", [77, 0, -5, 2**31 - 1, -2**31])
def test_send_answer_is_the_generic_encoding_byte_for_byte(opaque):
    cmd = RemotingCommand(310, opaque=opaque)
    for r in (SendMessageResponse(ResponseCode.SUCCESS, None, msg_id="7F00000100002A9F0000000000000000",
                                  queue_id=3, queue_offset=12),
              SendMessageResponse(ResponseCode.FLUSH_DISK_TIMEOUT, None, msg_id="A1,B2", queue_id=0,
                                  queue_offset=0),
              SendMessageResponse(ResponseCode.SLAVE_NOT_AVAILABLE, None, msg_id="", queue_id=1023,
                                  queue_offset=2**62 + 7)):
        fast = headers.encode_send_response(cmd, r)
        generic = cmd.response(int(r.code), None, {
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": r.msg_id,
            "queueId": r.queue_id, "queueOffset": r.queue_offset})
        assert fast.encode() == generic.encode()
        assert decode_frame(fast.encode()[4:]).ext_fields["msgId"] == r.msg_id


def _batch_body(entries: list[tuple[bytes, int, str]]) -> bytes:
    return headers.encode_batch_body(entries)


@pytest.mark.parametrize("extra, first_wait", [("WAIT\x01true", b"true"), ("", b"false")])
def test_batch_from_the_wire_is_stored_as_the_map_path_stores_it(tmp_path, monkeypatch, extra,
                                                                  first_wait):
    """A batch read and appended in one call each stores the bytes ``_send_batch`` stores:
    per entry its own map in Java order, then the batch's WAIT (its first entry's) and
    CLUSTER; flags, bodies, born time and host; malformed bodies refused the same way."""
    entries = [(b"body-%d" % i, i % 3, "\x02".join(
        [f"UNIQ_KEY\x01U{i:04d}", f"KEYS\x01k{i}", "TAGS\x01t"] + (["WAIT\x01false"] if i == 0 else [])
        + [f"p{j}\x01v" for j in range(i % 15)])) for i in range(40)]
    body = _batch_body(entries)
    records = []
    for path in ("map", "wire"):
        d = tmp_path / path
        with Broker.open(str(d), BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20)) as b:
            w = _wire("Batched", extra, body=body, batch=True)
            if path == "map":
                r = b.send_message(send_module.send_request(w)).result(10)
            else:
                monkeypatch.setattr(send_module, "send_request", None)   # must not be needed
                r = b.send_wire(w).result(10)
                monkeypatch.undo()
            assert r.code == ResponseCode.SUCCESS and r.queue_offset == 0, r
            offs = [offset_of(m) for m in r.msg_id.split(",")]
            assert len(offs) == 40
            records.append([(e.properties, e.flag, bytes(e.body), e.born_timestamp, e.born_host,
                             e.queue_id, e.queue_offset, e.sys_flag)
                            for e in (b.store.look_message_by_offset(o) for o in offs)])
    assert records[0] == records[1]
    raw = [refreader.iter_commitlog(str(tmp_path / p / "commitlog")) for p in ("map", "wire")]
    a = [rec["properties_raw"] for _, _, _, rec in raw[0] if rec["kind"] == "msg"]
    b_ = [rec["properties_raw"] for _, _, _, rec in raw[1] if rec["kind"] == "msg"]
    assert a == b_ and len(a) == 40
    # the header's properties (MessageBatch's WAIT) follow each entry's and win
    assert all(p.endswith(b"\x02CLUSTER\x01DefaultCluster\x02WAIT\x01" + first_wait) for p in a)


@pytest.mark.parametrize("body, why", [
    (b"\x00" * 10, "truncated entry"),
    (struct.pack(">iiiii", 10, 0, 0, 0, 1) + b"xx\x00\x00", "bad entry size"),
    (struct.pack(">iiiii", 24, 0, 0, 0, 1) + b"x" + struct.pack(">h", 9) + b"a", "bad properties length"),
])
def test_malformed_batch_bodies_are_refused_as_before(store_dir, body, why):
    with Broker.open(store_dir, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20)) as b:
        with pytest.raises(RemotingProtocolError, match=why):
            b.send_wire(_wire("Batched", "", body=body, batch=True))


def test_in_process_batch_takes_the_byte_path_and_stores_what_the_map_path_stores(tmp_path,
                                                                                  monkeypatch):
    """Producer.send_batch in process is encoded as a SEND_BATCH_MESSAGE body and stored by
    the wire's batch path (no Message or Java map per entry on the broker); every stored
    byte but the times equals the map path's (``_send_batch``), born time = store time."""
    from rocketstore import Message
    from rocketstore.client import Producer

    def batch() -> list:
        return [Message("Batched", b"body-%d" % i, tags="t" if i % 2 else None,
                        keys=[f"k{i}"] if i % 3 else None, flag=i % 4,
                        properties={**{f"p{j}": "v" for j in range(i % 7)},
                                    "WAIT": "false",
                                    "UNIQ_KEY": f"U{i:04d}"})
                for i in range(40)]
    stored = []
    for path in ("map", "bytes"):
        d = tmp_path / path
        calls = []
        real = send_module.SendMessageProcessor._batch_as_wire

        def spy(self, req, real=real, path=path, calls=calls):
            calls.append(path)
            return None if path == "map" else real(self, req)
        monkeypatch.setattr(send_module.SendMessageProcessor, "_batch_as_wire", spy)
        monkeypatch.setattr(send_module, "java_properties",
                            send_module.java_properties if path == "map" else None)
        with Broker.open(str(d), BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20)) as b:
            with Producer("pg", broker=b) as p:
                r = p.send_batch(batch())
            assert r.queue_offset == 0 and calls == [path]
            offs = [int(m[-16:], 16) for m in r.offset_msg_id.split(",")]
            got = [b.store.look_message_by_offset(o) for o in offs]
            assert all(e.born_timestamp == e.store_timestamp for e in got)
            stored.append([(e.properties, e.flag, bytes(e.body), e.born_host, e.queue_offset,
                            e.sys_flag) for e in got])
        monkeypatch.undo()
        raw = [rec["properties_raw"] for _, _, _, rec in
               refreader.iter_commitlog(str(d / "commitlog")) if rec["kind"] == "msg"]
        stored[-1].append(raw)
    assert stored[0] == stored[1] and len(stored[0]) == 41
