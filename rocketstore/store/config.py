"""StoreConfig: RocketMQ's MessageStoreConfig settings in snake_case, with its defaults.

Names map one to one onto RocketMQ's (``mappedFileSizeCommitLog`` ->
``mapped_file_size_commit_log``), so a broker's ``broker.conf`` reads across; the few
settings of our own say so. Values are checked at construction: a bad one raises
``InvalidConfigError`` naming it.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from rocketstore.errors import InvalidConfigError

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
CQ_UNIT_SIZE = 20

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"


@dataclass
class StoreConfig:
    """Settings of a message store (docs/format.md §1.7, 4, 5, 6, 9 for the defaults).

    Examples
    --------
    >>> cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, flush_disk_type="SYNC_FLUSH")
    >>> cfg.mapped_file_size_consume_queue
    6000000
    """

    # -- paths -------------------------------------------------------------------------------
    store_path_root_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    store_path_commit_log: str | None = None        # default <root>/commitlog
    # -- commit log ------------------------------------------------------------------------
    mapped_file_size_commit_log: int = GiB
    max_message_size: int = 4 * MiB                 # limit on the body (docs/format.md §1.7)
    # 5.x autoMessageVersionOnTopicLen: a topic over 127 characters (only %RETRY% ones may
    # be, up to 255) is written as a v2 record, which RocketMQ 4.9.x cannot read; False
    # refuses such puts (MESSAGE_ILLEGAL) so the store stays readable by 4.9.x
    auto_message_version_on_topic_len: bool = True
    store_host: str = "127.0.0.1:10911"             # STOREHOSTADDRESS and offset msg ids (ours)
    check_crc_on_recover: bool = True
    # 5.x's whole-record CRC property (__CRC32#, docs/format.md §1.2). None (the default): on for a
    # MessageStore used directly, off under a Broker, which writes RocketMQ 4.9.8's records
    # byte for byte (RocketMQ's own default is off). Records carrying it are checked as a whole
    # on every read, whatever the setting
    enabled_append_prop_crc: bool | None = None
    warm_maped_file_enable: bool = False            # RocketMQ's spelling ("maped")
    flush_least_pages_when_warm_maped_file: int = 4096
    mlock_maped_file: bool = False                  # ours: mlock warmed files (RocketMQ always does)
    os_page_cache_busy_timeout_mills: int = 1000
    # ours: disk allocated ahead of the commit-log writer at a time (posix_fallocate); files
    # keep RocketMQ's length, sparse past it. 0 allocates each file whole, as RocketMQ does
    allocation_extent: int = 64 * MiB
    # -- flush -----------------------------------------------------------------------------
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_commit_log_timed: bool = True
    sync_flush_timeout: int = 5000
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    fast_fail_if_no_buffer_in_store_pool: bool = False
    # -- consume queue -----------------------------------------------------------------------
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    # -- index -------------------------------------------------------------------------------
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64
    # -- reads -------------------------------------------------------------------------------
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    # -- retention ---------------------------------------------------------------------------
    file_reserved_time: int = 72                    # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_maped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    clean_file_forcibly_enable: bool = True
    disk_space_warning_level_ratio: int = 90        # % (5.x int; 4.9.x -D...=0.90)
    disk_space_clean_forcibly_ratio: int = 85       # % (5.x int; 4.9.x -D...=0.85)
    delete_file_batch_max: int = 10                 # commit-log files per clean run
    clean_resource_first_delay: int = 60_000        # ours: RocketMQ's fixed first-run delay
    # -- broker metadata -------------------------------------------------------------------
    flush_consumer_offset_interval: int = 5000
    flush_delay_offset_interval: int = 10_000
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            want = f.type
            if want in ("int",) and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidConfigError(f.name, value, "expected an int")
            if want in ("bool",) and not isinstance(value, bool):
                raise InvalidConfigError(f.name, value, "expected a bool")
            if want in ("str",) and not isinstance(value, str):
                raise InvalidConfigError(f.name, value, "expected a str")
        if self.mapped_file_size_commit_log < 1024:
            raise InvalidConfigError("mapped_file_size_commit_log", self.mapped_file_size_commit_log,
                                     "must be at least 1024 bytes")
        if self.mapped_file_size_commit_log > 2**31 - 1:
            raise InvalidConfigError("mapped_file_size_commit_log", self.mapped_file_size_commit_log,
                                     "must fit a Java int (< 2 GiB), as RocketMQ's positions do")
        if self.max_message_size <= 0:
            raise InvalidConfigError("max_message_size", self.max_message_size, "must be positive")
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise InvalidConfigError("flush_disk_type", self.flush_disk_type,
                                     f"must be {ASYNC_FLUSH!r} or {SYNC_FLUSH!r}")
        if self.enabled_append_prop_crc is not None and not isinstance(self.enabled_append_prop_crc, bool):
            raise InvalidConfigError("enabled_append_prop_crc", self.enabled_append_prop_crc,
                                     "expected a bool or None")
        if self.store_path_commit_log is not None and not isinstance(self.store_path_commit_log, str):
            raise InvalidConfigError("store_path_commit_log", self.store_path_commit_log,
                                     "expected a str path or None")
        for name, limit in (("mapped_file_size_consume_queue", 2**31 - 1),
                            ("max_hash_slot_num", 2**31 // 4), ("max_index_num", 2**31 // 20),
                            ("sync_flush_timeout", 2**62 // 1_000_000),
                            ("flush_consumer_offset_interval", 2**62 // 1_000_000),
                            ("flush_delay_offset_interval", 2**62 // 1_000_000)):
            # RocketMQ keeps these in Java ints (file positions) or ms timers
            if getattr(self, name) > limit:
                raise InvalidConfigError(name, getattr(self, name), f"must be at most {limit}")
        for name in ("flush_consumer_offset_interval", "flush_delay_offset_interval"):
            if getattr(self, name) <= 0:
                raise InvalidConfigError(name, getattr(self, name), "must be positive")
        if self.mapped_file_size_consume_queue < CQ_UNIT_SIZE:
            raise InvalidConfigError("mapped_file_size_consume_queue",
                                     self.mapped_file_size_consume_queue, "must hold one 20-byte unit")
        # RocketMQ's getter rounds up to whole units (docs/format.md §4.1): 128 -> 140
        units = -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE)
        self.mapped_file_size_consume_queue = units * CQ_UNIT_SIZE
        for name in ("sync_flush_timeout", "flush_interval_commit_log", "transient_store_pool_size",
                     "max_hash_slot_num", "max_index_num"):
            if getattr(self, name) <= 0:
                raise InvalidConfigError(name, getattr(self, name), "must be positive")
        if self.allocation_extent < 0:
            raise InvalidConfigError("allocation_extent", self.allocation_extent,
                                     "must be 0 (whole files) or a positive number of bytes")
        for name in ("clean_resource_interval", "delete_file_batch_max"):
            if getattr(self, name) <= 0:
                raise InvalidConfigError(name, getattr(self, name), "must be positive")
        for name in ("file_reserved_time", "clean_resource_first_delay",
                     "delete_commit_log_files_interval", "delete_consume_queue_files_interval"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(name, getattr(self, name), "must not be negative")
        self.delete_when_hours()
        self.delay_levels_ms()
        from rocketstore.store._codec import encode_host
        try:
            encode_host(self.store_host)
        except ValueError as e:
            raise InvalidConfigError("store_host", self.store_host, "expected 'ip:port'") from e

    def delay_levels_ms(self) -> list[int]:
        """Delay of each level, 1-based (index 0 is 0), from ``message_delay_level``."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = [0]
        for token in self.message_delay_level.split():
            try:
                out.append(int(token[:-1]) * units[token[-1]])
            except (KeyError, ValueError):
                raise InvalidConfigError("message_delay_level", self.message_delay_level,
                                         f"token {token!r} is not <number><s|m|h|d>") from None
        return out

    def delete_when_hours(self) -> frozenset[int]:
        """Hours of the day (0-23) in ``delete_when`` (``"04"``, ``"04;16"``): expired files are
        deleted then (``UtilAll.isItTimeToDo``)."""
        hours = set()
        for token in self.delete_when.split(";"):
            token = token.strip()
            if not token:
                continue
            if not token.isdigit() or not 0 <= int(token) <= 23:
                raise InvalidConfigError("delete_when", self.delete_when,
                                         f"{token!r} is not an hour 0-23 (';'-separated list)")
            hours.add(int(token))
        return frozenset(hours)

    def disk_ratios(self) -> tuple[float, float, float]:
        """(max used, clean forcibly, warning) disk-usage ratios as fractions, clamped as
        RocketMQ's getters clamp them: [10, 95] %, [30, 85] %, [35, 90] % (docs/format.md §9)."""
        used = min(max(self.disk_max_used_space_ratio, 10), 95) / 100.0
        forcibly = min(max(self.disk_space_clean_forcibly_ratio, 30), 85) / 100.0
        warning = min(max(self.disk_space_warning_level_ratio, 35), 90) / 100.0
        return used, forcibly, warning

    def commit_log_path(self, root: str | None = None) -> str:
        """Directory of the commit-log files."""
        if self.store_path_commit_log:
            return self.store_path_commit_log
        return os.path.join(root or self.store_path_root_dir, "commitlog")

    def replace(self, **changes) -> "StoreConfig":
        """A copy with some settings changed (validated again)."""
        return dataclasses.replace(self, **changes)
