"""``Producer`` and ``TransactionProducer``: RocketMQ's ``DefaultMQProducer`` and
``TransactionMQProducer`` (MESSAGING.md §1, §10).

A send validates the message (§1.6), stamps its UNIQ_KEY (§1.8), compresses a large body
(§1.7), picks a queue (§1.3, §1.5) and asks the broker through the transport; sync sends retry
within ``send_msg_timeout`` on another queue (§1.4), sends to an explicit queue or through a
selector never do.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterable, Protocol, Union

from rocketstore.acl.signature import SessionCredentials, credentials_from
from rocketstore.client import reply, validators
from rocketstore.client.compression import compressor
from rocketstore.client.instance import (HEARTBEAT_BROKER_INTERVAL_MS,
                                         POLL_NAME_SERVER_INTERVAL_MS, ClientInstance,
                                         ClientTimers, build_client_id, local_address,
                                         transport_for)
from rocketstore.client.latency import MQFaultStrategy
from rocketstore.client.selector import MessageQueueSelector, TopicPublishInfo
from rocketstore.common import (LocalTransactionState, Message, MessageExt, MessageQueue,
                                ResponseCode, SendStatus, UniqIdGenerator, stamp_for_send)
from rocketstore.store._codec import stamp_one
from rocketstore.common import constants as C
from rocketstore.common.protocol import (CheckTransactionStateRequest, EndTransactionRequest,
                                         SendMessageRequest, SendMessageResponse,
                                         TransactionCommitType)
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from rocketstore.store._commitlog import complete_future, pending_future

log = logging.getLogger("rocketstore.client")

# a selector: an object with ``select(mqs, msg, arg)`` or that function itself
Selector = Union[MessageQueueSelector, Callable[[list, Message, Any], "MessageQueue | None"]]
# one attempt of a retried send: the queue, its request, the ms left of the send's timeout
Attempt = tuple[MessageQueue, SendMessageRequest, int]

# broker answers a sync send retries on another queue (DefaultMQProducer's retryResponseCodes)
RETRY_RESPONSE_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                                  ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION})
_STATUS_BY_CODE = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
                   ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
                   ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
                   ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_TYPE_MASK = 0xC


@dataclass(slots=True)
class SendResult:
    """What a send reports: ``msg_id`` is the UNIQ_KEY (comma list for a batch),
    ``offset_msg_id`` the broker's offset id(s), ``queue_offset`` the (first) logical offset."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str | None
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


_SUCCESS = ResponseCode.SUCCESS
_SEND_OK = SendStatus.SEND_OK
_uniq_lock = threading.Lock()
_uniq_gen: UniqIdGenerator | None = None


def stamp(msgs: list[Message]) -> tuple[list[Message], list[str]]:
    """The messages with UNIQ_KEY (MessageClientIDSetter, one generator per process as in Java)
    and WAIT=true added where absent, and their keys."""
    with _uniq_lock:
        return stamp_for_send(msgs, _uniq_gen if _uniq_gen is not None else _new_uniq_gen())


def stamp_one_message(msg: Message) -> tuple[Message, str]:
    """``stamp`` of one message (the sync send's path: no lists)."""
    with _uniq_lock:
        gen = _uniq_gen
        if gen is None:
            gen = _new_uniq_gen()
        return stamp_one(msg, gen)


def _new_uniq_gen() -> UniqIdGenerator:
    global _uniq_gen
    _uniq_gen = UniqIdGenerator(local_address())
    return _uniq_gen


def commit_log_offset_of(offset_msg_id: str) -> int:
    """The commit-log offset inside an offset message id (its last 8 bytes, FORMAT §7)."""
    return int(offset_msg_id[-16:], 16)


def _ms_since(t: float) -> float:
    return (time.monotonic() - t) * 1000


def _rebuilt(msg: Message, props: dict[str, str], body: Any = None, sys_flag: int | None = None
             ) -> Message:
    return Message(msg.topic, msg.body if body is None else body, properties=props,
                   flag=msg.flag, sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
                   reconsume_times=msg.reconsume_times, born_timestamp=msg.born_timestamp,
                   born_host=msg.born_host)


class Producer:
    """Sends messages to a broker (RocketMQ's ``DefaultMQProducer``).

    Over a NameServer the topic's queues are those of every broker in its route.
    ``send_latency_fault_enable`` turns on RocketMQ's latency-based broker avoidance;
    ``poll_name_server_interval`` (ms) is how long a topic's publish list is used before its
    route is read again, ``heartbeat_broker_interval`` (ms) the heartbeat period
    (docs/cluster.md).

    >>> with Producer("pg", broker=broker) as p:          # doctest: +SKIP
    ...     r = p.send(Message("TopicA", b"hello", tags="TagA"))
    ...     r.status, r.message_queue.queue_id, r.queue_offset
    """

    def __init__(self, group: str, *, broker: Any = None, namesrv_addr: str | None = None,
                 instance_name: str | None = None, send_msg_timeout: int = 3000,
                 retry_times_when_send_failed: int = 2,
                 retry_times_when_send_async_failed: int = 2,
                 retry_another_broker_when_not_store_ok: bool = False,
                 compress_msg_body_over_howmuch: int = 4096, compress_type: str = "ZLIB",
                 compress_level: int = 5,
                 max_message_size: int = validators.DEFAULT_MAX_MESSAGE_SIZE,
                 create_topic_key: str = C.AUTO_CREATE_TOPIC_KEY_TOPIC,
                 default_topic_queue_nums: int = 4, send_latency_fault_enable: bool = False,
                 poll_name_server_interval: int = POLL_NAME_SERVER_INTERVAL_MS,
                 heartbeat_broker_interval: int = HEARTBEAT_BROKER_INTERVAL_MS,
                 credentials: SessionCredentials | None = None,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        """``credentials`` (or ``access_key`` and ``secret_key``): sign every request for a
        broker with plain ACL on (docs/acl.md); needs ``namesrv_addr``."""
        self.group = group
        # ClientConfig's timers (ms): how often routes are re-read and brokers heartbeated
        self.timers = ClientTimers.checked(poll_name_server_interval, heartbeat_broker_interval)
        # queue selection and, when enabled, latency-based broker avoidance (docs/cluster.md)
        self.fault_strategy = MQFaultStrategy(send_latency_fault_enable)
        self._transport_key, self._transport_factory = transport_for(
            broker, namesrv_addr, credentials_from(credentials, access_key, secret_key))
        self.instance_name = instance_name
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self._compress_bits, self._compress = compressor(compress_type, compress_level)
        self.max_message_size = max_message_size
        self.create_topic_key = create_topic_key
        self.default_topic_queue_nums = default_topic_queue_nums
        self._instance: ClientInstance | None = None
        self._publish: dict[str, tuple[float, TopicPublishInfo]] = {}
        self._inner = False
        # futures of sends not answered yet (send_async, send_future): what flush() waits for
        self._pending: set[Future] = set()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Producer:
        """Join the client instance of this process and register the group with the broker."""
        if self._instance is not None:
            raise MQClientError(f"producer {self.group!r} is already started")
        validators.check_group(self.group)
        if self.group == C.DEFAULT_PRODUCER_GROUP:
            raise MQClientError("producer group DEFAULT_PRODUCER is reserved: name your group")
        client_id = build_client_id(self.instance_name, change_default=True)
        inst = ClientInstance.acquire(client_id, self._transport_key, self._transport_factory,
                                      self.timers)
        try:
            inst.register_producer(self.group, self)
        except BaseException:
            inst.release()
            raise
        self._instance = inst
        return self

    def shutdown(self) -> None:
        """Leave the group (the broker stops asking this client for transaction checks)."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        if not self._inner:
            inst.unregister_producer(self.group)
        inst.release()

    def close(self) -> None:
        """``shutdown()`` under Kafka's name."""
        self.shutdown()

    def __enter__(self) -> Producer:
        return self.start() if self._instance is None else self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @classmethod
    def _inner_for(cls, instance: ClientInstance) -> Producer:
        """The instance's ``CLIENT_INNER_PRODUCER`` (consumer send-back fallback): shares the
        instance's transport without registering a group."""
        p = cls.__new__(cls)
        cls.__init__(p, C.CLIENT_INNER_PRODUCER_GROUP, broker=instance.transport)
        p._instance = instance
        p._inner = True
        return p

    @property
    def transport(self):  # noqa: ANN201
        if self._instance is None:
            raise MQClientError(f"producer {self.group!r} is not started: call start() first")
        return self._instance.transport

    @property
    def send_latency_fault_enable(self) -> bool:
        """RocketMQ's ``sendLatencyFaultEnable``: avoid brokers whose sends were slow or failed
        (docs/cluster.md); off by default."""
        return self.fault_strategy.send_latency_fault_enable

    @send_latency_fault_enable.setter
    def send_latency_fault_enable(self, value: bool) -> None:
        self.fault_strategy.send_latency_fault_enable = bool(value)

    # -- routes -------------------------------------------------------------------------------
    def publish_info(self, topic: str, refresh: bool = False) -> TopicPublishInfo:
        """The topic's publish list; unknown topics use ``create_topic_key``'s route with
        ``min(default_topic_queue_nums, its queues)`` (the broker creates the topic)."""
        now = time.monotonic()
        hit = self._publish.get(topic)
        if hit is not None and not refresh and \
                now - hit[0] < self.timers.poll_name_server_interval / 1000:
            return hit[1]
        inst = self._instance
        if inst is None:
            raise MQClientError(f"producer {self.group!r} is not started: call start() first")
        route = inst.topic_route(topic)
        if route is None or not route.queue_datas:
            default = inst.topic_route(self.create_topic_key)
            if default is None or not default.queue_datas:
                raise MQClientError(f"no route info of topic {topic!r} (and no "
                                    f"{self.create_topic_key} to create it)")
            qds = tuple(type(q)(q.broker_name, min(self.default_topic_queue_nums,
                                                   q.read_queue_nums),
                                min(self.default_topic_queue_nums, q.read_queue_nums), q.perm,
                                q.topic_sys_flag) for q in default.queue_datas)
            route = type(default)(qds, default.broker_addrs, None)
        info = TopicPublishInfo.from_route(topic, route)
        if not info.ok():
            raise MQClientError(f"no writable queue of topic {topic!r}")
        if hit is not None and hit[1].message_queues == info.message_queues and \
                hit[1].order_topic == info.order_topic:
            # the same queues: keep the list and its round-robin positions (RocketMQ replaces
            # a publish list only when the route changed), so sends stay evenly spread
            hit[1].route = info.route
            info = hit[1]
        self._publish[topic] = (now, info)
        return info

    # -- message preparation ------------------------------------------------------------------
    def _prepare(self, msg: Message, compress: bool = True) -> tuple[Message, str]:
        """Validate; the message as sent (UNIQ_KEY and WAIT=true added when absent, as Java's
        ``Message`` constructors and ``MessageClientIDSetter`` do; body compressed when
        eligible) and its UNIQ_KEY."""
        validators.check_message(msg, self.max_message_size)
        msg, uniq = stamp_one_message(msg)
        if (compress and len(msg.body) >= self.compress_msg_body_over_howmuch
                and not msg.sys_flag & 0x1):
            msg = _rebuilt(msg, msg.properties, self._compress(bytes(msg.body)),
                           msg.sys_flag | self._compress_bits)
        return msg, uniq

    def _request(self, msg: Message, mq: MessageQueue, batch: list[Message] | None = None
                 ) -> SendMessageRequest:
        req = SendMessageRequest(self.group, mq.topic, mq.queue_id,
                                 batch if batch is not None else [msg], batch=batch is not None,
                                 default_topic=self.create_topic_key,
                                 default_topic_queue_nums=self.default_topic_queue_nums)
        if batch is None and mq.topic.endswith(reply.REPLY_TOPIC_SUFFIX):
            req.reply = reply.is_reply(msg)     # sent as SEND_REPLY_MESSAGE_V2
        if mq.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            props = msg.properties          # §1.4: moved from the properties into the header
            rt = props.get(C.PROPERTY_RECONSUME_TIME)
            mx = props.get(C.PROPERTY_MAX_RECONSUME_TIMES)
            if rt is not None or mx is not None:
                props.pop(C.PROPERTY_RECONSUME_TIME, None)
                props.pop(C.PROPERTY_MAX_RECONSUME_TIMES, None)
                req.messages = [_rebuilt(msg, props)]
                req.reconsume_times = int(rt or 0)
                req.max_reconsume_times = int(mx) if mx is not None else None
        return req

    def _result(self, resp: SendMessageResponse, mq: MessageQueue, uniq: str) -> SendResult:
        status = _STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, mq.broker_name)
        return SendResult(status, uniq, resp.msg_id,
                          MessageQueue(mq.topic, mq.broker_name, resp.queue_id),
                          resp.queue_offset, resp.transaction_id)

    # -- sync ---------------------------------------------------------------------------------
    def send(self, msg: Message, message_queue: MessageQueue | None = None,
             selector: Selector | None = None, arg: Any = None,
             timeout: int | None = None) -> SendResult:
        """Send and wait for the broker's answer.

        Without a queue or selector the producer round-robins over the topic's queues and
        retries (``retry_times_when_send_failed``) on another broker's queue within
        ``send_msg_timeout`` ms in all; with ``message_queue`` or ``selector`` (+ ``arg``) it
        sends once. ``selector`` is an object with ``select(mqs, msg, arg)`` or such a
        function (``selector=lambda mqs, msg, arg: mqs[arg % len(mqs)]``). Raises
        ``MQClientError`` (bad message, no route), ``MQBrokerError`` (the broker refused) or
        ``TransportError``.
        """
        prepared, uniq = self._prepare(msg)
        timeout = self.send_msg_timeout if timeout is None else timeout
        if message_queue is not None or selector is not None:
            mq = self._explicit_queue(msg, message_queue, selector, arg)
            return self._send_to_chosen_queue(mq, self._request(prepared, mq), timeout, uniq)
        topic = prepared.topic
        if topic.endswith(reply.REPLY_TOPIC_SUFFIX) and reply.is_reply(prepared):
            # not the fast path: a reply goes with its request code (``_request``)
            return self._drive(self._retrying(prepared, uniq, None, timeout), None)
        if topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            return self._drive(self._retrying(prepared, uniq, None, timeout), None)
        return self._send_fast(prepared, uniq, timeout)

    # -- request-reply (rocketstore.client.reply) ---------------------------------------------
    def request(self, msg: Message, timeout: int = 3000, *,
                message_queue: MessageQueue | None = None, selector: Selector | None = None,
                arg: Any = None) -> MessageExt:
        """Send ``msg`` as a request and wait up to ``timeout`` ms for its reply (RocketMQ's
        ``DefaultMQProducer.request``; ``message_queue`` or ``selector`` + ``arg`` as for
        ``send``): the reply message. A consumer answers with ``create_reply_message(request,
        body)`` and ``send``. Raises ``RequestTimeoutError`` when no reply comes in time,
        ``MQClientError`` when the request could not be sent."""
        return reply.request(self, msg, timeout, message_queue=message_queue,
                             selector=selector, arg=arg)

    def request_async(self, msg: Message, timeout: int = 3000, *,
                      message_queue: MessageQueue | None = None,
                      selector: Selector | None = None, arg: Any = None) -> Future[MessageExt]:
        """``request`` without waiting: a future of the reply, failed with
        ``RequestTimeoutError`` after ``timeout`` ms (its callbacks run on the thread that
        completes it: keep them short)."""
        return reply.request_future(self, msg, timeout, message_queue=message_queue,
                                    selector=selector, arg=arg)[0]

    def send_reply(self, request: Message | MessageExt, body: bytes,
                   timeout: int | None = None) -> SendResult:
        """Answer a request received by a consumer: ``send(create_reply_message(request,
        body))``. SEND_OK once the broker pushed the reply to the requester (any send of a
        reply goes as SEND_REPLY_MESSAGE_V2, as Java's client picks the code by
        ``MSG_TYPE``)."""
        return self.send(reply.create_reply_message(request, body), timeout=timeout)

    def _send_to_chosen_queue(self, mq: MessageQueue, request: SendMessageRequest,
                              timeout: int, uniq: str) -> SendResult:
        """One attempt at the queue the caller chose: an ordered send must not move to
        another broker's queue (that would reorder its key), so a dead broker is an error."""
        try:
            resp = self.transport.send_message(mq.broker_name, request, timeout)
        except TransportError as e:
            raise _chosen_queue_failed(mq, e) from e
        return self._result(resp, mq, uniq)

    def _explicit_queue(self, msg: Message, mq: MessageQueue | None,
                        selector: Selector | None, arg: Any) -> MessageQueue:
        if mq is not None:
            if mq.topic != msg.topic:
                raise MQClientError(f"message's topic {msg.topic!r} is not the queue's "
                                    f"topic {mq.topic!r}")
            return mq
        info = self.publish_info(msg.topic)
        select = getattr(selector, "select", None)
        if select is None:
            if not callable(selector):
                raise MQClientError(f"selector {selector!r} is neither a function "
                                    f"(mqs, msg, arg) nor an object with select(mqs, msg, arg)")
            select = selector
        chosen = select(list(info.message_queues), msg, arg)
        if chosen is None:
            raise MQClientError("select message queue return null")
        if not isinstance(chosen, MessageQueue):
            raise MQClientError(f"selector returned {chosen!r}, not one of the MessageQueues "
                                f"it was given")
        return chosen

    def _retrying(self, prepared: Message, uniq: str, batch: list[Message] | None,
                  timeout: int, tried: tuple[MessageQueue, float, TopicPublishInfo] | None = None
                  ) -> Generator[Attempt, SendMessageResponse, SendResult]:
        """The retry rules of a send to no chosen queue (§1.4), written once for ``send`` and
        ``send_future``: yields each attempt, is sent the broker's answer or thrown the
        transport's error, and returns the ``SendResult`` (or raises). ``tried``: the first
        attempt was already made (``send``'s fast path) on this queue, started at this
        ``time.monotonic()``, from this publish list; its answer is what is sent in first."""
        if tried is None:
            begin = time.monotonic()
            info = self.publish_info(prepared.topic)
        else:
            begin, info = tried[1], tried[2]
        last_broker: str | None = None
        error: Exception | None = None
        not_stored: SendResult | None = None
        strategy = self.fault_strategy
        for _attempt in range(1 + self.retry_times_when_send_failed):
            if tried is not None:
                mq, started, tried = tried[0], begin, None
            else:
                mq = strategy.select_one_message_queue(info, last_broker)
                started = time.monotonic()
            elapsed = (started - begin) * 1000
            if elapsed > timeout:
                break
            try:
                res = self._result((yield mq, self._request(prepared, mq, batch),
                                    int(timeout - elapsed)), mq, uniq)
            except TransportError as e:
                strategy.update_fault_item(mq.broker_name, _ms_since(started), True)
                error = e
            except MQBrokerError as e:
                strategy.update_fault_item(mq.broker_name, _ms_since(started), True)
                if e.code not in RETRY_RESPONSE_CODES:
                    raise
                error = e
            else:
                strategy.update_fault_item(mq.broker_name, _ms_since(started), False)
                if res.status is SendStatus.SEND_OK or \
                        not self.retry_another_broker_when_not_store_ok:
                    return res
                error = None
                not_stored = res        # retried on another broker; returned if all fail so
            last_broker = mq.broker_name
            info = self.publish_info(prepared.topic, refresh=True)
        if error is None and not_stored is not None:
            return not_stored
        if error is None:
            raise MQClientError(f"sendDefaultImpl call timeout: {timeout} ms spent "
                                f"(topic {prepared.topic!r})")
        raise error

    def _send_with_retries(self, prepared: Message, uniq: str, batch: list[Message] | None,
                           timeout: int) -> SendResult:
        if batch is None and not prepared.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            return self._send_fast(prepared, uniq, timeout)
        return self._drive(self._retrying(prepared, uniq, batch, timeout), None)

    def _send_fast(self, prepared: Message, uniq: str, timeout: int) -> SendResult:
        """``send``'s first attempt made directly (``Transport.send_one``: in process no
        request object, no future); anything but SUCCESS goes through ``_retrying`` with that
        answer, so the retry rules stay in one place."""
        begin = time.monotonic()
        info = self.publish_info(prepared.topic)
        strategy = self.fault_strategy
        mq = strategy.select_one_message_queue(info, None)
        answer: SendMessageResponse | TransportError
        try:
            answer = self.transport.send_one(mq.broker_name, self.group, mq.topic, mq.queue_id,
                                             prepared, self.create_topic_key,
                                             self.default_topic_queue_nums, timeout)
        except TransportError as e:
            answer = e
        else:
            if answer.code == _SUCCESS:
                if strategy.send_latency_fault_enable:
                    strategy.update_fault_item(mq.broker_name, _ms_since(begin), False)
                return SendResult(_SEND_OK, uniq, answer.msg_id,
                                  mq if answer.queue_id == mq.queue_id else
                                  MessageQueue(mq.topic, mq.broker_name, answer.queue_id),
                                  answer.queue_offset, answer.transaction_id)
        return self._drive(self._retrying(prepared, uniq, None, timeout, (mq, begin, info)),
                           answer)

    def _drive(self, steps: Generator[Attempt, SendMessageResponse, SendResult],
               first: SendMessageResponse | TransportError | None) -> SendResult:
        """Run the retry rules on this thread; ``first``: the answer to the first attempt when
        it was already made."""
        send = self.transport.send_message
        try:
            mq, request, left = next(steps)
            if first is not None:
                if isinstance(first, TransportError):
                    mq, request, left = steps.throw(first)
                else:
                    mq, request, left = steps.send(first)
            while True:
                try:
                    resp = send(mq.broker_name, request, left)
                except TransportError as e:
                    mq, request, left = steps.throw(e)
                else:
                    mq, request, left = steps.send(resp)
        except StopIteration as stop:
            return stop.value

    # -- futures: the sync rules without a waiting thread ---------------------------------------
    def send_future(self, msg: Message, message_queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None,
                    timeout: int | None = None) -> Future[SendResult]:
        """``send`` (its retry rules exactly) as a future: nothing waits while the broker
        answers; a retry after a failed attempt runs on the client's pull-service thread (a
        route refresh may ask the NameServer). ``timeout`` bounds when a new attempt may
        start; each attempt waits as long as its transport allows (3 s over TCP).
        ``rocketstore.aio.AsyncProducer.send`` awaits this future."""
        out: Future[SendResult] = pending_future()
        try:
            prepared, uniq = self._prepare(msg)
            timeout = self.send_msg_timeout if timeout is None else timeout
            if message_queue is not None or selector is not None:
                mq = self._explicit_queue(msg, message_queue, selector, arg)
                self._send_once_future(out, mq, self._request(prepared, mq), uniq)
            else:
                steps = self._retrying(prepared, uniq, None, timeout)
                self._advance(out, steps, steps.send, None, False)
        except Exception as e:
            out.set_exception(e)
        return self._track(out)

    def send_batch_future(self, msgs: Iterable[Message],
                          message_queue: MessageQueue | None = None,
                          timeout: int | None = None) -> Future[SendResult]:
        """``send_batch`` as a future (see ``send_future``)."""
        out: Future[SendResult] = pending_future()
        try:
            batch, joined = self._prepare_batch(msgs)
            timeout = self.send_msg_timeout if timeout is None else timeout
            if message_queue is not None:
                mq = self._explicit_queue(batch[0], message_queue, None, None)
                self._send_once_future(out, mq, self._request(batch[0], mq, batch), joined)
            else:
                steps = self._retrying(batch[0], joined, batch, timeout)
                self._advance(out, steps, steps.send, None, False)
        except Exception as e:
            out.set_exception(e)
        return self._track(out)

    def _track(self, out: Future) -> Future:
        """Remember an unanswered future for ``flush`` (its answer forgets it)."""
        if not out.done():
            pending = self._pending
            pending.add(out)
            if out.done():          # answered meanwhile, perhaps before the add
                pending.discard(out)
        return out

    def _settle(self, out: Future, value: Any = None, exc: BaseException | None = None
                ) -> None:
        if exc is None:
            complete_future(out, value)
        elif not out.done():
            out.set_exception(exc)
        self._pending.discard(out)

    def _send_once_future(self, out: Future, mq: MessageQueue, request: SendMessageRequest,
                          uniq: str) -> None:
        def answered(f: Future) -> None:
            exc = f.exception()
            if exc is None:
                try:
                    self._settle(out, self._result(f.result(), mq, uniq))
                except Exception as e:
                    self._settle(out, exc=e)
            else:
                self._settle(out, exc=_chosen_queue_failed(mq, exc)
                             if isinstance(exc, TransportError) else exc)
        try:
            fut = self.transport.send_message_async(mq.broker_name, request)
        except TransportError as e:
            raise _chosen_queue_failed(mq, e) from e
        if fut.done():
            answered(fut)
        else:
            fut.add_done_callback(answered)

    def _advance(self, out: Future, steps: Generator[Any, Any, Any], resume: Callable,
                 value: Any, later: bool) -> None:
        """Resume the retry rules with an answer (``steps.send``) or an error
        (``steps.throw``) and start the next attempt, or settle ``out``. ``later``: the
        answer arrived on a transport thread; a resume that may retry (and so refresh a
        route with a blocking NameServer call) moves to the pull-service thread."""
        if later:
            inst = self._instance
            if inst is None:
                self._settle(out, exc=MQClientError(f"producer {self.group!r} was shut down "
                                                    f"before its send was answered"))
                return
            inst.pull_service.execute(self._advance, out, steps, resume, value, False)
            return
        try:
            mq, request, _left = resume(value)
        except StopIteration as stop:
            self._settle(out, stop.value)
            return
        except BaseException as e:
            self._settle(out, exc=e)
            return
        try:
            fut = self.transport.send_message_async(mq.broker_name, request)
        except TransportError as e:
            self._advance(out, steps, steps.throw, e, False)
            return
        if fut.done():       # an in-process broker answers at once
            self._attempt_answered(out, steps, False, fut)
        else:
            fut.add_done_callback(functools.partial(self._attempt_answered, out, steps, True))

    def _attempt_answered(self, out: Future, steps: Generator[Any, Any, Any], later: bool,
                          f: Future) -> None:
        exc = f.exception()
        if exc is None:
            resp = f.result()
            # SUCCESS ends the send: no retry, no blocking call, so finish on this thread
            self._advance(out, steps, steps.send, resp,
                          later and resp.code != ResponseCode.SUCCESS)
        elif isinstance(exc, TransportError):
            self._advance(out, steps, steps.throw, exc, later)
        else:
            steps.close()
            self._settle(out, exc=exc)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every ``send_async`` / ``send_future`` made so far is answered (Kafka's
        ``flush``); ``timeout`` in seconds. Returns how many are still unanswered (0: all)."""
        pending = [f for f in list(self._pending) if not f.done()]
        if pending:
            wait_futures(pending, timeout)
        return sum(1 for f in pending if not f.done())

    # -- async and oneway ---------------------------------------------------------------------
    def send_async(self, msg: Message, message_queue: MessageQueue | None = None,
                   selector: Selector | None = None, arg: Any = None
                   ) -> Future[SendResult]:
        """Send without waiting: the future completes with the ``SendResult`` when the broker
        answers (under SYNC_FLUSH: once the message is on disk). A transport failure is
        retried ``retry_times_when_send_async_failed`` times on another queue (default queue
        selection only); a broker refusal is the future's exception (RocketMQ's async rules;
        ``send_future`` keeps ``send``'s). No thread waits per send.
        """
        # the store's future: its Condition is made only if someone waits before it is done
        # (an in-process send is done at once); thousands in flight stay cheap for the GC
        out: Future[SendResult] = pending_future()
        try:
            prepared, uniq = self._prepare(msg)
            if message_queue is not None or selector is not None:
                mq = self._explicit_queue(msg, message_queue, selector, arg)
                retries = 0
                info = None
            else:
                info = self.publish_info(prepared.topic)
                mq = self.fault_strategy.select_one_message_queue(info, None)
                retries = self.retry_times_when_send_async_failed
        except Exception as e:
            out.set_exception(e)
            return out
        self._send_async_attempt(out, prepared, uniq, mq, info, retries)
        return self._track(out)

    def _send_async_attempt(self, out: Future, prepared: Message, uniq: str, mq: MessageQueue,
                            info: TopicPublishInfo | None, retries: int) -> None:
        started = time.monotonic()
        try:
            if (mq.topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX)     # header fields moved
                    or mq.topic.endswith(reply.REPLY_TOPIC_SUFFIX)):  # a reply's own code
                fut = self.transport.send_message_async(mq.broker_name,
                                                        self._request(prepared, mq))
            else:
                fut = self.transport.send_one_async(
                    mq.broker_name, self.group, mq.topic, mq.queue_id, prepared,
                    self.create_topic_key, self.default_topic_queue_nums)
        except Exception as e:
            if isinstance(e, TransportError) and retries > 0 and info is not None:
                self.fault_strategy.update_fault_item(mq.broker_name, _ms_since(started), True)
                nxt = self.fault_strategy.select_one_message_queue(info, mq.broker_name)
                self._send_async_attempt(out, prepared, uniq, nxt, info, retries - 1)
                return
            self._settle(out, exc=e)
            return
        if type(fut) is SendMessageResponse:    # answered at once: no future at all
            strategy = self.fault_strategy
            if strategy.send_latency_fault_enable:
                strategy.update_fault_item(mq.broker_name, _ms_since(started), False)
            if fut.code == _SUCCESS:            # _result's SEND_OK, without its lookups
                complete_future(out, SendResult(
                    _SEND_OK, uniq, fut.msg_id,
                    mq if fut.queue_id == mq.queue_id else
                    MessageQueue(mq.topic, mq.broker_name, fut.queue_id),
                    fut.queue_offset, fut.transaction_id))
                return
            try:
                self._settle(out, self._result(fut, mq, uniq))
            except Exception as e:
                self._settle(out, exc=e)
            return
        if fut.done():          # an in-process broker answers at once: no callback to keep
            self._async_answered(out, prepared, uniq, mq, info, retries, started, fut)
        else:
            fut.add_done_callback(functools.partial(
                self._async_answered, out, prepared, uniq, mq, info, retries, started))

    def _async_answered(self, out: Future, prepared: Message, uniq: str, mq: MessageQueue,
                        info: TopicPublishInfo | None, retries: int, started: float,
                        f: Future) -> None:
        exc = f.exception()
        self.fault_strategy.update_fault_item(mq.broker_name, _ms_since(started),
                                              exc is not None)
        if exc is None:
            try:
                self._settle(out, self._result(f.result(), mq, uniq))
            except Exception as e:
                self._settle(out, exc=e)
            return
        if isinstance(exc, TransportError) and retries > 0 and info is not None:
            nxt = self.fault_strategy.select_one_message_queue(info, mq.broker_name)
            self._send_async_attempt(out, prepared, uniq, nxt, info, retries - 1)
            return
        self._settle(out, exc=exc)

    def send_oneway(self, msg: Message, message_queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None) -> None:
        """Send once, no answer, no retry."""
        prepared, _ = self._prepare(msg)
        if message_queue is not None or selector is not None:
            mq = self._explicit_queue(msg, message_queue, selector, arg)
        else:
            mq = self.fault_strategy.select_one_message_queue(
                self.publish_info(prepared.topic), None)
        self.transport.send_message_oneway(mq.broker_name, self._request(prepared, mq))

    # -- batch --------------------------------------------------------------------------------
    def send_batch(self, msgs: Iterable[Message], message_queue: MessageQueue | None = None,
                   timeout: int | None = None) -> SendResult:
        """Send messages of one topic as one batch to one queue (§1.9): same topic and WAIT,
        no delay level, no retry topic, not compressed; consecutive offsets."""
        out, joined = self._prepare_batch(msgs)
        timeout = self.send_msg_timeout if timeout is None else timeout
        if message_queue is not None:
            mq = self._explicit_queue(out[0], message_queue, None, None)
            return self._send_to_chosen_queue(mq, self._request(out[0], mq, out), timeout,
                                              joined)
        return self._send_with_retries(out[0], joined, out, timeout)

    def _prepare_batch(self, msgs: Iterable[Message]) -> tuple[list[Message], str]:
        """The batch rules checked; the messages as sent and their UNIQ_KEYs joined by ','."""
        msgs = list(msgs)
        if not msgs:
            raise MQClientError("send_batch: the batch is empty")
        topic = msgs[0].topic
        wait = None
        check = validators.check_message
        max_size = self.max_message_size
        for m in msgs:
            check(m, max_size)
            if m.topic != topic:
                raise MQClientError(f"send_batch: the topic of the messages in one batch should "
                                    f"be the same ({topic!r} and {m.topic!r})")
            if m.delayed and \
                    int(m.properties.get(C.PROPERTY_DELAY_TIME_LEVEL) or 0) > 0:
                raise MQClientError("send_batch: TimeDelayLevel is not supported for batching")
            w = m.wait_store_msg_ok
            if wait is not None and w != wait:
                raise MQClientError("send_batch: the waitStoreMsgOK of the messages in one batch "
                                    "should be the same")
            wait = w
        if topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            raise MQClientError("send_batch: retry group topic is not supported for batching")
        out, keys = stamp(msgs)
        return out, ",".join(keys)


def _chosen_queue_failed(mq: MessageQueue, e: TransportError) -> TransportError:
    return TransportError(mq.broker_name, f"send to the chosen queue {mq.topic}/"
                          f"{mq.broker_name}/{mq.queue_id} failed and is not retried "
                          f"elsewhere (sends to a chosen queue never fail over): {e.reason}")


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


_COMMIT_TYPE = {LocalTransactionState.COMMIT_MESSAGE: TransactionCommitType.COMMIT_TYPE,
                LocalTransactionState.ROLLBACK_MESSAGE: TransactionCommitType.ROLLBACK_TYPE,
                LocalTransactionState.UNKNOW: TransactionCommitType.NOT_TYPE}


def _state(value: Any) -> LocalTransactionState:
    return value if isinstance(value, LocalTransactionState) else LocalTransactionState.UNKNOW


class TransactionProducer(Producer):
    """Half message, local transaction, commit or rollback (RocketMQ's
    ``TransactionMQProducer``, §10.1); answers the broker's check-backs for its group with
    ``listener.check_local_transaction`` on one check thread (§10.6)."""

    def __init__(self, group: str, listener: TransactionListener, **kw: Any) -> None:
        if listener is None or not callable(getattr(listener, "execute_local_transaction", None)):
            raise MQClientError("TransactionProducer needs a listener with "
                                "execute_local_transaction and check_local_transaction")
        super().__init__(group, **kw)
        self.listener = listener
        self._check_executor: ThreadPoolExecutor | None = None

    def start(self) -> TransactionProducer:
        self._check_executor = ThreadPoolExecutor(1, thread_name_prefix=f"tx-check-{self.group}")
        try:
            super().start()
        except BaseException:
            self._check_executor.shutdown()
            raise
        return self

    def shutdown(self) -> None:
        super().shutdown()
        ex, self._check_executor = self._check_executor, None
        if ex is not None:
            ex.shutdown(wait=True)

    def send_message_in_transaction(self, msg: Message, arg: Any = None
                                    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``execute_local_transaction(msg, arg)``, then
        commit or roll back (UNKNOW leaves it to the broker's check-back)."""
        res = self.send(self.half_message(msg))
        outcome: Any = None
        error: BaseException | None = None
        if res.status is SendStatus.SEND_OK:
            try:
                outcome = self.listener.execute_local_transaction(msg, arg)
            except Exception as e:       # counts as UNKNOW: the check-back decides
                error = e
        return self.end_transaction(res, outcome, error)

    def half_message(self, msg: Message) -> Message:
        """``msg`` as the half message of a transaction (validated; no delay level)."""
        validators.check_message(msg, self.max_message_size)
        props = msg.properties
        props.pop(C.PROPERTY_DELAY_TIME_LEVEL, None)
        props[C.PROPERTY_TRANSACTION_PREPARED] = "true"
        props[C.PROPERTY_PRODUCER_GROUP] = self.group
        return _rebuilt(msg, props, sys_flag=(msg.sys_flag & ~TRANSACTION_TYPE_MASK)
                        | TRANSACTION_PREPARED_TYPE)

    def end_transaction(self, res: SendResult, outcome: Any, error: BaseException | None
                        ) -> TransactionSendResult:
        """Commit or roll back the half message ``res`` by what the local transaction gave
        (``outcome``, or ``error`` raised: UNKNOW); a half message not stored rolls back."""
        if res.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        elif error is not None:
            log.warning("execute_local_transaction failed: %s", error)
            state = LocalTransactionState.UNKNOW
        else:
            state = _state(outcome)
        if res.offset_msg_id:
            self.transport.end_transaction(res.message_queue.broker_name, EndTransactionRequest(
                self.group, res.queue_offset, commit_log_offset_of(res.offset_msg_id),
                _COMMIT_TYPE[state], False, res.msg_id, res.msg_id))
        return TransactionSendResult(res.status, res.msg_id, res.offset_msg_id,
                                     res.message_queue, res.queue_offset, res.msg_id, state)

    def _check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                 msg: MessageExt) -> None:
        ex = self._check_executor
        if ex is None:
            return

        def check() -> None:
            try:
                state = _state(self.listener.check_local_transaction(msg))
            except Exception as e:
                log.warning("check_local_transaction failed: %s", e)
                state = LocalTransactionState.UNKNOW
            try:
                self.transport.end_transaction(broker_name, EndTransactionRequest(
                    self.group, request.tran_state_table_offset, request.commit_log_offset,
                    _COMMIT_TYPE[state], True, request.msg_id, request.transaction_id))
            except (TransportError, MQClientError) as e:
                log.warning("end transaction after check failed: %s", e)
        try:
            ex.submit(check)
        except RuntimeError:
            pass        # shut down meanwhile: the broker asks again later
