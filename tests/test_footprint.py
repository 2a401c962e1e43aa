"""Disk footprint grows with the data (issue 15.3): files keep RocketMQ's length but are
allocated an extent at a time ahead of the writer, the next file is pre-allocated only once
the current one is nearly full, and a full disk at an extent is a clean
CREATE_MAPPED_FILE_FAILED (never a SIGBUS), after which the store goes on."""
from __future__ import annotations

import errno
import os
import time

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import DispatchStalledError
from rocketstore.store import paths
from rocketstore.store._mapped import set_sync_hook
from conftest import free_bytes

KiB, MiB = 1024, 1024 * 1024
FS_META = 16 * KiB      # extent-tree blocks a filesystem may count in a file's st_blocks


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def tree_allocated(root: str) -> int:
    return sum(allocated(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def commitlog_files(root: str) -> list[str]:
    d = paths.commitlog_dir(root)
    return sorted(os.path.join(d, n) for n in os.listdir(d))


def test_default_store_with_a_few_messages_takes_megabytes_not_gigabytes(store_dir):
    with MessageStore.open(store_dir, StoreConfig()) as store:
        for i in range(101):
            assert store.put_message(Message("Orders", b'{"id": %d}' % i, keys=[f"o{i}"]),
                                     queue_id=i % 2).ok
        assert store.allocator.wait_idle(10)
        (log_file,) = commitlog_files(store_dir)        # no next file pre-allocated
        assert os.path.getsize(log_file) == 1 << 30     # RocketMQ's length ...
        assert allocated(log_file) <= 64 * MiB          # ... one extent of it on disk
    # index: slots (20 MB) + one chunk of entries; queues: one extent each
    assert tree_allocated(store_dir) < 64 * MiB + 24 * MiB, tree_allocated(store_dir)


def test_extents_follow_the_writer_and_the_next_file_waits_until_the_last_one(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 * MiB, allocation_extent=128 * KiB,
                      mapped_file_size_consume_queue=4000, message_index_enable=False)
    body = b"x" * 1000
    puts = 0
    with MessageStore.open(store_dir, cfg) as store:
        steps = set()
        while store.get_max_phy_offset() < 1 * MiB - 130 * KiB:
            assert store.put_message(Message("T", body)).ok
            puts += 1
            (log_file,) = commitlog_files(store_dir)
            end = store.get_max_phy_offset()
            steps.add(allocated(log_file))
            # whole extents covering what was written, at most one extent ahead of it (plus
            # the filesystem's own extent-tree blocks, which st_blocks counts too)
            assert end <= allocated(log_file) <= (end // (128 * KiB) + 1) * 128 * KiB + FS_META
        assert len(steps) >= 6                          # it grew step by step
        assert os.path.getsize(log_file) == 1 * MiB
        assert store.allocator.wait_idle(10)
        assert len(commitlog_files(store_dir)) == 1     # not nearly full yet: no next file
        while store.get_max_phy_offset() < 1 * MiB - 100 * KiB:
            assert store.put_message(Message("T", body)).ok
            puts += 1
        # the writer reserved the file's last extent: the next file is pre-allocated now
        assert store.allocator.wait_idle(10)
        files = commitlog_files(store_dir)
        assert len(files) == 2 and os.path.getsize(files[1]) == 1 * MiB
        assert allocated(files[1]) <= 128 * KiB + FS_META
        for _ in range(200):                            # and the roll goes into it
            assert store.put_message(Message("T", body)).ok
            puts += 1
        assert store.get_max_phy_offset() > 1 * MiB
    with MessageStore.open(store_dir, cfg) as store:    # reopened: still sparse, still writable
        assert store.get_max_offset_in_queue("T", 0) == puts
        assert store.put_message(Message("T", body)).ok
        assert store.wait_dispatched(10)
        r = store.get_message("g", "T", 0, puts, max_msgs=1)
        assert bytes(r.messages[0].body) == body


def test_whole_file_allocation_when_the_extent_is_zero(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 * MiB, allocation_extent=0,
                      message_index_enable=False)
    with MessageStore.open(store_dir, cfg) as store:
        assert store.put_message(Message("T", b"x")).ok
        assert store.allocator.wait_idle(10)
        files = commitlog_files(store_dir)
        assert len(files) == 2                          # RocketMQ's eager next file
        assert all(allocated(f) >= 1 * MiB for f in files)


def test_full_disk_at_an_extent_is_create_mapped_file_failed_never_sigbus(small_fs):
    """A real 1 MiB tmpfs and 4 MiB commit-log files (sparse past 64 KiB extents): the put
    whose extent does not fit is refused cleanly, every acknowledged message stays readable,
    and puts resume once space is freed."""
    filler = os.path.join(small_fs, "filler")
    fd = os.open(filler, os.O_CREAT | os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 256 * KiB)
    finally:
        os.close(fd)
    root = os.path.join(small_fs, "store")
    cfg = StoreConfig(mapped_file_size_commit_log=4 * MiB, allocation_extent=64 * KiB,
                      mapped_file_size_consume_queue=20 * 200, message_index_enable=False)
    with MessageStore.open(root, cfg) as store:
        acked, refused = [], None
        for i in range(2000):
            r = store.put_message(Message("T", b"%06d" % i + b"." * 994))
            if not r.ok:
                refused = r
                break
            acked.append(r)
        assert refused is not None, "a 1 MiB filesystem took 2 MB of messages"
        assert refused.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        assert refused.error.errno == errno.ENOSPC
        assert free_bytes(small_fs) < 64 * KiB
        assert store.get_max_phy_offset() == acked[-1].commitlog_offset + acked[-1].wrote_bytes
        for r in acked[::50] + acked[-1:]:
            m = store.look_message_by_offset(r.commitlog_offset)
            assert bytes(m.body[:6]) == m.body[:6].tobytes() and m.queue_offset == r.queue_offset
        os.unlink(filler)                               # space comes back: puts resume
        # at once, unless the full disk also stalled dispatch (its consume-queue file could
        # not be created, on a loaded machine): puts are then refused until its retry (back-off
        # at most 1 s) succeeds
        deadline = time.monotonic() + 10
        while True:
            again = store.put_message(Message("T", b"after"))
            if again.ok or time.monotonic() > deadline:
                break
            assert again.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert isinstance(again.error, DispatchStalledError), again.error
            time.sleep(0.05)
        assert again.ok and again.queue_offset == len(acked)
    with MessageStore.open(root, cfg) as store:
        assert store.get_max_offset_in_queue("T", 0) == len(acked) + 1
        assert bytes(store.look_message_by_offset(again.commitlog_offset).body) == b"after"


def test_injected_enospc_at_an_extent_leaves_the_log_unchanged(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 * MiB, allocation_extent=64 * KiB,
                      message_index_enable=False)
    with MessageStore.open(store_dir, cfg) as store:
        first = store.put_message(Message("T", b"a" * 1000))

        def hook(op, path, off, n):
            if op == "allocate" and path.startswith(paths.commitlog_dir(store_dir)):
                raise OSError(errno.ENOSPC, "injected: no space left", path)
        set_sync_hook(hook)
        try:
            results = [store.put_message(Message("T", b"b" * 1000)) for _ in range(80)]
        finally:
            set_sync_hook(None)
        failed = [r for r in results if not r.ok]
        assert failed and all(r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED for r in failed)
        ok = [r for r in results if r.ok]
        assert store.get_max_phy_offset() == first.wrote_bytes + sum(r.wrote_bytes for r in ok)
        assert store.put_message(Message("T", b"c")).ok
        assert bytes(store.look_message_by_offset(first.commitlog_offset).body) == b"a" * 1000


def test_a_reopened_store_still_prepares_the_next_file_when_nearly_full(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 * MiB, allocation_extent=128 * KiB,
                      mapped_file_size_consume_queue=4000, message_index_enable=False)
    body = b"y" * 1000
    with MessageStore.open(store_dir, cfg) as store:
        while store.get_max_phy_offset() < 512 * KiB:
            assert store.put_message(Message("T", body)).ok
    with MessageStore.open(store_dir, cfg) as store:
        assert len(commitlog_files(store_dir)) == 1
        while store.get_max_phy_offset() < 1 * MiB - 100 * KiB:
            assert store.put_message(Message("T", body)).ok
        assert store.allocator.wait_idle(10)
        files = commitlog_files(store_dir)
        assert len(files) == 2 and allocated(files[1]) <= 128 * KiB + FS_META
