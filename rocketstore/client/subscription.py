"""Subscription expressions (``FilterAPI.buildSubscriptionData``, MESSAGING.md §4.6).

The broker filters by the tags' Java hash codes (collisions pass); the client then keeps only
messages whose whole ``TAGS`` string is subscribed.
"""
from __future__ import annotations

import time
from typing import Iterable

from rocketstore.client.validators import check_topic
from rocketstore.common import MessageExt, java_hash
from rocketstore.common.protocol import SubscriptionData
from rocketstore.errors import MQClientError

SUB_ALL = "*"


def build_subscription_data(topic: str, expression: str | None) -> SubscriptionData:
    """``*`` (or None / "") subscribes every tag; ``"A || B"`` those tags."""
    check_topic(topic)
    if expression is not None and not isinstance(expression, str):
        raise MQClientError(f"subscription expression of {topic!r} must be a str, "
                            f"got {type(expression).__name__}")
    now = time.time_ns() // 1_000_000
    if not expression or expression.strip() == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=now)
    tags = [t.strip() for t in expression.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise MQClientError(f"subscription expression {expression!r} of {topic!r} names no tag")
    return SubscriptionData(topic, expression, frozenset(tags),
                            frozenset(java_hash(t) for t in tags), sub_version=now)


def filter_by_tags(msgs: Iterable[MessageExt], sub: SubscriptionData) -> list[MessageExt]:
    """The client's string check after the broker's hash check."""
    if not sub.tags_set:
        return msgs if isinstance(msgs, list) else list(msgs)
    tags = sub.tags_set
    return [m for m in msgs if m.tags in tags]
