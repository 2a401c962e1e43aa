from collections.abc import Iterable, Iterator
from typing import Any, final

import numpy as np

from rocketstore.store._codec import MessageExt
from rocketstore.store._consumequeue import ConsumeQueue
from rocketstore.store.status import GetMessageStatus

@final
class TagFilter:
    def __init__(self, tags: Iterable[str]) -> None: ...
    @property
    def codes(self) -> list[int]: ...

@final
class GetMessageResult:
    status: GetMessageStatus
    messages: list[MessageExt]
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffer_total_size: int
    units_scanned: int
    suggest_pulling_from_slave: bool
    msg_count4commercial: int
    error: BaseException | None
    @property
    def message_count(self) -> int: ...
    @property
    def found(self) -> bool: ...
    def __iter__(self) -> Iterator[MessageExt]: ...
    def __len__(self) -> int: ...

@final
class ReadLimits:
    bytes_in_memory: int
    count_in_memory: int
    bytes_in_disk: int
    count_in_disk: int
    memory_bytes: int
    def __init__(self, bytes_in_memory: int = ..., count_in_memory: int = ...,
                 bytes_in_disk: int = ..., count_in_disk: int = ...,
                 memory_bytes: int = ...) -> None: ...

@final
class BodyBatch:
    @property
    def status(self) -> GetMessageStatus: ...
    @property
    def buffer(self) -> bytes: ...
    @property
    def offsets(self) -> np.ndarray: ...
    @property
    def queue_offsets(self) -> np.ndarray: ...
    @property
    def sys_flags(self) -> np.ndarray: ...
    @property
    def next_begin_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[memoryview]: ...

def get_bodies(cq: ConsumeQueue | None, commit_log_queue: Any, offset: int, max_msgs: int,
               max_bytes: int) -> BodyBatch: ...
def make_result(status: GetMessageStatus, next_begin_offset: int, min_offset: int,
                max_offset: int, error: BaseException | None = ...) -> GetMessageResult: ...
def get_message(cq: ConsumeQueue, commit_log_queue: Any, offset: int, max_msgs: int,
                max_bytes: int, tag_filter: TagFilter | None, limits: ReadLimits,
                max_offset_py: int, raw: bool = ...) -> GetMessageResult: ...
def store_timestamp_at(cq: ConsumeQueue, cl_mfq: Any, index: int, min_phy: int) -> int: ...
def offset_by_time(cq: ConsumeQueue, cl_mfq: Any, timestamp: int, upper: bool,
                   min_phy: int) -> int: ...
def verify_candidates(commit_log_queue: Any, candidates: Iterable[int], topic: str, key: str,
                      max_num: int, raw: bool = ..., begin_ts: int = ...,
                      end_ts: int = ...) -> list[MessageExt]: ...

def record_views(messages: list[MessageExt]) -> tuple[list[memoryview | bytes], int]: ...
