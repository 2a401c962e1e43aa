from collections.abc import Callable
from typing import Any, final

from rocketstore.store._codec import MessageExt
from rocketstore.store._consumequeue import ConsumeQueue

SCHEDULE_TOPIC: str

@final
class DispatchCore:
    reput_offset: int
    dispatchers: list[Callable[[MessageExt], Any]]
    deleted_before: dict[str, int]
    dispatched: int
    notifier: Any
    def __init__(self, commit_log_queue: Any, find_queue: Callable[[str, int], ConsumeQueue],
                 delay_levels_ms: list[int], reput_offset: int = ...) -> None: ...
    index_last_phy: int
    verify_below: int
    rejected: int
    crc_from: int
    index_error: BaseException | None
    def set_index(self, index_service: Any) -> None: ...
    def invalidate(self) -> None: ...
    def exclusive(self, fn: Callable[[], Any]) -> Any: ...
    def dispatch(self, bound: int, max_records: int = ..., follow: bool = ...) -> int: ...
    def tags_code_of(self, msg: MessageExt) -> int: ...
