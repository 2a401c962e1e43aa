"""Power loss at any instant, through the one sync function (tests/powerloss.py has the model).

A workload rolls every file kind -- commit log, consume queues, index -- and writes the
checkpoint and the metadata JSON files while the image records each sync; the power goes at
randomly sampled instants, and each crash state (lost sizes, lost directory entries and
renames, unsynced pages kept, dropped or torn) must open. Under sync flush every message a
put acknowledged before that instant must be there, byte for byte, by offset, in its queue at
its queue offset and by key; offsets and topic configs persisted before it must be kept. A
deliberately wrong mode (acknowledging before the sync) must make the check fail: the
harness has teeth.
"""
from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from dataclasses import dataclass

import pytest

from powerloss import DurableImage, Snapshot
from pulling import pull_all
from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._mapped import set_sync_hook
from rocketstore.store.topics import TopicConfig

# small files: the commit log rolls every ~30 messages, each consume queue every 20 units,
# the index every 31 messages (a key and a UNIQ_KEY each); the checkpoint and the consumer
# offsets are written several times a second
CFG = dict(mapped_file_size_commit_log=16384, mapped_file_size_consume_queue=400,
           max_hash_slot_num=16, max_index_num=64, flush_disk_type="SYNC_FLUSH",
           flush_interval_consume_queue=5, flush_consume_queue_least_pages=0,
           flush_consume_queue_thorough_interval=20)
QUEUES = 3


@dataclass
class Acked:
    offset: int
    queue_id: int
    queue_offset: int
    body: bytes
    key: str


def _run_workload(root: str, image: DurableImage, rnd: random.Random, wrong: bool,
                  messages: int = 150, retention: bool = False, **overrides) -> list[Acked]:
    acked: list[Acked] = []
    set_sync_hook(image.hook)
    try:
        with MessageStore.open(root, StoreConfig(**{**CFG, **overrides})) as store:
            store.commit_log.debug_ack_before_sync = wrong
            for i in range(messages):
                body = b"%04d:" % i + rnd.randbytes(rnd.randrange(0, 600))
                r = store.put_message(Message("Power", body, keys=f"k{i}"), i % QUEUES)
                if r.status is PutMessageStatus.PUT_OK:
                    acked.append(Acked(r.commitlog_offset, i % QUEUES, r.queue_offset, body, f"k{i}"))
                    with image.lock:
                        image.acked = len(acked)
                if i % 25 == 24:
                    # metadata JSON: each persist is durable when it returns
                    store.commit_offset("g", "Power", 0, i)
                    store.consumer_offset_manager.persist()
                    store.update_topic_config(TopicConfig(f"T{i}", read_queue_nums=4,
                                                          write_queue_nums=4))
                    with image.lock:
                        image.marks = {"offset": i, "topics": i}
            # every kind of file rolled while the image recorded (the index and consume
            # queues once dispatch, behind the commit service with the pool, caught up)
            assert store.wait_dispatched(30, until=r)
            assert len(store.commit_log_queue.files) >= 3
            assert len(store.index_service.files) >= 3
            assert all(len(q.mapped_file_queue.files) >= 2 for q in store.consume_queues.queues())
            if retention:
                # retention deletes the oldest commit-log files, then the consume-queue and
                # index files below the new minimum, while the power may go
                res = store.cleanup_service.run_once(force=True)
                assert res.commit_log_files >= 2 and res.consume_queue_files >= 1
            # the power goes no later than here: the close below syncs, but after the end
            image.snapshots.append(image.capture())
            set_sync_hook(None)
            store.commit_log.debug_ack_before_sync = False
            return acked
    finally:
        set_sync_hook(None)


def _check_state(dst: str, snap: Snapshot, acked: list[Acked], durable_end: int | None,
                 problems: list[str], label: str) -> None:
    with MessageStore.open(dst, StoreConfig(**{**CFG, "flush_disk_type": "ASYNC_FLUSH"})) as s:
        # what retention deleted is gone; everything from the log's minimum on must be served
        # (a deleted commit-log file that came back must bring its queues and index back too)
        lo = s.get_min_phy_offset()
        want = [a for a in acked[:snap.acked]
                if (durable_end is None or a.offset + len(a.body) <= durable_end)
                and a.offset >= lo]
        for a in want:
            m = s.look_message_by_offset(a.offset)
            if m is None or bytes(m.body) != a.body or m.queue_id != a.queue_id:
                problems.append(f"{label}: acknowledged message at {a.offset} lost or wrong")
                return
        for qid in range(QUEUES):
            mine = [a for a in want if a.queue_id == qid]
            if not mine:
                continue
            got = {m.queue_offset: bytes(m.body)
                   for m in pull_all(s, "Power", qid, mine[0].queue_offset)}
            for a in mine:
                if got.get(a.queue_offset) != a.body:
                    problems.append(f"{label}: queue {qid} offset {a.queue_offset} "
                                    f"({a.offset}) not served")
                    return
        for a in want[::7]:
            if not any(bytes(m.body) == a.body for m in s.query_message("Power", a.key)):
                problems.append(f"{label}: key {a.key} ({a.offset}) not found")
                return
        if "offset" in snap.marks and s.query_offset("g", "Power", 0) < snap.marks["offset"]:
            problems.append(f"{label}: persisted consumer offset {snap.marks['offset']} lost")
        if "topics" in snap.marks and s.topic_config_manager.get(f"T{snap.marks['topics']}") is None:
            problems.append(f"{label}: persisted topic config T{snap.marks['topics']} lost")


def _check_states(image: DurableImage, acked: list[Acked], rnd: random.Random, tmp_path,
                  per_snapshot: int, async_flush: bool = False) -> tuple[list[str], Counter]:
    """Open ``per_snapshot`` crash states of every snapshot; the problems, and counts of
    the states and of what they lost."""
    problems: list[str] = []
    totals: Counter = Counter()
    for si, snap in enumerate(image.snapshots):
        durable_end = image.durable_commit_log_end(snap) if async_flush else None
        for k in range(per_snapshot):
            dst = str(tmp_path / f"state-{si}-{k}")
            totals.update(image.crash_state(snap, dst, rnd,
                                            unsynced_share=rnd.choice([0.0, 0.3, 0.8, 1.0])))
            label = f"snapshot {si} (before {snap.op} #{snap.event}) state {k}"
            try:
                _check_state(dst, snap, acked, durable_end, problems, label)
            except Exception as e:   # noqa: BLE001 - a refusal to open is the finding
                problems.append(f"{label}: open failed: {type(e).__name__}: {e}")
            totals["states"] += 1
            shutil.rmtree(dst)
    return problems, totals


def _power_cuts(tmp_path, rnd, snapshots: int, per_snapshot: int, **overrides):
    root = str(tmp_path / "store")
    image = DurableImage(root, rnd, snapshots=snapshots)
    acked = _run_workload(root, image, rnd, wrong=False, **overrides)
    assert len(acked) == 150
    return _check_states(image, acked, rnd, tmp_path, per_snapshot)


def test_sync_flush_loses_no_acknowledged_message_at_any_instant(tmp_path, rand):
    problems, totals = _power_cuts(tmp_path, rand, snapshots=40, per_snapshot=6)
    assert totals["states"] == 41 * 6
    # the states did lose what the model says can be lost
    assert totals["entries_lost"] and totals["sizes_lost"] and totals["pages_torn"]
    assert problems == []


@pytest.mark.stress
@pytest.mark.parametrize("seed", range(4))
def test_sync_flush_power_cuts_stress(tmp_path, seed):
    # 4 runs x 101 instants x 3 states: 1,212 crash states
    problems, totals = _power_cuts(tmp_path, random.Random(7000 + seed), snapshots=100,
                                   per_snapshot=3)
    assert totals["states"] == 303
    assert problems == []


def test_retention_deletes_are_durable_at_any_instant(tmp_path, rand):
    # commit-log files deleted by retention must not come back after a power cut once their
    # consume-queue and index files are gone: every message from the log's minimum on stays
    # reachable by queue and by key
    root = str(tmp_path / "store")
    image = DurableImage(root, rand, snapshots=15)
    acked = _run_workload(root, image, rand, wrong=False, retention=True)
    problems, totals = _check_states(image, acked, rand, tmp_path, per_snapshot=4)
    assert totals["states"] == 16 * 4 and totals["entries_lost"]
    assert problems == []


def test_harness_catches_acknowledging_before_the_sync(tmp_path):
    # negative control: with acknowledgements sent before the data is synced, some crash
    # state must lose an acknowledged message (seeded: the check is reproducible)
    rnd = random.Random(20261122)
    root = str(tmp_path / "store")
    image = DurableImage(root, rnd, snapshots=12)
    acked = _run_workload(root, image, rnd, wrong=True)
    problems, _ = _check_states(image, acked, rnd, tmp_path, per_snapshot=2)
    assert any("lost or wrong" in p for p in problems), problems


def test_harness_loses_unsynced_directory_entries_and_sizes(tmp_path, rand):
    # the model itself: a file created and sized but never synced can vanish or come back
    # empty; a rename before its directory sync can be undone; synced state always stays
    root = tmp_path / "d"
    root.mkdir()
    image = DurableImage(str(root), rand)
    from rocketstore.store._mapped import fsync_dir
    (root / "synced").write_bytes(b"x" * 10)
    set_sync_hook(image.hook)
    try:
        fsync_dir(str(root))
        with open(root / "synced", "rb+") as f:
            os.fsync(f.fileno())
            image.hook("fsync", str(root / "synced"), 0, 10)
        (root / "new").write_bytes(b"y" * 5000)
        os.rename(root / "synced", root / "renamed")
    finally:
        set_sync_hook(None)
    snap = image.capture()
    seen = set()
    for k in range(40):
        dst = tmp_path / f"s{k}"
        image.crash_state(snap, str(dst), rand, unsynced_share=0.0)
        names = tuple(sorted(os.listdir(dst)))
        seen.add(names)
        for n in ("synced", "renamed"):
            if n in names:
                assert (dst / n).read_bytes() == b"x" * 10
        assert ("synced" in names) != ("renamed" in names)
        if "new" in names:
            assert (dst / "new").read_bytes() in (b"", bytes(5000))
    assert ("new", "renamed") in seen and ("synced",) in seen


def test_harness_keeps_a_renamed_files_synced_bytes(tmp_path, rand):
    # a file synced under a temporary name and renamed (how every commit-log file is made)
    # keeps what was synced when the power goes just before its first msync under the new
    # name; the inode-reuse rule must not take the rename for a deleted file
    root = tmp_path / "d"
    root.mkdir()
    image = DurableImage(str(root), rand, snapshots=1)
    tmp, final = root / "f.creating", root / "f"
    image.hook("create", str(tmp), 0, 0)
    tmp.write_bytes(b"z" * 8192)
    image.hook("allocate", str(tmp), 0, 8192)
    image.hook("fsync", str(tmp), 0, 0)
    image.hook("rename", str(final), 0, 8192)
    os.rename(tmp, final)
    image.hook("fsync_dir", str(root), 0, 0)
    image.snapshots.clear()
    image.want, image.events = 1, 0         # the next call is sampled: power goes before it
    with open(final, "r+b") as f:
        f.write(b"new")
    image.hook("msync", str(final), 0, 4096)
    snap = image.snapshots[0]
    assert snap.op == "msync"
    for k in range(20):
        dst = tmp_path / f"s{k}"
        image.crash_state(snap, str(dst), rand, unsynced_share=0.0)
        assert (dst / "f").read_bytes() == b"z" * 8192


@pytest.mark.parametrize("pool", [False, True], ids=["mmap", "transient-pool"])
def test_async_flush_loses_only_the_unflushed_window(tmp_path, rand, pool):
    # with the transient pool, bytes still in the write buffers never reached the files
    # (lost with the process), and what was committed and flushed must survive as without it
    root = str(tmp_path / "store")
    image = DurableImage(root, rand, snapshots=10)
    extra = dict(transient_store_pool_enable=True, transient_store_pool_size=2,
                 commit_interval_commit_log=3, commit_commit_log_least_pages=1) if pool else {}
    acked = _run_workload(root, image, rand, wrong=False, flush_disk_type="ASYNC_FLUSH",
                          flush_interval_commit_log=5, flush_commit_log_least_pages=0, **extra)
    assert len(acked) == 150
    problems, totals = _check_states(image, acked, rand, tmp_path, per_snapshot=3,
                                     async_flush=True)
    assert totals["states"] == 33
    assert problems == []
