"""A user's first day (issue 23): the tools agree with the store they look at.

* ``verify`` and ``recover`` use the store's own delay table (``config/broker.properties``,
  written by the broker at start, or ``--delay-levels``), so a clean demo store verifies, and
  recover rebuilds the delayed messages' consume-queue units (their tags code is the delivery
  time) exactly as the broker wrote them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, check_rc: int | None = 0, env: dict[str, str] | None = None,
        cwd: str | Path = REPO) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    e.pop("ROCKETSTORE_TRACEBACK", None)
    e.pop("NAMESRV_ADDR", None)
    e.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "rocketstore", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def schedule_units(root: Path) -> dict[str, bytes]:
    """Every SCHEDULE_TOPIC_XXXX consume-queue file's bytes (units carry delivery times)."""
    base = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX"
    return {str(p.relative_to(base)): p.read_bytes().rstrip(b"\0")
            for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """``rocketstore demo --keep`` (small): one-second delay levels, a delayed message and
    retries (both through SCHEDULE_TOPIC_XXXX)."""
    d = tmp_path_factory.mktemp("demo") / "demo"
    run("demo", "--keep", "--dir", str(d), "--messages", "300", "--queues", "2",
        "--file-size", str(1 << 20))
    return d


# -- 1. the delay table ---------------------------------------------------------------------

def test_demo_store_verifies_clean(demo_store):
    assert schedule_units(demo_store), "the demo wrote no delayed message"
    props = (demo_store / "config" / "broker.properties").read_text()
    assert "messageDelayLevel=" + " ".join(["1s"] * 18) in props.splitlines()
    p = run("verify", str(demo_store), check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert p.stdout.rstrip().endswith(": OK")


def test_stat_names_the_delay_table(demo_store):
    doc = json.loads(run("stat", str(demo_store), "--json").stdout)
    assert doc["delay_levels"] == {"levels": " ".join(["1s"] * 18),
                                   "source": "config/broker.properties"}
    text = run("stat", str(demo_store)).stdout
    assert "delays" in text and "config/broker.properties" in text


def test_recover_keeps_delivery_times(demo_store, tmp_path):
    import shutil
    copy = tmp_path / "demo"
    shutil.copytree(demo_store, copy)
    before = schedule_units(copy)
    run("recover", str(copy))
    assert schedule_units(copy) == before
    run("verify", str(copy))


def test_rocketmq_fixture_verifies_clean(rocketmq_store):
    # RocketMQ 4.9.8 wrote it with its default levels and no broker.properties
    p = run("verify", rocketmq_store, check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:]
    doc = json.loads(run("stat", rocketmq_store, "--json").stdout)
    assert doc["delay_levels"]["source"] == "default"


@pytest.fixture(scope="module")
def custom_store(tmp_path_factory) -> Path:
    """A broker store written with a custom messageDelayLevel whose broker.properties is gone
    (as a RocketMQ broker started with -c elsewhere leaves it)."""
    from rocketstore import StoreConfig
    from rocketstore.broker import Broker, BrokerConfig
    from rocketstore.client import Message, Producer
    root = tmp_path_factory.mktemp("custom") / "store"
    levels = "3s 7s 2m 1h"
    with Broker.open(root, BrokerConfig(), StoreConfig(mapped_file_size_commit_log=1 << 20,
                                                       message_delay_level=levels)) as broker:
        p = Producer("pg", broker=broker).start()
        try:
            for i in range(20):
                p.send(Message("Later", b"x%d" % i, properties={"DELAY": str(1 + i % 4)}))
        finally:
            p.shutdown()
    assert f"messageDelayLevel={levels}" in (root / "config" / "broker.properties").read_text()
    (root / "config" / "broker.properties").unlink()
    return root


def test_custom_levels_without_a_record_need_the_option(custom_store):
    p = run("verify", str(custom_store), check_rc=1)
    assert "--delay-levels" in p.stdout
    p = run("verify", str(custom_store), "--delay-levels", "3s 7s 2m 1h", check_rc=None)
    assert p.returncode == 0, p.stdout[-3000:]
    doc = json.loads(run("stat", str(custom_store), "--json", "--delay-levels",
                         "3s 7s 2m 1h").stdout)
    assert doc["delay_levels"] == {"levels": "3s 7s 2m 1h", "source": "--delay-levels"}
    text = run("stat", str(custom_store)).stdout
    assert "--delay-levels" in text          # it cannot know: it says how to tell it


def test_recover_with_custom_levels(custom_store, tmp_path):
    import shutil
    copy = tmp_path / "store"
    shutil.copytree(custom_store, copy)
    before = schedule_units(copy)
    run("recover", str(copy), "--delay-levels", "3s 7s 2m 1h")
    assert schedule_units(copy) == before
    run("verify", str(copy), "--delay-levels", "3s 7s 2m 1h")


def test_bad_delay_levels_option_is_one_line(demo_store):
    p = run("verify", str(demo_store), "--delay-levels", "1s 5x", check_rc=2)
    assert "5x" in p.stderr and len(p.stderr.strip().splitlines()) == 1
