"""Test helper: consume a whole queue the way a consumer does."""
from __future__ import annotations


def pull_all(store, topic: str, queue_id: int, start: int = 0, batch: int = 32) -> list:
    """Every message of the queue from ``start``, by ``get_message`` ``batch`` at a time,
    until a pull returns none."""
    out: list = []
    offset = start
    while True:
        r = store.get_message("g", topic, queue_id, offset, batch)
        if not r.messages:
            return out
        out += r.messages
        offset = r.next_begin_offset
