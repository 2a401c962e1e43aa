"""Damage never hides intact messages silently (issue 21 items 3 and 5).

Every intact message is either handed out (pulled through its queue, at its queue offset) or
its loss is reported: its commit-log offset, a damaged range holding it, or its unit is in
``bad_records()``. Stores are built, stopped, damaged in one place and opened again.
"""
from __future__ import annotations

import os
import re

import pytest

from conftest import corrupt
from rocketstore import Message, MessageStore, StoreConfig

CFG = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=50 * 20)
RANGE = re.compile(r"damaged range \[(\d+), (\d+)\)")
UNIT = re.compile(r"consume queue unit (.+)/(\d+)/(\d+):")


def _build(root: str, n: int = 600, queues: int = 2) -> list:
    """n messages over ``queues`` queues of topic T; (queue, result, body) of each."""
    put = []
    with MessageStore.open(root, CFG) as store:
        for i in range(n):
            body = b"m%04d-" % i + bytes([65 + i % 26]) * (120 + i % 50)
            r = store.put_message(Message("T", body, tags=f"t{i % 3}", keys=[f"k{i}"]), i % queues)
            assert r.ok
            put.append((i % queues, r, body))
        assert store.wait_dispatched(10)
    return put


def _pull_all(store, queues: int = 2) -> dict:
    """{commit-log offset: (queue, queue offset, body)} of everything the queues hand out."""
    got = {}
    for q in range(queues):
        off = store.get_min_offset_in_queue("T", q)
        for _ in range(10_000):
            r = store.get_message("g", "T", q, off, 32)
            for m in r.messages:
                got[m.commitlog_offset] = (q, m.queue_offset, bytes(m.body))
            if r.next_begin_offset <= off:
                break
            off = r.next_begin_offset
    return got


def _silently_lost(store, put, intact=lambda r: True) -> list:
    """Intact messages neither handed out nor reported."""
    got = _pull_all(store)
    bad = store.bad_records()
    offsets = {off for off, _ in bad}
    ranges = [(int(a), int(b)) for _, why in bad for a, b in RANGE.findall(why)]
    units = {(m.group(1), int(m.group(2)), int(m.group(3)))
             for _, why in bad for m in [UNIT.search(why)] if m}
    lost = []
    for q, r, body in put:
        phy = r.commitlog_offset
        if not intact(r):
            continue
        if got.get(phy) == (q, r.queue_offset, body):
            continue
        if phy in offsets or ("T", q, r.queue_offset) in units \
                or any(a <= phy < b for a, b in ranges):
            continue
        lost.append((q, r.queue_offset, phy))
    return lost


def _cq_file(root: str, q: int, index: int) -> tuple[str, int]:
    """Path of the consume-queue file holding unit ``index`` of T/q and the unit's position."""
    per_file = CFG.mapped_file_size_consume_queue // 20
    start = index - index % per_file
    return os.path.join(root, "consumequeue", "T", str(q), "%020d" % (start * 20)), \
        (index - start) * 20


def _abort(root: str) -> None:
    open(os.path.join(root, "abort"), "w").close()


def _checkpoint_at_last_file(root: str) -> None:
    """Move the checkpoint's flush times 10 s ahead, as if the store had run on a while
    after its last file began: abnormal recovery then re-dispatches the last file only
    (docs/format.md §8.4) and keeps the units before it, as in a long-running store."""
    import struct
    import time
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(struct.pack(">qq", int(time.time() * 1000) + 10_000, int(time.time() * 1000) + 10_000))


# -- item 5: a damaged consume-queue unit ------------------------------------------------------

@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("damage", ["offset-past-log", "zeroed", "offset-into-record"])
def test_damaged_unit_is_skipped_and_reported_and_the_queue_goes_on(tmp_path, damage, abort):
    root = str(tmp_path / "s")
    put = _build(root)
    q, victim = 0, 120               # unit 120 of T/0, in the middle of a consume-queue file
    path, pos = _cq_file(root, q, victim + 5)
    if damage == "offset-past-log":
        corrupt(path, pos, b"\x10")                    # the offset's top byte: far past the log
    elif damage == "zeroed":
        corrupt(path, pos, bytes(20))
    else:
        corrupt(path, pos + 7, b"\x33")                # the offset's low byte: inside a record
    if abort:
        _abort(root)
    with MessageStore.open(root, CFG) as store:
        got = _pull_all(store)
        # every other message of the queue is still handed out, in place
        mine = [(r.queue_offset, body) for qq, r, body in put if qq == q]
        handed = sorted((qo, b) for qq, qo, b in got.values() if qq == q)
        assert len(handed) >= len(mine) - 1
        assert [x for x in mine if x not in handed] in ([], [mine[victim + 5]])
        assert store.get_max_offset_in_queue("T", q) == len(mine)
        assert _silently_lost(store, put) == []


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
def test_negative_unit_offset_does_not_move_the_queue_min_past_valid_units(tmp_path, abort):
    """A unit whose offset turned negative sorts below the commit log's min: the binary
    search of correct_min_offset took units 0-2 for expired (OFFSET_TOO_SMALL for records
    that exist). It is skipped and reported; the min stays 0."""
    root = str(tmp_path / "s")
    put = _build(root)
    path, pos = _cq_file(root, 0, 3)
    corrupt(path, pos, b"\x90")
    if abort:
        _abort(root)
    with MessageStore.open(root, CFG) as store:
        assert store.get_min_offset_in_queue("T", 0) == 0
        got = _pull_all(store)
        assert all(r.commitlog_offset in got for q, r, _ in put if q == 0 and r.queue_offset != 3)
        assert _silently_lost(store, put) == []


# -- item 5: a zeroed page in the commit log ---------------------------------------------------

@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("which", ["older-file", "last-file"])
def test_zeroed_commit_log_page_is_skipped_reported_and_what_follows_kept(tmp_path, which, abort):
    root = str(tmp_path / "s")
    put = _build(root, n=900)
    cl = sorted(os.listdir(os.path.join(root, "commitlog")))
    assert len(cl) >= 3
    name = cl[0] if which == "older-file" else cl[-1]
    base = int(name)
    page = base + 8192                 # a page in the middle of the file, records on both sides
    last_end = max(r.commitlog_offset + r.wrote_bytes for _, r, _ in put)
    assert page + 4096 + 2000 < min(base + CFG.mapped_file_size_commit_log, last_end)
    corrupt(os.path.join(root, "commitlog", name), page - base, bytes(4096))

    def intact(r):
        return r.commitlog_offset + r.wrote_bytes <= page or r.commitlog_offset >= page + 4096

    after = [r for _, r, _ in put if r.commitlog_offset >= page + 4096 and
             r.commitlog_offset < base + CFG.mapped_file_size_commit_log]
    assert len(after) > 30
    if abort:
        _abort(root)
    with MessageStore.open(root, CFG) as store:
        assert _silently_lost(store, put, intact) == []
        got = _pull_all(store)
        # the intact records after the page are all there, in their queues
        assert all(r.commitlog_offset in got for r in after)
        assert store.get_max_phy_offset() == last_end
        if not abort and which == "older-file":
            return          # not scanned at a clean start: the readers reported each unit
        # the damage is reported as a range covering the page
        ranges = [(int(a), int(b)) for _, why in store.bad_records() for a, b in RANGE.findall(why)]
        assert any(a <= page + 100 and b >= page + 4096 for a, b in ranges), store.bad_records()
        # the store goes on writing after its real end
        nxt = store.put_message(Message("T", b"after"), 0)
        assert nxt.commitlog_offset == last_end


def test_torn_tail_is_still_a_torn_tail(tmp_path):
    """Zeros to the end of the written area after a torn record: truncated there, nothing
    reported as damage (no valid record follows it)."""
    root = str(tmp_path / "s")
    put = _build(root, n=300)
    last = put[-1][1]
    cl = sorted(os.listdir(os.path.join(root, "commitlog")))
    base = int(cl[-1])
    torn = put[-5][1].commitlog_offset
    assert torn >= base
    with open(os.path.join(root, "commitlog", cl[-1]), "r+b") as f:
        f.seek(torn - base + 30)
        f.write(bytes(last.commitlog_offset + last.wrote_bytes - torn - 30))
    _abort(root)
    with MessageStore.open(root, CFG) as store:
        assert store.get_max_phy_offset() == torn
        assert store.recovery["bytes_resynced"] == 0
        assert not [why for _, why in store.bad_records() if "damaged range" in why]
        assert store.put_message(Message("T", b"next"), 0).commitlog_offset == torn


# -- item 3: consume-queue files a cut during recovery left unwritten ----------------------------

@pytest.mark.parametrize("where", ["middle", "last"])
def test_zeroed_consume_queue_files_are_rebuilt_at_abnormal_recovery(tmp_path, where):
    """Re-dispatch created consume-queue files whose contents never reached the disk: files
    of zeros (whole, so they count as full) in the middle or at the end of a queue. Abnormal
    recovery checks every unit against the commit log and rebuilds from the first bad one:
    every message is reachable at its offset, the queue's min is not moved past them."""
    root = str(tmp_path / "s")
    put = _build(root, n=1200)
    qdir = os.path.join(root, "consumequeue", "T", "0")
    names = sorted(os.listdir(qdir))
    assert len(names) >= 8
    victims = names[2:5] if where == "middle" else names[-3:]
    for n in victims:
        with open(os.path.join(qdir, n), "r+b") as f:
            f.write(bytes(os.path.getsize(os.path.join(qdir, n))))
    _checkpoint_at_last_file(root)
    _abort(root)
    with MessageStore.open(root, CFG) as store:
        assert store.get_min_offset_in_queue("T", 0) == 0
        assert store.get_max_offset_in_queue("T", 0) == sum(1 for q, _, _ in put if q == 0)
        got = _pull_all(store)
        for q, r, body in put:
            assert got.get(r.commitlog_offset) == (q, r.queue_offset, body)
        assert store.recovery["files_scanned"] == 1
        assert store.recovery["queues_rebuilt"] == [f"T/0@{int(victims[0]) // 20}"]
    # and it was written to disk: a clean reopen finds the same
    with MessageStore.open(root, CFG) as store:
        assert len(_pull_all(store)) == len(put)


# -- item 6: damaged metadata does not stop the broker -----------------------------------------

LEVELS = "1s 2h"
BROKER_CONF = {"messageDelayLevel": LEVELS, "mappedFileSizeCommitLog": str(1 << 20),
               "flushConsumerOffsetInterval": "100000"}


@pytest.fixture
def namesrv(tmp_path):
    from servers import start_namesrv
    ns = start_namesrv(tmp_path)
    yield ns
    assert ns.stop() == 0


def _runtime_info(broker_addr: str) -> dict:
    from rocketstore.remoting.admin_client import AdminClient
    with AdminClient("127.0.0.1:1") as admin:
        return admin.broker_runtime_info(broker_addr)


def _delayed_store(root: str) -> tuple[int, int]:
    """A broker store with 5 delivered level-1 messages and 4 pending level-2 (2 h) ones;
    returns (delivered, pending)."""
    import time
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.common.protocol import SendMessageRequest
    cfg = StoreConfig(message_delay_level=LEVELS, mapped_file_size_commit_log=1 << 20,
                      enabled_append_prop_crc=False)
    with Broker.open(root, BrokerConfig(), cfg) as broker:
        for level, n in ((1, 5), (2, 4)):
            for i in range(n):
                msg = Message("DelayT", b"L%d-%d" % (level, i),
                              properties={"DELAY": str(level), "WAIT": "true"})
                resp = broker.send_message(SendMessageRequest("P", "DelayT", 0, [msg])).result(30)
                assert resp.code == 0, resp
        deadline = time.monotonic() + 30
        while broker.schedule_service.offsets().get(1) != 5:
            assert time.monotonic() < deadline, broker.schedule_service.offsets()
            time.sleep(0.02)
    return 5, 4


def test_broker_starts_on_a_damaged_delay_offset_file_and_rebuilds_progress(tmp_path, namesrv):
    """delayOffset.json unreadable and no .bak: the broker starts, each level's progress is
    rebuilt from what was delivered (level 1: 5, nothing delivered twice; level 2: 0, the
    pending ones not skipped) and the reset is reported in its runtime info."""
    from pathlib import Path
    from servers import start_broker
    root = tmp_path / "store"
    delivered, pending = _delayed_store(str(root))
    cfg_dir = root / "config"
    (cfg_dir / "delayOffset.json").write_text('{\n\t"offsetTable":{1:5,2:\x00\x00\n\t}\n}')
    for p in cfg_dir.glob("delayOffset.json.bak"):
        p.unlink()
    broker = start_broker(Path(root), namesrv.addr, BROKER_CONF)
    try:
        info = _runtime_info(broker.addr)
        assert "delayOffset.json" in info.get("metadataResets", ""), info
    finally:
        assert broker.stop() == 0
    assert "delayOffset.json" in broker.output          # the ERROR line
    from rocketstore.store.configfile import loads
    table = loads((cfg_dir / "delayOffset.json").read_text())["offsetTable"]
    assert table == {"1": delivered, "2": 0} or table == {1: delivered, 2: 0}
    assert (cfg_dir / "delayOffset.json.damaged").exists()
    with MessageStore.open(str(root), StoreConfig(message_delay_level=LEVELS,
                                                  mapped_file_size_commit_log=1 << 20)) as s:
        # every level-1 message reached its topic exactly once
        got = s.get_message("g", "DelayT", 0, 0, 32).messages
        assert sorted(bytes(m.body) for m in got) == [b"L1-%d" % i for i in range(delivered)]


def test_broker_starts_on_a_damaged_subscription_group_file(tmp_path, namesrv):
    from pathlib import Path
    from servers import start_broker
    root = tmp_path / "store"
    broker = start_broker(Path(root), namesrv.addr, BROKER_CONF)
    assert broker.stop() == 0
    cfg_dir = root / "config"
    (cfg_dir / "subscriptionGroup.json").write_text('{"subscriptionGroupTable":{"g1":{"groupN')
    for p in cfg_dir.glob("subscriptionGroup.json.bak"):
        p.unlink()
    broker = start_broker(Path(root), namesrv.addr, BROKER_CONF)
    try:
        info = _runtime_info(broker.addr)
        assert "subscriptionGroup.json" in info.get("metadataResets", ""), info
    finally:
        assert broker.stop() == 0
    assert (cfg_dir / "subscriptionGroup.json.damaged").exists()
    from rocketstore.store.configfile import loads
    loads((cfg_dir / "subscriptionGroup.json").read_text())     # readable again


def test_damaged_consumer_offsets_are_merged_with_the_backup_entry_by_entry(tmp_path, namesrv):
    """consumerOffset.json unparseable, .bak older: each topic@group/queue keeps the newest
    readable value (the damaged file's where its entry is intact, else .bak's); no entry of
    either copy is dropped; the merge is reported."""
    from pathlib import Path
    from servers import start_broker
    from rocketstore.store.configfile import loads
    root = tmp_path / "store"
    broker = start_broker(Path(root), namesrv.addr, BROKER_CONF)
    assert broker.stop() == 0
    cfg_dir = root / "config"
    # newer: A moved on, C is new, B's queue 1 is damaged; the document itself is cut short
    (cfg_dir / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"A@g":{0:50,1:60\n\t\t},\n\t\t"B@g":{0:9,1:1x\n\t\t},'
        '\n\t\t"C@g":{0:5\n\t\t},\n\t\t"D@g":{0:')
    (cfg_dir / "consumerOffset.json.bak").write_text(
        '{\n\t"offsetTable":{\n\t\t"A@g":{0:20,1:30\n\t\t},\n\t\t"B@g":{0:3,1:4\n\t\t},'
        '\n\t\t"E@g":{2:8\n\t\t}\n\t}\n}')
    broker = start_broker(Path(root), namesrv.addr, BROKER_CONF)
    try:
        info = _runtime_info(broker.addr)
        assert "consumerOffset.json" in info.get("metadataResets", ""), info
    finally:
        assert broker.stop() == 0
    table = loads((cfg_dir / "consumerOffset.json").read_text())["offsetTable"]
    table = {k: {int(q): v for q, v in qs.items()} for k, qs in table.items()}
    assert table == {"A@g": {0: 50, 1: 60}, "B@g": {0: 9, 1: 4}, "C@g": {0: 5},
                     "E@g": {2: 8}}


# -- item 5: a flipped TAGS byte in a broker-written record ---------------------------------------

@pytest.mark.parametrize("crc", [False, True], ids=["4.9.8-layout", "enabledAppendPropCRC"])
def test_flipped_tags_byte_of_a_broker_record(tmp_path, namesrv, crc):
    """The 4.9 layout has no CRC over TAGS (docs/durability.md): a flipped TAGS byte is
    handed out with the wrong tag. With ``enabledAppendPropCRC=true`` in broker.conf the
    broker writes RocketMQ 5.x's record CRC property: the record is skipped and reported."""
    from pathlib import Path
    from servers import start_broker
    from rocketstore.client import Message as ClientMessage, Producer
    root = tmp_path / "store"
    conf = dict(BROKER_CONF, enabledAppendPropCRC=str(crc).lower())
    broker = start_broker(Path(root), namesrv.addr, conf)
    try:
        with Producer("pg-crc", namesrv_addr=namesrv.addr) as p:
            for i in range(5):
                p.send(ClientMessage("CrcT", b"crc-%d" % i, tags="TagA"))
    finally:
        assert broker.stop() == 0
    cfg = StoreConfig(message_delay_level=LEVELS, mapped_file_size_commit_log=1 << 20)
    cl = root / "commitlog" / sorted(os.listdir(root / "commitlog"))[0]
    data = cl.read_bytes()
    at = data.index(b"TAGS\x01TagA")
    corrupt(str(cl), at + 5, b"X")                 # TagA -> XagA
    with MessageStore.open(str(root), cfg) as s:
        got = [m for q in range(8) for m in s.get_message("g", "CrcT", q, 0, 32).messages]
        tags = sorted(m.tags for m in got)
        if crc:
            assert tags == ["TagA"] * 4
            assert len(s.bad_records()) == 1
        else:
            assert tags == ["TagA"] * 4 + ["XagA"]      # what the 4.9 layout cannot catch
