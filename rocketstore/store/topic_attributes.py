"""Topic attributes: RocketMQ 5's ``TopicConfig.attributes`` map, here ``message.type``.

RocketMQ 5 keeps per-topic attributes in ``topics.json`` (``"attributes":{"message.type":
"FIFO"}``) and changes them through UPDATE_AND_CREATE_TOPIC's ``attributes`` header, a
modification string ``+key=value,+key2=value2,-key3`` (``+`` adds or changes, ``-`` removes;
only ``+`` when the topic is created). 4.9.8 has neither: its readers ignore the property and a
4.9.8 ``topics.json`` without it loads, every topic then reading as NORMAL (RocketMQ 5's
``TopicConfig.getTopicMessageType`` default).

Only ``message.type`` is accepted. RocketMQ 5's other topic attributes (``queue.type``
BatchCQ, ``cleanup.policy`` COMPACTION, ``reserve.time``) describe storage this store does not
have, so setting them is refused rather than recorded and ignored.
"""
from __future__ import annotations

from collections.abc import Mapping

from rocketstore.errors import InvalidArgumentError

__all__ = ["MESSAGE_TYPE", "MESSAGE_TYPES", "NORMAL", "MIXED", "parse_modification",
           "alter", "message_type"]

MESSAGE_TYPE = "message.type"
NORMAL = "NORMAL"
MIXED = "MIXED"
# TopicMessageType's values (RocketMQ 5)
MESSAGE_TYPES = ("UNSPECIFIED", NORMAL, "FIFO", "DELAY", "TRANSACTION", MIXED)
_KNOWN = {MESSAGE_TYPE: MESSAGE_TYPES}


def parse_modification(text: str | None) -> dict[str, str]:
    """``+key=value,-key`` → {"+key": "value", "-key": ""} (RocketMQ's ``AttributeParser``).

    Raises ``InvalidArgumentError`` (argument ``attributes``) naming the malformed item."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        if "=" in item:
            key, _, value = item.partition("=")
            if not key.startswith("+") or not value:
                raise InvalidArgumentError("attributes", text,
                                           f"{item!r}: expected +key=value or -key")
        else:
            key, value = item, ""
            if not key.startswith("-"):
                raise InvalidArgumentError("attributes", text,
                                           f"{item!r}: expected +key=value or -key")
        if key[1:] in {k[1:] for k in out}:
            raise InvalidArgumentError("attributes", text, f"{key[1:]!r} given twice")
        out[key] = value
    return out


def alter(current: Mapping[str, str], modification: Mapping[str, str], *,
          create: bool) -> dict[str, str]:
    """The attributes after applying a parsed modification to ``current``
    (``AttributeUtil.alterCurrentAttributes``): keys must be known and values allowed, a topic
    being created takes only additions, and only an existing key can be removed.

    Raises ``InvalidArgumentError`` (argument ``attributes``) naming the key or value."""
    out = dict(current)
    for signed, value in modification.items():
        sign, key = signed[:1], signed[1:]
        if key not in _KNOWN:
            raise InvalidArgumentError("attributes", signed,
                                       f"unsupported key {key!r}; supported: "
                                       f"{', '.join(sorted(_KNOWN))}")
        if sign == "+":
            if value not in _KNOWN[key]:
                raise InvalidArgumentError(f"attributes.{key}", value,
                                           f"must be one of {', '.join(_KNOWN[key])}")
            out[key] = value
        elif create:
            raise InvalidArgumentError("attributes", signed,
                                       "a topic being created takes only +key=value")
        elif key not in out:
            raise InvalidArgumentError("attributes", signed,
                                       f"cannot remove {key!r}: the topic does not have it")
        else:
            del out[key]
    return out


def message_type(attributes: Mapping[str, str] | None) -> str:
    """A topic's message type from its attributes: NORMAL when it has none (a 4.9 topic)."""
    value = (attributes or {}).get(MESSAGE_TYPE)
    return value if value in MESSAGE_TYPES else NORMAL
