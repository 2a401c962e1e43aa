"""What the broker, the client and (later) the remoting layer share: RocketMQ's names.

``constants`` holds topic prefixes, property names and permission bits; ``protocol`` the enums
and the request/response values that cross the transport between a client and a broker (in
process or, with ``rocketstore.remoting``, over TCP). The message values themselves are the
store's compiled ``Message`` (what a producer sends) and ``MessageExt`` (what a consumer
receives), re-exported here so that the client never imports the store package directly.
"""
from rocketstore.common.constants import PermName
from rocketstore.common.protocol import (ConsumeConcurrentlyStatus, ConsumeFromWhere,
                                         ConsumeOrderlyStatus, ConsumeType,
                                         LocalTransactionState, MessageModel, MessageQueue,
                                         PullStatus, ResponseCode, SendStatus)
from rocketstore.store.types import Message, MessageExt

__all__ = ["Message", "MessageExt", "MessageQueue", "PermName", "SendStatus", "PullStatus",
           "ResponseCode", "LocalTransactionState", "ConsumeConcurrentlyStatus",
           "ConsumeOrderlyStatus", "MessageModel", "ConsumeFromWhere", "ConsumeType"]
