"""Simple consumption over the POP journal (docs/grpc.md "Simple consumption"):
ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and the
auto-renew of push consumers' receipts. A mixin of ``MessagingService``."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from rocketstore.common import MessageExt
from rocketstore.common.names import group_problem, topic_problem
from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, PullMessageRequest,
                                         ResponseCode)
from rocketstore.errors import LimitExceededError, TransportError
from rocketstore.proxy import convert, protocol as pb
from rocketstore.proxy.common import (AUTO_RENEW_INVISIBLE_MS, MAX_INVISIBLE_MS,
                                      MIN_INVISIBLE_MS, RENEW_AHEAD_MS, RENEW_EVERY_S,
                                      RENEW_GONE_MS, RENEW_MAX_MS, TAG, RpcError, _now, _reply,
                                      _status, _tag_matches)
from rocketstore.proxy.limits import CONF_KEYS
from rocketstore.proxy.popstate import InFlight, Key
from rocketstore.proxy.registry import filter_problem

if TYPE_CHECKING:
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.proxy.limits import TtlLru
    from rocketstore.proxy.popstate import PopState
    from rocketstore.proxy.registry import Registry
    from rocketstore.proxy.service import ProxyConfig

log = logging.getLogger("rocketstore.proxy")


class ConsumeRpcs:
    """The consumer RPCs; ``self`` is the ``MessagingService``."""

    if TYPE_CHECKING:                 # what MessagingService provides
        cfg: ProxyConfig
        state: PopState
        transport: TcpTransport
        registry: Registry
        streams: dict[str, asyncio.Queue[Any]]
        renewing: dict[Key, tuple[str, int, str | None]]
        owners: dict[str, str]
        _pop_locks: dict[tuple[str, str], list[Any]]
        polling_receives: dict[str, int]
        polling_total: int
        _wake: asyncio.Event
        _rr: int
        _routes: TtlLru[str, Any]

        async def _queues(self, topic: str, perm_bit: int) -> list[tuple[str, int]]: ...
        @staticmethod
        def client_id(ctx: Any) -> str: ...
        def access_key(self, ctx: Any) -> str | None: ...
        def not_owner(self, cid: str, ctx: Any) -> str | None: ...
        def max_attempts(self, group: str) -> int: ...
        def wake(self) -> None: ...

    # -- ReceiveMessage -----------------------------------------------------------------------
    async def receive_message(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        def status(code: str, message: str = "") -> Any:
            r = pb.ReceiveMessageResponse()
            _status(r.status, code, message)
            return r

        def stamp() -> Any:
            r = pb.ReceiveMessageResponse()
            convert._set_ms(r.delivery_timestamp, _now())
            return r

        group, topic = req.group.name, req.message_queue.topic.name
        problem = topic_problem(topic)
        gproblem = group_problem(group)
        if req.auto_renew:
            invisible = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible = (req.invisible_duration.seconds * 1000 + req.invisible_duration.nanos //
                         1_000_000)
        poll_s = (req.long_polling_timeout.seconds + req.long_polling_timeout.nanos / 1e9
                  if req.HasField("long_polling_timeout") else 20.0)
        poll_s = min(max(poll_s, 5.0), 20.0)
        remaining = ctx.time_remaining()
        error: tuple[str, str] | None = None
        if remaining is not None and poll_s > remaining - 0.3:
            if remaining - 0.5 >= 5.0:
                poll_s = remaining - 0.5
            else:
                error = ("ILLEGAL_POLLING_TIME", "long polling time does not fit the deadline")
        if problem:
            error = ("ILLEGAL_TOPIC", problem)
        elif gproblem:
            error = ("ILLEGAL_CONSUMER_GROUP", gproblem)
        elif not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            error = ("ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible} ms is outside "
                                               f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]")
        expression = "*"
        if req.HasField("filter_expression"):
            if req.filter_expression.type not in (0, TAG):
                error = ("ILLEGAL_FILTER_EXPRESSION", "only TAG filters are supported")
            expression = req.filter_expression.expression or "*"
            why = filter_problem(expression)
            if why and not error:
                error = ("ILLEGAL_FILTER_EXPRESSION", why)
        if req.auto_renew and not error:
            why = self.not_owner(self.client_id(ctx), ctx)
            if why:
                error = ("FORBIDDEN", why)
        if error:
            yield status(*error)
            yield stamp()
            return
        # each receive in progress is a task, a wait and a re-pop of its queues on every new
        # message: bounded per connection (a client may open streams without end on one) and
        # in all (client ids and connections cost a client nothing)
        peer = ctx.peer() or ""
        lim = self.cfg.limits
        held = self.polling_receives.get(peer, 0)
        full = None
        if held >= lim.max_polling_receives_per_connection:
            full = (f"this connection has {held} ReceiveMessage calls waiting "
                    f"({CONF_KEYS['max_polling_receives_per_connection']}="
                    f"{lim.max_polling_receives_per_connection})")
        elif self.polling_total >= lim.max_polling_receives:
            full = (f"the proxy holds {self.polling_total} ReceiveMessage calls waiting "
                    f"({CONF_KEYS['max_polling_receives']}={lim.max_polling_receives})")
        if full:
            yield status("TOO_MANY_REQUESTS", full)
            yield stamp()
            return
        self.polling_receives[peer] = held + 1
        self.polling_total += 1
        try:
            async for r in self._receive(req, ctx, group, topic, expression, invisible, poll_s,
                                         status, stamp):
                yield r
        finally:
            self.polling_total -= 1
            left = self.polling_receives[peer] - 1
            if left:
                self.polling_receives[peer] = left
            else:
                del self.polling_receives[peer]

    async def _receive(self, req: Any, ctx: Any, group: str, topic: str, expression: str,
                       invisible: int, poll_s: float, status: Any, stamp: Any
                       ) -> AsyncIterator[Any]:
        """ReceiveMessage once its request passed the checks: register the consumer, then
        pop until messages are found or the long-polling time is up."""
        try:
            new = self.registry.add_consumer(group, {topic: expression})
        except LimitExceededError as e:
            yield status(pb.enum_name("Code", e.code), str(e))
            yield stamp()
            return
        if new:
            await asyncio.to_thread(self.registry.heartbeat_now)
        batch = min(req.batch_size or 32, 32)
        deadline = time.monotonic() + poll_s
        # whose receipts to renew: the client id, and the access key that received them
        renew_for = (self.client_id(ctx), self.access_key(ctx)) if req.auto_renew else None
        while True:
            wake = self._wake
            try:
                found = await self.pop(group, topic, expression, batch, invisible, renew_for)
            except RpcError as e:
                yield status(e.code, str(e))
                yield stamp()
                return
            except TransportError as e:
                self._routes.pop(topic, None)   # a restarted broker may have a new address
                yield status("PROXY_TIMEOUT", str(e))
                yield stamp()
                return
            if found:
                yield status("OK")
                for m in found:
                    r = pb.ReceiveMessageResponse()
                    r.message.CopyFrom(m)
                    yield r
                yield stamp()
                return
            left = deadline - time.monotonic()
            if left <= 0:
                yield status("MESSAGE_NOT_FOUND", "no new message")
                yield stamp()
                return
            nv = self.state.next_visible()
            cap = min(left, 0.5)
            if nv is not None:
                cap = min(cap, max(0.05, (nv - _now()) / 1000))
            try:
                await asyncio.wait_for(wake.wait(), cap)
            except asyncio.TimeoutError:
                pass

    async def _pull(self, broker: str, topic: str, qid: int, offset: int, n: int, group: str
                    ) -> tuple[list[MessageExt], int]:
        r = await asyncio.wrap_future(self.transport.pull_message(broker, PullMessageRequest(
            consumer_group=group, topic=topic, queue_id=qid, queue_offset=offset, max_msg_nums=n,
            sys_flag=0x4, subscription="*")))
        if r.code == ResponseCode.SUCCESS:
            return r.messages, r.next_begin_offset
        if r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                      ResponseCode.PULL_OFFSET_MOVED):
            return [], r.next_begin_offset
        raise RpcError("INTERNAL_SERVER_ERROR", f"pull {topic}/{qid}@{offset} from {broker}: "
                                                f"code {int(r.code)} {r.remark or ''}")

    async def _init_cursor(self, broker: str, topic: str, qid: int) -> int:
        lo = await asyncio.to_thread(self.transport.get_min_offset, broker, topic, qid)
        if lo == 0:
            return 0
        return int(await asyncio.to_thread(self.transport.get_max_offset, broker, topic, qid))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            now = _now()
            for k, (cid, pt, ak) in list(self.renewing.items()):
                e = self.state.inflight.get(k)
                if e is None or e.pop_time != pt:
                    del self.renewing[k]              # acked, nacked or redelivered
                elif cid not in self.streams or self.owners.get(cid) != ak:
                    # the client left, or its id is now another key's stream
                    self.state.extend(k, pt, now + RENEW_GONE_MS)
                    del self.renewing[k]
                elif e.visible_at - now < RENEW_AHEAD_MS and now - pt < RENEW_MAX_MS:
                    self.state.extend(k, pt, now + AUTO_RENEW_INVISIBLE_MS)

    async def pop(self, group: str, topic: str, expression: str, batch: int, invisible: int,
                  renew_for: tuple[str, str | None] | None = None) -> list[Any]:
        """Up to ``batch`` messages made invisible for ``invisible`` ms: due redeliveries first,
        then new ones, queue by queue from a rotating start. One pop at a time per group and
        topic: a pop reads cursors and entries across awaits (pulls), and two consumers of a
        group must not both take what they read."""
        key = (group, topic)
        held = self._pop_locks.setdefault(key, [asyncio.Lock(), 0])
        held[1] += 1                    # counted, not tested with locked(): a woken waiter
        try:                            # holds no lock yet but must keep this one
            async with held[0]:
                return await self._pop(group, topic, expression, batch, invisible, renew_for)
        finally:
            held[1] -= 1
            if not held[1]:
                del self._pop_locks[key]

    async def _pop(self, group: str, topic: str, expression: str, batch: int, invisible: int,
                   renew_for: tuple[str, str | None] | None) -> list[Any]:
        queues = await self._queues(topic, 4)
        fifo = group in self.cfg.fifo_groups
        max_attempts = self.max_attempts(group)
        self._rr += 1
        start = self._rr % len(queues)
        now = _now()
        picked: list[tuple[Key, MessageExt, int]] = []
        cursors: list[tuple[tuple[str, str, str, int], int]] = []
        for broker, qid in queues[start:] + queues[:start]:
            if len(picked) >= batch:
                break
            qk = (group, topic, broker, qid)
            entries = self.state.queue_entries(qk)
            if fifo and any(e.visible_at > now for _, e in entries):
                continue                       # a FIFO queue waits for its in-flight head
            for off, e in entries:
                if len(picked) >= batch or e.visible_at > now:
                    continue
                k = (*qk, off)
                msgs, _ = await self._pull(broker, topic, qid, off, 1, group)
                if not msgs or msgs[0].queue_offset != off:
                    self.state.drop(k)         # gone from the store (expired files)
                    continue
                if e.attempt + 1 > max_attempts:
                    await self._to_dlq(broker, group, msgs[0], e.attempt)
                    self.state.drop(k)
                    continue
                picked.append((k, msgs[0], e.attempt + 1))
            if len(picked) >= batch:
                break
            cursor = self.state.cursors.get(qk)
            if cursor is None:
                cursor = await self._init_cursor(broker, topic, qid)
            msgs, next_begin = await self._pull(broker, topic, qid, cursor,
                                                batch - len(picked), group)
            new_cursor = next_begin if not msgs else cursor
            for ext in msgs:
                if len(picked) >= batch:
                    break
                new_cursor = ext.queue_offset + 1
                if not _tag_matches(expression, ext.tags):
                    continue                   # filtered out: counts as consumed
                attempt = ext.reconsume_times + 1
                picked.append(((*qk, ext.queue_offset), ext, attempt))
            if new_cursor != cursor:
                cursors.append((qk, new_cursor))
        if not picked and not cursors:
            return []
        pops = []
        out = []
        for k, ext, attempt in picked:
            pt = now
            e = InFlight(pt, now + invisible, attempt, ext.commitlog_offset)
            pops.append((k, e))
            if renew_for:
                self.renewing[k] = (renew_for[0], pt, renew_for[1])
            m = convert.to_grpc(ext, pb.Message(), topic=topic)
            sp = m.system_properties
            sp.delivery_attempt = attempt
            sp.receipt_handle = self.handle(k, e, invisible, fifo)
            out.append(m)
        for i, c in enumerate(cursors):
            self.state.record_pops(c, pops if i == 0 else [])
        if not cursors:
            self.state.record_pops(None, pops)
        return out

    @staticmethod
    def _bad_names(group: str, topic: str) -> tuple[str, str] | None:
        """(code, message) for a receipt-handle RPC naming an invalid group or topic: the
        journal holds entries of valid names only (and the delay timer's, under a name no
        client can give), so none of them is reachable through another name."""
        why = group_problem(group)
        if why is not None:
            return "ILLEGAL_CONSUMER_GROUP", why
        why = topic_problem(topic)
        if why is not None:
            return "ILLEGAL_TOPIC", why
        return None

    @staticmethod
    def handle(k: Key, e: InFlight, invisible: int, fifo: bool) -> str:
        """RocketMQ's receipt-handle layout: start offset, pop time, invisible ms, revive
        queue (999 = FIFO), topic type, broker, queue id, queue offset, commit-log offset."""
        group, topic, broker, qid, off = k
        return (f"{off} {e.pop_time} {e.visible_at - e.pop_time} {999 if fifo else 0} 0 "
                f"{broker} {qid} {off} {e.commit_log_offset}")

    @staticmethod
    def parse_handle(h: str, group: str, topic: str) -> tuple[Key, int] | None:
        f = h.split(" ")
        if len(f) < 8:
            return None
        try:
            return (group, topic, f[5], int(f[6]), int(f[7])), int(f[1])
        except ValueError:
            return None

    async def _to_dlq(self, broker: str, group: str, ext: MessageExt, attempts: int) -> None:
        r = await asyncio.to_thread(self.transport.consumer_send_msg_back, broker,
                                    ConsumerSendMsgBackRequest(
                                        group=group, offset=ext.commitlog_offset, delay_level=-1,
                                        origin_msg_id=ext.uniq_key or ext.msg_id,
                                        origin_topic=ext.topic, max_reconsume_times=0))
        if r.code != ResponseCode.SUCCESS:
            raise RpcError("INTERNAL_SERVER_ERROR", f"moving {ext.msg_id} to the DLQ of {group}:"
                                                    f" code {int(r.code)} {r.remark or ''}")
        log.info("message %s of %s moved to %%DLQ%%%s after %d deliveries",
                 ext.uniq_key, ext.topic, group, attempts)

    # -- AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue ---------------
    async def ack_message(self, req: Any, ctx: Any) -> Any:
        resp = pb.AckMessageResponse()
        group, topic = req.group.name, req.topic.name
        bad = self._bad_names(group, topic)
        if bad is not None:
            return _reply(resp, *bad)
        codes = set()
        for entry in req.entries:
            out = resp.entries.add(message_id=entry.message_id,
                                   receipt_handle=entry.receipt_handle)
            parsed = self.parse_handle(entry.receipt_handle, group, topic)
            if parsed is None:
                _status(out.status, "INVALID_RECEIPT_HANDLE", "malformed receipt handle")
            else:
                why = self.state.ack(parsed[0], parsed[1], _now())
                if why:
                    _status(out.status, "INVALID_RECEIPT_HANDLE", why)
                else:
                    _status(out.status, "OK")
                    if group in self.cfg.fifo_groups:
                        self.wake()
            codes.add(out.status.code)
        if len(codes) == 1:
            c = codes.pop()
            resp.status.code, resp.status.message = c, pb.enum_name("Code", c)
        else:
            _status(resp.status, "MULTIPLE_RESULTS")
        return resp

    async def change_invisible_duration(self, req: Any, ctx: Any) -> Any:
        resp = pb.ChangeInvisibleDurationResponse()
        d = req.invisible_duration.seconds * 1000 + req.invisible_duration.nanos // 1_000_000
        if not 0 <= d <= MAX_INVISIBLE_MS:
            return _reply(resp, "ILLEGAL_INVISIBLE_TIME",
                           f"invisible duration {d} ms is over {MAX_INVISIBLE_MS}")
        bad = self._bad_names(req.group.name, req.topic.name)
        if bad is not None:
            return _reply(resp, *bad)
        parsed = self.parse_handle(req.receipt_handle, req.group.name, req.topic.name)
        if parsed is None:
            return _reply(resp, "INVALID_RECEIPT_HANDLE", "malformed receipt handle")
        now = _now()
        e = self.state.change_invisible(parsed[0], parsed[1], now, now + d)
        if isinstance(e, str):
            return _reply(resp, "INVALID_RECEIPT_HANDLE", e)
        resp.receipt_handle = self.handle(parsed[0], e, d,
                                          req.group.name in self.cfg.fifo_groups)
        return _reply(resp, "OK")

    async def forward_to_dlq(self, req: Any, ctx: Any) -> Any:
        resp = pb.ForwardMessageToDeadLetterQueueResponse()
        bad = self._bad_names(req.group.name, req.topic.name)
        if bad is not None:
            return _reply(resp, *bad)
        parsed = self.parse_handle(req.receipt_handle, req.group.name, req.topic.name)
        if parsed is None:
            return _reply(resp, "INVALID_RECEIPT_HANDLE", "malformed receipt handle")
        k, pt = parsed
        e = self.state.inflight.get(k)
        if e is None or e.pop_time != pt:
            return _reply(resp, "INVALID_RECEIPT_HANDLE",
                           "receipt handle is expired or already used")
        msgs, _ = await self._pull(k[2], k[1], k[3], k[4], 1, k[0])
        if msgs:
            try:
                await self._to_dlq(k[2], k[0], msgs[0], e.attempt)
            except RpcError as err:
                return _reply(resp, err.code, str(err))
        self.state.drop(k)
        return _reply(resp, "OK")
