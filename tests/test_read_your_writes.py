"""Read-your-writes (issue 15.4): ``wait_dispatched`` makes what was put visible to
``get_message``; without it a get right after a put may see nothing yet."""
from __future__ import annotations

import threading

import pytest

from rocketstore import (GetMessageStatus, InvalidMessageError, InvalidMessageTypeError, Message,
                         MessageStore, StoreClosedError, StoreConfig, StoreReadOnlyError,
                         TopicConfig)
from rocketstore.store.topics import PERM_READ

SMALL = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=2000,
             max_hash_slot_num=64, max_index_num=256)


def test_wait_dispatched_makes_the_put_visible(store_dir):
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as store:
        for i in range(50):
            r = store.put_message(Message("RYW", b"m%d" % i), queue_id=0)
            assert store.wait_dispatched(10) is True
            got = store.get_message("g", "RYW", 0, i, max_msgs=1)
            assert got.status is GetMessageStatus.FOUND
            assert bytes(got.messages[0].body) == b"m%d" % i
            assert store.get_max_offset_in_queue("RYW", 0) == i + 1
            assert got.messages[0].commitlog_offset == r.commitlog_offset


def test_a_stalled_dispatcher_times_out_then_catches_up(store_dir):
    """Hold the dispatcher's lock: the put is in the log, not yet in its queue."""
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as store:
        with store.dispatch_service.lock:
            r = store.put_message(Message("RYW", b"late"), queue_id=3)
            assert r.ok
            assert store.wait_dispatched(0.2) is False
            assert store.wait_dispatched(0.05, until=r) is False
            assert store.get_message("g", "RYW", 3, 0).status in (
                GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE)
            assert store.get_max_offset_in_queue("RYW", 3) == 0
        assert store.wait_dispatched(until=r) is True        # no timeout: waits as long as needed
        assert bytes(store.get_message("g", "RYW", 3, 0).messages[0].body) == b"late"


def test_wait_in_another_thread_wakes_when_dispatch_resumes(store_dir):
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as store:
        answers = []
        store.dispatch_service.lock.acquire()
        try:
            r = store.put_messages([Message("RYW", b"b%d" % i) for i in range(10)], queue_id=1)
            t = threading.Thread(target=lambda: answers.append(store.wait_dispatched(30, until=r)))
            t.start()
            t.join(0.2)
            assert t.is_alive() and answers == []
        finally:
            store.dispatch_service.lock.release()
        t.join(30)
        assert answers == [True]
        assert store.get_max_offset_in_queue("RYW", 1) == 10


def test_wait_with_the_transient_pool_covers_the_commit(store_dir):
    cfg = StoreConfig(**SMALL, transient_store_pool_enable=True, transient_store_pool_size=2,
                      commit_interval_commit_log=100)
    with MessageStore.open(store_dir, cfg) as store:
        r = store.put_message(Message("RYW", b"pooled"), queue_id=0)
        assert store.wait_dispatched(10, until=r) is True
        assert bytes(store.get_message("g", "RYW", 0, 0).messages[0].body) == b"pooled"


def test_a_store_that_caught_up_needs_no_wait(store_dir):
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as store:
        assert store.wait_dispatched(0) is True             # nothing put yet
        r = store.put_message(Message("RYW", b"x"))
        assert store.wait_dispatched(10, until=r) is True
        assert store.get_max_offset_in_queue("RYW", 0) == 1
        assert store.wait_dispatched(0) is True             # caught up: answers at once
        assert store.wait_dispatched(0, until=r) is True


def test_wait_dispatched_refuses_what_it_cannot_wait_for(store_dir):
    store = MessageStore.open(store_dir, StoreConfig(**SMALL))
    store.update_topic_config(TopicConfig("Closed", perm=PERM_READ))
    refused = store.put_message(Message("Closed", b"x"))
    assert not refused.ok
    with pytest.raises(InvalidMessageError, match="until"):
        store.wait_dispatched(1, until=refused)
    with pytest.raises(InvalidMessageTypeError, match="until"):
        store.wait_dispatched(1, until="soon")  # type: ignore[arg-type]
    store.close()
    with pytest.raises(StoreClosedError):
        store.wait_dispatched(1)
    with MessageStore.open(store_dir, read_only=True) as reader:
        with pytest.raises(StoreReadOnlyError):
            reader.wait_dispatched(1)
