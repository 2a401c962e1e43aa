"""Retention (docs/format.md §9): commit-log files by age, hour and disk usage, DISK_FULL, and the
consume queues and index following the commit log's min offset.

Stores use 4 KiB commit-log files and 3000-byte bodies, so every message fills one file and
the next put rolls: N puts make N files, the last one active. Ages come from back-dated
mtimes (``os.utime``); the service's clock is pinned to a local 04:30 (``delete_when``'s
default hour) or 05:30, and disk usage is injected, so nothing depends on the wall clock or
on filling a disk. The service thread's first run is an hour away unless a test wants it.
"""
from __future__ import annotations

import datetime
import gc
import math
import os
import threading
import time

import pytest

from rocketstore import (GetMessageStatus, Message, MessageStore, PutMessageStatus,
                         StoreConfig)
from rocketstore.store.cleanup import CleanupService, partition_used_ratio
from rocketstore.errors import DiskFullError, InvalidConfigError, StoreReadOnlyError

S = GetMessageStatus
FILE = 4096
BODY = 3000
HOUR_MS = 3_600_000


def config(**changes) -> StoreConfig:
    base = dict(mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=100,
                flush_disk_type="SYNC_FLUSH",
                delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0,
                clean_resource_first_delay=3_600_000, max_hash_slot_num=16, max_index_num=11)
    base.update(changes)
    return StoreConfig(**base)


def at_hour(hour: int) -> float:
    """Epoch seconds of the next local ``hour``:30 from now (within 24 h, never in the past):
    files written during the test are younger than a day at that time."""
    now = datetime.datetime.now()
    t = now.replace(hour=hour, minute=30, second=0, microsecond=0)
    if t <= now:
        t += datetime.timedelta(days=1)
    return t.timestamp()


def body(i: int) -> bytes:
    return (b"%05d" % i) * (BODY // 5)


class Usage:
    """Injected disk usage: one ratio for every partition."""

    def __init__(self, ratio: float = 0.5) -> None:
        self.ratio = ratio
        self.paths: list[str] = []

    def __call__(self, path: str) -> float:
        self.paths.append(path)
        return self.ratio


def open_store(root, cfg=None, hour=4, usage=None) -> tuple[MessageStore, Usage]:
    store = MessageStore.open(root, cfg or config())
    usage = usage or Usage()
    store.cleanup_service.disk_usage = usage
    clock_t = at_hour(hour)
    store.cleanup_service.clock = lambda: clock_t
    return store, usage


def fill(store, n, topic="TopicA", queues=1, start=0, dispatched=True):
    """Put ``n`` messages; with ``dispatched``, wait until they are in their queues and the
    index (retention keeps what dispatch has not reached)."""
    results = []
    for i in range(start, start + n):
        r = store.put_message(Message(topic, body(i), tags="T", keys=f"k{i}"), i % queues)
        assert r.status is PutMessageStatus.PUT_OK, r
        results.append(r)
    if dispatched:
        assert store.wait_dispatched(10)
    return results


def cl_names(root) -> list[str]:
    return sorted(os.listdir(os.path.join(root, "commitlog")))


def back_date(store, first_n: int, hours: float = 73) -> None:
    """Make the first ``first_n`` commit-log files ``hours`` older than the service's clock."""
    t = store.cleanup_service.clock() - hours * 3600
    for mf in store.commit_log_queue.files[:first_n]:
        os.utime(mf.path, (t, t))


# -- commit log ---------------------------------------------------------------------------------


def test_format_cleanup_scenario_ten_per_run_then_the_rest(store_dir):
    """docs/format.md's scenario: 55 one-message files, 15 older than file_reserved_time: a run at
    the delete_when hour deletes 10 (delete_file_batch_max), the next the other 5."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 55)
        assert len(store.commit_log_queue.files) == 55
        back_date(store, 15)
        r1 = store.clean_now()
        assert (r1.commit_log_files, r1.triggered_by, r1.clean_immediately) == (10, "time", False)
        assert store.get_min_phy_offset() == 10 * FILE
        assert cl_names(store_dir)[0] == "%020d" % (10 * FILE)
        r2 = store.clean_now()
        assert r2.commit_log_files == 5
        assert store.get_min_phy_offset() == 15 * FILE
        r3 = store.clean_now()
        assert r3.commit_log_files == 0
        on_disk = [n for n in cl_names(store_dir) if int(n) <= 54 * FILE]
        assert on_disk == ["%020d" % (k * FILE) for k in range(15, 55)]
        # the survivors read back, the deleted ones are gone
        assert store.look_message_by_offset(15 * FILE).body == body(15)
        assert store.look_message_by_offset(14 * FILE) is None
        assert [bytes(m.body) for m in store.iter_messages(0)][:1] == [body(15)]


def test_never_deletes_the_active_file(store_dir):
    store, _ = open_store(store_dir)
    with store:
        fill(store, 3)
        back_date(store, 3, hours=1000)         # the active file is "expired" too
        assert store.clean_now().commit_log_files == 2
        for _ in range(3):
            assert store.clean_now(force=True).commit_log_files == 0
        assert [mf.file_from_offset for mf in store.commit_log_queue.files] == [2 * FILE]
        # the log goes on where it was
        r = fill(store, 1, start=3)[0]
        assert r.commitlog_offset == 3 * FILE and r.queue_offset == 3


def test_forced_run_keeps_the_batch_limit_and_order(store_dir):
    store, _ = open_store(store_dir, config(delete_file_batch_max=4))
    with store:
        fill(store, 12)
        r = store.clean_now(force=True)
        assert (r.commit_log_files, r.triggered_by) == (4, "forced")
        assert store.get_min_phy_offset() == 4 * FILE


def test_stops_at_the_first_young_file(store_dir):
    """Never from the middle: an expired file after a young one stays."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 6)
        back_date(store, 4)
        young = store.commit_log_queue.files[1].path
        now = store.cleanup_service.clock()
        os.utime(young, (now, now))
        assert store.clean_now().commit_log_files == 1
        assert store.get_min_phy_offset() == FILE


def test_file_reserved_time_is_the_age_limit(store_dir):
    store, _ = open_store(store_dir, config(file_reserved_time=48))
    with store:
        fill(store, 5)
        back_date(store, 2, hours=49)
        back_date(store, 1, hours=50)
        mf = store.commit_log_queue.files[2]
        t = store.cleanup_service.clock() - 47 * 3600
        os.utime(mf.path, (t, t))
        assert store.clean_now().commit_log_files == 2


def test_delete_when_hour_gate_and_manual_trigger(store_dir):
    store, _ = open_store(store_dir, hour=5)
    with store:
        fill(store, 8)
        back_date(store, 6)
        r = store.clean_now()
        assert (r.commit_log_files, r.triggered_by) == (0, "")
        assert store.get_min_phy_offset() == 0
    # the manual request: the next 20 runs delete expired files whatever the hour
    root2 = store_dir + "-2"
    store, _ = open_store(root2, hour=5)
    with store:
        fill(store, 30)
        back_date(store, 25)
        store.execute_delete_files_manually()
        assert store.cleanup_service.manual_runs_left == 20
        r = store.clean_now()
        assert (r.commit_log_files, r.triggered_by) == (10, "manual")
        assert store.cleanup_service.manual_runs_left == 19
        assert store.clean_now().commit_log_files == 10
        assert store.clean_now().commit_log_files == 5
        assert store.cleanup_service.manual_runs_left == 17
        # manual deletion still respects the age: young files stay
        assert store.clean_now().commit_log_files == 0
        assert store.get_min_phy_offset() == 25 * FILE


def test_delete_when_list_opens_the_gate(store_dir):
    store, _ = open_store(store_dir, config(delete_when="03;05"), hour=5)
    with store:
        fill(store, 8)
        back_date(store, 6)
        r = store.clean_now()
        assert (r.commit_log_files, r.triggered_by) == (6, "time")


def test_disk_usage_ratios(store_dir):
    """75 %: expired files at any hour; 85 %: regardless of age; 90 %: DISK_FULL, puts
    refused until a run sees usage at or below 85 %."""
    store, usage = open_store(store_dir, hour=5)
    with store:
        fill(store, 40)
        back_date(store, 3)
        usage.ratio = 0.74
        assert store.clean_now().commit_log_files == 0
        usage.ratio = 0.76
        r = store.clean_now()
        assert (r.commit_log_files, r.triggered_by, r.clean_immediately) == (3, "space", False)
        assert r.disk_used_ratio == pytest.approx(0.76)
        assert store.clean_now().commit_log_files == 0          # the rest is young
        usage.ratio = 0.86
        r = store.clean_now()
        assert (r.commit_log_files, r.clean_immediately, r.disk_full) == (10, True, False)
        assert store.get_min_phy_offset() == 13 * FILE
        usage.ratio = 0.91
        r = store.clean_now()
        assert (r.commit_log_files, r.disk_full) == (10, True)
        assert store.disk_full
        refused = store.put_message(Message("TopicA", b"x"))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert isinstance(refused.error, DiskFullError)
        assert "disk full (91.0% used" in str(refused.error)
        assert store.put_messages([Message("TopicA", b"x")]).status is \
            PutMessageStatus.SERVICE_NOT_AVAILABLE
        # between the forcibly and the warning ratio the flag stays
        usage.ratio = 0.87
        assert store.clean_now().disk_full
        assert not store.put_message(Message("TopicA", b"x")).ok
        usage.ratio = 0.85
        r = store.clean_now()
        assert not r.disk_full and not store.disk_full
        after = store.put_message(Message("TopicA", body(40)))
        assert after.ok and after.queue_offset == 40
        assert store.wait_dispatched(10, until=after)
        assert store.get_message("g", "TopicA", 0, 40).messages[0].body == body(40)
        # the paths measured: the commit log's partition and the consume queues'
        assert os.path.join(store_dir, "commitlog") in usage.paths
        assert os.path.join(store_dir, "consumequeue") in usage.paths


def test_clean_forcibly_disabled_deletes_only_expired(store_dir):
    store, usage = open_store(store_dir, config(clean_file_forcibly_enable=False), hour=5)
    with store:
        fill(store, 10)
        back_date(store, 2)
        usage.ratio = 0.95
        r = store.clean_now()
        assert (r.commit_log_files, r.clean_immediately, r.disk_full) == (2, False, True)


def test_ratio_settings_are_clamped_and_respected(store_dir):
    cfg = config(disk_max_used_space_ratio=50, disk_space_clean_forcibly_ratio=60,
                 disk_space_warning_level_ratio=70)
    assert cfg.disk_ratios() == (0.5, 0.6, 0.7)
    assert config(disk_max_used_space_ratio=99, disk_space_clean_forcibly_ratio=99,
                  disk_space_warning_level_ratio=99).disk_ratios() == (0.95, 0.85, 0.90)
    assert config(disk_max_used_space_ratio=1, disk_space_clean_forcibly_ratio=1,
                  disk_space_warning_level_ratio=1).disk_ratios() == (0.10, 0.30, 0.35)
    store, usage = open_store(store_dir, cfg, hour=5)
    with store:
        fill(store, 6)
        usage.ratio = 0.65
        r = store.clean_now()
        assert (r.commit_log_files, r.clean_immediately, r.disk_full) == (5, True, False)
        usage.ratio = 0.71
        assert store.clean_now().disk_full


def test_bad_retention_settings_raise():
    with pytest.raises(InvalidConfigError, match="delete_when"):
        StoreConfig(delete_when="4am")
    with pytest.raises(InvalidConfigError, match="delete_when"):
        StoreConfig(delete_when="04;24")
    with pytest.raises(InvalidConfigError, match="clean_resource_interval"):
        StoreConfig(clean_resource_interval=0)
    with pytest.raises(InvalidConfigError, match="delete_file_batch_max"):
        StoreConfig(delete_file_batch_max=0)
    assert StoreConfig(delete_when="04; 16;").delete_when_hours() == frozenset({4, 16})


def test_default_disk_usage_reads_the_partition(tmp_path):
    """RocketMQ 4.9.8's ratio: used / (used + usable), root's reserved blocks in neither,
    rounded up to a whole percent."""
    st = os.statvfs(tmp_path)
    ratio = partition_used_ratio(str(tmp_path))
    used = st.f_blocks - st.f_bfree
    assert ratio == math.ceil(used * 100 / (used + st.f_bavail)) / 100
    assert partition_used_ratio(str(tmp_path / "missing")) == -1.0


# -- consume queues, index, readers ---------------------------------------------------------------


def test_consume_queues_and_index_follow_the_min_offset(store_dir):
    """Queue files whose units all point below the commit log's min go, min offsets move to
    the first unit still stored, readers below it get OFFSET_TOO_SMALL with the new min."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 5, topic="Old")                      # queue Old/0: units 0-4, one file
        fill(store, 50, topic="TopicA", queues=2, start=5)  # A/0 and A/1: 25 units each
        cq_dir = os.path.join(store_dir, "consumequeue", "TopicA", "0")
        assert len(os.listdir(cq_dir)) == 5              # 5 units (100 bytes) per file
        index_before = [(f.path, f.end_phy_offset) for f in store.index_service.files]
        assert len(index_before) > 3
        back_date(store, 25)
        assert store.clean_now().commit_log_files == 10
        r = store.clean_now()
        assert r.commit_log_files == 10
        min_phy = 20 * FILE
        assert r.min_phy_offset == min_phy
        # messages 0..19 went with the commit log; message i (from 5 on) is queue i % 2's
        # unit (i - 5) // 2: queue 0 now starts at message 20, queue 1 at message 21
        assert store.get_min_offset_in_queue("TopicA", 0) == 7
        assert store.get_min_offset_in_queue("TopicA", 1) == 8
        assert sorted(os.listdir(cq_dir)) == ["%020d" % (5 * 20), "%020d" % (10 * 20),
                                              "%020d" % (15 * 20), "%020d" % (20 * 20)]
        q1 = os.path.join(store_dir, "consumequeue", "TopicA", "1")
        assert sorted(os.listdir(q1))[0] == "%020d" % (5 * 20)
        # a queue all of whose messages are gone keeps its last file, empty of valid units
        assert store.get_min_offset_in_queue("Old", 0) == 5
        assert store.get_max_offset_in_queue("Old", 0) == 5
        old = store.get_message("g", "Old", 0, 0)
        assert (old.status, old.next_begin_offset) == (S.OFFSET_TOO_SMALL, 5)
        too_small = store.get_message("g", "TopicA", 0, 3)
        assert (too_small.status, too_small.next_begin_offset) == (S.OFFSET_TOO_SMALL, 7)
        assert (too_small.min_offset, too_small.max_offset) == (7, 25)
        found = store.get_message("g", "TopicA", 0, too_small.next_begin_offset, 4)
        assert found.status is S.FOUND
        # one consume-queue file per get (units 7-9 of file 5-9)
        assert [bytes(m.body) for m in found] == [body(i) for i in (20, 22, 24)]
        assert found.next_begin_offset == 10
        # index files whose last key points below the min are gone; the rest answer queries
        names = sorted(os.listdir(os.path.join(store_dir, "index")))
        kept = [p for p, end in index_before if end >= min_phy or p == index_before[-1][0]]
        assert names == sorted(os.path.basename(p) for p in kept)
        assert len(names) < len(index_before)
        assert all(f.end_phy_offset >= min_phy for f in store.index_service.files[:-1])
        assert [bytes(m.body) for m in store.query_message("TopicA", "k30")] == [body(30)]
        assert store.query_message("TopicA", "k7") == []


def test_offset_by_time_and_timestamps_after_cleanup(store_dir):
    store, _ = open_store(store_dir)
    with store:
        res = fill(store, 12)
        back_date(store, 5)
        store.clean_now()
        assert store.get_min_offset_in_queue("TopicA", 0) == 5
        assert store.get_message_store_timestamp("TopicA", 0, 2) == -1
        assert store.get_message_store_timestamp("TopicA", 0, 6) == \
            store.look_message_by_offset(res[6].commitlog_offset).store_timestamp
        assert store.get_offset_in_queue_by_time("TopicA", 0, 0) == 5


def test_reopen_after_cleanup_recovers(store_dir):
    """Files deleted at the front: a clean reopen and a crash recovery both work from there."""
    cfg = config()
    store, _ = open_store(store_dir, cfg)
    with store:
        fill(store, 20, queues=2)
        back_date(store, 12)
        store.clean_now()
        store.clean_now()
        assert store.get_min_phy_offset() == 12 * FILE
    for crashed in (False, True):
        if crashed:
            open(os.path.join(store_dir, "abort"), "w").close()
        with MessageStore.open(store_dir, cfg) as store:
            assert store.recovery["last_exit_ok"] is not crashed
            assert store.get_min_phy_offset() == 12 * FILE
            assert store.get_min_offset_in_queue("TopicA", 0) == 6
            assert store.get_min_offset_in_queue("TopicA", 1) == 6
            got = store.get_message("g", "TopicA", 0, 0)
            assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, 6)
            msgs = store.get_message("g", "TopicA", 1, 6, 32).messages
            assert [bytes(m.body) for m in msgs] == [body(i) for i in range(13, 20, 2)]
    with MessageStore.open(store_dir, cfg) as store:
        r = fill(store, 2, queues=2, start=20)
        assert [x.queue_offset for x in r] == [10, 10]
        assert store.get_max_offset_in_queue("TopicA", 0) == 11


def test_pinned_message_views_survive_deletion(store_dir):
    store, _ = open_store(store_dir)
    store.cleanup_service.retire_grace_s = 0.0          # release mappings at once
    with store:
        res = fill(store, 4)
        msg = store.look_message_by_offset(res[0].commitlog_offset)
        view = msg.body
        mf = store.commit_log_queue.files[0]
        store.clean_now(force=True)
        store.clean_now()                                # releases what the last run retired
        assert not os.path.exists(mf.path)
        assert store.commit_log_queue.retired_count == 0
        assert mf.is_mapped                              # the view pins it
        assert bytes(view) == body(0) and bytes(msg.body) == body(0)
        del msg, view
        gc.collect()
        assert not mf.is_mapped                          # the last view gone: unmapped
        assert store.look_message_by_offset(res[0].commitlog_offset) is None


def test_deleted_files_stay_mapped_for_the_grace_period(store_dir):
    """A thread that picked a file just before it was deleted still reads it; the mapping
    goes at a later run once the grace period passed."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 4)
        mf = store.commit_log_queue.files[0]
        store.clean_now(force=True)
        assert not os.path.exists(mf.path)
        assert mf.is_mapped and store.commit_log_queue.retired_count == 3
        assert mf.read_bytes(0, 4) != b"\0\0\0\0"
        store.cleanup_service.retire_grace_s = 0.0
        store.clean_now()
        assert not mf.is_mapped and store.commit_log_queue.retired_count == 0


def test_keeps_files_not_yet_flushed_or_dispatched(store_dir):
    """Data the dispatcher has not reached stays, whatever the retention says."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 3)                                  # one message per file: 0, 1, 2
        with store.dispatch_service.lock:               # dispatch stalls inside file 2
            fill(store, 3, start=3, dispatched=False)
            assert 2 * FILE < store.dispatch_core.reput_offset < 3 * FILE
            assert store.clean_now(force=True).commit_log_files == 2
        assert store.wait_dispatched(10)
        assert store.clean_now(force=True).commit_log_files == 3


def test_keeps_files_not_yet_flushed(store_dir):
    """With async flush, a file the flusher has not synced yet stays."""
    cfg = config(flush_disk_type="ASYNC_FLUSH", flush_interval_commit_log=3_600_000)
    store, _ = open_store(store_dir, cfg)
    with store:
        fill(store, 6)
        assert store.commit_log.flushed_where == 0
        assert store.clean_now(force=True).commit_log_files == 0
        store.commit_log.set_flushed(3 * FILE)          # as the flush service publishes it
        assert store.clean_now(force=True).commit_log_files == 3


def test_read_only_reader_follows_deletion(store_dir):
    """A read-only store on the same directory (as a reader in another process would be):
    files vanish under it; it drops them, moves its min offsets and answers OFFSET_TOO_SMALL;
    messages it read before keep their bytes. A reader opened after the cleanup starts from
    the new min."""
    store, _ = open_store(store_dir)
    with store:
        fill(store, 20)
        reader = MessageStore.open(store_dir, config(), read_only=True)
        with reader:
            before = reader.get_message("g", "TopicA", 0, 0, 4)
            assert before.status is S.FOUND
            back_date(store, 10)
            assert store.clean_now().commit_log_files == 10
            got = reader.get_message("g", "TopicA", 0, 2)
            assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, 10)
            assert reader.get_min_phy_offset() == 10 * FILE
            assert [bytes(m.body) for m in before] == [body(i) for i in range(4)]
            nxt = reader.get_message("g", "TopicA", 0, 10, 3)
            assert [bytes(m.body) for m in nxt] == [body(i) for i in range(10, 13)]
        with MessageStore.open(store_dir, config(), read_only=True) as late:
            assert late.get_min_offset_in_queue("TopicA", 0) == 10
            got = late.get_message("g", "TopicA", 0, 0)
            assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, 10)
            with pytest.raises(StoreReadOnlyError):
                late.clean_now()


# -- the service thread ------------------------------------------------------------------------


def test_service_runs_on_its_interval_and_stops_on_close(store_dir):
    store, usage = open_store(store_dir)
    fast = config(clean_resource_first_delay=0, clean_resource_interval=20)
    # a service of our own, so its clock and disk usage are set before its first run
    svc = CleanupService(store, fast, disk_usage=usage, clock=store.cleanup_service.clock)
    with store:
        fill(store, 14)
        back_date(store, 12)
        svc.start()
        deadline = time.monotonic() + 30
        while store.get_min_phy_offset() < 12 * FILE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.get_min_phy_offset() == 12 * FILE
        assert svc.runs >= 2 and svc.error is None
        assert svc.last_result is not None and svc.last_result.triggered_by == "time"
        svc.shutdown()
        assert [t.name for t in threading.enumerate()].count("CleanupService") == 1  # the store's
        runs = svc.runs
        with pytest.raises(Exception, match="closed"):
            svc.run_once()
        assert svc.runs == runs
    assert not any(t.name == "CleanupService" for t in threading.enumerate())


def test_shutdown_interrupts_the_sleep_between_deletions(store_dir):
    """A run sleeping delete_commit_log_files_interval between files stops at shutdown."""
    cfg = config(delete_commit_log_files_interval=3_600_000)
    store, _ = open_store(store_dir, cfg)
    fill(store, 5)
    back_date(store, 4)
    svc = store.cleanup_service
    done = []
    t = threading.Thread(target=lambda: done.append(svc.run_once()))
    t.start()
    while store.get_min_phy_offset() == 0:
        time.sleep(0.005)            # the first file is deleted, then the run sleeps
    store.close()                    # must not wait for the hour-long sleep
    t.join()
    assert done[0].commit_log_files == 1
    assert isinstance(svc, CleanupService)


def test_retention_under_concurrent_puts_dispatch_and_reads(store_dir, rand):
    """The real services (async flush, background dispatch) with producers, a reader following
    the queue and forced retention runs all at once: no roll is lost to a deletion, the
    files stay contiguous and match the directory, and every message from the min offset
    on reads back in order."""
    cfg = config(flush_disk_type="ASYNC_FLUSH", flush_interval_commit_log=5)
    store, _ = open_store(store_dir, cfg)
    store.cleanup_service.retire_grace_s = 0.05
    total = 200
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def produce():
        try:
            for i in range(total):
                assert store.put_message(Message("TopicA", body(i), keys=f"k{i}")).ok
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def clean():
        try:
            while not stop.is_set():
                store.clean_now(force=rand.random() < 0.7)
                time.sleep(0.001)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def read():
        try:
            offset = 0
            while not stop.is_set() or offset < store.get_max_offset_in_queue("TopicA", 0):
                r = store.get_message("g", "TopicA", 0, offset, 16, timeout_ms=20)
                if r.status is S.FOUND:
                    for m in r:
                        assert bytes(m.body) == body(m.queue_offset)
                        seen.append(m.queue_offset)
                elif r.status is S.OFFSET_OVERFLOW_ONE and stop.is_set():
                    break
                offset = r.next_begin_offset if r.status is not S.OFFSET_OVERFLOW_ONE else offset
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with store:
        threads = [threading.Thread(target=f) for f in (produce, clean, read)]
        for t in threads:
            t.start()
        threads[0].join()
        assert store.wait_dispatched(30)
        stop.set()
        for t in threads[1:]:
            t.join()
        assert errors == []
        files = store.commit_log_queue.files
        starts = [mf.file_from_offset for mf in files]
        assert starts == list(range(starts[0], starts[0] + FILE * len(files), FILE))
        assert starts[0] > 0                            # retention did delete
        names = [n for n in cl_names(store_dir) if int(n) <= starts[-1]]
        assert names == ["%020d" % s for s in starts]
        lo = store.get_min_offset_in_queue("TopicA", 0)
        assert store.get_max_offset_in_queue("TopicA", 0) == total
        assert [bytes(m.body) for m in store.iter_messages(0)] == [body(i) for i in range(lo, total)]
        assert seen == sorted(seen) and seen[-1] == total - 1


WRITER = r"""
import sys
from rocketstore import Message, MessageStore, StoreConfig
root, phase = sys.argv[1], sys.argv[2]
cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=100,
                  flush_disk_type="SYNC_FLUSH",
                  delete_commit_log_files_interval=0, clean_resource_first_delay=3_600_000,
                  max_hash_slot_num=16, max_index_num=11)   # the reader's config()
def body(i):
    return (b"%05d" % i) * 600
with MessageStore.open(root, cfg) as store:
    if phase == "fill":
        lo, hi = 0, 20
    else:
        r = store.clean_now(force=True)
        assert r.commit_log_files == 10, r
        lo, hi = 20, 25
    for i in range(lo, hi):
        assert store.put_message(Message("TopicA", body(i))).ok
print("DONE")
"""


def test_read_only_reader_in_another_process_copes_with_deletion(tmp_path):
    """The writer is another process: it deletes 10 files the reader has mapped and puts
    more; the reader keeps the bytes it holds, answers OFFSET_TOO_SMALL with the new min
    and follows the writer from there."""
    import subprocess
    import sys
    from pathlib import Path
    root = str(tmp_path / "store")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def writer(phase):
        out = subprocess.run([sys.executable, str(script), root, phase], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "DONE", out.stderr

    writer("fill")
    with MessageStore.open(root, config(), read_only=True) as reader:
        held = reader.get_message("g", "TopicA", 0, 0, 1).messages[0]
        assert reader.get_message("g", "TopicA", 0, 5, 1).messages[0].body == body(5)
        writer("clean")
        assert not os.path.exists(os.path.join(root, "commitlog", "%020d" % 0))
        assert bytes(held.body) == body(0)
        got = reader.get_message("g", "TopicA", 0, 3)
        assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, 10)
        offset, bodies = 10, []
        while offset < 25:
            r = reader.get_message("g", "TopicA", 0, offset, 32)
            assert r.status is S.FOUND, r
            bodies += [bytes(m.body) for m in r]
            offset = r.next_begin_offset
        assert bodies == [body(i) for i in range(10, 25)]
        assert reader.get_min_phy_offset() == 10 * FILE
