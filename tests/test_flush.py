"""Flush services: group commit (sync flush), async flush, the one sync function and its
sticky failure (docs/format.md §4.5; docs/design.md durability contracts)."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._mapped import set_sync_hook

from pulling import pull_all


@pytest.fixture(autouse=True)
def _no_hook():
    yield
    set_sync_hook(None)


def _sync_cfg(**kw) -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=1 << 20, flush_disk_type="SYNC_FLUSH", **kw)


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_sync_put_returns_only_after_its_record_is_flushed(store_dir):
    msyncs = []
    set_sync_hook(lambda op, path, off, n: msyncs.append((op, off, n)) if op == "msync" else None)
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        for i in range(20):
            r = store.put_message(Message("T", b"durable-%d" % i))
            assert r.status is PutMessageStatus.PUT_OK
            assert store.commit_log.flushed_where >= r.commitlog_offset + r.wrote_bytes
        r = store.put_messages([Message("T", b"b%d" % i) for i in range(10)])
        assert r.ok and store.commit_log.flushed_where >= r.commitlog_offset + r.wrote_bytes
    assert msyncs, "sync flush issued no msync"


def test_group_commit_shares_syncs_between_waiting_producers(store_dir):
    calls = []
    def hook(op, path, off, n):
        if op == "msync":
            calls.append(n)
            time.sleep(0.002)           # a slow disk: producers pile up behind one sync
    set_sync_hook(hook)
    per_thread, threads = 50, 16
    results = []
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        def producer(t):
            for i in range(per_thread):
                results.append(store.put_message(Message("T", b"%d-%d" % (t, i)), t % 4))
        ts = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert len(results) == per_thread * threads
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    # one sync served many puts: far fewer msyncs than puts
    assert len(calls) < len(results) / 4, (len(calls), len(results))


def test_wait_false_does_not_wait_for_the_disk(store_dir):
    release = threading.Event()
    def hook(op, path, off, n):
        if op == "msync":
            release.wait(5)
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        set_sync_hook(hook)
        t0 = time.monotonic()
        r = store.put_message(Message("T", b"x", properties={"WAIT": "false"}))
        assert r.status is PutMessageStatus.PUT_OK
        assert time.monotonic() - t0 < 2
        release.set()


def test_slow_sync_gives_flush_disk_timeout_not_put_ok(store_dir):
    release = threading.Event()
    def hook(op, path, off, n):
        if op == "msync":
            release.wait(10)
    with MessageStore.open(store_dir, _sync_cfg(sync_flush_timeout=100)) as store:
        set_sync_hook(hook)
        r = store.put_message(Message("T", b"slow"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert store.look_message_by_offset(r.commitlog_offset) is not None   # written, not durable
        release.set()


def test_failed_sync_is_sticky_and_store_turns_read_only(store_dir):
    acked = []
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        for i in range(5):
            r = store.put_message(Message("T", b"before-%d" % i))
            assert r.ok
            acked.append((r.commitlog_offset, b"before-%d" % i))
        def hook(op, path, off, n):
            if op == "msync":
                raise OSError(errno.EIO, "injected I/O error", path)
        set_sync_hook(hook)
        r = store.put_message(Message("T", b"needs-a-sync"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert isinstance(r.error, OSError) and r.error.errno == errno.EIO
        set_sync_hook(None)             # the disk "recovers": the failure stays sticky
        for _ in range(3):
            r = store.put_message(Message("T", b"after"))
            assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert isinstance(r.error, OSError)
        assert store.commit_log.flush_error is not None
    # docs/recovery.md: what the failed sync covered is not known durable, so close() keeps
    # `abort` and the next open runs the crash recovery (a CRC scan and re-dispatch)
    assert os.path.exists(os.path.join(store_dir, "abort"))
    # a restart recovers, and what was acknowledged is there
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        assert store.recovery["last_exit_ok"] is False
        for off, body in acked:
            assert bytes(store.look_message_by_offset(off).body) == body
        assert store.put_message(Message("T", b"again")).ok


def test_async_flush_catches_up_within_its_interval(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, flush_interval_commit_log=20,
                      flush_commit_log_least_pages=0)
    with MessageStore.open(store_dir, cfg) as store:
        r = store.put_messages([Message("T", b"x" * 1000) for _ in range(20)])
        end = r.commitlog_offset + r.wrote_bytes
        _wait(lambda: store.commit_log.flushed_where >= end)
        assert store.checkpoint.physic_msg_timestamp == r.store_timestamp


def test_async_flush_waits_for_least_pages(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, flush_interval_commit_log=10,
                      flush_commit_log_least_pages=4, flush_commit_log_thorough_interval=60_000)
    with MessageStore.open(store_dir, cfg) as store:
        start = store.commit_log.flushed_where
        store.put_message(Message("T", b"small"))
        time.sleep(0.1)                 # ten rounds: one dirty page is below the threshold
        assert store.commit_log.flushed_where == start
        r = store.put_messages([Message("T", b"y" * 4096) for _ in range(5)])
        _wait(lambda: store.commit_log.flushed_where >= r.commitlog_offset)


def test_every_sync_of_a_store_goes_through_the_one_function(store_dir):
    ops = set()
    set_sync_hook(lambda op, path, off, n: ops.add((op, os.path.basename(os.path.dirname(path))
                                                    if op == "msync" else op)))
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        store.put_message(Message("T", b"x", keys="k"))
        store.commit_offset("g", "T", 0, 1)
    assert ("msync", "commitlog") in ops
    assert ("fsync", "fsync") in ops and ("fsync_dir", "fsync_dir") in ops


def test_lock_and_abort_files_pass_the_one_function_and_are_durable(store_dir):
    events = []
    set_sync_hook(lambda op, path, off, n: events.append((op, os.path.basename(path))))
    store = MessageStore.open(store_dir, _sync_cfg())
    opened = list(events)
    assert ("create", "lock") in opened
    # abort is created, then its directory synced, before any put can be acknowledged
    i = opened.index(("create", "abort"))
    assert ("fsync_dir", os.path.basename(store_dir)) in opened[i:]
    store.close()
    closing = events[len(opened):]
    j = closing.index(("delete", "abort"))
    assert ("fsync_dir", os.path.basename(store_dir)) in closing[j:]
    assert not os.path.exists(os.path.join(store_dir, "abort"))


def test_a_failed_abort_creation_fails_the_open_and_leaves_no_lock(store_dir):
    def hook(op, path, off, n):
        if op == "create" and path.endswith("abort"):
            raise OSError(errno.EIO, "injected", path)
    set_sync_hook(hook)
    with pytest.raises(OSError, match="injected"):
        MessageStore.open(store_dir, _sync_cfg())
    set_sync_hook(None)
    with MessageStore.open(store_dir, _sync_cfg()) as store:   # not left locked
        assert store.put_message(Message("T", b"after")).ok


CHILD = textwrap.dedent("""
    import sys, threading
    from rocketstore import Message, MessageStore, StoreConfig
    root, mode = sys.argv[1], sys.argv[2]
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, flush_disk_type=mode,
                      mapped_file_size_consume_queue=2000)
    store = MessageStore.open(root, cfg)
    lock = threading.Lock()
    def producer(t):
        i = 0
        while True:
            body = b"%d-%d-" % (t, i) + b"z" * ((t * 131 + i * 17) % 300)
            r = store.put_message(Message("Crash", body, keys="k%d-%d" % (t, i)), t)
            if r.ok:
                with lock:
                    print(r.commitlog_offset, t, r.queue_offset, body.hex(), flush=True)
            i += 1
    for t in range(3):
        threading.Thread(target=producer, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_kill_9_under_load_loses_no_acknowledged_message(store_dir, tmp_path, rand, mode):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    acked: dict[int, tuple[int, int, bytes]] = {}
    for cycle in range(50):
        proc = subprocess.Popen([sys.executable, str(script), store_dir, mode],
                                stdout=subprocess.PIPE, env=env, text=True)
        lines = []
        first = proc.stdout.readline()          # the child is up and putting
        lines.append(first)
        deadline = time.monotonic() + rand.uniform(0.02, 0.15)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        proc.send_signal(signal.SIGKILL)
        rest = proc.communicate()[0]
        # a line cut by the kill was never fully acknowledged: keep whole lines only
        for line in lines + rest.splitlines(keepends=True):
            if line.endswith("\n"):
                off, t, qoff, hexbody = line.split()
                acked[int(off)] = (int(t), int(qoff), bytes.fromhex(hexbody))
        with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=64 * 1024,
                                                      mapped_file_size_consume_queue=2000)) as s:
            assert s.recovery["last_exit_ok"] is False
            for off, (t, qoff, body) in acked.items():
                m = s.look_message_by_offset(off)
                assert m is not None and bytes(m.body) == body
                assert (m.queue_id, m.queue_offset) == (t, qoff)
            for t in range(3):
                # offsets dense, and the consume queue agrees with the commit log
                n = s.get_max_offset_in_queue("Crash", t)
                assert [m.queue_offset for m in pull_all(s, "Crash", t)] == list(range(n))
    assert len(acked) > 200


def test_enospc_injected_at_file_allocation_refuses_the_roll_and_writes_resume(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=4096, flush_disk_type="SYNC_FLUSH")
    with MessageStore.open(store_dir, cfg) as store:
        store.allocator.shutdown()          # no pre-allocation: the roll creates the file
        store.commit_log_queue.allocator = None
        first = store.put_message(Message("T", b"a" * 1000))
        assert first.ok
        store.dispatch_service.do_dispatch()    # its queue file exists before the injection

        def hook(op, path, off, n):
            if op == "allocate":
                raise OSError(errno.ENOSPC, "injected: no space left", path)
        set_sync_hook(hook)
        before = store.get_max_phy_offset()
        refused = [store.put_message(Message("T", b"b" * 1000)) for _ in range(4)]
        assert any(r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED for r in refused)
        failed = next(r for r in refused if not r.ok)
        assert failed.error.errno == errno.ENOSPC
        assert store.get_max_phy_offset() == before + sum(r.wrote_bytes for r in refused if r.ok)
        set_sync_hook(None)
        again = store.put_message(Message("T", b"c" * 1000))
        assert again.ok
        assert bytes(store.look_message_by_offset(first.commitlog_offset).body) == b"a" * 1000
