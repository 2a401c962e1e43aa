"""Shared fixtures: store directories, seeded randomness, small-file configs, the fixture copy."""
from __future__ import annotations

import gc
import mmap
import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

FIXTURE_ROOT = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "rocketmq-4.9.8"
if not FIXTURE_ROOT.exists():  # CI checks out main beside shared/ as well
    FIXTURE_ROOT = Path(os.environ.get("ROCKETSTORE_FIXTURES", "/work/shared/fixtures")) / "rocketmq-4.9.8"


# -- a runaway test process is stopped with a report, not killed silently by the OOM killer ----
# (a CI run once died of an out-of-memory kill with no trace of the test or thread that grew:
# past the limit, every thread's stack and the running test are printed, then the process
# exits; ROCKETSTORE_TEST_RSS_LIMIT_MB sets the limit, 0 turns the watch off)
_RSS_LIMIT_MB = int(os.environ.get("ROCKETSTORE_TEST_RSS_LIMIT_MB", "8000"))
_running_test = ["(collecting)"]
_config: list = []


def _rss_mb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def _watch_rss() -> None:
    import faulthandler
    import time
    while True:
        time.sleep(0.5)
        rss = _rss_mb()
        if rss > _RSS_LIMIT_MB:
            capman = _config[0].pluginmanager.getplugin("capturemanager") if _config else None
            if capman is not None:      # the real stderr again (pytest captures fd 2)
                capman.suspend_global_capture(in_=True)
            os.write(2, f"\nconftest: the test process holds {rss} MB (limit {_RSS_LIMIT_MB} "
                        f"MB) during {_running_test[0]}; every thread:\n".encode())
            faulthandler.dump_traceback(file=2, all_threads=True)
            os._exit(70)


def pytest_configure(config):
    _config.append(config)
    if _RSS_LIMIT_MB > 0 and os.path.exists("/proc/self/statm"):
        import threading
        threading.Thread(target=_watch_rss, name="conftest-rss-watch", daemon=True).start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _running_test[0] = item.nodeid


# -- a failed test's clients do not outlive it --------------------------------------------------
# (CI: a test failed before its own shutdown calls; its consumers kept pulling from stopped
# brokers and logged into later tests' captured stderr, failing those too)
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call" and outcome.get_result().failed:
        item.stash[_FAILED] = True


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _shut_clients_a_failed_test_left(request):
    from rocketstore.client.instance import ClientInstance
    before = set(ClientInstance._registry)
    yield
    if not request.node.stash.get(_FAILED, False):
        return
    for key, inst in list(ClientInstance._registry.items()):
        if key not in before:
            for client in [*inst.consumers.values(), *inst.producers.values()]:
                try:
                    client.shutdown()
                except Exception:       # a best effort after a failure already reported
                    pass


# -- a CLI command run in-process leaves no root handler behind ---------------------------------
# (setup_logging gives the root logger a handler on the sys.stderr of the moment, which is the
# test's capture; left there, a late log record -- py4j's at interpreter exit -- hits the
# closed capture and prints "--- Logging error ---" into the run's output)
@pytest.fixture(autouse=True)
def _root_logging_restored():
    import logging
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers and type(h).__module__.startswith("logging"):
            root.removeHandler(h)
            h.close()
    root.setLevel(level)


def pytest_addoption(parser):
    parser.addoption("--run-stress", action="store_true", default=False,
                     help="run the long stress variants (marker 'stress')")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-stress"):
        return
    skip = pytest.mark.skip(reason="stress variant: opt in with --run-stress")
    for item in items:
        if "stress" in item.keywords:
            item.add_marker(skip)


class SeededRandom(random.Random):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed

    def __repr__(self) -> str:
        return f"SeededRandom(seed={self.seed_value})"


@pytest.fixture
def rand(request) -> SeededRandom:
    """A seeded Random; the seed shows in failure output (set ROCKETSTORE_SEED to replay)."""
    # crc32, not hash(): str hashes change per process, and a failure must replay
    seed = int(os.environ.get("ROCKETSTORE_SEED", "0")) or zlib.crc32(request.node.nodeid.encode())
    return SeededRandom(seed)


@pytest.fixture
def page_size() -> int:
    return mmap.PAGESIZE


@pytest.fixture
def store_dir(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def inproc_broker(tmp_path):
    """An in-process broker (default settings, 4 MiB commit-log files), closed after."""
    from rocketstore import StoreConfig
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    b = Broker.open(tmp_path / "b", BrokerConfig(),
                    StoreConfig(mapped_file_size_commit_log=4 << 20))
    yield b
    if not b.closed:
        b.close()


@pytest.fixture
def small_config():
    """Commit-log files of 4 KiB: every test rolls files and writes blank records."""
    from rocketstore import StoreConfig
    return StoreConfig(mapped_file_size_commit_log=4096)


@pytest.fixture(scope="session")
def fixture_root() -> Path:
    assert FIXTURE_ROOT.exists(), f"RocketMQ fixture missing at {FIXTURE_ROOT}"
    return FIXTURE_ROOT


@pytest.fixture
def rocketmq_store(tmp_path, fixture_root) -> str:
    """A writable copy of the store written by RocketMQ 4.9.8 (opening may write)."""
    dst = tmp_path / "rmq-store"
    shutil.copytree(fixture_root / "store", dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return str(dst)


@pytest.fixture(scope="session")
def expected_lines(fixture_root) -> list[dict]:
    import json
    with open(fixture_root / "expected.jsonl") as f:
        return [json.loads(line) for line in f]


def flip_bits(f, rnd, count: int, span: int) -> None:
    """Flip one random bit in each of ``count`` random bytes among the first ``span`` bytes
    of the open file ``f`` (r+b)."""
    for _ in range(count):
        pos = rnd.randrange(span)
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ (1 << rnd.randrange(8))]))


def corrupt(path: str, pos: int, data: bytes) -> None:
    """Overwrite bytes of a file in place (leveldb's corruption helper)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the Spark tests (local[2], UI off, workers on this
    interpreter with this checkout importable)."""
    import sys
    from pyspark.sql import SparkSession
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    session = (SparkSession.builder.master("local[2]").appName("rocketstore-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true"))
    from rocketstore.errors import JvmBuildError
    from rocketstore.spark.jvmjar import configure
    try:
        session = configure(session)        # the JVM reader, format("rocketstore-jvm")
    except JvmBuildError:                   # no JDK: test_spark_jvm fails naming it; the rest runs
        pass
    session = session.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# a full disk (real tmpfs)

TMPFS_SIZE = 1024 * 1024


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs mounted for the test, unmounted afterwards."""
    mnt = tmp_path / "small_fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.fail("disk-full tests need root to mount a tmpfs (CI runs as root); "
                    f"running as uid {os.geteuid()}")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a {TMPFS_SIZE}-byte tmpfs at {mnt}: "
                    f"{r.stderr.strip() or r.stdout.strip()} (rc {r.returncode})")
    try:
        yield str(mnt)
    finally:
        gc.collect()       # drop any mapping still held by garbage
        r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, text=True)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
