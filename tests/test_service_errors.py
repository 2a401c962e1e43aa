"""Names are validated at the API, and a service thread never dies silently: it logs, keeps
its error, the store reports it, and close() still completes (issue 16 item 3)."""
from __future__ import annotations

import os
import threading

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.errors import InvalidNameError
from rocketstore.store.topics import TopicConfig


@pytest.mark.parametrize("group,topic", [("bad\udc80", "T"), ("g", "T\udc80"), ("g\x00", "T"),
                                         ("g", "T\n")])
def test_commit_offset_refuses_names_that_cannot_be_stored(tmp_path, group, topic):
    root = str(tmp_path / "s")
    with MessageStore.open(root) as s:
        s.commit_offset("other", "T", 0, 42)
        with pytest.raises(InvalidNameError) as e:
            s.commit_offset(group, topic, 0, 7)
        assert repr(group if e.value.field == "group" else topic) in str(e.value)
        s.consumer_offset_manager.persist()
    assert not os.path.exists(os.path.join(root, "abort"))
    with MessageStore.open(root) as s:
        assert s.query_offset("other", "T", 0) == 42


def test_a_topic_config_name_that_cannot_be_stored_is_refused(tmp_path):
    with pytest.raises(InvalidNameError, match="topic"):
        TopicConfig("bad\udc80")
    with MessageStore.open(str(tmp_path / "s")) as s:
        s.update_topic_config(TopicConfig("Good"))
        assert s.topic_config_manager.get("Good") is not None


def test_a_failing_persist_thread_keeps_running_and_is_reported(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    s = MessageStore.open(root, StoreConfig(flush_consumer_offset_interval=10))
    mgr = s.consumer_offset_manager
    calls = threading.Semaphore(0)
    real = mgr._file.persist

    def broken(obj):
        calls.release()
        raise RuntimeError("simulated bug in persist")
    monkeypatch.setattr(mgr._file, "persist", broken)
    s.commit_offset("g", "T", 0, 1)
    assert calls.acquire(timeout=30) and calls.acquire(timeout=30)   # it ran, and again
    errors = s.service_errors()
    assert isinstance(errors.get("consumer_offset_persist"), RuntimeError)
    assert mgr._thread is not None and mgr._thread.is_alive()
    monkeypatch.setattr(mgr._file, "persist", real)
    s.commit_offset("g", "T", 0, 2)
    s.close()                           # persists now, removes abort
    assert not os.path.exists(os.path.join(root, "abort"))
    with MessageStore.open(root) as s:
        assert s.query_offset("g", "T", 0) == 2


def test_close_completes_when_the_last_persist_fails(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    s = MessageStore.open(root)
    s.commit_offset("g", "T", 0, 5)

    def broken(obj):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(s.consumer_offset_manager._file, "persist", broken)
    s.close()                           # does not raise; the store is closed and unlocked
    assert s.closed
    with MessageStore.open(root) as s2:  # the lock was released
        assert s2.recovery["last_exit_ok"] is False     # abort kept: something was not saved
