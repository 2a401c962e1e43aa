"""``--log-level`` and ``--log-file`` on ``rocketstore namesrv`` and ``rocketstore broker``:
real server processes; the file gets the log lines (stderr only the ready line) and the level
filters what is written."""
from __future__ import annotations

import re
import subprocess
import sys

from servers import REPO, ServerProcess

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                  r"[\w.]+: ")


def levels(text: str) -> set[str]:
    return {m.group(1) for m in map(LINE.match, text.splitlines()) if m}


def broker(tmp_path, *extra: str) -> ServerProcess:
    # NameServer 127.0.0.1:1 refuses: registering logs a WARNING, serving an INFO line
    return ServerProcess(["broker", str(tmp_path / "store"), "--namesrv", "127.0.0.1:1",
                          "--listen", "127.0.0.1:0", *extra])


def test_broker_log_file_gets_the_lines_and_stderr_does_not(tmp_path):
    log = tmp_path / "broker.log"
    b = broker(tmp_path, "--log-file", str(log), "--log-level", "info")
    assert b.stop() == 0, b.output
    text = log.read_text()
    assert "register with NameServer 127.0.0.1:1 failed" in text
    assert f"rocketstore broker: listening on {b.addr}" in text
    assert "broker broker-a stopped" in text
    assert levels(text) == {"INFO", "WARNING"}
    # stderr: the ready line only (what tests/servers.py and scripts wait for), no log lines
    assert b.output.splitlines() == [f"rocketstore broker: listening on {b.addr}"], b.output


def test_broker_log_level_filters(tmp_path):
    log = tmp_path / "broker.log"
    b = broker(tmp_path, "--log-file", str(log), "--log-level", "WARN")
    assert b.stop() == 0, b.output
    text = log.read_text()
    assert "register with NameServer 127.0.0.1:1 failed" in text
    assert "serving" not in text and "stopped" not in text
    assert levels(text) == {"WARNING"}


def test_namesrv_log_file_and_level(tmp_path):
    log = tmp_path / "ns.log"
    ns = ServerProcess(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                        str(tmp_path / "kv.json"), "--log-file", str(log), "--log-level", "DEBUG"])
    assert ns.stop() == 0, ns.output
    text = log.read_text()
    assert f"NameServer {ns.addr} up" in text and f"NameServer {ns.addr} stopped" in text
    assert "INFO" in levels(text)

    quiet = tmp_path / "quiet.log"
    ns = ServerProcess(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                        str(tmp_path / "kv.json"), "--log-file", str(quiet),
                        "--log-level", "ERROR"])
    assert ns.stop() == 0, ns.output
    assert quiet.read_text() == ""          # up/stopped are INFO: filtered out
    # without --log-file the lines go to stderr, filtered the same way
    ns = ServerProcess(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                        str(tmp_path / "kv.json"), "--log-level", "info"])
    assert ns.stop() == 0
    assert f"NameServer {ns.addr} up" in ns.output and "INFO" in levels(ns.output)


def test_bad_log_options_are_clear_errors(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rocketstore", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    r = run("namesrv", "--listen", "127.0.0.1:0", "--log-level", "LOUD")
    assert r.returncode == 2 and "--log-level" in r.stderr and "'LOUD'" in r.stderr
    r = run("broker", str(tmp_path / "store"), "--listen", "127.0.0.1:0",
            "--log-file", str(tmp_path / "no-such-dir" / "b.log"))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"rocketstore broker: --log-file {tmp_path}/no-such-dir/b.log: "
                                "No such file or directory")
    assert not (tmp_path / "store").exists()       # nothing created for a broker that never ran


def test_the_ready_line_is_one_write_so_a_logging_thread_cannot_split_it(monkeypatch):
    """The ready line is an interface (tests/servers.py and users' scripts parse the address
    out of it). ``print`` writes the text and its newline separately, and a broker's
    registration thread logs to the same stderr meanwhile: a log line landing between the two
    made the address unparseable (CI, a broker restarted beside a logging thread)."""
    import asyncio
    import os
    import signal

    from rocketstore.cli.servers import _serve

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, s: str) -> int:
            self.writes.append(s)
            return len(s)

        def flush(self) -> None:
            pass

    class Server:
        addr = "127.0.0.1:4242"

        async def start(self) -> None:
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)

        async def stop(self) -> None:
            pass

    err = Recorder()
    monkeypatch.setattr(sys, "stderr", err)
    asyncio.run(_serve(Server(), "rocketstore broker: listening on {addr}"))
    assert "rocketstore broker: listening on 127.0.0.1:4242\n" in err.writes, err.writes
