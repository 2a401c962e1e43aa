"""Helpers for the broker tests: sending through a broker and reading a record's stored bytes."""
from __future__ import annotations

import time

from rocketstore import Message
from rocketstore.common.protocol import SendMessageRequest

import refreader


def send(broker, topic, body=b"x", queue_id=-1, props=None, tags=None, keys=None, *,
         batch=None, **kw):
    msgs = batch if batch is not None else [Message(topic, body, tags=tags, keys=keys,
                                                    properties=props)]
    req = SendMessageRequest("PG", topic, queue_id, msgs, batch=batch is not None, **kw)
    return broker.send_message(req).result(10)


def stored(broker, offset):
    """(MessageExt, decoded record dict with ``properties_raw``) at a commit-log offset."""
    ext = broker.store.look_message_by_offset(offset, raw=True)
    assert ext is not None, f"no record at {offset}"
    return ext, refreader.decode_record(ext.record(), 0)


def offset_of(msg_id: str) -> int:
    return int(msg_id[-16:], 16)


def wait_dispatched(broker, timeout=10.0):
    deadline = time.monotonic() + timeout
    while broker.store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)


class ConsumerChannel:
    """An in-process consumer's channel, for tests that call the broker directly."""

    def __init__(self, client_id: str = "test-consumer") -> None:
        self.client_id = client_id

    def notify_consumer_ids_changed(self, group: str) -> None:
        pass

    def is_active(self) -> bool:
        return True

    def is_writable(self) -> bool:
        return True


def subscribe(broker, group: str, *topics: str) -> ConsumerChannel:
    """Register an online consumer of ``group`` subscribing ``topics`` (a heartbeat), as a
    consumer is before it sends a message back."""
    from rocketstore.broker.pull import build_subscription_data
    from rocketstore.common.protocol import (ConsumeFromWhere, ConsumerData, ConsumeType,
                                             HeartbeatData, MessageModel)
    ch = ConsumerChannel()
    subs = [build_subscription_data(t, "*", 1) for t in topics]
    broker.heartbeat(HeartbeatData(ch.client_id, [], [ConsumerData(
        group, ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subs)]), ch)
    return ch
