"""What each broker request code asks for: decoded once, checked, then executed.

``decode(cmd, peer)`` turns a request into the object its handler executes (the
``rocketstore.common.protocol`` request, or a small named tuple of its header fields) and
``touches(code, request)`` lists the topics and groups that object names, each with the ACL
permission it needs (``0``: named, no permission needed). The broker's ACL checks exactly that
list (docs/acl.md), so what is checked is what runs: there is no second reading of the header
that could disagree with the first (a V2 send is read from its one-letter fields only).

A name validator (or anything else that must see every topic and group a request names) has
one place to stand: the touches of the decoded request.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from rocketstore.store.brokerprops import unescape
from rocketstore.errors import RemotingProtocolError, RocketStoreError
from rocketstore.remoting import fastjson, headers
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand

# ACL permission bits (rocketstore.acl.permission; repeated to keep this module free of acl)
PUB = 1 << 2
SUB = 1 << 3
RETRY_PREFIX = "%RETRY%"

TOPIC = "topic"
GROUP = "group"
Touch = tuple[str, str, int]        # (TOPIC or GROUP, name, permission needed or 0)

R = RequestCode
SEND_CODES = frozenset({int(R.SEND_MESSAGE), int(R.SEND_MESSAGE_V2), int(R.SEND_BATCH_MESSAGE)})


# -- header-only requests ------------------------------------------------------------------

class QueueRef(NamedTuple):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME."""
    topic: str
    queue_id: int


class SearchOffset(NamedTuple):
    """SEARCH_OFFSET_BY_TIMESTAMP; ``boundary`` is RocketMQ 5's ``boundaryType`` ("LOWER"
    when the client sends none, as a 4.9.8 client never does)."""
    topic: str
    queue_id: int
    timestamp: int
    boundary: str = "LOWER"


class OffsetQuery(NamedTuple):
    group: str
    topic: str
    queue_id: int


class OffsetUpdate(NamedTuple):
    group: str
    topic: str
    queue_id: int
    offset: int


class ViewMessage(NamedTuple):
    offset: int


class Unregister(NamedTuple):
    client_id: str
    producer_group: str | None
    consumer_group: str | None


class GroupRef(NamedTuple):
    """GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST."""
    group: str


class LockBatch(NamedTuple):
    group: str
    client_id: str
    mqs: set[Any]


class ClientConfigCheck(NamedTuple):
    group: str | None
    topic: str | None
    expression_type: str


class TopicRef(NamedTuple):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO."""
    topic: str


class TopicUpdate(NamedTuple):
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    filter_type: str | None
    topic_sys_flag: int
    order: bool
    attributes: str | None = None       # RocketMQ 5's "+message.type=FIFO,-key" (topic_attributes)


class ConsumeStatsQuery(NamedTuple):
    group: str
    topic: str | None
    topic_list: tuple[str, ...]


class QueryMessage(NamedTuple):
    topic: str
    key: str
    max_num: int
    begin: int
    end: int
    unique: bool


class ResetOffset(NamedTuple):
    topic: str
    group: str
    timestamp: int
    force: bool


class SubGroupUpdate(NamedTuple):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body's ``SubscriptionGroupConfig`` fields
    (fastjson names); the handler builds and checks the config."""
    group: str
    fields: dict[str, Any]


class SubGroupDelete(NamedTuple):
    group: str
    remove_offset: bool


class ProducerGroupRef(NamedTuple):
    """GET_PRODUCER_CONNECTION_LIST."""
    group: str


class RunningInfoQuery(NamedTuple):
    """GET_CONSUMER_RUNNING_INFO: relayed to the client ``client_id`` of ``group``."""
    group: str
    client_id: str


class BrokerConfigUpdate(NamedTuple):
    """UPDATE_BROKER_CONFIG: the body's properties (``name=value`` lines)."""
    properties: dict[str, str]


class StatsQuery(NamedTuple):
    """VIEW_BROKER_STATS_DATA: a stats item (``TOPIC_PUT_NUMS`` ...) and its key."""
    name: str
    key: str


class BrokerConsumeStatsQuery(NamedTuple):
    """GET_BROKER_CONSUME_STATS: ``isOrder`` keeps ordered topics only."""
    order: bool


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties text (``MixAll.string2Properties``): ``name=value`` or ``name: value``
    lines, ``#``/``!`` comments, backslash escapes in values."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        name, value = (line, "") if cut < 0 else (line[:cut].strip(), line[cut + 1:].strip())
        out[name] = unescape(value)
    return out


# -- decoders ------------------------------------------------------------------------------

def _queue_ref(cmd: RemotingCommand, peer: str) -> QueueRef:
    return QueueRef(cmd.require("topic"), cmd.int_field("queueId", required=True))


BOUNDARY_TYPES = ("LOWER", "UPPER")


def _search_offset(cmd: RemotingCommand, peer: str) -> SearchOffset:
    # RocketMQ 5's header sends its BoundaryType enum by name; 5.x reads any text but
    # "upper" as LOWER, we refuse what is neither rather than guess
    boundary = cmd.field("boundaryType")
    if boundary is None or boundary == "":
        boundary = "LOWER"
    elif boundary.upper() in BOUNDARY_TYPES:
        boundary = boundary.upper()
    else:
        raise RemotingProtocolError(f"the custom field <boundaryType> is {boundary!r}: "
                                    "expected LOWER or UPPER")
    return SearchOffset(cmd.require("topic"), cmd.int_field("queueId", required=True),
                        cmd.int_field("timestamp", required=True), boundary)


def _offset_query(cmd: RemotingCommand, peer: str) -> OffsetQuery:
    return OffsetQuery(cmd.require("consumerGroup"), cmd.require("topic"),
                       cmd.int_field("queueId", required=True))


def _offset_update(cmd: RemotingCommand, peer: str) -> OffsetUpdate:
    return OffsetUpdate(cmd.require("consumerGroup"), cmd.require("topic"),
                        cmd.int_field("queueId", required=True),
                        cmd.int_field("commitOffset", required=True))


def _view_message(cmd: RemotingCommand, peer: str) -> ViewMessage:
    return ViewMessage(cmd.int_field("offset", required=True))


def _unregister(cmd: RemotingCommand, peer: str) -> Unregister:
    # the C++ client sends "" for the group it does not use
    return Unregister(cmd.require("clientID"), cmd.field("producerGroup") or None,
                      cmd.field("consumerGroup") or None)


def _consumer_group(cmd: RemotingCommand, peer: str) -> GroupRef:
    return GroupRef(cmd.require("consumerGroup"))


def _lock_batch(cmd: RemotingCommand, peer: str) -> LockBatch:
    return LockBatch(*headers.decode_lock_body(bytes(cmd.body)))


def _client_config(cmd: RemotingCommand, peer: str) -> ClientConfigCheck:
    doc = fastjson.loads(cmd.body) if cmd.body else {}
    if not isinstance(doc, dict):
        raise RemotingProtocolError("CHECK_CLIENT_CONFIG body is not a JSON object")
    sub = doc.get("subscriptionData") or {}
    if not isinstance(sub, dict):
        raise RemotingProtocolError("subscriptionData is not a JSON object")
    group, topic = doc.get("group"), sub.get("topic")
    return ClientConfigCheck(None if group is None else str(group),
                             None if topic is None else str(topic),
                             str(sub.get("expressionType") or "TAG"))


def _topic_ref(cmd: RemotingCommand, peer: str) -> TopicRef:
    return TopicRef(cmd.require("topic"))


def _topic_update(cmd: RemotingCommand, peer: str) -> TopicUpdate:
    return TopicUpdate(cmd.require("topic"), cmd.int_field("readQueueNums", required=True),
                       cmd.int_field("writeQueueNums", required=True),
                       cmd.int_field("perm", required=True), cmd.field("topicFilterType"),
                       cmd.int_field("topicSysFlag", 0), cmd.bool_field("order"),
                       cmd.field("attributes") or None)


def _consume_stats(cmd: RemotingCommand, peer: str) -> ConsumeStatsQuery:
    return ConsumeStatsQuery(cmd.require("consumerGroup"), cmd.field("topic") or None,
                             tuple(t for t in (cmd.field("topicList") or "").split(";") if t))


def _query_message(cmd: RemotingCommand, peer: str) -> QueryMessage:
    return QueryMessage(cmd.require("topic"), cmd.require("key"),
                        cmd.int_field("maxNum", required=True),
                        cmd.int_field("beginTimestamp", required=True),
                        cmd.int_field("endTimestamp", required=True),
                        cmd.field("_UNIQUE_KEY_QUERY") == "true")


def _reset_offset(cmd: RemotingCommand, peer: str) -> ResetOffset:
    return ResetOffset(cmd.require("topic"), cmd.require("group"),
                       cmd.int_field("timestamp", required=True), cmd.bool_field("isForce", True))


def _sub_group_update(cmd: RemotingCommand, peer: str) -> SubGroupUpdate:
    doc = fastjson.loads(cmd.body) if cmd.body else None
    if not isinstance(doc, dict):
        raise RemotingProtocolError("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body is not a "
                                    "SubscriptionGroupConfig JSON object")
    group = doc.get("groupName")
    if not isinstance(group, str) or not group:
        raise RemotingProtocolError("SubscriptionGroupConfig.groupName is missing")
    return SubGroupUpdate(group, doc)


def _sub_group_delete(cmd: RemotingCommand, peer: str) -> SubGroupDelete:
    return SubGroupDelete(cmd.require("groupName"), cmd.bool_field("removeOffset"))


def _producer_group(cmd: RemotingCommand, peer: str) -> ProducerGroupRef:
    return ProducerGroupRef(cmd.require("producerGroup"))


def _running_info(cmd: RemotingCommand, peer: str) -> RunningInfoQuery:
    return RunningInfoQuery(cmd.require("consumerGroup"), cmd.require("clientId"))


def _broker_config_update(cmd: RemotingCommand, peer: str) -> BrokerConfigUpdate:
    try:
        text = bytes(cmd.body).decode("utf-8") if cmd.body else ""
    except UnicodeDecodeError:
        raise RemotingProtocolError("UPDATE_BROKER_CONFIG body is not UTF-8") from None
    return BrokerConfigUpdate(parse_properties(text))


def _stats_query(cmd: RemotingCommand, peer: str) -> StatsQuery:
    return StatsQuery(cmd.require("statsName"), cmd.require("statsKey"))


def _broker_consume_stats(cmd: RemotingCommand, peer: str) -> BrokerConsumeStatsQuery:
    return BrokerConsumeStatsQuery(cmd.bool_field("isOrder"))


def _nothing(cmd: RemotingCommand, peer: str) -> None:
    return None


def _send(cmd: RemotingCommand, peer: str) -> Any:
    # the header's fields only: the broker's send path reads the properties and the body
    return headers.decode_send_wire(cmd, born_host=peer)


def _pull(cmd: RemotingCommand, peer: str) -> Any:
    return headers.decode_pull(cmd)


def _heartbeat(cmd: RemotingCommand, peer: str) -> Any:
    return headers.decode_heartbeat(bytes(cmd.body))


def _send_back(cmd: RemotingCommand, peer: str) -> Any:
    return headers.decode_send_back(cmd)


def _end_transaction(cmd: RemotingCommand, peer: str) -> Any:
    return headers.decode_end_transaction(cmd)


Decoder = Callable[[RemotingCommand, str], Any]

DECODERS: dict[int, Decoder] = {
    R.SEND_MESSAGE: _send, R.SEND_MESSAGE_V2: _send, R.SEND_BATCH_MESSAGE: _send,
    R.SEND_REPLY_MESSAGE: _send, R.SEND_REPLY_MESSAGE_V2: _send,
    R.PULL_MESSAGE: _pull,
    R.QUERY_CONSUMER_OFFSET: _offset_query, R.UPDATE_CONSUMER_OFFSET: _offset_update,
    R.SEARCH_OFFSET_BY_TIMESTAMP: _search_offset,
    R.GET_MAX_OFFSET: _queue_ref, R.GET_MIN_OFFSET: _queue_ref,
    R.GET_EARLIEST_MSG_STORETIME: _queue_ref,
    R.VIEW_MESSAGE_BY_ID: _view_message,
    R.HEART_BEAT: _heartbeat, R.UNREGISTER_CLIENT: _unregister,
    R.CONSUMER_SEND_MSG_BACK: _send_back, R.END_TRANSACTION: _end_transaction,
    R.GET_CONSUMER_LIST_BY_GROUP: _consumer_group,
    R.LOCK_BATCH_MQ: _lock_batch, R.UNLOCK_BATCH_MQ: _lock_batch,
    R.CHECK_CLIENT_CONFIG: _client_config,
    # mqadmin's codes (rocketstore.remoting.admin_processor)
    R.UPDATE_AND_CREATE_TOPIC: _topic_update, R.DELETE_TOPIC_IN_BROKER: _topic_ref,
    R.GET_TOPIC_STATS_INFO: _topic_ref, R.GET_CONSUME_STATS: _consume_stats,
    R.GET_CONSUMER_CONNECTION_LIST: _consumer_group, R.QUERY_MESSAGE: _query_message,
    R.INVOKE_BROKER_TO_RESET_OFFSET: _reset_offset, R.GET_BROKER_RUNTIME_INFO: _nothing,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _sub_group_update,
    R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _nothing, R.DELETE_SUBSCRIPTIONGROUP: _sub_group_delete,
    R.GET_PRODUCER_CONNECTION_LIST: _producer_group, R.GET_CONSUMER_RUNNING_INFO: _running_info,
    R.GET_BROKER_CONFIG: _nothing, R.UPDATE_BROKER_CONFIG: _broker_config_update,
    R.GET_ALL_TOPIC_CONFIG: _nothing, R.GET_TOPIC_CONFIG: _topic_ref,
    R.GET_BROKER_CONSUME_STATS: _broker_consume_stats, R.CLEAN_UNUSED_TOPIC: _nothing,
    R.QUERY_TOPIC_CONSUME_BY_WHO: _topic_ref, R.VIEW_BROKER_STATS_DATA: _stats_query,
    # what a slave pulls from its master (docs/replication.md), with 21 and 201 above
    R.GET_ALL_CONSUMER_OFFSET: _nothing, R.GET_ALL_DELAY_OFFSET: _nothing,
}


def decode(cmd: RemotingCommand, peer: str) -> Any:
    """The request object ``cmd``'s handler executes. A malformed request raises
    ``RemotingProtocolError`` naming what was wrong (answered as SYSTEM_ERROR, logged in one
    line); a code without a decoder raises ``KeyError``."""
    fn = DECODERS[cmd.code]
    try:
        return fn(cmd, peer)
    except RocketStoreError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        # a body of the wrong shape (a list where an object belongs ...): a bad request
        raise RemotingProtocolError(
            f"malformed request code {cmd.code}: {type(e).__name__}: {str(e)[:200]}") from None


# -- what a decoded request touches --------------------------------------------------------

def _send_touches(r: Any) -> list[Touch]:
    topic = r.topic
    if topic.startswith(RETRY_PREFIX):
        # a send into %RETRY%G is a consumer of G handing a message back: SUB on G itself
        # (4.9.8 checks the sending producer group instead, which any account may name)
        return [(TOPIC, topic, 0), (GROUP, topic[len(RETRY_PREFIX):], SUB),
                (GROUP, r.producer_group, 0)]
    return [(TOPIC, topic, PUB), (GROUP, r.producer_group, 0)]


def _heartbeat_touches(r: Any) -> list[Touch]:
    out: list[Touch] = [(GROUP, g, 0) for g in r.producer_groups]
    for c in r.consumers:
        out.append((GROUP, c.group_name, SUB))
        out.extend((TOPIC, s.topic, SUB) for s in c.subscriptions)
    return out


def _lock_touches(r: LockBatch) -> list[Touch]:
    return [(GROUP, r.group, SUB)] + [(TOPIC, t, SUB) for t in sorted({mq.topic for mq in r.mqs})]


def _opt(kind: str, name: str | None, perm: int = 0) -> list[Touch]:
    return [] if name is None else [(kind, name, perm)]


TOUCHES: dict[int, Callable[[Any], list[Touch]]] = {
    R.SEND_MESSAGE: _send_touches, R.SEND_MESSAGE_V2: _send_touches,
    R.SEND_BATCH_MESSAGE: _send_touches,
    # a reply writes into its topic as a send does (4.9.8 asks a valid signature only)
    R.SEND_REPLY_MESSAGE: _send_touches, R.SEND_REPLY_MESSAGE_V2: _send_touches,
    R.PULL_MESSAGE: lambda r: [(TOPIC, r.topic, SUB), (GROUP, r.consumer_group, SUB)],
    R.QUERY_CONSUMER_OFFSET: lambda r: [(TOPIC, r.topic, 0), (GROUP, r.group, 0)],
    R.UPDATE_CONSUMER_OFFSET: lambda r: [(TOPIC, r.topic, SUB), (GROUP, r.group, SUB)],
    R.SEARCH_OFFSET_BY_TIMESTAMP: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_MAX_OFFSET: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_MIN_OFFSET: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_EARLIEST_MSG_STORETIME: lambda r: [(TOPIC, r.topic, 0)],
    R.HEART_BEAT: _heartbeat_touches,
    R.UNREGISTER_CLIENT: lambda r: (_opt(GROUP, r.consumer_group, SUB)
                                    + _opt(GROUP, r.producer_group)),
    R.CONSUMER_SEND_MSG_BACK: lambda r: [(GROUP, r.group, SUB)] + _opt(TOPIC, r.origin_topic),
    R.END_TRANSACTION: lambda r: [(GROUP, r.producer_group, 0)],
    R.GET_CONSUMER_LIST_BY_GROUP: lambda r: [(GROUP, r.group, SUB)],
    R.LOCK_BATCH_MQ: _lock_touches, R.UNLOCK_BATCH_MQ: _lock_touches,
    R.CHECK_CLIENT_CONFIG: lambda r: _opt(GROUP, r.group) + _opt(TOPIC, r.topic),
    R.UPDATE_AND_CREATE_TOPIC: lambda r: [(TOPIC, r.topic, 0)],
    R.DELETE_TOPIC_IN_BROKER: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_TOPIC_STATS_INFO: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_TOPIC_CONFIG: lambda r: [(TOPIC, r.topic, 0)],
    R.GET_CONSUME_STATS: lambda r: ([(GROUP, r.group, 0)] + _opt(TOPIC, r.topic)
                                    + [(TOPIC, t, 0) for t in r.topic_list]),
    R.GET_CONSUMER_CONNECTION_LIST: lambda r: [(GROUP, r.group, 0)],
    R.QUERY_MESSAGE: lambda r: [(TOPIC, r.topic, SUB)],
    # resetting a group's offsets is an offset update: SUB on the topic and the group
    # (4.9.8 asks a valid signature only)
    R.INVOKE_BROKER_TO_RESET_OFFSET: lambda r: [(TOPIC, r.topic, SUB), (GROUP, r.group, SUB)],
    # admin reads and writes of a group or topic: named, no permission bit (4.9.8 asks a
    # valid signature only, as for GET_CONSUME_STATS above); 200 and 207 need an admin
    # account (acl.permission.ADMIN_CODES), as does UPDATE_BROKER_CONFIG (25)
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: lambda r: [(GROUP, r.group, 0)],
    R.DELETE_SUBSCRIPTIONGROUP: lambda r: [(GROUP, r.group, 0)],
    R.GET_PRODUCER_CONNECTION_LIST: lambda r: [(GROUP, r.group, 0)],
    R.GET_CONSUMER_RUNNING_INFO: lambda r: [(GROUP, r.group, 0)],
    R.QUERY_TOPIC_CONSUME_BY_WHO: lambda r: [(TOPIC, r.topic, 0)],
}


def touches(code: int, request: Any) -> list[Touch]:
    """The topics and groups ``request`` (decoded from a request of ``code``) names, with the
    permission each needs; empty for codes that name none."""
    fn = TOUCHES.get(code)
    return fn(request) if fn is not None else []
