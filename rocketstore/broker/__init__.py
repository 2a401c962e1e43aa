"""The broker: RocketMQ 4.9.8's messaging model on one store (``Broker``, ``BrokerConfig``).

``rocketstore.broker.broker`` holds the request handlers; ``send``/``pull`` the send and pull
paths; ``consumer_manager``, ``producer_manager``, ``lock_manager``, ``subscription_group`` and
``topic_manager`` the broker's tables; ``inner`` the stored form of a broker-built message.
"""
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.inner import MessageInner, PropertiesMap

__all__ = ["Broker", "BrokerConfig", "MessageInner", "PropertiesMap"]
