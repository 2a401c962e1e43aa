"""Batch decode of commit-log records into column buffers (see _columns.pyx)."""
from typing import Any, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

FIELD_BITS: dict[str, int]
ALL_FIELDS: int

@final
class _Columns:
    def arrays(self) -> dict[str, Any]: ...

@final
class _TagSet:
    def __init__(self, tags: list[str]) -> None: ...

def tag_set(tags: list[str]) -> _TagSet: ...
def decode_units(units: Buffer, positions: npt.NDArray[np.int64] | None, commit_log_queue: object,
                 topic_b: bytes, queue_id: int, first_offset: int, tags: _TagSet | None = ...,
                 min_ts: int = ..., max_ts: int = ..., fields: int = ...) -> tuple[dict[str, Any], int]: ...
def decode_records(buf: Buffer, topic_b: bytes, queue_id: int, first_offset: int,
                   end_offset: int, tags: _TagSet | None = ..., min_ts: int = ...,
                   max_ts: int = ...) -> tuple[dict[str, Any], int]: ...
