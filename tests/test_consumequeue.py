"""ConsumeQueue (docs/format.md §5): units on disk, file rolling, fillers, idempotent writes, gaps,
recovery, truncation and the min offset.

Unit bytes are checked with ``struct`` against docs/format.md §5.1 (``>qiq``: commit-log offset,
size, tags code), never with rocketstore's own reader. Most tests use files of 5 units
(100 bytes) so every test rolls files; unit ``i`` stands for a record at commit-log offset
``1000 + 100 * i`` of 100 bytes unless a test says otherwise.
"""
from __future__ import annotations

import os
import struct

import pytest

from conftest import corrupt
from rocketstore import GetMessageStatus, Message, MessageStore, StoreConfig
from rocketstore.store._consumequeue import ConsumeQueue

UNIT = struct.Struct(">qiq")        # docs/format.md §5.1: offset 8, size 4, tags code 8
UNIT_SIZE = 20
FILLER_SIZE = 0x7FFFFFFF
PER_FILE = 5
FILE_SIZE = PER_FILE * UNIT_SIZE    # 100 bytes: 5 units per file
TOPIC = "TopicCQ"


def _name(offset: int) -> str:
    return "%020d" % offset


def _phy(i: int) -> int:
    return 1000 + 100 * i


def _tags(i: int) -> int:
    return (-1) ** i * (i * 7919 + 1)          # negative ones too: sign-extended 64-bit


def _root(tmp_path) -> str:
    return str(tmp_path / "consumequeue")


def _qdir(tmp_path, topic: str = TOPIC, qid: int = 0) -> str:
    return os.path.join(_root(tmp_path), topic, str(qid))


def _open(tmp_path, file_size: int = FILE_SIZE, topic: str = TOPIC, qid: int = 0) -> ConsumeQueue:
    cq = ConsumeQueue(_root(tmp_path), topic, qid, file_size)
    cq.load()
    cq.recover()
    return cq


def _put(cq: ConsumeQueue, i: int, phy: int | None = None, size: int = 100, tags: int | None = None):
    return cq.put_message_position_info(_phy(i) if phy is None else phy, size,
                                        _tags(i) if tags is None else tags, i, 0)


def _files(tmp_path, topic: str = TOPIC, qid: int = 0) -> dict[str, bytes]:
    d = _qdir(tmp_path, topic, qid)
    if not os.path.isdir(d):
        return {}
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def _units(data: bytes) -> list[tuple[int, int, int]]:
    return [UNIT.unpack_from(data, p) for p in range(0, len(data) - len(data) % UNIT_SIZE, UNIT_SIZE)]


# -- unit format ----------------------------------------------------------------------------------

def test_unit_bytes_on_disk(tmp_path):
    cq = _open(tmp_path, file_size=2000)
    units = [(0, 123, 0), (123, 77, -1), (200, 0x7FFFFFF0, -(2 ** 31)), (2 ** 40 + 5, 1, 2 ** 62 + 3)]
    for i, (phy, size, tags) in enumerate(units):
        assert cq.put_message_position_info(phy, size, tags, i, 0) == 1
    cq.flush()
    assert cq.get_max_offset_in_queue() == 4
    assert [cq.get_unit(i) for i in range(4)] == units
    assert cq.get_unit(4) is None
    assert cq.max_physic_offset == 2 ** 40 + 6
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(0)]
    data = files[_name(0)]
    assert len(data) == 2000
    assert _units(data)[:4] == units
    # tags -1 is sign-extended over 8 bytes, big-endian
    assert data[20 + 12:20 + 20] == b"\xff" * 8
    assert data[0:8] == b"\x00" * 8 and data[8:12] == bytes([0, 0, 0, 123])
    assert data[80:] == b"\x00" * (2000 - 80), "unwritten space must stay zero"


def test_unit_is_twenty_bytes_with_tags_at_byte_12(tmp_path):
    cq = _open(tmp_path, file_size=2000)
    cq.put_message_position_info(0x0102030405060708, 0x11121314, 0x2122232425262728, 0, 0)
    cq.close()
    data = _files(tmp_path)[_name(0)]
    assert data[:20] == bytes(range(1, 9)) + bytes(range(0x11, 0x15)) + bytes(range(0x21, 0x29))


@pytest.mark.parametrize("given, rounded", [(128, 140), (140, 140), (20, 20), (21, 40),
                                            (2000, 2000), (6_000_000, 6_000_000)])
def test_config_file_size_rounds_up_to_units(given, rounded):
    assert StoreConfig(mapped_file_size_consume_queue=given).mapped_file_size_consume_queue == rounded


def test_default_file_size_is_300000_units():
    assert StoreConfig().mapped_file_size_consume_queue == 300_000 * UNIT_SIZE


def test_store_writes_files_of_rounded_size(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=128)
    with MessageStore.open(store_dir, cfg) as store:
        for i in range(8):
            assert store.put_message(Message(TOPIC, b"x" * 10, tags="T"), 0).ok
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 8
    d = os.path.join(store_dir, "consumequeue", TOPIC, "0")
    names = sorted(os.listdir(d))
    assert names == [_name(0), _name(140)]      # 7 units per 140-byte file
    assert all(os.path.getsize(os.path.join(d, n)) == 140 for n in names)


def test_file_size_not_multiple_of_unit_is_refused(tmp_path):
    with pytest.raises(ValueError):
        ConsumeQueue(_root(tmp_path), TOPIC, 0, 128)


# -- rolling ----------------------------------------------------------------------------------------

def test_roll_across_files_first_and_last_unit(tmp_path):
    cq = _open(tmp_path)
    n = 3 * PER_FILE + 2
    for i in range(n):
        assert _put(cq, i) == 1
        assert cq.get_max_offset_in_queue() == i + 1
    assert cq.get_min_offset_in_queue() == 0
    # the last unit of each file and the first unit of the next
    for i in (PER_FILE - 1, PER_FILE, 2 * PER_FILE - 1, 2 * PER_FILE, 3 * PER_FILE - 1, 3 * PER_FILE):
        assert cq.get_unit(i) == (_phy(i), 100, _tags(i))
    assert cq.get_unit(n) is None
    assert cq.roll_next_file(0) == PER_FILE
    assert cq.roll_next_file(PER_FILE - 1) == PER_FILE
    assert cq.roll_next_file(PER_FILE) == 2 * PER_FILE
    # a view ends at the end of its file
    view = cq.units_view(PER_FILE - 2)
    assert len(view) == 2 * UNIT_SIZE
    assert _units(bytes(view)) == [(_phy(i), 100, _tags(i)) for i in (PER_FILE - 2, PER_FILE - 1)]
    view = cq.units_view(3 * PER_FILE)
    assert _units(bytes(view)) == [(_phy(i), 100, _tags(i)) for i in (15, 16)]
    assert len(cq.units_view(PER_FILE, max_units=2)) == 2 * UNIT_SIZE
    assert cq.units_view(n) is None
    del view
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(k * FILE_SIZE) for k in range(4)]
    for k, (name, data) in enumerate(files.items()):
        assert len(data) == FILE_SIZE
        expect = [(_phy(i), 100, _tags(i)) for i in range(k * PER_FILE, min(n, (k + 1) * PER_FILE))]
        assert _units(data)[:len(expect)] == expect, name
        assert data[len(expect) * UNIT_SIZE:] == b"\x00" * (FILE_SIZE - len(expect) * UNIT_SIZE)


def test_exactly_full_file_creates_no_next_file(tmp_path):
    cq = _open(tmp_path)
    for i in range(2 * PER_FILE):
        _put(cq, i)
    assert cq.get_max_offset_in_queue() == 2 * PER_FILE
    cq.close()
    assert list(_files(tmp_path)) == [_name(0), _name(FILE_SIZE)]
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 2 * PER_FILE
    assert cq.max_physic_offset == _phy(2 * PER_FILE - 1) + 100
    assert _put(cq, 2 * PER_FILE) == 1          # the next unit opens the third file
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(0), _name(FILE_SIZE), _name(2 * FILE_SIZE)]
    assert _units(files[_name(2 * FILE_SIZE)])[0] == (_phy(10), 100, _tags(10))


# -- fillers ----------------------------------------------------------------------------------------

def test_first_offset_not_zero_gets_fillers(tmp_path):
    cq = _open(tmp_path)
    first = PER_FILE + 2                        # 7: the second file's third slot
    for i in range(first, first + 5):
        assert _put(cq, i) == 1
    assert cq.get_min_offset_in_queue() == first
    assert cq.get_max_offset_in_queue() == first + 5
    assert cq.get_unit(PER_FILE) == (0, FILLER_SIZE, 0)
    assert cq.get_unit(first) == (_phy(first), 100, _tags(first))
    cq.close()
    files = _files(tmp_path)
    # the first file is the one holding the first unit: nothing is created before it
    assert list(files) == [_name(FILE_SIZE), _name(2 * FILE_SIZE)]
    units = _units(files[_name(FILE_SIZE)])
    assert units[:2] == [(0, FILLER_SIZE, 0)] * 2
    assert units[2:] == [(_phy(i), 100, _tags(i)) for i in range(first, 2 * PER_FILE)]
    assert _units(files[_name(2 * FILE_SIZE)])[:2] == [(_phy(i), 100, _tags(i)) for i in (10, 11)]


def test_fillers_in_a_first_file_at_zero(tmp_path):
    cq = _open(tmp_path)
    assert _put(cq, 3) == 1
    assert cq.get_min_offset_in_queue() == 3
    cq.close()
    assert _units(_files(tmp_path)[_name(0)]) == [(0, FILLER_SIZE, 0)] * 3 + [
        (_phy(3), 100, _tags(3)), (0, 0, 0)]


def test_min_offset_past_fillers_after_reopen(tmp_path):
    cq = _open(tmp_path)
    for i in range(7, 9):
        _put(cq, i)
    cq.close()
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 9
    assert cq.max_physic_offset == _phy(8) + 100, "fillers do not count as commit-log data"
    cq.correct_min_offset(0)                    # what opening a store does
    assert cq.get_min_offset_in_queue() == 7
    cq.close()


def _store_with_first_offset(store_dir, first: int, n: int, cq_file_size: int = 140):
    cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=cq_file_size)
    store = MessageStore.open(store_dir, cfg)
    store.commit_log.set_queue_offset(TOPIC, 1, first)
    rs = [store.put_message(Message(TOPIC, b"body-%d" % i, tags="T%d" % (i % 2)), 1) for i in range(n)]
    assert [r.queue_offset for r in rs] == list(range(first, first + n))
    assert store.wait_dispatched(10)
    return store, cfg, rs


def _pull_all(store, topic, qid, offset, **kw):
    got, statuses = [], []
    while True:
        r = store.get_message("g", topic, qid, offset, **kw)
        statuses.append(r.status)
        if r.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
            return got, statuses, r
        got.extend(r.messages)
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset


def test_fillers_never_returned_by_get_message(store_dir):
    store, cfg, rs = _store_with_first_offset(store_dir, 10, 6)
    try:
        assert store.get_min_offset_in_queue(TOPIC, 1) == 10
        assert store.get_max_offset_in_queue(TOPIC, 1) == 16
        r = store.get_message("g", TOPIC, 1, 0)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == 10
        got, _, last = _pull_all(store, TOPIC, 1, 10, max_msgs=4)
        assert [m.queue_offset for m in got] == list(range(10, 16))
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in rs]
        assert last.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    finally:
        store.close()
    d = os.path.join(store_dir, "consumequeue", TOPIC, "1")
    assert sorted(os.listdir(d)) == [_name(140), _name(280)]     # 7 units per file
    with open(os.path.join(d, _name(140)), "rb") as f:
        units = _units(f.read())
    assert units[:3] == [(0, FILLER_SIZE, 0)] * 3
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_min_offset_in_queue(TOPIC, 1) == 10
        r = store.get_message("g", TOPIC, 1, 7)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 10
        got, _, _ = _pull_all(store, TOPIC, 1, 10)
        assert [m.queue_offset for m in got] == list(range(10, 16))
        r = store.put_message(Message(TOPIC, b"more"), 1)
        assert r.queue_offset == 16


# -- idempotence --------------------------------------------------------------------------------------

def test_same_unit_twice_writes_once(tmp_path):
    cq = _open(tmp_path)
    assert _put(cq, 0) == 1
    assert _put(cq, 0) == 0
    assert _put(cq, 1) == 1
    assert _put(cq, 1) == 0
    assert _put(cq, 0) == 0                     # an older unit again
    assert cq.get_max_offset_in_queue() == 2
    cq.close()
    data = _files(tmp_path)[_name(0)]
    assert _units(data) == [(_phy(0), 100, _tags(0)), (_phy(1), 100, _tags(1))] + [(0, 0, 0)] * 3


def test_rebuild_of_every_unit_after_reopen_writes_nothing(tmp_path):
    cq = _open(tmp_path)
    for i in range(12):
        _put(cq, i)
    cq.close()
    before = _files(tmp_path)
    cq = _open(tmp_path)
    for i in range(12):
        assert _put(cq, i) == 0, i
    assert cq.get_max_offset_in_queue() == 12
    cq.close()
    assert _files(tmp_path) == before


def test_unit_below_write_position_with_larger_offset_is_skipped(tmp_path):
    # docs/format.md §5.2: cqOffset != 0 and expect < current write position -> "build repeatedly"
    cq = _open(tmp_path)
    for i in range(3):
        _put(cq, i)
    assert cq.put_message_position_info(99_999, 10, 5, 1, 0) == 0
    assert cq.get_max_offset_in_queue() == 3
    assert cq.get_unit(1) == (_phy(1), 100, _tags(1))
    cq.close()


# -- gaps -------------------------------------------------------------------------------------------

def test_gap_in_one_file_is_filled_and_index_equals_queue_offset(tmp_path):
    cq = _open(tmp_path)
    _put(cq, 0)
    _put(cq, 1)
    assert _put(cq, 4) == 1
    assert cq.get_max_offset_in_queue() == 5
    assert cq.get_unit(4) == (_phy(4), 100, _tags(4))
    assert [cq.get_unit(i) for i in (2, 3)] == [(0, FILLER_SIZE, 0)] * 2
    assert cq.get_min_offset_in_queue() == 0
    cq.close()
    assert _units(_files(tmp_path)[_name(0)]) == [
        (_phy(0), 100, _tags(0)), (_phy(1), 100, _tags(1)), (0, FILLER_SIZE, 0),
        (0, FILLER_SIZE, 0), (_phy(4), 100, _tags(4))]


def test_gap_across_files(tmp_path):
    cq = _open(tmp_path)
    for i in range(3):
        _put(cq, i)
    assert _put(cq, 12) == 1
    assert cq.get_max_offset_in_queue() == 13
    for i in range(3, 12):
        assert cq.get_unit(i) == (0, FILLER_SIZE, 0), i
    assert cq.get_unit(12) == (_phy(12), 100, _tags(12))
    assert _put(cq, 13) == 1
    cq.close()
    assert list(_files(tmp_path)) == [_name(0), _name(100), _name(200)]
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 14
    assert cq.max_physic_offset == _phy(13) + 100
    cq.close()


def test_gap_units_skipped_by_get_message(store_dir):
    """A queue with filler units in the middle (a gap): a pull skips them and moves on."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=FILE_SIZE)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message(TOPIC, b"m%d" % i), 0) for i in range(2)]
        assert store.wait_dispatched(10)
        store.commit_log.set_queue_offset(TOPIC, 0, 9)  # queue offsets 2..8 never written
        rs += [store.put_message(Message(TOPIC, b"m%d" % i), 0) for i in range(2, 4)]
        assert store.wait_dispatched(10)
        assert [r.queue_offset for r in rs] == [0, 1, 9, 10]
        assert store.get_max_offset_in_queue(TOPIC, 0) == 11
        got, statuses, last = _pull_all(store, TOPIC, 0, 0)
        assert [m.queue_offset for m in got] == [0, 1, 9, 10]
        assert [bytes(m.body) for m in got] == [b"m0", b"m1", b"m2", b"m3"]
        assert last.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        # a pull starting on a filler: one call scans one consume-queue file (docs/format.md §13),
        # and the rest of file 0 (units 3, 4) holds fillers only
        r = store.get_message("g", TOPIC, 0, 3)
        assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE
        assert r.messages == [] and r.next_begin_offset == PER_FILE
        r = store.get_message("g", TOPIC, 0, PER_FILE)     # fillers 5-8, then unit 9
        assert r.status is GetMessageStatus.FOUND
        assert [m.queue_offset for m in r.messages] == [9]
        assert r.next_begin_offset == 10


# -- recovery ----------------------------------------------------------------------------------------

def test_recover_finds_end_in_partial_last_file(tmp_path):
    cq = _open(tmp_path)
    for i in range(7):
        _put(cq, i)
    cq.close()
    cq = ConsumeQueue(_root(tmp_path), TOPIC, 0, FILE_SIZE)
    cq.load()
    cq.recover()
    assert cq.get_max_offset_in_queue() == 7
    assert cq.max_physic_offset == _phy(6) + 100
    assert cq.get_unit(7) is None
    assert _put(cq, 7) == 1
    cq.close()
    assert _units(_files(tmp_path)[_name(FILE_SIZE)])[:3] == [(_phy(i), 100, _tags(i)) for i in (5, 6, 7)]


def test_recover_with_empty_last_file(tmp_path):
    cq = _open(tmp_path)
    for i in range(2 * PER_FILE):
        _put(cq, i)
    cq.close()
    with open(os.path.join(_qdir(tmp_path), _name(2 * FILE_SIZE)), "wb") as f:
        f.write(b"\x00" * FILE_SIZE)            # created, never written (crash after creation)
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 2 * PER_FILE
    assert cq.max_physic_offset == _phy(9) + 100
    assert _put(cq, 10) == 1                    # lands at the start of the empty file
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(0), _name(FILE_SIZE), _name(2 * FILE_SIZE)]
    assert _units(files[_name(2 * FILE_SIZE)])[0] == (_phy(10), 100, _tags(10))


def test_recover_with_zeroed_tail(tmp_path):
    cq = _open(tmp_path)
    for i in range(8):
        _put(cq, i)
    cq.close()
    path = os.path.join(_qdir(tmp_path), _name(FILE_SIZE))
    corrupt(path, 1 * UNIT_SIZE, b"\x00" * (2 * UNIT_SIZE))    # units 6 and 7 never reached disk
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 6
    assert cq.max_physic_offset == _phy(5) + 100
    assert _put(cq, 6) == 1
    cq.close()


def test_recover_goes_on_past_a_zero_unit_with_units_after_it(tmp_path):
    """Issue 21: a zeroed unit inside the queue is damage, not its end (readers skip and
    report it; abnormal recovery rebuilds it): the units after it stay."""
    cq = _open(tmp_path)
    for i in range(9):
        _put(cq, i)
    cq.close()
    path = os.path.join(_qdir(tmp_path), _name(FILE_SIZE))
    corrupt(path, 1 * UNIT_SIZE, b"\x00" * UNIT_SIZE)          # unit 6 zero, 7 and 8 still there
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 9
    assert cq.get_unit(6) == (0, 0, 0) and cq.get_unit(7)[0] == _phy(7)
    cq.close()


def test_recover_goes_on_past_a_negative_offset_unit_with_units_after_it(tmp_path):
    cq = _open(tmp_path)
    for i in range(4):
        _put(cq, i)
    cq.close()
    corrupt(os.path.join(_qdir(tmp_path), _name(0)), 2 * UNIT_SIZE, UNIT.pack(-5, 100, 0))
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 4
    cq.close()


def test_recover_stops_at_a_negative_offset_last_unit(tmp_path):
    cq = _open(tmp_path)
    for i in range(4):
        _put(cq, i)
    cq.close()
    corrupt(os.path.join(_qdir(tmp_path), _name(0)), 3 * UNIT_SIZE, UNIT.pack(-5, 100, 0))
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 3
    cq.close()


def test_recover_starts_at_third_to_last_file(tmp_path):
    cq = _open(tmp_path)
    n = 5 * PER_FILE + 1                        # 6 files
    for i in range(n):
        _put(cq, i)
    cq.close()
    # damage in file 0 is before the recovery window (files 3, 4, 5) and is not looked at
    corrupt(os.path.join(_qdir(tmp_path), _name(0)), 0, b"\x00" * UNIT_SIZE)
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == n
    assert cq.max_physic_offset == _phy(n - 1) + 100
    cq.close()


def test_recover_empty_queue_dir(tmp_path):
    os.makedirs(_qdir(tmp_path))
    cq = _open(tmp_path)
    assert cq.get_max_offset_in_queue() == 0
    assert cq.get_min_offset_in_queue() == 0
    assert cq.max_physic_offset == -1
    assert _put(cq, 0) == 1
    cq.close()
    assert list(_files(tmp_path)) == [_name(0)]


# -- truncation ----------------------------------------------------------------------------------------

def test_truncate_deletes_whole_files_and_trims_last(tmp_path):
    cq = _open(tmp_path)
    n = 13                                      # files 0 (0-4), 100 (5-9), 200 (10-12)
    for i in range(n):
        _put(cq, i)
    # unit 10 is the first unit of the last file: the whole file goes
    cq.truncate_dirty_logic_files(_phy(10))
    assert cq.get_max_offset_in_queue() == 10
    assert cq.max_physic_offset == _phy(9) + 100
    assert not os.path.exists(os.path.join(_qdir(tmp_path), _name(200)))
    # cut inside the second file: units 5, 6, 7 stay
    cq.truncate_dirty_logic_files(_phy(8))
    assert cq.get_max_offset_in_queue() == 8
    assert cq.max_physic_offset == _phy(7) + 100
    assert cq.get_unit(8) is None
    # the queue continues right after the kept units
    assert _put(cq, 8, phy=50_000) == 1
    assert cq.get_unit(8) == (50_000, 100, _tags(8))
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(0), _name(100)]
    assert _units(files[_name(100)]) == [(_phy(i), 100, _tags(i)) for i in (5, 6, 7)] + [
        (50_000, 100, _tags(8)), (0, 0, 0)]


def test_truncate_drops_dirty_units_on_disk(tmp_path):
    cq = _open(tmp_path)
    for i in range(9):
        _put(cq, i)
    cq.truncate_dirty_logic_files(_phy(6))
    cq.close()
    files = _files(tmp_path)
    assert list(files) == [_name(0), _name(100)]
    cq = _open(tmp_path)                        # recovery must not find the cut units again
    assert cq.get_max_offset_in_queue() == 6
    assert cq.max_physic_offset == _phy(5) + 100
    cq.close()


def test_truncate_several_files_at_once(tmp_path):
    cq = _open(tmp_path)
    for i in range(18):                         # 4 files
        _put(cq, i)
    cq.truncate_dirty_logic_files(_phy(3))
    assert cq.get_max_offset_in_queue() == 3
    assert cq.max_physic_offset == _phy(2) + 100
    cq.close()
    assert list(_files(tmp_path)) == [_name(0)]


def test_truncate_everything(tmp_path):
    cq = _open(tmp_path)
    for i in range(7):
        _put(cq, i)
    cq.truncate_dirty_logic_files(_phy(0))
    assert cq.get_max_offset_in_queue() == 0
    assert cq.max_physic_offset == -1
    cq.close()
    assert _files(tmp_path) == {}


def test_truncate_past_end_changes_nothing(tmp_path):
    cq = _open(tmp_path)
    for i in range(7):
        _put(cq, i)
    cq.flush()
    before = _files(tmp_path)
    cq.truncate_dirty_logic_files(_phy(7))
    assert cq.get_max_offset_in_queue() == 7
    assert cq.max_physic_offset == _phy(6) + 100
    cq.close()
    assert _files(tmp_path) == before


def test_truncate_at_last_unit_of_full_file(tmp_path):
    cq = _open(tmp_path)
    for i in range(10):
        _put(cq, i)
    cq.truncate_dirty_logic_files(_phy(9))      # the last unit of the second file
    assert cq.get_max_offset_in_queue() == 9
    assert _put(cq, 9, phy=77_777) == 1
    assert cq.get_unit(9) == (77_777, 100, _tags(9))
    cq.close()


# -- min offset --------------------------------------------------------------------------------------

def test_correct_min_offset_in_first_file(tmp_path):
    cq = _open(tmp_path)
    for i in range(13):
        _put(cq, i)
    assert cq.get_min_offset_in_queue() == 0
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 0
    cq.correct_min_offset(_phy(3))              # exactly a unit's offset
    assert cq.get_min_offset_in_queue() == 3
    cq.correct_min_offset(_phy(3) + 50)         # inside unit 3's record: unit 4
    assert cq.get_min_offset_in_queue() == 4
    cq.correct_min_offset(0)                    # never moves back
    assert cq.get_min_offset_in_queue() == 4
    cq.close()


def test_correct_min_offset_past_last_unit_empties_queue(tmp_path):
    cq = _open(tmp_path)
    for i in range(13):
        _put(cq, i)
    cq.correct_min_offset(_phy(13))             # every unit points below the min
    assert cq.get_min_offset_in_queue() == 13
    assert cq.get_max_offset_in_queue() == 13
    cq.close()


def test_correct_min_offset_beyond_first_file(tmp_path):
    """docs/format.md §5.3 / ``correct_min_offset``'s own contract: min points at the first unit
    whose commit-log offset >= the commit log's min, also when every unit of the first file
    is below it (RocketMQ's CQ cleanup would have deleted that file; rocketstore has none, so
    the first file stays and the search must not stop at its end)."""
    cq = _open(tmp_path)
    for i in range(13):
        _put(cq, i)
    cq.correct_min_offset(_phy(7))
    assert cq.get_min_offset_in_queue() == 7
    cq.close()


def _store_over_small_files(store_dir, n: int):
    cfg = StoreConfig(mapped_file_size_commit_log=1024, mapped_file_size_consume_queue=FILE_SIZE)
    with MessageStore.open(store_dir, cfg) as store:
        rs = [store.put_message(Message(TOPIC, b"%04d" % i + b"." * 100), 0) for i in range(n)]
        assert store.wait_dispatched(10)
    return cfg, rs


def _delete_commitlog_files(store_dir, count: int) -> int:
    d = os.path.join(store_dir, "commitlog")
    names = sorted(os.listdir(d))
    for name in names[:count]:
        os.unlink(os.path.join(d, name))
    return int(names[count])


def test_min_offset_follows_commit_log_min_at_open(store_dir):
    cfg, rs = _store_over_small_files(store_dir, 12)
    min_phy = _delete_commitlog_files(store_dir, 1)     # about 4-5 records per 1 KiB file
    first_kept = next(i for i, r in enumerate(rs) if r.commitlog_offset >= min_phy)
    assert 0 < first_kept < PER_FILE, "the new min must lie in the first consume-queue file"
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_min_phy_offset() == min_phy
        assert store.get_min_offset_in_queue(TOPIC, 0) == first_kept
        assert store.get_max_offset_in_queue(TOPIC, 0) == 12
        r = store.get_message("g", TOPIC, 0, 0)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == first_kept
        got, _, _ = _pull_all(store, TOPIC, 0, first_kept)
        assert [m.queue_offset for m in got] == list(range(first_kept, 12))


def test_min_offset_follows_commit_log_min_beyond_first_cq_file(store_dir):
    """The commit log lost files holding every message of the first consume-queue file (and
    more): ``get_min_offset_in_queue`` ("the queue's first offset still stored") is still the
    first message that is stored."""
    cfg, rs = _store_over_small_files(store_dir, 20)
    min_phy = _delete_commitlog_files(store_dir, 2)
    first_kept = next(i for i, r in enumerate(rs) if r.commitlog_offset >= min_phy)
    assert first_kept > PER_FILE
    with MessageStore.open(store_dir, cfg) as store:
        assert store.get_min_offset_in_queue(TOPIC, 0) == first_kept
        r = store.get_message("g", TOPIC, 0, store.get_min_offset_in_queue(TOPIC, 0))
        assert r.status is GetMessageStatus.FOUND
        assert r.messages[0].queue_offset == first_kept
