"""kill -9 while files are being created never leaves an empty or short file (issue 21 item 4).

A real writer process puts into tiny files, so it rolls commit-log and consume-queue files
constantly (and pre-allocates the next ones in the background); it is killed with SIGKILL at
random moments. Every file under commitlog/ and consumequeue/ must then have its full length
(RocketMQ 4.9.8's load refuses a store holding an empty or short one), and the next open
cleans up what a killed creation left and serves what was written.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import rocketstore
from rocketstore import MessageStore, StoreConfig

CL_SIZE = 16384
CQ_SIZE = 400
CFG = dict(mapped_file_size_commit_log=CL_SIZE, mapped_file_size_consume_queue=CQ_SIZE,
           max_hash_slot_num=16, max_index_num=64)

WRITER = """
import sys
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(**eval(sys.argv[2]))
with MessageStore.open(sys.argv[1], cfg) as store:
    print("ready", flush=True)
    i = 0
    while True:
        store.put_message(Message("T%d" % (i % 7), b"x" * 900, keys="k%d" % i), i % 3)
        i += 1
"""


def _bad_files(root: str) -> list[str]:
    bad = []
    for sub, size in (("commitlog", CL_SIZE), ("consumequeue", CQ_SIZE)):
        for dirpath, _, names in os.walk(os.path.join(root, sub)):
            for name in names:
                path = os.path.join(dirpath, name)
                n = os.path.getsize(path)
                if name.isdigit() and n != size:
                    bad.append(f"{os.path.relpath(path, root)}: {n} bytes")
    return bad


def _kill_cycles(tmp_path, rand, cycles: int) -> tuple[list[str], int]:
    root = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(rocketstore.__file__)),
         os.environ.get("PYTHONPATH", "")]))
    problems: list[str] = []
    leftovers = 0
    for k in range(cycles):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, root, repr(CFG)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(rand.uniform(0.0, 0.25))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        problems += [f"kill {k}: {b}" for b in _bad_files(root)]
        leftovers += sum(n.endswith(".creating") for _, _, names in os.walk(root) for n in names)
        if problems:
            break
    # the next open takes the store as it was left: temporary files gone, every file whole
    with MessageStore.open(root, StoreConfig(**CFG)) as store:
        assert store.get_max_phy_offset() > 0
    assert not [n for _, _, names in os.walk(os.path.join(root, "commitlog")) for n in names
                if n.endswith(".creating")]
    return problems, leftovers


def test_kill_9_never_leaves_an_empty_or_short_file(tmp_path, rand):
    problems, _ = _kill_cycles(tmp_path, rand, cycles=15)
    assert problems == []


@pytest.mark.stress
def test_kill_9_never_leaves_an_empty_or_short_file_stress(tmp_path, rand):
    problems, _ = _kill_cycles(tmp_path, rand, cycles=200)
    assert problems == []
