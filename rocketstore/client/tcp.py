"""The TCP transport: the client's requests as RocketMQ remoting commands.

``TcpTransport(namesrv_addr)`` finds brokers through the NameServer(s) (``GET_ROUTEINFO_BY_TOPIC``),
keeps the broker-name -> {broker id: address} table of the routes it has seen, and sends each
``Transport`` call where a RocketMQ 4.9.8 client would (docs/replication.md): sends,
send-backs, END_TRANSACTION and queue locks only to the master (id 0; none in the route:
TransportError, so a broker name without a master takes no writes and orderly queues are not
locked); pulls to the node the broker last suggested for that queue (``suggestWhichBrokerId``),
else the master, else the lowest slave, with the commit-offset flag cleared for a slave;
offsets and everything else to the master, or to a slave when the route has no master;
consumers' heartbeats to every node. It speaks to ``rocketstore broker`` and to Apache
RocketMQ brokers alike. Requests a broker pushes on a connection (CHECK_TRANSACTION_STATE,
NOTIFY_CONSUMER_IDS_CHANGED) go to the ``ClientChannel`` of the last heartbeat, on a worker
thread (a transaction check runs user code).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from rocketstore.acl.signature import SessionCredentials
from rocketstore.common import Message, MessageExt
from rocketstore.common.protocol import (CheckTransactionStateRequest, ConsumerSendMsgBackRequest,
                                         EndTransactionRequest, HeartbeatData, MessageQueue,
                                         PullMessageRequest, PullMessageResponse, QueueData,
                                         RemotingResult, ResponseCode, SendMessageRequest,
                                         SendMessageResponse, TopicRouteData)
from rocketstore.client.transport import ClientChannel, Transport
from rocketstore.errors import MQClientError, TransportError
from rocketstore.remoting import fastjson, headers
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.records import decode_records
from rocketstore.store._codec import batch_body, encode_properties

T = TypeVar("T")
U = TypeVar("U")

API_TIMEOUT_S = 3.0          # mqClientApiTimeout
PULL_EXTRA_S = 15.0          # a suspended pull: the broker's hold plus this (Java: 30 s in all)
SEND_BACK_TIMEOUT_S = 5.0
CLUSTER_INFO_TTL_S = 30.0    # how often broker_names() re-reads the NameServer's broker list
_PULL_STATUSES = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                            ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED})


def _chain(fut: concurrent.futures.Future[T], fn: Callable[[T], U]) -> concurrent.futures.Future[U]:
    out: concurrent.futures.Future[U] = concurrent.futures.Future()

    def done(f: concurrent.futures.Future[T]) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(f.result()))
        except BaseException as e:      # a bad answer fails the future, not the loop
            out.set_exception(e)
    fut.add_done_callback(done)
    return out


def _code(code: int) -> ResponseCode:
    """A response code as the enum; a code RocketMQ added later than this list stays an int
    (an IntEnum compares equal to its value either way)."""
    try:
        return ResponseCode(code)
    except ValueError:
        return cast(ResponseCode, code)


def properties_string(msg: Message) -> str:
    """The properties string a producer sends (``Message.send_properties``: the encoded form
    the message keeps, no dict built)."""
    return (msg.send_properties() if type(msg) is Message
            else encode_properties(msg.properties)).decode("utf-8")


class _PushProcessor:
    """Requests a broker sends to this client (PUSH_REPLY_MESSAGE_TO_CLIENT too: a reply to
    one of its requests, answered once taken)."""

    def __init__(self, transport: "TcpTransport") -> None:
        self.transport = transport
        self.pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="client-callback")

    @staticmethod
    def _running_info(ch: Any, cmd: RemotingCommand) -> RemotingCommand:
        # answered at once (a snapshot of the consumer's tables), as MQClientInstance does
        group = cmd.field("consumerGroup") or ""
        fn = getattr(ch, "consumer_running_info", None)
        body = fn(group, cmd.bool_field("jstackEnable")) if fn is not None else None
        if body is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer Group <{group}> not exist in this consumer")
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def process(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        ch = self.transport.channel
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            if ch is not None:
                self.pool.submit(ch.notify_consumer_ids_changed, cmd.field("consumerGroup") or "")
            return None
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            if ch is not None:
                req = CheckTransactionStateRequest(
                    commit_log_offset=cmd.int_field("commitLogOffset"),
                    tran_state_table_offset=cmd.int_field("tranStateTableOffset"),
                    offset_msg_id=cmd.field("offsetMsgId") or "", msg_id=cmd.field("msgId"),
                    transaction_id=cmd.field("transactionId"))
                msgs = decode_records(cmd.body)
                if msgs:
                    broker = self.transport.broker_of_addr(conn.peer) or ""
                    self.pool.submit(ch.check_transaction_state, broker, req, msgs[0])
            return None
        if cmd.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return self._reply(cmd, ch)
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            # an admin reset: the broker already wrote the offsets; drop what we hold
            from rocketstore.remoting.admin_bodies import decode_reset_offsets
            reset = getattr(ch, "reset_offset", None)
            if reset is not None:
                self.pool.submit(reset, cmd.field("group") or "", cmd.field("topic") or "",
                                 decode_reset_offsets(bytes(cmd.body)))
            return None
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return self._running_info(ch, cmd)
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f" request type {cmd.code} not supported")

    def _reply(self, cmd: RemotingCommand, ch: ClientChannel | None) -> Any:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of this client's requests, handed to
        the client on a worker thread (a request's future may run user callbacks); answered
        once taken, SYSTEM_ERROR when it could not be (``ClientRemotingProcessor``)."""
        req = headers.decode_reply_header(cmd)      # malformed: answered SYSTEM_ERROR
        push = getattr(ch, "push_reply_message", None)
        if push is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "process reply message fail")

        async def answer() -> RemotingCommand:
            loop = asyncio.get_running_loop()
            r = await asyncio.wrap_future(await loop.run_in_executor(self.pool, push, req))
            return cmd.response(int(r.code), r.remark)
        return answer()

    def connection_closed(self, conn: Any) -> None:
        pass


class TcpTransport(Transport):
    """Brokers reached through NameServer routes (``"host:port;host:port"``)."""

    # a pull's answer is handled on the I/O thread it arrives on, which sends the next pull
    # itself: queueing it to the pull service cost a thread wake-up per answer, on a VM
    # about as much as the consumer's own work (a steady drain went 1.4-1.8x)
    inline_callbacks = True
    callbacks_on_io_thread = True

    def on_io_thread(self) -> bool:
        return self.client.on_io_thread()

    def run_callback(self, fn: Callable[..., Any], *args: Any) -> None:
        # RocketMQ's client runs a send's callback on its callback executor too
        try:
            self._push.pool.submit(fn, *args)
        except RuntimeError:        # the pool is shut down (closing): run it here
            fn(*args)

    def __init__(self, namesrv_addr: str, *, credentials: SessionCredentials | None = None
                 ) -> None:
        """``credentials``: sign every request (RocketMQ's ``AclClientRPCHook``)."""
        addrs = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not addrs:
            raise TransportError(namesrv_addr, "no NameServer address")
        self.namesrv_addrs = addrs
        self.credentials = credentials
        # the client id this transport's connections carry: a broker takes a heartbeat under
        # another id on a connection as the connection's client changing (the old id leaves
        # every group), so one TcpTransport serves one client id, as one MQClientInstance
        # has its own channels in RocketMQ's Java client
        self.client_id: str | None = None
        self._ns_index = random.randrange(len(addrs))
        self._push = _PushProcessor(self)
        self.client = RemotingClient(self._push, rpc_hook=credentials.sign if credentials
                                     else None)
        self.channel: ClientChannel | None = None
        self._lock = threading.Lock()
        self._brokers: dict[str, dict[int, str]] = {}
        self._learned_at = float("-inf")
        # (group, topic, broker name, queue id) -> the broker id the last pull answer named
        self._pull_from: dict[tuple[str, str, str, int], int] = {}

    def for_client(self, client_id: str) -> TcpTransport:
        """This transport for ``client_id`` if its connections carry no other client id (it
        is claimed for it), else a new one to the same NameServers with the same credentials
        (its own connections, closed by the client instance that uses it)."""
        with self._lock:
            if self.client_id in (None, client_id):
                self.client_id = client_id
                return self
        other = TcpTransport(";".join(self.namesrv_addrs), credentials=self.credentials)
        other.client_id = client_id
        return other

    # -- addresses ----------------------------------------------------------------------------
    def _namesrv(self) -> str:
        return self.namesrv_addrs[self._ns_index % len(self.namesrv_addrs)]

    def _addr(self, broker_name: str) -> str:
        """The master's address, else (the route lists only slaves) the lowest slave's."""
        # a broker no route named yet: the NameServer's cluster info lists every broker
        addrs = self._addrs(broker_name)
        return addrs.get(0) or addrs[min(addrs)]

    def _addrs(self, broker_name: str) -> dict[int, str]:
        with self._lock:
            addrs = self._brokers.get(broker_name)
        if not addrs:
            self._learn_brokers()
            with self._lock:
                addrs = self._brokers.get(broker_name)
            if not addrs:
                raise TransportError(broker_name, "no NameServer knows this broker")
        return addrs

    def _master_addr(self, broker_name: str) -> str:
        """``findBrokerAddressInPublish``: the master's address only (writes, locks)."""
        addr = self._addrs(broker_name).get(0)
        if addr is None:
            raise TransportError(broker_name, "the broker has no master in the route (only "
                                              "slaves): it takes no writes or locks")
        return addr

    def subscribe_addr(self, broker_name: str, broker_id: int = 0) -> tuple[str, bool]:
        """``findBrokerAddressInSubscribe(name, id, onlyThisBroker=false)``: (address, is it
        a slave): the id asked, else id + 1 for a slave id, else the lowest id present."""
        addrs = self._addrs(broker_name)
        addr = addrs.get(broker_id)
        chosen = broker_id
        if addr is None and broker_id != 0:
            chosen = broker_id + 1
            addr = addrs.get(chosen)
        if addr is None:
            chosen = min(addrs)
            addr = addrs[chosen]
        return addr, chosen != 0

    def _learn_brokers(self) -> None:
        r = self._namesrv_call(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        self._learned_at = time.monotonic()
        if r.code != ResponseCode.SUCCESS:
            return
        table = fastjson.loads(r.body).get("brokerAddrTable", {})
        # the NameServer's table replaces ours: a broker it dropped (dead, expired) is
        # forgotten, so heartbeats stop going to it (Java's cleanOfflineBroker)
        learned = {str(name): {int(k): str(v) for k, v in bd.get("brokerAddrs", {}).items()}
                   for name, bd in table.items()}
        with self._lock:
            self._brokers = {n: a for n, a in learned.items() if a}

    def broker_of_addr(self, peer: str) -> str | None:
        with self._lock:
            for name, addrs in self._brokers.items():
                if peer in addrs.values():
                    return name
        return None

    def _invoke(self, broker_name: str, cmd: RemotingCommand,
                timeout: float = API_TIMEOUT_S) -> RemotingCommand:
        return self.client.invoke(self._addr(broker_name), cmd, timeout)

    # -- routes -------------------------------------------------------------------------------
    def _namesrv_call(self, cmd: RemotingCommand) -> RemotingCommand:
        last: TransportError | None = None
        for _ in range(len(self.namesrv_addrs)):
            try:
                return self.client.invoke(self._namesrv(), cmd, API_TIMEOUT_S)
            except TransportError as e:       # try the next NameServer
                last = e
                self._ns_index += 1
        assert last is not None
        raise last

    def get_topic_route(self, topic: str) -> TopicRouteData | None:
        r = self._namesrv_call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                       {"topic": topic}))
        if r.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if r.code != ResponseCode.SUCCESS:
            raise TransportError(self._namesrv(), f"route of {topic!r}: code {r.code} {r.remark}")
        doc = fastjson.loads(r.body)
        qds = tuple(QueueData(str(q["brokerName"]), int(q["readQueueNums"]),
                              int(q["writeQueueNums"]), int(q["perm"]),
                              int(q.get("topicSysFlag", 0))) for q in doc.get("queueDatas", ()))
        addrs = {str(b["brokerName"]): {int(k): str(v) for k, v in b["brokerAddrs"].items()}
                 for b in doc.get("brokerDatas", ())}
        with self._lock:
            self._brokers.update(addrs)
        return TopicRouteData(qds, addrs, doc.get("orderTopicConf"))

    def broker_names(self) -> list[str]:
        """Brokers of the routes seen and of the NameServer's cluster info (re-read every
        30 s): a client heartbeats to each, as a Java client does to the brokers of TBW102's and
        its topics' routes, so a producer is known to its brokers before it sends."""
        if time.monotonic() - self._learned_at > CLUSTER_INFO_TTL_S:
            try:
                self._learn_brokers()
            except TransportError:
                pass
        with self._lock:
            return sorted(self._brokers)

    # -- produce ------------------------------------------------------------------------------
    def _send_command(self, request: SendMessageRequest) -> RemotingCommand:
        msgs = request.messages
        if request.batch:
            # one pass in C for the common shape (plain Messages), entry by entry otherwise
            built = batch_body(msgs)
            body = built if built is not None else headers.encode_batch_body(
                [(bytes(m.body), m.flag, properties_string(m)) for m in msgs])
            first = msgs[0]
            props, sys_flag, flag = "", 0, 0
            code = RequestCode.SEND_BATCH_MESSAGE
        else:
            first = msgs[0]
            body = bytes(first.body)
            props, sys_flag, flag = properties_string(first), first.sys_flag, first.flag
            code = (RequestCode.SEND_REPLY_MESSAGE_V2 if request.reply
                    else RequestCode.SEND_MESSAGE_V2)
        born = first.born_timestamp if first.born_timestamp is not None else int(time.time() * 1000)
        # the header fields as RemotingCommand.request makes them (Java's text of each value,
        # None left out), built directly: one per send
        ext: dict[str, str] = {
            "a": request.producer_group, "b": request.topic, "c": request.default_topic,
            "d": str(request.default_topic_queue_nums), "e": str(request.queue_id),
            "f": str(sys_flag), "g": str(born), "h": str(flag), "i": props,
            "j": str(request.reconsume_times), "k": "false"}
        if request.max_reconsume_times is not None:
            ext["l"] = str(request.max_reconsume_times)
        ext["m"] = "true" if request.batch else "false"
        if None in ext.values():
            return RemotingCommand.request(code, {k: v for k, v in ext.items()
                                                  if v is not None}, body)
        return RemotingCommand(code, ext_fields=ext, body=body)

    @staticmethod
    def _send_response(r: RemotingCommand) -> SendMessageResponse:
        return SendMessageResponse(
            code=_code(r.code),
            remark=r.remark, msg_id=r.field("msgId"), queue_id=r.int_field("queueId", -1),
            queue_offset=r.int_field("queueOffset", -1), transaction_id=r.field("transactionId"))

    def send_message(self, broker_name: str, request: SendMessageRequest,
                     timeout_ms: int = 3000) -> SendMessageResponse:
        return self._send_response(self.client.invoke(self._master_addr(broker_name),
                                                      self._send_command(request),
                                                      timeout_ms / 1000))

    def send_message_async(self, broker_name: str, request: SendMessageRequest
                           ) -> concurrent.futures.Future[SendMessageResponse]:
        fut = self.client.invoke_async(self._master_addr(broker_name),
                                       self._send_command(request), 3.0)
        return _chain(fut, self._send_response)

    def send_message_oneway(self, broker_name: str, request: SendMessageRequest) -> None:
        self.client.invoke_oneway(self._master_addr(broker_name), self._send_command(request))

    def end_transaction(self, broker_name: str, request: EndTransactionRequest) -> None:
        self.client.invoke_oneway(self._master_addr(broker_name), RemotingCommand.request(
            RequestCode.END_TRANSACTION, {
                "producerGroup": request.producer_group,
                "tranStateTableOffset": request.tran_state_table_offset,
                "commitLogOffset": request.commit_log_offset,
                "commitOrRollback": int(request.commit_or_rollback),
                "fromTransactionCheck": request.from_transaction_check,
                "msgId": request.msg_id, "transactionId": request.transaction_id}))

    # -- consume ------------------------------------------------------------------------------
    def pull_message_raw(self, broker_name: str, request: PullMessageRequest
                         ) -> concurrent.futures.Future[RemotingCommand]:
        """``PULL_MESSAGE`` answered with the broker's command as is: the records stay
        undecoded in its body (the Spark wire reader decodes them into columns).

        Sent to the node the last answer for this queue suggested (``PullAPIWrapper``); a
        slave gets the request without the commit-offset flag."""
        key = (request.consumer_group, request.topic, broker_name, request.queue_id)
        addr, slave = self.subscribe_addr(broker_name, self._pull_from.get(key, 0))
        sys_flag = request.sys_flag & ~0x1 if slave else request.sys_flag
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": request.consumer_group, "topic": request.topic,
            "queueId": request.queue_id, "queueOffset": request.queue_offset,
            "maxMsgNums": request.max_msg_nums, "sysFlag": sys_flag,
            "commitOffset": request.commit_offset,
            "suspendTimeoutMillis": request.suspend_timeout_millis,
            "subscription": request.subscription, "subVersion": request.sub_version,
            "expressionType": request.expression_type})
        timeout = (request.suspend_timeout_millis / 1000 + PULL_EXTRA_S
                   if request.sys_flag & 0x2 else API_TIMEOUT_S * 3)
        fut = self.client.invoke_async(addr, cmd, timeout)

        def follow(f: concurrent.futures.Future[RemotingCommand]) -> None:
            # updatePullFromWhichNode after every pull answered with a pull status (found or
            # not); an error answer (busy, no permission) leaves the node as it was
            if not f.cancelled() and f.exception() is None:
                r = f.result()
                if r.code in _PULL_STATUSES:
                    self._pull_from[key] = r.int_field("suggestWhichBrokerId", 0)
        fut.add_done_callback(follow)
        return fut

    def pull_from_which_node(self, group: str, topic: str, broker_name: str,
                             queue_id: int) -> int:
        """The broker id this client's next pull of the queue asks (0 until a broker
        suggested another)."""
        return self._pull_from.get((group, topic, broker_name, queue_id), 0)

    def pull_message(self, broker_name: str, request: PullMessageRequest
                     ) -> concurrent.futures.Future[PullMessageResponse]:
        fut = self.pull_message_raw(broker_name, request)

        def convert(r: RemotingCommand) -> PullMessageResponse:
            return PullMessageResponse(
                code=_code(r.code),
                next_begin_offset=r.int_field("nextBeginOffset"),
                min_offset=r.int_field("minOffset"), max_offset=r.int_field("maxOffset"),
                # what a consumer is handed: msg_id is the UNIQ_KEY (MessageClientExt)
                messages=decode_records(r.body, client=True)
                if r.code == ResponseCode.SUCCESS else [],
                suggest_which_broker_id=r.int_field("suggestWhichBrokerId"), remark=r.remark)
        return _chain(fut, convert)

    def query_consumer_offset(self, broker_name: str, group: str, topic: str,
                              queue_id: int) -> RemotingResult:
        r = self._invoke(broker_name, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id}))
        return RemotingResult(_code(r.code), r.remark, r.int_field("offset", -1))

    def update_consumer_offset(self, broker_name: str, group: str, topic: str, queue_id: int,
                               offset: int) -> None:
        self.client.invoke_oneway(self._addr(broker_name), RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                 "queueId": queue_id, "commitOffset": offset}))

    def _offset_call(self, code: int, broker_name: str, **ext: Any) -> int:
        r = self._invoke(broker_name, RemotingCommand.request(code, ext))
        if r.code != ResponseCode.SUCCESS:
            raise TransportError(broker_name, f"request {code}: code {r.code} {r.remark}")
        return r.int_field("offset")

    def get_max_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        return self._offset_call(RequestCode.GET_MAX_OFFSET, broker_name, topic=topic,
                                 queueId=queue_id)

    def get_min_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        return self._offset_call(RequestCode.GET_MIN_OFFSET, broker_name, topic=topic,
                                 queueId=queue_id)

    def search_offset(self, broker_name: str, topic: str, queue_id: int, timestamp_ms: int,
                      boundary: str | None = None) -> int:
        extra = {} if boundary is None else {"boundaryType": boundary}
        return self._offset_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, broker_name, topic=topic,
                                 queueId=queue_id, timestamp=timestamp_ms, **extra)

    def consumer_send_msg_back(self, broker_name: str,
                               request: ConsumerSendMsgBackRequest) -> RemotingResult:
        r = self.client.invoke(self._master_addr(broker_name), RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK, {
            "group": request.group, "offset": request.offset, "delayLevel": request.delay_level,
            "originMsgId": request.origin_msg_id, "originTopic": request.origin_topic,
            "unitMode": request.unit_mode, "maxReconsumeTimes": request.max_reconsume_times}),
            SEND_BACK_TIMEOUT_S)
        return RemotingResult(_code(r.code), r.remark)

    def get_topic_attributes(self, broker_name: str, topic: str) -> dict[str, str] | None:
        """The topic's RocketMQ 5 attributes at the broker's master (GET_TOPIC_CONFIG); None
        when the broker does not have the topic or does not know the request (4.9)."""
        r = self.client.invoke(self._master_addr(broker_name), RemotingCommand.request(
            RequestCode.GET_TOPIC_CONFIG, {"topic": topic}), API_TIMEOUT_S)
        if r.code != ResponseCode.SUCCESS or not r.body:
            return None
        doc = fastjson.loads(bytes(r.body))
        attrs = doc.get("attributes") if isinstance(doc, dict) else None
        return {str(k): str(v) for k, v in attrs.items()} if isinstance(attrs, dict) else {}

    def view_message(self, broker_name: str, commit_log_offset: int) -> MessageExt | None:
        r = self._invoke(broker_name, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID,
                                                              {"offset": commit_log_offset}))
        if r.code != ResponseCode.SUCCESS:
            return None
        msgs = decode_records(r.body)
        return msgs[0] if msgs else None

    # -- group membership ---------------------------------------------------------------------
    def heartbeat(self, broker_name: str, data: HeartbeatData, channel: ClientChannel) -> None:
        """``HEART_BEAT`` to the broker's nodes; ``MQClientError`` (nothing sent) when this
        transport's connections carry another client id (see ``for_client``)."""
        with self._lock:
            if self.client_id is None:
                self.client_id = data.client_id
            elif data.client_id != self.client_id:
                raise MQClientError(
                    f"this TcpTransport's connections carry client id {self.client_id!r}; a "
                    f"heartbeat of client id {data.client_id!r} on them would take "
                    f"{self.client_id!r} out of its groups at every broker: use one "
                    f"TcpTransport per client id (TcpTransport.for_client)")
        self.channel = channel
        body = headers.encode_heartbeat(data)
        # sendHeartbeatToAllBroker: a client with consumers tells every node (a slave serves
        # their pulls), a producer-only client the master only
        addrs = self._addrs(broker_name)
        targets = sorted(addrs.items()) if data.consumers else \
            [(i, a) for i, a in addrs.items() if i == 0]
        failed: list[str] = []
        for _, addr in targets:
            cmd = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
            cmd.language = LanguageCode.PYTHON
            try:
                r = self.client.invoke(addr, cmd, API_TIMEOUT_S)
            except TransportError as e:
                failed.append(f"{addr}: {e}")
                continue
            if r.code != ResponseCode.SUCCESS:
                failed.append(f"{addr}: heartbeat refused: code {r.code} {r.remark}")
        if failed and len(failed) == len(targets):
            raise TransportError(broker_name, "; ".join(failed))

    def unregister_client(self, broker_name: str, client_id: str, producer_group: str | None,
                          consumer_group: str | None) -> None:
        self._invoke(broker_name, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
            "clientID": client_id, "producerGroup": producer_group,
            "consumerGroup": consumer_group}))

    def get_consumer_id_list(self, broker_name: str, group: str) -> list[str]:
        r = self._invoke(broker_name, RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))
        if r.code != ResponseCode.SUCCESS or not r.body:
            return []
        return [str(c) for c in fastjson.loads(r.body).get("consumerIdList", [])]

    def lock_batch_mq(self, broker_name: str, group: str, client_id: str,
                      mqs: set[MessageQueue]) -> set[MessageQueue]:
        body = fastjson.dumps({"clientId": client_id, "consumerGroup": group,
                               "mqSet": [headers.mq_json(m) for m in sorted(mqs)]}).encode()
        # RebalanceImpl.lock: the master only; never a slave
        r = self.client.invoke(self._master_addr(broker_name),
                               RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, body), 1.0)
        if r.code != ResponseCode.SUCCESS:
            return set()
        doc = fastjson.loads(r.body)
        return {MessageQueue(str(m["topic"]), str(m["brokerName"]), int(m["queueId"]))
                for m in doc.get("lockOKMQSet", ())}

    def unlock_batch_mq(self, broker_name: str, group: str, client_id: str,
                        mqs: set[MessageQueue]) -> None:
        body = fastjson.dumps({"clientId": client_id, "consumerGroup": group,
                               "mqSet": [headers.mq_json(m) for m in sorted(mqs)]}).encode()
        self.client.invoke(self._master_addr(broker_name),
                           RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, body),
                           API_TIMEOUT_S)

    def close(self) -> None:
        self.client.close()
        self._push.pool.shutdown(wait=False)

