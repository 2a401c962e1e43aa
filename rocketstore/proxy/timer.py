"""Delay messages at any time (RocketMQ 5's ``TIMER_DELIVER_MS``), kept durable by the broker.

A message due later is stored, as sent, in the broker's topic ``rmq_sys_wheel_timer`` (queue 0)
and recorded in the proxy's POP journal as an in-flight entry of the internal group
``__timer__``, keyed by its real topic and queue and its offset in the timer queue, visible at
its deliver time. (Its destination is in the journal, not in REAL_TOPIC / REAL_QID: the broker
lets no client send carry those.)
When due, the proxy reads it back from the timer topic and appends it to its real queue
(same ``UNIQ_KEY``, ``TIMER_DELIVER_MS`` kept, so 5.x consumers see a DELAY message), then drops
the entry. After a restart the journal still holds every undelivered entry. Never early: the
real queue gets the message only once its deliver time has passed.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import TYPE_CHECKING, Any

from rocketstore.common import Message
from rocketstore.common.protocol import PullMessageRequest, ResponseCode, SendMessageRequest
from rocketstore.proxy.common import _status
from rocketstore.proxy.limits import CONF_KEYS
from rocketstore.proxy.popstate import InFlight, VisibleHeap

if TYPE_CHECKING:
    from rocketstore.proxy.service import MessagingService

log = logging.getLogger("rocketstore.proxy.timer")

TIMER_TOPIC = "rmq_sys_wheel_timer"
# the journal's group of the timer's entries: a name no client can give (``#`` is not a group
# name character), so no Ack, ChangeInvisibleDuration, receive or DLQ forward of a client can
# reach a waiting delay message. Journals written before used "__timer__" (a valid group name):
# their timer entries are moved to this name at start.
TIMER_GROUP = "#timer"
_OLD_TIMER_GROUP = "__timer__"
PULL_GROUP = "CID_RMQ_SYS_PROXY_TIMER"


def recall_handle(key: Any, deliver_ms: int, uniq: str) -> str:
    """RocketMQ 5's ``v1 <topic> <broker> <deliver ms> <uniq key>``, URL-safe Base64, plus the
    real queue and the timer-queue offset that find the journal entry."""
    _, topic, broker, qid, offset = key
    text = f"v1 {topic} {broker} {deliver_ms} {uniq} {qid} {offset}"
    return base64.urlsafe_b64encode(text.encode()).decode()


def parse_recall_handle(handle: str) -> tuple[Any, int, str]:
    """(journal key, deliver ms, UNIQ_KEY) of a recall handle; ``ValueError`` if malformed."""
    try:
        f = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
        if len(f) != 7 or f[0] != "v1":
            raise ValueError
        return (TIMER_GROUP, f[1], f[2], int(f[5]), int(f[6])), int(f[3]), f[4]
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValueError("malformed recall handle") from None


class DelayTimer:
    def __init__(self, svc: MessagingService) -> None:
        self.svc = svc
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._migrate()
        # the waiting delay messages by deliver time: a round looks at what is due, not at
        # everything in flight (one recalled or delivered meanwhile is dropped when it surfaces)
        with svc.state._lock:
            self._heap = VisibleHeap(svc.state, lambda k: k[0] == TIMER_GROUP)
        self.pending = len(self._heap)      # delay messages waiting

    def _migrate(self) -> None:
        """Timer entries of a journal written under the old group name, moved to
        ``TIMER_GROUP`` (journaled before the old ones are dropped: nothing is lost)."""
        state = self.svc.state
        with state._lock:
            old = [(k, e) for k, e in state.inflight.items()
                   if k[0] == _OLD_TIMER_GROUP and e.pop_time == 0 and e.commit_log_offset == -1]
        if old:
            state.record_pops(None, [((TIMER_GROUP, *k[1:]), e) for k, e in old], sync=True)
            for k, _ in old:
                state.drop(k)
            log.info("moved %d delay messages of the journal to the timer's group", len(old))

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    def producer_online(self, client_id: str) -> None:
        """A producer's Telemetry settings arrived (the hook for orphan checks)."""

    async def schedule(self, msg: Message, broker: str, qid: int, deliver_ms: int,
                       entry: Any) -> None:
        cap = self.svc.cfg.limits.max_pending_delay_messages
        if self.pending >= cap:
            _status(entry.status, "TOO_MANY_REQUESTS",
                    f"{self.pending} delay messages are waiting "
                    f"({CONF_KEYS['max_pending_delay_messages']}={cap})")
            return
        self.pending += 1                   # before the await: concurrent sends count too
        props = dict(msg.properties)
        stored = Message(TIMER_TOPIC, msg.body, properties=props, sys_flag=msg.sys_flag,
                         born_timestamp=msg.born_timestamp)
        r = await asyncio.wrap_future(self.svc.transport.send_message_async(
            broker, SendMessageRequest(producer_group=msg.topic, topic=TIMER_TOPIC, queue_id=0,
                                       messages=[stored], default_topic_queue_nums=1)))
        if r.code != ResponseCode.SUCCESS:
            self.pending -= 1
            _status(entry.status, "INTERNAL_SERVER_ERROR",
                    f"storing a delay message: code {int(r.code)} {r.remark or ''}")
            return
        key = (TIMER_GROUP, msg.topic, broker, qid, r.queue_offset)
        # fsynced: the journal holds the only copy of the schedule
        self.svc.state.record_pops(None, [(key, InFlight(0, deliver_ms, 0, -1))], sync=True)
        self._heap.push(deliver_ms, key, self.pending)
        _status(entry.status, "OK")
        entry.message_id = entry.transaction_id = props["UNIQ_KEY"]
        entry.offset = r.queue_offset
        entry.recall_handle = recall_handle(key, deliver_ms, props["UNIQ_KEY"])
        self._kick.set()

    async def recall(self, topic: str, handle: str) -> str:
        """Cancel a delay message not yet delivered; its message id. Raises ``ValueError``
        for a handle that is not one of ours, ``LookupError`` when no delay message waits
        under it (delivered, recalled, or a handle forged from a guessed timer-queue offset:
        its deliver time and message id must be the waiting message's)."""
        key, deliver_ms, uniq = parse_recall_handle(handle)
        if key[1] != topic:
            raise ValueError(f"the recall handle is for topic {key[1]}, not {topic}")
        e = self.svc.state.inflight.get(key)
        if e is None:
            raise LookupError("the delay message was delivered or recalled already")
        if e.visible_at != deliver_ms or await self._stored_uniq(key) != uniq:
            raise LookupError("no delay message waits under this recall handle")
        if key not in self.svc.state.inflight:      # delivered while its id was read
            raise LookupError("the delay message was delivered or recalled already")
        self._forget(key)
        return uniq

    async def _stored_uniq(self, k: Any) -> str | None:
        """The UNIQ_KEY of the timer queue's message behind journal key ``k`` (None: gone or
        unreadable now)."""
        _, ext = await self._stored(k)
        return None if ext is None else ext.properties.get("UNIQ_KEY")

    async def _stored(self, k: Any) -> tuple[bool, Any]:
        """(answered, message) of the timer queue's record behind journal key ``k``:
        (True, None) when the broker says it is gone, (False, None) when it cannot say now."""
        broker, offset = k[2], k[4]
        r = await asyncio.wrap_future(self.svc.transport.pull_message(broker, PullMessageRequest(
            consumer_group=PULL_GROUP, topic=TIMER_TOPIC, queue_id=0, queue_offset=offset,
            max_msg_nums=1, sys_flag=0x4, subscription="*")))
        if r.code == ResponseCode.SUCCESS and r.messages and r.messages[0].queue_offset == offset:
            return True, r.messages[0]
        return r.code in (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.SUCCESS), None

    def _forget(self, k: Any) -> None:
        """Drop a waiting delay message's entry (delivered, recalled or gone)."""
        if k in self.svc.state.inflight:
            self.svc.state.drop(k)
            self.pending -= 1

    def _due(self, now: int) -> tuple[list[tuple[Any, InFlight]], int | None]:
        """The entries due by ``now``, earliest first, and the next deliver time after them:
        taken off the heap (a delivery that fails puts its entry back), stale ones skipped."""
        heap, inflight = self._heap, self.svc.state.inflight
        due: list[tuple[Any, InFlight]] = []
        while (top := heap.first()) is not None:
            v, k = top
            if v > now:
                return due, v
            heap.pop()
            due.append((k, inflight[k]))
        return due, None

    async def _run(self) -> None:
        while True:
            now = int(time.time() * 1000)
            due, later = self._due(now)
            for i, (k, e) in enumerate(due):
                try:
                    delivered = await self._deliver(k)
                except Exception:                # noqa: BLE001 - retried on the next round
                    log.exception("delivering delay message %s", k)
                    delivered = False
                if not delivered:
                    for k2, e2 in due[i:]:          # back on the heap, tried next round
                        self._heap.push(e2.visible_at, k2, self.pending)
                    await asyncio.sleep(1)
                    break
            wait = 1.0 if later is None else min(1.0, max(0.01, (later - now) / 1000))
            self._kick.clear()
            try:
                await asyncio.wait_for(self._kick.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _deliver(self, k: Any) -> bool:
        """Deliver one due message; False when it could not be read yet (tried again)."""
        broker, offset = k[2], k[4]
        answered, ext = await self._stored(k)
        if ext is None:
            if answered:
                log.warning("delay message at %s/%d is gone; dropped", broker, offset)
                self._forget(k)
            return answered
        props = ext.properties
        topic, qid = k[1], k[3]
        msg = Message(topic, bytes(ext.stored_body), properties=props, sys_flag=ext.sys_flag,
                      born_timestamp=ext.born_timestamp)
        s = await asyncio.wrap_future(self.svc.transport.send_message_async(
            broker, SendMessageRequest(producer_group=topic, topic=topic, queue_id=qid,
                                       messages=[msg])))
        if s.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"re-put to {topic}/{qid}: code {int(s.code)} {s.remark}")
        self._forget(k)
        self.svc.wake()
        return True
