"""SendMessageProcessor: the one path every send takes (MESSAGING.md 1.10, 1.11, 5.5, 10.2).

Order of a send, as 4.9.8's ``SendMessageProcessor``/``AbstractSendMessageProcessor`` run it:
the accept-time guard, ``msgCheck`` (order topic on a non-writable broker, topic name rules,
forbidden topics, auto-create from the template or as a retry topic, queue id range), a random
queue for ``queue_id < 0``, the ``%RETRY%`` max-reconsume rule to ``%DLQ%``, sysflag and
``CLUSTER``, ``WAIT`` left out of the stored string, then the transaction half-message rewrite
or a plain put (where the store-level DELAY rewrite to ``SCHEDULE_TOPIC_XXXX`` happens, in
``Broker.put_inner``). ``consumer_send_msg_back`` is ``CONSUMER_SEND_MSG_BACK``.

Stricter than 4.9.8 (docs/protocol.md): a send's producer group must be a valid group name, a
client send may not carry the properties only a broker sets (``BROKER_ONLY_PROPERTIES``), and a
send-back's group is checked before anything is created or scheduled for it.

Every answer is a response code, never an exception, except for a malformed request object.
"""
from __future__ import annotations

import functools
import logging
import random
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rocketstore.broker.channels import complete
from rocketstore.broker.inner import MessageInner, PropertiesMap, java_properties
from rocketstore.common import constants as C
from rocketstore.common import names
from rocketstore.common.constants import PermName
from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, RemotingResult,
                                         ResponseCode, SendMessageRequest, SendMessageResponse)
from rocketstore.common.sends import WireSend, send_request
from rocketstore.errors import InvalidMessageError, InvalidMessageTypeError
from rocketstore.remoting._wire import message_batch, stored_properties, wire_batch
from rocketstore.store._codec import encode_host, encode_properties
from rocketstore.store.status import PutMessageStatus, SysFlag
from rocketstore.store.topics import MULTI_TAG
from rocketstore.store.types import Message, PutMessageResult

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker

log = logging.getLogger("rocketstore.broker.send")

_TX_MASK = 0xC
DLQ_NUMS_PER_GROUP = 1

# what a put the store refuses is answered (a SLAVE refuses every put this way)
_SERVICE_NOT_AVAILABLE = (
    "service not available now. It may be caused by one of the following reasons: the "
    "broker's disk is full, messages are put to the slave, message store has been shut "
    "down, etc.")

# handlePutMessageResult: store status -> (response code, stored?, remark)
_PUT_OK = PutMessageStatus.PUT_OK
_SUCCESS = ResponseCode.SUCCESS
_PUT_STATUS = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, True, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, True, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, True, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, True, None),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, False, "create mapped file failed, server is busy or broken."),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, False, None),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, False, None),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE, False, _SERVICE_NOT_AVAILABLE),
    PutMessageStatus.OS_PAGE_CACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR, False, "[PC_SYNCHRONIZED]broker busy, start flow control "
        "for a while"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, False, "UNKNOWN_ERROR"),
    PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED: (
        ResponseCode.SYSTEM_ERROR, False, "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]"),
    PutMessageStatus.NO_PERMISSION: (ResponseCode.NO_PERMISSION, False, None),
}


def _done(value):
    f: Future = Future()
    f.set_result(value)
    return f


def _refused(code: ResponseCode, remark: str) -> Future:
    return _done(SendMessageResponse(code, remark))


def _random_queue_id(write_queue_nums: int) -> int:
    # ThreadLocalRandom.nextInt(99999999) % writeQueueNums
    return random.randrange(99999999) % write_queue_nums if write_queue_nums > 0 else 0


def _is_true(v: str | None) -> bool:
    return v is not None and v.lower() == "true"        # Boolean.parseBoolean


_BROKER_ONLY = C.BROKER_ONLY_PROPERTIES


def _broker_only_problem(topic: str, user: dict[str, str]) -> SendMessageResponse | None:
    """The refusal of a client send carrying a property only the broker sets, else None.

    One shape is let through: the Java consumer's fallback send-back, a copy of a consumed
    message (which keeps the REAL_* of its delayed or transactional past) sent to its group's
    ``%RETRY%`` topic with a DELAY: the broker's DELAY rewrite replaces REAL_TOPIC/REAL_QID,
    and the record is never a half message."""
    if topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX) and \
            not _is_true(user.get(C.PROPERTY_TRANSACTION_PREPARED)):
        try:
            if int(user.get(C.PROPERTY_DELAY_TIME_LEVEL, "0")) > 0:
                return None
        except ValueError:
            pass
    name = sorted(_BROKER_ONLY.intersection(user))[0]
    return SendMessageResponse(
        ResponseCode.MESSAGE_ILLEGAL,
        f"the message property {name} is set only by the broker; a client send may not "
        f"carry it (topic {topic})")


def _name_problem(topic: str, producer_group: str) -> SendMessageResponse | None:
    """The refusal of a send's topic or producer group name, else None (pure: the sender
    caches the pairs that passed)."""
    why = names.topic_problem(topic, max_length=C.TOPIC_MAX_LENGTH)
    if why is not None:         # TopicValidator.validateTopic: 127 even for %RETRY%
        return SendMessageResponse(ResponseCode.SYSTEM_ERROR, names.named("topic", topic, why))
    why = names.group_problem(producer_group)
    if why is not None:         # stricter than 4.9.8, which does not look at it
        return SendMessageResponse(ResponseCode.INVALID_PARAMETER,
                                   names.named("producerGroup", producer_group, why))
    if topic in C.NOT_ALLOWED_SEND_TOPICS:
        return SendMessageResponse(ResponseCode.NO_PERMISSION,
                                   f"Sending message to topic[{topic}] is forbidden.")
    return None


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_MULTI_TAGS = int(SysFlag.MULTI_TAGS)


def illegal(e: InvalidMessageError) -> SendMessageResponse:
    """The answer to a send the store refused as malformed (MESSAGE_ILLEGAL, naming why)."""
    return SendMessageResponse(ResponseCode.MESSAGE_ILLEGAL, str(e))


def put_response(r: PutMessageResult, queue_id: int) -> SendMessageResponse:
    """``handlePutMessageResult``: the response of a send whose put finished with ``r``."""
    if r.status is _PUT_OK:         # per send: no enum hash, positional fields
        return SendMessageResponse(_SUCCESS, None, r.msg_id, queue_id, r.queue_offset)
    code, stored, remark = _PUT_STATUS.get(r.status, (ResponseCode.SYSTEM_ERROR, False, None))
    if not stored:
        if remark is None:
            remark = r.status.value if r.error is None else f"{r.status.value}: {r.error}"
        return SendMessageResponse(code, remark)
    return SendMessageResponse(code, None, msg_id=r.msg_id, queue_id=queue_id,
                               queue_offset=r.queue_offset)


class SendMessageProcessor:
    """``SEND_MESSAGE(_V2)``, ``SEND_BATCH_MESSAGE`` and ``CONSUMER_SEND_MSG_BACK``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.cfg = broker.config
        self.topics = broker.topic_manager
        self.groups = broker.subscription_groups
        # PermName is an IntFlag: test the bits once, not per send
        self._broker_writable = bool(self.cfg.broker_permission & int(PermName.PERM_WRITE))
        self._cluster_b = self.cfg.broker_cluster_name.encode("utf-8")
        self._hosts: dict[str, bytes] = {}      # peer "ip:port" -> encoded born host
        self._responses: dict[int, functools.partial[SendMessageResponse]] = {}
        self._names_ok: set[tuple[str, str]] = set()    # (topic, group) pairs that passed
        # a SLAVE's store takes only its master's bytes: every send is refused up front,
        # before a topic could be auto-created on it
        self._slave = broker.is_slave

    @staticmethod
    def _slave_refusal() -> SendMessageResponse:
        return SendMessageResponse(ResponseCode.SERVICE_NOT_AVAILABLE, _SERVICE_NOT_AVAILABLE)

    # -- the wire fast path ------------------------------------------------------------------

    def send_wire_now(self, w: WireSend) -> SendMessageResponse | Future:
        """A send as decoded from the wire: the response when it is known at once (the
        common shape under ASYNC_FLUSH: no future per request), else a Future of it. The
        common shape (one message to a topic that is not a retry topic, ASCII properties
        with no DELAY, TRAN_MSG or broker-only property, flag fields within Java's int) is
        stored from its bytes: the properties string rewritten as 4.9.8 stores it
        (``_wire.stored_properties``), the record written by ``CommitLog.put_wire_async``,
        with no ``Message`` or property dict. Every other send takes ``send_message`` with
        the request built from the same decoded fields."""
        if self._slave:
            return _done(self._slave_refusal())
        props = w.properties
        if w.batch:
            return self._send_wire_batch(w)
        if (not props.isascii() or w.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)
                or not (_INT32_MIN <= w.flag <= _INT32_MAX and _INT32_MIN <= w.sys_flag <= _INT32_MAX
                        and _INT32_MIN <= w.reconsume_times <= _INT32_MAX)
                or w.sys_flag & _TX_MASK):
            return self.send_message(send_request(w))
        stored = stored_properties(props.encode("ascii"), self._cluster_b,
                                   self.broker.next_uniq_id)
        if stored is None:
            return self.send_message(send_request(w))
        err, tc = self._pre_send(w)     # type: ignore[arg-type]  # the fields it reads
        if err is not None:
            return _done(err)
        queue_id = w.queue_id if w.queue_id >= 0 else _random_queue_id(tc.write_queue_nums)
        sys_flag = w.sys_flag
        if tc.topic_filter_type == MULTI_TAG:
            sys_flag |= int(SysFlag.MULTI_TAGS)
        return self._put_stored(w.topic, queue_id, w.body, stored, w.flag, sys_flag,
                                w.reconsume_times, w.born_timestamp, self._born_host(w), queue_id)

    def _put_stored(self, topic: str, store_queue_id: int, body: bytes, stored: tuple[bytes, bool],
                    flag: int, sys_flag: int, reconsume_times: int, born_timestamp: int,
                    born_host: bytes, queue_id: int) -> SendMessageResponse | Future:
        """One record from its stored properties (``stored_properties``' answer) by
        ``CommitLog.put_wire_async``: the response, or its Future when a flush or replica
        wait completes it (the wire's and the in-process send's common put)."""
        store = self.broker.store
        try:
            r = store.commit_log.put_wire_async(
                topic, store_queue_id, body, stored[0], flag, sys_flag, reconsume_times,
                born_timestamp, born_host, stored[1], store.put_acks, self._transform(queue_id),
                True)
        except InvalidMessageError as e:
            return illegal(e)
        return put_response(r, queue_id) if type(r) is PutMessageResult else r

    def _send_wire_batch(self, w: WireSend) -> Future:
        """A batch from the wire: its body read and its records appended in one call each
        (``_wire.wire_batch``, ``CommitLog.put_wire_batch_async``); the same stored bytes and
        answers as ``_send_batch``, which takes every other shape."""
        fut = self._wire_batch_put(w)
        return fut if fut is not None else self.send_message(send_request(w))

    def _wire_batch_put(self, w: WireSend) -> Future | None:
        """``_send_wire_batch``'s byte path; None when the batch is not of its shape."""
        props = w.properties
        if (not props.isascii() or w.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)
                or not _INT32_MIN <= w.reconsume_times <= _INT32_MAX):
            return None
        # a malformed body raises RemotingProtocolError here, before any broker check
        built = wire_batch(w.body, props.encode("ascii"), self._cluster_b,
                           self.broker.next_uniq_id)
        if built is None:
            return None
        meta, stored, count, body_bytes = built
        w.sizes = (count, body_bytes)
        return self._put_batch_records(w, w.body, meta, stored, w.reconsume_times,
                                       w.born_timestamp, self._born_host(w))

    def _put_batch_records(self, req: WireSend | SendMessageRequest, body: bytes, meta: bytes,
                           stored: bytes, reconsume_times: int, born_timestamp: int,
                           born_host: bytes) -> Future:
        """A batch's records (``wire_batch`` / ``message_batch``) after the send's checks,
        appended in one call (``CommitLog.put_wire_batch_async``): a Future of the answer."""
        err, tc = self._pre_send(req)   # type: ignore[arg-type]  # the fields it reads
        if err is not None:
            return _done(err)
        queue_id = req.queue_id if req.queue_id >= 0 else _random_queue_id(tc.write_queue_nums)
        if len(req.topic) > C.TOPIC_MAX_LENGTH:
            return _refused(ResponseCode.MESSAGE_ILLEGAL,
                            f"message topic length too long {len(req.topic)}")
        sys_flag = int(SysFlag.MULTI_TAGS) if tc.topic_filter_type == MULTI_TAG else 0
        store = self.broker.store
        try:
            return store.commit_log.put_wire_batch_async(
                req.topic, queue_id, body, meta, stored, sys_flag, reconsume_times,
                born_timestamp, born_host, store.put_acks, self._transform(queue_id))
        except InvalidMessageError as e:
            return _refused(ResponseCode.MESSAGE_ILLEGAL, str(e))

    def _born_host(self, w: WireSend) -> bytes:
        return self._born_host_of(w.born_host)

    def _born_host_of(self, host: str | None) -> bytes:
        host = host or "127.0.0.1:0"
        born = self._hosts.get(host)
        if born is None:
            if len(self._hosts) > 4096:
                self._hosts.clear()
            born = self._hosts[host] = encode_host(host)
        return born

    def _transform(self, queue_id: int) -> functools.partial[SendMessageResponse]:
        transform = self._responses.get(queue_id)
        if transform is None:
            transform = self._responses[queue_id] = functools.partial(put_response,
                                                                     queue_id=queue_id)
        return transform

    # -- checks shared by single and batch sends -------------------------------------------

    def _pre_send(self, req: SendMessageRequest):
        """preSend + msgCheck: (error response or None, topic config)."""
        return self._check_send(req.topic, req.producer_group, req.queue_id, req.default_topic,
                                req.default_topic_queue_nums, req.born_host)

    def _check_send(self, topic: str, producer_group: str, queue_id: int, default_topic: str,
                    default_topic_queue_nums: int, born_host: str | None):
        """``_pre_send`` on the request's fields (the in-process send has no request)."""
        cfg = self.cfg
        accept_at = cfg.start_accept_send_request_time_stamp
        if accept_at and accept_at > self.broker.now_ms():
            return SendMessageResponse(
                ResponseCode.SYSTEM_ERROR, "broker unable to service, until "
                f"{cfg.start_accept_send_request_time_stamp}"), None
        if not self._broker_writable and self.topics.is_order_topic(topic):
            return SendMessageResponse(
                ResponseCode.NO_PERMISSION,
                f"the broker[{cfg.broker_ip1}] sending message is forbidden"), None
        names_ok = self._names_ok
        if (topic, producer_group) not in names_ok:
            err = _name_problem(topic, producer_group)
            if err is not None:
                return err, None
            if len(names_ok) >= 4096:       # bounded: a client cycling names costs a re-check
                names_ok.clear()
            names_ok.add((topic, producer_group))
        tc = self.topics.select(topic)
        if tc is None:
            tc = self.topics.create_topic_in_send_message_method(
                topic, default_topic, default_topic_queue_nums)
            if tc is None and topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_retry_topic_in_send(
                    topic, 1, int(PermName.PERM_WRITE | PermName.PERM_READ))
            if tc is None:
                return SendMessageResponse(
                    ResponseCode.TOPIC_NOT_EXIST, self.topics.cap_problem(topic)
                    or f"topic[{topic}] not exist, apply first please!"), None
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return SendMessageResponse(
                ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal, "
                f"{tc} Producer: {born_host}"), None
        return None, tc

    # -- single message ----------------------------------------------------------------------

    def send_message(self, req: SendMessageRequest) -> Future:
        """``asyncSendMessage`` / ``asyncSendBatchMessage``: a Future of the response."""
        if not isinstance(req, SendMessageRequest):
            raise InvalidMessageTypeError("request", "SendMessageRequest", type(req).__name__)
        if self._slave:
            return _done(self._slave_refusal())
        if not req.messages:
            raise InvalidMessageError("request.messages", req.messages,
                                      "a send needs at least one message")
        if req.batch:
            return self._send_batch(req)
        if len(req.messages) != 1:
            raise InvalidMessageError("request.messages", f"{len(req.messages)} messages",
                                      "a non-batch send carries exactly one (set batch=True)")
        r = self.send_one(req.producer_group, req.topic, req.queue_id, req.messages[0],
                          req.default_topic, req.default_topic_queue_nums, req.born_host,
                          req.reconsume_times, req.max_reconsume_times)
        return r if isinstance(r, Future) else _done(r)

    def send_one(self, producer_group: str, topic: str, queue_id: int, msg: Message,
                 default_topic: str = C.AUTO_CREATE_TOPIC_KEY_TOPIC,
                 default_topic_queue_nums: int = 4, born_host: str | None = None,
                 reconsume_times: int = 0, max_reconsume_times: int | None = None
                 ) -> SendMessageResponse | Future:
        """One message's send (``SEND_MESSAGE_V2`` on its header fields): the response, or a
        Future of it when it completes later (under SYNC_FLUSH). The in-process transport
        calls this without a request object."""
        if not isinstance(msg, Message):
            raise InvalidMessageTypeError("request.messages[0]", "Message", type(msg).__name__)
        if self._slave:
            return self._slave_refusal()
        err, tc = self._check_send(topic, producer_group, queue_id, default_topic,
                                   default_topic_queue_nums, born_host)
        if err is not None:
            return err
        if queue_id < 0:
            queue_id = _random_queue_id(tc.write_queue_nums)
        user = msg.properties
        if (not topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX) and _BROKER_ONLY.isdisjoint(user)
                and C.PROPERTY_DELAY_TIME_LEVEL not in user
                and not _is_true(user.get(C.PROPERTY_TRANSACTION_PREPARED))):
            # the common shape: no retry/DLQ rules, no broker-only property, no DELAY or
            # half-message rewrite; straight to the byte path, no MessageInner
            sys_flag = msg.sys_flag
            if tc.topic_filter_type == MULTI_TAG:
                sys_flag |= _MULTI_TAGS
            r = self._put_bytes(topic, queue_id, msg.body, user, msg.flag, sys_flag,
                                reconsume_times, msg.born_timestamp, born_host or msg.born_host,
                                msg.prepared_transaction_offset)
            if r is not None:
                return r
        inner = MessageInner(topic, queue_id, msg.body, flag=msg.flag,
                             born_timestamp=msg.born_timestamp,
                             born_host=born_host or msg.born_host,
                             reconsume_times=reconsume_times,
                             prepared_transaction_offset=msg.prepared_transaction_offset)
        err = self._handle_retry_and_dlq(topic, reconsume_times, max_reconsume_times, inner,
                                         tc, msg.sys_flag)
        if err is not None:
            return err
        if not _BROKER_ONLY.isdisjoint(user):
            err = _broker_only_problem(topic, user)
            if err is not None:
                return err
        if (C.PROPERTY_DELAY_TIME_LEVEL not in user
                and not _is_true(user.get(C.PROPERTY_TRANSACTION_PREPARED))):
            return self._put_plain(inner, user, queue_id)
        props = self._client_properties(msg)
        inner.properties = props
        props.put(C.PROPERTY_CLUSTER, self.cfg.broker_cluster_name)
        wait = props.remove(C.PROPERTY_WAIT_STORE_MSG_OK)
        inner.freeze()                  # the stored string has no WAIT ...
        if wait is not None:
            props.put(C.PROPERTY_WAIT_STORE_MSG_OK, wait)   # ... the map keeps it (flush wait)
        if _is_true(props.get(C.PROPERTY_TRANSACTION_PREPARED)):
            if self.cfg.reject_transaction_message:
                return SendMessageResponse(ResponseCode.NO_PERMISSION,
                                           f"the broker[{self.cfg.broker_ip1}] sending "
                                           "transaction message is forbidden")
            self._parse_half_message_inner(inner)
        try:
            put = self.broker.put_inner(inner)
        except InvalidMessageError as e:
            return illegal(e)
        return self._respond(put, queue_id)

    def _put_bytes(self, topic: str, store_queue_id: int, body: object, user: dict[str, str],
                   flag: int, sys_flag: int, reconsume_times: int, born_timestamp: int | None,
                   born_host: str | None, prepared_transaction_offset: int,
                   queue_id: int | None = None) -> SendMessageResponse | Future | None:
        """A plain send's put from its fields when it has the common shape (ASCII properties,
        a bytes body, flag within Java's int, not a transaction's commit): the client's
        properties string rewritten in Cython (``_wire.stored_properties``: CLUSTER appended,
        WAIT dropped) and the record written by ``CommitLog.put_wire_async``; the response,
        or its Future when a flush or replica wait completes it. None: not that shape."""
        if type(body) is not bytes or not _INT32_MIN <= flag <= _INT32_MAX \
                or prepared_transaction_offset:
            return None
        try:
            props = encode_properties(user)
        except (TypeError, UnicodeError):
            return None
        if not props.isascii():
            return None
        stored = stored_properties(props, self._cluster_b, self.broker.next_uniq_id)
        if stored is None:
            return None
        return self._put_stored(topic, store_queue_id, body, stored, flag, sys_flag,
                                reconsume_times, -1 if born_timestamp is None else born_timestamp,
                                self._born_host_of(born_host),
                                store_queue_id if queue_id is None else queue_id)

    def _put_plain(self, inner: MessageInner, user: dict[str, str], queue_id: int
                   ) -> SendMessageResponse | Future:
        """The put of a send with no DELAY and no TRAN_MSG: the same stored string as the map
        path of ``send_one`` (client map + CLUSTER, WAIT removed); the response, or its Future
        under SYNC_FLUSH. The common shape takes ``_put_bytes``, so in process and over TCP
        one path stores a send."""
        r = self._put_bytes(inner.topic, inner.queue_id, inner.body, user, inner.flag,
                            inner.sys_flag, inner.reconsume_times, inner.born_timestamp,
                            inner.born_host, inner.prepared_transaction_offset, queue_id)
        if r is not None:
            return r
        if C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in user:
            user[C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self.broker.next_uniq_id()
        wait = user.get(C.PROPERTY_WAIT_STORE_MSG_OK)
        string, entries = java_properties(
            user, ((C.PROPERTY_CLUSTER, self.cfg.broker_cluster_name),),
            (C.PROPERTY_WAIT_STORE_MSG_OK,) if wait is not None else ())
        try:
            m = Message.from_properties_string(
                inner.topic, inner.body, string, wait=wait is None or _is_true(wait),
                flag=inner.flag, sys_flag=inner.sys_flag, reconsume_times=inner.reconsume_times,
                prepared_transaction_offset=inner.prepared_transaction_offset,
                born_timestamp=inner.born_timestamp, born_host=inner.born_host,
                properties=entries)
            store = self.broker.store
            if not (store.commit_log.sync_flush or store.commit_log.wait_replica):
                return put_response(store.put_message(m, inner.queue_id), queue_id)
            # the flush (or SYNC_MASTER's replica) acknowledgement completes the response
            # future itself
            return store.put_message_async(
                m, inner.queue_id, transform=functools.partial(put_response, queue_id=queue_id))
        except InvalidMessageError as e:
            return illegal(e)

    def _client_properties(self, msg: Message) -> PropertiesMap:
        """The request's properties as the broker's map (``string2messageProperties`` of the
        client's string), with the client message id a Java producer always sets."""
        props = PropertiesMap.from_dict(msg.properties)
        if C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props.put(C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, self.broker.next_uniq_id())
        return props

    def _handle_retry_and_dlq(self, topic: str, reconsume_times: int,
                              max_reconsume_times: int | None, inner: MessageInner, tc,
                              sys_flag: int) -> SendMessageResponse | None:
        if topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(C.RETRY_GROUP_TOPIC_PREFIX):]
            sgc = self.groups.find(group)
            if sgc is None:
                return SendMessageResponse(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                           f"subscription group not exist, {group}")
            max_times = sgc.retry_max_times
            if max_reconsume_times is not None:
                max_times = max_reconsume_times
            if reconsume_times >= max_times:
                dlq = C.dlq_topic(group)
                self.topics.create_topic_in_send_message_back_method(
                    dlq, DLQ_NUMS_PER_GROUP, int(PermName.PERM_WRITE | PermName.PERM_READ))
                inner.topic = dlq
                inner.queue_id = random.randrange(99999999) % DLQ_NUMS_PER_GROUP
                # 4.9.8 sets DELAY=0 here on a map the request's properties then replace
                # (MESSAGING.md 5.6): the DLQ copy keeps the client's DELAY
        if tc.topic_filter_type == MULTI_TAG:
            sys_flag |= int(SysFlag.MULTI_TAGS)
        inner.sys_flag = sys_flag
        return None

    @staticmethod
    def _parse_half_message_inner(inner: MessageInner) -> None:
        """``TransactionalMessageBridge.parseHalfMessageInner`` (MESSAGING.md 10.2)."""
        inner.properties.put(C.PROPERTY_REAL_TOPIC, inner.topic)
        inner.properties.put(C.PROPERTY_REAL_QUEUE_ID, str(inner.queue_id))
        inner.sys_flag &= ~_TX_MASK
        inner.topic = C.TRANS_HALF_TOPIC
        inner.queue_id = 0
        inner.freeze()

    def _respond(self, put: Future, queue_id: int) -> SendMessageResponse | Future:
        if put.done():
            return put_response(put.result(), queue_id)
        out: Future = Future()

        def finish(f: Future) -> None:
            try:
                complete(out, put_response(f.result(), queue_id))
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                complete(out, error=e)
        put.add_done_callback(finish)
        return out

    # -- batch -------------------------------------------------------------------------------

    def _send_batch(self, req: SendMessageRequest) -> Future:
        fut = self._batch_as_wire(req)
        if fut is not None:
            return fut
        err, tc = self._pre_send(req)
        if err is not None:
            return _done(err)
        queue_id = req.queue_id if req.queue_id >= 0 else _random_queue_id(tc.write_queue_nums)
        if len(req.topic) > C.TOPIC_MAX_LENGTH:
            return _refused(ResponseCode.MESSAGE_ILLEGAL,
                            f"message topic length too long {len(req.topic)}")
        if req.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            return _refused(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
        first = req.messages[0]
        # MessageBatch.generateFromList: the batch carries WAIT of its first message; the
        # broker adds CLUSTER; the store appends the batch's string to every inner message's
        first_wait = first.properties.get(C.PROPERTY_WAIT_STORE_MSG_OK)
        batch_props = PropertiesMap()
        batch_props.put(C.PROPERTY_WAIT_STORE_MSG_OK,
                        "true" if first_wait is None or _is_true(first_wait) else "false")
        batch_props.put(C.PROPERTY_CLUSTER, self.cfg.broker_cluster_name)
        batch_str = batch_props.to_string()
        batch_entries = batch_props.to_dict()
        batch_wait = batch_props.get(C.PROPERTY_WAIT_STORE_MSG_OK) == "true"
        sys_flag = first.sys_flag | (int(SysFlag.MULTI_TAGS) if tc.topic_filter_type == MULTI_TAG else 0)
        msgs = []
        for i, m in enumerate(req.messages):
            if not isinstance(m, Message):
                raise InvalidMessageTypeError(f"request.messages[{i}]", "Message", type(m).__name__)
            if C.PROPERTY_DELAY_TIME_LEVEL in m.properties or m.sys_flag & _TX_MASK:
                return _refused(ResponseCode.MESSAGE_ILLEGAL,
                                "a batch cannot hold delayed or transactional messages")
            user = m.properties
            if not _BROKER_ONLY.isdisjoint(user):
                err = _broker_only_problem(req.topic, user)
                if err is not None:
                    return _done(err)
            if C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in user:
                user[C.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = self.broker.next_uniq_id()
            own, entries = java_properties(user)
            entries.update(batch_entries)
            msgs.append(Message.from_properties_string(
                req.topic, m.body, own + "\x02" + batch_str, wait=batch_wait, flag=m.flag,
                sys_flag=sys_flag, born_timestamp=m.born_timestamp,
                born_host=req.born_host or m.born_host, reconsume_times=req.reconsume_times,
                properties=entries))
        try:
            return self.broker.store.put_messages_async(
                msgs, queue_id, transform=functools.partial(put_response, queue_id=queue_id))
        except InvalidMessageError as e:
            return _refused(ResponseCode.MESSAGE_ILLEGAL, str(e))

    def _batch_as_wire(self, req: SendMessageRequest) -> Future | None:
        """An in-process batch of the common shape (bytes bodies, no born time, host or
        flags of its own) stored by the wire's batch path: the records ``wire_batch`` makes
        of its SEND_BATCH_MESSAGE body made straight from the messages (``message_batch``,
        one pass in C, no body encoded and read again), appended in one call, with no
        ``Message`` or Java map per entry. The stored bytes are ``_send_batch``'s
        (tests/test_wire_send.py). None: another shape (``_send_batch`` decides)."""
        if (req.born_host is not None or req.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)
                or not _INT32_MIN <= req.reconsume_times <= _INT32_MAX):
            return None
        built = message_batch(req.messages, self._cluster_b, self.broker.next_uniq_id)
        if built is None:
            return None
        body, meta, stored, _count, _body_bytes = built
        return self._put_batch_records(req, body, meta, stored, req.reconsume_times, -1,
                                       self._born_host_of(None))

    # -- CONSUMER_SEND_MSG_BACK --------------------------------------------------------------

    def consumer_send_msg_back(self, req: ConsumerSendMsgBackRequest) -> Future:
        """``asyncConsumerSendMsgBack`` (MESSAGING.md 5.5): a Future of a ``RemotingResult``."""
        # before the group is auto-created and the DELAY rewrite stores the record in
        # SCHEDULE_TOPIC_XXXX: a name the schedule could never deliver is refused here
        if self._slave:
            return _done(RemotingResult(ResponseCode.SERVICE_NOT_AVAILABLE,
                                        _SERVICE_NOT_AVAILABLE))
        why = names.group_problem(req.group) or names.topic_problem(C.retry_topic(req.group))
        if why is not None:
            return _done(RemotingResult(ResponseCode.INVALID_PARAMETER,
                                        names.named("group", req.group, why)))
        sgc = self.groups.find(req.group)
        if sgc is None:
            return _done(RemotingResult(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                        f"subscription group not exist, {req.group}"))
        if not PermName.PERM_WRITE & self.cfg.broker_permission:
            return _done(RemotingResult(ResponseCode.NO_PERMISSION,
                                        f"the broker[{self.cfg.broker_ip1}] sending message "
                                        "is forbidden"))
        if sgc.retry_queue_nums <= 0:
            return _done(RemotingResult(ResponseCode.SUCCESS))    # dropped, as 4.9.8 does
        new_topic = C.retry_topic(req.group)
        queue_id = random.randrange(99999999) % sgc.retry_queue_nums
        rw = int(PermName.PERM_WRITE | PermName.PERM_READ)
        tc = self.topics.create_topic_in_send_message_back_method(
            new_topic, sgc.retry_queue_nums, rw, 1 if req.unit_mode else 0)
        if not tc.perm & PermName.PERM_WRITE:
            return _done(RemotingResult(ResponseCode.NO_PERMISSION,
                                        f"the topic[{new_topic}] sending message is forbidden"))
        ext = self.broker.store.look_message_by_offset(req.offset, raw=True)
        if ext is None:
            return _done(RemotingResult(ResponseCode.SYSTEM_ERROR,
                                        f"look message by offset failed, {req.offset}"))
        # only a message the group consumes may be sent back: 4.9.8 copies the record at any
        # offset into the caller's retry topic, which let a consumer read any topic by offset
        # (past the ACL, which checks only the group here). Stricter: the record's topic must
        # be the group's retry topic or one its online consumers subscribe to.
        # (a retry still in the schedule counts as its target's: the group gets it anyway)
        owner = ext.topic
        if owner == C.SCHEDULE_TOPIC:
            owner = ext.properties.get(C.PROPERTY_REAL_TOPIC) or owner
        if (owner != new_topic
                and self.broker.consumer_manager.find_subscription_data(req.group, owner)
                is None):
            return _done(RemotingResult(
                ResponseCode.NO_PERMISSION,
                f"the message at offset {req.offset} is of topic {owner}, which consumer "
                f"group {req.group} does not subscribe"))
        inner = MessageInner.from_ext(ext)
        props = inner.properties
        if props.get(C.PROPERTY_RETRY_TOPIC) is None:
            props.put(C.PROPERTY_RETRY_TOPIC, ext.topic)
        props.put(C.PROPERTY_WAIT_STORE_MSG_OK, "false")
        delay = req.delay_level
        max_times = sgc.retry_max_times if req.max_reconsume_times is None else req.max_reconsume_times
        if ext.reconsume_times >= max_times or delay < 0:
            new_topic = C.dlq_topic(req.group)
            queue_id = random.randrange(99999999) % DLQ_NUMS_PER_GROUP
            self.topics.create_topic_in_send_message_back_method(new_topic, DLQ_NUMS_PER_GROUP, rw)
            props.put(C.PROPERTY_DELAY_TIME_LEVEL, "0")
        else:
            if delay == 0:
                delay = 3 + ext.reconsume_times
            props.put(C.PROPERTY_DELAY_TIME_LEVEL, str(delay))
        inner.topic = new_topic
        inner.queue_id = queue_id
        inner.reconsume_times = ext.reconsume_times + 1
        origin = props.get(C.PROPERTY_ORIGIN_MESSAGE_ID)
        props.put(C.PROPERTY_ORIGIN_MESSAGE_ID, origin if origin and origin.strip() else ext.msg_id)
        inner.freeze()
        # stored with WAIT=false as 4.9.8 does, but answered only once durable under
        # SYNC_FLUSH: the consumer moves its offset past the original on this answer, so a
        # power cut must not lose the retry (docs/durability.md)
        put = self.broker.put_inner(inner, durable=True)
        out: Future = Future()

        def finish(f: Future) -> None:
            r = f.result()
            if r.status is PutMessageStatus.PUT_OK:
                complete(out, RemotingResult(ResponseCode.SUCCESS))
            else:
                complete(out, RemotingResult(ResponseCode.SYSTEM_ERROR, r.status.value))
        put.add_done_callback(finish)
        return out
