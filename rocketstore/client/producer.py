"""``Producer`` and ``TransactionProducer``: RocketMQ's ``DefaultMQProducer`` and
``TransactionMQProducer`` (MESSAGING.md §1, §10).

A send validates the message (§1.6), stamps its UNIQ_KEY (§1.8), compresses a large body
(§1.7), picks a queue (§1.3, §1.5) and asks the broker through the transport; sync sends retry
within ``send_msg_timeout`` on another queue (§1.4), sends to an explicit queue or through a
selector never do.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any, Generator, Iterable

from rocketstore.acl.signature import SessionCredentials, credentials_from
from rocketstore.client import reply, validators
from rocketstore.client.compression import compressor
from rocketstore.client.fast_send import FastSend, sent_result
from rocketstore.client.instance import (HEARTBEAT_BROKER_INTERVAL_MS,
                                         POLL_NAME_SERVER_INTERVAL_MS, ClientInstance,
                                         ClientTimers, build_client_id, transport_for)
from rocketstore.client.latency import MQFaultStrategy
from rocketstore.client.selector import TopicPublishInfo
from rocketstore.client.send_futures import FutureSends
# the shared send pieces, importable from here as before (re-exported)
from rocketstore.client.sending import (  # noqa: F401
    RETRY_RESPONSE_CODES, TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK, _SEND_OK, _SUCCESS,
    _STATUS_BY_CODE, Attempt, Selector, SendResult, TransactionSendResult, _chosen_queue_failed,
    _ms_since, _rebuilt, commit_log_offset_of, stamp, stamp_one_message)
from rocketstore.common import Message, MessageExt, MessageQueue, SendStatus
from rocketstore.common import constants as C
from rocketstore.common.protocol import SendMessageRequest, SendMessageResponse
from rocketstore.store._codec import batch_plain
from rocketstore.errors import MQBrokerError, MQClientError, TransportError

log = logging.getLogger("rocketstore.client")


class Producer(FutureSends):
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
        # topic -> its fast sync sends over an in-process broker's send lane (fast_send.py)
        self._fast: dict[str, FastSend] = {}
        self._lanes = True          # the transport may have send lanes (in process)
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
        self._lanes = True
        return self

    def shutdown(self) -> None:
        """Leave the group (the broker stops asking this client for transaction checks)."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        self._fast.clear()
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
        timeout = self.send_msg_timeout if timeout is None else timeout
        if message_queue is None and selector is None and type(msg) is Message:
            fast = self._fast.get(msg.topic)
            if fast is not None:
                result = fast.send(msg, timeout)
                if result is not None:
                    return result
        prepared, uniq = self._prepare(msg)
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
                if self._lanes:
                    self._fast_after(mq, info)
                return sent_result(answer, mq, uniq)
        return self._drive(self._retrying(prepared, uniq, None, timeout, (mq, begin, info)),
                           answer)

    def _fast_after(self, mq: MessageQueue, info: TopicPublishInfo) -> None:
        """After a send to ``mq`` from publish list ``info`` succeeded: the topic's
        ``FastSend`` made anew unless the one there is of this list and still fresh (a
        refreshed route of the same queues keeps its list, so the age is checked too)."""
        fast = self._fast.get(mq.topic)
        if fast is None or fast.info is not info or fast.expires <= time.monotonic():
            self._install_fast(mq.topic, info, mq.broker_name)

    def _install_fast(self, topic: str, info: TopicPublishInfo, broker_name: str) -> None:
        """After a sync send to ``topic`` succeeded: its next sends take ``FastSend`` while
        ``info`` is the fresh publish list, when the transport has send lanes (in process)."""
        hit = self._publish.get(topic)
        if hit is None or hit[1] is not info or topic.endswith(reply.REPLY_TOPIC_SUFFIX):
            return              # (a reply topic's replies go with their own request code)
        lane = self.transport.send_lane(broker_name, self.group, topic, self.create_topic_key,
                                        self.default_topic_queue_nums)
        if lane is None:
            self._lanes = False     # a transport without lanes (TCP): not asked again
            return
        if len(self._fast) >= 1024:         # bounded: a producer cycling topics rebuilds
            self._fast.clear()
        self._fast[topic] = FastSend(self, info, hit[0], lane, broker_name)

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
        timeout = self.send_msg_timeout if timeout is None else timeout
        if message_queue is None and type(msgs) is list and msgs and type(msgs[0]) is Message:
            fast = self._fast.get(msgs[0].topic)
            if fast is not None:        # in process: the broker's batch lane (fast_send.py)
                result = fast.send_batch(msgs, timeout)
                if result is not None:
                    return result
        out, joined = self._prepare_batch(msgs)
        if message_queue is not None:
            mq = self._explicit_queue(out[0], message_queue, None, None)
            return self._send_to_chosen_queue(mq, self._request(out[0], mq, out), timeout,
                                              joined)
        result = self._send_with_retries(out[0], joined, out, timeout)
        if self._lanes and result.status is SendStatus.SEND_OK:
            hit = self._publish.get(result.message_queue.topic)
            if hit is not None:
                self._fast_after(result.message_queue, hit[1])
        return result

    def _prepare_batch(self, msgs: Iterable[Message]) -> tuple[list[Message], str]:
        """The batch rules checked; the messages as sent and their UNIQ_KEYs joined by ','."""
        msgs = list(msgs)
        if not msgs:
            raise MQClientError("send_batch: the batch is empty")
        max_size = self.max_message_size
        topic = batch_plain(msgs, max_size)
        if topic is not None:
            # every entry passed on its face (in C): the shared topic's name is checked once
            validators.check_message(msgs[0], max_size)
        else:
            topic = self._check_batch_entries(msgs, max_size)
        if topic.startswith(C.RETRY_GROUP_TOPIC_PREFIX):
            raise MQClientError("send_batch: retry group topic is not supported for batching")
        out, keys = stamp(msgs)
        return out, ",".join(keys)

    @staticmethod
    def _check_batch_entries(msgs: list[Message], max_size: int) -> str:
        """``_prepare_batch``'s checks entry by entry, raising the first problem; the topic."""
        topic = msgs[0].topic
        wait = None
        check = validators.check_message
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
        return topic


# TransactionProducer extends Producer: defined after it, importable from here as before
from rocketstore.client.transaction import TransactionListener, TransactionProducer  # noqa: E402,F401
