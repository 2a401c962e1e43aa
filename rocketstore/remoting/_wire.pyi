from typing import Any, Callable, Sequence, final

def stored_properties(props: bytes, cluster: bytes,
                      uniq_id: Callable[[], str]) -> tuple[bytes, bool] | None: ...
def wire_batch(body: bytes, extra: bytes, cluster: bytes,
               uniq_id: Callable[[], str]) -> tuple[bytes, bytes, int, int] | None: ...
def message_batch(msgs: list[Any], cluster: bytes, uniq_id: Callable[[], str]
                  ) -> tuple[bytes, bytes, bytes, int, int] | None: ...
def restamp(msgs: tuple[Any, ...], ids: bytes) -> list[Any]: ...
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
                 counter: PutCounter | None, on_send: Callable[[str, Any, Any], None] | None,
                 put_batch: Callable[..., Any] | None = ...,
                 on_batch: Callable[[str, int, int, Any], None] | None = ...) -> None: ...
    @property
    def warm(self) -> bool: ...
    def _keep(self, tc: Any, cfg: Any, bound: int, sys_bits: int) -> None: ...
    def _count_into(self, counter: PutCounter | None) -> None: ...
    def send_wire(self, w: Any) -> Any: ...
    def send(self, msg: Any, queue_id: int) -> Any: ...

@final
class PullFound:
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[Any]

class PullLaneCore:
    group: str
    topic: str
    def __init__(self, group: str, topic: str, broker: Any, groups: Any, topics: Any,
                 consumers: Any, store: Any, queues: Any, clq: Any, get: Callable[..., Any],
                 commit: Callable[[str, int, int], None], key: str,
                 counter: PutCounter | None, found: Any) -> None: ...
    def _keep(self, cfg: Any, sgc: Any, tc: Any, info: Any, model: Any, sub: Any,
              tag_filter: Any, bound: int, sub_version: int,
              counter: PutCounter | None) -> None: ...
    def pull(self, queue_id: int, offset: int, max_nums: int, sys_flag: int,
             commit_offset: int, sub_version: int, client: bool = ...,
             count: bool = ..., expr: str | None = ...) -> PullFound | None: ...

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
    batch_lane: LaneCore | None
    def send(self, msg: Any, timeout: int) -> Any: ...
    def send_async(self, msg: Any) -> Any: ...
    def send_batch(self, msgs: Any, timeout: int) -> Any: ...

class ThreadLocalIndex:
    def increment_and_get(self) -> int: ...
    def set_current(self, value: int) -> None: ...
def encode_header(code: int, ext: dict[Any, Any], flag: int, language: str, opaque: int,
                  version: int, remark: str | None) -> bytes | None: ...
def send_ok_header(code: int, msg_id: str, queue_id: int, queue_offset: int, opaque: int,
                   region: bytes, version: int) -> bytes: ...
