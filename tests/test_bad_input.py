"""Bad input through the API and the command line (issue 16 item 8): each gets a
``rocketstore.errors`` class naming the value, and nothing already stored is lost."""
from __future__ import annotations

import json
import math
import os
import struct

import pytest

from conftest import corrupt
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import (CorruptionError, InvalidArgumentError, InvalidArgumentTypeError,
                                InvalidConfigError, InvalidMessageError, RocketStoreError)
from test_cli import run

CFG = StoreConfig(mapped_file_size_commit_log=64 * 1024)
BAD = "bad\udc80"               # a lone surrogate: what surrogateescape decoding leaves

# (case, call on an open store, error class, text the message must hold)
API = [
    ("topic surrogate", lambda s: Message("T\udc80", b"x"), InvalidMessageError, "topic="),
    ("tags surrogate", lambda s: Message("T", b"x", tags=BAD), InvalidMessageError, "tags="),
    ("keys surrogate", lambda s: Message("T", b"x", keys=[BAD]), InvalidMessageError, "keys="),
    ("property name surrogate", lambda s: Message("T", b"x", properties={BAD: "v"}),
     InvalidMessageError, "properties name="),
    ("property value surrogate", lambda s: Message("T", b"x", properties={"p": BAD}),
     InvalidMessageError, "properties['p']="),
    ("born_timestamp 2**63", lambda s: Message("T", b"x", born_timestamp=2**63),
     InvalidMessageError, "born_timestamp=9223372036854775808"),
    ("born_timestamp below a long", lambda s: Message("T", b"x", born_timestamp=-2**63 - 1),
     InvalidMessageError, "born_timestamp=-9223372036854775809"),
    ("prepared_transaction_offset 2**63",
     lambda s: Message("T", b"x", prepared_transaction_offset=2**63),
     InvalidMessageError, "prepared_transaction_offset=9223372036854775808"),
    ("look_message_by_offset 2**64", lambda s: s.look_message_by_offset(2**64),
     InvalidArgumentError, "commitlog_offset=18446744073709551616"),
    ("iter_messages 2**70", lambda s: s.iter_messages(2**70), InvalidArgumentError,
     f"from_offset={2**70}"),
    ("query_message end_ts 2**70", lambda s: s.query_message("T", "k", 8, 0, 2**70),
     InvalidArgumentError, f"end_ts={2**70}"),
    ("query_message begin_ts 2**70", lambda s: s.query_message("T", "k", 8, 2**70),
     InvalidArgumentError, f"begin_ts={2**70}"),
    ("get_offset_in_queue_by_time 2**70", lambda s: s.get_offset_in_queue_by_time("T", 0, 2**70),
     InvalidArgumentError, f"timestamp_ms={2**70}"),
    ("timeout_ms inf", lambda s: s.get_message("g", "T", 0, 1, timeout_ms=math.inf),
     InvalidArgumentError, "timeout_ms=inf"),
    ("timeout_ms nan", lambda s: s.get_message("g", "T", 0, 1, timeout_ms=math.nan),
     InvalidArgumentError, "timeout_ms=nan"),
    ("timeout_ms 1e300", lambda s: s.get_message("g", "T", 0, 1, timeout_ms=1e300),
     InvalidArgumentError, "timeout_ms=1e+300"),
    ("timeout_ms None", lambda s: s.get_message("g", "T", 0, 1, timeout_ms=None),
     InvalidArgumentTypeError, "timeout_ms: expected int or float"),
    ("timeout_ms '5'", lambda s: s.get_message("g", "T", 0, 1, timeout_ms="5"),
     InvalidArgumentTypeError, "got str"),
    ("commit_offset group surrogate", lambda s: s.commit_offset(BAD, "T", 0, 1),
     InvalidArgumentError, "group="),
    ("commit_offset topic surrogate", lambda s: s.commit_offset("g", "T\udc80", 0, 1),
     InvalidArgumentError, "topic="),
    ("commit_offset offset 2**70", lambda s: s.commit_offset("g", "T", 0, 2**70),
     InvalidArgumentError, f"offset={2**70}"),
    ("commit_offset queue id str", lambda s: s.commit_offset("g", "T", "0", 1),
     InvalidArgumentTypeError, "queue_id: expected int, got str"),
    ("commit_offset group None", lambda s: s.commit_offset(None, "T", 0, 1),
     InvalidArgumentTypeError, "group: expected str, got NoneType"),
    ("query_offset group surrogate", lambda s: s.query_offset(BAD, "T", 0),
     InvalidArgumentError, "group="),
    ("get_message_store_timestamp 2**70", lambda s: s.get_message_store_timestamp("T", 0, 2**70),
     InvalidArgumentError, "consume_queue_offset="),
    ("get_message_bodies max_msgs 0", lambda s: s.get_message_bodies("T", 0, 0, 0),
     InvalidMessageError, "max_msgs=0"),
]

CONFIGS = [
    ("max_hash_slot_num", 2**40), ("flush_consumer_offset_interval", 0),
    ("store_path_commit_log", 5), ("sync_flush_timeout", 2**70),
    ("mapped_file_size_consume_queue", 2**40), ("max_index_num", 2**40),
    ("flush_delay_offset_interval", -1), ("enabled_append_prop_crc", 1),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bad-input") / "store")
    with MessageStore.open(root, CFG) as s:
        r = s.put_message(Message("T", b"kept", keys=["k"]))
        assert s.wait_dispatched(10)        # its unit and key exist, as the cases expect
        s.commit_offset("g", "T", 0, 1)
        yield s, r
    # nothing stored was lost, the store closed cleanly and opens again
    assert not os.path.exists(os.path.join(root, "abort"))
    with MessageStore.open(root, CFG) as s:
        assert bytes(s.look_message_by_offset(r.commitlog_offset).body) == b"kept"
        assert s.query_offset("g", "T", 0) == 1


@pytest.mark.parametrize("case, call, cls, text", API, ids=[c[0] for c in API])
def test_api_bad_input_raises_a_rocketstore_error_naming_the_value(store, case, call, cls, text):
    s, r = store
    with pytest.raises(cls) as ei:
        out = call(s)
        if hasattr(out, "__next__"):
            next(out)
    assert isinstance(ei.value, RocketStoreError)
    assert text in str(ei.value), str(ei.value)
    assert bytes(s.look_message_by_offset(r.commitlog_offset).body) == b"kept"
    assert s.query_offset("g", "T", 0) == 1


@pytest.mark.parametrize("setting, value", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_config_values_that_would_fail_at_open_fail_at_construction(setting, value):
    with pytest.raises(InvalidConfigError) as ei:
        StoreConfig(**{setting: value})
    assert ei.value.setting == setting and str(value) in str(ei.value)


def test_a_corrupted_sysflag_is_a_corruption_not_a_missing_module(store_dir):
    cfg = CFG.replace(enabled_append_prop_crc=False)        # nothing but the body CRC
    with MessageStore.open(store_dir, cfg) as s:
        rs = [s.put_message(Message("T", b"plain body %d" % i)) for i in range(3)]
    path = os.path.join(store_dir, "commitlog", f"{0:020d}")
    for r, flag in zip(rs, (0x101, 0x201, 0x501)):       # LZ4, ZSTD, an undefined type
        corrupt(path, r.commitlog_offset + 36, struct.pack(">i", flag))
    with MessageStore.open(store_dir, cfg, read_only=True) as s:
        for r, kind in zip(rs, ("LZ4", "ZSTD", "compression type 5")):
            m = s.look_message_by_offset(r.commitlog_offset)
            with pytest.raises(CorruptionError) as ei:
                m.body
            assert kind in str(ei.value) and str(r.commitlog_offset) in str(ei.value)
            assert bytes(s.look_message_by_offset(r.commitlog_offset, raw=True).body) == \
                b"plain body %d" % rs.index(r)


# -- the command line ---------------------------------------------------------------------------

@pytest.fixture
def cli_store(store_dir):
    with MessageStore.open(store_dir, CFG) as s:
        s.put_message(Message("T", b"kept", keys=["k"]))
    return store_dir


def _jsonl(tmp_path, name: str, row: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(row) + "\n")
    return str(p)


CLI = [
    ("get --phy 10**23", lambda d, t: ["get", d, "--phy", str(10**23)],
     f"commitlog_offset={10**23}"),
    ("get offset 10**23", lambda d, t: ["get", d, "T", "0", str(10**23)], f"offset={10**23}"),
    ("query --begin huge", lambda d, t: ["query", d, "--topic", "T", "--key", "k",
                                         "--begin", str(10**20)], f"begin_ts={10**20}"),
    ("import body 123", lambda d, t: ["import", d, _jsonl(t, "a.jsonl", {"topic": "T", "body": 123})],
     "body is a int (123)"),
    ("import huge born_timestamp",
     lambda d, t: ["import", d, _jsonl(t, "b.jsonl", {"topic": "T", "body": "x",
                                                     "born_timestamp": 10**23})],
     f"born_timestamp={10**23}"),
    ("import surrogate tags",
     lambda d, t: ["import", d, _jsonl(t, "c.jsonl", {"topic": "T", "body": "x",
                                                     "tags": "a\udc80"})], "tags="),
    ("import topic ../x", lambda d, t: ["import", d, _jsonl(t, "d.jsonl", {"topic": "../x",
                                                                          "body": "x"})],
     "topic='../x'"),
]


@pytest.mark.parametrize("case, argv, text", CLI, ids=[c[0] for c in CLI])
def test_cli_bad_input_is_one_line_naming_the_value(cli_store, tmp_path, case, argv, text):
    proc = run(*argv(cli_store, tmp_path), check_rc=2)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    with MessageStore.open(cli_store, CFG, read_only=True) as s:
        assert [bytes(m.body) for m in s.iter_messages()] == [b"kept"]
