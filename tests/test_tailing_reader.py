"""A read-only reader tails a writer that is killed (-9), restarted and runs retention: it
follows with no stall and no gap (issue 16 items 4 and 10).

The writer (a child process) puts ``"<queue>:<offset>"`` round-robin into four queues: each
body names the queue offset it must land at, so the reader checks every message it is handed. Retention deletes the oldest commit-log files now and then (forced); the reader may
skip offsets only when they were deleted before it read them, and must say so by its min
offset. After every restart the reader must see the writer's new messages."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.store.status import GetMessageStatus

QUEUES = 4
CFG = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=2000,
           message_index_enable=False)

WRITER = r"""
import sys, time
from rocketstore import Message, MessageStore, StoreConfig
root, cfg = sys.argv[1], StoreConfig(**eval(sys.argv[2]))
with MessageStore.open(root, cfg) as s:
    nxt = [s.get_max_offset_in_queue("Tail", q) for q in range(4)]
    print("up", sum(nxt), flush=True)
    i = 0
    while True:
        q = i % 4
        r = s.put_message(Message("Tail", b"%d:%d" % (q, nxt[q]) + b"." * 200), q)
        assert r.ok and r.queue_offset == nxt[q], (r, nxt[q])
        nxt[q] += 1
        i += 1
        if i % 3000 == 0:
            s.clean_now(force=True)     # retention: the oldest files go (100 ms apart)
        if i % 50 == 0:
            time.sleep(0.002)
"""


def _writer(root: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    errors = root + ".writer-stderr"
    with open(errors, "w") as err:
        p = subprocess.Popen([sys.executable, "-c", WRITER, root, repr(CFG)],
                             stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = p.stdout.readline()
    if not line.startswith("up"):
        p.wait()
        with open(errors) as f:
            raise AssertionError(f"the writer did not start: {f.read()[-3000:]}")
    return p


def _where(reader, cq, offset):
    unit = cq.get_unit(offset)
    if unit is None:
        return "no unit"
    mf = reader.commit_log_queue.find_mapped_file_by_offset(unit[0])
    files = [(f.file_name, f.inode, os.stat(f.path).st_ino if os.path.exists(f.path) else None,
              f.committed_pos) for f in reader.commit_log_queue.files[-4:]]
    return (unit, None if mf is None else mf.file_name, files,
            sorted(os.listdir(reader.commit_log_queue.store_path))[-3:])


def _soak(tmp_path, cycles: int, run_s: float) -> dict:
    root = str(tmp_path / "store")
    writer = _writer(root)
    reader = MessageStore.open(root, StoreConfig(**CFG), read_only=True)
    nxt = [0] * QUEUES
    stats = {"messages": 0, "restarts": 0, "skipped_by_retention": 0}
    try:
        for cycle in range(cycles):
            before = sum(nxt)
            deadline = time.monotonic() + run_s
            while time.monotonic() < deadline:
                for q in range(QUEUES):
                    r = reader.get_message("tail", "Tail", q, nxt[q], 32, timeout_ms=20)
                    if r.status in (GetMessageStatus.OFFSET_TOO_SMALL,
                                    GetMessageStatus.OFFSET_FOUND_NULL) and r.min_offset > nxt[q]:
                        # retention deleted them before we read them: an explained skip
                        stats["skipped_by_retention"] += r.min_offset - nxt[q]
                        nxt[q] = r.min_offset
                        continue
                    for m in r.messages:
                        want = b"%d:%d" % (q, nxt[q])
                        body = bytes(m.body)
                        assert m.queue_offset == nxt[q], \
                            f"queue {q}: gap, got offset {m.queue_offset} expecting {nxt[q]}"
                        assert body.startswith(want + b"."), (q, nxt[q], body[:20])
                        nxt[q] += 1
                        stats["messages"] += 1
            assert sum(nxt) > before, f"cycle {cycle}: the reader saw nothing new (stalled)"
            writer.send_signal(signal.SIGKILL)
            writer.wait()
            writer.stdout.close()
            writer = _writer(root)
            stats["restarts"] += 1
        # after the last restart: the reader catches up with everything the writer has
        time.sleep(run_s)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        with MessageStore.open(root, StoreConfig(**CFG), read_only=True) as fresh:
            final = [fresh.get_max_offset_in_queue("Tail", q) for q in range(QUEUES)]
        deadline = time.monotonic() + 60
        while nxt != final and time.monotonic() < deadline:
            for q in range(QUEUES):
                r = reader.get_message("tail", "Tail", q, nxt[q], 32, timeout_ms=50)
                for m in r.messages:
                    assert m.queue_offset == nxt[q]
                    nxt[q] += 1
        sq = next((q for q in range(QUEUES) if nxt[q] != final[q]), 0)
        cq = reader.consume_queues.find("Tail", sq)
        assert nxt == final, (f"the reader stopped at {nxt}; a fresh reader sees {final}; "
                              f"{[(mf.file_name, mf.committed_pos, mf.inode, os.stat(mf.path).st_ino) for mf in cq.mapped_file_queue.files[-2:]]} "
                              f"{reader.get_message('t', 'Tail', sq, nxt[sq], 1)} {_where(reader, cq, nxt[sq])}")
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        if not writer.stdout.closed:
            writer.stdout.close()
        reader.close()
    return stats


def test_tailing_reader_follows_kill_9_restarts_and_retention(tmp_path):
    stats = _soak(tmp_path, cycles=4, run_s=1.5)
    assert stats["restarts"] == 4 and stats["messages"] > 1000


@pytest.mark.stress
def test_tailing_reader_soak_stress(tmp_path):
    stats = _soak(tmp_path, cycles=40, run_s=2.0)
    assert stats["restarts"] == 40
