"""Stored records as views of their mapped commit-log files, for an answer's body.

PULL_MESSAGE, VIEW_MESSAGE_BY_ID and QUERY_MESSAGE answer with whole stored records. Their
body is a ``RecordBody``: the records as read-only views of the mappings (records adjacent in
one file in one view), written to the socket by ``Connection.send`` with ``writev`` and never
joined into new bytes. Each view pins its mapping (``MappedFile`` unmaps only when its last
view goes), so retention or a closing store can release the file while the answer is still
being written: the bytes stay readable until the last view is gone.
"""
from __future__ import annotations

from typing import Any, Sequence

from rocketstore.store._reader import record_views


class RecordBody:
    """A body made of several buffers, sent as they are (``Connection.send`` writes them with
    one ``writev``). ``len()`` is its size in bytes; ``bytes()`` joins it (a copy: for tests
    and for callers that need one buffer)."""

    __slots__ = ("parts", "nbytes")

    def __init__(self, parts: list[memoryview | bytes], nbytes: int) -> None:
        self.parts = parts
        self.nbytes = nbytes

    @classmethod
    def of(cls, messages: Sequence[Any]) -> "RecordBody":
        """The whole records of ``messages`` (``MessageExt`` read from a store), no copy."""
        parts, nbytes = record_views(list(messages))
        return cls(parts, nbytes)

    def __len__(self) -> int:
        return self.nbytes

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"RecordBody({len(self.parts)} parts, {self.nbytes} B)"


def record_view(msg: Any) -> memoryview | bytes:
    """The whole record of ``msg`` without a copy when it was read from a mapped file."""
    parts, _ = record_views([msg])
    return parts[0]
