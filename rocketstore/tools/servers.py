"""Start ``rocketstore namesrv`` / ``rocketstore broker`` as processes, stop them after: the
benchmarks' servers and the tests' (``tests/servers.py`` re-exports this module).

The processes run ``python -m rocketstore`` from the directory holding the ``rocketstore``
package this process imported (a checkout, or site-packages), so they run the same code.
Each server prints ``rocketstore <command>: listening on HOST:PORT`` on stderr once it serves; the helpers wait for
that line, keep reading stderr on a thread (so a chatty server never blocks on a full pipe) and
terminate the process with SIGTERM, failing the test if it does not exit cleanly.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

# the directory holding the imported rocketstore package: the checkout's root when run from one
REPO = Path(__file__).resolve().parent.parent.parent


class ServerProcess:
    """``rocketstore ARGS`` in a child process, up once it printed its ready line."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 startup_timeout: float = 60.0, cwd: str | Path | None = None) -> None:
        self.args = args
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketstore", *args],
                                     stderr=subprocess.PIPE, text=True, cwd=cwd or REPO,
                                     env=dict(os.environ, **(env or {})))
        self.log: list[str] = []
        ready = threading.Event()
        ready_prefix = f"rocketstore {args[0]}: listening on"
        self.addr = ""

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if not ready.is_set() and line.startswith(ready_prefix):
                    self.addr = line.strip().rsplit(" ", 1)[1]
                    ready.set()
            ready.set()
        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(startup_timeout) or not self.addr:
            self.kill()
            raise RuntimeError(f"rocketstore {' '.join(args)} did not start:\n{''.join(self.log)}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._pump.join(5)
        self._close_pipe()
        return rc

    def _close_pipe(self) -> None:
        if self.proc.stderr is not None and not self._pump.is_alive():
            self.proc.stderr.close()

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._pump.join(5)
        self._close_pipe()

    @property
    def output(self) -> str:
        return "".join(self.log)


def start_namesrv(tmp: Path, extra_args: list[str] | None = None,
                  cwd: str | Path | None = None) -> ServerProcess:
    """A NameServer on a free port, its KV config in ``tmp``."""
    return ServerProcess(["namesrv", "--listen", "127.0.0.1:0", "--kv-config",
                          str(tmp / "kvConfig.json"), *(extra_args or [])], cwd=cwd)


def start_broker(store: Path, namesrv: str, conf: dict[str, str] | None = None,
                 listen: str = "127.0.0.1:0", name: str = "broker-a",
                 cwd: str | Path | None = None) -> ServerProcess:
    """A broker on ``store`` registering with ``namesrv``; ``conf``: broker.conf's keys."""
    args = ["broker", str(store), "--namesrv", namesrv, "--listen", listen, "--broker-name", name]
    if conf:
        path = store.parent / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        args += ["-c", str(path)]
    return ServerProcess(args, cwd=cwd)
