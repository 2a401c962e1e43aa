"""The broker's request codes mapped onto ``Broker`` (docs/protocol.md §2).

Every semantic is the ``Broker``'s; this module only decodes headers and bodies into the
``rocketstore.common.protocol`` values the in-process transport also passes, and encodes the
answers. What may wait never blocks the event loop: sends use the broker's futures (completed
after the sync flush under SYNC_FLUSH), pulls the broker's long-poll hold (futures too), and
calls that may touch the disk (heartbeats that create topics, send-back, end transaction,
topic updates) run on a small thread pool.

``TcpClientChannel`` is how the broker reaches a client over the connection its heartbeat
came on: CHECK_TRANSACTION_STATE and NOTIFY_CONSUMER_IDS_CHANGED, both oneway, and
PUSH_REPLY_MESSAGE_TO_CLIENT, answered.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, cast

from rocketstore.broker import broker as broker_module
from rocketstore.common.constants import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from rocketstore.common.protocol import (CheckTransactionStateRequest, ConsumerSendMsgBackRequest,
                                         EndTransactionRequest, HeartbeatData,
                                         PullMessageRequest, RemotingResult,
                                         ReplyMessageRequest, ResponseCode, SendMessageResponse,
                                         TransactionCommitType)
from rocketstore.errors import LimitExceededError
from rocketstore.remoting import admin_processor, fastjson, headers, request_names, requests
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import Connection, Parked
from rocketstore.remoting.executors import BUSY_REMARK
from rocketstore.remoting.zerocopy import RecordBody
from rocketstore.store._codec import encode_record
from rocketstore.store.types import PutMessageResult

if TYPE_CHECKING:
    from rocketstore.acl import PlainAccessValidator
    from rocketstore.broker import Broker
    from rocketstore.common import MessageExt

log = logging.getLogger("rocketstore.broker.remoting")

PUSH_REPLY_TIMEOUT_S = 10.0          # Broker2Client.callClient

# codes not served on the VIP port (listenPort - 2): RocketMQ registers no pull processor there
NOT_ON_VIP = frozenset({RequestCode.PULL_MESSAGE})
# what a held pull keeps besides its subscription (its request, future, hold entry, task)
HELD_PULL_BASE_BYTES = 1024
HELD_BYTES = "held_pull_bytes"      # Connection.attributes: what its held pulls keep
# the plain sends a warm lane takes straight from the header (BrokerProcessor._lane_send)
LANE_SEND_CODES = frozenset({int(RequestCode.SEND_MESSAGE), int(RequestCode.SEND_MESSAGE_V2)})


def _header_key(cmd: RemotingCommand, keys: Any) -> tuple[Any, ...]:
    """A send's header-lane key: its code and the text of the fields ``Broker
    .wire_send_lane`` picks a lane by (producer group, topic, default topic, queue nums)."""
    ext = cmd.ext_fields
    return (cmd.code, ext.get(keys[0]), ext.get(keys[1]), ext.get(keys[2]), ext.get(keys[3]))


def held_pull_bytes(request: PullMessageRequest) -> int:
    """What a held pull is counted to keep: a base, its names, and its subscription twice
    (the expression and its split tags). The frame's other header fields are dropped."""
    return (HELD_PULL_BASE_BYTES + len(request.consumer_group) + len(request.topic)
            + 2 * len(request.subscription or ""))


class TcpClientChannel:
    """A client connection as the broker's ``ClientChannel``; callable from any thread."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop, client_id: str,
                 broker_name: str) -> None:
        self.conn = conn
        self.loop = loop
        self.client_id = client_id
        self.broker_name = broker_name

    def _oneway(self, cmd: RemotingCommand) -> None:
        self.loop.call_soon_threadsafe(self.conn.oneway, cmd)

    def check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                msg: MessageExt) -> None:
        # the body is the half record with its real topic and queue (MessageDecoder.encode)
        props = msg.properties
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        if real_topic is not None:
            body = encode_record(
                topic=real_topic, body=msg.stored_body, properties=props,
                queue_id=int(props.get(PROPERTY_REAL_QUEUE_ID, msg.queue_id)), flag=msg.flag,
                queue_offset=msg.queue_offset, physical_offset=msg.commitlog_offset,
                sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                born_host=msg.born_host, store_timestamp=msg.store_timestamp,
                store_host=msg.store_host, reconsume_times=msg.reconsume_times,
                prepared_transaction_offset=msg.prepared_transaction_offset)
        else:
            body = msg.record()
        self._oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {
            "tranStateTableOffset": request.tran_state_table_offset,
            "commitLogOffset": request.commit_log_offset, "msgId": request.msg_id,
            "transactionId": request.transaction_id, "offsetMsgId": request.offset_msg_id},
            body))

    def notify_consumer_ids_changed(self, group: str) -> None:
        self._oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                             {"consumerGroup": group}))

    def push_reply_message(self, req: ReplyMessageRequest) -> concurrent.futures.Future[Any]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT (326), answered by the client: a Future of its
        ``RemotingResult`` (a TransportError when it does not answer within 10 s)."""
        cmd = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                                      headers.encode_reply_header(req), req.body)

        async def call() -> RemotingResult:
            r = await self.conn.request(cmd, PUSH_REPLY_TIMEOUT_S)
            return RemotingResult(cast(ResponseCode, r.code), r.remark)
        return asyncio.run_coroutine_threadsafe(call(), self.loop)

    def __repr__(self) -> str:
        return f"TcpClientChannel({self.client_id} at {self.conn.peer})"


def _bridge(cf: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
    """An asyncio future that follows ``cf``. Unlike ``asyncio.wrap_future``, cancelling it
    (a connection that closed, a server that stops) does not cancel ``cf``: the broker's own
    future stays its to complete."""
    loop = asyncio.get_running_loop()
    af: asyncio.Future[Any] = loop.create_future()

    def copy(f: concurrent.futures.Future[Any]) -> None:
        if af.done():
            return
        if f.cancelled():
            af.cancel()
            return
        exc = f.exception()
        if exc is not None:
            af.set_exception(exc)
        else:
            af.set_result(f.result())

    def done(f: concurrent.futures.Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(copy, f)
        except RuntimeError:        # the loop closed meanwhile: nobody waits any more
            pass
    cf.add_done_callback(done)
    return af


class BrokerProcessor:
    """Serves one ``Broker`` on RocketMQ's wire protocol.

    Every request goes the same way (``process``): the ACL checks who sent it (signature,
    admin-only codes), ``requests.decode`` turns it into the object its handler executes, the
    ACL checks the topics and groups that object touches, and the handler runs it. A handler
    never reads the header again, so what the ACL saw is what runs.
    """

    def __init__(self, broker: Broker, *, vip: bool = False,
                 executor: concurrent.futures.Executor | None = None,
                 acl: PlainAccessValidator | None = None) -> None:
        self.broker = broker
        self.vip = vip
        self.executor = executor
        self.acl = acl         # checks every request before dispatch when the broker's ACL is on
        self.held_pull_bytes = 0    # what every connection's held pulls keep (held_pull_bytes)
        # (code, producer group, topic, default topic, default queue nums) as the header's
        # text -> the warm send lane the full path chose for exactly that text
        self._header_lanes: dict[tuple[Any, ...], Any] = {}
        R = RequestCode
        # code -> handler(conn, cmd, decoded request)
        self._handlers: dict[int, Callable[[Connection, RemotingCommand, Any], Any]] = {
            R.SEND_MESSAGE: self.send, R.SEND_MESSAGE_V2: self.send, R.SEND_BATCH_MESSAGE: self.send,
            R.SEND_REPLY_MESSAGE: self.send_reply, R.SEND_REPLY_MESSAGE_V2: self.send_reply,
            R.PULL_MESSAGE: self.pull,
            R.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            R.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            R.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            R.GET_MAX_OFFSET: self.get_max_offset, R.GET_MIN_OFFSET: self.get_min_offset,
            R.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            R.VIEW_MESSAGE_BY_ID: self.view_message,
            R.HEART_BEAT: self.heartbeat, R.UNREGISTER_CLIENT: self.unregister_client,
            R.CONSUMER_SEND_MSG_BACK: self.send_back, R.END_TRANSACTION: self.end_transaction,
            R.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            R.LOCK_BATCH_MQ: self.lock_batch, R.UNLOCK_BATCH_MQ: self.unlock_batch,
            R.CHECK_CLIENT_CONFIG: self.check_client_config,
        }
        admin_processor.install(self)       # mqadmin's codes (rocketstore.remoting.admin_processor)
        missing = set(self._handlers) - set(requests.DECODERS)
        assert not missing, f"request codes without a decoder: {missing}"

    # -- dispatch -----------------------------------------------------------------------------
    def process(self, conn: Connection, cmd: RemotingCommand
                ) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        acl = self.acl
        if acl is None and cmd.code in LANE_SEND_CODES:
            answer = self._lane_send(conn, cmd)
            if answer is not None:
                return answer
        access = None
        if acl is not None:
            checked = acl.authenticate(cmd, conn.peer)
            if isinstance(checked, str):
                # as 4.9.8: its AclException answered SYSTEM_ERROR (docs/acl.md)
                return cmd.response(ResponseCode.SYSTEM_ERROR, checked)
            access = checked        # None: a white address, nothing more to check
        bad_name = request_names.check(cmd)    # no path, no over-long name reaches a handler
        if bad_name is not None:
            return bad_name
        handler = self._handlers.get(cmd.code)
        if handler is None or (self.vip and cmd.code in NOT_ON_VIP):
            # AdminBrokerProcessor.getUnknownCmdResponse, leading space included
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f" request type {cmd.code} not supported")
        # malformed: RemotingProtocolError, answered SYSTEM_ERROR by the connection
        request = requests.decode(cmd, conn.peer)
        if access is not None:
            denied = acl.authorize(access, requests.touches(cmd.code, request))  # type: ignore[union-attr]
            if denied is not None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, denied)
        return handler(conn, cmd, request)
    def connection_closed(self, conn: Connection) -> None:
        channel = conn.attributes.get("channel")
        if channel is not None:
            self._blocking(self.broker.channel_closed, channel)

    def _blocking(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _channel(self, conn: Connection, client_id: str) -> TcpClientChannel:
        ch = conn.attributes.get("channel")
        if not isinstance(ch, TcpClientChannel) or ch.client_id != client_id:
            ch = TcpClientChannel(conn, asyncio.get_running_loop(), client_id,
                                  self.broker.broker_name)
            conn.attributes["channel"] = ch
        return ch

    @staticmethod
    def _answer(cmd: RemotingCommand, fut: concurrent.futures.Future[Any],
                encode: Callable[[RemotingCommand, Any], Any]) -> Any:
        # most futures are already complete (an async-flush send, a pull that found
        # messages): answer at once, without a task and a loop round trip
        if fut.done():
            return encode(cmd, fut.result())

        async def later() -> Any:
            return encode(cmd, await _bridge(fut))
        return later()

    # -- produce ------------------------------------------------------------------------------
    def _lane_send(self, conn: Connection, cmd: RemotingCommand) -> Any:
        """A plain send whose header text names a warm lane, stored from the header fields
        (``LaneCore.send_ext``) without decoding a request: only with the ACL off (the ACL
        must see the decoded request). Sends carry no name ``request_names`` checks; the
        lane's own names passed the send path's rules when its first send went the whole
        way. None: nothing was stored, the whole path answers."""
        keys = headers.send_keys(cmd.code)
        lane = self._header_lanes.get(_header_key(cmd, keys))
        if lane is None:
            return None
        r = lane.send_ext(cmd.ext_fields, cmd.body, cmd.version, conn.peer, keys,
                          headers.send_required(cmd.code))
        if r is None:
            return None
        # a refusal or a Future is counted against the decoded request, as the whole path's
        return self._lane_answer(cmd, r, None if type(r) is PutMessageResult
                                 else requests.decode(cmd, conn.peer))

    def send(self, conn: Connection, cmd: RemotingCommand, request: headers.WireSend) -> Any:
        # the send lane of (producer group, topic) stores a plain one-message send in one C
        # step, after the ACL and name checks every request gets (the ACL sees exactly the
        # request executed); its first send and any other shape take the whole path
        broker = self.broker
        if request.batch:
            r = broker.send_wire_now(request)
        else:
            lane = broker.wire_send_lane(request)
            r = lane.send_wire(request)
            if r is None:
                r = lane.send_wire_full(request)
            else:
                if cmd.code in LANE_SEND_CODES and lane.warm:
                    self._remember_lane(cmd, lane)
                return self._lane_answer(cmd, r, request)
        if isinstance(r, SendMessageResponse):
            return headers.encode_send_response(cmd, r)
        return self._answer(cmd, r, headers.encode_send_response)

    def _lane_answer(self, cmd: RemotingCommand, r: Any,
                     request: headers.WireSend | None) -> Any:
        """The answer to a send the lane took (``send_wire``'s results but None);
        ``request`` (the decoded send) is needed for any result but a stored one."""
        if type(r) is PutMessageResult:             # stored at once, counted by the lane
            return headers.encode_stored(cmd, 0, r.msg_id,  # type: ignore[arg-type]
                                         r.queue_id, r.queue_offset)
        assert request is not None
        metrics = self.broker.metrics
        if metrics is not None:
            if isinstance(r, concurrent.futures.Future):
                metrics.on_send(request, r)
            else:
                metrics.count_send(request, r)
        if isinstance(r, SendMessageResponse):
            return headers.encode_send_response(cmd, r)
        return self._answer(cmd, r, headers.encode_send_response)

    def _remember_lane(self, cmd: RemotingCommand, lane: Any) -> None:
        """Let the next sends with this header text reach ``lane`` (``_lane_send``); the
        table is bounded as the broker's lane table is."""
        key = _header_key(cmd, headers.send_keys(cmd.code))
        table = self._header_lanes
        if table.get(key) is not lane:
            if len(table) >= broker_module.MAX_WIRE_SEND_LANES:
                table.clear()
            table[key] = lane

    def send_reply(self, conn: Connection, cmd: RemotingCommand, request: headers.WireSend
                   ) -> Any:
        """SEND_REPLY_MESSAGE(_V2): answered once the requester took the push (up to 10 s)."""
        return self._answer(cmd, self.broker.send_reply(request), headers.encode_send_response)

    async def end_transaction(self, conn: Connection, cmd: RemotingCommand,
                              request: EndTransactionRequest) -> RemotingCommand | None:
        if request.commit_or_rollback == TransactionCommitType.NOT_TYPE:
            return None       # unknown state: logged, no answer (the request is oneway anyway)
        result = await self._blocking(self.broker.end_transaction, request)
        if result is None:
            return None
        if result.code != ResponseCode.SUCCESS:
            # the request is oneway: nobody else would ever see why it failed
            log.warning("END_TRANSACTION from %s (%s, half at %d) refused: %s %s", conn.peer,
                        request.producer_group, request.commit_log_offset, result.code,
                        result.remark)
        return cmd.response(int(result.code), result.remark)

    # -- consume ------------------------------------------------------------------------------
    def pull(self, conn: Connection, cmd: RemotingCommand, request: PullMessageRequest) -> Any:
        # a pull that finds messages: the broker's pull lane of (group, topic) answers it
        # with the checks made once per configuration (the lane leaves every other case,
        # and a pull with its own subscription or filter type, to pull_message)
        found = self.broker.pull_processor.by_lane(request)
        if found is not None:
            return headers.encode_pull_found(cmd, found)
        fut = self.broker.pull_message(request)
        if fut.done():
            return headers.encode_pull_response(cmd, fut.result())
        # held: bounded by what it keeps, per connection and in all (the count alone let a
        # connection pin 1,024 headers of 256 KiB)
        size = held_pull_bytes(request)
        mine = cast(int, conn.attributes.get(HELD_BYTES, 0))
        cfg = self.broker.config
        full = None
        if mine + size > cfg.server_max_held_pull_bytes:
            full = (f"held pulls of this connection keep {mine} + {size} bytes > "
                    f"serverMaxHeldPullBytes {cfg.server_max_held_pull_bytes}")
        elif self.held_pull_bytes + size > cfg.max_held_pull_bytes:
            full = (f"held pulls keep {self.held_pull_bytes} + {size} bytes > "
                    f"maxHeldPullBytes {cfg.max_held_pull_bytes}")
        if full is not None:
            fut.cancel()            # the hold service drops it now
            return cmd.response(ResponseCode.SYSTEM_BUSY, BUSY_REMARK.format(full))
        conn.attributes[HELD_BYTES] = mine + size
        self.held_pull_bytes += size
        loop = asyncio.get_running_loop()

        def release() -> None:
            conn.attributes[HELD_BYTES] = cast(int, conn.attributes[HELD_BYTES]) - size
            self.held_pull_bytes -= size

        def released(_: Any) -> None:
            # the broker's future always ends (answered, cancelled, or at its deadline), even
            # when the task below is cancelled before it ever ran
            try:
                loop.call_soon_threadsafe(release)
            except RuntimeError:        # the loop closed: nothing to account any more
                pass
        fut.add_done_callback(released)
        # the answer needs the request's opaque and flag only: the rest of its header (up to
        # serverMaxHeaderBytes) is not kept for as long as the pull is held
        cmd.ext_fields = {}
        cmd.remark = None

        # held until a message arrives or its time is up: Parked, so the connection goes on
        # with its other requests, and a closed connection cancels it
        async def held() -> RemotingCommand:
            try:
                return headers.encode_pull_response(cmd, await _bridge(fut))
            except asyncio.CancelledError:
                fut.cancel()        # the hold service drops it now, not at its deadline
                raise
        return Parked(held())

    def query_consumer_offset(self, conn: Connection, cmd: RemotingCommand,
                              r: requests.OffsetQuery) -> RemotingCommand:
        res = self.broker.query_consumer_offset(r.group, r.topic, r.queue_id)
        if res.code == ResponseCode.SUCCESS:
            return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": res.value})
        return cmd.response(int(res.code), res.remark)

    def update_consumer_offset(self, conn: Connection, cmd: RemotingCommand,
                               r: requests.OffsetUpdate) -> RemotingCommand:
        self.broker.update_consumer_offset(r.group, r.topic, r.queue_id, r.offset)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def get_max_offset(self, conn: Connection, cmd: RemotingCommand,
                       r: requests.QueueRef) -> RemotingCommand:
        off = self.broker.get_max_offset(r.topic, r.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    def get_min_offset(self, conn: Connection, cmd: RemotingCommand,
                       r: requests.QueueRef) -> RemotingCommand:
        off = self.broker.get_min_offset(r.topic, r.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    def search_offset(self, conn: Connection, cmd: RemotingCommand,
                      r: requests.SearchOffset) -> RemotingCommand:
        off = self.broker.search_offset(r.topic, r.queue_id, r.timestamp, r.boundary)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": off})

    def get_earliest_msg_storetime(self, conn: Connection, cmd: RemotingCommand,
                                   r: requests.QueueRef) -> RemotingCommand:
        store = self.broker.store
        ts = store.get_message_store_timestamp(r.topic, r.queue_id,
                                               store.get_min_offset_in_queue(r.topic, r.queue_id))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"timestamp": ts})

    def view_message(self, conn: Connection, cmd: RemotingCommand,
                     r: requests.ViewMessage) -> RemotingCommand:
        msg = self.broker.view_message(r.offset)
        if msg is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"can not find message by the offset, {r.offset}")
        return cmd.response(ResponseCode.SUCCESS, body=RecordBody.of((msg,)))

    def send_back(self, conn: Connection, cmd: RemotingCommand,
                  request: ConsumerSendMsgBackRequest) -> Any:
        return self._answer(cmd, self.broker.consumer_send_msg_back(request),
                            lambda c, r: c.response(int(r.code), r.remark))

    # -- membership ---------------------------------------------------------------------------
    async def heartbeat(self, conn: Connection, cmd: RemotingCommand,
                        data: HeartbeatData) -> RemotingCommand:
        # GET_CONSUMER_CONNECTION_LIST reports the client's language and version, and the
        # offset reset picks the body the C++ client parses by them
        try:
            conn.attributes["client_language"] = LanguageCode(cmd.language).name
        except ValueError:
            conn.attributes["client_language"] = str(cmd.language)
        conn.attributes["client_version"] = cmd.version
        old = conn.attributes.get("channel")
        channel = self._channel(conn, data.client_id)
        if isinstance(old, TcpClientChannel) and old is not channel:
            # a new clientID on this connection replaces the old one, which leaves its groups
            # now: rotating IDs cannot pile registrations up on one connection until expiry
            await self._blocking(self.broker.channel_closed, old)
        try:
            await self._blocking(self.broker.heartbeat, data, channel)
        except LimitExceededError as e:
            return cmd.response(e.code, str(e))
        return cmd.response(ResponseCode.SUCCESS)

    async def unregister_client(self, conn: Connection, cmd: RemotingCommand,
                                r: requests.Unregister) -> RemotingCommand:
        # the client is this connection: only what it registered leaves (RocketMQ unregisters
        # by channel too). A connection that never sent a heartbeat registered nothing; the
        # clientID in the header is never used to find someone else's registration.
        channel = conn.attributes.get("channel")
        if channel is not None:
            await self._blocking(self.broker.unregister_client, r.client_id, r.producer_group,
                                 r.consumer_group, channel)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def consumer_list(self, conn: Connection, cmd: RemotingCommand,
                      r: requests.GroupRef) -> RemotingCommand:
        res = self.broker.get_consumer_list_by_group(r.group)
        if res.code != ResponseCode.SUCCESS:
            return cmd.response(int(res.code), res.remark)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={},
                            body=fastjson.dumps({"consumerIdList": list(res.value)}).encode())

    @staticmethod
    def _not_this_client(conn: Connection, cmd: RemotingCommand,
                         r: requests.LockBatch) -> RemotingCommand | None:
        # the lock owner is the client registered on this connection by its heartbeat, not
        # whatever clientId the body names: RocketMQ 4.9.8 trusts the body, so any connection
        # could unlock (and then take) another client's orderly queues
        ch = conn.attributes.get("channel")
        if isinstance(ch, TcpClientChannel) and ch.client_id == r.client_id:
            return None
        return cmd.response(ResponseCode.NO_PERMISSION,
                            f"clientId {r.client_id!r} is not the client registered on this "
                            "connection (send a heartbeat first)")

    def lock_batch(self, conn: Connection, cmd: RemotingCommand,
                   r: requests.LockBatch) -> RemotingCommand:
        refused = self._not_this_client(conn, cmd, r)
        if refused is not None:
            return refused
        # only queues this broker serves: 4.9.8 records any queue it is sent, forever
        mqs = self.broker.served_queues(r.mqs)
        locked = self.broker.lock_batch_mq(r.group, r.client_id, mqs)
        return cmd.response(ResponseCode.SUCCESS, body=headers.encode_mq_set("lockOKMQSet", locked))

    def unlock_batch(self, conn: Connection, cmd: RemotingCommand,
                     r: requests.LockBatch) -> RemotingCommand:
        refused = self._not_this_client(conn, cmd, r)
        if refused is not None:
            return refused
        self.broker.unlock_batch_mq(r.group, r.client_id, r.mqs)
        return cmd.response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Connection, cmd: RemotingCommand,
                            r: requests.ClientConfigCheck) -> RemotingCommand:
        if r.expression_type != "TAG":
            # property (SQL92) filtering is not served: enablePropertyFilter=false
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "The broker does not support consumer to filter message by "
                                f"{r.expression_type}")
        return cmd.response(ResponseCode.SUCCESS)
