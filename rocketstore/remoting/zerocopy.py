"""A stored record as a view of its mapped commit-log file, for an answer's body.

``MessageExt.record()`` copies the record; a view does not, and it pins the mapping only as
long as the answer is queued (``MappedFile`` unmaps when its last view goes).
"""
from __future__ import annotations

from typing import Any


def record_view(msg: Any) -> bytes | memoryview:
    """The whole record of ``msg`` without a copy when its body views a mapped file."""
    body = msg.stored_body
    owner = getattr(body, "obj", None)
    start = getattr(owner, "file_from_offset", None)
    if start is None:
        return msg.record()
    pos = msg.commitlog_offset - start
    return memoryview(owner)[pos:pos + msg.store_size]
