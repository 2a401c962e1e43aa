"""Status enums and flag values, RocketMQ's names (re-exported by ``rocketstore.store.types``)."""
from __future__ import annotations

import enum


class PutMessageStatus(enum.Enum):
    """RocketMQ's ``PutMessageStatus`` (docs/format.md §13)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"
    # a broker answers these with its NO_PERMISSION response code; the store reports it here
    NO_PERMISSION = "NO_PERMISSION"

    @property
    def ok(self) -> bool:
        return self is PutMessageStatus.PUT_OK


class GetMessageStatus(enum.Enum):
    """RocketMQ's ``GetMessageStatus`` (docs/format.md §13)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    # a broker answers a pull from a read-forbidden topic with NO_PERMISSION
    NO_PERMISSION = "NO_PERMISSION"


class BoundaryType(enum.Enum):
    """Which unit ``get_offset_in_queue_by_time`` picks in a run of equal timestamps (5.x)."""

    LOWER = "LOWER"
    UPPER = "UPPER"


class TransactionType(enum.IntEnum):
    """Transaction bits of SYSFLAG (``sys_flag & 0xC``, docs/format.md §1.3)."""

    NOT_TYPE = 0x0
    PREPARED_TYPE = 0x4
    COMMIT_TYPE = 0x8
    ROLLBACK_TYPE = 0xC


class SysFlag(enum.IntFlag):
    """SYSFLAG bits (docs/format.md §1.3)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

