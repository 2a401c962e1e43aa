"""The fault-ahead thread: pages ahead of the writer are faulted in off the put path, bytes
are never touched, and the thread ends with the store."""
from __future__ import annotations

import threading
import time

from rocketstore import Message, MessageStore, StoreConfig


def _alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "FaultAheadService"]


def test_puts_are_faulted_ahead_and_read_back_intact(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=8 << 20)
    bodies = [bytes([i % 251]) * (100 + i % 50) for i in range(60_000)]
    with MessageStore.open(store_dir, cfg) as store:
        assert store.fault_ahead_service is not None and _alive()
        offsets = [store.put_message(Message("FA", b), i % 2).commitlog_offset
                   for i, b in enumerate(bodies)]
        # two 8 MiB files were written: the thread faults the second one too (it follows
        # the rolls), asynchronously, so wait for it
        assert 8 << 20 < offsets[-1] < 16 << 20
        deadline = time.monotonic() + 60
        while store.commit_log.faulted_bytes < 16 << 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.commit_log.faulted_bytes == 16 << 20
        for off, b in zip(offsets[::97], bodies[::97]):
            assert bytes(store.look_message_by_offset(off).body) == b
    assert not _alive()
    # nothing beyond the records was written: the end of the data is where the last put ended
    with MessageStore.open(store_dir, cfg, read_only=True) as store:
        assert store.get_max_offset_in_queue("FA", 0) + store.get_max_offset_in_queue("FA", 1) \
            == len(bodies)
        last = store.look_message_by_offset(offsets[-1])
        assert bytes(last.body) == bodies[-1]


def test_warmed_files_have_no_fault_ahead_thread(store_dir):
    with MessageStore.open(store_dir, StoreConfig(warm_maped_file_enable=True,
                                                  mapped_file_size_commit_log=1 << 20)) as store:
        assert store.fault_ahead_service is None
        store.put_message(Message("FA", b"x"))
        assert store.commit_log.faulted_bytes == 0
