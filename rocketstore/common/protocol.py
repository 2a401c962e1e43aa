"""The values that cross a transport between a client and a broker.

Each request/response mirrors one RocketMQ remoting command (its request code in the class
docstring, MESSAGING.md §13) so that the TCP transport of the wire-protocol work maps header
fields one to one; the in-process transport passes these objects straight to ``Broker``.
Messages travel as the store's compiled ``Message`` (send) and ``MessageExt`` (pull, zero copy
in process).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketstore.store.types import Message, MessageExt


class ResponseCode(enum.IntEnum):
    """RocketMQ's ``ResponseCode`` / ``RemotingSysResponseCode`` values used by messaging."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29              # 5.x's answer to a bad admin request (4.9.8: SYSTEM_ERROR)
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    FLOW_CONTROL = 215


class SendStatus(enum.Enum):
    """``SendResult.status`` (RocketMQ's ``SendStatus``)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class PullStatus(enum.Enum):
    """``PullResult.status`` (RocketMQ's ``PullStatus``)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class LocalTransactionState(enum.Enum):
    """What a transaction listener answers (RocketMQ spells the last one ``UNKNOW``)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"      # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"    # push


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class TransactionCommitType(enum.IntEnum):
    """``END_TRANSACTION``'s ``commitOrRollback`` (the sysflag transaction type values)."""

    NOT_TYPE = 0
    PREPARED_TYPE = 0x4
    COMMIT_TYPE = 0x8
    ROLLBACK_TYPE = 0xC


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker; orders as RocketMQ sorts (topic, broker, queue id)."""

    topic: str
    broker_name: str
    queue_id: int
    # hashed once: a queue is a dict key on every consumed message (offsets, process queues)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.broker_name, self.queue_id)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, tuple[str, str, int]]:
        # rebuilt from its fields: str hashes differ between processes (PYTHONHASHSEED)
        return (MessageQueue, (self.topic, self.broker_name, self.queue_id))

    def __str__(self) -> str:      # MessageQueue.toString(): the consistent-hash key
        return (f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
                f"queueId={self.queue_id}]")


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker's share of a topic in a route (``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """``GET_ROUTEINFO_BY_TOPIC`` (105): the brokers of a topic and their addresses."""

    queue_datas: tuple[QueueData, ...]
    broker_addrs: dict[str, dict[int, str]]       # broker name -> broker id -> "host:port"
    order_topic_conf: str | None = None


# --- requests and responses ---------------------------------------------------------------

@dataclass(slots=True)
class SendMessageRequest:
    """``SEND_MESSAGE_V2`` (310) / ``SEND_BATCH_MESSAGE`` (320): one message, or a batch.

    ``messages`` carry their final properties (UNIQ_KEY set, body compressed with the sysflag
    bits if the client compressed it); the broker stamps ``CLUSTER``, applies the DELAY,
    transaction and retry/DLQ rewrites and stores them. ``queue_id`` < 0 lets the broker pick.
    """

    producer_group: str
    topic: str
    queue_id: int
    messages: list[Message]
    batch: bool = False
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    born_host: str | None = None
    # a reply of request-reply (``MSG_TYPE=reply``): SEND_REPLY_MESSAGE_V2 (325), pushed to
    # its requester by the broker (``rocketstore.broker.reply``)
    reply: bool = False


@dataclass(slots=True)
class SendMessageResponse:
    """The broker's answer to a send: a code, and where the message(s) went."""

    code: ResponseCode
    remark: str | None = None
    msg_id: str | None = None            # offset message id(s), comma-joined for a batch
    queue_id: int = -1
    queue_offset: int = -1
    transaction_id: str | None = None


@dataclass(slots=True)
class PullMessageRequest:
    """``PULL_MESSAGE`` (11). ``sys_flag`` bits: 0x1 commit offset, 0x2 suspend, 0x4
    subscription in the request, 0x10 lite pull."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int = 32
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 15000
    subscription: str | None = None        # "*" or "A || B" when flag 0x4
    sub_version: int = 0
    expression_type: str = "TAG"


@dataclass(slots=True)
class PullMessageResponse:
    """``PULL_MESSAGE``'s response: code SUCCESS / PULL_NOT_FOUND / PULL_RETRY_IMMEDIATELY /
    PULL_OFFSET_MOVED (or an error), the next offset and the queue's bounds."""

    code: ResponseCode
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    remark: str | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription of a consumer group (``FilterAPI.buildSubscriptionData``)."""

    topic: str
    sub_string: str                        # "*" or the expression as given
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()  # Java hashCode of each tag
    sub_version: int = 0
    expression_type: str = "TAG"


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: list[SubscriptionData]
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData:
    """``HEART_BEAT`` (34): every producer and consumer group of one client instance."""

    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumers: list[ConsumerData] = field(default_factory=list)


@dataclass(slots=True)
class ConsumerSendMsgBackRequest:
    """``CONSUMER_SEND_MSG_BACK`` (36): a message the consumer failed, by commit-log offset."""

    group: str
    offset: int                        # commit-log offset of the consumed record
    delay_level: int                   # 0 = broker chooses 3 + reconsume times; -1 = DLQ now
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    max_reconsume_times: int | None = None
    unit_mode: bool = False


@dataclass(slots=True)
class EndTransactionRequest:
    """``END_TRANSACTION`` (37), oneway: commit or roll back one half message."""

    producer_group: str
    tran_state_table_offset: int       # queue offset of the half record
    commit_log_offset: int             # commit-log offset of the half record
    commit_or_rollback: TransactionCommitType
    from_transaction_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequest:
    """``CHECK_TRANSACTION_STATE`` (39), broker to producer, oneway."""

    commit_log_offset: int
    tran_state_table_offset: int
    offset_msg_id: str
    msg_id: str | None
    transaction_id: str | None


@dataclass(slots=True)
class ReplyMessageRequest:
    """``PUSH_REPLY_MESSAGE_TO_CLIENT`` (326), broker to the requester, answered: a reply
    (SEND_REPLY_MESSAGE(_V2) 324/325) as its replier sent it (``ReplyMessageRequestHeader``:
    the send header's fields, ``properties`` the properties string, plus where and when it
    was stored) and its body."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    unit_mode: bool
    born_host: str
    store_host: str
    store_timestamp: int
    body: bytes


@dataclass(slots=True)
class RemotingResult:
    """A response with a code and no body fields beyond a value (offsets, counts)."""

    code: ResponseCode
    remark: str | None = None
    value: Any = None
