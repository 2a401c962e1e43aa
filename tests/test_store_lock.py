"""The writer's lock covers the commit-log directory too (issue 16 item 7)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import StoreLockedError


def test_two_roots_sharing_one_commit_log_directory_do_not_both_open(tmp_path):
    shared = str(tmp_path / "shared-commitlog")
    cfg = StoreConfig(mapped_file_size_commit_log=4096, store_path_commit_log=shared)
    with MessageStore.open(str(tmp_path / "a"), cfg) as a:
        r = a.put_message(Message("T", b"first"))
        with pytest.raises(StoreLockedError, match="shared-commitlog"):
            MessageStore.open(str(tmp_path / "b"), cfg)
        assert bytes(a.look_message_by_offset(r.commitlog_offset).body) == b"first"
    # released with the store: the other root opens now
    with MessageStore.open(str(tmp_path / "b"), cfg) as b:
        assert bytes(b.look_message_by_offset(r.commitlog_offset).body) == b"first"


def test_a_commit_log_directory_held_by_another_process_is_refused(tmp_path):
    shared = str(tmp_path / "shared-commitlog")
    code = f"""
import sys, time
from rocketstore import MessageStore, StoreConfig
s = MessageStore.open({str(tmp_path / 'a')!r}, StoreConfig(store_path_commit_log={shared!r},
                      mapped_file_size_commit_log=4096))
print("open", flush=True)
sys.stdin.read()
s.close()
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "open"
        with pytest.raises(StoreLockedError):
            MessageStore.open(str(tmp_path / "b"),
                              StoreConfig(store_path_commit_log=shared,
                                          mapped_file_size_commit_log=4096))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
        p.stdout.close()
