"""Damaged files never crash, hang or lie: bit flips, truncation and garbage in the commit
log, consume queues, index files and checkpoint. Opening, recovering and reading may raise
only rocketstore's errors (or OSError), and a message returned is always the one asked for."""
from __future__ import annotations

import os
import random

import pytest

from conftest import flip_bits
from rocketstore import Message, MessageStore, RocketStoreError, StoreConfig

CFG = dict(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=400,
           max_hash_slot_num=64, max_index_num=256)


def _build(root: str) -> dict[tuple[int, int], bytes]:
    sent = {}
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        for i in range(150):
            body = b"msg-%03d-" % i + b"x" * (i % 90)
            r = s.put_message(Message("C", body, tags="A" if i % 2 else "B", keys=f"k{i}"), i % 3)
            sent[(i % 3, r.queue_offset)] = body
        assert s.wait_dispatched(10)        # every queue and index file complete before damage
    return sent


def _files(root: str, sub: str) -> list[str]:
    d = os.path.join(root, sub)
    out = []
    for dirpath, _, names in os.walk(d):
        out += [os.path.join(dirpath, n) for n in names]
    return sorted(out)


def _damage(path: str, rnd: random.Random, how: str) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if how == "flip":
            flip_bits(f, rnd, 8, size)
        elif how == "garbage":
            pos = rnd.randrange(size)
            f.seek(pos)
            f.write(rnd.randbytes(min(512, size - pos)))      # replayable (the seed)
        elif how == "truncate":
            f.truncate(rnd.randrange(size))


def _read_everything(root: str, sent) -> None:
    with MessageStore.open(root, StoreConfig(**CFG)) as s:
        for q in range(3):
            offset = s.get_min_offset_in_queue("C", q)
            for _ in range(200):
                r = s.get_message("g", "C", q, offset, 32)
                for m in r.messages:
                    # never a wrong message: what comes back is what was put at that place
                    assert m.topic == "C" and m.queue_id == q
                    assert bytes(m.body) == sent[(q, m.queue_offset)]
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
        for i in range(0, 150, 7):
            for m in s.query_message("C", f"k{i}"):
                assert f"k{i}" in m.keys and m.topic == "C"


@pytest.mark.parametrize("sub", ["commitlog", "consumequeue", "index", "checkpoint"])
@pytest.mark.parametrize("how", ["flip", "garbage", "truncate"])
def test_damaged_files_never_crash_or_return_a_wrong_message(tmp_path, rand, sub, how):
    root = str(tmp_path / "store")
    sent = _build(root)
    targets = _files(root, sub) if sub != "checkpoint" else [os.path.join(root, "checkpoint")]
    for path in rand.sample(targets, min(3, len(targets))):
        _damage(path, rand, how)
    open(os.path.join(root, "abort"), "w").close()
    try:
        _read_everything(root, sent)
    except (RocketStoreError, OSError):
        pass    # refusing to open a damaged store is allowed; crashing or lying is not
