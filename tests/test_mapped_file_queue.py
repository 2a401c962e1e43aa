"""MappedFileQueue and AllocateMappedFileService (docs/format.md §4.1, 4.3, 4.4).

Lookups are checked against a plain model (file k covers [k*size, (k+1)*size) from the first
file's start); load, truncation and pre-allocation against the files on disk.
"""
import gc
import os
import threading
import time

import pytest

from rocketstore.store._mapped import MappedFile
from rocketstore.store.allocate import AllocateMappedFileService
from rocketstore.errors import CorruptionError
from rocketstore.store.mapped_file_queue import MappedFileQueue

FILE_SIZE = 4096


def name(offset):
    return "%020d" % offset


def disk_names(d):
    return sorted(n for n in os.listdir(d) if len(n) == 20 and n.isdigit())


def make_files(d, starts, size=FILE_SIZE, fill=None):
    """Create full-size segment files at the given start offsets (content: fill(start))."""
    os.makedirs(d, exist_ok=True)
    for s in starts:
        data = fill(s) if fill else bytes(size)
        assert len(data) == size
        with open(os.path.join(d, name(s)), "wb") as f:
            f.write(data)


@pytest.fixture
def queue(store_dir):
    q = MappedFileQueue(store_dir, FILE_SIZE)
    yield q
    q.close()


def wait_until(cond, timeout=10.0):
    """Poll ``cond`` until it holds or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------------
# naming and growth

def test_files_are_named_by_20_digit_start_offset(queue, store_dir):
    for k in range(3):
        mf = queue.create_next(queue.next_start_offset())
        assert mf.file_from_offset == k * FILE_SIZE
        assert mf.file_name == name(k * FILE_SIZE)
        assert len(mf.file_name) == 20
        assert (mf.wrote_pos, mf.committed_pos, mf.flushed_pos) == (0, 0, 0)
    assert disk_names(store_dir) == [
        "00000000000000000000", "00000000000000004096", "00000000000000008192"]
    assert [m.file_from_offset for m in queue.files] == [0, 4096, 8192]
    for n in disk_names(store_dir):
        assert os.path.getsize(os.path.join(store_dir, n)) == FILE_SIZE


def test_name_of_a_1gib_offset_matches_rocketmq():
    assert name(1073741824) == "00000000001073741824"


def test_empty_queue_offsets(queue):
    assert queue.files == []
    assert queue.first_file() is None and queue.last_file() is None
    assert queue.get_min_offset() == -1
    assert queue.get_max_offset() == 0
    assert queue.next_start_offset() == 0
    assert queue.find_mapped_file_by_offset(0) is None
    assert queue.find_mapped_file_by_offset(0, return_first_on_not_found=True) is None


def test_create_next_at_an_unaligned_offset_is_rejected(queue):
    with pytest.raises(ValueError):
        queue.create_next(100)
    assert queue.files == []


def test_queue_may_start_at_a_nonzero_offset(queue):
    queue.create_next(7 * FILE_SIZE)
    queue.create_next(queue.next_start_offset())
    assert queue.get_min_offset() == 7 * FILE_SIZE
    assert queue.next_start_offset() == 9 * FILE_SIZE


def test_max_offset_is_last_file_start_plus_read_position(queue):
    queue.create_next(0)
    assert queue.get_max_offset() == 0
    queue.last_file().append(b"x" * 100)
    assert queue.get_max_offset() == 100
    queue.last_file().append(b"y" * (FILE_SIZE - 100))
    queue.create_next(queue.next_start_offset())
    assert queue.get_max_offset() == FILE_SIZE
    queue.last_file().append(b"z")
    assert queue.get_max_offset() == FILE_SIZE + 1


# ---------------------------------------------------------------------------------------------
# find_mapped_file_by_offset

@pytest.mark.parametrize("first_start", [0, 5 * FILE_SIZE])
def test_find_by_offset_for_first_and_last_byte_of_each_file(queue, first_start):
    queue.create_next(first_start)
    for _ in range(4):
        queue.create_next(queue.next_start_offset())
    for mf in queue.files:
        start = mf.file_from_offset
        assert queue.find_mapped_file_by_offset(start) is mf
        assert queue.find_mapped_file_by_offset(start + 1) is mf
        assert queue.find_mapped_file_by_offset(start + FILE_SIZE - 1) is mf
        assert queue.find_mapped_file_by_offset(start + FILE_SIZE // 2) is mf


@pytest.mark.parametrize("first_start", [0, 5 * FILE_SIZE])
def test_find_by_offset_out_of_range_is_none_or_first(queue, first_start):
    queue.create_next(first_start)
    queue.create_next(queue.next_start_offset())
    first = queue.first_file()
    end = queue.last_file().file_from_offset + FILE_SIZE
    outside = [end, end + 1, end + 10 * FILE_SIZE, -1, -FILE_SIZE, 2**62]
    if first_start:
        outside += [first_start - 1, 0]
    for off in outside:
        assert queue.find_mapped_file_by_offset(off) is None, off
        assert queue.find_mapped_file_by_offset(off, return_first_on_not_found=True) is first, off


def test_find_by_offset_matches_a_model_for_random_offsets(queue, rand):
    start = rand.randint(0, 50) * FILE_SIZE
    queue.create_next(start)
    for _ in range(rand.randint(1, 9)):
        queue.create_next(queue.next_start_offset())
    lo, hi = start, queue.next_start_offset()
    for _ in range(2000):
        off = rand.randint(lo - 3 * FILE_SIZE, hi + 3 * FILE_SIZE)
        got = queue.find_mapped_file_by_offset(off)
        if lo <= off < hi:
            assert got is queue.files[(off - lo) // FILE_SIZE]
            assert got.file_from_offset <= off < got.file_from_offset + FILE_SIZE
        else:
            assert got is None


# ---------------------------------------------------------------------------------------------
# load

def test_load_maps_existing_files_in_order_with_full_positions(store_dir):
    starts = [3 * FILE_SIZE, 0, 2 * FILE_SIZE, FILE_SIZE]       # created out of order
    make_files(store_dir, starts, fill=lambda s: s.to_bytes(8, "big") * (FILE_SIZE // 8))
    q = MappedFileQueue(store_dir, FILE_SIZE)
    try:
        q.load()
        assert [m.file_from_offset for m in q.files] == sorted(starts)
        for mf in q.files:
            assert (mf.wrote_pos, mf.committed_pos, mf.flushed_pos) == (FILE_SIZE,) * 3
            assert mf.read_bytes(0, 8) == mf.file_from_offset.to_bytes(8, "big")
        assert q.get_min_offset() == 0
        assert q.get_max_offset() == 4 * FILE_SIZE
        assert q.find_mapped_file_by_offset(2 * FILE_SIZE + 5) is q.files[2]
    finally:
        q.close()


def test_load_ignores_other_names_and_directories(store_dir):
    make_files(store_dir, [0, FILE_SIZE])
    with open(os.path.join(store_dir, "README"), "w") as f:
        f.write("x")
    with open(os.path.join(store_dir, "123"), "w") as f:
        f.write("short name")
    os.mkdir(os.path.join(store_dir, name(2 * FILE_SIZE)))       # a directory, 20 digits
    q = MappedFileQueue(store_dir, FILE_SIZE)
    try:
        q.load()
        assert [m.file_from_offset for m in q.files] == [0, FILE_SIZE]
    finally:
        q.close()


def test_load_of_a_missing_or_empty_directory_gives_an_empty_queue(tmp_path):
    q = MappedFileQueue(str(tmp_path / "nothing"), FILE_SIZE, read_only=True)
    q.load()
    assert q.files == [] and q.get_min_offset() == -1
    q2 = MappedFileQueue(str(tmp_path / "empty"), FILE_SIZE)
    q2.load()
    assert q2.files == []


def test_load_deletes_an_empty_last_file(store_dir):
    make_files(store_dir, [0, FILE_SIZE])
    open(os.path.join(store_dir, name(2 * FILE_SIZE)), "wb").close()
    q = MappedFileQueue(store_dir, FILE_SIZE)
    try:
        q.load()
        assert [m.file_from_offset for m in q.files] == [0, FILE_SIZE]
        assert disk_names(store_dir) == [name(0), name(FILE_SIZE)]
        # the next file is created where the deleted one was
        assert q.next_start_offset() == 2 * FILE_SIZE
    finally:
        q.close()


def test_load_of_only_an_empty_file_deletes_it(store_dir):
    os.makedirs(store_dir)
    open(os.path.join(store_dir, name(0)), "wb").close()
    q = MappedFileQueue(store_dir, FILE_SIZE)
    q.load()
    assert q.files == [] and disk_names(store_dir) == []


def test_load_with_an_empty_file_before_the_last_is_corruption(store_dir):
    make_files(store_dir, [0, 2 * FILE_SIZE])
    open(os.path.join(store_dir, name(FILE_SIZE)), "wb").close()
    q = MappedFileQueue(store_dir, FILE_SIZE)
    with pytest.raises(CorruptionError):
        q.load()
    assert q.files == []
    assert len(disk_names(store_dir)) == 3        # nothing deleted


def test_load_with_a_gap_between_files_is_corruption_naming_the_offsets(store_dir):
    make_files(store_dir, [0, FILE_SIZE, 3 * FILE_SIZE])
    q = MappedFileQueue(store_dir, FILE_SIZE)
    with pytest.raises(CorruptionError) as ei:
        q.load()
    msg = str(ei.value)
    assert name(3 * FILE_SIZE) in msg
    assert str(2 * FILE_SIZE) in msg and str(3 * FILE_SIZE) in msg
    assert q.files == []
    assert len(disk_names(store_dir)) == 3


@pytest.mark.parametrize("bad_index", [0, 1, 2])
def test_load_with_a_wrong_size_file_is_corruption(store_dir, bad_index):
    starts = [0, FILE_SIZE, 2 * FILE_SIZE]
    make_files(store_dir, starts)
    bad = os.path.join(store_dir, name(starts[bad_index]))
    with open(bad, "ab") as f:
        f.write(b"\x00" * 10)
    q = MappedFileQueue(store_dir, FILE_SIZE)
    with pytest.raises(CorruptionError) as ei:
        q.load()
    assert str(FILE_SIZE + 10) in str(ei.value) and str(FILE_SIZE) in str(ei.value)
    assert ei.value.path == bad
    assert q.files == []
    assert os.path.getsize(bad) == FILE_SIZE + 10


def test_load_read_only_never_deletes_or_creates(tmp_path):
    d = str(tmp_path / "ro")
    make_files(d, [0])
    open(os.path.join(d, name(FILE_SIZE)), "wb").close()
    q = MappedFileQueue(d, FILE_SIZE, read_only=True)
    try:
        try:
            q.load()
        except CorruptionError:
            pass
        assert disk_names(d) == [name(0), name(FILE_SIZE)]    # the empty file is kept
        assert os.path.getsize(os.path.join(d, name(FILE_SIZE))) == 0
        with pytest.raises(OSError):
            q.create_next(0)
    finally:
        q.close()


# ---------------------------------------------------------------------------------------------
# truncate_dirty_files

def three_written_files(queue):
    for k in range(3):
        mf = queue.create_next(k * FILE_SIZE)
        mf.append(bytes([k + 1]) * FILE_SIZE)
    return list(queue.files)


def test_truncate_inside_a_middle_file_keeps_its_positions_and_deletes_later(queue, store_dir):
    f0, f1, f2 = three_written_files(queue)
    offset = FILE_SIZE + 1000
    queue.truncate_dirty_files(offset)
    assert queue.files == [f0, f1]
    assert (f0.wrote_pos, f0.committed_pos, f0.flushed_pos) == (FILE_SIZE, FILE_SIZE, 0)
    assert (f1.wrote_pos, f1.committed_pos, f1.flushed_pos) == (1000,) * 3
    assert disk_names(store_dir) == [name(0), name(FILE_SIZE)]
    assert not f2.is_mapped
    assert queue.get_max_offset() == offset
    # the file keeps its bytes; only its positions moved
    assert f1.read_bytes(1000, 1) == b"\x02"


def test_truncate_at_a_file_boundary_keeps_that_file_empty(queue, store_dir):
    f0, f1, f2 = three_written_files(queue)
    queue.truncate_dirty_files(2 * FILE_SIZE)
    assert queue.files == [f0, f1, f2]
    assert f1.wrote_pos == FILE_SIZE
    assert (f2.wrote_pos, f2.committed_pos, f2.flushed_pos) == (0, 0, 0)
    assert queue.get_max_offset() == 2 * FILE_SIZE
    assert len(disk_names(store_dir)) == 3


def test_truncate_at_zero_empties_the_first_and_deletes_the_rest(queue, store_dir):
    f0, _, _ = three_written_files(queue)
    queue.truncate_dirty_files(0)
    assert queue.files == [f0]
    assert f0.wrote_pos == 0
    assert disk_names(store_dir) == [name(0)]
    assert queue.get_max_offset() == 0


def test_truncate_past_the_end_changes_nothing(queue, store_dir):
    files = three_written_files(queue)
    queue.truncate_dirty_files(3 * FILE_SIZE)
    assert queue.files == files
    assert all(m.wrote_pos == FILE_SIZE for m in files)
    assert len(disk_names(store_dir)) == 3


def test_truncate_with_a_live_view_of_a_deleted_file_keeps_the_view(queue, store_dir):
    _, _, f2 = three_written_files(queue)
    v = f2.view(0, 4)
    queue.truncate_dirty_files(100)
    assert disk_names(store_dir) == [name(0)]
    assert bytes(v) == b"\x03" * 4
    del v
    gc.collect()
    assert not f2.is_mapped


def test_files_after_truncation_are_created_after_the_kept_ones(queue):
    three_written_files(queue)
    queue.truncate_dirty_files(FILE_SIZE + 10)
    assert queue.next_start_offset() == 2 * FILE_SIZE
    mf = queue.create_next(queue.next_start_offset())
    assert mf.file_from_offset == 2 * FILE_SIZE and mf.wrote_pos == 0
    assert mf.read_bytes(0, FILE_SIZE) == bytes(FILE_SIZE)       # a fresh file, not the old one


def test_close_releases_every_mapping(store_dir):
    q = MappedFileQueue(store_dir, FILE_SIZE)
    files = [q.create_next(k * FILE_SIZE) for k in range(3)]
    q.close()
    assert q.files == []
    assert not any(m.is_mapped for m in files)
    assert len(disk_names(store_dir)) == 3


# ---------------------------------------------------------------------------------------------
# AllocateMappedFileService

def allocator_threads():
    return [t for t in threading.enumerate() if t.name == "AllocateMappedFileService"]


def test_allocator_preallocates_the_next_file(store_dir):
    os.makedirs(store_dir)
    p0, p1 = os.path.join(store_dir, name(0)), os.path.join(store_dir, name(FILE_SIZE))
    svc = AllocateMappedFileService()
    try:
        mf0 = svc.get(p0, FILE_SIZE, p1)
        assert mf0.is_mapped and mf0.file_size == FILE_SIZE
        assert os.path.getsize(p0) == FILE_SIZE
        assert wait_until(lambda: os.path.exists(p1) and os.path.getsize(p1) == FILE_SIZE), \
            "the next file was not pre-allocated within 10 s"
        assert os.stat(p1).st_blocks * 512 >= FILE_SIZE
        mf1 = svc.get(p1, FILE_SIZE)
        assert mf1.is_mapped and mf1.path == p1
        assert mf1.read_bytes(0, FILE_SIZE) == bytes(FILE_SIZE)
        mf1.append(b"written")
        assert mf1.read_bytes(0, 7) == b"written"
        mf0.release()
        mf1.release()
    finally:
        svc.shutdown()


def test_allocator_shutdown_joins_its_thread(store_dir):
    os.makedirs(store_dir)
    before = set(allocator_threads())
    svc = AllocateMappedFileService()
    mf = svc.get(os.path.join(store_dir, name(0)), FILE_SIZE, os.path.join(store_dir, name(4096)))
    started = [t for t in allocator_threads() if t not in before]
    assert started, "get() with a next path should start the allocator thread"
    svc.shutdown()
    assert not any(t.is_alive() for t in started)
    assert [t for t in allocator_threads() if t not in before] == []
    mf.release()


def test_allocator_shutdown_without_any_request_is_fine():
    svc = AllocateMappedFileService()
    svc.shutdown()
    svc.shutdown()


def test_allocator_after_shutdown_creates_inline_and_starts_no_thread(store_dir):
    os.makedirs(store_dir)
    svc = AllocateMappedFileService()
    svc.shutdown()
    before = set(allocator_threads())
    p0, p1 = os.path.join(store_dir, name(0)), os.path.join(store_dir, name(FILE_SIZE))
    mf = svc.get(p0, FILE_SIZE, p1)
    try:
        assert mf.is_mapped and os.path.getsize(p0) == FILE_SIZE
        assert [t for t in allocator_threads() if t not in before] == []
        assert not os.path.exists(p1)
    finally:
        mf.release()


def test_queue_with_allocator_rolls_into_the_preallocated_file(store_dir):
    svc = AllocateMappedFileService()
    q = MappedFileQueue(store_dir, FILE_SIZE, allocator=svc)
    try:
        mf0 = q.create_next(0)
        assert wait_until(lambda: os.path.exists(os.path.join(store_dir, name(FILE_SIZE))))
        mf0.append(b"a" * FILE_SIZE)
        mf1 = q.create_next(q.next_start_offset())
        assert mf1.file_from_offset == FILE_SIZE
        assert (mf1.wrote_pos, mf1.committed_pos, mf1.flushed_pos) == (0, 0, 0)
        assert q.files == [mf0, mf1]
        assert q.find_mapped_file_by_offset(FILE_SIZE) is mf1
        # and it pre-allocates the one after
        assert wait_until(lambda: os.path.exists(os.path.join(store_dir, name(2 * FILE_SIZE))))
    finally:
        svc.shutdown()
        q.close()
    # shutdown deletes the pre-allocated file nobody used, as RocketMQ's does
    assert not os.path.exists(os.path.join(store_dir, name(2 * FILE_SIZE)))


def test_allocator_get_of_an_existing_file_maps_it_without_clearing(store_dir):
    make_files(store_dir, [0], fill=lambda s: b"\x09" * FILE_SIZE)
    svc = AllocateMappedFileService()
    try:
        mf = MappedFile(os.path.join(store_dir, name(0)), FILE_SIZE)
        mf.release()
        mf = svc.get(os.path.join(store_dir, name(0)), FILE_SIZE)
        assert mf.read_bytes(0, 4) == b"\x09" * 4
        mf.release()
    finally:
        svc.shutdown()
