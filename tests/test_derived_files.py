"""After a crash the index, consume queues and checkpoint are derived data: damaged ones are
dropped or truncated and rebuilt from the commit log, never a refusal to open (issue 11)."""
from __future__ import annotations

import os

import pytest

from pulling import pull_all
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import CorruptionError

CFG = dict(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=200,
           max_hash_slot_num=16, max_index_num=32)


def _write(root: str) -> dict[int, list[bytes]]:
    bodies: dict[int, list[bytes]] = {0: [], 1: []}
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        for i in range(90):
            body = b"m%03d" % i + bytes(i)
            assert s.put_message(Message("D", body, keys=f"k{i}"), i % 2).ok
            bodies[i % 2].append(body)
    open(os.path.join(root, "abort"), "w").close()      # as if it had crashed
    return bodies


def _files(root: str, *parts: str) -> list[str]:
    d = os.path.join(root, *parts)
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def _resize(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.mark.parametrize("damage", [
    "cq-short", "cq-long", "cq-missing-middle", "cq-zeroed", "cq-missing-head",
    "cq-missing-head-rest-unwritten", "index-short", "index-long",
    "index-zeroed-header", "index-header-backwards", "checkpoint-short", "checkpoint-long", "checkpoint-empty"])
def test_open_after_a_crash_rebuilds_damaged_derived_files(tmp_path, damage):
    root = str(tmp_path / "s")
    bodies = _write(root)
    cq = _files(root, "consumequeue", "D", "0")
    index = _files(root, "index")
    assert len(cq) >= 4 and len(index) >= 3
    if damage == "cq-short":
        _resize(cq[1], 77)
    elif damage == "cq-long":
        _resize(cq[1], 260)
    elif damage == "cq-missing-middle":
        os.unlink(cq[1])
    elif damage == "cq-missing-head":
        os.unlink(cq[0])
    elif damage == "cq-missing-head-rest-unwritten":
        # a power cut: the first file's directory entry never synced, the second's did but
        # none of its units, the later ones never existed (found by the power-loss test: the
        # queue was rebuilt from its second file on, its first units left out for good)
        os.unlink(cq[0])
        _resize(cq[1], 0)
        _resize(cq[1], 200)
        for f in cq[2:]:
            os.unlink(f)
    elif damage == "cq-zeroed":
        _resize(cq[-1], 0)
        _resize(cq[-1], 200)
    elif damage == "index-short":
        _resize(index[0], 100)
    elif damage == "index-long":
        _resize(index[1], os.path.getsize(index[1]) + 4096)
    elif damage == "index-zeroed-header":
        with open(index[0], "r+b") as f:
            f.write(bytes(40))
    elif damage == "index-header-backwards":
        # one flipped bit makes the begin timestamp later than the end: every query by
        # time skipped the file (found by the corruption fuzz)
        with open(index[-1], "r+b") as f:
            f.write(b"\x40")
    else:
        _resize(os.path.join(root, "checkpoint"),
                {"checkpoint-short": 17, "checkpoint-long": 8192, "checkpoint-empty": 0}[damage])
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        for qid in (0, 1):
            assert [bytes(m.body) for m in pull_all(s, "D", qid)] == bodies[qid]
        for i in range(0, 90, 7):
            found = s.query_message("D", f"k{i}")
            assert [bytes(m.body) for m in found] == [bodies[i % 2][i // 2]]
    # and it closes cleanly: the next open takes the normal path with everything in place
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        assert s.recovery["last_exit_ok"]
        assert [bytes(m.body) for m in pull_all(s, "D", 0)] == bodies[0]


def test_a_wrong_sized_index_after_a_clean_close_is_refused(tmp_path):
    # no crash: the size names a geometry mismatch, which the user must hear about
    root = str(tmp_path / "s")
    _write(root)
    os.unlink(os.path.join(root, "abort"))
    index = _files(root, "index")
    _resize(index[0], 100)
    with pytest.raises(CorruptionError, match="index file is not"):
        MessageStore.open(root, StoreConfig(**CFG))


def test_a_damaged_index_header_after_a_clean_close_is_refused(tmp_path):
    root = str(tmp_path / "s")
    _write(root)
    os.unlink(os.path.join(root, "abort"))
    with open(_files(root, "index")[-1], "r+b") as f:
        f.write(b"\x40")
    with pytest.raises(CorruptionError, match="begin timestamp .* after end timestamp"):
        MessageStore.open(root, StoreConfig(**CFG))
    with MessageStore.open(root, StoreConfig(**CFG), read_only=True) as s:   # a reader reads
        assert s.get_max_offset_in_queue("D", 0) == 45


def test_a_damaged_last_unit_after_a_clean_close_does_not_stop_dispatch(tmp_path):
    # the store's furthest unit (queue 1's last) with a smaller size: the queues' end fell
    # inside that record, dispatch resumed there and stopped for good, so a new put was
    # never visible (found by the corruption fuzz)
    root = str(tmp_path / "s")
    _write(root)
    os.unlink(os.path.join(root, "abort"))
    last = _files(root, "consumequeue", "D", "1")[-1]
    with open(last, "r+b") as f:
        units = f.read()
        n = max(i for i in range(0, len(units), 20) if units[i + 8:i + 12] != bytes(4))
        f.seek(n + 8)
        f.write((47).to_bytes(4, "big"))
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        r = s.put_message(Message("D", b"after", keys="after"), 0)
        assert s.wait_dispatched(10, until=r)
        assert [bytes(m.body) for m in s.get_message("g", "D", 0, 45, 4).messages] == [b"after"]
        assert [bytes(m.body) for m in s.query_message("D", "after")] == [b"after"]
