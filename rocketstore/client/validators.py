"""Client-side checks before anything is sent (RocketMQ's ``Validators``, MESSAGING.md §1.6)."""
from __future__ import annotations

from rocketstore.common import Message
from rocketstore.common import constants as C
from rocketstore.common import names
from rocketstore.errors import MQClientError

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024


def _check_name(kind: str, value: object, why: str | None) -> str:
    # the broker's rule (rocketstore.common.names), raised the client's way
    if why is not None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise MQClientError(f"the specified {kind} {shown} is not valid: {why}")
    return value  # type: ignore[return-value]


def check_group(group: object) -> str:
    """A producer/consumer group name: not blank, at most 255 chars of ``[%|a-zA-Z0-9_-]``."""
    return _check_name("group", group, names.group_problem(group))


def check_topic(topic: object) -> str:
    """A topic name: not blank, at most 127 chars of ``[%|a-zA-Z0-9_-]``."""
    return _check_name("topic", topic, names.topic_problem(topic, max_length=C.TOPIC_MAX_LENGTH))


def check_send_topic(topic: object) -> str:
    """A topic a producer may send to (not one of the broker's own system topics)."""
    check_topic(topic)
    if topic in C.NOT_ALLOWED_SEND_TOPICS:
        raise MQClientError(f"sending message to topic {topic!r} is forbidden "
                            "(a broker system topic)")
    return topic  # type: ignore[return-value]


_send_topics_ok: set[str] = set()     # topics already checked (applications use few)


def check_message(msg: object, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
    """A message a producer may send: a valid topic and a body of 1 .. max_message_size bytes."""
    if type(msg) is not Message:
        raise MQClientError(f"the message is null or not a rocketstore Message: "
                            f"{type(msg).__name__}")
    topic = msg.topic
    if topic not in _send_topics_ok:
        check_send_topic(topic)
        if len(_send_topics_ok) < 10000:
            _send_topics_ok.add(topic)
    n = len(msg.body)
    if n == 0:
        raise MQClientError(f"the message body length is zero (topic {msg.topic!r})")
    if n > max_message_size:
        raise MQClientError(f"the message body size {n} is over the max message size "
                            f"{max_message_size} (topic {msg.topic!r})")
