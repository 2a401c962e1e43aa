"""Queue allocation strategies of clustering consumers (MESSAGING.md §3.3, §3.4).

Every consumer of a group runs the same strategy over the same two sorted lists (the topic's
readable queues and the group's client ids) and keeps its own share; there is no coordinator.
A strategy returns nothing for a client id that is not in ``cid_all`` (except ``CONFIG``).
"""
from __future__ import annotations

import bisect
import hashlib
from typing import Iterable, Protocol

from rocketstore.common import MessageQueue
from rocketstore.errors import MQClientError


class AllocateMessageQueueStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]: ...


def _check(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> int:
    """Index of ``current_cid`` in ``cid_all``, or -1 when it takes nothing."""
    if not current_cid:
        raise MQClientError("current client id is empty")
    if not mq_all or not cid_all:
        return -1
    try:
        return cid_all.index(current_cid)
    except ValueError:
        return -1


class AllocateMessageQueueAveragely:
    """``AVG``: contiguous blocks; the first ``n % m`` clients get one queue more."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        i = _check(current_cid, mq_all, cid_all)
        if i < 0:
            return []
        n, m = len(mq_all), len(cid_all)
        mod = n % m
        if n <= m:
            avg = 1
        elif mod > 0 and i < mod:
            avg = n // m + 1
        else:
            avg = n // m
        start = i * avg if (mod > 0 and i < mod) else i * avg + mod
        rng = min(avg, n - start)
        return [mq_all[(start + k) % n] for k in range(rng)]


class AllocateMessageQueueAveragelyByCircle:
    """``AVG_BY_CIRCLE``: the queue at sorted position p goes to client ``p % m``."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        i = _check(current_cid, mq_all, cid_all)
        if i < 0:
            return []
        return mq_all[i::len(cid_all)]


def _md5_hash(key: str) -> int:
    """ConsistentHashRouter's MD5Hash: first 4 digest bytes, unsigned big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateMessageQueueConsistentHash:
    """``CONSISTENT_HASH``: ``virtual_node_cnt`` ring nodes per client (key ``cid-k``); a queue
    (key ``str(mq)``) goes to the first node clockwise from its hash."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_cnt: int = 10) -> None:
        if virtual_node_cnt < 0:
            raise MQClientError(f"virtual_node_cnt is less than 0: {virtual_node_cnt}")
        self.virtual_node_cnt = virtual_node_cnt

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        if _check(current_cid, mq_all, cid_all) < 0:
            return []
        ring: dict[int, str] = {}       # TreeMap put: a colliding later node replaces
        for cid in cid_all:
            for k in range(self.virtual_node_cnt):
                ring[_md5_hash(f"{cid}-{k}")] = cid
        if not ring:
            return []
        keys = sorted(ring)
        out = []
        for mq in mq_all:
            j = bisect.bisect_left(keys, _md5_hash(str(mq)))
            if ring[keys[j % len(keys)]] == current_cid:
                out.append(mq)
        return out


class AllocateMessageQueueByConfig:
    """``CONFIG``: a fixed list of queues, whoever asks."""

    name = "CONFIG"

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        return list(self.message_queues)


class AllocateMessageQueueByMachineRoom:
    """``MACHINE_ROOM``: only queues of brokers named ``idc@name`` with ``idc`` in
    ``consumer_idcs``; ``n // m`` each by position, then the remainder one each to the first
    clients."""

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs = set(consumer_idcs)

    def allocate(self, group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        i = _check(current_cid, mq_all, cid_all)
        if i < 0:
            return []
        pre = []
        for mq in mq_all:
            parts = mq.broker_name.split("@")
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                pre.append(mq)
        m = len(cid_all)
        per, rem = divmod(len(pre), m)
        out = pre[per * i: per * i + per]
        if rem > i:
            out.append(pre[i + per * m])
        return out


_BY_NAME: dict[str, type] = {"AVG": AllocateMessageQueueAveragely,
            "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
            "CONSISTENT_HASH": AllocateMessageQueueConsistentHash}


def allocate_strategy(spec: str | AllocateMessageQueueStrategy) -> AllocateMessageQueueStrategy:
    """A strategy by RocketMQ name (``AVG``, ``AVG_BY_CIRCLE``, ``CONSISTENT_HASH``), or the
    strategy object itself (``CONFIG`` and ``MACHINE_ROOM`` need their parameters, so they are
    passed as objects)."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "allocate", None)):
            raise MQClientError(f"allocate_strategy {spec!r} has no allocate() method")
        return spec  # type: ignore[return-value]
    cls = _BY_NAME.get(spec.upper())
    if cls is not None:
        return cls()  # type: ignore[return-value]
    if spec.upper() == "CONFIG":
        raise MQClientError("allocate_strategy 'CONFIG' needs its queue list: pass "
                            "AllocateMessageQueueByConfig(queues)")
    if spec.upper() == "MACHINE_ROOM":
        raise MQClientError("allocate_strategy 'MACHINE_ROOM' needs its rooms: pass "
                            "AllocateMessageQueueByMachineRoom(idcs)")
    raise MQClientError(f"allocate_strategy {spec!r} is not one of AVG, AVG_BY_CIRCLE, "
                        "CONSISTENT_HASH, CONFIG, MACHINE_ROOM")
