from typing import Any, Callable, Sequence

def stored_properties(props: bytes, cluster: bytes,
                      uniq_id: Callable[[], str]) -> tuple[bytes, bool] | None: ...
def wire_batch(body: bytes, extra: bytes, cluster: bytes,
               uniq_id: Callable[[], str]) -> tuple[bytes, bytes, int, int] | None: ...
def json_header(h: bytes | bytearray | memoryview
                ) -> tuple[int, int, int, int, str | None, str | None,
                           dict[str, str | None]] | None: ...
def split_frames(buf: bytearray, max_frame: int, max_header: int, max_ext_fields: int,
                 command_class: type, languages: dict[str, Any], default_language: Any,
                 other_language: Any, decode_other: Callable[[bytes], Any]
                 ) -> tuple[list[Any], int, bool]: ...
def send_header(ext: dict[str, str | None], keys: Sequence[str], required: tuple[str, ...],
                version: int) -> tuple[Any, ...] | None: ...

class PutCounter:
    msgs: int
    size: int

class LaneCore:
    topic: str
    def __init__(self, topic: str, topics: Any, processor: Any,
                 broker: Any, put: Callable[..., Any], acks: Any,
                 transform_of: Callable[[int], Any], response_of: Callable[[Any, int], Any],
                 illegal: Callable[[Any], Any], uniq_id: Callable[[], str],
                 born_host_of: Callable[[str | None], bytes], result_type: type,
                 put_ok: Any, cluster: bytes, local_host: bytes,
                 counter: PutCounter | None, on_send: Callable[[str, Any, Any], None] | None
                 ) -> None: ...
    @property
    def warm(self) -> bool: ...
    def _keep(self, tc: Any, cfg: Any, bound: int, sys_bits: int) -> None: ...
    def send(self, msg: Any, queue_id: int) -> Any: ...

class FastSendCore:
    producer: Any
    info: Any
    expires: float
    lane: Callable[[Any, int], Any]
    broker_name: str
    def __init__(self, producer: Any, info: Any, expires: float, lane: Callable[[Any, int], Any],
                 broker_name: str, gen: Any, result: type,
                 send_ok: Any, stored_type: type, done_future: Callable[[Any], Any]) -> None: ...
    def _take(self, msg: Any) -> tuple[float, Any, Any, str] | None: ...
    def send(self, msg: Any, timeout: int) -> Any: ...
    def send_async(self, msg: Any) -> Any: ...

class ThreadLocalIndex:
    def increment_and_get(self) -> int: ...
    def set_current(self, value: int) -> None: ...
