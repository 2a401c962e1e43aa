"""MessageStore.put_message_async / put_messages_async: futures completed by the group-commit
service after each sync, never PUT_OK before the bytes are durable (issue 11 item 6)."""
from __future__ import annotations

import asyncio
import errno
import threading
import time

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import InvalidMessageError, StoreReadOnlyError
from rocketstore.store._mapped import set_sync_hook


@pytest.fixture(autouse=True)
def _no_hook():
    yield
    set_sync_hook(None)


def _sync_cfg(**kw) -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=1 << 20, flush_disk_type="SYNC_FLUSH", **kw)


def _blocking_msync():
    """A sync hook holding every msync until released; says when one is waiting."""
    release, entered = threading.Event(), threading.Event()

    def hook(op, path, off, n):
        if op == "msync":
            entered.set()
            release.wait(10)
    return hook, release, entered


def test_sync_flush_future_completes_only_after_its_record_is_synced(store_dir):
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        hook, release, entered = _blocking_msync()
        set_sync_hook(hook)
        futs = [store.put_message_async(Message("T", b"m%d" % i), i % 2) for i in range(50)]
        assert entered.wait(5), "no sync was requested"
        time.sleep(0.05)
        assert not any(f.done() for f in futs), "acknowledged before the sync finished"
        release.set()
        results = [f.result(5) for f in futs]
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        flushed = store.commit_log.flushed_where
        assert all(r.commitlog_offset + r.wrote_bytes <= flushed for r in results)
        # one sync round completed many futures at once
        assert store.flush_ack.groups < len(futs)
        assert [r.queue_offset for r in results[::2]] == list(range(25))


def test_failed_sync_completes_futures_without_put_ok(store_dir):
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        assert store.put_message_async(Message("T", b"before")).result(5).ok

        def hook(op, path, off, n):
            if op == "msync":
                raise OSError(errno.EIO, "injected I/O error", path)
        set_sync_hook(hook)
        futs = [store.put_message_async(Message("T", b"x%d" % i)) for i in range(20)]
        results = [f.result(5) for f in futs]
        assert all(r.status is not PutMessageStatus.PUT_OK for r in results)
        assert all(r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT for r in results)
        assert all(isinstance(r.error, OSError) and r.error.errno == errno.EIO for r in results)
        set_sync_hook(None)
        # sticky: later puts are refused, still through a completed future
        r = store.put_message_async(Message("T", b"after")).result(5)
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_a_waiting_thread_completes_its_future_once_durable(store_dir):
    # result() waits for the sync itself and completes the future there (one thread
    # wake-up fewer than through the acknowledging thread); the acknowledging thread never
    # completes it a second time: the transform runs once, the callback once, PUT_OK only
    # once the record is durable
    calls = []

    def transform(r):
        calls.append(r.commitlog_offset)
        return r
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        where = []
        for i in range(300):
            f = store.put_message_async(Message("T", b"w%d" % i), transform=transform)
            f.add_done_callback(lambda f: where.append(threading.current_thread().name))
            r = f.result(5)
            assert r.status is PutMessageStatus.PUT_OK
            assert r.commitlog_offset + r.wrote_bytes <= store.commit_log.flushed_where
        time.sleep(0.2)                 # the acknowledging thread has seen every entry
        assert len(calls) == len(set(calls)) == 300
        assert len(where) == 300
        assert threading.current_thread().name in where


def test_a_waiter_racing_a_failing_sync_gets_no_put_ok(store_dir):
    with MessageStore.open(store_dir, _sync_cfg(sync_flush_timeout=200)) as store:
        hook, release, entered = _blocking_msync()
        set_sync_hook(hook)
        f = store.put_message_async(Message("T", b"late"))
        got = []
        t = threading.Thread(target=lambda: got.append(f.result(5)))
        t.start()
        assert entered.wait(5)
        t.join(10)
        assert got and got[0].status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        release.set()
        # the sync that then lands does not turn the answer given into PUT_OK
        time.sleep(0.1)
        assert f.result().status is PutMessageStatus.FLUSH_DISK_TIMEOUT


def test_slow_sync_answers_flush_disk_timeout(store_dir):
    with MessageStore.open(store_dir, _sync_cfg(sync_flush_timeout=100)) as store:
        hook, release, _ = _blocking_msync()
        set_sync_hook(hook)
        r = store.put_message_async(Message("T", b"slow")).result(5)
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        release.set()


def test_batch_future_and_asyncio(store_dir):
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        r = store.put_messages_async([Message("T", b"b%d" % i) for i in range(100)], 3).result(5)
        assert r.ok and r.msg_count == 100 and r.queue_offset == 0
        assert store.commit_log.flushed_where >= r.commitlog_offset + r.wrote_bytes

        async def main():
            return await asyncio.wrap_future(store.put_message_async(Message("T", b"aio"), 3))
        r2 = asyncio.run(main())
        assert r2.ok and r2.queue_offset == 100


def test_async_flush_and_wait_false_complete_at_once(store_dir):
    with MessageStore.open(store_dir, StoreConfig(mapped_file_size_commit_log=1 << 20)) as store:
        f = store.put_message_async(Message("T", b"a"))
        assert f.done() and f.result().ok
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        hook, release, _ = _blocking_msync()
        set_sync_hook(hook)
        f = store.put_message_async(Message("T", b"nowait", properties={"WAIT": "false"}))
        assert f.done() and f.result().ok
        release.set()


def test_close_completes_every_pending_future(store_dir):
    store = MessageStore.open(store_dir, _sync_cfg())
    futs = [store.put_message_async(Message("T", b"c%d" % i)) for i in range(200)]
    store.close()
    assert all(f.done() for f in futs)
    assert all(f.result().ok for f in futs)    # the close's last flush made them durable
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        assert store.get_max_offset_in_queue("T", 0) == 200


def test_bad_input_raises_and_read_only_refuses(store_dir):
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        with pytest.raises(InvalidMessageError):
            store.put_messages_async([], 0)
        assert store.put_message_async(Message("T", b"x")).result(5).ok
    ro = MessageStore.open(store_dir, _sync_cfg(), read_only=True)
    try:
        with pytest.raises(StoreReadOnlyError):
            ro.put_message_async(Message("T", b"x"))
    finally:
        ro.close()


def test_transform_gives_the_future_its_value_after_the_sync(store_dir):
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        hook, release, entered = _blocking_msync()
        set_sync_hook(hook)
        f = store.put_message_async(Message("T", b"x"), 1,
                                    transform=lambda r: ("answer", r.status, r.queue_offset))
        assert entered.wait(5)
        assert not f.done()
        release.set()
        assert f.result(5) == ("answer", PutMessageStatus.PUT_OK, 0)
        set_sync_hook(None)
        g = store.put_messages_async([Message("T", b"y")] * 3, 1, transform=lambda r: r.msg_count)
        assert g.result(5) == 3


def test_futures_fall_back_to_plain_futures_on_an_unknown_future_layout(store_dir, monkeypatch):
    """On a Python whose Future keeps its state elsewhere (checked once at import), puts hand
    out plain concurrent.futures.Futures and complete them through set_result: same results."""
    import concurrent.futures as cf

    from rocketstore.store import _commitlog
    assert _commitlog._FAST_FUTURES is True          # CPython 3.8-3.13: the fast path
    monkeypatch.setattr(_commitlog, "_FAST_FUTURES", False)
    with MessageStore.open(store_dir, _sync_cfg()) as store:
        futs = [store.put_message_async(Message("T", b"m%d" % i)) for i in range(20)]
        batch = store.put_messages_async([Message("T", b"b%d" % i) for i in range(5)])
        assert all(type(f) is cf.Future for f in futs + [batch])
        results = [f.result(5) for f in futs]
        assert [r.queue_offset for r in results] == list(range(20))
        assert batch.result(5).queue_offset == 20 and batch.result(5).msg_count == 5
        assert all(r.commitlog_offset + r.wrote_bytes <= store.commit_log.flushed_where
                   for r in results)
