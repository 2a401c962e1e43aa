"""A send as it arrives over the wire, before the broker executes it (docs/protocol.md §2.1).

``WireSend`` holds a SEND_MESSAGE(_V2)/SEND_BATCH_MESSAGE header's fields, decoded once by
``rocketstore.remoting.headers.decode_send_wire``, with the properties still the client's
string and the body the frame's bytes: the broker's send path stores the common shape from
these bytes (``rocketstore.broker.send``); ``send_request`` builds the ``SendMessageRequest``
(one ``Message`` per message) for every other path.
"""
from __future__ import annotations

import struct

from rocketstore.common.protocol import SendMessageRequest
from rocketstore.errors import RemotingProtocolError
from rocketstore.store.types import Message

BATCH_ENTRY = struct.Struct(">iiiii")     # total size, magic, body crc, flag, body length


class WireSend:
    """A SEND_MESSAGE(_V2)/SEND_BATCH_MESSAGE request as decoded from its header, once: what
    the ACL and the name checks see (``topic``, ``producer_group``) and what the broker's send
    path executes (``rocketstore.broker.send.SendMessageProcessor.send_wire_now``), the properties
    still the client's string and the body the frame's bytes (no ``Message`` yet)."""

    __slots__ = ("producer_group", "topic", "default_topic", "default_topic_queue_nums",
                 "queue_id", "sys_flag", "born_timestamp", "flag", "properties",
                 "reconsume_times", "max_reconsume_times", "batch", "body", "born_host",
                 "request", "sizes")

    def __init__(self, producer_group: str, topic: str, default_topic: str,
                 default_topic_queue_nums: int, queue_id: int, sys_flag: int,
                 born_timestamp: int, flag: int, properties: str, reconsume_times: int,
                 max_reconsume_times: int | None, batch: bool, body: bytes,
                 born_host: str | None) -> None:
        self.producer_group = producer_group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch
        self.body = body
        self.born_host = born_host
        self.request: SendMessageRequest | None = None     # send_request's, once built
        # (messages, body bytes) when known without decoding: one message, or a batch the
        # broker's fast path read (metrics count these)
        self.sizes: tuple[int, int] | None = None if batch else (1, len(body))

    @property
    def messages(self) -> list[Message]:
        """The messages the request carries (``send_request``'s: built once)."""
        return send_request(self).messages

    def __repr__(self) -> str:
        return (f"WireSend(topic={self.topic!r}, producer_group={self.producer_group!r}, "
                f"queue_id={self.queue_id}, batch={self.batch}, body={len(self.body)} B)")


def decode_batch_body(body: bytes, topic: str, *, born_timestamp: int, born_host: str | None,
                      extra_properties: str = "") -> list[Message]:
    """``MessageDecoder.encodeMessages``' body -> one ``Message`` per entry. 4.9.x appends the
    batch's own properties (e.g. ``WAIT``) to each entry's."""
    out: list[Message] = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < BATCH_ENTRY.size + 2:
            raise RemotingProtocolError(f"batch body: truncated entry at byte {pos}")
        total, _magic, _crc, flag, blen = BATCH_ENTRY.unpack_from(body, pos)
        if total < BATCH_ENTRY.size + 2 or pos + total > n or blen < 0 or \
                BATCH_ENTRY.size + blen + 2 > total:
            raise RemotingProtocolError(f"batch body: bad entry size {total} at byte {pos}")
        b0 = pos + BATCH_ENTRY.size
        msg_body = body[b0:b0 + blen]
        (plen,) = struct.unpack_from(">h", body, b0 + blen)
        p0 = b0 + blen + 2
        if plen < 0 or p0 + plen > pos + total:
            raise RemotingProtocolError(f"batch body: bad properties length at byte {pos}")
        props = body[p0:p0 + plen].decode("utf-8")
        if extra_properties:
            props = props + ("" if not props or props.endswith("\x02") else "\x02") + extra_properties
        out.append(Message.from_properties_string(topic, msg_body, props, flag=flag,
                                                  born_timestamp=born_timestamp,
                                                  born_host=born_host))
        pos += total
    if not out:
        raise RemotingProtocolError("batch body holds no message")
    return out


def send_request(w: WireSend) -> SendMessageRequest:
    """The ``SendMessageRequest`` of a decoded send (its messages built from the body and
    the properties string): what the broker's map path and the in-process transport take.
    Built once per ``WireSend`` (kept in ``w.request``)."""
    if w.request is not None:
        return w.request
    if w.batch:
        msgs = decode_batch_body(w.body, w.topic, born_timestamp=w.born_timestamp,
                                 born_host=w.born_host, extra_properties=w.properties)
    else:
        msgs = [Message.from_properties_string(
            w.topic, w.body, w.properties, flag=w.flag, sys_flag=w.sys_flag,
            reconsume_times=w.reconsume_times, born_timestamp=w.born_timestamp,
            born_host=w.born_host)]
    w.request = SendMessageRequest(
        producer_group=w.producer_group, topic=w.topic, queue_id=w.queue_id, messages=msgs,
        batch=w.batch, default_topic=w.default_topic,
        default_topic_queue_nums=w.default_topic_queue_nums, reconsume_times=w.reconsume_times,
        max_reconsume_times=w.max_reconsume_times, born_host=w.born_host)
    return w.request
