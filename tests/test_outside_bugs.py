"""Bugs found from outside the store (issue 11 item 3), each pinned by a test."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.errors import InvalidConfigError, InvalidMessageError


def test_read_only_max_phy_offset_is_the_end_of_the_data(tmp_path):
    root = str(tmp_path / "s")
    cfg = StoreConfig(mapped_file_size_commit_log=65536)
    with MessageStore.open(root, cfg) as w:
        for i in range(2000):
            w.put_message(Message("T", b"x" * (i % 300)), 0)
        end = w.get_max_phy_offset()
        w.allocator.wait_idle(30)
        assert len(os.listdir(os.path.join(root, "commitlog"))) >= 6
        with MessageStore.open(root, cfg, read_only=True) as r:
            assert r.get_max_phy_offset() == end
            w.put_message(Message("T", b"more"), 0)
            assert r.get_max_phy_offset() == w.get_max_phy_offset()
    assert end % 65536 != 0
    with MessageStore.open(root, cfg, read_only=True) as r:
        assert r.get_max_phy_offset() == end + r.look_message_by_offset(end).store_size


@pytest.mark.parametrize("field", ["born_host", "store_host"])
def test_a_port_above_65535_is_refused(tmp_path, field):
    if field == "born_host":
        with pytest.raises(InvalidMessageError, match="65535"):
            Message("T", b"x", born_host="10.0.0.1:65536")
        assert Message("T", b"x", born_host="10.0.0.1:65535").born_host == "10.0.0.1:65535"
    else:
        with pytest.raises(InvalidConfigError, match="store_host"):
            StoreConfig(store_host="10.0.0.1:70000")
        StoreConfig(store_host="10.0.0.1:65535")


def test_topics_over_127_characters_can_be_refused_for_rocketmq_4_9(tmp_path):
    long_topic = "%RETRY%" + "g" * 130
    with MessageStore.open(str(tmp_path / "a")) as s:          # default: 5.x behaviour
        r = s.put_message(Message(long_topic, b"x"), 0)
        assert r.ok
        assert s.look_message_by_offset(r.commitlog_offset).topic == long_topic
    cfg = StoreConfig(auto_message_version_on_topic_len=False)
    with MessageStore.open(str(tmp_path / "b"), cfg) as s:
        r = s.put_message(Message(long_topic, b"x"), 0)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert "4.9" in str(r.error) and "auto_message_version_on_topic_len" in str(r.error)
        assert s.put_messages([Message(long_topic, b"x")], 0).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert s.put_message(Message("%RETRY%" + "g" * 120, b"x"), 0).ok
        assert s.get_max_phy_offset() > 0


def test_verify_says_which_records_rocketmq_4_9_cannot_read(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore.open(root) as s:
        s.put_message(Message("%RETRY%" + "g" * 130, b"x"), 0)
        s.put_message(Message("Short", b"x"), 0)
    out = subprocess.run([sys.executable, "-m", "rocketstore", "verify", root, "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["v2_topics"] == ["%RETRY%" + "g" * 130]
    text = subprocess.run([sys.executable, "-m", "rocketstore", "verify", root],
                          capture_output=True, text=True).stdout
    assert "RocketMQ 4.9" in text


def test_recover_keeps_a_correct_physic_msg_timestamp(tmp_path):
    root = str(tmp_path / "s")
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    with MessageStore.open(root, cfg) as s:
        for i in range(30):
            r = s.put_message(Message("T", b"y" * 100), i % 2)
        last_ts = s.look_message_by_offset(r.commitlog_offset).store_timestamp
    out = subprocess.run([sys.executable, "-m", "rocketstore", "recover", root,
                          "--commitlog-file-size", "4096"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(root, "checkpoint"), "rb") as f:
        physic, logics, index = struct.unpack(">qqq", f.read(24))
    assert physic == last_ts
    assert logics == last_ts
    with MessageStore.open(root, cfg) as s:
        assert s.recovery["last_exit_ok"]


def test_a_clean_close_deletes_the_pre_allocated_next_file(tmp_path):
    root = str(tmp_path / "s")
    # whole-file allocation: the next file is queued at every roll, as RocketMQ does
    cfg = StoreConfig(mapped_file_size_commit_log=4096, allocation_extent=0)
    with MessageStore.open(root, cfg) as s:
        for _ in range(10):
            s.put_message(Message("T", b"z" * 500), 0)     # rolls: the next file is queued
        assert s.allocator.wait_idle(30)
        used = len(s.commit_log_queue.files)
        assert len(os.listdir(os.path.join(root, "commitlog"))) == used + 1
    assert len(os.listdir(os.path.join(root, "commitlog"))) == used
    with MessageStore.open(root, cfg) as s:
        assert s.recovery["last_exit_ok"] and len(s.commit_log_queue.files) == used
