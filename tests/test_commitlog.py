"""CommitLog over small mapped files: placement, blank records, queue offsets, reads (docs/format.md §1).

Every placement rule is checked on the bytes on disk with struct and with the docs/format.md oracle
(tests/refreader.py); queue offsets against a dict model. Files are 4096 or 1024 bytes so that
rolls and blank records happen in every test.
"""
import os
import struct
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refreader as rr  # noqa: E402

from rocketstore.store import _codec as codec  # noqa: E402
from rocketstore.store._codec import Message  # noqa: E402
from rocketstore.store._commitlog import CommitLog  # noqa: E402
from rocketstore.errors import (  # noqa: E402
    InvalidMessageError, InvalidMessageTypeError, StoreClosedError,
)
from rocketstore.store.mapped_file_queue import MappedFileQueue  # noqa: E402
from rocketstore.store.status import PutMessageStatus  # noqa: E402

UNIQ_PROP_LEN = 42            # "UNIQ_KEY" \x01 <32 hex> \x02, added by the store
BLANK = struct.Struct(">iI")  # maxBlank, BLANK_MAGIC_CODE
STORE_HOST = "127.0.0.1:10911"


class Log:
    """A CommitLog over a MappedFileQueue in ``d``, plus helpers to read its files."""

    def __init__(self, d, file_size=4096, **kw):
        self.dir = d
        self.file_size = file_size
        self.queue = MappedFileQueue(d, file_size)
        self.log = CommitLog(self.queue, **kw)

    def reopen(self, **kw):
        self.close()
        self.queue = MappedFileQueue(self.dir, self.file_size)
        self.queue.load()
        self.log = CommitLog(self.queue, **kw)
        return self

    def close(self):
        self.log.close()
        self.queue.close()

    def file_bytes(self, start):
        with open(os.path.join(self.dir, "%020d" % start), "rb") as f:
            return f.read()

    def records(self):
        return list(rr.iter_commitlog(self.dir, self.file_size))


@pytest.fixture
def cl(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"))
    yield lg
    lg.close()


@pytest.fixture
def cl1k(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"), file_size=1024)
    yield lg
    lg.close()


def stored_size(msg):
    """TOTALSIZE of ``msg`` as the store writes it (UNIQ_KEY added when absent)."""
    props = codec.encode_properties(msg.properties)
    extra = UNIQ_PROP_LEN if "UNIQ_KEY" not in msg.properties else 0
    topic_len = len(msg.topic.encode())
    return rr.record_size(len(msg.body), topic_len, len(props) + extra, v2=topic_len > 127)


def msg_of_size(total, topic="T", **kw):
    """A Message whose stored record is exactly ``total`` bytes."""
    base = Message(topic, b"", **kw)
    body_len = total - stored_size(base)
    assert body_len >= 0, total
    m = Message(topic, b"\xAB" * body_len, **kw)
    assert stored_size(m) == total
    return m


# ---------------------------------------------------------------------------------------------
# placement and blank records (docs/format.md §1.6)

def test_record_filling_a_file_to_exactly_size_minus_8_stays_in_that_file(cl):
    first = cl.log.put_message(Message("T", b"first"))
    s1 = first.wrote_bytes
    assert s1 == stored_size(Message("T", b"first"))
    m = msg_of_size(4096 - 8 - s1)
    r = cl.log.put_message(m)
    assert r.ok and r.commitlog_offset == s1 and r.wrote_bytes == 4096 - 8 - s1
    assert len(cl.queue.files) == 1
    assert cl.queue.last_file().wrote_pos == 4088
    assert cl.log.get_max_offset() == 4088
    # the next record does not fit (it would leave < 8 bytes): a blank of 8 bytes closes the file
    nxt = cl.log.put_message(Message("T", b"next"))
    assert nxt.commitlog_offset == 4096
    f0 = cl.file_bytes(0)
    assert BLANK.unpack_from(f0, 4088) == (8, rr.BLANK_MAGIC)
    assert cl.queue.files[0].wrote_pos == 4096 and cl.queue.files[0].is_full()
    assert cl.log.get_message(s1).body.tobytes() == m.body


def test_record_one_byte_more_rolls_with_a_blank_record(cl):
    s1 = cl.log.put_message(Message("T", b"first")).wrote_bytes
    m = msg_of_size(4096 - 8 - s1 + 1)
    r = cl.log.put_message(m)
    assert r.ok
    assert r.commitlog_offset == 4096                     # next file's offset 0
    assert len(cl.queue.files) == 2
    f0 = cl.file_bytes(0)
    max_blank, magic = BLANK.unpack_from(f0, s1)
    assert (max_blank, magic) == (4096 - s1, 0xCBD43194)
    assert struct.unpack_from(">i", f0, s1 + 4)[0] == -875286124
    assert f0[s1 + 8:] == bytes(4096 - s1 - 8)            # the rest of the file stays zero
    f1 = cl.file_bytes(4096)
    assert struct.unpack_from(">i", f1, 0)[0] == r.wrote_bytes
    assert struct.unpack_from(">q", f1, 28)[0] == 4096     # PHYSICALOFFSET
    assert cl.log.get_max_offset() == 4096 + r.wrote_bytes
    # the oracle walks: msg, blank, msg, end
    kinds = [(n, pos, rec["kind"]) for n, pos, _, rec in cl.records()]
    assert kinds == [("%020d" % 0, 0, "msg"), ("%020d" % 0, s1, "blank"),
                     ("%020d" % 4096, 0, "msg"), ("%020d" % 4096, r.wrote_bytes, "end")]


def test_largest_record_fills_an_empty_file_to_size_minus_8(cl):
    r = cl.log.put_message(msg_of_size(4088))
    assert r.ok and r.commitlog_offset == 0
    r2 = cl.log.put_message(msg_of_size(4088))
    assert r2.commitlog_offset == 4096
    assert BLANK.unpack_from(cl.file_bytes(0), 4088) == (8, rr.BLANK_MAGIC)


def test_record_larger_than_a_file_minus_8_is_rejected_and_writes_nothing(cl):
    cl.log.put_message(Message("T", b"x"))
    before = cl.log.get_max_offset()
    with pytest.raises(InvalidMessageError) as ei:
        cl.log.put_message(msg_of_size(4089))
    assert ei.value.field == "record"
    assert "4096" in str(ei.value)
    assert cl.log.get_max_offset() == before
    assert len(cl.queue.files) == 1
    assert cl.log.get_queue_offset("T", 0) == 1


def test_next_record_after_an_exactly_full_file_starts_at_next_file_offset_0(cl1k):
    """A file filled to size-8 and then closed by a blank; many rolls in a row."""
    offsets = []
    for i in range(10):
        r = cl1k.log.put_message(msg_of_size(1024 - 8))
        offsets.append(r.commitlog_offset)
    assert offsets == [i * 1024 for i in range(10)]
    for i in range(9):
        assert BLANK.unpack_from(cl1k.file_bytes(i * 1024), 1016) == (8, rr.BLANK_MAGIC)


def test_batch_that_does_not_fit_moves_whole_to_the_next_file(cl):
    s1 = cl.log.put_message(Message("B", b"x" * 900)).wrote_bytes
    left = 4096 - s1
    batch = [msg_of_size(1100, "B") for _ in range(3)]      # 3300 > left - 8
    assert 3300 + 8 > left
    r = cl.log.put_messages(batch)
    assert r.ok and r.msg_count == 3
    assert r.commitlog_offsets == [4096, 4096 + 1100, 4096 + 2200]
    assert r.commitlog_offset == 4096 and r.wrote_bytes == 3300
    assert r.queue_offset == 1
    assert BLANK.unpack_from(cl.file_bytes(0), s1) == (left, rr.BLANK_MAGIC)
    got = [cl.log.get_message(o) for o in r.commitlog_offsets]
    assert [m.queue_offset for m in got] == [1, 2, 3]
    assert len({m.store_timestamp for m in got}) == 1
    ids = r.msg_id.split(",")
    assert ids == [rr.offset_msg_id("127.0.0.1", 10911, o) for o in r.commitlog_offsets]


def test_batch_that_fits_exactly_stays_in_the_file(cl):
    s1 = cl.log.put_message(Message("B", b"x" * 900)).wrote_bytes
    left = 4096 - s1
    sizes = [1000, 1000, left - 8 - 2000]
    r = cl.log.put_messages([msg_of_size(s, "B") for s in sizes])
    assert r.commitlog_offsets == [s1, s1 + 1000, s1 + 2000]
    assert cl.queue.last_file().wrote_pos == 4088
    assert len(cl.queue.files) == 1


def test_batch_larger_than_a_file_raises_and_writes_nothing(cl):
    cl.log.put_message(Message("B", b"seed"))
    before = cl.log.get_max_offset()
    files_before = sorted(os.listdir(cl.dir))
    batch = [msg_of_size(1500, "B") for _ in range(3)]
    with pytest.raises(InvalidMessageError) as ei:
        cl.log.put_messages(batch)
    assert ei.value.field == "msgs"
    assert cl.log.get_max_offset() == before
    assert sorted(os.listdir(cl.dir)) == files_before
    assert cl.log.get_queue_offset("B", 0) == 1
    assert cl.queue.last_file().read_bytes(before, 8) == bytes(8)   # no blank written


@pytest.mark.parametrize("bad", ["prepared", "rollback", "delay", "topic", "type", "empty"])
def test_invalid_batch_writes_nothing(cl, bad):
    good = Message("B", b"ok")
    other = {
        "prepared": Message("B", b"p", sys_flag=0x4),
        "rollback": Message("B", b"r", sys_flag=0xC),
        "delay": Message("B", b"d", properties={"DELAY": "3"}),
        "topic": Message("Other", b"o"),
        "type": b"not a message",
    }
    batch = [] if bad == "empty" else [good, other[bad]]
    with pytest.raises((InvalidMessageError, InvalidMessageTypeError)):
        cl.log.put_messages(batch)
    assert cl.log.get_max_offset() == 0
    assert cl.log.get_queue_offset("B", 0) == 0


# ---------------------------------------------------------------------------------------------
# queue offsets (docs/format.md §1.8 step 3)

def test_queue_offsets_are_dense_and_independent_per_topic_queue(cl1k, rand):
    model = {}
    for _ in range(300):
        topic = rand.choice(["TopicA", "TopicB", "%RETRY%g"])
        qid = rand.randrange(4)
        if rand.random() < 0.2:
            n = rand.randint(1, 4)
            r = cl1k.log.put_messages([Message(topic, b"b" * rand.randint(0, 30))
                                       for _ in range(n)], qid)
        else:
            n = 1
            r = cl1k.log.put_message(Message(topic, b"m" * rand.randint(0, 60)), qid)
        expect = model.get((topic, qid), 0)
        assert r.queue_offset == expect and r.queue_id == qid
        model[(topic, qid)] = expect + n
        assert cl1k.log.get_queue_offset(topic, qid) == expect + n
    assert cl1k.log.queue_offsets() == model
    assert cl1k.log.get_queue_offset("Unknown", 0) == 0
    assert cl1k.log.get_queue_offset("TopicA", 999) == 0
    # and on disk: per topic-queue the QUEUEOFFSETs are 0..n-1 in commit-log order
    seen = {}
    for _, _, _, rec in cl1k.records():
        if rec["kind"] == "msg":
            key = (rec["topic"], rec["queue_id"])
            assert rec["queue_offset"] == seen.get(key, 0)
            seen[key] = rec["queue_offset"] + 1
    assert seen == model


def test_prepared_and_rollback_take_queue_offset_0_and_do_not_advance(cl):
    assert cl.log.put_message(Message("Tx", b"n0")).queue_offset == 0
    assert cl.log.put_message(Message("Tx", b"n1")).queue_offset == 1
    prep = cl.log.put_message(Message("Tx", b"half", sys_flag=0x4))
    assert prep.ok and prep.queue_offset == 0
    assert cl.log.get_queue_offset("Tx", 0) == 2
    rb = cl.log.put_message(Message("Tx", b"rollback", sys_flag=0xC))
    assert rb.queue_offset == 0
    assert cl.log.get_queue_offset("Tx", 0) == 2
    commit = cl.log.put_message(Message("Tx", b"commit", sys_flag=0x8,
                                        prepared_transaction_offset=prep.commitlog_offset))
    assert commit.queue_offset == 2
    assert cl.log.get_queue_offset("Tx", 0) == 3
    assert cl.log.put_message(Message("Tx", b"n3")).queue_offset == 3
    # a prepared message on a queue that never had one still leaves it at 0
    cl.log.put_message(Message("Tx", b"half", sys_flag=0x4), 7)
    assert cl.log.get_queue_offset("Tx", 7) == 0
    assert ("Tx", 7) not in cl.log.queue_offsets()
    # on disk
    recs = {rec["body"]: rec for _, _, _, rec in cl.records() if rec["kind"] == "msg"}
    assert recs[b"half"]["queue_offset"] == 0 and recs[b"half"]["sys_flag"] & 0xC == 0x4
    assert recs[b"rollback"]["queue_offset"] == 0
    assert recs[b"commit"]["queue_offset"] == 2
    assert recs[b"commit"]["prepared_transaction_offset"] == prep.commitlog_offset


def test_negative_queue_id_is_rejected(cl):
    with pytest.raises(InvalidMessageError) as ei:
        cl.log.put_message(Message("T", b"x"), -1)
    assert "queue_id" in str(ei.value)
    with pytest.raises(InvalidMessageError):
        cl.log.put_messages([Message("T", b"x")], -1)
    assert cl.log.get_max_offset() == 0


# ---------------------------------------------------------------------------------------------
# size limits (docs/format.md §1.7)

def test_body_over_max_message_size_is_rejected_naming_body_and_limit(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"), max_message_size=1000)
    try:
        lg.log.put_message(Message("T", b"seed"))
        before = lg.log.get_max_offset()
        with pytest.raises(InvalidMessageError) as ei:
            lg.log.put_message(Message("T", b"x" * 1001))
        assert ei.value.field == "body"
        assert ei.value.limit == 1000
        assert "1000" in str(ei.value) and "body" in str(ei.value)
        assert "max_message_size" in str(ei.value)
        assert lg.log.get_max_offset() == before
        assert lg.log.get_queue_offset("T", 0) == 1
        with pytest.raises(InvalidMessageError) as ei:
            lg.log.put_messages([Message("T", b"ok"), Message("T", b"x" * 1001)])
        assert ei.value.field == "body"
        assert lg.log.get_max_offset() == before
        # exactly the limit is accepted
        r = lg.log.put_message(Message("T", b"y" * 1000))
        assert r.ok and r.queue_offset == 1
    finally:
        lg.close()


def test_properties_of_exactly_32767_bytes_with_uniq_key_are_stored(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"), file_size=64 * 1024)
    try:
        m = Message("T", b"b", properties={"a": "x" * 32722})
        r = lg.log.put_message(m)
        assert r.ok
        rec = rr.decode_record(lg.file_bytes(0), 0)
        assert len(rec["properties_raw"]) == 32767
        assert rec["properties"]["a"] == "x" * 32722
        assert len(rec["properties"]["UNIQ_KEY"]) == 32
    finally:
        lg.close()


# ---------------------------------------------------------------------------------------------
# reads

def test_get_message_returns_every_field_put(cl):
    m = Message("TopicA", b"hello", tags="TagA", keys=["k1", "k2"], properties={"p": "v"},
                flag=5, reconsume_times=2, born_timestamp=1234567890123,
                born_host="10.1.2.3:5555")
    r = cl.log.put_message(m, 3)
    got = cl.log.get_message(r.commitlog_offset)
    assert got.topic == "TopicA" and bytes(got.body) == b"hello"
    assert got.tags == "TagA" and got.keys == ["k1", "k2"]
    assert got.properties["p"] == "v"
    assert got.flag == 5 and got.reconsume_times == 2
    assert got.queue_id == 3 and got.queue_offset == 0
    assert got.commitlog_offset == r.commitlog_offset
    assert got.store_size == r.wrote_bytes == stored_size(m)
    assert got.born_timestamp == 1234567890123
    assert got.born_host == "10.1.2.3:5555"
    assert got.store_host == STORE_HOST
    assert got.store_timestamp == r.store_timestamp
    assert got.msg_id == r.msg_id == rr.offset_msg_id("127.0.0.1", 10911, r.commitlog_offset)
    assert len(got.uniq_key) == 32


def test_born_timestamp_defaults_to_the_store_timestamp(cl):
    r = cl.log.put_message(Message("T", b"x"))
    got = cl.log.get_message(r.commitlog_offset)
    assert got.born_timestamp == got.store_timestamp == r.store_timestamp
    assert got.born_host == "127.0.0.1:0"


def test_get_message_at_a_non_record_offset_is_none(cl):
    r1 = cl.log.put_message(Message("T", b"a" * 50))
    s1 = r1.wrote_bytes
    r2 = cl.log.put_message(msg_of_size(4096 - 8 - s1 + 1))     # rolls: blank at s1
    end = cl.log.get_max_offset()
    for off in [1, 4, 8, s1 - 1, s1, s1 + 4, 4095, 4097, r2.commitlog_offset + 28,
                end, end + 1, 10 * 4096, -1, -4096]:
        assert cl.log.get_message(off) is None, off
    assert cl.log.get_message(0) is not None
    assert cl.log.get_message(4096) is not None


def test_get_message_inside_a_record_whose_body_looks_like_a_record_is_none(cl):
    """A body holding a valid record image is not mistaken for a record start."""
    inner = codec.encode_record(topic="Fake", body=b"evil", physical_offset=12345)
    r = cl.log.put_message(Message("T", inner))
    body_pos = r.commitlog_offset + 84 + 4               # BODY starts at +88 (IPv4 hosts)
    assert cl.queue.last_file().read_bytes(body_pos, len(inner)) == inner
    assert codec.check_record(cl.queue.last_file().read_bytes(body_pos, len(inner))) == \
        ("msg", len(inner))
    assert cl.log.get_message(body_pos) is None


def test_iter_messages_across_many_files_returns_every_message_in_order(cl1k, rand):
    puts = []
    for i in range(300):
        body = rand.randbytes(rand.randint(0, 400))
        topic = rand.choice(["A", "B"])
        r = cl1k.log.put_message(Message(topic, body, tags=f"t{i}"), i % 3)
        puts.append((r.commitlog_offset, topic, body, i % 3, r.queue_offset))
    assert len(cl1k.queue.files) > 50
    got = list(cl1k.log.iter_messages())
    assert [(m.commitlog_offset, m.topic, bytes(m.body), m.queue_id, m.queue_offset)
            for m in got] == puts
    assert [m.tags for m in got] == [f"t{i}" for i in range(300)]
    # from the middle (a record start)
    mid = puts[150][0]
    assert [m.commitlog_offset for m in cl1k.log.iter_messages(mid)] == [p[0] for p in puts[150:]]
    # next_record walks the same chain, blanks included
    off, seen = 0, []
    while off >= 0:
        m, off = cl1k.log.next_record(off)
        if m is not None:
            seen.append(m.commitlog_offset)
    assert seen == [p[0] for p in puts]


def test_iter_messages_of_an_empty_log_is_empty(cl):
    assert list(cl.log.iter_messages()) == []
    assert cl.log.get_message(0) is None
    assert cl.log.get_max_offset() == 0


def test_every_byte_on_disk_matches_the_reference_reader(cl1k, rand):
    expected = {}
    for i in range(200):
        topic = rand.choice(["TopicA", "TopicB", "%RETRY%" + "g" * rand.randint(1, 150)])
        props = {"p": "ü" * rand.randint(1, 5)} if rand.random() < 0.5 else None
        keys = [f"key{i}", "ключ"] if rand.random() < 0.5 else None
        m = Message(topic, rand.randbytes(rand.randint(0, 300)), tags=rand.choice([None, "T1"]),
                    keys=keys, properties=props, flag=rand.randint(0, 100))
        if rand.random() < 0.2 and 2 * stored_size(m) + 8 <= 1024:
            r = cl1k.log.put_messages([m, m], rand.randrange(2))
            for k, off in enumerate(r.commitlog_offsets):
                expected[off] = (m, r.queue_id, r.queue_offset + k, r.store_timestamp)
        else:
            r = cl1k.log.put_message(m, rand.randrange(2))
            expected[r.commitlog_offset] = (m, r.queue_id, r.queue_offset, r.store_timestamp)
    uniq_keys = set()
    n_msgs = 0
    last_end = None
    prev_file_end_pos = {}
    for name, pos, phy, rec in cl1k.records():
        assert phy == int(name) + pos
        if rec["kind"] == "end":
            last_end = phy
            continue
        if rec["kind"] == "blank":
            assert rec["size"] == 1024 - pos
            prev_file_end_pos[name] = pos
            continue
        n_msgs += 1
        m, qid, qoff, ts = expected[phy]
        props = m.properties
        assert rec["topic"] == m.topic
        assert rec["body"] == m.body
        assert rec["body_crc"] == rr.body_crc(m.body)
        assert rec["queue_id"] == qid and rec["queue_offset"] == qoff
        assert rec["physical_offset"] == phy
        assert rec["flag"] == m.flag
        assert rec["sys_flag"] == 0
        assert rec["magic"] == (rr.MAGIC_V2 if len(m.topic) > 127 else rr.MAGIC_V1)
        assert rec["store_host"] == STORE_HOST
        assert rec["born_host"] == "127.0.0.1:0"
        assert rec["store_timestamp"] == ts == rec["born_timestamp"]
        assert rec["reconsume_times"] == 0 and rec["prepared_transaction_offset"] == 0
        # properties: the user's, then the UNIQ_KEY the store added, ending with \x02
        raw = rec["properties_raw"]
        assert raw.endswith(b"\x02")
        user = codec.encode_properties(props)
        assert raw[:len(user)] == user
        assert raw[len(user):len(user) + 9] == b"UNIQ_KEY\x01"
        assert len(raw) == len(user) + UNIQ_PROP_LEN
        uk = rec["properties"].pop("UNIQ_KEY")
        assert len(uk) == 32 and uk == uk.upper() and int(uk, 16) >= 0
        uniq_keys.add(uk)
        assert rec["properties"] == props
        assert rec["total_size"] == stored_size(m)
        # the codec agrees with the oracle on the same bytes
        got = cl1k.log.get_message(phy)
        assert got.uniq_key == uk and got.properties == dict(props, UNIQ_KEY=uk)
    assert n_msgs == len(expected)
    assert len(uniq_keys) == n_msgs                      # every message got its own id
    assert last_end == cl1k.log.get_max_offset()


def test_message_with_its_own_uniq_key_gets_no_second_one(cl):
    uk = "AC1100010000000000000000000000FF"
    m = Message("T", b"x", properties={"UNIQ_KEY": uk})
    r = cl.log.put_message(m)
    rec = rr.decode_record(cl.file_bytes(0), 0)
    assert rec["properties"] == {"UNIQ_KEY": uk}
    assert rec["total_size"] == r.wrote_bytes == rr.record_size(1, 1, len(b"UNIQ_KEY\x01" + uk.encode() + b"\x02"))
    assert cl.log.get_message(0).uniq_key == uk


def test_ipv6_store_host_sets_the_flag_and_a_56_char_msg_id(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"), store_host="[::1]:10911")
    try:
        r = lg.log.put_message(Message("T", b"v6", born_host="[fe80::2]:40009"))
        assert len(r.msg_id) == 56
        assert r.msg_id == rr.offset_msg_id("::1", 10911, 0)
        rec = rr.decode_record(lg.file_bytes(0), 0)
        assert rec["sys_flag"] & 0x30 == 0x30
        assert rec["store_host"] == "0:0:0:0:0:0:0:1:10911"
        assert rec["born_host"] == "fe80:0:0:0:0:0:0:2:40009"
        assert rec["total_size"] == r.wrote_bytes == rr.record_size(
            2, 1, UNIQ_PROP_LEN, born_v6=True, store_v6=True)
        got = lg.log.get_message(0)
        assert got.store_host == "[::1]:10911" and got.msg_id == r.msg_id
        assert codec.decode_msg_id(r.msg_id) == ("[::1]:10911", 0)
    finally:
        lg.close()


# ---------------------------------------------------------------------------------------------
# reopening

def test_scan_file_after_reopening_rebuilds_queue_offsets(cl1k, rand):
    for _ in range(150):
        topic = rand.choice(["A", "B"])
        sf = rand.choice([0, 0, 0, 0x4, 0x8, 0xC])
        cl1k.log.put_message(Message(topic, b"x" * rand.randint(0, 200), sys_flag=sf),
                             rand.randrange(3))
    want = cl1k.log.queue_offsets()
    max_off = cl1k.log.get_max_offset()
    n_files = len(cl1k.queue.files)
    cl1k.reopen()
    log = cl1k.log
    assert log.queue_offsets() == {}
    total = 0
    end = None
    for i, mf in enumerate(cl1k.queue.files):
        end_pos, count, blank = log.scan_file(mf, True)
        total += count
        if i < n_files - 1:
            assert blank and end_pos == 1024
        else:
            assert not blank
            end = mf.file_from_offset + end_pos
    assert total == 150
    assert end == max_off
    assert log.queue_offsets() == want
    # truncate to the recovered end and keep writing where the log left off
    cl1k.queue.truncate_dirty_files(end)
    log.reset_write_file()
    after = Message("A", b"after")
    r = log.put_message(after, 0)
    fits = 1024 - max_off % 1024 >= stored_size(after) + 8
    assert r.commitlog_offset == (max_off if fits else max_off - max_off % 1024 + 1024)
    assert r.queue_offset == want.get(("A", 0), 0)


def test_scan_file_skips_a_corrupt_record_followed_by_valid_ones(cl):
    offs = [cl.log.put_message(Message("T", b"body%d" % i)).commitlog_offset for i in range(5)]
    end = cl.log.get_max_offset()
    mf = cl.queue.last_file()
    mf.write_at(offs[3] + 88, b"X")                      # corrupt the 4th body
    cl.reopen()
    mf = cl.queue.last_file()
    # framing intact, a valid record after it: skipped (and reported), the log goes on
    assert cl.log.scan_file(mf, True) == (end, 4, False)
    assert cl.log.scan_file(mf, False)[1] == 5           # without CRC checks it is read
    assert cl.log.get_message(offs[3]) is None           # never handed out
    assert [m.commitlog_offset for m in cl.log.iter_messages()] == offs[:3] + offs[4:]


def test_scan_file_stops_at_a_corrupt_last_record(cl):
    offs = [cl.log.put_message(Message("T", b"body%d" % i)).commitlog_offset for i in range(5)]
    mf = cl.queue.last_file()
    mf.write_at(offs[4] + 88, b"X")                      # the last one: a torn tail
    cl.reopen()
    assert cl.log.scan_file(cl.queue.last_file(), True) == (offs[4], 4, False)


# ---------------------------------------------------------------------------------------------
# threads and lifecycle

def test_concurrent_puts_from_4_threads_give_dense_offsets_and_no_overlap(cl):
    n_threads, per_thread = 4, 150
    barrier = threading.Barrier(n_threads)

    def worker(t):
        barrier.wait()
        out = []
        for i in range(per_thread):
            body = b"%d-%d-" % (t, i) + b"z" * ((t * 7 + i) % 90)
            if i % 10 == 9:
                r = cl.log.put_messages([Message("C", body), Message("C", body)], 0)
                out += [(o, r.queue_offset + k, 0, body)
                        for k, o in enumerate(r.commitlog_offsets)]
            else:
                r = cl.log.put_message(Message("C", body), 0)
                out.append((r.commitlog_offset, r.queue_offset, 0, body))
            r = cl.log.put_message(Message("C", body), t + 1)     # a queue of its own
            out.append((r.commitlog_offset, r.queue_offset, t + 1, body))
        return out

    with ThreadPoolExecutor(n_threads) as ex:
        results = [f.result() for f in [ex.submit(worker, t) for t in range(n_threads)]]
    shared = sorted(q for res in results for (_, q, qid, _) in res if qid == 0)
    n_shared = n_threads * (per_thread + per_thread // 10)
    assert shared == list(range(n_shared))
    for t, res in enumerate(results):
        own = [q for (_, q, qid, _) in res if qid == t + 1]
        assert own == list(range(per_thread))              # in this thread's put order
    every = sorted(x for res in results for x in res)
    offsets = [o for o, _, _, _ in every]
    assert len(set(offsets)) == len(offsets)
    # no overlapping records, none straddling a file
    on_disk = {phy: rec for _, _, phy, rec in cl.records() if rec["kind"] == "msg"}
    assert sorted(on_disk) == offsets
    for (o, q, qid, body), nxt in zip(every, offsets[1:] + [None]):
        rec = on_disk[o]
        assert rec["body"] == body and rec["queue_id"] == qid and rec["queue_offset"] == q
        end = o + rec["total_size"]
        assert end // 4096 == o // 4096 or end % 4096 == 0
        if nxt is not None:
            assert end <= nxt


def test_put_after_close_raises_store_closed(cl):
    cl.log.put_message(Message("T", b"x"))
    cl.log.close()
    assert cl.log.closed
    with pytest.raises(StoreClosedError):
        cl.log.put_message(Message("T", b"y"))
    with pytest.raises(StoreClosedError):
        cl.log.put_messages([Message("T", b"y")])
    assert cl.log.get_max_offset() == stored_size(Message("T", b"x"))


def test_message_body_read_before_close_stays_readable_after_close(store_dir):
    lg = Log(os.path.join(store_dir, "commitlog"))
    r = lg.log.put_message(Message("T", b"pinned body"))
    got = lg.log.get_message(r.commitlog_offset)
    mf = lg.queue.last_file()
    lg.close()
    assert mf.is_mapped                                  # the body view pins the mapping
    assert bytes(got.body) == b"pinned body"
    assert bytes(got.copy().body) == b"pinned body"
    del got
    import gc
    gc.collect()
    assert not mf.is_mapped


def test_put_of_none_or_a_non_message_raises_type_error(cl):
    with pytest.raises(TypeError):
        cl.log.put_message(None)
    with pytest.raises(TypeError):
        cl.log.put_message(b"bytes")
    assert cl.log.get_max_offset() == 0


def test_put_result_status_fields(cl):
    r = cl.log.put_message(Message("T", b"x"), 2)
    assert r.status is PutMessageStatus.PUT_OK and r.ok and r.error is None
    assert r.msg_count == 1 and r.commitlog_offsets == [0]
    assert r.queue_id == 2


# ---------------------------------------------------------------------------------------------
# negative queue ids reaching the queue-offset table (run in a child: they corrupt memory)

def run_child(code, tmp_path):
    script = textwrap.dedent("""
        import os, resource, struct, sys
        # a regression that sizes a table by the queue id must fail here, not swap the host
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from rocketstore.store._codec import Message
        from rocketstore.store._commitlog import CommitLog
        from rocketstore.store.mapped_file_queue import MappedFileQueue
        d = sys.argv[1]
    """) + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=env)


def test_scan_file_of_a_record_with_a_negative_queue_id_does_not_crash(tmp_path):
    """QUEUEID is not covered by BODYCRC: a flipped sign bit must not crash recovery."""
    p = run_child("""
        q = MappedFileQueue(os.path.join(d, "cl"), 4096)
        log = CommitLog(q)
        log.put_message(Message("X", b"a"), 3)
        log.put_message(Message("X", b"b"), 3)
        mf = q.last_file()
        mf.write_at(12, struct.pack(">i", -1))        # QUEUEID of the first record
        log2 = CommitLog(q)
        end, count, blank = log2.scan_file(mf, True)
        offs = log2.queue_offsets()
        assert all(qid >= 0 for (_, qid) in offs), offs
        print("OK", end, count, blank, offs)
    """, tmp_path)
    assert p.returncode == 0 and "OK" in p.stdout, \
        f"child exited {p.returncode}: {p.stderr[-2000:]}"


def test_get_queue_offset_of_a_negative_queue_id_reads_no_memory_before_the_table(tmp_path):
    p = run_child("""
        q = MappedFileQueue(os.path.join(d, "cl"), 4096)
        log = CommitLog(q)
        log.put_message(Message("X", b"a"), 0)
        try:
            v = log.get_queue_offset("X", -1)
        except ValueError:
            v = 0
        assert v == 0, f"get_queue_offset('X', -1) returned {v}"
        print("OK")
    """, tmp_path)
    assert p.returncode == 0 and "OK" in p.stdout, \
        f"child exited {p.returncode}: {p.stderr[-2000:]}"


def test_set_queue_offset_of_a_negative_queue_id_is_refused(tmp_path):
    p = run_child("""
        import gc
        q = MappedFileQueue(os.path.join(d, "cl"), 4096)
        log = CommitLog(q)
        log.put_message(Message("X", b"a"), 0)
        try:
            log.set_queue_offset("X", -1, 0x4141414141414141)
        except ValueError:
            pass
        del log
        gc.collect()                                   # frees the table
        print("OK")
    """, tmp_path)
    assert p.returncode == 0 and "OK" in p.stdout, \
        f"child exited {p.returncode}: {p.stderr[-2000:]}"


def test_largest_queue_id_is_accepted_and_one_more_is_rejected(tmp_path):
    """QUEUEID is a Java int: 2**31-1 is valid and must not size any table by its value."""
    p = run_child("""
        from rocketstore.errors import InvalidMessageError
        q = MappedFileQueue(os.path.join(d, "cl"), 4096)
        log = CommitLog(q)
        top = 2**31 - 1
        assert log.put_message(Message("X", b"a"), top).queue_offset == 0
        assert log.put_message(Message("X", b"b"), top).queue_offset == 1
        assert log.put_messages([Message("X", b"c")] * 2, top).queue_offset == 2
        assert log.get_queue_offset("X", top) == 4
        assert log.queue_offsets() == {("X", top): 4}
        before = log.get_max_offset()
        for bad in (2**31, -1, -2**31):
            try:
                log.put_message(Message("X", b"z"), bad)
            except InvalidMessageError as e:
                assert "queue_id" in str(e), e
            else:
                raise AssertionError(f"queue id {bad} accepted")
        assert log.get_max_offset() == before
        # recovery sees the same offsets
        q.close()
        q2 = MappedFileQueue(os.path.join(d, "cl"), 4096)
        q2.load()
        log2 = CommitLog(q2)
        assert log2.scan_file(q2.files[0], True)[1] == 4
        assert log2.queue_offsets() == {("X", top): 4}
        print("OK")
    """, tmp_path)
    assert p.returncode == 0 and "OK" in p.stdout, \
        f"child exited {p.returncode}: {p.stderr[-2000:]}"


def test_queue_id_of_the_wrong_type_is_a_type_error(cl):
    for bad in ("1", 1.0, None, True):
        with pytest.raises(InvalidMessageTypeError):
            cl.log.put_message(Message("T", b"x"), bad)
    assert cl.log.get_max_offset() == 0
