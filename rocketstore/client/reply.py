"""Request-reply on the client (RocketMQ 4.7+'s ``DefaultMQProducer.request``).

The requester (``Producer.request`` / ``request_async``) stamps its message with a fresh
``CORRELATION_ID``, its client id as ``REPLY_TO_CLIENT`` and the timeout as ``TTL``, registers
a future under the correlation id and sends the message as any other. The broker adds
``CLUSTER``. A consumer of the request topic answers with ``create_reply_message(request,
body)`` and any ``Producer`` send (a reply goes as SEND_REPLY_MESSAGE_V2, 325, as Java's
client sends it); the broker pushes the reply to the requester's connection
(PUSH_REPLY_MESSAGE_TO_CLIENT, 326), and ``deliver`` completes the future whose correlation id
the reply carries. No reply in time: ``RequestTimeoutError``.

The futures of one process share one table (Java's ``RequestFutureHolder``), as replies come
in on whichever client instance the requester's producer belongs to.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from rocketstore.common import Message, MessageExt
from rocketstore.common import constants as C
from rocketstore.common.protocol import ReplyMessageRequest
from rocketstore.errors import MQClientError, RequestTimeoutError
from rocketstore.store._codec import decode as decode_record
from rocketstore.store._codec import encode_record, parse_properties

if TYPE_CHECKING:
    from rocketstore.client.producer import Producer
    from rocketstore.common import MessageQueue

log = logging.getLogger("rocketstore.client.reply")

REPLY_TOPIC_SUFFIX = "_" + C.REPLY_TOPIC_POSTFIX


class _Pending:
    __slots__ = ("future", "topic", "timeout_ms", "sent")

    def __init__(self, future: Future, topic: str, timeout_ms: int) -> None:
        self.future = future
        self.topic = topic
        self.timeout_ms = timeout_ms
        self.sent = False


_lock = threading.Lock()
_pending: dict[str, _Pending] = {}


def create_reply_message(request: Message | MessageExt, body: bytes) -> Message:
    """The reply to ``request`` (a message received by a consumer), to be sent with
    ``Producer.send``: topic ``<CLUSTER>_REPLY_TOPIC``, ``MSG_TYPE=reply`` and the request's
    ``CORRELATION_ID``, ``REPLY_TO_CLIENT`` and ``TTL`` (``MessageUtil.createReplyMessage``).
    Raises ``MQClientError`` when ``request`` has no ``CLUSTER`` (it did not come through a
    broker)."""
    if request is None:
        raise MQClientError("create reply message fail, requestMessage cannot be null.")
    props = request.properties
    cluster = props.get(C.PROPERTY_CLUSTER)
    if cluster is None:
        raise MQClientError("create reply message fail, requestMessage error, property["
                            f"{C.PROPERTY_CLUSTER}] is null.")
    out = {C.PROPERTY_MESSAGE_TYPE: C.REPLY_MESSAGE_FLAG}
    for key in (C.PROPERTY_CORRELATION_ID, C.PROPERTY_MESSAGE_REPLY_TO_CLIENT,
                C.PROPERTY_MESSAGE_TTL):
        value = props.get(key)
        if value is not None:
            out[key] = value
    return Message(C.reply_topic(cluster), body, properties=out)


def is_reply(msg: Message) -> bool:
    """Whether ``msg`` is a reply (sent with SEND_REPLY_MESSAGE_V2, as Java's client picks
    the code by ``MSG_TYPE``); the topic is looked at first, so other sends pay one suffix
    test."""
    return (msg.topic.endswith(REPLY_TOPIC_SUFFIX)
            and msg.properties.get(C.PROPERTY_MESSAGE_TYPE) == C.REPLY_MESSAGE_FLAG)


def get_reply_to_client(msg: Message | MessageExt) -> str | None:
    """The client id a request asks its reply to be pushed to (``REPLY_TO_CLIENT``)."""
    return msg.properties.get(C.PROPERTY_MESSAGE_REPLY_TO_CLIENT)


def request_future(producer: Producer, msg: Message, timeout_ms: int, *,
                   expire: bool = True, message_queue: MessageQueue | None = None,
                   selector: Any = None, arg: Any = None) -> tuple[Future, str]:
    """Send ``msg`` as a request (to ``message_queue`` or through ``selector`` when given, as
    ``Producer.send``); (the future of its reply, its correlation id). ``expire``: fail the
    future with ``RequestTimeoutError`` after ``timeout_ms`` (else the caller waits and calls
    ``forget``)."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise MQClientError(f"request timeout={timeout_ms!r}: expected milliseconds, an int > 0")
    inst = producer._instance
    if inst is None:
        raise MQClientError(f"producer {producer.group!r} is not started: call start() first")
    correlation_id = str(uuid.uuid4())
    props = msg.properties
    props[C.PROPERTY_CORRELATION_ID] = correlation_id
    props[C.PROPERTY_MESSAGE_REPLY_TO_CLIENT] = inst.client_id
    props[C.PROPERTY_MESSAGE_TTL] = str(timeout_ms)
    request = Message(msg.topic, msg.body, properties=props, flag=msg.flag,
                      sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp)
    if msg.topic not in producer._publish:
        # a first request to a topic: its brokers must know this client's channel before the
        # reply comes (prepareSendRequest heartbeats every broker)
        producer.publish_info(msg.topic)
        inst.send_heartbeat_to_all_brokers()
    out: Future = Future()
    pending = _Pending(out, msg.topic, timeout_ms)
    with _lock:
        _pending[correlation_id] = pending
    begin = time.monotonic()

    def sent(f: Future) -> None:
        exc = f.exception()
        if exc is None:
            pending.sent = True
            return
        forget(correlation_id)
        if not out.done():
            err = MQClientError(f"send request message to <{msg.topic}> fail: {exc}")
            err.__cause__ = exc
            _settle(out, error=err)
    try:
        producer.send_future(request, message_queue, selector, arg,
                             timeout=timeout_ms).add_done_callback(sent)
    except BaseException:
        forget(correlation_id)
        raise
    if expire:
        left = max(1, timeout_ms - int((time.monotonic() - begin) * 1000))
        inst.scheduler.schedule(left, lambda: _expire(correlation_id))
    return out, correlation_id


def request(producer: Producer, msg: Message, timeout_ms: int, **where: Any) -> MessageExt:
    """Send ``msg`` and wait up to ``timeout_ms`` for its reply (``where``: the queue or
    selector, as ``request_future``)."""
    fut, correlation_id = request_future(producer, msg, timeout_ms, expire=False, **where)
    try:
        return fut.result(timeout_ms / 1000)
    except TimeoutError:
        pending = forget(correlation_id)
        if fut.done():                  # the reply (or a failure) came meanwhile
            return fut.result()
        sent = pending.sent if pending is not None else False
        raise RequestTimeoutError(msg.topic, timeout_ms, correlation_id, sent) from None


def forget(correlation_id: str) -> _Pending | None:
    with _lock:
        return _pending.pop(correlation_id, None)


def _expire(correlation_id: str) -> None:
    pending = forget(correlation_id)
    if pending is not None and not pending.future.done():
        _settle(pending.future, error=RequestTimeoutError(
            pending.topic, pending.timeout_ms, correlation_id, pending.sent))


def _settle(fut: Future, value: object = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)
    except Exception:       # noqa: BLE001 - done meanwhile (timed out, cancelled)
        pass


def reply_message(req: ReplyMessageRequest, arrived_ms: int) -> MessageExt:
    """The pushed reply as the requester receives it: a ``MessageExt`` with the replier's
    properties plus ``ARRIVE_TIME``, its born and store hosts and the store time (its body
    decompressed on read when the replier compressed it)."""
    props = parse_properties(req.properties.encode("utf-8"))
    props[C.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME] = str(arrived_ms)
    record = encode_record(
        topic=req.topic, body=req.body, properties=props, queue_id=req.queue_id,
        flag=req.flag, sys_flag=req.sys_flag, born_timestamp=req.born_timestamp,
        born_host=req.born_host, store_timestamp=req.store_timestamp,
        store_host=req.store_host, reconsume_times=req.reconsume_times)
    msg = decode_record(record, 0)
    assert msg is not None
    return msg


def deliver(req: ReplyMessageRequest) -> bool:
    """Complete the request waiting for this reply; False when none waits (it timed out, or
    the reply is for another process)."""
    arrived = time.time_ns() // 1_000_000
    msg = reply_message(req, arrived)
    correlation_id = msg.properties.get(C.PROPERTY_CORRELATION_ID)
    pending = forget(correlation_id) if correlation_id is not None else None
    if pending is None:
        log.warning("reply with CORRELATION_ID %s: no request waits for it (timed out?)",
                    correlation_id)
        return False
    _settle(pending.future, msg)
    return True


__all__ = ["create_reply_message", "get_reply_to_client", "is_reply", "request",
           "request_future", "deliver"]
