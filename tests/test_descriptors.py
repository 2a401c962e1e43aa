"""Mapped files do not hold a file descriptor each (issue 16 item 5): a store with ~1,000
queues runs under the default ``ulimit -n 1024``."""
from __future__ import annotations

import os
import subprocess
import sys

from rocketstore.store._mapped import MappedFile


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_mapped_file_holds_no_descriptor(tmp_path):
    before = _open_fds()
    files = [MappedFile(str(tmp_path / f"{i:020d}"), 4096, create=True) for i in range(50)]
    assert _open_fds() == before
    for mf in files:
        mf.write_at(0, b"abc")
        mf.set_positions(3)
        mf.wrote_pos = mf.committed_pos = 3
        mf.flushed_pos = 0
        mf.flush()
        mf.allocate(0, 4096)
        mf.sync_metadata()
    assert _open_fds() == before
    with open(files[7].path, "rb") as f:
        assert f.read(3) == b"abc"
    for mf in files:
        mf.release()


def test_a_thousand_queues_under_the_default_descriptor_limit(tmp_path):
    root = str(tmp_path / "s")
    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=2000,
                  message_index_enable=False)
with MessageStore.open({root!r}, cfg) as s:
    for q in range(1200):
        assert s.put_message(Message("T%d" % (q % 3), b"x"), q // 3).ok
    s.dispatch_service.do_dispatch()
    for q in range(1200):
        r = s.get_message("g", "T%d" % (q % 3), q // 3, 0, 1)
        assert len(r.messages) == 1, (q, r.status)
    assert s.service_errors() == {{}}, s.service_errors()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
