"""A RocketMQ cluster of real processes for tests: one ``rocketstore namesrv`` and N
``rocketstore broker`` (distinct broker names, ports and store dirs), with kill -9 and restart
on the same store and port.

    with Cluster(tmp_path, ["broker-a", "broker-b"], conf=SYNC) as c:
        c.create_topic("T", {"broker-a": 2, "broker-b": 3})   # before start or while stopped
        c.start()
        c.wait_route("T", {"broker-a": 2, "broker-b": 3})
        ... Producer("pg", namesrv_addr=c.namesrv_addr) ...
        c.kill("broker-b"); c.wait_route("T", {"broker-a": 2})
        c.restart("broker-b"); c.wait_route("T", {"broker-a": 2, "broker-b": 3})

Leaving the ``with`` block stops every broker (SIGTERM), then the NameServer; the processes
are children of the test run and the stores live under the given temp dir.
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketstore.common.protocol import ResponseCode
from rocketstore.remoting import fastjson
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.store.paths import config_dir
from rocketstore.store.topics import TopicConfig, TopicConfigManager
from servers import ServerProcess, start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

# a broker whose SEND_OK means "on disk", with 16 MiB commit-log files (tests stay small)
SYNC_FLUSH_CONF = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": str(16 << 20),
                   "flushConsumerOffsetInterval": "200"}


class ToBroker:
    """An ordered-send selector pinning keys to one broker's queues (``arg`` picks among them)."""

    def __init__(self, broker: str) -> None:
        self.broker = broker

    def select(self, mqs, msg, arg):
        mine = [mq for mq in mqs if mq.broker_name == self.broker]
        return mine[arg % len(mine)] if mine else None


@dataclass
class BrokerNode:
    """One broker of the cluster: its name, store, port (fixed after the first start, so a
    restart comes back at the same address) and current process."""

    name: str
    store: Path
    conf: dict[str, str]
    port: int = 0
    proc: ServerProcess | None = None
    paused: bool = False
    exits: list[int] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.proc.poll() is None


class Cluster:
    """One NameServer and brokers ``names`` under ``tmp`` (see the module docstring)."""

    def __init__(self, tmp: Path, names: list[str] | tuple[str, ...] = ("broker-a", "broker-b"),
                 conf: dict[str, str] | None = None,
                 namesrv_args: list[str] | None = None) -> None:
        """``conf``: every broker's broker.conf keys (default ``SYNC_FLUSH_CONF``);
        ``namesrv_args``: extra ``rocketstore namesrv`` options (``--broker-expire 2``)."""
        self.tmp = Path(tmp)
        self.namesrv_args = list(namesrv_args or [])
        self.nodes = {n: BrokerNode(n, self.tmp / f"store-{n}", dict(conf or SYNC_FLUSH_CONF))
                      for n in names}
        self.namesrv: ServerProcess | None = None
        self._client: RemotingClient | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Cluster:
        """Start the NameServer, then every broker not running."""
        if self.namesrv is None:
            self.namesrv = start_namesrv(self.tmp, self.namesrv_args)
        for name in self.nodes:
            if not self.nodes[name].alive:
                self.start_broker(name)
        return self

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv is not None, "Cluster.start() first"
        return self.namesrv.addr

    def start_broker(self, name: str) -> BrokerNode:
        """Start (or restart) ``name`` on its store, at its earlier port if it had one."""
        node = self.nodes[name]
        assert not node.alive, f"{name} is running"
        node.store.mkdir(parents=True, exist_ok=True)
        listen = f"127.0.0.1:{node.port}"
        node.proc = start_broker(node.store, self.namesrv_addr, node.conf, listen=listen,
                                 name=name)
        node.port = int(node.proc.addr.rsplit(":", 1)[1])
        return node

    restart = start_broker

    def kill(self, name: str) -> None:
        """kill -9 ``name`` (a crash: nothing flushed or unregistered on the way out)."""
        node = self.nodes[name]
        assert node.proc is not None
        node.proc.kill()
        node.paused = False
        node.exits.append(node.proc.proc.returncode)

    def pause(self, name: str) -> None:
        """SIGSTOP ``name``: a hung broker whose connections stay open (no answers, no
        registrations, no close for the NameServer to notice)."""
        node = self.nodes[name]
        assert node.alive and node.proc is not None
        node.proc.proc.send_signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, name: str) -> None:
        """SIGCONT ``name``."""
        node = self.nodes[name]
        assert node.proc is not None
        node.proc.proc.send_signal(signal.SIGCONT)
        node.paused = False

    def stop_broker(self, name: str) -> int:
        """SIGTERM ``name`` and wait; returns its exit code."""
        node = self.nodes[name]
        assert node.proc is not None
        if node.paused:
            self.resume(name)         # a stopped process would never handle SIGTERM
        rc = node.proc.stop()
        node.exits.append(rc)
        return rc

    def stop(self) -> dict[str, int]:
        """Stop every running broker, then the NameServer; returns the exit codes by name
        (the NameServer as "namesrv")."""
        codes: dict[str, int] = {}
        try:
            for name, node in self.nodes.items():
                if node.alive:
                    codes[name] = self.stop_broker(name)
        finally:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self.namesrv is not None:
                codes["namesrv"] = self.namesrv.stop()
                self.namesrv = None
        return codes

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- topics and routes --------------------------------------------------------------------
    def create_topic(self, topic: str, queues: dict[str, int], perm: int = 6) -> None:
        """Write ``topic`` with ``queues[broker]`` read and write queues into each named
        broker's ``topics.json``; the brokers must not be running (they load it at start)."""
        for name, n in queues.items():
            node = self.nodes[name]
            assert not node.alive, f"create_topic on {name}: stop it first"
            cdir = config_dir(str(node.store))
            Path(cdir).mkdir(parents=True, exist_ok=True)
            table = TopicConfigManager(cdir)
            table.load()
            table.update(TopicConfig(topic, n, n, perm))

    def route(self, topic: str) -> dict | None:
        """The NameServer's ``TopicRouteData`` of ``topic`` as JSON, or None."""
        if self._client is None:
            self._client = RemotingClient()
        r = self._client.invoke(self.namesrv_addr, RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3.0)
        if r.code != ResponseCode.SUCCESS:
            return None
        return fastjson.loads(r.body)

    def queue_counts(self, topic: str) -> dict[str, int]:
        """Write queue count per broker of the topic's current route ({} when none)."""
        route = self.route(topic) or {}
        live = {b["brokerName"] for b in route.get("brokerDatas", ()) if b.get("brokerAddrs")}
        return {q["brokerName"]: int(q["writeQueueNums"]) for q in route.get("queueDatas", ())
                if q["brokerName"] in live}

    def wait_route(self, topic: str, expected: dict[str, int], timeout: float = 30.0) -> None:
        """Wait until the NameServer routes ``topic`` to exactly ``expected`` (broker ->
        write queues); AssertionError with the last route seen otherwise."""
        deadline = time.monotonic() + timeout
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            seen = self.queue_counts(topic)
            if seen == expected:
                return
            time.sleep(0.1)
        raise AssertionError(f"route of {topic}: {seen}, expected {expected}")
