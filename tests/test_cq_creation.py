"""A new consume queue costs dispatch no disk round trip (issue 22, demo latency).

A queue's first unit used to wait for the file's fsyncs and, worse, for a read-ahead window
of zeros faulted in by the first write through the mapping (8 MiB on this VM: 6-20 ms per new
queue, on the dispatch thread, so every consumer of every queue waited). Now the file is
created without syncs, its mapping is advised random while it is written, and the flush
service makes the file and its directories durable before the checkpoint can count on them.
"""
from __future__ import annotations

import os
import threading
import time

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store._mapped import set_sync_hook

import pytest


@pytest.fixture(autouse=True)
def _no_hook():
    yield
    set_sync_hook(None)


def _vm_flags(path: str) -> set[str]:
    """The VmFlags of this process's mapping of ``path`` (``rr``: read-ahead off)."""
    real = os.path.realpath(path)
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    found = None
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and "-" in parts[0] and parts[-1] == real:
            found = True
        elif found and line.startswith("VmFlags:"):
            return set(parts[1:])
        elif len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:
            found = None
    raise AssertionError(f"{real} is not mapped")


def _cq_dir(store_dir: str, topic: str, qid: int) -> str:
    return os.path.join(store_dir, "consumequeue", topic, str(qid))


def test_dispatch_creates_queue_files_without_syncs_and_flush_syncs_them_before_checkpoint(
        store_dir):
    events: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def hook(op, path, off, n):
        with lock:
            events.append((threading.current_thread().name, op, str(path)))

    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, flush_interval_consume_queue=50,
                      flush_consume_queue_thorough_interval=50)
    set_sync_hook(hook)
    with MessageStore.open(store_dir, cfg) as store:
        for q in range(4):
            store.put_message(Message("NewQ", b"x", tags="t"), queue_id=q)
        assert store.wait_dispatched(10)
        # wait for a thorough consume-queue flush that wrote the checkpoint after them
        deadline = time.monotonic() + 10
        while True:
            with lock:
                snap = list(events)
            ck = [i for i, (_, op, p) in enumerate(snap)
                  if p.endswith("checkpoint") and op in ("msync", "fsync")]
            cq_syncs = [i for i, (_, op, p) in enumerate(snap)
                        if op in ("fsync", "fsync_dir") and "consumequeue" in p]
            if ck and cq_syncs and ck[-1] > max(cq_syncs):
                break
            assert time.monotonic() < deadline, snap[-20:]
            time.sleep(0.02)
    cq_events = [(t, op, p) for t, op, p in snap if "consumequeue" in p]
    # dispatch created the files (create/allocate/rename) but synced none of them
    assert any(op == "rename" and t == "DispatchService" for t, op, p in cq_events), cq_events
    assert not [e for e in cq_events if e[0] == "DispatchService"
                and e[1] in ("fsync", "fsync_dir", "msync")], cq_events
    # the flush synced each new file and the directories holding new entries ...
    synced_files = {p for _, op, p in cq_events if op == "fsync"}
    synced_dirs = {p for _, op, p in cq_events if op == "fsync_dir"}
    for q in range(4):
        qdir = _cq_dir(store_dir, "NewQ", q)
        assert os.path.join(qdir, "0" * 20) in synced_files
        assert qdir in synced_dirs
    assert os.path.join(store_dir, "consumequeue", "NewQ") in synced_dirs
    assert os.path.join(store_dir, "consumequeue") in synced_dirs
    # ... and the flush service, not dispatch, did it (the loop above saw a checkpoint
    # written after them)
    assert {t for t, op, _ in cq_events if op in ("fsync", "fsync_dir")} == \
        {"FlushConsumeQueueService"}


def test_queue_file_being_written_has_read_ahead_off_until_full(store_dir):
    unit = 20
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20,
                      mapped_file_size_consume_queue=64 * unit)
    with MessageStore.open(store_dir, cfg) as store:
        store.put_message(Message("RA", b"x"), queue_id=0)
        assert store.wait_dispatched(10)
        first = os.path.join(_cq_dir(store_dir, "RA", 0), "0" * 20)
        assert "rr" in _vm_flags(first)
        for _ in range(64):                 # fills the first file, starts the second
            store.put_message(Message("RA", b"x"), queue_id=0)
        assert store.wait_dispatched(10)
        second = os.path.join(_cq_dir(store_dir, "RA", 0), f"{64 * unit:020d}")
        assert "rr" not in _vm_flags(first)     # full: read-ahead serves its readers again
        assert "rr" in _vm_flags(second)
        index_dir = os.path.join(store_dir, "index")
        for name in os.listdir(index_dir):
            assert "rr" in _vm_flags(os.path.join(index_dir, name))


def _thread_switches(name: str) -> int:
    """Voluntary context switches of this process's thread called ``name``."""
    native = {t.name: t.native_id for t in threading.enumerate()}[name]
    with open(f"/proc/self/task/{native}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_dispatch_polls_while_busy_and_sleeps_when_idle(store_dir):
    """While records come, dispatch polls every millisecond (no wake-up per put); once the
    store is idle it sleeps until a put arms it: an idle store costs no CPU."""
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=1 << 20)) as store:
        for i in range(200):
            store.put_message(Message("Idle", b"x%d" % i))
        assert store.wait_dispatched(10)
        time.sleep(0.2)                     # past the idle polls: asleep now
        before = _thread_switches("DispatchService")
        time.sleep(1.0)
        idle_switches = _thread_switches("DispatchService") - before
        assert idle_switches <= 3, f"{idle_switches} wake-ups in an idle second"
        # and a put still wakes it at once
        store.put_message(Message("Idle", b"late"))
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("Idle", 0) == 201
