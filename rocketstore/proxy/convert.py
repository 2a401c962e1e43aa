"""gRPC ``Message`` <-> RocketMQ 4.x stored message (docs/grpc.md "Messages").

A 5.x message is stored as a 4.x one with 4.x property names, so a 4.x consumer reads what a
5.x producer sent and the reverse: ``message_id`` is ``UNIQ_KEY``, ``message_group`` is
``__SHARDINGKEY``, ``delivery_timestamp`` is ``TIMER_DELIVER_MS``, keys are ``KEYS`` joined by
spaces, user properties are plain properties.
"""
from __future__ import annotations

import hashlib
from typing import Any

from rocketstore.common import Message, MessageExt
from rocketstore.proxy import protocol as pb

# MessageConst's reserved property names: never user properties (in either direction)
RESERVED = frozenset((
    "TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP "
    "MIN_OFFSET MAX_OFFSET BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG "
    "RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET "
    "1ST_POP_TIME TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID CORRELATION_ID "
    "REPLY_TO_CLIENT TTL ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE INNER_MULTI_QUEUE_OFFSET "
    "TIMER_DELAY_MS TIMER_DELAY_SEC TIMER_DELIVER_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS "
    "TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY TIMER_DELAY_LEVEL __BORNHOST BORN_TIMESTAMP "
    "DLQ_ORIGIN_TOPIC DLQ_ORIGIN_MESSAGE_ID __CRC32#").split())
# stored, but not shown to a 5.x consumer as user properties either
_INTERNAL = frozenset(("__SHARDINGKEY", "TRACE_CONTEXT", "CLUSTER"))

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4

NORMAL = pb.enum_value("MessageType", "NORMAL")
FIFO = pb.enum_value("MessageType", "FIFO")
DELAY = pb.enum_value("MessageType", "DELAY")
TRANSACTION = pb.enum_value("MessageType", "TRANSACTION")
GZIP = pb.enum_value("Encoding", "GZIP")
IDENTITY = pb.enum_value("Encoding", "IDENTITY")
MD5 = pb.enum_value("DigestType", "MD5")


def _ms(ts: Any) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _set_ms(ts: Any, ms: int) -> None:
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def to_stored(m: Any, peer: str) -> tuple[Message, int]:
    """A gRPC message -> (4.x ``Message`` ready to send, deliver time ms or 0)."""
    sp = m.system_properties
    props = dict(m.user_properties)
    if sp.HasField("tag") and sp.tag:
        props["TAGS"] = sp.tag
    if sp.keys:
        props["KEYS"] = " ".join(sp.keys)
    props["UNIQ_KEY"] = sp.message_id
    topic = m.topic.name
    props["PGROUP"] = topic
    sys_flag = 0
    if sp.message_type == TRANSACTION:
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED
        props["TRAN_MSG"] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(
                max(1, sp.orphaned_transaction_recovery_duration.seconds))
    deliver_ms = 0
    if sp.HasField("delivery_timestamp"):
        deliver_ms = _ms(sp.delivery_timestamp)
        props["TIMER_DELIVER_MS"] = str(deliver_ms)
    if sp.HasField("message_group") and sp.message_group:
        props["__SHARDINGKEY"] = sp.message_group
    if sp.HasField("trace_context") and sp.trace_context:
        props["TRACE_CONTEXT"] = sp.trace_context
    props["__BORNHOST"] = sp.born_host or peer
    born = _ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    if born > 0:
        props["BORN_TIMESTAMP"] = str(born)
    if sp.body_encoding == GZIP:
        sys_flag |= SYSFLAG_COMPRESSED
    msg = Message(topic, m.body, properties=props, sys_flag=sys_flag,
                  born_timestamp=born or None)
    return msg, deliver_ms


def message_type_of(props: dict[str, str]) -> int:
    """The 5.x type a stored message reads as (from its properties, never the client's word)."""
    if props.get("TRAN_MSG") == "true":
        return TRANSACTION
    if "DELAY" in props or "TIMER_DELIVER_MS" in props or "TIMER_DELAY_SEC" in props:
        return DELAY
    if "__SHARDINGKEY" in props:
        return FIFO
    return NORMAL


def to_grpc(ext: MessageExt, out: Any, *, topic: str | None = None) -> Any:
    """A stored message -> a gRPC ``Message`` (``out``); the caller adds the handle and attempt."""
    props = ext.properties
    out.topic.name = topic or ext.topic
    for k, v in props.items():
        if k not in RESERVED and k not in _INTERNAL:
            out.user_properties[k] = v
    sp = out.system_properties
    if props.get("TAGS"):
        sp.tag = props["TAGS"]
    if props.get("KEYS"):
        sp.keys.extend(k for k in props["KEYS"].split(" ") if k)
    sp.message_id = props.get("UNIQ_KEY") or ext.msg_id
    body = bytes(ext.stored_body)
    sp.body_digest.type = MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = GZIP if ext.sys_flag & SYSFLAG_COMPRESSED else IDENTITY
    sp.message_type = message_type_of(props)
    _set_ms(sp.born_timestamp, ext.born_timestamp)
    sp.born_host = props.get("__BORNHOST") or ext.born_host
    _set_ms(sp.store_timestamp, ext.store_timestamp)
    sp.store_host = ext.store_host
    if props.get("TIMER_DELIVER_MS", "").isdigit():
        _set_ms(sp.delivery_timestamp, int(props["TIMER_DELIVER_MS"]))
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
    if props.get("TRACE_CONTEXT"):
        sp.trace_context = props["TRACE_CONTEXT"]
    sp.queue_id = ext.queue_id
    sp.queue_offset = ext.queue_offset
    if props.get("DLQ_ORIGIN_TOPIC") and props.get("DLQ_ORIGIN_MESSAGE_ID"):
        sp.dead_letter_queue.topic = props["DLQ_ORIGIN_TOPIC"]
        sp.dead_letter_queue.message_id = props["DLQ_ORIGIN_MESSAGE_ID"]
    out.body = body
    return out
