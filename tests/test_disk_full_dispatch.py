"""Dispatch on a full disk (issue 16 item 5), on real small filesystems: a tmpfs and a loop
ext4. Creating a consume-queue file fails with ENOSPC; dispatch keeps retrying, the store
says it is behind and why, puts are refused with a clear status rather than acknowledged
into invisibility, close() does not raise, and everything resumes once space is freed."""
from __future__ import annotations

import gc
import os
import subprocess
import time

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import DispatchStalledError

MB = 1 << 20


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


@pytest.fixture(params=["tmpfs", "ext4"])
def small_fs(request, tmp_path):
    """A small real filesystem mounted for the test (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.fail("disk-full tests need root to mount a filesystem (CI runs as root)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if request.param == "tmpfs":
        r = _run("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt))
    else:
        img = str(tmp_path / "fs.img")
        with open(img, "wb") as f:
            f.truncate(12 * MB)
        r = _run("mkfs.ext4", "-q", "-F", img)
        if r.returncode == 0:
            r = _run("mount", "-o", "loop", img, str(mnt))
    if r.returncode != 0:
        pytest.fail(f"cannot mount a small {request.param}: {r.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        gc.collect()
        if _run("umount", str(mnt)).returncode != 0:
            _run("umount", "-l", str(mnt))


def _fill(path: str) -> str:
    """Take every free byte of the filesystem with one file; returns its path."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (bytes(64 * 1024), bytes(512)):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def _wait_for(cond, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return True


def test_dispatch_retries_after_enospc_and_puts_are_refused_meanwhile(small_fs):
    root = os.path.join(small_fs, "store")
    cfg = StoreConfig(mapped_file_size_commit_log=MB, mapped_file_size_consume_queue=60_000,
                      message_index_enable=False, clean_resource_first_delay=3_600_000)
    store = MessageStore.open(root, cfg)
    try:
        assert store.put_message(Message("T", b"before"), 0).ok
        assert _wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 1)
        store.allocator.wait_idle(30)           # the next commit-log file is allocated
        filler = _fill(small_fs)
        # the commit log has room in its file; the new queue's first file does not fit
        r = store.put_message(Message("T", b"acked"), 1)
        assert r.status is PutMessageStatus.PUT_OK
        assert _wait_for(lambda: "dispatch" in store.service_errors())
        err = store.service_errors()["dispatch"]
        assert isinstance(err, OSError) and err.errno == 28
        assert store.dispatch_behind_bytes() > 0
        refused = store.put_message(Message("T", b"refused"), 0)
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert isinstance(refused.error, DispatchStalledError)
        assert "No space left" in str(refused.error)
        # space comes back: dispatch resumes by itself, the acknowledged message is served
        os.unlink(filler)
        assert _wait_for(lambda: not store.service_errors())
        got = store.get_message("g", "T", 1, 0, 8)
        assert [bytes(m.body) for m in got.messages] == [b"acked"]
        assert store.put_message(Message("T", b"after"), 1).ok
        assert _wait_for(lambda: store.get_max_offset_in_queue("T", 1) == 2)
    finally:
        store.close()
    with MessageStore.open(root, cfg) as s:
        assert [bytes(m.body) for m in s.get_message("g", "T", 1, 0, 8).messages] == \
            [b"acked", b"after"]
        assert [bytes(m.body) for m in s.get_message("g", "T", 0, 0, 8).messages] == [b"before"]


def test_close_on_a_full_disk_does_not_raise(small_fs):
    root = os.path.join(small_fs, "store")
    cfg = StoreConfig(mapped_file_size_commit_log=MB, mapped_file_size_consume_queue=60_000,
                      max_hash_slot_num=1000, max_index_num=4000,
                      clean_resource_first_delay=3_600_000)
    store = MessageStore.open(root, cfg)
    assert store.put_message(Message("T", b"x", keys="k"), 0).ok
    store.commit_offset("g", "T", 0, 1)
    assert _wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 1)
    store.allocator.wait_idle(30)
    filler = _fill(small_fs)
    store.put_message(Message("T", b"y"), 5)        # a queue file that cannot be created
    store.close()                                   # logs, keeps abort, does not raise
    assert store.closed
    assert os.path.exists(os.path.join(root, "abort"))
    os.unlink(filler)
    with MessageStore.open(root, cfg) as s:       # unlocked; recovery catches up
        assert [bytes(m.body) for m in s.get_message("g", "T", 5, 0, 8).messages] == [b"y"]
        assert [bytes(m.body) for m in s.get_message("g", "T", 0, 0, 8).messages] == [b"x"]
