"""Custom headers and bodies of the messaging request codes <-> ``rocketstore.common.protocol``.

One function per direction and code, used by the broker server (decode requests, encode
responses) and the TCP transport (the reverse). Field names are RocketMQ's
(docs/protocol.md §2): SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry one-letter names that map
by position onto SEND_MESSAGE's long ones. Bodies are JSON in the shapes both the Java and the
C++ client write (the C++ heartbeat sends enum ordinals and string numbers).
"""
from __future__ import annotations

import struct
from typing import Any

from rocketstore.common.protocol import (ConsumeFromWhere, ConsumerData, ConsumerSendMsgBackRequest,
                                         ConsumeType, EndTransactionRequest, HeartbeatData,
                                         MessageModel, MessageQueue, PullMessageRequest,
                                         PullMessageResponse, SendMessageRequest,
                                         SendMessageResponse, SubscriptionData,
                                         TransactionCommitType)
from rocketstore.common import Message, names
from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting import fastjson
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.store._codec import java_hash

# SendMessageRequestHeaderV2's one-letter names, in SendMessageRequestHeader's field order
SEND_V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic",
                 "d": "defaultTopicQueueNums", "e": "queueId", "f": "sysFlag",
                 "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
                 "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname"}
SEND_V1_NAMES = {v: k for k, v in SEND_V2_NAMES.items()}

MSG_REGION = "DefaultRegion"
_BATCH_ENTRY = struct.Struct(">iiiii")     # total size, magic, body crc, flag, body length

# C++ heartbeats send these enums as ordinals (docs/protocol.md §2.7)
_CONSUME_TYPE = {0: ConsumeType.CONSUME_ACTIVELY, 1: ConsumeType.CONSUME_PASSIVELY}
_MESSAGE_MODEL = {0: MessageModel.BROADCASTING, 1: MessageModel.CLUSTERING}
_FROM_WHERE = {0: ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
               1: ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,   # ..._AND_FROM_MIN_WHEN_BOOT_FIRST
               2: ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,   # MIN_OFFSET (deprecated)
               3: ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,   # MAX_OFFSET (deprecated)
               4: ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
               5: ConsumeFromWhere.CONSUME_FROM_TIMESTAMP}
_DEPRECATED_FROM = {"CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST", "CONSUME_FROM_MIN_OFFSET",
                    "CONSUME_FROM_MAX_OFFSET"}


def _enum(value: Any, by_ordinal: dict[int, Any], cls: Any, what: str) -> Any:
    if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        try:
            return by_ordinal[int(value)]
        except KeyError:
            raise RemotingProtocolError(f"{what}: unknown ordinal {value}") from None
    if cls is ConsumeFromWhere and value in _DEPRECATED_FROM:
        return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    try:
        return cls(value)
    except ValueError:
        raise RemotingProtocolError(f"{what}: unknown value {value!r}") from None


def _int(v: Any, what: str, default: int = 0) -> int:
    if v is None or v == "":
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise RemotingProtocolError(f"{what}: not a number: {v!r}") from None


# -- send -----------------------------------------------------------------------------------

def send_fields(cmd: RemotingCommand) -> dict[str, str]:
    """The send header with long names whatever the code (V2 letters mapped by position)."""
    if cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return {SEND_V2_NAMES.get(k, k): v for k, v in cmd.ext_fields.items() if v is not None}
    return {k: v for k, v in cmd.ext_fields.items() if v is not None}


def decode_batch_body(body: bytes, topic: str, *, born_timestamp: int, born_host: str | None,
                      extra_properties: str = "") -> list[Message]:
    """``MessageDecoder.encodeMessages``' body -> one ``Message`` per entry. 4.9.x appends the
    batch's own properties (e.g. ``WAIT``) to each entry's."""
    out: list[Message] = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < _BATCH_ENTRY.size + 2:
            raise RemotingProtocolError(f"batch body: truncated entry at byte {pos}")
        total, _magic, _crc, flag, blen = _BATCH_ENTRY.unpack_from(body, pos)
        if total < _BATCH_ENTRY.size + 2 or pos + total > n or blen < 0 or \
                _BATCH_ENTRY.size + blen + 2 > total:
            raise RemotingProtocolError(f"batch body: bad entry size {total} at byte {pos}")
        b0 = pos + _BATCH_ENTRY.size
        msg_body = body[b0:b0 + blen]
        (plen,) = struct.unpack_from(">h", body, b0 + blen)
        p0 = b0 + blen + 2
        if plen < 0 or p0 + plen > pos + total:
            raise RemotingProtocolError(f"batch body: bad properties length at byte {pos}")
        props = body[p0:p0 + plen].decode("utf-8")
        if extra_properties:
            props = props + ("" if not props or props.endswith("\x02") else "\x02") + extra_properties
        out.append(Message.from_properties_string(topic, msg_body, props, flag=flag,
                                                  born_timestamp=born_timestamp,
                                                  born_host=born_host))
        pos += total
    if not out:
        raise RemotingProtocolError("batch body holds no message")
    return out


def encode_batch_body(msgs: list[tuple[bytes, int, str]]) -> bytes:
    """(body, flag, properties string) per message -> a SEND_BATCH_MESSAGE body."""
    parts = []
    for body, flag, props in msgs:
        pb = props.encode("utf-8")
        parts.append(_BATCH_ENTRY.pack(20 + len(body) + 2 + len(pb), 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(struct.pack(">h", len(pb)))
        parts.append(pb)
    return b"".join(parts)


def decode_send(cmd: RemotingCommand, born_host: str | None) -> SendMessageRequest:
    f = send_fields(cmd)
    for req in ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                "sysFlag", "bornTimestamp", "flag"):
        if req not in f:
            raise RemotingProtocolError(f"the custom field <{req}> is null")
    topic = f["topic"]
    born_ts = _int(f["bornTimestamp"], "bornTimestamp")
    props = f.get("properties", "")
    # Boolean.parseBoolean: the C++ client's "1" is false, so its batches arrive as one message
    batch = f.get("batch", "").lower() == "true"
    if batch:
        msgs = decode_batch_body(bytes(cmd.body), topic, born_timestamp=born_ts,
                                 born_host=born_host, extra_properties=props)
    else:
        msgs = [Message.from_properties_string(
            topic, bytes(cmd.body), props, flag=_int(f["flag"], "flag"),
            sys_flag=_int(f["sysFlag"], "sysFlag"),
            reconsume_times=_int(f.get("reconsumeTimes"), "reconsumeTimes"),
            born_timestamp=born_ts, born_host=born_host)]
    max_rt = f.get("maxReconsumeTimes")
    return SendMessageRequest(
        producer_group=f["producerGroup"], topic=topic, queue_id=_int(f["queueId"], "queueId"),
        messages=msgs, batch=batch, default_topic=f["defaultTopic"],
        default_topic_queue_nums=_int(f["defaultTopicQueueNums"], "defaultTopicQueueNums", 4),
        reconsume_times=_int(f.get("reconsumeTimes"), "reconsumeTimes"),
        max_reconsume_times=(None if max_rt in (None, "") or cmd.version < 121
                             else _int(max_rt, "maxReconsumeTimes")),
        born_host=born_host)


def encode_send_response(cmd: RemotingCommand, r: SendMessageResponse) -> RemotingCommand:
    # extFields always present: the Java client reads MSG_REGION without a null check and the
    # C++ client dereferences the header (docs/protocol.md §2.1.2)
    ext: dict[str, Any] = {"MSG_REGION": MSG_REGION, "TRACE_ON": "true"}
    if r.msg_id is not None:
        ext.update(msgId=r.msg_id, queueId=r.queue_id, queueOffset=r.queue_offset)
    if r.transaction_id is not None:
        ext["transactionId"] = r.transaction_id
    return cmd.response(int(r.code), r.remark, ext)


# -- pull -----------------------------------------------------------------------------------

def decode_pull(cmd: RemotingCommand) -> PullMessageRequest:
    sys_flag = cmd.int_field("sysFlag", required=True)
    return PullMessageRequest(
        consumer_group=cmd.require("consumerGroup"), topic=cmd.require("topic"),
        queue_id=cmd.int_field("queueId", required=True),
        queue_offset=cmd.int_field("queueOffset", required=True),
        max_msg_nums=cmd.int_field("maxMsgNums", required=True),
        sys_flag=sys_flag, commit_offset=cmd.int_field("commitOffset", required=True),
        suspend_timeout_millis=cmd.int_field("suspendTimeoutMillis", required=True),
        subscription=cmd.field("subscription"), sub_version=cmd.int_field("subVersion"),
        expression_type=cmd.field("expressionType") or "TAG")


def encode_pull_response(cmd: RemotingCommand, r: PullMessageResponse) -> RemotingCommand:
    body = b"".join(m.record() for m in r.messages) if r.messages else None
    return cmd.response(int(r.code), r.remark, {
        "suggestWhichBrokerId": r.suggest_which_broker_id, "nextBeginOffset": r.next_begin_offset,
        "minOffset": r.min_offset, "maxOffset": r.max_offset}, body)


# -- heartbeat, membership, locks -----------------------------------------------------------

def _subscription(d: dict[str, Any]) -> SubscriptionData:
    sub = str(d.get("subString") or "*")
    tags = frozenset(str(t) for t in d.get("tagsSet") or ())
    # codes from the tags, never the client's codeSet: C++ sends atoi(tag) there
    topic = _name(names.topic_problem, d["topic"], "subscriptionDataSet.topic")
    return SubscriptionData(topic=topic, sub_string=sub, tags_set=tags,
                            code_set=frozenset(java_hash(t) for t in tags),
                            sub_version=_int(d.get("subVersion"), "subVersion"),
                            expression_type=str(d.get("expressionType") or "TAG"))


def _name(problem: Any, value: Any, what: str) -> str:
    """``value`` as a str when ``problem`` (a ``rocketstore.common.names`` check) passes it."""
    why = problem(value)
    if why is not None:
        raise RemotingProtocolError(names.named(what, value, why))
    return value


def decode_heartbeat(body: bytes) -> HeartbeatData:
    doc = fastjson.loads(body)
    if not isinstance(doc, dict) or "clientID" not in doc:
        raise RemotingProtocolError("heartbeat body without clientID")
    consumers = []
    for c in doc.get("consumerDataSet") or ():
        consumers.append(ConsumerData(
            group_name=_name(names.group_problem, c["groupName"], "consumerDataSet.groupName"),
            consume_type=_enum(c.get("consumeType", "CONSUME_PASSIVELY"), _CONSUME_TYPE,
                               ConsumeType, "consumeType"),
            message_model=_enum(c.get("messageModel", "CLUSTERING"), _MESSAGE_MODEL,
                                MessageModel, "messageModel"),
            consume_from_where=_enum(c.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET"),
                                     _FROM_WHERE, ConsumeFromWhere, "consumeFromWhere"),
            subscriptions=[_subscription(s) for s in c.get("subscriptionDataSet") or ()],
            unit_mode=bool(c.get("unitMode", False))))
    producers = [_name(names.group_problem, p["groupName"], "producerDataSet.groupName")
                 for p in doc.get("producerDataSet") or ()]
    return HeartbeatData(client_id=str(doc["clientID"]), producer_groups=producers,
                         consumers=consumers)


def encode_heartbeat(data: HeartbeatData) -> bytes:
    """A HeartbeatData body as the Java client writes it."""
    return fastjson.dumps({
        "clientID": data.client_id,
        "consumerDataSet": [{
            "consumeFromWhere": c.consume_from_where.value, "consumeType": c.consume_type.value,
            "groupName": c.group_name, "messageModel": c.message_model.value,
            "subscriptionDataSet": [{
                "classFilterMode": False, "codeSet": sorted(s.code_set),
                "expressionType": s.expression_type, "subString": s.sub_string,
                "subVersion": s.sub_version, "tagsSet": sorted(s.tags_set), "topic": s.topic}
                for s in c.subscriptions],
            "unitMode": c.unit_mode} for c in data.consumers],
        "producerDataSet": [{"groupName": g} for g in data.producer_groups]}).encode()


def _mq(d: dict[str, Any]) -> MessageQueue:
    return MessageQueue(_name(names.topic_problem, d["topic"], "mqSet.topic"), str(d["brokerName"]),
                        _int(d["queueId"], "queueId"))


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def decode_lock_body(body: bytes) -> tuple[str, str, set[MessageQueue]]:
    doc = fastjson.loads(body)
    try:
        group = _name(names.group_problem, doc["consumerGroup"], "consumerGroup")
        return group, str(doc["clientId"]), {_mq(m) for m in doc.get("mqSet") or ()}
    except (KeyError, TypeError) as e:
        raise RemotingProtocolError(f"lock body: missing {e}") from None


def encode_mq_set(key: str, mqs: set[MessageQueue]) -> bytes:
    return fastjson.dumps({key: [mq_json(m) for m in sorted(mqs)]}).encode()


# -- send back, transactions ---------------------------------------------------------------

def decode_send_back(cmd: RemotingCommand) -> ConsumerSendMsgBackRequest:
    max_rt = cmd.field("maxReconsumeTimes")
    return ConsumerSendMsgBackRequest(
        group=cmd.require("group"), offset=cmd.int_field("offset", required=True),
        delay_level=cmd.int_field("delayLevel", required=True),
        origin_msg_id=cmd.field("originMsgId"), origin_topic=cmd.field("originTopic"),
        # a client older than V3_4_9 (C++ 1.2.x sends none anyway): the group's retryMaxTimes
        max_reconsume_times=(None if max_rt in (None, "") or cmd.version < 121
                             else _int(max_rt, "maxReconsumeTimes")),
        unit_mode=cmd.bool_field("unitMode"))


def decode_end_transaction(cmd: RemotingCommand) -> EndTransactionRequest:
    kind = cmd.int_field("commitOrRollback", required=True)
    try:
        commit = TransactionCommitType(kind)
    except ValueError:
        raise RemotingProtocolError(f"commitOrRollback: unknown value {kind}") from None
    return EndTransactionRequest(
        producer_group=cmd.require("producerGroup"),
        tran_state_table_offset=cmd.int_field("tranStateTableOffset", required=True),
        commit_log_offset=cmd.int_field("commitLogOffset", required=True),
        commit_or_rollback=commit, from_transaction_check=cmd.bool_field("fromTransactionCheck"),
        msg_id=cmd.field("msgId"), transaction_id=cmd.field("transactionId"))

