"""rocketstore.store._mapped.MappedFile: allocation, positions, views, lifetime, flush (docs/format.md §4).

Sizes derive from the runtime page size; flush page accounting uses RocketMQ's OS_PAGE_SIZE
(4096, docs/format.md §4.1/4.5). The disk-full tests mount a real 1 MiB tmpfs (CI runs as root).
"""
import ctypes
import errno
import gc
import os
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refreader as rr  # noqa: E402

from rocketstore.store._codec import Message  # noqa: E402
from rocketstore.store._commitlog import CommitLog  # noqa: E402
from rocketstore.store._mapped import MappedFile  # noqa: E402
from rocketstore.store.allocate import AllocateMappedFileService  # noqa: E402
from rocketstore.errors import CorruptionError, StoreClosedError  # noqa: E402
from rocketstore.store.mapped_file_queue import MappedFileQueue  # noqa: E402
from rocketstore.store.status import PutMessageStatus  # noqa: E402

OS_PAGE_SIZE = 4096          # docs/format.md §4.1: flush/commit page accounting unit


@pytest.fixture
def file_size(page_size):
    """8 flush pages, rounded up to whole runtime pages."""
    n = 8 * OS_PAGE_SIZE
    return (n + page_size - 1) // page_size * page_size


@pytest.fixture
def mf_path(store_dir):
    os.makedirs(store_dir, exist_ok=True)
    return os.path.join(store_dir, "00000000000000000000")


@pytest.fixture
def mf(mf_path, file_size):
    f = MappedFile(mf_path, file_size, create=True)
    yield f
    f.release()


# ---------------------------------------------------------------------------------------------
# creation

def test_created_file_is_allocated_full_size_not_sparse(mf, mf_path, file_size):
    st = os.stat(mf_path)
    assert st.st_size == file_size
    assert st.st_blocks * 512 >= file_size
    assert mf.file_size == file_size
    assert mf.file_from_offset == 0
    assert mf.file_name == "00000000000000000000"
    assert (mf.wrote_pos, mf.committed_pos, mf.flushed_pos, mf.read_pos) == (0, 0, 0, 0)
    assert mf.is_mapped and not mf.is_full()
    assert mf.read_bytes(0, file_size) == bytes(file_size)


def test_file_from_offset_is_parsed_from_20_digit_name(store_dir, file_size):
    os.makedirs(store_dir)
    p = os.path.join(store_dir, "%020d" % (5 * file_size))
    f = MappedFile(p, file_size, create=True)
    try:
        assert f.file_from_offset == 5 * file_size
    finally:
        f.release()


def test_existing_empty_file_is_allocated_on_create(mf_path, file_size):
    open(mf_path, "wb").close()
    f = MappedFile(mf_path, file_size, create=True)
    try:
        assert os.path.getsize(mf_path) == file_size
        assert os.stat(mf_path).st_blocks * 512 >= file_size
    finally:
        f.release()


@pytest.mark.parametrize("delta", [-1, 1])
def test_existing_file_of_wrong_size_is_corruption_naming_both_sizes(mf_path, file_size, delta):
    actual = file_size + delta * 100
    with open(mf_path, "wb") as f:
        f.write(b"\x01" * actual)
    for create in (False, True):
        with pytest.raises(CorruptionError) as ei:
            MappedFile(mf_path, file_size, create=create)
        msg = str(ei.value)
        assert str(actual) in msg and str(file_size) in msg
        assert mf_path in msg
        assert ei.value.path == mf_path
    # the file was left alone
    assert os.path.getsize(mf_path) == actual


def test_missing_file_without_create_is_file_not_found(mf_path, file_size):
    with pytest.raises(FileNotFoundError):
        MappedFile(mf_path, file_size)
    assert not os.path.exists(mf_path)


def test_non_positive_size_is_rejected(mf_path):
    for size in (0, -4096):
        with pytest.raises(ValueError):
            MappedFile(mf_path, size, create=True)


# ---------------------------------------------------------------------------------------------
# append and read

def test_append_first_and_last_byte_of_the_file(mf, file_size):
    assert mf.append(b"\xAA") == 0
    assert mf.read_bytes(0, 1) == b"\xAA"
    middle = bytes(range(256)) * ((file_size - 2) // 256) + b"\x55" * ((file_size - 2) % 256)
    assert mf.append(middle) == 1
    assert mf.append(b"\xBB") == file_size - 1
    assert mf.wrote_pos == mf.committed_pos == file_size
    assert mf.is_full()
    assert mf.read_bytes(file_size - 1, 1) == b"\xBB"
    assert mf.read_bytes(0, file_size) == b"\xAA" + middle + b"\xBB"
    assert bytes(mf.select(file_size - 1, 1)) == b"\xBB"
    assert bytes(mf.view(0, 1)) == b"\xAA"


def test_append_past_the_end_returns_minus_1_and_writes_nothing(mf, file_size):
    assert mf.append(bytes(file_size - 10)) == 0
    assert mf.append(b"x" * 11) == -1
    assert mf.wrote_pos == file_size - 10
    assert mf.read_bytes(file_size - 10, 10) == bytes(10)
    assert mf.append(b"y" * 10) == file_size - 10          # exactly the rest fits
    assert mf.is_full()
    assert mf.append(b"z") == -1
    assert mf.wrote_pos == file_size


def test_append_larger_than_the_file_returns_minus_1(mf, file_size):
    assert mf.append(bytes(file_size + 1)) == -1
    assert mf.wrote_pos == 0


def test_reads_outside_the_file_raise_value_error(mf, file_size):
    with pytest.raises(ValueError):
        mf.read_bytes(file_size, 1)
    with pytest.raises(ValueError):
        mf.read_bytes(-1, 1)
    with pytest.raises(ValueError):
        mf.view(file_size - 1, 2)
    with pytest.raises(ValueError):
        mf.write_at(file_size - 1, b"ab")
    assert mf.read_bytes(file_size, 0) == b""


def test_select_is_bounded_by_the_read_position(mf):
    mf.append(b"0123456789")
    assert bytes(mf.select(0)) == b"0123456789"
    assert bytes(mf.select(4, 6)) == b"456789"
    assert mf.select(4, 7) is None
    assert mf.select(11) is None
    assert mf.select(-1, 1) is None
    assert bytes(mf.select(10)) == b""


def test_set_positions_moves_all_three(mf, file_size):
    mf.set_positions(123)
    assert (mf.wrote_pos, mf.committed_pos, mf.flushed_pos) == (123, 123, 123)
    with pytest.raises(ValueError):
        mf.set_positions(file_size + 1)
    with pytest.raises(ValueError):
        mf.set_positions(-1)


# ---------------------------------------------------------------------------------------------
# views

def test_views_are_read_only(mf):
    mf.append(b"abcdef")
    v = mf.view(0, 6)
    assert v.readonly
    with pytest.raises(TypeError):
        v[0] = 0x7A
    s = mf.select(0, 6)
    with pytest.raises(TypeError):
        s[0:2] = b"zz"
    with pytest.raises((TypeError, BufferError)):   # a writable export is refused
        ctypes.c_char.from_buffer(mf)
    assert mf.read_bytes(0, 6) == b"abcdef"
    del v, s


def test_views_are_zero_copy_later_writes_are_visible(mf, file_size):
    v = mf.view(0, 8)
    tail = mf.view(file_size - 4, 4)
    assert bytes(v) == bytes(8)
    mf.write_at(0, b"ABCDEFGH")
    mf.write_at(file_size - 4, b"WXYZ")
    assert bytes(v) == b"ABCDEFGH"
    assert bytes(tail) == b"WXYZ"
    mf.append(b"12")
    assert bytes(v[:2]) == b"12"
    del v, tail


def test_unmap_with_a_live_view_raises_buffer_error_with_the_count(mf):
    mf.append(b"payload")
    v = mf.view(0, 7)
    with pytest.raises(BufferError) as ei:
        mf.unmap()
    assert "1 exported view" in str(ei.value)
    assert mf.is_mapped
    assert bytes(v) == b"payload"            # still valid
    direct = memoryview(mf)                  # a second, independent export
    with pytest.raises(BufferError) as ei:
        mf.unmap()
    assert f"{mf.exported_views} exported view" in str(ei.value)
    assert mf.exported_views == 2
    direct.release()
    del v
    gc.collect()
    assert mf.exported_views == 0
    mf.unmap()
    assert not mf.is_mapped
    with pytest.raises(StoreClosedError):
        mf.read_bytes(0, 1)
    with pytest.raises(StoreClosedError):
        mf.append(b"x")


def test_release_with_a_live_view_keeps_it_readable_then_unmaps(mf, file_size):
    mf.append(b"keep me")
    mf.write_at(file_size - 1, b"\xEE")
    v = mf.view(0, 7)
    last = mf.view(file_size - 1, 1)
    mf.release()
    assert mf.is_mapped                       # deferred: views pin the mapping
    assert bytes(v) == b"keep me"
    assert bytes(last) == b"\xEE"
    with pytest.raises(BufferError):          # no new exports once released
        memoryview(mf)
    del v
    assert mf.is_mapped                       # `last` shares the same export
    del last
    gc.collect()
    assert not mf.is_mapped
    assert mf.exported_views == 0


def test_release_without_views_unmaps_at_once_and_is_idempotent(mf):
    mf.release()
    assert not mf.is_mapped
    mf.release()
    mf.unmap()
    assert not mf.is_mapped


def test_destroy_deletes_the_file(mf, mf_path):
    mf.append(b"x")
    mf.destroy()
    assert not os.path.exists(mf_path)
    assert not mf.is_mapped
    mf.destroy()                              # again: no error


def test_destroy_with_a_live_view_deletes_file_view_stays_valid(mf, mf_path):
    mf.append(b"still here")
    v = mf.view(0, 10)
    mf.destroy()
    assert not os.path.exists(mf_path)
    assert bytes(v) == b"still here"
    del v
    gc.collect()
    assert not mf.is_mapped


# ---------------------------------------------------------------------------------------------
# warm-up and flush

def test_warm_on_a_new_file_keeps_it_zero_and_writable(mf, file_size):
    mf.warm()
    assert mf.read_bytes(0, file_size) == bytes(file_size)
    mf.warm(lock=True)                         # mlock may be refused (RLIMIT_MEMLOCK): no error
    assert mf.mlocked in (True, False)
    assert mf.append(b"after warm") == 0
    assert mf.read_bytes(0, 10) == b"after warm"
    mf.release()
    assert not mf.is_mapped


def test_warm_on_an_existing_file_does_not_change_its_bytes(mf, mf_path, file_size, rand):
    data = rand.randbytes(file_size)
    mf.append(data)
    mf.flush()
    mf.release()
    f2 = MappedFile(mf_path, file_size)
    try:
        f2.warm()
        assert f2.read_bytes(0, file_size) == data
    finally:
        f2.release()
    with open(mf_path, "rb") as fh:
        assert fh.read() == data


def test_flush_advances_flushed_pos_to_the_write_position(mf, mf_path):
    assert mf.flush() == 0                     # nothing written: nothing to do
    mf.append(b"abc")
    assert mf.flush() == 3
    assert mf.flushed_pos == 3
    mf.append(b"defg")
    assert mf.flush(0) == 7
    with open(mf_path, "rb") as fh:
        assert fh.read(7) == b"abcdefg"


def test_flush_with_least_pages_waits_for_whole_dirty_pages(mf):
    mf.append(bytes(2 * OS_PAGE_SIZE - 1))           # 1 whole page dirty
    assert mf.flush(least_pages=2) == 0
    assert mf.flushed_pos == 0
    assert mf.flush(least_pages=1) == 2 * OS_PAGE_SIZE - 1
    mf.append(b"x")                                   # ends page 2: 1 more whole page
    assert mf.flush(least_pages=2) == 2 * OS_PAGE_SIZE - 1
    mf.append(bytes(OS_PAGE_SIZE))                    # now at 3 pages: 2 whole pages past flushed
    assert mf.flush(least_pages=2) == 3 * OS_PAGE_SIZE
    assert mf.flushed_pos == 3 * OS_PAGE_SIZE
    mf.append(b"y")
    assert mf.flush(least_pages=1) == 3 * OS_PAGE_SIZE   # 1 byte: no whole page yet
    assert mf.flush(least_pages=0) == 3 * OS_PAGE_SIZE + 1


def test_flush_of_a_full_file_ignores_least_pages(mf, file_size):
    mf.append(bytes(file_size - 1))
    mf.flush()
    mf.append(b"z")
    assert mf.is_full()
    assert mf.flush(least_pages=1000) == file_size
    assert mf.flushed_pos == file_size


def test_sync_metadata_succeeds(mf):
    mf.append(b"x")
    mf.sync_metadata()


def test_read_only_mapping_refuses_writes_and_sees_writer_bytes(mf, mf_path, file_size):
    mf.append(b"shared bytes")
    ro = MappedFile(mf_path, file_size, read_only=True)
    try:
        assert ro.read_only
        assert ro.read_bytes(0, 12) == b"shared bytes"
        mf.write_at(0, b"SHARED")
        assert ro.read_bytes(0, 6) == b"SHARED"       # same pages, MAP_SHARED
        with pytest.raises(OSError) as ei:
            ro.append(b"x")
        assert ei.value.errno == errno.EROFS
        with pytest.raises(OSError):
            ro.write_at(0, b"x")
        assert ro.wrote_pos == 0
    finally:
        ro.release()


def test_read_only_open_of_a_missing_file_never_creates_it(mf_path, file_size):
    with pytest.raises(FileNotFoundError):
        MappedFile(mf_path, file_size, create=True, read_only=True)
    assert not os.path.exists(mf_path)


# ---------------------------------------------------------------------------------------------
# a full disk (real tmpfs)

from conftest import TMPFS_SIZE, free_bytes  # noqa: E402  (small_fs: the fixture there)


def test_tmpfs_fixture_is_a_small_real_filesystem(small_fs):
    assert free_bytes(small_fs) <= TMPFS_SIZE
    assert os.path.ismount(small_fs)


def test_creating_a_file_bigger_than_free_space_is_enospc_and_leaves_no_file(small_fs):
    path = os.path.join(small_fs, "00000000000000000000")
    size = 2 * TMPFS_SIZE
    with pytest.raises(OSError) as ei:
        MappedFile(path, size, create=True)
    assert ei.value.errno == errno.ENOSPC
    assert ei.value.filename == path
    assert not os.path.exists(path)
    assert os.listdir(small_fs) == []
    # the space came back: a file that fits can be created
    f = MappedFile(path, TMPFS_SIZE // 2, create=True)
    try:
        assert os.stat(path).st_blocks * 512 >= TMPFS_SIZE // 2
    finally:
        f.destroy()


def test_creating_a_file_just_over_free_space_is_enospc(small_fs, page_size):
    filler = MappedFile(os.path.join(small_fs, "00000000000000000000"), TMPFS_SIZE // 2,
                        create=True)
    try:
        path = os.path.join(small_fs, "%020d" % (TMPFS_SIZE // 2))
        with pytest.raises(OSError) as ei:
            MappedFile(path, free_bytes(small_fs) + page_size, create=True)
        assert ei.value.errno == errno.ENOSPC
        assert not os.path.exists(path)
    finally:
        filler.release()


@pytest.mark.parametrize("use_allocator", [False, True], ids=["inline", "allocator"])
def test_put_needing_a_new_file_on_a_full_disk_is_create_mapped_file_failed(small_fs,
                                                                            use_allocator):
    file_size = 400 * 1024
    # a 300 KiB filler + the first 400 KiB file leave 324 KiB: the second file cannot be made
    filler = os.path.join(small_fs, "filler")
    fd = os.open(filler, os.O_CREAT | os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 300 * 1024)
    finally:
        os.close(fd)
    allocator = AllocateMappedFileService() if use_allocator else None
    queue = MappedFileQueue(os.path.join(small_fs, "commitlog"), file_size, allocator=allocator)
    log = CommitLog(queue, max_message_size=file_size)
    try:
        body1 = bytes(range(256)) * 1000                    # 256000 bytes
        r1 = log.put_message(Message("TopicA", body1))
        assert r1.status is PutMessageStatus.PUT_OK
        r2 = log.put_message(Message("TopicA", b"small"))
        assert r2.ok
        if allocator is not None:
            # its failing pre-allocation of the next file briefly creates and removes it
            assert allocator.wait_idle(10)
        assert free_bytes(small_fs) < file_size
        max_before = log.get_max_offset()
        wrote_before = queue.last_file().wrote_pos
        files_before = sorted(os.listdir(queue.store_path))

        big = Message("TopicA", b"\x7f" * (file_size - wrote_before))   # needs a roll
        r3 = log.put_message(big)
        assert r3.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        assert not r3.ok and r3.msg_id is None
        assert isinstance(r3.error, OSError) and r3.error.errno == errno.ENOSPC

        # nothing changed: no blank record, no new file, same max offset and queue offset
        assert log.get_max_offset() == max_before
        assert len(queue.files) == 1
        assert queue.last_file().wrote_pos == wrote_before
        assert queue.last_file().read_bytes(wrote_before, 8) == bytes(8)
        assert sorted(os.listdir(queue.store_path)) == files_before
        assert log.get_queue_offset("TopicA", 0) == 2

        # the previous data still reads back, from the log and from the disk
        m1 = log.get_message(r1.commitlog_offset)
        assert bytes(m1.body) == body1 and m1.queue_offset == 0
        m2 = log.get_message(r2.commitlog_offset)
        assert bytes(m2.body) == b"small" and m2.queue_offset == 1
        del m1, m2
        recs = [rec for _, _, _, rec in rr.iter_commitlog(queue.store_path)]
        assert [r["kind"] for r in recs] == ["msg", "msg", "end"]
        assert recs[0]["body"] == body1 and recs[1]["body"] == b"small"

        # a small message still fits in the current file
        r4 = log.put_message(Message("TopicA", b"fits"))
        assert r4.ok and r4.commitlog_offset == max_before and r4.queue_offset == 2

        # space comes back: the same put now rolls, with a blank closing the first file
        os.unlink(filler)
        end0 = queue.last_file().wrote_pos
        r5 = log.put_message(big)
        assert r5.ok and r5.commitlog_offset == file_size and r5.queue_offset == 3
        assert queue.files[0].read_bytes(end0, 8) == struct.pack(">iI", file_size - end0,
                                                                 rr.BLANK_MAGIC)
        assert [r["kind"] for _, _, _, r in rr.iter_commitlog(queue.store_path)] == \
            ["msg", "msg", "msg", "blank", "msg", "end"]
    finally:
        log.close()
        if allocator is not None:
            allocator.shutdown()
        queue.close()
