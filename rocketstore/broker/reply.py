"""ReplyMessageProcessor: SEND_REPLY_MESSAGE (324) and _V2 (325), request-reply's broker half.

A requester (``Producer.request``) sends an ordinary message carrying ``CORRELATION_ID``,
``REPLY_TO_CLIENT`` (its client id) and ``TTL``; the broker stamps ``CLUSTER`` on it as on any
send. The replier builds the reply (``rocketstore.client.reply.create_reply_message``: topic
``<CLUSTER>_REPLY_TOPIC``, ``MSG_TYPE=reply``) and sends it with 324/325. As 4.9.8's
``ReplyMessageProcessor``, the broker then

1. runs the send checks (accept time, topic rules, topic auto-creation, queue id range);
2. pushes PUSH_REPLY_MESSAGE_TO_CLIENT (326) to the channel the requester's client id
   registered by its heartbeat, adding ``PUSH_REPLY_TIME`` to the properties; the push waits
   up to 10 s for the requester's answer (``Broker2Client.callClient``);
3. stores the reply as sent (its properties string untouched, no ``CLUSTER``) when
   ``storeReplyMessageEnable`` (the default);
4. answers by the push: SUCCESS (msgId, queueId, queueOffset of the stored reply, or "0", the
   queue, 0 when not stored) or SYSTEM_ERROR naming why the push failed. A failed store is only
   logged, as in 4.9.8.

Stricter than 4.9.8: a reply carrying a broker-only property (``REAL_TOPIC``, ...) is refused
with MESSAGE_ILLEGAL, as any client send is.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from rocketstore.broker.channels import complete, now_ms
from rocketstore.broker.send import _BROKER_ONLY, _random_queue_id
from rocketstore.common import constants as C
from rocketstore.common.protocol import (RemotingResult, ReplyMessageRequest, ResponseCode,
                                         SendMessageRequest, SendMessageResponse)
from rocketstore.errors import InvalidMessageError
from rocketstore.store._codec import encode_properties, parse_properties
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.types import Message, PutMessageResult

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker
    from rocketstore.common.sends import WireSend

log = logging.getLogger("rocketstore.broker.reply")

PUSH_TIMEOUT_S = 10.0          # Broker2Client.callClient
_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})


def _done(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


class ReplyMessageProcessor:
    """The broker's reply path; ``reply`` returns a Future of the ``SendMessageResponse``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def reply_wire(self, w: WireSend) -> Future:
        """A 324/325 as decoded from the wire (its properties still the replier's string)."""
        return self.reply(w.producer_group, w.topic, w.default_topic, w.default_topic_queue_nums,
                          w.queue_id, w.sys_flag, w.born_timestamp, w.flag, w.properties,
                          w.reconsume_times, bytes(w.body), w.born_host)

    def reply_request(self, req: SendMessageRequest) -> Future:
        """A reply sent in process (one message)."""
        if req.batch or len(req.messages) != 1:
            raise InvalidMessageError("request.messages", f"{len(req.messages)} messages",
                                      "a reply is one message, not a batch")
        msg = req.messages[0]
        born = msg.born_timestamp if msg.born_timestamp is not None else now_ms()
        return self.reply(req.producer_group, req.topic, req.default_topic,
                          req.default_topic_queue_nums, req.queue_id, msg.sys_flag, born,
                          msg.flag, encode_properties(msg.properties).decode("utf-8"),
                          req.reconsume_times, bytes(msg.body), req.born_host or msg.born_host)

    def reply(self, producer_group: str, topic: str, default_topic: str,
              default_topic_queue_nums: int, queue_id: int, sys_flag: int, born_timestamp: int,
              flag: int, properties: str, reconsume_times: int, body: bytes,
              born_host: str | None) -> Future:
        broker = self.broker
        err, tc = broker.send_processor._check_send(topic, producer_group, queue_id,
                                                    default_topic, default_topic_queue_nums,
                                                    born_host)
        if err is not None:
            return _done(err)
        if queue_id < 0:
            queue_id = _random_queue_id(tc.write_queue_nums)
        props = parse_properties(properties.encode("utf-8"))
        if not _BROKER_ONLY.isdisjoint(props):
            name = sorted(_BROKER_ONLY.intersection(props))[0]
            return _done(SendMessageResponse(
                ResponseCode.MESSAGE_ILLEGAL, f"the message property {name} is set only by the "
                f"broker; a reply may not carry it (topic {topic})"))
        born_host = born_host or "127.0.0.1:0"
        push_req = ReplyMessageRequest(
            producer_group, topic, default_topic, default_topic_queue_nums, queue_id, sys_flag,
            born_timestamp, flag, properties, reconsume_times, False, born_host,
            broker.store_host, now_ms(), body)
        pushed = self._push(push_req, props)
        stored: Future | None = None
        if broker.config.store_reply_message_enable:
            stored = self._store(push_req, props, queue_id)
        return self._answer(pushed, stored, queue_id)

    def _push(self, req: ReplyMessageRequest, props: dict[str, str]) -> Future:
        """A Future of ``RemotingResult``: did the requester take the reply."""
        sender = props.get(C.PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if sender is None:
            log.warning("%s is null, can not reply message", C.PROPERTY_MESSAGE_REPLY_TO_CLIENT)
            return _done(RemotingResult(ResponseCode.SYSTEM_ERROR, "reply message properties["
                                        f"{C.PROPERTY_MESSAGE_REPLY_TO_CLIENT}] is null"))
        channel = self.broker.producer_manager.find_channel(sender)
        push = getattr(channel, "push_reply_message", None)
        if push is None:
            remark = f"push reply message fail, channel of <{sender}> not found."
            log.warning("%s", remark)
            return _done(RemotingResult(ResponseCode.SYSTEM_ERROR, remark))
        pushed_props = dict(props)
        pushed_props[C.PROPERTY_PUSH_REPLY_TIME] = str(now_ms())
        req = dataclasses.replace(req, properties=encode_properties(pushed_props).decode("utf-8"))
        out: Future = Future()

        def answered(f: Future) -> None:
            exc = f.exception()
            r = f.result() if exc is None else None
            if r is not None and r.code == ResponseCode.SUCCESS:
                complete(out, r)
                return
            why = exc if exc is not None else f"{r.code} {r.remark}"    # type: ignore[union-attr]
            log.warning("push reply message to <%s> failed: %s", sender, why)
            # 4.9.8's remark, its missing space included
            complete(out, RemotingResult(ResponseCode.SYSTEM_ERROR,
                                         f"push reply message to {sender}fail."))
        try:
            fut = push(req)
        except Exception as e:          # noqa: BLE001 - a client's fault is the push's failure
            fut = Future()
            fut.set_exception(e)
        fut.add_done_callback(answered)
        return out

    def _store(self, req: ReplyMessageRequest, props: dict[str, str], queue_id: int
               ) -> Future | None:
        """The reply put into its topic as sent; a Future of the ``PutMessageResult``, or None
        when it was refused before the put (logged)."""
        wait = props.get(C.PROPERTY_WAIT_STORE_MSG_OK)
        try:
            m = Message.from_properties_string(
                req.topic, req.body, req.properties,
                wait=wait is None or wait.lower() == "true", flag=req.flag,
                sys_flag=req.sys_flag, reconsume_times=req.reconsume_times,
                born_timestamp=req.born_timestamp, born_host=req.born_host)
            return self.broker.store.put_message_async(m, queue_id)
        except InvalidMessageError as e:
            log.warning("reply to %s not stored: %s", req.topic, e)
            return None

    def _answer(self, pushed: Future, stored: Future | None, queue_id: int) -> Future:
        """Both done -> the response: the push's code, the stored reply's ids."""
        out: Future = Future()
        lock = threading.Lock()
        waiting = [2 if stored is not None else 1]

        def finish() -> None:
            push = pushed.result()
            if push.code != ResponseCode.SUCCESS:
                resp = SendMessageResponse(ResponseCode.SYSTEM_ERROR, push.remark)
            else:
                resp = SendMessageResponse(ResponseCode.SUCCESS, None, msg_id="0",
                                           queue_id=queue_id, queue_offset=0)
            put = _put_result(stored)
            if put is not None:
                if put.status in _STORED:
                    resp.msg_id, resp.queue_id = put.msg_id, queue_id
                    resp.queue_offset = put.queue_offset
                else:
                    log.warning("reply not stored: %s", put.status)
            complete(out, resp)

        def one_done(_f: Future) -> None:
            with lock:
                waiting[0] -= 1
                last = waiting[0] == 0
            if last:
                try:
                    finish()
                except BaseException as e:  # noqa: BLE001 - handed to the waiter
                    complete(out, error=e)
        pushed.add_done_callback(one_done)
        if stored is not None:
            stored.add_done_callback(one_done)
        return out


def _put_result(stored: Future | None) -> PutMessageResult | None:
    if stored is None:
        return None
    exc = stored.exception()
    if exc is not None:
        log.warning("reply not stored: %s", exc)
        return None
    return stored.result()
