"""The topic and group names a request's header carries, checked before any handler runs.

One table says which ``extFields`` of which request code name a topic or a group; ``check``
applies ``rocketstore.common.names`` to them and answers RocketMQ's way: ``SYSTEM_ERROR`` for
a topic (4.9.8's ``TopicValidator.validateTopic``), ``INVALID_PARAMETER`` for a group (5.x's
``validateGroup``), the remark naming the field. A name that reaches a handler therefore cannot
be a path (``..``, ``a/b``) nor longer than RocketMQ allows. Sends are checked on their
decoded request by the broker's send path (V2 headers carry one-letter names); names inside
bodies (heartbeat, lock requests) by their decoders.
"""
from __future__ import annotations

from rocketstore.common import names
from rocketstore.common.protocol import ResponseCode
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand

__all__ = ["NAME_FIELDS", "check"]

R = RequestCode
# code -> (topic fields, group fields); a name ending in "?" may be absent or empty
NAME_FIELDS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    R.PULL_MESSAGE: (("topic",), ("consumerGroup",)),
    R.QUERY_CONSUMER_OFFSET: (("topic",), ("consumerGroup",)),
    R.UPDATE_CONSUMER_OFFSET: (("topic",), ("consumerGroup",)),
    R.SEARCH_OFFSET_BY_TIMESTAMP: (("topic",), ()),
    R.GET_MAX_OFFSET: (("topic",), ()),
    R.GET_MIN_OFFSET: (("topic",), ()),
    R.GET_EARLIEST_MSG_STORETIME: (("topic",), ()),
    R.UNREGISTER_CLIENT: ((), ("producerGroup?", "consumerGroup?")),
    R.CONSUMER_SEND_MSG_BACK: (("originTopic?",), ("group",)),
    R.END_TRANSACTION: ((), ("producerGroup",)),
    R.GET_CONSUMER_LIST_BY_GROUP: ((), ("consumerGroup",)),
    R.QUERY_MESSAGE: (("topic",), ()),
    R.UPDATE_AND_CREATE_TOPIC: (("topic",), ()),
    R.DELETE_TOPIC_IN_BROKER: (("topic",), ()),
    R.GET_TOPIC_STATS_INFO: (("topic",), ()),
    R.GET_TOPIC_CONFIG: (("topic",), ()),
    R.GET_CONSUME_STATS: (("topic?",), ("consumerGroup",)),
    R.GET_CONSUMER_CONNECTION_LIST: ((), ("consumerGroup",)),
    R.INVOKE_BROKER_TO_RESET_OFFSET: (("topic",), ("group",)),
    R.DELETE_SUBSCRIPTIONGROUP: ((), ("groupName",)),
    R.GET_PRODUCER_CONNECTION_LIST: ((), ("producerGroup",)),
    R.GET_CONSUMER_RUNNING_INFO: ((), ("consumerGroup",)),
    R.QUERY_TOPIC_CONSUME_BY_WHO: (("topic",), ()),
}


def _fields(spec: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    return tuple((f.rstrip("?"), f.endswith("?")) for f in spec)


_TABLE = {code: (_fields(t), _fields(g)) for code, (t, g) in NAME_FIELDS.items()}


def check(cmd: RemotingCommand) -> RemotingCommand | None:
    """The error response when a topic or group field of ``cmd`` is not a valid name, else
    None. An absent required field is left to the handler (it answers that it is missing)."""
    spec = _TABLE.get(cmd.code)
    if spec is None:
        return None
    ext = cmd.ext_fields
    topics, groups = spec
    for field, optional in topics:
        v = ext.get(field)
        if v is None or (optional and v == ""):
            continue
        why = names.topic_problem(v)
        if why is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, names.named(field, v, why))
    for field, optional in groups:
        v = ext.get(field)
        if v is None or (optional and v == ""):
            continue
        why = names.group_problem(v)
        if why is not None:
            return cmd.response(ResponseCode.INVALID_PARAMETER, names.named(field, v, why))
    return None
