"""tools/flush_bench.py: one configuration in, one JSON line out (the sweeps' unit)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "flush_bench.py"


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                         check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_sync_flush_run_reports_syncs_latency_and_a_small_window(tmp_path):
    r = _run("--flush", "SYNC_FLUSH", "--threads", "4", "--count", "400", "--dir", str(tmp_path),
             "--file-size", str(1 << 20))
    assert r["messages"] == 400 and r["flush"] == "SYNC_FLUSH"
    assert 0 < r["syncs"] <= 400
    lat = r["latency_us"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    assert r["bytes_per_sync"] > 0


def test_async_run_reports_its_unflushed_window(tmp_path):
    r = _run("--flush", "ASYNC_FLUSH", "--threads", "2", "--count", "20000", "--interval", "50",
             "--dir", str(tmp_path), "--file-size", str(16 << 20))
    assert r["messages"] == 20000
    assert r["unflushed_max_bytes"] > 0 and r["msgs_per_s"] > 0


def test_batched_sync_run_counts_messages_not_calls(tmp_path):
    r = _run("--flush", "SYNC_FLUSH", "--threads", "2", "--count", "2000", "--batch", "100",
             "--dir", str(tmp_path), "--file-size", str(4 << 20))
    assert r["messages"] == 2000 and r["batch"] == 100
    assert 0 < r["syncs"] <= 20            # at most one sync per batch call
    assert r["bytes_per_sync"] >= 100 * 100


def test_transient_pool_run_reports_commits_and_the_uncommitted_window(tmp_path):
    r = _run("--flush", "ASYNC_FLUSH", "--threads", "2", "--count", "20000", "--transient-pool",
             "--pool-size", "2", "--dir", str(tmp_path), "--file-size", str(1 << 20))
    assert r["pool_used"] is True and r["messages"] == 20000
    assert r["commits"] > 0 and r["uncommitted_max_bytes"] >= 0
    # with SYNC_FLUSH the pool is not used (RocketMQ: async flush only)
    r = _run("--flush", "SYNC_FLUSH", "--threads", "2", "--count", "200", "--transient-pool",
             "--dir", str(tmp_path), "--file-size", str(1 << 20))
    assert r["pool_used"] is False


def test_async_put_run_acknowledges_every_message(tmp_path):
    r = _run("--flush", "SYNC_FLUSH", "--threads", "1", "--count", "5000", "--async-put",
             "--window", "500", "--dir", str(tmp_path), "--file-size", str(4 << 20))
    assert r["messages"] == 5000 and r["async_put"] is True
    assert 0 < r["syncs"] < 5000            # groups, not a sync per put
    assert r["latency_us"]["p50"] > 0
