"""A registered client connection (RocketMQ's ``ClientChannelInfo``) and its liveness checks.

In process the channel is the client's ``ClientChannel`` object; a TCP server passes its
connection object. Either may offer ``is_active()`` / ``is_writable()`` (a closed connection is
not active); without them a channel counts as active and writable.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import Future, InvalidStateError
from typing import Any

log = logging.getLogger("rocketstore.broker.channels")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def is_active(channel: Any) -> bool:
    f = getattr(channel, "is_active", None)
    return True if f is None else bool(f())


def is_writable(channel: Any) -> bool:
    f = getattr(channel, "is_writable", None)
    return True if f is None else bool(f())


class ClientChannelInfo:
    """One client's channel in a group: its client id and last heartbeat time."""

    __slots__ = ("channel", "client_id", "last_update_timestamp")

    def __init__(self, channel: Any, client_id: str) -> None:
        self.channel = channel
        self.client_id = client_id
        self.last_update_timestamp = now_ms()

    def __repr__(self) -> str:
        return f"ClientChannelInfo({self.client_id!r})"


def call_oneway(what: str, fn: Any, *args: Any) -> None:
    """A oneway request to a client: its failure is logged, never raised to the broker."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a client's fault must not break the broker
        log.exception("%s failed", what)


def complete(fut: Future, value: Any = None, error: BaseException | None = None) -> None:
    """Complete a caller's future unless its waiter cancelled it (a client that went away)."""
    if fut.done():
        return
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)
    except InvalidStateError:
        pass
