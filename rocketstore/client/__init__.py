"""Producers and consumers (RocketMQ's client) over a transport interface.

The client never imports the broker or the store: it talks to a ``Transport``
(``transport.py``); ``broker=`` gives the in-process one, which calls a ``Broker`` directly.
"""
from rocketstore.client.allocate import (AllocateMessageQueueAveragely,
                                         AllocateMessageQueueAveragelyByCircle,
                                         AllocateMessageQueueByConfig,
                                         AllocateMessageQueueByMachineRoom,
                                         AllocateMessageQueueConsistentHash)
from rocketstore.client.consume_service import ConsumeConcurrentlyContext, ConsumeOrderlyContext
from rocketstore.client.producer import (Producer, SendResult, TransactionProducer,
                                         TransactionSendResult)
from rocketstore.client.pull_consumer import PullConsumer
from rocketstore.client.reply import create_reply_message
from rocketstore.client.push_consumer import PushConsumer
from rocketstore.client.selector import (MessageQueueSelector, SelectMessageQueueByHash,
                                         SelectMessageQueueByRandom)
from rocketstore.common import (ConsumeConcurrentlyStatus, ConsumeOrderlyStatus,
                                LocalTransactionState, Message, MessageExt, MessageQueue,
                                SendStatus)

__all__ = ["Producer", "TransactionProducer", "PushConsumer", "PullConsumer", "SendResult",
           "TransactionSendResult", "SendStatus", "Message", "MessageExt", "MessageQueue",
           "MessageQueueSelector", "SelectMessageQueueByHash", "SelectMessageQueueByRandom",
           "ConsumeConcurrentlyStatus", "ConsumeOrderlyStatus", "ConsumeConcurrentlyContext",
           "ConsumeOrderlyContext", "LocalTransactionState",
           "AllocateMessageQueueAveragely", "AllocateMessageQueueAveragelyByCircle",
           "AllocateMessageQueueConsistentHash", "AllocateMessageQueueByConfig",
           "AllocateMessageQueueByMachineRoom", "create_reply_message"]
