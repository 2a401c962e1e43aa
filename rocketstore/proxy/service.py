"""``apache.rocketmq.v2.MessagingService`` served over grpc.aio, in cluster mode: brokers are
reached through the NameServer and RocketMQ's remoting protocol (``TcpTransport``).

Every unary answer carries its outcome in ``status`` (gRPC itself says OK); RPCs the proxy does
not serve are not registered, so grpc answers ``UNIMPLEMENTED`` as RocketMQ's proxy does.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import grpc  # type: ignore[import-untyped]

from rocketstore.acl.signature import SessionCredentials
from rocketstore.client.tcp import TcpTransport
from rocketstore.common import MessageExt
from rocketstore.common.names import group_problem, topic_problem
from rocketstore.common.protocol import (CheckTransactionStateRequest, EndTransactionRequest,
                                         ResponseCode, SendMessageRequest, TopicRouteData,
                                         TransactionCommitType)
from rocketstore.errors import LimitExceededError, TransportError
from rocketstore.proxy import convert, protocol as pb
from rocketstore.proxy.auth import GrpcAuthenticator, parse_zones
from rocketstore.proxy.common import (ACCEPTS, BACKOFF_S, C, DEDUP_MAX, DEDUP_WINDOW_S, MAX_BODY,
                                      MAX_DELAY_MS, PERM, ROUTE_TTL_S, _SEND_CODES, RpcError,
                                      _now, _offset_msg_commit_offset, _reply, _status)
from rocketstore.proxy.consume import ConsumeRpcs
from rocketstore.proxy.limits import CONF_KEYS, ProxyLimits, TtlLru
from rocketstore.proxy.popstate import Key, PopState
from rocketstore.proxy.registry import Registry, filter_problem
from rocketstore.proxy.timer import DelayTimer

log = logging.getLogger("rocketstore.proxy")

class ProxyConfig:
    """What ``rocketstore proxy`` is told on its command line."""

    def __init__(self, namesrv: str, data_dir: str, *, fifo_groups: frozenset[str] = frozenset(),
                 max_attempts: dict[str, int] | None = None, default_max_attempts: int = 17,
                 acl_file: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, message_types: dict[str, str] | None = None,
                 default_message_type: str = "NORMAL", limits: ProxyLimits | None = None,
                 security_token: str | None = None, auth_client_zones: str = "any") -> None:
        """``acl_file``: check 5.x clients' signatures and permissions against this
        ``plain_acl.yml``; ``access_key``/``secret_key`` (and ``security_token``, sent as the
        wire's ``SecurityToken``): sign the proxy's own requests to brokers that have ACL on;
        ``limits``: the bounds on what clients can make it hold (``ProxyLimits``);
        ``auth_client_zones``: the zones clients sign their dates in (``auth.parse_zones``:
        ``any``, or e.g. ``UTC,+08:00``), ``ValueError`` naming a bad entry."""
        self.namesrv = namesrv
        self.message_types = dict(message_types or {})
        self.default_message_type = default_message_type
        for t in (default_message_type, *self.message_types.values()):
            if t not in ACCEPTS:
                raise ValueError(f"message type {t!r}: expected one of {', '.join(ACCEPTS)}")
        self.acl_file = acl_file
        self.access_key = access_key
        self.secret_key = secret_key
        self.security_token = security_token
        self.limits = limits or ProxyLimits()
        self.auth_zones = parse_zones(auth_client_zones)
        self.data_dir = data_dir
        self.fifo_groups = fifo_groups
        self.max_attempts = dict(max_attempts or {})
        self.default_max_attempts = default_max_attempts


class MessagingService(ConsumeRpcs):
    """The RPC implementations and the client/transaction tables they share."""

    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        os.makedirs(cfg.data_dir, exist_ok=True)
        creds = (SessionCredentials(cfg.access_key, cfg.secret_key, cfg.security_token)
                 if cfg.access_key and cfg.secret_key else None)
        self.transport = TcpTransport(cfg.namesrv, credentials=creds)
        self.auth = (GrpcAuthenticator(cfg.acl_file, cfg.limits.auth_max_skew_s,
                                       cfg.auth_zones) if cfg.acl_file else None)
        self.state = PopState(os.path.join(cfg.data_dir, "pop.journal"))
        self.settings: dict[str, Any] = {}
        self.streams: dict[str, asyncio.Queue[Any]] = {}
        # client id -> the gRPC peer (connection) of its Telemetry stream: the header names a
        # client, the connection proves it (NotifyClientTermination)
        self.stream_peers: dict[str, str] = {}
        # client id -> the access key of its Telemetry stream (ACL on): only that key may
        # replace the stream, end the client or tie auto-renewed receipts to the id
        self.owners: dict[str, str] = {}
        # topic -> route / message.type; LRU, so names asked (real or not) never pile up
        self._routes: TtlLru[str, TopicRouteData | None] = TtlLru(cfg.limits.route_cache_max,
                                                                  ROUTE_TTL_S)
        self._types: TtlLru[str, str] = TtlLru(cfg.limits.route_cache_max, ROUTE_TTL_S)
        self._rr = 0
        # message id -> the first send's outcome (status code, message, offset), so a client
        # retrying a send whose answer it lost does not store the message twice
        self._recent: collections.OrderedDict[str, tuple[float, asyncio.Future[Any]]] = \
            collections.OrderedDict()
        self._wake = asyncio.Event()
        self.timer = DelayTimer(self)
        # key -> (client id, pop time, the access key that received it (None: no ACL))
        self.renewing: dict[Key, tuple[str, int, str | None]] = {}
        # (group, topic) -> its pop lock and how many pops use it (gone when none does)
        self._pop_locks: dict[tuple[str, str], list[Any]] = {}
        # ReceiveMessage calls in progress, by gRPC peer (a connection), and in all
        self.polling_receives: dict[str, int] = {}
        self.polling_total = 0
        self._renewer: asyncio.Task[None] | None = None
        self.registry = Registry(self.transport, self._on_check, cfg.limits)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.timer.start()
        self._renewer = asyncio.ensure_future(self._renew_loop())

    async def close(self) -> None:
        await self.timer.stop()
        if self._renewer is not None:
            self._renewer.cancel()
        self.registry.close()
        if self.auth is not None:
            self.auth.close()
        self.state.close()
        self.transport.close()

    def wake(self) -> None:
        """New messages or visibility changes: long-polling receives look again."""
        self._wake.set()
        self._wake = asyncio.Event()

    # -- helpers ------------------------------------------------------------------------------
    def refused(self, rpc: str, req: Any, ctx: Any) -> str | None:
        """Why the call is not allowed (ACL on), or None."""
        if self.auth is None:
            return None
        md = {str(k): str(v) for k, v in ctx.invocation_metadata() or ()}
        return self.auth.check(rpc, req, md, ctx.peer() or "")

    def access_key(self, ctx: Any) -> str | None:
        """The access key the call proves (ACL on; "" for a white-listed caller proving
        none), or None without ACL (nothing identifies a caller)."""
        if self.auth is None:
            return None
        md = {str(k): str(v) for k, v in ctx.invocation_metadata() or ()}
        return self.auth.authenticate("", None, md, ctx.peer() or "")[1]

    def not_owner(self, cid: str, ctx: Any) -> str | None:
        """Why this caller may not act for client ``cid`` (its Telemetry stream was opened
        with another access key), or None."""
        owner = self.owners.get(cid)
        if owner is None:
            return None
        ak = self.access_key(ctx)
        if ak == owner:
            return None
        return (f"client id {cid} belongs to another access key's Telemetry stream (this "
                f"call's is {ak or 'none'!r}): a client id is bound to the access key that "
                "registered it")

    @staticmethod
    def client_id(ctx: grpc.aio.ServicerContext) -> str:
        for k, v in ctx.invocation_metadata() or ():
            if k == "x-mq-client-id":
                return str(v)
        return ""

    async def route(self, topic: str) -> TopicRouteData | None:
        hit, cached = self._routes.get(topic)
        if hit:
            return cached
        try:
            r = await asyncio.to_thread(self.transport.get_topic_route, topic)
        except TransportError as e:
            raise RpcError("PROXY_TIMEOUT", f"NameServer unreachable: {e}") from None
        self._routes.put(topic, r)
        return r

    async def _queues(self, topic: str, perm_bit: int) -> list[tuple[str, int]]:
        r = await self.route(topic)
        if r is None:
            raise RpcError("TOPIC_NOT_FOUND", f"topic {topic} not found")
        out = []
        for qd in r.queue_datas:
            if 0 not in r.broker_addrs.get(qd.broker_name, {}) or not qd.perm & perm_bit:
                continue
            n = qd.write_queue_nums if perm_bit == 2 else qd.read_queue_nums
            out += [(qd.broker_name, i) for i in range(n)]
        if not out:
            raise RpcError("FORBIDDEN", "no writable queue" if perm_bit == 2 else
                           "no readable queue")
        return out

    async def message_type(self, topic: str) -> str:
        """The topic's ``message.type``: the proxy's ``--message-type TOPIC=T`` if given, else
        the attribute a master broker keeps with the topic (GET_TOPIC_CONFIG, as RocketMQ 5's
        proxy reads it; cached for ``ROUTE_TTL_S``), else (a 4.9 topic or broker) the proxy's
        ``'*=T'``, NORMAL by default as in RocketMQ 5."""
        override = self.cfg.message_types.get(topic)
        if override is not None:
            return override
        hit, cached = self._types.get(topic)
        if hit and cached is not None:
            return cached
        kind = None
        r = await self.route(topic)
        masters = r.broker_addrs if r is not None else {}
        for qd in (r.queue_datas if r is not None else ()):
            if 0 not in masters.get(qd.broker_name, {}):
                continue
            try:
                attrs = await asyncio.to_thread(self.transport.get_topic_attributes,
                                                qd.broker_name, topic)
            except TransportError as e:
                log.warning("topic config of %s at %s: %s", topic, qd.broker_name, e)
                continue
            if attrs is not None:
                kind = attrs.get("message.type")
                break
        if kind not in ACCEPTS:
            kind = self.cfg.default_message_type
        self._types.put(topic, kind)
        return kind

    def max_attempts(self, group: str) -> int:
        return self.cfg.max_attempts.get(group, self.cfg.default_max_attempts)

    # -- QueryRoute ---------------------------------------------------------------------------
    async def query_route(self, req: Any, ctx: Any) -> Any:
        resp = pb.QueryRouteResponse()
        topic = req.topic.name
        problem = topic_problem(topic)
        if problem:
            _status(resp.status, "ILLEGAL_TOPIC", problem)
            return resp
        r = await self.route(topic)
        if r is None:
            _status(resp.status, "TOPIC_NOT_FOUND", f"topic {topic} not found")
            return resp
        accepts = ACCEPTS[await self.message_type(topic)]
        for qd in r.queue_datas:
            ids = r.broker_addrs.get(qd.broker_name, {})
            readable, writable = bool(qd.perm & 4), bool(qd.perm & 2)
            rn = qd.read_queue_nums if readable else 0
            wn = qd.write_queue_nums if writable else 0
            for broker_id in sorted(ids):
                for qid in range(max(rn, wn, 1)):
                    perm = ("READ_WRITE" if qid < min(rn, wn) else "READ" if qid < rn
                            else "WRITE" if qid < wn else "NONE")
                    mq = resp.message_queues.add(id=qid, permission=PERM[perm])
                    mq.topic.name = topic
                    mq.topic.resource_namespace = req.topic.resource_namespace
                    mq.broker.name, mq.broker.id = qd.broker_name, broker_id
                    mq.broker.endpoints.CopyFrom(req.endpoints)
                    mq.accept_message_types.extend(accepts)
        return _reply(resp, "OK")

    # -- Telemetry ----------------------------------------------------------------------------
    def merged_settings(self, s: Any) -> Any:
        out = pb.Settings()
        out.CopyFrom(s)
        out.metric.Clear()
        out.metric.on = False
        if s.WhichOneof("pub_sub") == "publishing":
            out.backoff_policy.Clear()
            out.backoff_policy.max_attempts = 3
            eb = out.backoff_policy.exponential_backoff
            eb.initial.nanos, eb.max.seconds, eb.multiplier = 10_000_000, 1, 2.0
            out.publishing.max_body_size = MAX_BODY
            out.publishing.validate_message_type = True
        elif s.WhichOneof("pub_sub") == "subscription":
            group = s.subscription.group.name
            out.subscription.receive_batch_size = 32
            out.subscription.long_polling_timeout.seconds = 20
            out.subscription.fifo = group in self.cfg.fifo_groups
            out.backoff_policy.Clear()
            out.backoff_policy.max_attempts = self.max_attempts(group)
            for sec in BACKOFF_S:
                out.backoff_policy.customized_backoff.next.add(seconds=sec)
        return out

    async def telemetry(self, requests: AsyncIterator[Any], ctx: Any) -> AsyncIterator[Any]:
        cid = self.client_id(ctx)
        if not cid:
            cmd = pb.TelemetryCommand()
            _status(cmd.status, "CLIENT_ID_REQUIRED", "x-mq-client-id is required")
            yield cmd
            return
        why = self.refused("Telemetry", None, ctx)
        if why:
            cmd = pb.TelemetryCommand()
            _status(cmd.status, "UNAUTHORIZED", why)
            yield cmd
            return
        why = self.not_owner(cid, ctx)
        if why:                             # the owner's stream stays
            cmd = pb.TelemetryCommand()
            _status(cmd.status, "FORBIDDEN", why)
            yield cmd
            return
        lim = self.cfg.limits
        if cid not in self.streams and len(self.streams) >= lim.max_clients:
            cmd = pb.TelemetryCommand()
            _status(cmd.status, "TOO_MANY_REQUESTS",
                    f"the proxy holds {len(self.streams)} clients' Telemetry streams "
                    f"({CONF_KEYS['max_clients']}={lim.max_clients})")
            yield cmd
            return
        out: asyncio.Queue[Any] = asyncio.Queue()
        old = self.streams.get(cid)
        if old is not None:
            old.put_nowait(None)            # one stream per client id: the newer one wins
        self.streams[cid] = out
        self.stream_peers[cid] = ctx.peer() or ""
        ak = self.access_key(ctx)
        if ak is not None:
            self.owners[cid] = ak

        async def read() -> None:
            try:
                async for cmd in requests:
                    if cmd.WhichOneof("command") == "settings":
                        if cmd.settings.WhichOneof("pub_sub") is None:
                            await out.put(grpc.StatusCode.INVALID_ARGUMENT)
                            return
                        reply = pb.TelemetryCommand()
                        if self.streams.get(cid) is not out:
                            return                  # replaced by a newer stream
                        try:
                            await self._register(cid, cmd.settings)
                        except RpcError as e:       # nothing registered, the stream stays
                            _status(reply.status, e.code, str(e))
                            await out.put(reply)
                            continue
                        self.settings[cid] = cmd.settings
                        _status(reply.status, "OK")
                        reply.settings.CopyFrom(self.merged_settings(cmd.settings))
                        await out.put(reply)
                        if cmd.settings.WhichOneof("pub_sub") == "publishing":
                            self.timer.producer_online(cid)
            finally:
                await out.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                item = await out.get()
                if item is None:
                    return
                if isinstance(item, grpc.StatusCode):
                    await ctx.abort(item, "settings carry neither publishing nor subscription")
                yield item
        finally:
            reader.cancel()
            if self.streams.get(cid) is out:
                del self.streams[cid]
                self.stream_peers.pop(cid, None)
                self.owners.pop(cid, None)
                await self._forget(cid)

    def _check_settings(self, s: Any) -> None:
        """Names and sizes of a client's settings, checked before any table holds them."""
        lim = self.cfg.limits
        if s.WhichOneof("pub_sub") == "publishing":
            topics = [t.name for t in s.publishing.topics]
        else:
            problem = group_problem(s.subscription.group.name)
            if problem:
                raise RpcError("ILLEGAL_CONSUMER_GROUP", problem)
            topics = [e.topic.name for e in s.subscription.subscriptions]
            for e in s.subscription.subscriptions:
                why = filter_problem(e.expression.expression)
                if why:
                    raise RpcError("ILLEGAL_FILTER_EXPRESSION", why)
        if len(topics) > lim.max_topics_per_client:
            raise RpcError("BAD_REQUEST", f"the settings name {len(topics)} topics "
                                          f"({CONF_KEYS['max_topics_per_client']}="
                                          f"{lim.max_topics_per_client})")
        for t in topics:
            problem = topic_problem(t)
            if problem:
                raise RpcError("ILLEGAL_TOPIC", problem)

    async def _register(self, cid: str, s: Any) -> None:
        """Announce a client's producer topics / consumer group to the brokers; ``RpcError``
        (nothing registered) for bad names or past a limit."""
        self._check_settings(s)
        try:
            if s.WhichOneof("pub_sub") == "publishing":
                new = self.registry.set_producer(cid, [t.name for t in s.publishing.topics])
            else:
                sub = s.subscription
                new = self.registry.add_consumer(sub.group.name, {
                    e.topic.name: (e.expression.expression or "*") for e in sub.subscriptions},
                    holder=cid)
        except LimitExceededError as e:
            raise RpcError(pb.enum_name("Code", e.code), str(e)) from None   # the 5.x status
        if new:
            await asyncio.to_thread(self.registry.heartbeat_now)

    def _on_check(self, broker: str, req: CheckTransactionStateRequest, msg: MessageExt) -> None:
        """The broker asks about a half message left open (a transport thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._recover, broker, req, msg)

    def _recover(self, broker: str, req: CheckTransactionStateRequest, msg: MessageExt) -> None:
        topic = msg.properties.get("REAL_TOPIC") or msg.topic
        txid = msg.uniq_key or req.transaction_id or ""
        self.state.open_transaction(txid, broker, req.tran_state_table_offset,
                                    req.commit_log_offset, req.offset_msg_id)
        for cid, s in list(self.settings.items()):
            stream = self.streams.get(cid)
            if stream is None or s.WhichOneof("pub_sub") != "publishing" or \
                    topic not in {t.name for t in s.publishing.topics}:
                continue
            cmd = pb.TelemetryCommand()
            rc = cmd.recover_orphaned_transaction_command
            convert.to_grpc(msg, rc.message, topic=topic)
            rc.transaction_id = txid
            stream.put_nowait(cmd)
            log.info("orphan transaction %s of %s sent to producer %s", txid, topic, cid)
            return
        log.info("orphan transaction %s of %s: no producer online", txid, topic)

    # -- Heartbeat / NotifyClientTermination --------------------------------------------------
    async def heartbeat(self, req: Any, ctx: Any) -> Any:
        resp = pb.HeartbeatResponse()
        problem = group_problem(req.group.name) if req.HasField("group") else None
        if problem:
            return _reply(resp, "ILLEGAL_CONSUMER_GROUP", problem)
        return _reply(resp, "OK")

    async def notify_client_termination(self, req: Any, ctx: Any) -> Any:
        """End the calling client: only from the connection its Telemetry stream is on (any
        caller can put another client's id in ``x-mq-client-id``), and with ACL on from the
        access key of that stream; a client without a stream holds nothing (it left with the
        stream), so that is OK from anywhere."""
        resp = pb.NotifyClientTerminationResponse()
        cid = self.client_id(ctx)
        held = self.stream_peers.get(cid)
        if held is None:
            return _reply(resp, "OK")
        why = self.not_owner(cid, ctx)
        if why:
            return _reply(resp, "FORBIDDEN", why)
        if held != (ctx.peer() or ""):
            return _reply(resp, "FORBIDDEN",
                          f"client {cid}'s Telemetry stream is on another connection: a client "
                          "can only end itself, on the connection of its own stream")
        await self._forget(cid)
        return _reply(resp, "OK")

    async def _forget(self, cid: str) -> None:
        """A client left (NotifyClientTermination or its Telemetry stream ended): a consumer
        group none of the remaining clients uses leaves the brokers."""
        self.settings.pop(cid, None)
        # always: a stream closed while its settings were being registered (the reader was
        # cancelled in the heartbeat) holds topics or a group but no settings entry. The tables
        # change here, before any await: gRPC cancels a stream's handler again while its
        # ``finally`` awaits, and a to_thread job cancelled before it started never ran.
        gone = self.registry.remove_client(cid)
        if gone:            # the brokers' unregister outlives a cancelled handler
            await asyncio.shield(asyncio.to_thread(self.registry.leave, gone))

    # -- SendMessage --------------------------------------------------------------------------
    def _validate_message(self, m: Any, topic: str, want: str) -> None:
        if m.topic.name != topic:
            raise RpcError("MESSAGE_CORRUPTED", "messages of one request must share a topic")
        if not m.body:
            raise RpcError("MESSAGE_BODY_EMPTY", "message body is empty")
        if len(m.body) > MAX_BODY:
            raise RpcError("MESSAGE_BODY_TOO_LARGE",
                           f"message body is {len(m.body)} bytes, over {MAX_BODY}")
        for k in m.user_properties:
            if k in convert.RESERVED:
                raise RpcError("ILLEGAL_MESSAGE_PROPERTY_KEY", f"property key {k!r} is reserved")
        sp = m.system_properties
        if not sp.message_id.strip():
            raise RpcError("ILLEGAL_MESSAGE_ID", "message_id is blank")
        if sp.HasField("delivery_timestamp"):
            if convert._ms(sp.delivery_timestamp) - _now() > MAX_DELAY_MS:
                raise RpcError("ILLEGAL_DELIVERY_TIME", "delivery_timestamp is more than a "
                                                        "day away")
        if sp.HasField("message_group"):
            g = sp.message_group
            if not g.strip() or len(g.encode()) >= 64:
                raise RpcError("ILLEGAL_MESSAGE_GROUP", f"message_group {g!r} is blank or "
                                                        "64 bytes or longer")
        # the type the stored properties will say (never the client's message_type word)
        kind = ("TRANSACTION" if sp.message_type == convert.TRANSACTION else
                "DELAY" if sp.HasField("delivery_timestamp") else
                "FIFO" if sp.HasField("message_group") and sp.message_group else "NORMAL")
        if want != "MIXED" and kind != want and not topic.startswith(("%RETRY%", "%DLQ%")):
            raise RpcError("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
                           f"a {kind} message cannot be sent to {topic}, a {want} topic")

    async def send_message(self, req: Any, ctx: Any) -> Any:
        resp = pb.SendMessageResponse()
        try:
            if not req.messages:
                raise RpcError("MESSAGE_CORRUPTED", "no message to send")
            topic = req.messages[0].topic.name
            problem = topic_problem(topic)
            if problem:
                raise RpcError("ILLEGAL_TOPIC", problem)
            want = await self.message_type(topic)
            for m in req.messages:
                self._validate_message(m, topic, want)
            queues = await self._queues(topic, 2)
            peer = ctx.peer() or ""
            for m in req.messages:
                await self._send_one(m, topic, queues, peer, resp.entries.add())
            codes = {e.status.code for e in resp.entries}
            if len(codes) == 1:
                resp.status.CopyFrom(resp.entries[0].status)
            else:
                _status(resp.status, "MULTIPLE_RESULTS")
        except RpcError as e:
            del resp.entries[:]
            _status(resp.status, e.code, str(e))
        return resp

    async def _send_one(self, m: Any, topic: str, queues: list[tuple[str, int]], peer: str,
                        entry: Any) -> None:
        """Store one message, or answer a retry of a message id sent within the last
        ``DEDUP_WINDOW_S`` with the first send's result (stored once)."""
        mid = m.system_properties.message_id
        now = time.monotonic()
        while self._recent and (len(self._recent) > DEDUP_MAX or
                                next(iter(self._recent.values()))[0] < now - DEDUP_WINDOW_S):
            self._recent.popitem(last=False)
        seen = self._recent.get(mid)
        if seen is not None:
            entry.CopyFrom(await asyncio.shield(seen[1]))
            if entry.status.code == C["OK"]:
                return
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._recent[mid] = (now, fut)
        try:
            await self._store_one(m, topic, queues, peer, entry)
        finally:
            done = pb.SendResultEntry()
            done.CopyFrom(entry)
            fut.set_result(done)
            if entry.status.code != C["OK"] and self._recent.get(mid, (0, None))[1] is fut:
                del self._recent[mid]         # a failed send may be retried for real

    async def _store_one(self, m: Any, topic: str, queues: list[tuple[str, int]], peer: str,
                         entry: Any) -> None:
        msg, deliver_ms = convert.to_stored(m, peer.partition(":")[2] or peer)
        sp = m.system_properties
        if sp.HasField("message_group") and sp.message_group:
            broker, qid = queues[zlib.crc32(sp.message_group.encode()) % len(queues)]
        else:
            self._rr += 1
            broker, qid = queues[self._rr % len(queues)]
        if deliver_ms > _now() + 500 and sp.message_type != convert.TRANSACTION:
            await self.timer.schedule(msg, broker, qid, deliver_ms, entry)
            return
        request = SendMessageRequest(producer_group=topic, topic=topic, queue_id=qid,
                                     messages=[msg])
        try:
            r = await asyncio.wrap_future(self.transport.send_message_async(broker, request))
        except TransportError as e:
            self._routes.pop(topic, None)       # a restarted broker may have a new address
            _status(entry.status, "PROXY_TIMEOUT", str(e))
            return
        if r.code != ResponseCode.SUCCESS:
            _status(entry.status, _SEND_CODES.get(r.code, "INTERNAL_SERVER_ERROR"),
                    f"broker {broker}: code {int(r.code)} {r.remark or ''}")
            return
        _status(entry.status, "OK")
        entry.message_id = sp.message_id
        entry.transaction_id = sp.message_id
        entry.offset = r.queue_offset
        if sp.message_type == convert.TRANSACTION:
            self.state.open_transaction(sp.message_id, broker, r.queue_offset,
                                        _offset_msg_commit_offset(r.msg_id), r.msg_id or "")
        else:
            self.wake()

    # -- EndTransaction -----------------------------------------------------------------------
    async def end_transaction(self, req: Any, ctx: Any) -> Any:
        resp = pb.EndTransactionResponse()
        if not req.transaction_id.strip():
            return _reply(resp, "INVALID_TRANSACTION_ID", "transaction_id is blank")
        tx = self.state.end_transaction(req.transaction_id)
        if tx is None:
            return _reply(resp, "INTERNAL_SERVER_ERROR",
                           f"cannot find transaction data of {req.transaction_id}")
        broker, queue_offset, cl_offset, offset_msg_id = tx
        resolution = pb.enum_name("TransactionResolution", req.resolution)
        if resolution not in ("COMMIT", "ROLLBACK"):
            return _reply(resp, "OK")
        kind = (TransactionCommitType.COMMIT_TYPE if resolution == "COMMIT"
                else TransactionCommitType.ROLLBACK_TYPE)
        self.transport.end_transaction(broker, EndTransactionRequest(
            producer_group=req.topic.name, tran_state_table_offset=queue_offset,
            commit_log_offset=cl_offset, commit_or_rollback=kind,
            from_transaction_check=req.source == 2, msg_id=offset_msg_id,
            transaction_id=req.transaction_id))
        if resolution == "COMMIT":
            asyncio.get_running_loop().call_later(0.2, self.wake)
        return _reply(resp, "OK")

    # -- QueryAssignment ----------------------------------------------------------------------
    async def query_assignment(self, req: Any, ctx: Any) -> Any:
        resp = pb.QueryAssignmentResponse()
        problem = topic_problem(req.topic.name)
        if problem:
            return _reply(resp, "ILLEGAL_TOPIC", problem)
        problem = group_problem(req.group.name)
        if problem:
            return _reply(resp, "ILLEGAL_CONSUMER_GROUP", problem)
        try:
            queues = await self._queues(req.topic.name, 4)
        except RpcError as e:
            return _reply(resp, e.code, str(e))
        fifo = req.group.name in self.cfg.fifo_groups
        seen = set()
        for broker, qid in queues:
            if not fifo and broker in seen:
                continue
            seen.add(broker)
            a = resp.assignments.add()
            mq = a.message_queue
            mq.topic.CopyFrom(req.topic)
            mq.id = qid if fifo else -1
            mq.permission = PERM["READ_WRITE"]
            mq.broker.name = broker
            mq.broker.endpoints.CopyFrom(req.endpoints)
        return _reply(resp, "OK")

    async def recall_message(self, req: Any, ctx: Any) -> Any:
        """Cancel a delay message before its time (the handle its SendMessage returned)."""
        resp = pb.RecallMessageResponse()
        topic = req.topic.name
        problem = topic_problem(topic)
        if problem:
            return _reply(resp, "ILLEGAL_TOPIC", problem)
        want = await self.message_type(topic)
        if want not in ("DELAY", "MIXED"):
            return _reply(resp, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
                          f"{topic} is a {want} topic, not DELAY")
        try:
            resp.message_id = await self.timer.recall(topic, req.recall_handle)
        except ValueError as e:
            return _reply(resp, "BAD_REQUEST", str(e))
        except LookupError as e:
            return _reply(resp, "NOT_FOUND", str(e))
        return _reply(resp, "OK")


def generic_handler(svc: MessagingService) -> grpc.GenericRpcHandler:
    """The service's RPCs as grpc method handlers, each checking ``x-mq-client-id`` first."""
    impl = {"QueryRoute": svc.query_route, "Heartbeat": svc.heartbeat,
            "SendMessage": svc.send_message, "QueryAssignment": svc.query_assignment,
            "ReceiveMessage": svc.receive_message, "AckMessage": svc.ack_message,
            "ForwardMessageToDeadLetterQueue": svc.forward_to_dlq,
            "EndTransaction": svc.end_transaction, "Telemetry": svc.telemetry,
            "NotifyClientTermination": svc.notify_client_termination,
            "ChangeInvisibleDuration": svc.change_invisible_duration,
            "RecallMessage": svc.recall_message}
    handlers = {}
    for name, fn in impl.items():
        req_name, resp_name, cs, ss = pb.RPCS[name]
        req_cls, resp_cls = pb.CLASSES[req_name], pb.CLASSES[resp_name]
        kw = dict(request_deserializer=req_cls.FromString,
                  response_serializer=resp_cls.SerializeToString)
        if cs and ss:
            handlers[name] = grpc.stream_stream_rpc_method_handler(fn, **kw)
        elif ss:
            handlers[name] = grpc.unary_stream_rpc_method_handler(
                _stream_guard(svc, name, fn, resp_cls), **kw)
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                _unary_guard(svc, name, fn, resp_cls), **kw)
    return grpc.method_handlers_generic_handler(pb.SERVICE, handlers)


def _unary_guard(svc: MessagingService, rpc: str, fn: Any, resp_cls: Any) -> Any:
    async def call(req: Any, ctx: Any) -> Any:
        if not svc.client_id(ctx):
            resp = resp_cls()
            return _reply(resp, "CLIENT_ID_REQUIRED", "x-mq-client-id is required")
        why = svc.refused(rpc, req, ctx)
        if why:
            return _reply(resp_cls(), "UNAUTHORIZED", why)
        try:
            return await fn(req, ctx)
        except RpcError as e:
            resp = resp_cls()
            return _reply(resp, e.code, str(e))
        except TransportError as e:
            resp = resp_cls()
            return _reply(resp, "PROXY_TIMEOUT", str(e))
        except Exception as e:             # noqa: BLE001 - answered, and logged
            log.exception("%s failed", getattr(fn, "__name__", fn))
            resp = resp_cls()
            return _reply(resp, "INTERNAL_SERVER_ERROR", f"{type(e).__name__}: {e}")
    return call


def _stream_guard(svc: MessagingService, rpc: str, fn: Any, resp_cls: Any) -> Any:
    async def call(req: Any, ctx: Any) -> AsyncIterator[Any]:
        why = None if svc.client_id(ctx) else "x-mq-client-id is required"
        code = "CLIENT_ID_REQUIRED"
        if why is None:
            why, code = svc.refused(rpc, req, ctx), "UNAUTHORIZED"
        if why:
            resp = resp_cls()
            _status(resp.status, code, why)
            yield resp
            stamp = resp_cls()
            convert._set_ms(stamp.delivery_timestamp, _now())
            yield stamp
            return
        async for item in fn(req, ctx):
            yield item
    return call
