"""Run the code blocks of README.md and docs/*.md as a reader would (tests/test_docs_run.py).

Every fenced block of a page is run, in page order, in one working directory per page (so a
block may use a file or store an earlier block of the same page made), with ``HOME`` set to
that directory and the interpreter's ``bin`` (the venv's ``rocketstore``) first on ``PATH``.

How a block runs follows from its fence's info string, and from an optional marker, an HTML
comment on the line right above the fence (invisible when the page is rendered)::

    <!-- run: needs=namesrv,broker expect="route of Orders" -->

* ``python``: run as a script with this interpreter (the checkout first on ``PYTHONPATH``).
* ``sh`` / ``bash``: run by ``bash`` with ``set -euo pipefail``; stderr goes with stdout.
* ``console``: a transcript: each ``$ command`` runs as in ``sh``, and the lines under it up to
  the next ``$`` are the output it must print (stdout and stderr), in order.
* anything else (``properties``, ``yaml``, a plain fence) needs a marker saying what it is.

Marker words (``key=value``, values quoted as in a shell):

* ``file=NAME``: the block is a file other blocks use; it is written to ``NAME`` in the page's
  directory.
* ``needs=namesrv`` / ``needs=namesrv,broker``: the page's NameServer (and broker, with
  ``conf=FILE`` as its ``-c`` file, written by an earlier ``file=`` block) run before the block;
  one pair serves every block of the page. ``NAMESRV_ADDR`` holds the NameServer's address.
* ``servers``: each command of the block (``rocketstore namesrv`` / ``rocketstore broker``,
  which run in the foreground) starts in the background and must print its "listening on"
  line; they serve the page's later blocks and are stopped (SIGTERM, exit 0) at the page's end.
* ``synopsis``: a usage summary, not run: every ``--option`` (and ``-x``) a line shows must be
  in the ``--help`` of its ``rocketstore`` subcommand or ``tools/`` script, and every
  ``pip install '.[extra]'`` must name an extra of pyproject.toml.
* ``skip="reason"``: not run; only for what is not a program (a file layout, sample output, a
  signature list), and the reason says why.
* ``session=NAME``: ``python`` blocks with the same name run one after another in one
  interpreter (each with its own globals), as a reader pasting them into one Python would:
  the Spark blocks share the SparkSession the first one starts (``getOrCreate``). A session
  runs beside the page's other blocks (its blocks in page order, each once the ``servers``
  and ``file`` blocks above it have run), so its blocks must not use what other blocks
  make. For ``session=spark`` the interpreter launches Spark's JVM when the page starts (no
  SparkContext: the block's builder makes that).
* ``expect="text"`` (repeatable): the output must contain the text.
* ``exit=N``: the exit status the block must end with (default 0); ``timeout=S`` (default 60).

Addresses: every ``127.0.0.1:PORT`` (and ``localhost:PORT``) in a block is replaced by a free
port chosen once per page and port, so ``127.0.0.1:9876`` is the page's NameServer and
``127.0.0.1:10911`` its broker wherever they appear; other ports (a second broker's
``10921``) map the same way.

Expected output: a comment ``# -> TEXT`` at the end of a line (or on a line of its own) says
that a line of the output is ``TEXT`` (``...`` matches anything, surrounding blanks ignored);
such lines must appear in the order of the comments. A ``python``, ``sh`` or ``console`` block
must say what it prints (``# ->``, ``expect=`` or transcript lines); a block that prints
nothing worth checking is not an example.

A block runs in a process group of its own, killed when the block ends or times out, so a
server it leaves behind does not outlive it. A failure names the page, the block's line and
its output (tests/test_docs_run.py collects every failure of a page before reporting).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

FENCE = re.compile(r"^(`{3,})([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*run:(.*?)-->\s*$", re.S)
ADDR = re.compile(r"\b(127\.0\.0\.1|localhost):(\d{2,5})\b")
ARROW = re.compile(r"#\s*->\s?(.*)$")
KEYS = {"file", "needs", "conf", "servers", "synopsis", "skip", "expect", "exit", "timeout",
        "session"}
LANGS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh",
         "console": "console"}


class DocError(Exception):
    """A block that does not run as its page says (the message names page, line, output)."""


@dataclass
class Block:
    page: str          # path relative to the repository
    line: int          # 1-based line of the opening fence
    info: str          # the fence's info string
    text: str
    marker: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def one(self, key: str, default: str | None = None) -> str | None:
        values = self.marker.get(key)
        return values[-1] if values else default

    @property
    def kind(self) -> str:
        for key in ("skip", "file", "servers", "synopsis"):
            if key in self.marker:
                return key
        kind = LANGS.get(self.info)
        if kind is None:
            raise DocError(f"{self.where}: a ```{self.info} block needs a marker "
                           f"(<!-- run: file=NAME -->, synopsis or skip=\"why\"): "
                           f"the runner cannot tell what it is")
        return kind


def parse_marker(where: str, body: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for word in shlex.split(body):
        key, eq, value = word.partition("=")
        if key not in KEYS:
            raise DocError(f"{where}: unknown marker word {key!r} (known: {sorted(KEYS)})")
        out.setdefault(key, []).append(value if eq else "")
    for key in ("file", "conf", "needs", "session", "exit", "timeout", "expect"):
        if key in out and not all(out[key]):
            raise DocError(f"{where}: {key}= needs a value")
    if "skip" in out and len(out["skip"][-1].strip()) < 10:
        raise DocError(f"{where}: skip needs a reason (skip=\"why it is not a program\")")
    return out


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page with their markers."""
    page = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != fence:
            j += 1
        if j == len(lines):
            raise DocError(f"{page}:{start + 1}: fence never closed")
        block = Block(page, start + 1, info, "\n".join(lines[start + 1:j]) + "\n")
        # the marker: an HTML comment ending on the line right above the fence
        k = start - 1
        if k >= 0 and lines[k].rstrip().endswith("-->"):
            while k > 0 and "<!--" not in lines[k]:
                k -= 1
            m2 = MARKER.match("\n".join(lines[k:start]).strip())
            if m2:
                block.marker = parse_marker(block.where, m2.group(1))
        out.append(block)
        i = j + 1
    return out


def free_port() -> int:
    """A port whose neighbours are free too (a broker takes port - 2 for its VIP channel)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 1100 or port > 65000:
            continue
        socks = []
        try:
            for p in (port - 2, port - 1, port + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()


def expected_lines(text: str) -> list[str]:
    """The ``# -> TEXT`` comments of a block, in order."""
    out = []
    for line in text.splitlines():
        m = ARROW.search(line)
        if m:
            out.append(m.group(1).strip())
    return out


def line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")))


def check_lines(where: str, expected: list[str], output: str) -> None:
    lines = [ln.strip() for ln in output.splitlines()]
    pos = 0
    for want in expected:
        pat = line_pattern(want)
        for i in range(pos, len(lines)):
            if pat.fullmatch(lines[i]):
                pos = i + 1
                break
        else:
            raise DocError(f"{where}: expected a line {want!r} (after line {pos} of the "
                           f"output), not found; output:\n{output}")


class Server:
    """A ``rocketstore namesrv|broker`` process that prints 'listening on' when it serves."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], where: str) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.log: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if ": listening on " in line:
                    ready.set()
            ready.set()
        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not ready.wait(60) or self.proc.poll() is not None:
            self.kill()
            raise DocError(f"{where}: `{shlex.join(argv)}` did not start:\n{''.join(self.log)}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9
        self.pump.join(5)
        self.close_pipe()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.pump.join(5)
        self.close_pipe()

    def close_pipe(self) -> None:
        if self.proc.stderr is not None and not self.pump.is_alive():
            self.proc.stderr.close()


KERNEL = r"""
import contextlib, io, json, os, sys, traceback
for line in sys.stdin:
    req = json.loads(line)
    os.environ.clear()
    os.environ.update(req["env"])
    out = io.StringIO()
    rc, err = 0, ""
    with contextlib.redirect_stdout(out):
        try:
            with open(req["path"]) as f:
                code = compile(f.read(), req["path"], "exec")
            exec(code, {"__name__": "__main__", "__file__": req["path"]})
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            rc, err = 1, traceback.format_exc()
    with open(req["result"], "w") as f:
        json.dump({"rc": rc, "out": out.getvalue(), "err": err}, f)
    print("__docrunner_done__", req["result"], flush=True)
"""


class Session:
    """One interpreter running a page's ``session=NAME`` blocks in turn."""

    def __init__(self, cwd: Path, env: dict[str, str], scripts: Path) -> None:
        kernel = scripts / "kernel.py"
        kernel.write_text(KERNEL)
        self.log = scripts / "kernel.log"        # its stderr (Spark's log and progress bars)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(kernel)], cwd=cwd, env=env,
                                         text=True, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True)
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.pump: threading.Thread

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
            with self.cond:
                self.lines.append("")
                self.cond.notify_all()
        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()

    def submit(self, path: Path, env: dict[str, str]) -> str:
        """Queue a script; returns the line the interpreter prints when it is done."""
        result = path.with_suffix(".json")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"path": str(path), "env": env,
                                          "result": str(result)}) + "\n")
        self.proc.stdin.flush()
        return f"__docrunner_done__ {result}\n"

    def run(self, path: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str] | None:
        """(exit status, stdout, traceback), or None after ``timeout``."""
        result = path.with_suffix(".json")
        done = self.submit(path, env)
        with self.cond:
            if not self.cond.wait_for(lambda: done in self.lines or "" in self.lines, timeout):
                return None
        if done not in self.lines:
            return (self.proc.wait(), "", "the session's interpreter died:\n"
                    + self.log.read_text()[-3000:])
        r = json.loads(result.read_text())
        return r["rc"], r["out"], r["err"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.pump.join(5)
        if self.proc.stdout is not None and not self.pump.is_alive():
            self.proc.stdout.close()


class PageRun:
    """Runs one page's blocks in order; ``failures`` collects what did not hold."""

    def __init__(self, page: Path, tmp: Path) -> None:
        self.page = page
        self.blocks = blocks_of(page)
        self.work = tmp / "work"
        self.scripts = tmp / "scripts"
        self.work.mkdir(parents=True)
        self.scripts.mkdir()
        self.ports: dict[str, int] = {}
        self.servers: list[Server] = []
        self.namesrv: str | None = None      # the page's NameServer address, once running
        self.broker: str | None = None
        self.broker_conf: str | None = None
        self.help_cache: dict[tuple[str, ...], str] = {}
        self.sessions: dict[str, Session] = {}
        # session blocks run on threads of their own: the page's servers, ports and results
        # are shared under this lock; `done` counts the main sequence's finished blocks
        self.lock = threading.RLock()
        self.progress = threading.Condition()
        self.done = 0
        self.failures: list[str] = []
        self.ran: list[str] = []

    # -- environment ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        e = dict(os.environ)
        for var in ("NAMESRV_ADDR", "ROCKETSTORE_ACCESS_KEY", "ROCKETSTORE_SECRET_KEY",
                    "ROCKETSTORE_TRACEBACK"):
            e.pop(var, None)
        e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [
            p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)])
        e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
        e["HOME"] = str(self.work)
        e["COLUMNS"] = "200"
        e["PYSPARK_PYTHON"] = e["PYSPARK_DRIVER_PYTHON"] = sys.executable
        e["SPARK_LOCAL_IP"] = "127.0.0.1"
        if self.namesrv:
            e["NAMESRV_ADDR"] = self.namesrv
        return e

    def addr(self, port: int | str) -> str:
        key = str(port)
        with self.lock:
            if key not in self.ports:
                self.ports[key] = free_port()
            return f"127.0.0.1:{self.ports[key]}"

    def substitute(self, text: str) -> str:
        return ADDR.sub(lambda m: self.addr(m.group(2)), text)

    def rocketstore(self) -> list[str]:
        script = BIN / "rocketstore"
        return [str(script)] if script.exists() else [sys.executable, "-m", "rocketstore"]

    # -- servers -------------------------------------------------------------------------------

    def start(self, argv: list[str], where: str) -> None:
        self.servers.append(Server(argv, self.work, self.env(), where))

    def ensure(self, block: Block) -> None:
        with self.lock:
            self._ensure(block)

    def _ensure(self, block: Block) -> None:
        needs = {n for v in block.marker.get("needs", []) for n in v.split(",") if n}
        unknown = needs - {"namesrv", "broker"}
        if unknown:
            raise DocError(f"{block.where}: needs={','.join(sorted(unknown))}: "
                           f"only namesrv, broker")
        conf = block.one("conf")
        if needs and self.namesrv is None:
            self.namesrv = self.addr(9876)
            self.start([*self.rocketstore(), "namesrv", "--listen", self.namesrv,
                        "--kv-config", str(self.work / ".namesrv-kv.json")], block.where)
        if "broker" in needs:
            assert self.namesrv is not None
            if self.broker is None:
                argv = [*self.rocketstore(), "broker", str(self.work / ".broker-store"),
                        "--namesrv", self.namesrv, "--listen", self.addr(10911)]
                if conf:
                    argv += ["-c", conf]
                self.start(argv, block.where)
                self.broker, self.broker_conf = self.addr(10911), conf
            elif conf != self.broker_conf:
                raise DocError(f"{block.where}: conf={conf} but the page's broker already runs "
                               f"with {self.broker_conf}: one broker per page")

    def stop_all(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        for s in reversed(self.servers):
            rc = s.stop()
            if rc != 0:
                self.failures.append(f"{self.page.name}: `{shlex.join(s.argv)}` exited {rc} on "
                                     f"SIGTERM:\n{''.join(s.log)[-3000:]}")
        self.servers.clear()

    # -- kinds ---------------------------------------------------------------------------------

    def start_sessions(self) -> None:
        """Start the page's session interpreters before its first block; Spark's JVM (the
        slow part of a first SparkSession) launches while the other blocks run."""
        for block in self.blocks:
            name = self.session_of(block)
            if name and name not in self.sessions:
                session = self.sessions[name] = Session(self.work, self.env(), self.scripts)
                if name == "spark":
                    warm = self.scripts / "spark-warm.py"
                    warm.write_text("from pyspark import SparkContext\n"
                                    "SparkContext._ensure_initialized()\n")
                    session.submit(warm, self.env())

    def run(self) -> None:
        threads: list[threading.Thread] = []
        try:
            self.start_sessions()
            for name in self.sessions:
                mine = [(i, b) for i, b in enumerate(self.blocks) if self.session_of(b) == name]
                t = threading.Thread(target=self.run_session, args=(mine,), daemon=True)
                t.start()
                threads.append(t)
            for i, block in enumerate(self.blocks):
                if not self.session_of(block):
                    self.run_block(block)
                with self.progress:
                    self.done = i + 1
                    self.progress.notify_all()
            for t in threads:
                t.join()
        finally:
            self.stop_all()

    @staticmethod
    def session_of(block: Block) -> str:
        return "" if "skip" in block.marker else block.marker.get("session", [""])[-1]

    def run_session(self, blocks: list[tuple[int, Block]]) -> None:
        for i, block in blocks:
            before = [j for j, b in enumerate(self.blocks[:i])
                      if not self.session_of(b) and ("servers" in b.marker or "file" in b.marker)]
            with self.progress:
                self.progress.wait_for(lambda: not before or self.done > before[-1])
            self.run_block(block)

    def run_block(self, block: Block) -> None:
        t0 = time.monotonic()
        try:
            kind = block.kind
            getattr(self, "do_" + kind)(block)
        except DocError as e:
            with self.lock:
                self.failures.append(str(e))
            return
        except Exception as e:      # the runner's own trouble, still tied to the block
            with self.lock:
                self.failures.append(f"{block.where}: {type(e).__name__}: {e}")
            return
        with self.lock:
            self.ran.append(f"{block.where} {kind} {time.monotonic() - t0:.1f} s")

    def do_skip(self, block: Block) -> None:
        pass

    def do_file(self, block: Block) -> None:
        dest = self.work / (block.one("file") or "")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(self.substitute(block.text))

    def do_servers(self, block: Block) -> None:
        with self.lock:
            self._servers(block)

    def _servers(self, block: Block) -> None:
        for cmd in commands(self.substitute(block.text)):
            argv = shlex.split(cmd, comments=True)
            if not argv or argv[0] != "rocketstore" or argv[1] not in ("namesrv", "broker"):
                raise DocError(f"{block.where}: a servers block holds rocketstore namesrv/broker "
                               f"commands only, not {cmd!r}")
            self.start([*self.rocketstore(), *argv[1:]], block.where)
            if argv[1] == "namesrv" and self.namesrv is None:
                self.namesrv = self.listen_of(argv, "127.0.0.1:9876")
            elif argv[1] == "broker" and self.broker is None:
                self.broker = self.listen_of(argv, "127.0.0.1:10911")

    @staticmethod
    def listen_of(argv: list[str], default: str) -> str:
        return argv[argv.index("--listen") + 1] if "--listen" in argv else default

    def execute(self, block: Block, argv: list[str], merge: bool) -> subprocess.CompletedProcess:
        timeout = float(block.one("timeout", "60") or 60)
        # a session of its own: whatever the block starts (a server left in the foreground,
        # a process sent to the background) is killed with it
        proc = subprocess.Popen(argv, cwd=self.work, env=self.env(), text=True,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, _ = proc.communicate()
            raise DocError(f"{block.where}: still running after {timeout:g} s; output:\n{out}")
        kill_group(proc)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def check(self, block: Block, proc: subprocess.CompletedProcess, expected: list[str]) -> None:
        want_rc = int(block.one("exit", "0") or 0)
        err = f"\nstderr:\n{proc.stderr[-3000:]}" if proc.stderr else ""
        if proc.returncode != want_rc:
            raise DocError(f"{block.where}: exit status {proc.returncode}, expected {want_rc}; "
                           f"output:\n{proc.stdout[-3000:]}{err}")
        literal = block.marker.get("expect", [])
        if not expected and not literal:
            raise DocError(f"{block.where}: the block does not say what it prints (add "
                           f"`# -> line` comments or expect=\"...\")")
        for text in literal:
            if text not in proc.stdout:
                raise DocError(f"{block.where}: expected {text!r} in the output; output:\n"
                               f"{proc.stdout[-3000:]}{err}")
        try:
            check_lines(block.where, expected, proc.stdout)
        except DocError as e:
            raise DocError(f"{e}{err}") from None

    def do_python(self, block: Block) -> None:
        self.ensure(block)
        script = self.scripts / f"{self.page.stem}-{block.line}.py"
        script.write_text(self.substitute(block.text))
        name = block.one("session")
        if name:
            proc = self.in_session(block, name, script)
        else:
            proc = self.execute(block, [sys.executable, str(script)], merge=False)
        self.check(block, proc, expected_lines(block.text))

    def in_session(self, block: Block, name: str, script: Path) -> subprocess.CompletedProcess:
        if name not in self.sessions:
            self.sessions[name] = Session(self.work, self.env(), self.scripts)
        timeout = float(block.one("timeout", "60") or 60)
        r = self.sessions[name].run(script, self.env(), timeout)
        if r is None:
            session = self.sessions.pop(name)
            session.proc.kill()
            session.close()
            raise DocError(f"{block.where}: still running after {timeout:g} s (session {name})")
        return subprocess.CompletedProcess(script, r[0], r[1], r[2])

    def do_sh(self, block: Block) -> None:
        self.ensure(block)
        script = self.scripts / f"{self.page.stem}-{block.line}.sh"
        script.write_text("set -euo pipefail\n" + self.substitute(block.text))
        proc = self.execute(block, ["bash", str(script)], merge=True)
        self.check(block, proc, expected_lines(block.text))

    def do_console(self, block: Block) -> None:
        self.ensure(block)
        steps: list[tuple[str, list[str]]] = []
        for line in block.text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                if line.strip():
                    steps[-1][1].append(line)
            elif line.strip():
                raise DocError(f"{block.where}: a console block starts with a `$ command` line")
        if not steps:
            raise DocError(f"{block.where}: a console block without a `$ command` line")
        for cmd, out in steps:
            script = "set -uo pipefail\n" + self.substitute(cmd) + "\n"
            proc = self.execute(block, ["bash", "-c", script], merge=True)
            # a transcript's command may fail on purpose: its output says so
            check_lines(f"{block.where} `$ {cmd}`", [self.substitute(o) for o in out],
                        proc.stdout)
            if not out:
                raise DocError(f"{block.where}: `$ {cmd}` shows no output")

    def do_synopsis(self, block: Block) -> None:
        lines = [re.sub(r"\s{2,}#.*$", "", c).strip()
                 for c in commands(block.text, indented_continues=True)]
        scripts = {ln.split()[1] for ln in lines
                   if ln.split()[0].endswith("python") and ln.split()[1:2]
                   and ln.split()[1].endswith(".py")}
        # the scripts' --help in parallel: each is an interpreter start and its imports
        with ThreadPoolExecutor(4) as pool:
            for key, text in zip(scripts, pool.map(lambda s: self.script_help(block, s), scripts)):
                self.help_cache[(key,)] = text
        for cmd in lines:
            if cmd:
                self.check_synopsis_line(block, cmd)

    def script_help(self, block: Block, script: str) -> str:
        proc = subprocess.run([sys.executable, str(REPO / script), "--help"], cwd=REPO,
                              env=self.env(), text=True, capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise DocError(f"{block.where}: `{script} --help` exited {proc.returncode}:\n"
                           f"{proc.stdout}{proc.stderr}")
        return proc.stdout

    def check_synopsis_line(self, block: Block, cmd: str) -> None:
        words = cmd.split()
        if words[0].endswith("pip"):
            extras = pyproject_extras()
            for extra in re.findall(r"\.\[([\w,-]+)\]", cmd):
                for e in extra.split(","):
                    if e not in extras:
                        raise DocError(f"{block.where}: `{cmd}`: no extra {e!r} in pyproject.toml")
            return
        if words[0] == "rocketstore" or words[0].endswith("/bin/rocketstore"):
            alternatives: list[list[str]] = [[]]
            for w in words[1:]:
                if w == "|":
                    alternatives.append([])
                elif re.fullmatch(r"[a-z][a-zA-Z-]*", w) and (
                        len(alternatives[-1]) < 2):
                    alternatives[-1].append(w)
                else:
                    break
            keys = [tuple(a) for a in alternatives if a]
        elif words[0].endswith("python") and len(words) > 1 and words[1].endswith(".py"):
            keys = [(words[1],)]
        else:
            raise DocError(f"{block.where}: synopsis line {cmd!r} is neither a rocketstore "
                           f"command, a tools/ script nor a pip install")
        options = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(words[1:])))
        for key in keys:
            help_text = self.help_cache.get(key) or cli_help(block, key)
            missing = sorted(o for o in options
                             if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", help_text))
            if missing:
                raise DocError(f"{block.where}: `{cmd}`: `{' '.join(key)} --help` does not "
                               f"list {', '.join(missing)}")


def pyproject_extras() -> set[str]:
    """The extras pyproject.toml declares (a line scan: tomllib is 3.11+, we run on 3.10)."""
    section = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
    section = section.split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*=", section, re.M))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of a block's process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cli_help(block: Block, words: tuple[str, ...]) -> str:
    """``rocketstore WORDS --help`` from the CLI's own parser (no interpreter per command)."""
    from rocketstore.cli import build_parser
    parser = build_parser()
    for i, word in enumerate(words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            if i == 0:
                raise DocError(f"{block.where}: rocketstore has no subcommands?")
            break           # a positional argument after the (sub)command
        if word not in subs[0].choices:
            raise DocError(f"{block.where}: `rocketstore {' '.join(words[:i + 1])}`: no such "
                           f"command (rocketstore {' '.join(words[:i])} has "
                           f"{', '.join(sorted(subs[0].choices))})")
        parser = subs[0].choices[word]
    return parser.format_help()


def commands(text: str, indented_continues: bool = False) -> list[str]:
    """A block's commands: backslash continuations (and, in a synopsis, indented lines)
    joined to the line they continue."""
    out: list[str] = []
    joining = False
    for line in text.splitlines():
        if joining or (indented_continues and out and line[:1].isspace() and line.strip()):
            out[-1] = out[-1].rstrip("\\ ") + " " + line.strip()
        elif line.strip():
            out.append(line.strip())
        joining = line.rstrip().endswith("\\")
    return [c.rstrip("\\ ") for c in out]


def pages() -> list[Path]:
    """README.md and every docs/*.md: pages added later are run too."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
