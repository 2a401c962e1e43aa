"""Bodies of RocketMQ's admin requests, in the JSON a Java ``mqadmin`` reads and writes.

Several admin bodies are maps keyed by ``MessageQueue`` (``TopicStatsTable``, ``ConsumeStats``,
``ResetOffsetBody``). fastjson writes such a key as the object itself,
``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, which is not standard JSON;
``mq_map`` writes that form and ``decode_mq_map`` reads it back (through
``fastjson.loads``) as ``{MessageQueue: value}``. The other bodies are plain JSON objects
with Java's field names, written in fastjson's (sorted) field order.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocketstore.common.protocol import MessageQueue
from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting import fastjson


def mq_key_json(mq: MessageQueue) -> str:
    """A MessageQueue as fastjson writes it as a map key (fields in name order)."""
    return fastjson.dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id,
                           "topic": mq.topic})


def mq_map(table: Mapping[MessageQueue, Any]) -> str:
    """A ``Map<MessageQueue, V>`` in fastjson's object-key form (queues in RocketMQ order)."""
    return "{" + ",".join(f"{mq_key_json(mq)}:{fastjson.dumps(v)}"
                          for mq, v in sorted(table.items())) + "}"


def decode_mq_map(doc: Any, what: str) -> dict[MessageQueue, Any]:
    """A parsed ``Map<MessageQueue, V>`` (object keys, as ``fastjson.loads`` returns them, or
    the quoted-JSON keys some clients write) -> ``{MessageQueue: V}``."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise RemotingProtocolError(f"{what}: expected a map keyed by message queue")
    out: dict[MessageQueue, Any] = {}
    for k, v in doc.items():
        try:
            if isinstance(k, str):
                k = tuple(sorted(fastjson.loads(k).items()))
            topic, broker, qid = fastjson.mq_key(k)
        except (KeyError, TypeError, ValueError, AttributeError, RemotingProtocolError):
            raise RemotingProtocolError(f"{what}: key {k!r} is not a message queue") from None
        out[MessageQueue(topic, broker, qid)] = v
    return out


# -- the bodies ------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicOffset:
    """One queue of ``TopicStatsTable``: its offsets and the store time of its last message."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int

    def to_json(self) -> dict[str, int]:
        return {"lastUpdateTimestamp": self.last_update_timestamp, "maxOffset": self.max_offset,
                "minOffset": self.min_offset}


@dataclass(frozen=True)
class OffsetWrapper:
    """One queue of ``ConsumeStats``: the broker's max offset, the group's committed offset,
    the store time of the last message it consumed (0 when none)."""

    broker_offset: int
    consumer_offset: int
    pull_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group (RocketMQ's "diff")."""
        return max(0, self.broker_offset - self.consumer_offset)

    def to_json(self) -> dict[str, int]:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp, "pullOffset": self.pull_offset}


def encode_topic_stats(table: Mapping[MessageQueue, TopicOffset], put_tps: float) -> bytes:
    """``TopicStatsTable`` (GET_TOPIC_STATS_INFO's body)."""
    offsets = {mq: o.to_json() for mq, o in table.items()}
    return ('{"offsetTable":' + mq_map(offsets) + ',"topicPutTps":' + fastjson.dumps(put_tps)
            + "}").encode()


def decode_topic_stats(body: bytes) -> tuple[dict[MessageQueue, TopicOffset], float]:
    doc = _object(body, "TopicStatsTable")
    table = {mq: TopicOffset(int(v.get("minOffset", 0)), int(v.get("maxOffset", 0)),
                             int(v.get("lastUpdateTimestamp", 0)))
             for mq, v in decode_mq_map(doc.get("offsetTable"), "TopicStatsTable").items()}
    return table, float(doc.get("topicPutTps") or 0.0)


def encode_consume_stats(table: Mapping[MessageQueue, OffsetWrapper], consume_tps: float) -> bytes:
    """``ConsumeStats`` (GET_CONSUME_STATS's body)."""
    offsets = {mq: o.to_json() for mq, o in table.items()}
    return ('{"consumeTps":' + fastjson.dumps(consume_tps) + ',"offsetTable":' + mq_map(offsets)
            + "}").encode()


def decode_consume_stats(body: bytes) -> tuple[dict[MessageQueue, OffsetWrapper], float]:
    doc = _object(body, "ConsumeStats")
    table = {mq: OffsetWrapper(int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
                               int(v.get("pullOffset", 0)), int(v.get("lastTimestamp", 0)))
             for mq, v in decode_mq_map(doc.get("offsetTable"), "ConsumeStats").items()}
    return table, float(doc.get("consumeTps") or 0.0)


def encode_reset_offsets(table: Mapping[MessageQueue, int]) -> bytes:
    """``ResetOffsetBody``: the offset each queue was reset to."""
    return ('{"offsetTable":' + mq_map(table) + "}").encode()


def encode_reset_offsets_for_c(table: Mapping[MessageQueue, int]) -> bytes:
    """``ResetOffsetBodyForC``: the same as a list, which the C++ client parses."""
    return fastjson.dumps({"offsetTable": [
        {"brokerName": mq.broker_name, "offset": off, "queueId": mq.queue_id, "topic": mq.topic}
        for mq, off in sorted(table.items())]}).encode()


def decode_reset_offsets(body: bytes) -> dict[MessageQueue, int]:
    doc = _object(body, "ResetOffsetBody")
    return {mq: int(v) for mq, v in decode_mq_map(doc.get("offsetTable"),
                                                  "ResetOffsetBody").items()}


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """``KVTable`` (GET_BROKER_RUNTIME_INFO's body): string keys to string values."""
    return fastjson.dumps({"table": {k: str(v) for k, v in sorted(table.items())}}).encode()


def decode_kv_table(body: bytes) -> dict[str, str]:
    table = _object(body, "KVTable").get("table") or {}
    if not isinstance(table, dict):
        raise RemotingProtocolError("KVTable: table is not an object")
    return {str(k): str(v) for k, v in table.items()}


def encode_consume_stats_list(broker_addr: str,
                              groups: list[tuple[str, list[tuple[dict[MessageQueue, OffsetWrapper],
                                                                 float]]]],
                              total_diff: int) -> bytes:
    """``ConsumeStatsList`` (GET_BROKER_CONSUME_STATS's body): per group a list of
    ``ConsumeStats``, one per topic, each a map keyed by message queue."""
    parts = []
    for group, stats in groups:
        items = ",".join('{"consumeTps":' + fastjson.dumps(tps) + ',"offsetTable":'
                         + mq_map({mq: o.to_json() for mq, o in table.items()}) + "}"
                         for table, tps in stats)
        parts.append("{" + fastjson.dumps(group) + ":[" + items + "]}")
    return ('{"brokerAddr":' + fastjson.dumps(broker_addr) + ',"consumeStatsList":['
            + ",".join(parts) + '],"totalDiff":' + str(int(total_diff)) + "}").encode()


def decode_consume_stats_list(body: bytes) -> tuple[str, dict[str, list[tuple[
        dict[MessageQueue, OffsetWrapper], float]]], int]:
    """(broker address, group -> [(offset table, consume tps)] per topic, total diff)."""
    doc = _object(body, "ConsumeStatsList")
    out: dict[str, list[tuple[dict[MessageQueue, OffsetWrapper], float]]] = {}
    for entry in doc.get("consumeStatsList") or ():
        if not isinstance(entry, dict):
            raise RemotingProtocolError("ConsumeStatsList: an entry is not an object")
        for group, stats in entry.items():
            lst = out.setdefault(str(group), [])
            for cs in stats or ():
                table = {mq: OffsetWrapper(int(v.get("brokerOffset", 0)),
                                           int(v.get("consumerOffset", 0)),
                                           int(v.get("pullOffset", 0)),
                                           int(v.get("lastTimestamp", 0)))
                         for mq, v in decode_mq_map(cs.get("offsetTable"),
                                                    "ConsumeStats").items()}
                lst.append((table, float(cs.get("consumeTps") or 0.0)))
    return str(doc.get("brokerAddr") or ""), out, int(doc.get("totalDiff") or 0)


def connection_json(conn: Any, client_id: str) -> dict[str, Any]:
    """A ``Connection`` (ConsumerConnection / ProducerConnection entries) of a client."""
    c = getattr(conn, "conn", None)
    attrs = getattr(c, "attributes", {})
    return {"clientAddr": getattr(c, "peer", "") or "", "clientId": client_id,
            "language": attrs.get("client_language", "OTHER"),
            "version": attrs.get("client_version", 0)}


def _object(body: bytes | memoryview, what: str) -> dict[Any, Any]:
    doc = fastjson.loads(bytes(body)) if body else {}
    if not isinstance(doc, dict):
        raise RemotingProtocolError(f"{what} body is not a JSON object")
    return doc


def subscription_json(sub: Any) -> dict[str, Any]:
    """A ``SubscriptionData`` as the Java client writes it."""
    return {"classFilterMode": False, "codeSet": sorted(sub.code_set),
            "expressionType": sub.expression_type, "subString": sub.sub_string,
            "subVersion": sub.sub_version, "tagsSet": sorted(sub.tags_set), "topic": sub.topic}


__all__ = ["TopicOffset", "OffsetWrapper", "mq_map", "decode_mq_map", "encode_topic_stats",
           "decode_topic_stats", "encode_consume_stats", "decode_consume_stats",
           "encode_reset_offsets", "encode_reset_offsets_for_c", "decode_reset_offsets",
           "encode_kv_table", "decode_kv_table", "subscription_json",
           "encode_consume_stats_list", "decode_consume_stats_list", "connection_json"]
