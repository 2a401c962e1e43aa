"""Dead letters of a consumer group: list them with their origin, and resend them.

A message a group failed ``max_reconsume_times`` times goes to ``%DLQ%<group>`` (MESSAGING.md
§5.5–5.6) and stays there until the commit log expires: nothing consumes it (users ask for
tooling: RocketMQ issues #1236, #3327). ``DeadLetterQueue.list()`` shows each dead letter with where
it came from (``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, reconsume times, store time, keys, tags);
``resend()`` sends selected or all dead letters back to their original topic as *new* messages
(original body, tags, keys and user properties; no retry/DLQ bookkeeping), so the group's
consumers receive them again, as an admin's resend would.

Resent once, never twice: each resend is recorded in ``config/dlqResend.json``
(``{"resendTable":{"<group>":{"<dead letter offset msg id>":"<resent offset msg id>"}}}``,
atomic like the other metadata files) and ``resend()`` skips recorded dead letters. The resent
message's UNIQ_KEY (the id a consumer sees) is the dead letter's offset message id, which is
unique per dead letter: if the process dies between the put and the record, the next resend
finds the copy through the index by that key, records it and does not put it again.

Offline (a store directory no broker holds) the resent message is put straight into the store,
round-robin over the topic's write queues. On a live broker use ``DeadLetterQueue(broker,
group)`` in the broker's process: the resend goes through the broker's send path (topic checks,
auto-create). The ``rocketstore dlq`` command does the offline form and refuses a store a
running broker holds (its lock).
"""
from __future__ import annotations

import builtins
import datetime as _dt
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from rocketstore.common.constants import (PROPERTY_ORIGIN_MESSAGE_ID,
                                          PROPERTY_RETRY_TOPIC, PROPERTY_TAGS,
                                          PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, dlq_topic)
from rocketstore.errors import RocketStoreError
from rocketstore.store import paths
from rocketstore.store.configfile import ConfigFile
from rocketstore.store.types import Message

__all__ = ["DeadLetter", "DeadLetterQueue", "ResendResult", "DLQResendError",
           "DLQ_RESEND_FILE", "SYSTEM_PROPERTIES"]

DLQ_RESEND_FILE = "dlqResend.json"

# RocketMQ's MessageConst.STRING_HASH_SET: broker/client bookkeeping, never user properties
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
    "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
    "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "__SHARDINGKEY", "__transactionId__", "__CRC32#", "INNER_NUM", "INNER_BASE",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "DUP_INFO",
})


class DLQResendError(RocketStoreError):
    """A resend could not be done (an unknown message id, a dead letter without a topic)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of ``%DLQ%<group>`` and where it came from."""

    msg_id: str                  # UNIQ_KEY: the id the producer and consumers saw
    offset_msg_id: str           # this DLQ record's store id
    queue_id: int
    queue_offset: int
    topic: str | None            # RETRY_TOPIC: the topic it was first sent to
    origin_message_id: str | None
    reconsume_times: int
    store_timestamp: int
    born_timestamp: int
    tags: str | None
    keys: list[str]
    body_size: int
    properties: dict[str, str]   # user properties (system ones left out)
    resent_as: str | None        # offset msg id of the resent copy, when resent

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times also as ISO 8601 UTC)."""
        d = asdict(self)
        for name in ("store_timestamp", "born_timestamp"):
            d[name.replace("timestamp", "time")] = _dt.datetime.fromtimestamp(
                d[name] / 1000, _dt.timezone.utc).isoformat(timespec="milliseconds")
        return d


@dataclass(frozen=True, slots=True)
class ResendResult:
    """What ``resend`` did with one dead letter: ``resent``, ``already`` or ``recovered``
    (found resent by an interrupted earlier run)."""

    dead_letter: DeadLetter
    outcome: str
    resent_as: str
    topic: str
    queue_id: int


def _decode_table(doc: Any) -> dict[str, dict[str, str]]:
    if not isinstance(doc, dict):
        raise ValueError(f"top level is a {type(doc).__name__}, not an object")
    table = doc.get("resendTable") or {}
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise ValueError("resendTable is not an object of objects")
    return {g: {str(k): str(v) for k, v in m.items()} for g, m in table.items()}


class DeadLetterQueue:
    """The dead letters of one consumer group on one store.

    Parameters
    ----------
    owner
        A ``Broker`` (live: resends go through its send path) or a ``MessageStore`` (a store
        no broker runs on; read-only is enough for ``list``).
    group
        The consumer group whose ``%DLQ%<group>`` is read.
    """

    _file_locks: dict[str, threading.Lock] = {}

    def __init__(self, owner: Any, group: str) -> None:
        if not isinstance(group, str) or not group:
            raise DLQResendError(f"group must be a non-empty str, got {group!r}")
        self.broker = owner if hasattr(owner, "send_message") else None
        self.store = getattr(owner, "store", owner)
        self.group = group
        self.topic = dlq_topic(group)
        self.path = os.path.join(paths.config_dir(self.store.root), DLQ_RESEND_FILE)
        self._file = ConfigFile(self.path)
        self._lock = DeadLetterQueue._file_locks.setdefault(self.path, threading.Lock())
        self._next_queue: dict[str, int] = {}

    # -- reading -------------------------------------------------------------------------------

    def _queue_ids(self) -> builtins.list[int]:
        return sorted(self.store.consume_queues.queue_ids(self.topic))

    def _records(self):
        for q in self._queue_ids():
            offset = self.store.get_min_offset_in_queue(self.topic, q)
            while True:
                r = self.store.get_message(self.group, self.topic, q, offset, 32)
                if not r.messages:
                    if r.next_begin_offset > offset:     # a gap (expired files): go on
                        offset = r.next_begin_offset
                        continue
                    break
                yield from r.messages
                offset = r.next_begin_offset

    def _resent(self) -> dict[str, str]:
        table = self._file.load(_decode_table) or {}
        return dict(table.get(self.group, {}))

    def list(self) -> builtins.list[DeadLetter]:
        """Every dead letter of the group still stored, in queue order."""
        resent = self._resent()
        return [self._describe(m, resent) for m in self._records()]

    @staticmethod
    def _describe(m: Any, resent: dict[str, str]) -> DeadLetter:
        props = m.properties
        return DeadLetter(
            msg_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.msg_id,
            offset_msg_id=m.msg_id, queue_id=m.queue_id, queue_offset=m.queue_offset,
            topic=props.get(PROPERTY_RETRY_TOPIC),
            origin_message_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID),
            reconsume_times=m.reconsume_times, store_timestamp=m.store_timestamp,
            born_timestamp=m.born_timestamp, tags=props.get(PROPERTY_TAGS), keys=m.keys,
            body_size=m.body_size,
            properties={k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES},
            resent_as=resent.get(m.msg_id))

    # -- resending -----------------------------------------------------------------------------

    def resend(self, msg_ids: Iterable[str] | None = None) -> builtins.list[ResendResult]:
        """Send dead letters back to their original topics; ``msg_ids`` (UNIQ_KEY or offset
        msg id) selects them, None means all. Dead letters resent before are skipped
        (outcome ``already``). Raises ``DLQResendError`` for an id that is not a dead letter
        of the group, before anything is sent."""
        wanted = None if msg_ids is None else {i.upper() for i in msg_ids}
        with self._lock:
            resent = self._resent()
            chosen = []
            for m in self._records():
                if wanted is None or m.msg_id in wanted or \
                        (m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or "") in wanted:
                    chosen.append(m)
            if wanted is not None:
                found = {m.msg_id for m in chosen} | {m.uniq_key for m in chosen}
                missing = sorted(wanted - found)
                if missing:
                    raise DLQResendError(f"{self.topic}: no dead letter with id "
                                         f"{', '.join(missing)}")
            results = []
            for m in chosen:
                dl = self._describe(m, resent)
                if dl.resent_as is not None:
                    results.append(ResendResult(dl, "already", dl.resent_as, dl.topic or "", -1))
                    continue
                if not dl.topic:
                    raise DLQResendError(f"{self.topic}: dead letter {m.msg_id} has no "
                                         "RETRY_TOPIC: its original topic is unknown")
                earlier = self._find_resent(dl)
                if earlier is not None:
                    outcome, new_id, queue_id = "recovered", earlier.msg_id, earlier.queue_id
                else:
                    new_id, queue_id = self._send(m, dl, dl.topic)
                    outcome = "resent"
                resent[m.msg_id] = new_id
                self._record(resent)
                results.append(ResendResult(dl, outcome, new_id, dl.topic, queue_id))
            return results

    def _find_resent(self, dl: DeadLetter) -> Any:
        if not self.store.config.message_index_enable:
            return None
        found = self.store.query_message_by_uniq_key(dl.topic, dl.offset_msg_id)
        return found[0] if found else None

    def _message(self, m: Any, dl: DeadLetter, topic: str) -> Message:
        props = dict(dl.properties)
        # the resent copy's id: unique per dead letter, so an interrupted resend is found again
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = dl.offset_msg_id
        return Message(topic, bytes(m.body), tags=dl.tags, keys=dl.keys or None,
                       properties=props, flag=m.flag)

    def _send(self, m: Any, dl: DeadLetter, topic: str) -> tuple[str, int]:
        msg = self._message(m, dl, topic)
        if self.broker is not None:
            from rocketstore.common.protocol import ResponseCode, SendMessageRequest
            resp = self.broker.send_message(SendMessageRequest(
                producer_group="TOOLS_CONSUMER", topic=topic, queue_id=-1,
                messages=[msg]))
            if hasattr(resp, "add_done_callback"):      # the broker answers with a future
                resp = resp.result()
            if resp.code != ResponseCode.SUCCESS:
                raise DLQResendError(f"resend of {dl.msg_id} to {topic}: "
                                     f"{resp.code.name} {resp.remark or ''}".strip())
            return str(resp.msg_id), resp.queue_id
        queue_id = self._pick_queue(topic)
        r = self.store.put_message(msg, queue_id)
        if not r.ok:
            raise DLQResendError(f"resend of {dl.msg_id} to {topic}/{queue_id}: {r.status.name}")
        return r.msg_id, queue_id

    def _pick_queue(self, topic: str) -> int:
        tc = self.store.topic_config_manager.get(topic)
        n = tc.write_queue_nums if tc is not None and tc.write_queue_nums > 0 else 0
        ids = list(range(n)) if n else sorted(self.store.consume_queues.queue_ids(topic)) or [0]
        i = self._next_queue.get(topic, 0)
        self._next_queue[topic] = i + 1
        return ids[i % len(ids)]

    def _record(self, resent: dict[str, str]) -> None:
        table = self._file.load(_decode_table) or {}
        table[self.group] = dict(resent)
        self._file.persist({"resendTable": table})
