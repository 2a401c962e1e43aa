"""What the broker, the client and (later) the remoting layer share: RocketMQ's names.

``constants`` holds topic prefixes, property names and permission bits; ``protocol`` the enums
and the request/response values that cross the transport between a client and a broker (in
process or, with ``rocketstore.remoting``, over TCP). The message values themselves are the
store's compiled ``Message`` (what a producer sends) and ``MessageExt`` (what a consumer
receives), re-exported here so that the client never imports the store package directly; so
are ``java_hash`` (Java ``String.hashCode``: tag codes, hash selectors) and ``UniqIdGenerator``
(the UNIQ_KEY a producer stamps on each message) with ``stamp_for_send`` (the stamping itself,
in C, for whole batches).
"""
from rocketstore.common.constants import PermName
from rocketstore.common.protocol import (ConsumeConcurrentlyStatus, ConsumeFromWhere,
                                         ConsumeOrderlyStatus, ConsumeType,
                                         LocalTransactionState, MessageModel, MessageQueue,
                                         PullStatus, ResponseCode, SendStatus)
from rocketstore.store._codec import UniqIdGenerator, java_hash, stamp_for_send  # noqa: E402
from rocketstore.store.types import Message, MessageExt

__all__ = ["Message", "MessageExt", "MessageQueue", "PermName", "SendStatus", "PullStatus",
           "ResponseCode", "LocalTransactionState", "ConsumeConcurrentlyStatus",
           "ConsumeOrderlyStatus", "MessageModel", "ConsumeFromWhere", "ConsumeType",
           "UniqIdGenerator", "java_hash", "stamp_for_send"]
