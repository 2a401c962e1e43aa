"""Read-only opening: a reader in this process follows a writer in another one.

The writer (a script written into tmp_path, run with ``sys.executable``) holds the store's
lock, puts messages with bodies derived from their index and rolls commit-log files of 4096
bytes and consume-queue files of 400 bytes. The reader opens the same directory with
``read_only=True`` (no lock taken, nothing written), then tails a queue by following
``next_begin_offset`` until it has seen every message, in order, byte for byte, including
those put after it opened and those in files created after it opened.

Waits use deadlines; no sleep is an assertion.
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocketstore import GetMessageStatus, Message, MessageStore, StoreConfig
from rocketstore.errors import StoreReadOnlyError

S = GetMessageStatus
REPO = Path(__file__).resolve().parent.parent
CONFIG = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=400)
DEADLINE_S = 60.0

WRITER = r"""
import sys
import time
from rocketstore import Message, MessageStore, StoreConfig

root = sys.argv[1]
cfg = StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=400)
if len(sys.argv) > 2:                       # allocation_extent (0: whole files, eager next file)
    cfg.allocation_extent = int(sys.argv[2])


def body(i):
    return (b"%06d:" % i) * (1 + (i * 7) % 40)


def settle(store):
    # every put dispatched, every file pre-allocation finished: the files are at rest
    deadline = time.monotonic() + 30
    while store.dispatch_behind_bytes() != 0:
        if time.monotonic() > deadline:
            raise SystemExit("dispatch did not catch up")
        time.sleep(0.001)
    store.allocator.wait_idle(30)


store = MessageStore.open(root, cfg)
print("OK", flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "put":                            # put TOPIC QID FROM TO
        topic, qid, lo, hi = args[0], int(args[1]), int(args[2]), int(args[3])
        for i in range(lo, hi):
            r = store.put_message(Message(topic, body(i), tags="even" if i % 2 == 0 else "odd"),
                                  qid)
            assert r.ok and r.queue_offset == i, (r, i)
            if topic == "Tail" and i % 3 == 0:
                store.put_message(Message("Other", bytes(i % 200)), i % 2)
            if i % 25 == 0:
                time.sleep(0.002)               # let a reader catch up now and then
    elif cmd == "first":                        # first TOPIC QID OFFSET: the queue's next offset
        store.commit_log.set_queue_offset(args[0], int(args[1]), int(args[2]))
    elif cmd == "restart":
        store.close()
        store = MessageStore.open(root, cfg)
    elif cmd == "exit":
        break
    settle(store)
    print("OK", flush=True)
store.close()
print("CLOSED", flush=True)
"""


def body(i: int) -> bytes:
    return (b"%06d:" % i) * (1 + (i * 7) % 40)


class Writer:
    """The writer process, driven by commands on its stdin; it answers each with "OK" once
    its files are at rest. Its stdout is read by a thread (readline has no timeout)."""

    def __init__(self, tmp_path: Path, root: str, extent: int | None = None) -> None:
        script = tmp_path / "writer.py"
        script.write_text(WRITER)
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        extra = [] if extent is None else [str(extent)]
        self.proc = subprocess.Popen([sys.executable, str(script), root, *extra], cwd=str(REPO), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        self.expect("OK")

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, word: str, timeout: float = DEADLINE_S) -> None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"writer did not say {word!r} within {timeout} s")
        if line != word:
            self.proc.kill()
            err = self.proc.stderr.read()
            pytest.fail(f"writer said {line!r}, expected {word!r}; stderr:\n{err}")

    def send(self, cmd: str) -> None:
        """Send a command without waiting for it to finish (``expect("OK")`` does)."""
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def do(self, cmd: str) -> None:
        self.send(cmd)
        self.expect("OK")

    def finish(self) -> None:
        self.send("exit")
        self.expect("CLOSED")
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=DEADLINE_S)
        err = self.proc.stderr.read()
        assert rc == 0, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass


def listing(root: str) -> dict[str, tuple]:
    """Every directory and file under root: size and mtime (ns) of files, a marker for dirs."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = ("dir",)
        for f in filenames:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


def stable_listing(root: str) -> dict[str, tuple]:
    """A listing that did not change over 100 ms (the writer's background threads, such as
    its file pre-allocation, may still be finishing)."""
    deadline = time.monotonic() + DEADLINE_S
    prev = listing(root)
    while True:
        time.sleep(0.1)
        cur = listing(root)
        if cur == prev:
            return cur
        assert time.monotonic() < deadline, "the writer's files never settled"
        prev = cur


def segment_files(root: str, *parts: str) -> list[str]:
    d = os.path.join(root, *parts)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def tail(ro, topic: str, qid: int, want: int, start: int = 0, tags=None,
         settled: bool = False) -> list:
    """Follow next_begin_offset until ``want`` messages were returned (or the deadline).

    ``settled``: the writer has finished (answered OK), so reaching the end of the queue
    ends the tail at once, with what it has.
    """
    got = []
    off = start
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < want:
        assert time.monotonic() < deadline, f"tail stuck at offset {off} with {len(got)}/{want}"
        r = ro.get_message("tailer", topic, qid, off, tags=tags, timeout_ms=0 if settled else 200)
        if r.status in (S.FOUND, S.NO_MATCHED_MESSAGE):
            assert r.next_begin_offset > off
            got.extend(r.messages)
            off = r.next_begin_offset
        else:
            assert r.status in (S.OFFSET_OVERFLOW_ONE, S.NO_MESSAGE_IN_QUEUE), r
            if settled:
                break
    return got


# -- tests ---------------------------------------------------------------------------------------

def test_read_only_open_of_missing_dir_raises(tmp_path):
    missing = tmp_path / "no-such-store"
    with pytest.raises(FileNotFoundError):
        MessageStore.open(str(missing), CONFIG, read_only=True)
    assert not missing.exists()


def test_read_only_tails_writer_in_another_process(tmp_path):
    root = str(tmp_path / "store")
    n_before, n_after = 60, 340
    n = n_before + n_after
    w = Writer(tmp_path, root)
    try:
        w.do(f"put Tail 0 0 {n_before}")
        before = stable_listing(root)
        assert "lock" in before and "abort" in before         # the writer is running
        with open(os.path.join(root, "lock"), "rb") as f:
            lock_bytes = f.read()

        ro = MessageStore.open(root, CONFIG, read_only=True)  # no StoreLockedError
        try:
            assert ro.read_only
            cl_files_at_open = segment_files(root, "commitlog")
            cq_files_at_open = segment_files(root, "consumequeue", "Tail", "0")
            assert ro.get_max_offset_in_queue("Tail", 0) == n_before
            assert ro.get_min_offset_in_queue("Tail", 0) == 0
            first = tail(ro, "Tail", 0, n_before, settled=True)
            assert [m.queue_offset for m in first] == list(range(n_before))
            assert [bytes(m.body) for m in first] == [body(i) for i in range(n_before)]
            r = ro.get_message("tailer", "Tail", 0, n_before)
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, n_before)
            r = ro.get_message("tailer", "Late", 3, 0)
            assert (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)
            assert ro.dispatch_behind_bytes() == 0

            # writes are refused and leave no trace
            with pytest.raises(StoreReadOnlyError):
                ro.put_message(Message("Tail", b"nope"), 0)
            with pytest.raises(StoreReadOnlyError):
                ro.put_messages([Message("Tail", b"nope")], 0)
            with pytest.raises(StoreReadOnlyError):
                ro.commit_offset("tailer", "Tail", 0, 5)
            assert ro.query_offset("tailer", "Tail", 0) == -1

            # opening and reading changed nothing (the writer is idle, waiting for a command)
            assert listing(root) == before
            with open(os.path.join(root, "lock"), "rb") as f:
                assert f.read() == lock_bytes

            # a long poll at the end is answered by the writer's next put
            waiter_out: dict = {}

            def waiter():
                t0 = time.monotonic()
                try:
                    waiter_out["r"] = ro.get_message("tailer", "Tail", 0, n_before,
                                                     timeout_ms=20_000)
                except BaseException as e:  # noqa: BLE001 - checked below
                    waiter_out["e"] = e
                waiter_out["t"] = time.monotonic() - t0

            th = threading.Thread(target=waiter, daemon=True)
            th.start()
            w.send(f"put Tail 0 {n_before} {n}")
            # a second reader opens while the writer is busy putting and rolling files
            ro_mid = MessageStore.open(root, CONFIG, read_only=True)
            th.join(DEADLINE_S)
            assert not th.is_alive()
            assert "e" not in waiter_out, waiter_out.get("e")
            assert waiter_out["r"].status is S.FOUND
            assert waiter_out["r"].messages[0].queue_offset == n_before
            assert waiter_out["t"] < 15.0              # woken by the put, not timed out

            # tail everything while the writer is still putting, including messages in files
            # created after the open
            rest = tail(ro, "Tail", 0, n_after, start=n_before)
            assert [m.queue_offset for m in rest] == list(range(n_before, n))
            for m in rest:
                assert bytes(m.body) == body(m.queue_offset), m.queue_offset
                assert m.tags == ("even" if m.queue_offset % 2 == 0 else "odd")
                assert m.topic == "Tail" and m.queue_id == 0
            mid = tail(ro_mid, "Tail", 0, n)
            assert [bytes(m.body) for m in mid] == [body(i) for i in range(n)]
            ro_mid.close()
            w.expect("OK")
            assert len(segment_files(root, "commitlog")) > len(cl_files_at_open)
            assert len(segment_files(root, "consumequeue", "Tail", "0")) > len(cq_files_at_open)
            new_cl = set(segment_files(root, "commitlog")) - set(cl_files_at_open)
            assert {m.commitlog_offset // 4096 * 4096 for m in rest} & {int(f) for f in new_cl}

            assert ro.get_max_offset_in_queue("Tail", 0) == n
            r = ro.get_message("tailer", "Tail", 0, n)
            assert r.status is S.OFFSET_OVERFLOW_ONE
            # a queue created after the reader opened
            w.do("put Late 3 0 68")
            late = tail(ro, "Late", 3, 68, settled=True)
            assert [bytes(m.body) for m in late] == [body(i) for i in range(68)]
            # tag filter, from the start, across every consume-queue file
            evens = tail(ro, "Tail", 0, n // 2, tags="even", settled=True)
            assert [m.queue_offset for m in evens] == list(range(0, n, 2))
            # other queues the writer filled
            for qid in (0, 1):
                cnt = len([i for i in range(n) if i % 3 == 0 and i % 2 == qid])
                assert ro.get_max_offset_in_queue("Other", qid) == cnt
            # store times through the read-only store
            for m in (rest[0], rest[-1], first[0]):
                ts, off = m.store_timestamp, m.queue_offset
                assert ro.get_message_store_timestamp("Tail", 0, off) == ts
                assert ro.get_offset_in_queue_by_time("Tail", 0, ts) <= off
                assert ro.get_offset_in_queue_by_time("Tail", 0, ts, "UPPER") >= off
        finally:
            ro.close()
        # bodies read through the read-only store outlive it
        assert bytes(rest[-1].body) == body(n - 1)
        w.finish()
    finally:
        w.kill()
    assert not os.path.exists(os.path.join(root, "abort"))       # the writer closed cleanly


@pytest.mark.parametrize("extent", [0, None], ids=["eager-next-file", "extents"])
def test_read_only_follows_writer_across_its_restart(tmp_path, extent):
    """The writer closes and reopens (a restart) while the reader stays open, then goes on
    putting into files it creates after the restart: the reader must still see every
    message. (With whole-file allocation the writer leaves its pre-allocated next commit-log
    file on disk at close; the reopen deletes it as past the end and later creates it again.
    With extents the next file appears only once the current one is nearly full.)"""
    root = str(tmp_path / "store")
    w = Writer(tmp_path, root, extent)
    ro = None
    try:
        w.do("put Tail 0 0 40")
        ro = MessageStore.open(root, CONFIG, read_only=True)
        files = segment_files(root, "commitlog")
        first = tail(ro, "Tail", 0, 40, settled=True)
        if extent == 0:
            # the writer's next file (pre-allocated, still empty) is there when the reader opens
            assert max(m.commitlog_offset for m in first) < int(files[-1])
        w.do("restart")
        w.do("put Tail 0 40 140")
        got = tail(ro, "Tail", 0, 100, start=40, settled=True)
        missing = sorted(set(range(40, 140)) - {m.queue_offset for m in got})
        assert missing == [], f"the reader skipped queue offsets {missing}"
        assert [m.queue_offset for m in got] == list(range(40, 140))
        bad = [m.queue_offset for m in got if bytes(m.body) != body(m.queue_offset)]
        assert bad == []
        # a reader opened now agrees
        with MessageStore.open(root, CONFIG, read_only=True) as ro2:
            assert [bytes(m.body) for m in tail(ro2, "Tail", 0, 140, settled=True)] == \
                [body(i) for i in range(140)]
        w.finish()
    finally:
        if ro is not None:
            ro.close()
        w.kill()


def test_read_only_min_offset_of_queue_created_after_open(tmp_path):
    """A queue the writer starts at offset 5 (filler units 0..4, docs/format.md §5.1) after the
    reader opened: the reader reports the same min offset as the writer and as a reader
    opened later, and answers offsets below it with OFFSET_TOO_SMALL."""
    root = str(tmp_path / "store")
    w = Writer(tmp_path, root)
    ro = None
    try:
        w.do("put Tail 0 0 3")
        ro = MessageStore.open(root, CONFIG, read_only=True)
        w.do("first F 0 5")
        w.do("put F 0 5 9")
        got = tail(ro, "F", 0, 4, start=5, settled=True)
        assert [bytes(m.body) for m in got] == [body(i) for i in range(5, 9)]
        with MessageStore.open(root, CONFIG, read_only=True) as later:
            assert later.get_min_offset_in_queue("F", 0) == 5
        assert ro.get_min_offset_in_queue("F", 0) == 5
        r = ro.get_message("g", "F", 0, 0)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_TOO_SMALL, 5)
        w.finish()
    finally:
        if ro is not None:
            ro.close()
        w.kill()


def test_read_only_open_changes_nothing(tmp_path):
    """Opening a closed store read-only, reading every queue and closing: the directory is
    byte-for-byte, size-for-size and mtime-for-mtime what it was; no abort, no lock."""
    root = str(tmp_path / "store")
    with MessageStore.open(root, CONFIG) as store:
        for i in range(120):
            store.put_message(Message("T", body(i), tags="x"), i % 3)
        store.commit_offset("g", "T", 0, 3)
    os.unlink(os.path.join(root, "lock"))          # left by the writer: gone must stay gone
    before = listing(root)
    assert "abort" not in before and "lock" not in before
    with MessageStore.open(root, CONFIG, read_only=True) as ro:
        assert ro.query_offset("g", "T", 0) == 3
        for qid in range(3):
            got = tail(ro, "T", qid, 40, settled=True)
            assert [bytes(m.body) for m in got] == [body(i) for i in range(qid, 120, 3)]
        ro.get_message("g", "Unknown", 0, 0)
        ro.get_message("g", "T", 0, 40, timeout_ms=50)
        ro.get_offset_in_queue_by_time("T", 1, 0)
    assert listing(root) == before


def test_read_only_open_of_empty_dir_creates_nothing(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with MessageStore.open(str(root), CONFIG, read_only=True) as ro:
        r = ro.get_message("g", "T", 0, 0, timeout_ms=50)
        assert (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)
        with pytest.raises(StoreReadOnlyError):
            ro.put_message(Message("T", b"x"), 0)
    assert list(root.iterdir()) == []


def test_read_only_follows_writer_started_after_open(tmp_path):
    """The reader opens an empty directory; the writer starts afterwards."""
    root = tmp_path / "store"
    root.mkdir()
    ro = MessageStore.open(str(root), CONFIG, read_only=True)
    w = None
    try:
        w = Writer(tmp_path, str(root))
        w.send("put Tail 0 0 100")
        got = tail(ro, "Tail", 0, 100)
        assert [m.queue_offset for m in got] == list(range(100))
        assert [bytes(m.body) for m in got] == [body(i) for i in range(100)]
        w.expect("OK")
        w.finish()
    finally:
        ro.close()
        if w is not None:
            w.kill()



def test_read_only_never_skips_units_the_writer_added_while_it_listed_files(tmp_path):
    """A reader scans the end of the queue's last file, then lists the directory for new files.
    If the writer filled that file and created the next one in between, the reader must not
    take the new file's start as the queue's end while it holds the old file short: the units
    it has not seen were answered OFFSET_FOUND_NULL with next_begin_offset past them, and a
    tailing consumer skipped them (seen in CI: a tail jumped from 176 to 180)."""
    root = str(tmp_path / "store")
    w = MessageStore.open(root, CONFIG)
    try:
        for i in range(75):                      # files of 20 units: the 4th holds 60..74
            w.put_message(Message("Mid", body(i)), 0)
        assert w.wait_dispatched(10)
        ro = MessageStore.open(root, CONFIG, read_only=True)
        try:
            assert ro.get_max_offset_in_queue("Mid", 0) == 75
            mfq = ro.consume_queues.find("Mid", 0).mapped_file_queue
            listing = mfq.refresh_files

            def writer_moves_on_first():
                # between the reader's scan of its last file and this listing
                for i in range(75, 81):
                    w.put_message(Message("Mid", body(i)), 0)
                assert w.wait_dispatched(10)
                return listing()
            mfq.refresh_files = writer_moves_on_first
            try:
                r = ro.get_message("tailer", "Mid", 0, 75)
            finally:
                del mfq.refresh_files
            assert r.status is S.FOUND and r.messages[0].queue_offset == 75, r
            got = tail(ro, "Mid", 0, 6, start=75, settled=True)
            assert [m.queue_offset for m in got] == list(range(75, 81))
            assert [bytes(m.body) for m in got] == [body(i) for i in range(75, 81)]
        finally:
            ro.close()
    finally:
        w.close()
