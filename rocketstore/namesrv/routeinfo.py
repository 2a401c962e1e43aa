"""The NameServer's route tables (RocketMQ's ``RouteInfoManager``), rebuilt from registrations.

Tables: topic -> broker name -> queue data; broker name -> (cluster, broker id -> address);
cluster -> broker names; broker address -> liveness. Brokers register every 30 s; a broker not
heard from for ``broker_expire_s`` (120 s), one whose connection closes, or one that
unregisters loses its address, and a broker name left without any address loses its queue
data (topics left with no broker disappear). Re-registration only adds or updates topics: it
never removes a topic a broker still registers with (docs/protocol.md §2.16, messaging §11).
One lock guards every table: route queries (on the event loop) take it briefly. A master's
registration applies its topics in steps of ``APPLY_STEP``, the lock released between steps, so
a broker with 200,000 topics does not hold every route lookup for the whole table (~200 ms);
registrations themselves run one at a time (their own lock, taken only on the pool's threads).
Each broker name's topics are indexed, so a broker leaving (anyone can register as one and
close the connection, on the event loop) or a write-perm change costs that broker's topics,
not a walk of the whole table.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from rocketstore.common.protocol import QueueData

BROKER_EXPIRE_S = 120.0
# topics of a registration applied per hold of the tables' lock (a few ms at most)
APPLY_STEP = 1000


@dataclass
class BrokerLive:
    last_update: float
    data_version: dict[str, Any]
    ha_server_addr: str
    channel: object = None         # the broker's connection, to match a close to its address


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # quoted integer keys: both the Java and the C++ client accept them (docs/protocol.md §4)
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}


def queue_data_json(qd: QueueData) -> dict[str, Any]:
    return {"brokerName": qd.broker_name, "perm": qd.perm, "readQueueNums": qd.read_queue_nums,
            "topicSysFlag": qd.topic_sys_flag, "writeQueueNums": qd.write_queue_nums}


class RouteInfoManager:
    """Route tables of one NameServer. Thread-safe."""

    def __init__(self, broker_expire_s: float = BROKER_EXPIRE_S) -> None:
        self.broker_expire_s = broker_expire_s
        self._lock = threading.Lock()
        self._register_lock = threading.Lock()    # one registration at a time
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self._topics_of: dict[str, set[str]] = {}     # broker name -> its topics in the table
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLive] = {}

    # -- registration -------------------------------------------------------------------------
    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, data_version: dict[str, Any],
                        topic_configs: dict[str, dict[str, Any]],
                        channel: object = None) -> tuple[str | None, str | None]:
        """Record a broker and (for a master) its topics; returns (master HA address, master
        address) for a slave's response, else (None, None)."""
        now = time.monotonic()
        # built before the lock: route lookups (on the event loop) wait for the lock only
        # while the table is updated, not while 20,000 queue data are made
        queue_datas = [(topic, QueueData(broker_name, int(tc.get("readQueueNums", 0)),
                                         int(tc.get("writeQueueNums", 0)),
                                         int(tc.get("perm", 6)), int(tc.get("topicSysFlag", 0))))
                       for topic, tc in topic_configs.items()] if broker_id == 0 else []
        with self._register_lock:
            result, live, apply = self._register_locked(cluster, broker_addr, broker_name,
                                                        broker_id, ha_server_addr, data_version,
                                                        channel, now)
            if apply:
                self._apply_topics(broker_addr, broker_name, live, queue_datas)
        return result

    def _register_locked(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                         ha_server_addr: str, data_version: dict[str, Any], channel: object,
                         now: float) -> tuple[tuple[str | None, str | None], BrokerLive, bool]:
        """The broker's address and liveness: (the slave's answer, its live entry, whether
        its topics are to be applied)."""
        with self._lock:
            self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
            bd = self.broker_addr_table.get(broker_name)
            first = bd is None
            if bd is None:
                bd = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
            # one address, one id: a slave switched to master loses its old entry
            for bid in [k for k, v in bd.broker_addrs.items() if v == broker_addr and k != broker_id]:
                del bd.broker_addrs[bid]
            first = bd.broker_addrs.get(broker_id) != broker_addr or first
            bd.broker_addrs[broker_id] = broker_addr
            prev = self.broker_live_table.get(broker_addr)
            apply = broker_id == 0 and (first or prev is None or
                                        prev.data_version != data_version)
            live = self.broker_live_table[broker_addr] = BrokerLive(now, data_version,
                                                                    ha_server_addr, channel)
            if broker_id != 0:
                # RouteInfoManager: both addresses only of a master that is registered and
                # alive; otherwise the slave learns them at a later registration
                master = bd.broker_addrs.get(0)
                m = self.broker_live_table.get(master) if master is not None else None
                if m is not None:
                    return (m.ha_server_addr, master), live, apply
            return (None, None), live, apply

    def _apply_topics(self, broker_addr: str, broker_name: str, live: BrokerLive,
                      queue_datas: list[tuple[str, QueueData]]) -> None:
        """Put a master's queue data into the topic table, ``APPLY_STEP`` topics per hold of
        the lock; a broker that left between two steps (unregistered, connection closed,
        expired: its live entry is no longer ``live``) had its topics dropped, and the steps
        left are not applied."""
        table = self.topic_queue_table
        for i in range(0, len(queue_datas), APPLY_STEP):
            with self._lock:
                if self.broker_live_table.get(broker_addr) is not live:
                    return
                mine = self._topics_of.setdefault(broker_name, set())
                for topic, qd in queue_datas[i:i + APPLY_STEP]:
                    table.setdefault(topic, {})[broker_name] = qd
                    mine.add(topic)

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str,
                          broker_id: int) -> None:
        with self._lock:
            self.broker_live_table.pop(broker_addr, None)
            bd = self.broker_addr_table.get(broker_name)
            if bd is not None and bd.broker_addrs.get(broker_id) == broker_addr:
                del bd.broker_addrs[broker_id]
            self._drop_name_if_empty(broker_name, cluster)

    def _remove_addr(self, addr: str) -> None:
        self.broker_live_table.pop(addr, None)
        for name, bd in list(self.broker_addr_table.items()):
            for bid in [k for k, v in bd.broker_addrs.items() if v == addr]:
                del bd.broker_addrs[bid]
            self._drop_name_if_empty(name, bd.cluster)

    def _drop_name_if_empty(self, broker_name: str, cluster: str) -> None:
        bd = self.broker_addr_table.get(broker_name)
        if bd is None or bd.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
        table = self.topic_queue_table
        for topic in self._topics_of.pop(broker_name, ()):
            qds = table.get(topic)
            if qds is not None:
                qds.pop(broker_name, None)
                if not qds:
                    del table[topic]

    def scan_not_active_brokers(self) -> list[str]:
        """Remove brokers not refreshed within ``broker_expire_s``; returns their addresses."""
        limit = time.monotonic() - self.broker_expire_s
        with self._lock:
            gone = [a for a, live in self.broker_live_table.items() if live.last_update < limit]
            for addr in gone:
                self._remove_addr(addr)
        return gone

    def channel_closed(self, channel: object) -> str | None:
        """A broker's connection closed: remove the address registered over it."""
        with self._lock:
            for addr, live in list(self.broker_live_table.items()):
                if live.channel is channel:
                    self._remove_addr(addr)
                    return addr
        return None

    def data_version_of(self, broker_addr: str) -> dict[str, Any] | None:
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            return None if live is None else dict(live.data_version)

    def touch(self, broker_addr: str) -> None:
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            if live is not None:
                live.last_update = time.monotonic()

    # -- queries ------------------------------------------------------------------------------
    def pickup_topic_route(self, topic: str, order_topic_conf: str | None = None
                           ) -> dict[str, Any] | None:
        """``TopicRouteData`` as JSON-ready dict, or None (TOPIC_NOT_EXIST)."""
        with self._lock:
            qds = self.topic_queue_table.get(topic)
            if not qds:
                return None
            brokers = [self.broker_addr_table[n] for n in sorted(qds) if n in self.broker_addr_table]
            if not brokers:
                return None
            route: dict[str, Any] = {
                "brokerDatas": [b.to_json() for b in brokers],
                "filterServerTable": {},
                "queueDatas": [queue_data_json(qds[n]) for n in sorted(qds)],
            }
        if order_topic_conf:
            route["orderTopicConf"] = order_topic_conf
        return route

    def cluster_info(self) -> dict[str, Any]:
        with self._lock:
            return {"brokerAddrTable": {n: b.to_json() for n, b in self.broker_addr_table.items()},
                    "clusterAddrTable": {c: sorted(ns) for c, ns in self.cluster_addr_table.items()}}

    def topic_list(self) -> list[str]:
        with self._lock:
            names = list(self.topic_queue_table)     # one C copy; sorted outside the lock
        return sorted(names)

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            for name in self.topic_queue_table.pop(topic, {}):
                self._topics_of.get(name, set()).discard(topic)

    def add_write_perm(self, broker_name: str) -> int:
        """Set the write bit of every topic on a broker (undo ``wipe_write_perm``); returns
        how many. 4.9.8's ``addWritePermOfBroker`` sets perm 6 whatever the topic's was, which
        takes TBW102's INHERIT bit off its route: here the other bits are kept."""
        return self._change_perm(broker_name, lambda perm: perm | 2)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write bit of every topic on a broker (drain it); returns how many."""
        return self._change_perm(broker_name, lambda perm: perm & ~2)

    def _change_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        n = 0
        with self._lock:
            table = self.topic_queue_table
            for topic in self._topics_of.get(broker_name, ()):
                qds = table.get(topic)
                if qds is None or broker_name not in qds:
                    continue
                qd = qds[broker_name]
                qds[broker_name] = dataclasses.replace(qd, perm=change(qd.perm))
                n += 1
        return n
