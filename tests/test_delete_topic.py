"""``MessageStore.delete_topic``: RocketMQ's deleteTopic (config, consume queues, queue offsets).

A topic created again under the deleted name starts empty at queue offset 0 -- right away, after
a clean reopen and after crash recovery, which re-dispatches the commit log (where the deleted
topic's records still are) and must not bring them back.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import InvalidNameError, StoreReadOnlyError
from rocketstore.store.topics import TopicConfig

CFG = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=40 * 20)


def _bodies(store, topic, qid):
    r = store.get_message("g", topic, qid, 0, 100)
    return [(m.queue_offset, bytes(m.body)) for m in r.messages]


def test_a_deleted_topic_is_gone_and_starts_again_at_zero(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        s.update_topic_config(TopicConfig("Gone", 2, 2))
        for i in range(30):
            s.put_message(Message("Gone", b"old-%d" % i, keys=f"k{i}"), i % 2)
            s.put_message(Message("Kept", b"kept-%d" % i), 0)
        assert s.wait_dispatched(10)
        assert s.delete_topic("Gone") == [0, 1]
        assert s.topic_config_manager.get("Gone") is None
        assert "Gone" not in s.list_topics() and "Kept" in s.list_topics()
        assert not os.path.exists(os.path.join(root, "consumequeue", "Gone"))
        assert s.get_max_offset_in_queue("Gone", 0) == 0
        assert _bodies(s, "Gone", 0) == []
        r = s.put_message(Message("Gone", b"new-0"), 0)
        assert r.queue_offset == 0
        assert s.wait_dispatched(10, until=r)
        assert _bodies(s, "Gone", 0) == [(0, b"new-0")]
        assert len(_bodies(s, "Kept", 0)) == 30        # other topics untouched
    # a clean reopen: the old records are still in the commit log, not in the queue
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        assert _bodies(s, "Gone", 0) == [(0, b"new-0")]
        assert _bodies(s, "Gone", 1) == []
        assert s.put_message(Message("Gone", b"new-1"), 0).queue_offset == 1
    # crash recovery re-dispatches the whole log: the deleted records stay deleted
    open(os.path.join(root, "abort"), "w").close()
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        assert not s.recovery["last_exit_ok"]
        assert s.recovery["redispatched_from"] == 0      # over the deleted records too
        assert _bodies(s, "Gone", 0) == [(0, b"new-0"), (1, b"new-1")]
        assert _bodies(s, "Gone", 1) == []
        assert len(_bodies(s, "Kept", 0)) == 30


def test_delete_topic_refuses_bad_names_and_read_only_stores(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        s.put_message(Message("T", b"x"), 0)
        with pytest.raises(InvalidNameError):
            s.delete_topic("bad\udc80")
        assert s.delete_topic("NeverThere") == []
    with MessageStore.open(root, StoreConfig(**CFG), read_only=True) as r:
        with pytest.raises(StoreReadOnlyError):
            r.delete_topic("T")


def test_verify_does_not_count_a_deleted_topics_records_as_missing_units(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        for i in range(10):
            s.put_message(Message("Gone", b"old-%d" % i), 0)
            s.put_message(Message("Kept", b"kept-%d" % i), 0)
        assert s.wait_dispatched(10)
        s.delete_topic("Gone")
        s.put_message(Message("Gone", b"new"), 0)
    out = subprocess.run([sys.executable, "-m", "rocketstore", "verify", root],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith(": OK")


def test_puts_racing_delete_topic_land_either_in_the_deleted_topic_or_the_new_one(tmp_path):
    """A put concurrent with ``delete_topic`` either is deleted with the topic or is the new
    topic's, at the offset it was given: never an old offset in the new queue (which would put
    fillers before it, and tell the producer an offset its consumers never see)."""
    import threading
    import time
    root = str(tmp_path / "s")
    # files large enough that dispatch keeps up with the producer (no file per 40 units)
    cfg = StoreConfig(mapped_file_size_commit_log=4 << 20, mapped_file_size_consume_queue=20 * 20_000)
    with MessageStore.open(root, cfg) as s:
        results: list = []
        stop = threading.Event()

        def produce():
            for i in range(300_000):                    # bounded: ~30 MB at most
                if stop.is_set():
                    break
                results.append(s.put_message(Message("Race", b"r-%d" % i), 0))
                if i % 64 == 0:
                    time.sleep(0)                       # let the deleting thread have the GIL
        t = threading.Thread(target=produce)
        t.start()
        deletions = 0
        try:
            while t.is_alive() and deletions < 10:
                s.delete_topic("Race")
                deletions += 1
                n = len(results)
                while len(results) < n + 100 and t.is_alive():
                    time.sleep(0.001)                   # puts land between deletions
        finally:
            stop.set()
            t.join(30)
        assert deletions == 10, deletions
        assert s.wait_dispatched(10)
        got = []
        off = 0
        while True:
            r = s.get_message("g", "Race", 0, off, 256)
            if not r.messages:
                break
            got.extend(r.messages)
            off = r.next_begin_offset
        assert got, "the puts after the last deletion are in the queue"
        # the queue holds offsets 0..n-1, each where its unit is, no fillers
        assert [m.queue_offset for m in got] == list(range(len(got)))
        assert s.get_max_offset_in_queue("Race", 0) == len(got)
        # ... and they are exactly the last puts, with the offsets the producer was told
        tail = results[-len(got):]
        assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in tail]
        assert [r.queue_offset for r in tail] == list(range(len(got)))
