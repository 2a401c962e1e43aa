"""RocketMQ 4.9's fixed names: system topics and groups, message property keys, perm bits.

Values are RocketMQ's own (``MixAll``, ``TopicValidator``, ``MessageConst``, ``PermName``), so
records written through the broker carry exactly the property names a 4.9.8 broker writes.
"""
from __future__ import annotations

import enum

# topics and groups (MESSAGING.md §12)
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
SYS_GROUP_PREFIX = "CID_RMQ_SYS_"

# topics a client may never send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET)
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255

# message property keys (MessageConst)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
# request-reply (RocketMQ 4.7+, docs/messaging.md "Request-reply")
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"
PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_FLAG = "reply"          # MSG_TYPE of a reply (MixAll.REPLY_MESSAGE_FLAG)

# properties only a broker sets (REAL_* by the DELAY and half-message rewrites, the others by
# the transaction check): a client send carrying one is refused (stricter than 4.9.8, which
# stores them and lets END_TRANSACTION or the check act on them; docs/protocol.md)
BROKER_ONLY_PROPERTIES = frozenset({
    PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_TRANSACTION_CHECK_TIMES})

# the tag of a transaction op message ("remove") (TransactionalMessageUtil.REMOVETAG)
TRANS_OP_REMOVE_TAG = "d"


class PermName(enum.IntFlag):
    """Topic and broker permission bits (``PermName``): 6 = read + write, 7 adds inherit."""

    PERM_INHERIT = 1
    PERM_WRITE = 2
    PERM_READ = 4
    PERM_PRIORITY = 8


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: the retry topic of a consumer group."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: the dead-letter topic of a consumer group."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def reply_topic(cluster: str) -> str:
    """``<cluster>_REPLY_TOPIC``: where the replies of a cluster's requests are sent."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"
