"""Custom headers and bodies of the messaging request codes <-> ``rocketstore.common.protocol``.

One function per direction and code, used by the broker server (decode requests, encode
responses) and the TCP transport (the reverse). Field names are RocketMQ's
(docs/protocol.md §2): SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry one-letter names that map
by position onto SEND_MESSAGE's long ones. Bodies are JSON in the shapes both the Java and the
C++ client write (the C++ heartbeat sends enum ordinals and string numbers).
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple

from rocketstore.common.protocol import (ConsumeFromWhere, ConsumerData, ConsumerSendMsgBackRequest,
                                         ConsumeType, EndTransactionRequest, HeartbeatData,
                                         MessageModel, MessageQueue, PullMessageRequest,
                                         PullMessageResponse, ReplyMessageRequest,
                                         SendMessageRequest,
                                         SendMessageResponse, SubscriptionData,
                                         TransactionCommitType)
from rocketstore.common import Message, names
from rocketstore.common.sends import (BATCH_ENTRY as _BATCH_ENTRY, WireSend, decode_batch_body,
                                      send_request)
from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting import fastjson
from rocketstore.common.codes import RequestCode
from rocketstore.common.codes import CURRENT_VERSION
from rocketstore.remoting._wire import send_header, send_ok_header
from rocketstore.remoting.command import LONG_MAX, LONG_MIN, EncodedResponse, RemotingCommand
from rocketstore.store._codec import java_hash
from rocketstore.remoting.zerocopy import RecordBody

# SendMessageRequestHeaderV2's one-letter names, in SendMessageRequestHeader's field order
SEND_V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic",
                 "d": "defaultTopicQueueNums", "e": "queueId", "f": "sysFlag",
                 "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
                 "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname"}
SEND_V1_NAMES = {v: k for k, v in SEND_V2_NAMES.items()}

MSG_REGION = "DefaultRegion"

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
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        raise RemotingProtocolError(f"{what}: not a number: {str(v)[:64]!r}") from None
    if not LONG_MIN <= n <= LONG_MAX:
        raise RemotingProtocolError(f"{what}: {str(v)[:64]} is outside Java's long range")
    return n


# -- send -----------------------------------------------------------------------------------

class _SendKeys(NamedTuple):
    """The wire names of a send header's fields (long for SEND_MESSAGE, letters for V2)."""

    producerGroup: str
    topic: str
    defaultTopic: str
    defaultTopicQueueNums: str
    queueId: str
    sysFlag: str
    bornTimestamp: str
    flag: str
    properties: str
    reconsumeTimes: str
    unitMode: str
    maxReconsumeTimes: str
    batch: str
    bname: str


_V1_KEYS = _SendKeys(*SEND_V2_NAMES.values())
_V2_KEYS = _SendKeys(*SEND_V2_NAMES.keys())
_V1_REQUIRED = _V1_KEYS[:8]
_V2_REQUIRED = _V2_KEYS[:8]


# codes whose header is SendMessageRequestHeader (long names); 310, 320 and 325 send V2's letters
_V1_CODES = frozenset({int(RequestCode.SEND_MESSAGE), int(RequestCode.SEND_REPLY_MESSAGE)})


def send_keys(code: int) -> _SendKeys:
    """The field names a send of ``code`` is read from: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
    only from their one-letter names, as 4.9.8's ``SendMessageRequestHeaderV2`` decodes them
    (a long-named field in such a header is ignored, so nothing can override what the ACL and
    the handler both read)."""
    return _V1_KEYS if code in _V1_CODES else _V2_KEYS


def send_required(code: int) -> tuple[str, ...]:
    """The header fields a send of ``code`` must carry (``decode_send_wire``'s rule)."""
    return _V1_REQUIRED if code in _V1_CODES else _V2_REQUIRED


def send_fields(cmd: RemotingCommand) -> dict[str, str]:
    """The send header as long names whatever the code (V2 read from its letters only)."""
    ext = cmd.ext_fields
    keys = send_keys(cmd.code)
    return {long: ext[k] for long, k in zip(_V1_KEYS, keys) if ext.get(k) is not None}


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


def decode_send_wire(cmd: RemotingCommand, born_host: str | None) -> WireSend:
    """A send request's header fields (V2 and batch from their one-letter names only),
    checked: a missing required field or a number that does not parse raises
    ``RemotingProtocolError``. The body and the properties are not looked into here."""
    ext = cmd.ext_fields
    v2 = cmd.code not in _V1_CODES
    k = _V2_KEYS if v2 else _V1_KEYS
    body = cmd.body
    fast = send_header(ext, k, _V2_REQUIRED if v2 else _V1_REQUIRED, cmd.version)
    if fast is not None:        # the common shape, read in C; anything else as below
        return WireSend(*fast, body if type(body) is bytes else bytes(body), born_host)
    for name in (_V2_REQUIRED if v2 else _V1_REQUIRED):
        if ext.get(name) is None:
            raise RemotingProtocolError(f"the custom field <{name}> is null")
    born_ts = _int(ext[k.bornTimestamp], "bornTimestamp")
    # Boolean.parseBoolean: the C++ client's "1" is false, so its batches arrive as one message
    batch = (ext.get(k.batch) or "").lower() == "true"
    reconsume = _int(ext.get(k.reconsumeTimes), "reconsumeTimes")
    if batch:
        flag = sys_flag = 0         # per entry in the body; the header's are not read
    else:
        flag = _int(ext[k.flag], "flag")
        sys_flag = _int(ext[k.sysFlag], "sysFlag")
    queue_id = _int(ext[k.queueId], "queueId")
    dtqn = _int(ext[k.defaultTopicQueueNums], "defaultTopicQueueNums", 4)
    max_rt = ext.get(k.maxReconsumeTimes)
    return WireSend(ext[k.producerGroup], ext[k.topic], ext[k.defaultTopic], dtqn, queue_id,
                    sys_flag, born_ts, flag, ext.get(k.properties) or "", reconsume,
                    None if max_rt in (None, "") or cmd.version < 121
                    else _int(max_rt, "maxReconsumeTimes"),
                    batch, body if type(body) is bytes else bytes(body), born_host)


def decode_send(cmd: RemotingCommand, born_host: str | None) -> SendMessageRequest:
    """A SEND_MESSAGE(_V2)/SEND_BATCH_MESSAGE request as a ``SendMessageRequest``."""
    return send_request(decode_send_wire(cmd, born_host))


# A stored send's answer, the JSON ``RemotingCommand.response(...).header_json()`` writes
# (same keys, order and text), written in C (``send_ok_header``): msgId is hex (comma-joined
# for a batch)
MSG_REGION_B = MSG_REGION.encode()


def encode_stored(cmd: RemotingCommand, code: int, msg_id: str, queue_id: int,
                  queue_offset: int) -> EncodedResponse:
    """The answer to a send whose message was stored (its id, queue and offset)."""
    return EncodedResponse(code, cmd.opaque, send_ok_header(
        code, msg_id, queue_id, queue_offset, cmd.opaque, MSG_REGION_B, CURRENT_VERSION))


def encode_send_response(cmd: RemotingCommand, r: SendMessageResponse
                         ) -> RemotingCommand | EncodedResponse:
    if r.msg_id is not None and r.remark is None and r.transaction_id is None:
        return encode_stored(cmd, int(r.code), r.msg_id, r.queue_id, r.queue_offset)
    # extFields always present: the Java client reads MSG_REGION without a null check and the
    # C++ client dereferences the header (docs/protocol.md §2.1.2)
    ext: dict[str, Any] = {"MSG_REGION": MSG_REGION, "TRACE_ON": "true"}
    if r.msg_id is not None:
        ext.update(msgId=r.msg_id, queueId=r.queue_id, queueOffset=r.queue_offset)
    if r.transaction_id is not None:
        ext["transactionId"] = r.transaction_id
    return cmd.response(int(r.code), r.remark, ext)


# -- request-reply ----------------------------------------------------------------------------

def encode_reply_header(r: ReplyMessageRequest) -> dict[str, Any]:
    """PUSH_REPLY_MESSAGE_TO_CLIENT's ``ReplyMessageRequestHeader`` fields."""
    return {"producerGroup": r.producer_group, "topic": r.topic,
            "defaultTopic": r.default_topic, "defaultTopicQueueNums": r.default_topic_queue_nums,
            "queueId": r.queue_id, "sysFlag": r.sys_flag, "bornTimestamp": r.born_timestamp,
            "flag": r.flag, "properties": r.properties, "reconsumeTimes": r.reconsume_times,
            "unitMode": r.unit_mode, "bornHost": r.born_host, "storeHost": r.store_host,
            "storeTimestamp": r.store_timestamp}


def decode_reply_header(cmd: RemotingCommand) -> ReplyMessageRequest:
    """A PUSH_REPLY_MESSAGE_TO_CLIENT as the requester reads it (RemotingProtocolError when a
    required field is missing or not a number)."""
    for name in ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                 "sysFlag", "bornTimestamp", "flag", "bornHost", "storeHost", "storeTimestamp"):
        cmd.require(name)
    f = cmd.field
    return ReplyMessageRequest(
        f("producerGroup") or "", f("topic") or "", f("defaultTopic") or "",
        _int(f("defaultTopicQueueNums"), "defaultTopicQueueNums", 4),
        _int(f("queueId"), "queueId"), _int(f("sysFlag"), "sysFlag"),
        _int(f("bornTimestamp"), "bornTimestamp"), _int(f("flag"), "flag"),
        f("properties") or "", _int(f("reconsumeTimes"), "reconsumeTimes"),
        (f("unitMode") or "").lower() == "true", f("bornHost") or "", f("storeHost") or "",
        _int(f("storeTimestamp"), "storeTimestamp"), bytes(cmd.body))


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
    # the stored records as views of the mapped commit log: written from there, no copy
    body = RecordBody.of(r.messages) if r.messages else None
    return cmd.response(int(r.code), r.remark, {
        "suggestWhichBrokerId": r.suggest_which_broker_id, "nextBeginOffset": r.next_begin_offset,
        "minOffset": r.min_offset, "maxOffset": r.max_offset}, body)


def encode_pull_found(cmd: RemotingCommand, found: Any) -> RemotingCommand:
    """``encode_pull_response`` of a pull lane's ``PullFound`` (SUCCESS from the master:
    suggestWhichBrokerId 0)."""
    return cmd.response(0, None, {
        "suggestWhichBrokerId": 0, "nextBeginOffset": found.next_begin_offset,
        "minOffset": found.min_offset, "maxOffset": found.max_offset},
        RecordBody.of(found.messages))


# -- heartbeat, membership, locks -----------------------------------------------------------

def _obj(v: Any, what: str) -> dict[Any, Any]:
    if not isinstance(v, dict):
        raise RemotingProtocolError(f"{what} is not a JSON object")
    return v


def _list(v: Any, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise RemotingProtocolError(f"{what} is not a JSON array")
    return v


def _name(d: dict[Any, Any], key: str, what: str) -> str:
    v = d.get(key)
    if not isinstance(v, (str, int)) or isinstance(v, bool):
        raise RemotingProtocolError(f"{what}: {key} missing or not text")
    return str(v)


def _valid(problem: Any, value: str, what: str) -> str:
    """``value`` when ``problem`` (a ``rocketstore.common.names`` check) passes it."""
    why = problem(value)
    if why is not None:
        raise RemotingProtocolError(names.named(what, value, why))
    return value


def _subscription(d: dict[str, Any]) -> SubscriptionData:
    d = _obj(d, "subscriptionDataSet entry")
    sub = str(d.get("subString") or "*")
    tags = frozenset(str(t) for t in _list(d.get("tagsSet"), "tagsSet"))
    # codes from the tags, never the client's codeSet: C++ sends atoi(tag) there
    topic = _valid(names.topic_problem, _name(d, "topic", "subscriptionDataSet entry"),
                   "subscriptionDataSet.topic")
    return SubscriptionData(topic=topic, sub_string=sub, tags_set=tags,
                            code_set=frozenset(java_hash(t) for t in tags),
                            sub_version=_int(d.get("subVersion"), "subVersion"),
                            expression_type=str(d.get("expressionType") or "TAG"))


def decode_heartbeat(body: bytes) -> HeartbeatData:
    doc = fastjson.loads(body)
    if not isinstance(doc, dict) or "clientID" not in doc:
        raise RemotingProtocolError("heartbeat body without clientID")
    consumers = []
    for c in _list(doc.get("consumerDataSet"), "consumerDataSet"):
        c = _obj(c, "consumerDataSet entry")
        consumers.append(ConsumerData(
            group_name=_valid(names.group_problem, _name(c, "groupName", "consumerDataSet entry"),
                              "consumerDataSet.groupName"),
            consume_type=_enum(c.get("consumeType", "CONSUME_PASSIVELY"), _CONSUME_TYPE,
                               ConsumeType, "consumeType"),
            message_model=_enum(c.get("messageModel", "CLUSTERING"), _MESSAGE_MODEL,
                                MessageModel, "messageModel"),
            consume_from_where=_enum(c.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET"),
                                     _FROM_WHERE, ConsumeFromWhere, "consumeFromWhere"),
            subscriptions=[_subscription(s) for s in _list(c.get("subscriptionDataSet"),
                                                           "subscriptionDataSet")],
            unit_mode=bool(c.get("unitMode", False))))
    producers = [_valid(names.group_problem,
                        _name(_obj(p, "producerDataSet entry"), "groupName", "producerDataSet entry"),
                        "producerDataSet.groupName")
                 for p in _list(doc.get("producerDataSet"), "producerDataSet")]
    return HeartbeatData(client_id=_name(doc, "clientID", "heartbeat"), producer_groups=producers,
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
    d = _obj(d, "mqSet entry")
    topic = _valid(names.topic_problem, _name(d, "topic", "mqSet entry"), "mqSet.topic")
    return MessageQueue(topic, _name(d, "brokerName", "mqSet entry"),
                        _int(d.get("queueId"), "queueId"))


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def decode_lock_body(body: bytes) -> tuple[str, str, set[MessageQueue]]:
    doc = _obj(fastjson.loads(body), "lock body")
    group = _valid(names.group_problem, _name(doc, "consumerGroup", "lock body"), "consumerGroup")
    return (group, _name(doc, "clientId", "lock body"),
            {_mq(m) for m in _list(doc.get("mqSet"), "mqSet")})


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

