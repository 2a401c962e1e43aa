"""AckFuture: the future of a durable put makes its Condition only when somebody needs it, and
stays a faithful concurrent.futures.Future (waiters, callbacks, cancel, wait, asyncio)."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._commitlog import AckFuture, complete_future, done_future, pending_future


def test_pending_future_completes_without_a_condition_when_nobody_touched_it():
    f = pending_future()
    assert isinstance(f, cf.Future) and not f.done()
    assert complete_future(f, 42) is True
    assert "_condition" not in f.__dict__           # the lock-free path was taken
    assert f.done() and f.result() == 42 and f.result(0) == 42
    assert f.exception() is None
    assert complete_future(f, 43) is False          # terminal
    assert f.result() == 42


def test_a_waiting_thread_is_woken():
    f = pending_future()
    got, started = [], threading.Event()

    def waiter():
        started.set()
        got.append(f.result(10))
    t = threading.Thread(target=waiter)
    t.start()
    started.wait(5)
    # the waiter may or may not have made the Condition yet: both orders must wake it
    assert complete_future(f, "v") is True
    t.join(10)
    assert not t.is_alive() and got == ["v"]


def test_waiters_racing_completion_never_time_out_or_miss():
    # many short races between result(timeout) in a thread and complete_future here
    errors = []
    for _ in range(300):
        f = pending_future()

        def waiter(f=f):
            try:
                if f.result(5) != "ok":
                    errors.append("wrong value")
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        t = threading.Thread(target=waiter)
        t.start()
        complete_future(f, "ok")
        t.join(10)
        assert not t.is_alive()
    assert errors == []


def test_callbacks_before_and_after_completion_run_once():
    f = pending_future()
    seen = []
    f.add_done_callback(lambda x: seen.append(("early", x.result())))
    assert complete_future(f, 7) is True           # a Condition exists now: set_result path
    f.add_done_callback(lambda x: seen.append(("late", x.result())))
    assert seen == [("early", 7), ("late", 7)]


def test_callbacks_need_no_condition():
    # a durable put's future carries the broker's and the producer's callbacks: they are
    # kept and run without building a threading.Condition per future
    f = pending_future()
    seen = []
    f.add_done_callback(lambda x: seen.append(("a", x.result())))
    f.add_done_callback(lambda x: seen.append(("b", x.result())))
    assert "_condition" not in f.__dict__
    assert complete_future(f, 5) is True
    assert "_condition" not in f.__dict__
    f.add_done_callback(lambda x: seen.append(("late", x.result())))
    assert seen == [("a", 5), ("b", 5), ("late", 5)]
    assert "_condition" not in f.__dict__
    assert complete_future(f, 6) is False and seen[-1] == ("late", 5)


def test_a_failing_callback_is_logged_and_the_others_run(caplog):
    f = pending_future()
    seen = []

    def bad(_):
        raise RuntimeError("boom")
    f.add_done_callback(bad)
    f.add_done_callback(lambda x: seen.append(x.result()))
    with caplog.at_level("ERROR", logger="concurrent.futures"):
        assert complete_future(f, 1) is True
    assert seen == [1]
    assert any("exception calling callback" in r.getMessage() for r in caplog.records)


def test_callbacks_kept_without_a_condition_run_on_the_other_completions():
    # set_exception, cancel and a waiter's Condition made after the callbacks were added:
    # every callback still runs exactly once
    f = pending_future()
    seen = []
    f.add_done_callback(lambda x: seen.append(type(x.exception()).__name__))
    f.set_exception(ValueError("x"))
    assert seen == ["ValueError"]
    g = pending_future()
    g.add_done_callback(lambda x: seen.append(x.cancelled()))
    assert g.cancel() is True
    assert seen == ["ValueError", True]
    h = pending_future()
    h.add_done_callback(lambda x: seen.append(x.result()))
    with pytest.raises(cf.TimeoutError):
        h.result(0.001)                         # makes the Condition
    assert "_condition" in h.__dict__
    assert complete_future(h, "w") is True
    assert seen == ["ValueError", True, "w"]


def test_callbacks_added_while_another_thread_completes_run_once():
    for _ in range(300):
        f = pending_future()
        seen = []
        go = threading.Event()

        def adder(f=f, seen=seen):
            go.wait(5)
            for i in range(20):
                f.add_done_callback(lambda x, i=i: seen.append(i))
        t = threading.Thread(target=adder)
        t.start()
        go.set()
        complete_future(f, 0)
        t.join(10)
        assert sorted(seen) == list(range(20))


def test_cancelled_future_is_not_completed():
    f = pending_future()
    assert f.cancel() is True
    assert complete_future(f, 1) is False
    assert f.cancelled() and f.done()
    with pytest.raises(cf.CancelledError):
        f.result(0)


def test_done_future_wait_as_completed_and_asyncio():
    d = done_future("x")
    assert d.done() and d.result() == "x" and not d.cancel()
    p = pending_future()
    threading.Timer(0.05, complete_future, (p, "y")).start()
    done, not_done = cf.wait([d, p], timeout=10)
    assert done == {d, p} and not not_done
    assert sorted(f.result() for f in cf.as_completed([d, p], timeout=10)) == ["x", "y"]

    async def main():
        q = pending_future()
        asyncio.get_running_loop().call_later(0.01, complete_future, q, "z")
        return await asyncio.wrap_future(d), await asyncio.wrap_future(q)
    assert asyncio.run(main()) == ("x", "z")


def test_unknown_attribute_still_raises():
    with pytest.raises(AttributeError):
        AckFuture().no_such_attribute  # noqa: B018


def test_puts_racing_close_all_complete(store_dir):
    """A put_message_async racing with close() gets a completed future (PUT_OK only when
    flushed), or an error; none is left pending."""
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, flush_disk_type="SYNC_FLUSH")
    store = MessageStore.open(store_dir, cfg)
    futs, stop = [], threading.Event()

    def producer():
        while not stop.is_set():
            try:
                futs.append(store.put_message_async(Message("T", b"m")))
            except Exception:  # noqa: BLE001 - the store closed under us
                return
    t = threading.Thread(target=producer)
    t.start()
    while len(futs) < 2000 and t.is_alive():
        threading.Event().wait(0.001)
    store.close()
    stop.set()
    t.join(10)
    assert futs and all(f.done() for f in futs)
    flushed = store.commit_log.flushed_where
    for f in futs:
        r = f.result(0)
        if r.status is PutMessageStatus.PUT_OK:
            assert r.commitlog_offset + r.wrote_bytes <= flushed
