"""tools/bench_peers.py: a tiny run prints every mode's rows and ratios that match its rates.

sqlite3 is in the standard library, so one real peer always runs; lmdb runs when installed
(``pip install '.[bench]'``). Speed itself is judged by running the tool, not here.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "bench_peers.py"
ROW = re.compile(r"^(?P<mode>async|read|batched|sync)\s+(?P<store>\S+)\s+(?P<how>.+?)\s+"
                 r"(?:(?P<threads>\d+) thr\s+)?(?P<rate>[\d,]+) msgs/s"
                 r"(?:\s+(?P<ratio>[\d.]+)x)?(?P<note>.*)$")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--num", "3000", "--num-sync", "12",
                           "--sync-threads", "3", "--sizes", "100", "--dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=300)


def _rows(stdout: str) -> list[dict]:
    return [m.groupdict() for line in stdout.splitlines() if (m := ROW.match(line))]


def test_every_mode_has_rocketstore_and_the_peer_and_ratios_match_rates(tmp_path):
    out = _run(tmp_path, "--peers", "sqlite3")
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    seen = {(r["mode"], r["store"], r["threads"]) for r in rows}
    for mode in ("async", "read", "batched"):
        assert (mode, "rocketstore", None) in seen and (mode, "sqlite3", None) in seen
    for threads in ("1", "3"):
        assert ("sync", "rocketstore", threads) in seen and ("sync", "sqlite3", threads) in seen
    # each peer row's ratio is the first rocketstore row of its group over the peer's rate
    base = None
    for r in rows:
        rate = int(r["rate"].replace(",", ""))
        assert rate > 0
        if r["store"] == "rocketstore":
            if base is None or base[0] != (r["mode"], r["threads"]):
                base = ((r["mode"], r["threads"]), rate)
            assert r["ratio"] is None
        else:
            assert base[0] == (r["mode"], r["threads"])
            assert float(r["ratio"]) == pytest.approx(base[1] / rate, rel=0.02, abs=0.01)
    # the work directory is removed after the run
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("lmdb") is None,
                    reason="lmdb not installed (pip install '.[bench]')")
def test_lmdb_rows_and_the_target_lines(tmp_path):
    out = _run(tmp_path, "--peers", "lmdb")
    assert out.returncode == 0, out.stderr
    hows = {(r["mode"], r["how"]) for r in _rows(out.stdout) if r["store"] == "lmdb"}
    assert {("async", "put, txn per 1000"), ("batched", "putmulti, txn per 1000"),
            ("batched", "putmulti, one txn"), ("read", "cursor scan")} <= hows
    targets = out.stdout.split("-- targets (issue 7)")[1].splitlines()[1:]
    verdicts = [re.search(r"([\d.]+)x  (met|NOT met)$", t) for t in targets if t.strip()]
    # 3 lmdb targets; the two put targets also for rocketstore until readable, the read
    # target for get_message and for the bulk get_message_bodies
    assert len(verdicts) == 6 and all(verdicts)
    assert sum("get_message_bodies" in t for t in targets) == 1


def test_an_unknown_peer_is_refused_by_name(tmp_path):
    out = _run(tmp_path, "--peers", "sqlite3,redis")
    assert out.returncode == 2
    assert "unknown peer 'redis'" in out.stderr
