"""Transient store pool and its commit service (docs/format.md §4.5; docs/design.md durability contract:
with the pool, a process crash loses at most what was not yet committed into the files)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._mapped import PAGE_SIZE, WriteBuffer

from pulling import pull_all

FILE = 64 * 1024


def _cfg(**kw) -> StoreConfig:
    base = dict(mapped_file_size_commit_log=FILE, transient_store_pool_enable=True,
                transient_store_pool_size=3, message_index_enable=False)
    base.update(kw)
    return StoreConfig(**base)


def _stalled(**kw) -> StoreConfig:
    """The commit service only commits when told (a minute's interval, no wake by puts)."""
    return _cfg(commit_interval_commit_log=60_000, commit_commit_log_least_pages=10_000,
                commit_commit_log_thorough_interval=60_000, **kw)


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def _disk_bytes(store, offset, size) -> bytes:
    """What the file holds (not the writer's buffer): read through a separate descriptor."""
    mf = store.commit_log_queue.find_mapped_file_by_offset(offset)
    with open(mf.path, "rb") as f:
        f.seek(offset - mf.file_from_offset)
        return f.read(size)


def test_write_buffers_are_page_aligned_locked_and_sized():
    buf = WriteBuffer(3 * PAGE_SIZE)
    assert buf.address % PAGE_SIZE == 0
    assert buf.size == 3 * PAGE_SIZE
    assert buf.locked          # CI runs as root: RLIMIT_MEMLOCK does not stop it
    with pytest.raises(ValueError, match="positive"):
        WriteBuffer(0)


def test_appends_are_invisible_and_not_in_the_file_until_committed(store_dir):
    with MessageStore.open(store_dir, _stalled()) as store:
        assert store.transient_pool is not None and store.transient_pool.available == 3
        r = store.put_message(Message("Pool", b"hello pool", tags="t"))
        assert r.status is PutMessageStatus.PUT_OK
        # the record is in the buffer only: no reader sees it, the file still holds zeros
        assert store.look_message_by_offset(r.commitlog_offset) is None
        assert _disk_bytes(store, r.commitlog_offset, r.wrote_bytes) == bytes(r.wrote_bytes)
        assert store.get_max_offset_in_queue("Pool", 0) == 0
        assert store.commit_log.get_max_offset() == r.commitlog_offset
        assert store.transient_pool.uncommitted_bytes() == r.wrote_bytes

        assert store.commit_service.commit(0) == r.wrote_bytes
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m is not None and bytes(m.body) == b"hello pool" and m.tags == "t"
        disk = _disk_bytes(store, r.commitlog_offset, r.wrote_bytes)
        assert int.from_bytes(disk[:4], "big") == r.wrote_bytes      # TOTALSIZE on disk
        assert disk == bytes(store.commit_log_queue.last_file().view(r.commitlog_offset, r.wrote_bytes))
        # committed bytes are dispatched: the commit woke the dispatcher
        _wait(lambda: store.get_max_offset_in_queue("Pool", 0) == 1)
        assert store.transient_pool.uncommitted_bytes() == 0


def test_puts_wake_the_commit_service_once_enough_pages_wait(store_dir):
    cfg = _cfg(commit_interval_commit_log=60_000, commit_commit_log_least_pages=1,
               commit_commit_log_thorough_interval=60_000)
    with MessageStore.open(store_dir, cfg) as store:
        r = store.put_message(Message("Pool", b"small"))
        time.sleep(0.2)
        assert store.look_message_by_offset(r.commitlog_offset) is None     # below one page
        for _ in range(2 * PAGE_SIZE // 500):       # two pages wait: the put signals
            store.put_message(Message("Pool", b"x" * 500))
        _wait(lambda: store.look_message_by_offset(r.commitlog_offset) is not None)
        assert store.commit_service.rounds >= 1


def test_a_full_file_gives_its_buffer_back_and_every_file_reads_back(store_dir, rand):
    bodies = [rand.randbytes(rand.randrange(1, 3000)) for _ in range(400)]
    with MessageStore.open(store_dir, _cfg(transient_store_pool_size=2)) as store:
        results = [store.put_message(Message("Pool", b, keys=f"k{i}"), i % 4)
                   for i, b in enumerate(bodies)]
        assert all(r.ok for r in results)
        store.commit_service.commit(0)
        pool = store.transient_pool
        assert len(store.commit_log_queue.files) > 5
        # only the file being written still holds a buffer
        assert pool.available == 1 and pool.lent == [store.commit_log_queue.last_file()]
        for r, b in zip(results, bodies):
            m = store.look_message_by_offset(r.commitlog_offset)
            assert m is not None and bytes(m.body) == b
    with MessageStore.open(store_dir, _cfg()) as store:
        assert store.recovery["last_exit_ok"] is True
        for q in range(4):
            assert [bytes(m.body) for m in pull_all(store, "Pool", q)] == bodies[q::4]


def test_empty_pool_makes_the_writer_commit_and_keeps_one_prefix(store_dir, rand):
    bodies = [rand.randbytes(rand.randrange(100, 2000)) for _ in range(300)]
    with MessageStore.open(store_dir, _stalled(transient_store_pool_size=2)) as store:
        results = [store.put_message(Message("Pool", b)) for b in bodies]
        assert all(r.ok for r in results)
        pool = store.transient_pool
        assert pool.fallback_commits > 0        # the stalled service never freed a buffer
        # what is readable is one prefix of what was written: everything before the first
        # file still holding a buffer, nothing after it
        first_lent = pool.lent[0].file_from_offset
        readable = [store.look_message_by_offset(r.commitlog_offset) is not None for r in results]
        k = readable.index(False)
        assert all(readable[:k]) and not any(readable[k:])
        assert results[k].commitlog_offset >= first_lent > results[0].commitlog_offset
        assert pool.available == 0 and len(pool.lent) == 2
        store.commit_service.commit(0)
        for r, b in zip(results, bodies):
            assert bytes(store.look_message_by_offset(r.commitlog_offset).body) == b


def test_fast_fail_refuses_a_roll_without_a_buffer_and_recovers(store_dir):
    cfg = _stalled(transient_store_pool_size=1, fast_fail_if_no_buffer_in_store_pool=True)
    with MessageStore.open(store_dir, cfg) as store:
        body = b"f" * 1000
        r = store.put_message(Message("Pool", body))
        while r.ok:
            last_ok = r
            r = store.put_message(Message("Pool", body))
        assert r.status is PutMessageStatus.OS_PAGE_CACHE_BUSY
        assert "transient store pool" in str(r.error)
        files = len(store.commit_log_queue.files)
        assert store.put_message(Message("Pool", body)).status is PutMessageStatus.OS_PAGE_CACHE_BUSY
        assert len(store.commit_log_queue.files) == files       # nothing created or written
        # the refused roll closed the file: committed whole, it gives its buffer back
        store.commit_service.commit(0)
        assert store.transient_pool.available == 1
        r2 = store.put_message(Message("Pool", body))
        assert r2.ok and r2.queue_offset == last_ok.queue_offset + 1
        store.commit_service.commit(0)
        assert bytes(store.look_message_by_offset(r2.commitlog_offset).body) == body


def test_sync_flush_does_not_use_the_pool(store_dir):
    with MessageStore.open(store_dir, _cfg(flush_disk_type="SYNC_FLUSH")) as store:
        assert store.transient_pool is None and store.commit_service is None
        r = store.put_message(Message("Pool", b"durable"))
        assert store.look_message_by_offset(r.commitlog_offset) is not None


def test_close_commits_and_flushes_everything(store_dir):
    with MessageStore.open(store_dir, _stalled()) as store:
        offs = [store.put_message(Message("Pool", b"%d" % i)).commitlog_offset for i in range(50)]
        assert store.look_message_by_offset(offs[0]) is None
    assert not os.path.exists(os.path.join(store_dir, "abort"))
    with MessageStore.open(store_dir, _cfg()) as store:
        assert [bytes(store.look_message_by_offset(o).body) for o in offs] == \
            [b"%d" % i for i in range(50)]
        assert store.get_max_offset_in_queue("Pool", 0) == 50


CHILD = textwrap.dedent("""
    import sys, threading
    from rocketstore import Message, MessageStore, StoreConfig
    root = sys.argv[1]
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=2000,
                      transient_store_pool_enable=True, transient_store_pool_size=2,
                      commit_interval_commit_log=20, commit_commit_log_thorough_interval=20)
    store = MessageStore.open(root, cfg)
    lock = threading.Lock()
    def producer(t):
        i = 0
        while True:
            body = b"%d-%d-" % (t, i) + b"p" * ((t * 131 + i * 17) % 300)
            r = store.put_message(Message("Crash", body), t)
            if r.ok:
                with lock:
                    # the committed end right now: below it nothing may be lost
                    print(r.commitlog_offset, r.wrote_bytes, t, r.queue_offset, body.hex(),
                          store.commit_log.get_max_offset(), flush=True)
            i += 1
    for t in range(3):
        threading.Thread(target=producer, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def test_kill_9_with_the_pool_loses_only_uncommitted_bytes(store_dir, tmp_path, rand):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=2000)
    acked: dict[int, tuple[int, int, int, bytes]] = {}
    lost = 0
    for cycle in range(20):
        proc = subprocess.Popen([sys.executable, str(script), store_dir],
                                stdout=subprocess.PIPE, env=env, text=True)
        lines = [proc.stdout.readline()]
        deadline = time.monotonic() + rand.uniform(0.02, 0.2)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        proc.send_signal(signal.SIGKILL)
        rest = proc.communicate()[0]
        committed = 0
        for line in lines + rest.splitlines(keepends=True):
            if line.endswith("\n"):
                off, size, t, qoff, hexbody, comm = line.split()
                acked[int(off)] = (int(size), int(t), int(qoff), bytes.fromhex(hexbody))
                committed = max(committed, int(comm))
        with MessageStore.open(store_dir, cfg) as s:
            assert s.recovery["last_exit_ok"] is False
            end = s.commit_log.get_max_offset()
            assert end >= committed         # every committed byte survived the kill
            for off in sorted(acked):
                size, t, qoff, body = acked[off]
                m = s.look_message_by_offset(off)
                if off + size <= end:
                    assert m is not None and bytes(m.body) == body
                    assert (m.queue_id, m.queue_offset) == (t, qoff)
                else:
                    # lost with the process: only ever bytes that were never committed
                    assert off + size > committed
                    del acked[off]
                    lost += 1
            for t in range(3):
                n = s.get_max_offset_in_queue("Crash", t)
                assert [m.queue_offset for m in pull_all(s, "Crash", t)] == list(range(n))
    assert len(acked) > 200


def test_a_failed_commit_is_sticky_and_the_store_turns_read_only(store_dir):
    import errno

    from rocketstore.store._mapped import set_sync_hook
    cfg = _cfg(commit_interval_commit_log=20, commit_commit_log_least_pages=1)
    fail = {"on": False}

    def hook(op, path, off, n):
        if op == "commit" and fail["on"]:
            raise OSError(errno.EIO, "injected commit failure", path)

    store = MessageStore.open(store_dir, cfg)
    set_sync_hook(hook)
    try:
        ok = store.put_message(Message("Pool", b"before"))
        _wait(lambda: store.look_message_by_offset(ok.commitlog_offset) is not None)
        fail["on"] = True
        lost = store.put_message(Message("Pool", b"x" * 5000))     # wakes the commit: it fails
        _wait(lambda: store.commit_log.flush_error is not None)
        assert "injected commit failure" in str(store.commit_log.flush_error)
        r = store.put_message(Message("Pool", b"after"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "injected commit failure" in str(r.error)
        # the bytes that never reached the file are never shown to readers
        assert store.look_message_by_offset(lost.commitlog_offset) is None
        fail["on"] = False
        store.close()
    finally:
        set_sync_hook(None)
    assert os.path.exists(os.path.join(store_dir, "abort"))      # not a clean close
    with MessageStore.open(store_dir, _cfg()) as store:          # a restart recovers
        assert bytes(store.look_message_by_offset(ok.commitlog_offset).body) == b"before"
        assert store.look_message_by_offset(lost.commitlog_offset) is None
        assert store.put_message(Message("Pool", b"again")).ok
