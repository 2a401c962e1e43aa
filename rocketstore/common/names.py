"""Topic and group names: the one rule the client, the broker and its admin handlers apply.

RocketMQ's ``TopicValidator`` rule: not blank, only ``^[%|a-zA-Z0-9_-]+$``; a topic at most
127 characters, a ``%RETRY%``/``%DLQ%`` topic (a group's) at most 255 (5.x's
``RETRY_OR_DLQ_TOPIC_MAX_LENGTH``), a group at most 255. Such a name can never be a path
(no ``/``, no ``.``), which is what makes it safe to name a consume-queue directory after it.

``topic_problem``/``group_problem`` return RocketMQ's remark (None when valid) for code that
answers with a response; ``check_topic``/``check_group`` raise ``InvalidNameError`` naming the
field. Valid names are remembered (a bounded set: applications use few), so the check on a
send or a pull is one set lookup.
"""
from __future__ import annotations

import re

from rocketstore.common import constants as C
from rocketstore.errors import InvalidNameError

__all__ = ["VALID_NAME_PATTERN", "TOPIC_MAX_LENGTH", "RETRY_OR_DLQ_TOPIC_MAX_LENGTH",
           "GROUP_MAX_LENGTH", "topic_problem", "group_problem", "check_topic", "check_group",
           "is_valid_topic", "is_valid_group"]

VALID_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
TOPIC_MAX_LENGTH = C.TOPIC_MAX_LENGTH                       # 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = C.GROUP_MAX_LENGTH                       # 255

_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_CACHE_MAX = 65536
_ok_topics: set[str] = set()
_ok_groups: set[str] = set()


def _remember(cache: set[str], name: str) -> None:
    if len(cache) < _CACHE_MAX:
        cache.add(name)


def topic_problem(topic: object, *, max_length: int | None = None) -> str | None:
    """None when ``topic`` is a valid topic name, else RocketMQ's remark saying why.

    ``max_length`` lowers the length limit (a send keeps 4.9.8's 127 for every topic)."""
    if type(topic) is not str or topic not in _ok_topics:
        if not isinstance(topic, str) or not topic.strip():
            return "The specified topic is blank."
        if not _VALID.fullmatch(topic):
            return ("The specified topic contains illegal characters, allowing only "
                    + VALID_NAME_PATTERN)
        limit = (RETRY_OR_DLQ_TOPIC_MAX_LENGTH
                 if topic.startswith((C.RETRY_GROUP_TOPIC_PREFIX, C.DLQ_GROUP_TOPIC_PREFIX))
                 else TOPIC_MAX_LENGTH)
        if len(topic) > limit:
            return f"The specified topic is longer than topic max length {limit}."
        _remember(_ok_topics, topic)
    if max_length is not None and len(topic) > max_length:  # type: ignore[arg-type]
        return f"The specified topic is longer than topic max length {max_length}."
    return None


def group_problem(group: object) -> str | None:
    """None when ``group`` is a valid group name, else the remark saying why."""
    if type(group) is str and group in _ok_groups:
        return None
    if not isinstance(group, str) or not group.strip():
        return "The specified group is blank."
    if not _VALID.fullmatch(group):
        return ("The specified group contains illegal characters, allowing only "
                + VALID_NAME_PATTERN)
    if len(group) > GROUP_MAX_LENGTH:
        return f"The specified group is longer than group max length {GROUP_MAX_LENGTH}."
    _remember(_ok_groups, group)
    return None


def is_valid_topic(topic: object) -> bool:
    """Whether ``topic`` passes ``topic_problem``."""
    return topic_problem(topic) is None


def is_valid_group(group: object) -> bool:
    """Whether ``group`` passes ``group_problem``."""
    return group_problem(group) is None


def check_topic(topic: object, field: str = "topic") -> str:
    """``topic`` when valid, else ``InvalidNameError`` naming ``field``."""
    why = topic_problem(topic)
    if why is not None:
        raise InvalidNameError(field, topic, why)
    return topic  # type: ignore[return-value]


def check_group(group: object, field: str = "group") -> str:
    """``group`` when valid, else ``InvalidNameError`` naming ``field``."""
    why = group_problem(group)
    if why is not None:
        raise InvalidNameError(field, group, why)
    return group  # type: ignore[return-value]


def named(field: str, value: object, why: str) -> str:
    """A response remark naming the request field: ``<why> (field consumerGroup='a/b')``."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{why} (field {field}={shown})"
