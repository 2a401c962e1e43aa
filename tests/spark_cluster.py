"""A small cluster for the wire tests: one ``rocketstore namesrv`` and brokers with topics made
beforehand (written into each store's ``topics.json`` before the broker starts, so no
message has to create them), every process stopped by ``close()``."""
from __future__ import annotations

import time
from pathlib import Path

from rocketstore.client.tcp import TcpTransport
from rocketstore.store.paths import config_dir
from rocketstore.store.topics import TopicConfig, TopicConfigManager
from servers import ServerProcess, start_broker, start_namesrv

# small files: the stores of a test stay small on disk
BROKER_CONF = {"mappedFileSizeCommitLog": str(1 << 20),
               "mappedFileSizeConsumeQueue": str(1000 * 20)}


class Cluster:
    """``namesrv`` is the NameServer's address; ``brokers`` the broker processes by name."""

    def __init__(self, tmp: Path, topics: dict[str, dict[str, int]]) -> None:
        """``topics``: {topic: {broker name: queue count}}; every broker named is started."""
        self.namesrv_process: ServerProcess | None = None
        self.brokers: dict[str, ServerProcess] = {}
        try:
            self.namesrv_process = start_namesrv(tmp)
            self.namesrv = self.namesrv_process.addr
            names = sorted({b for per in topics.values() for b in per})
            for name in names:
                store = tmp / name
                table = TopicConfigManager(config_dir(str(store)))
                for topic, per in topics.items():
                    if name in per:
                        table.update(TopicConfig(topic, per[name], per[name]))
                self.brokers[name] = start_broker(store, self.namesrv, dict(BROKER_CONF), name=name)
            for topic, per in topics.items():
                self.wait_route(topic, set(per))
        except BaseException:
            self.close()
            raise

    def wait_route(self, topic: str, brokers: set[str], timeout: float = 30.0) -> None:
        """Until the NameServer's route of ``topic`` names every one of ``brokers`` (a broker
        registers right after it starts listening)."""
        t = TcpTransport(self.namesrv)
        try:
            deadline = time.monotonic() + timeout
            while True:
                route = t.get_topic_route(topic)
                have = {q.broker_name for q in route.queue_datas} if route else set()
                if brokers <= have:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"route of {topic} names {have}, not {brokers}")
                time.sleep(0.1)
        finally:
            t.close()

    def close(self) -> None:
        for b in self.brokers.values():
            b.stop()
        self.brokers.clear()
        if self.namesrv_process is not None:
            self.namesrv_process.stop()
            self.namesrv_process = None
