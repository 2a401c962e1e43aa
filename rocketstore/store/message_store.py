"""MessageStore: the public facade over one store directory (docs/design.md "Public API").

Opening for writing takes the directory's ``lock`` file (one writer process per store), loads
the commit-log and consume-queue files, recovers the end of valid data, truncates consume-queue
units past it, dispatches records the queues have not seen yet, takes each queue's next offset
from its consume queue and creates the ``abort`` marker; a clean ``close()`` dispatches and
flushes everything and removes it, so the next open knows whether the previous one ended
cleanly (docs/format.md §8). Opening ``read_only`` takes no lock, writes nothing and follows what the
writer process dispatches.

Thread-safe: puts are serialised by the commit log's put lock; the dispatch service appends
consume-queue units; reads take no lock.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from rocketstore.store import _reader, integrity, paths, storedir
from rocketstore.store._codec import BLANK_MAGIC_CODE, Message, MessageExt, decode_msg_id
from rocketstore.store._commitlog import CommitLog, PutMessageResult
from rocketstore.store._dispatch import DispatchCore
from rocketstore.store.fault_ahead import FaultAheadService
from rocketstore.store._mapped import fsync_dir, metadata_event
from rocketstore.store._reader import GetMessageResult, ReadLimits, TagFilter
from rocketstore.store.allocate import AllocateMappedFileService
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.cleanup import RETIRE_GRACE_S, CleanResult, CleanupService
from rocketstore.store.index import IndexService
from rocketstore.store.config import StoreConfig
from rocketstore.store.consumequeue import ConsumeQueueStore, unit_runs
from rocketstore.store.dispatch import ArrivalNotifier, DispatchService
from rocketstore.store.fsutil import makedirs_durable
from rocketstore.store.flush import (CommitRealTimeService, FlushAckService,
                                    FlushConsumeQueueService, FlushRealTimeService,
                                    GroupCommitService)
from rocketstore.errors import (CorruptionError, DispatchStalledError, InvalidArgumentError,
                                InvalidArgumentTypeError, InvalidConfigError, InvalidMessageError,
                                InvalidMessageIdError, NotDurableError,
                                InvalidMessageTypeError, SlaveStoreError, StoreClosedError,
                                StoreLockedError,
                                StoreReadOnlyError, TopicPermissionError)
from rocketstore.store.configfile import ConfigFile
from rocketstore.store.mapped_file_queue import MappedFileQueue
from rocketstore.store.names import check_name
from rocketstore.store.offsets import ConsumerOffsetManager
from rocketstore.store.status import BoundaryType, GetMessageStatus
from rocketstore.store.topics import TopicConfig, TopicConfigManager
from rocketstore.store.transient_pool import TransientStorePool

_PHYS_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

log = logging.getLogger("rocketstore.store")

# Locks taken in this process, by real path: flock conflicts between two open file
# descriptions of one process, but we also want a clear error before even trying.
_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


MAX_TIMEOUT_MS = 10**12        # ~31 years: longer is a mistake, not a wait


def _java_long(name: str, value: Any) -> int:
    """``value`` when it is an int that fits a Java long (what offsets and times are on
    disk), else the rocketstore error naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", type(value).__name__)
    if not -(1 << 63) <= value < (1 << 63):
        raise InvalidArgumentError(name, value, "outside the 64-bit signed range (a Java long)")
    return value


def _check_timeout(timeout_ms: Any) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
        raise InvalidArgumentTypeError("timeout_ms", "int or float (ms)", type(timeout_ms).__name__)
    if not 0 <= timeout_ms <= MAX_TIMEOUT_MS:       # NaN fails both comparisons
        raise InvalidArgumentError("timeout_ms", timeout_ms,
                                   f"must be a number of ms in [0, {MAX_TIMEOUT_MS}]")


RECORD_CRC_FILE = "recordCrc.json"     # ours: where the record CRC starts (config/)


def _decode_record_crc(doc: Any) -> int:
    v = doc.get("recordCrcFrom") if isinstance(doc, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < -1:
        raise ValueError(f"recordCrcFrom is {v!r}, not an offset or -1")
    return v


DELETED_TOPICS_FILE = "deletedTopics.json"   # ours: {topic: offset} of deleted topics (config/)


def _decode_deleted_topics(doc: Any) -> dict[str, int]:
    if not isinstance(doc, dict):
        raise ValueError("not an object of topic: offset")
    out = {}
    for k, v in doc.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{k!r}: {v!r} is not a topic and an offset")
        out[k] = v
    return out


class QueueInfo(NamedTuple):
    """One consume queue: its first stored offset and one past its last dispatched one."""
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int


class _Progress:
    """A progress line on stderr for long recoveries, when stderr is a terminal."""

    def __init__(self, what: str, total: int) -> None:
        import sys
        self.what = what
        self.total = total
        self.stream = sys.stderr
        self.on = total >= (1 << 30) and self.stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, done: int) -> None:
        if not self.on or time.monotonic() - self.last < 0.2:
            return
        self.last = time.monotonic()
        rate = done / max(self.last - self.t0, 1e-9) / 1e9
        self.stream.write(f"\r{self.what}: {done * 100 // max(self.total, 1)}% "
                          f"({done / 1e9:.1f} of {self.total / 1e9:.1f} GB, {rate:.2f} GB/s)")
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\n")
            self.stream.flush()


class _StoreLock:
    """The ``lock`` file held with flock (other opens) and fcntl on byte 0 (a Java broker:
    FileChannel.tryLock is a POSIX record lock). Holds the 4 ASCII bytes ``lock``.

    The commit-log directory is locked too, by a flock on the directory itself: two roots
    sharing one (``store_path_commit_log``) would write over each other's records, and a
    file of our own in it would stop a RocketMQ broker loading the commit log.
    """

    def __init__(self, root: str, commit_log_dir: str | None = None) -> None:
        self.path = paths.lock_path(root)
        self.keys = [os.path.realpath(root)]
        self.dir_fd = -1
        names = [root]
        if commit_log_dir is not None:
            self.keys.append(os.path.realpath(commit_log_dir))
            names.append(commit_log_dir)
        with _open_paths_lock:
            for key, name in zip(self.keys, names):
                if key in _open_paths:
                    raise StoreLockedError(name)
            _open_paths.update(self.keys)
        self.fd = -1
        try:
            if not os.path.exists(self.path):
                metadata_event("create", self.path)     # the one sync function sees it
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._try(self.fd, True, root)
            if len(self.keys) > 1:
                makedirs_durable(self.keys[1])
                self.dir_fd = os.open(self.keys[1], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                self._try(self.dir_fd, False, names[1])
        except BaseException:
            self.release()
            raise
        os.pwrite(self.fd, b"lock", 0)

    @staticmethod
    def _try(fd: int, record_lock: bool, what: str) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if record_lock:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(what) from None
            raise

    def release(self) -> None:
        for fd in (self.dir_fd, self.fd):
            if fd >= 0:
                os.close(fd)        # drops its locks
        self.fd = self.dir_fd = -1
        with _open_paths_lock:
            _open_paths.difference_update(self.keys)


def create_abort_marker(root: str) -> None:
    """Create the ``abort`` file (the next open runs abnormal recovery) durably, through the
    one sync function: a power loss after it must still mean "recover"."""
    path = paths.abort_path(root)
    metadata_event("create", path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    os.close(fd)
    fsync_dir(root)


class MessageStore:
    """A RocketMQ-compatible message store in one directory.

    Use ``MessageStore.open(path, config)``; the store is a context manager.

    Examples
    --------
    >>> import tempfile
    >>> from rocketstore import MessageStore, Message, StoreConfig
    >>> with MessageStore.open(tempfile.mkdtemp(), StoreConfig(mapped_file_size_commit_log=65536)) as store:
    ...     r = store.put_message(Message("TopicA", b"hello", tags="TagA"))
    ...     store.look_message_by_offset(r.commitlog_offset).tags
    'TagA'
    """

    def __init__(self, root: str, config: StoreConfig, lock: _StoreLock | None,
                 read_only: bool = False) -> None:
        self.root = root
        self.config = config
        self.read_only = read_only
        self._lock = lock
        self._closed = False
        self._closing = threading.Event()     # wakes read-only long polls at close()
        self._dispatch_stall: DispatchStalledError | None = None
        self.close_errors: list[BaseException] = []
        self.recovery: dict[str, Any] = {}
        self.slave_refusal: BaseException | None = None   # set_slave(): puts refused
        self.flush_service: FlushRealTimeService | GroupCommitService | None = None
        self.cq_flush_service: FlushConsumeQueueService | None = None
        self.commit_service: CommitRealTimeService | None = None
        self.transient_pool: TransientStorePool | None = None
        self.cleanup_service: CleanupService | None = None
        self.fault_ahead_service: FaultAheadService | None = None
        self._retention_checked = 0.0       # read-only: last look for deleted files
        self.last_exit_ok = not os.path.exists(paths.abort_path(root))
        self.allocator = AllocateMappedFileService(
            warm=config.warm_maped_file_enable, mlock=config.mlock_maped_file,
            flush_pages=(config.flush_least_pages_when_warm_maped_file
                         if config.flush_disk_type == "SYNC_FLUSH" else 0))
        self.commit_log_queue = MappedFileQueue(config.commit_log_path(root),
                                                config.mapped_file_size_commit_log,
                                                allocator=None if read_only else self.allocator,
                                                read_only=read_only, extent=config.allocation_extent)
        self.consume_queues = ConsumeQueueStore(
            root, config.mapped_file_size_consume_queue, read_only=read_only,
            min_phy_offset=lambda: max(0, self.commit_log_queue.get_min_offset()))
        self.notifier = ArrivalNotifier()
        self._limits = ReadLimits(config.max_transfer_bytes_on_message_in_memory,
                                  config.max_transfer_count_on_message_in_memory,
                                  config.max_transfer_bytes_on_message_in_disk,
                                  config.max_transfer_count_on_message_in_disk,
                                  _PHYS_MEMORY * config.access_message_in_memory_max_ratio // 100)
        self._tag_filters: dict[Any, TagFilter] = {}
        self._read_forbidden: set[str] = set()
        self._topic_rules_on = True
        self.checkpoint = StoreCheckpoint(paths.checkpoint_path(root), read_only=read_only)
        self.index_service = IndexService(paths.index_dir(root), config.max_hash_slot_num,
                                          config.max_index_num, self.checkpoint,
                                          read_only=read_only,
                                          max_msgs_num_batch=config.max_msgs_num_batch)
        self.topic_config_manager = TopicConfigManager(paths.config_dir(root))
        self.consumer_offset_manager = ConsumerOffsetManager(paths.config_dir(root),
                                                             config.flush_consumer_offset_interval)
        try:
            self.commit_log_queue.load()
            self.consume_queues.load(self.last_exit_ok)
            if config.message_index_enable:
                self.index_service.load(self.last_exit_ok)
            if not read_only:
                # the files loaded (a refusal there changes nothing); before recovery writes
                # anything (files it creates, the tail it zeroes), a power cut from here on
                # must make the next open recover
                self._create_abort()
            self.commit_log = CommitLog(self.commit_log_queue, store_host=config.store_host,
                                        max_message_size=config.max_message_size)
            self.commit_log.prop_crc = config.enabled_append_prop_crc is not False
            self.commit_log.set_v1_only(not config.auto_message_version_on_topic_len)
            self.flush_ack = FlushAckService(self.commit_log, config.sync_flush_timeout)
            self.put_acks: Any = self.flush_ack     # who completes async puts (set_put_acks)
            self.dispatch_core = DispatchCore(self.commit_log_queue,
                                              self.consume_queues.find_or_create,
                                              config.delay_levels_ms())
            if config.message_index_enable and not read_only:
                self.dispatch_core.set_index(self.index_service)
            self._record_crc = ConfigFile(os.path.join(paths.config_dir(root), RECORD_CRC_FILE))
            self._set_record_crc_from(self._load_record_crc_from())
            self._deleted_topics = ConfigFile(os.path.join(paths.config_dir(root),
                                                           DELETED_TOPICS_FILE))
            self.dispatch_core.deleted_before = self._load_deleted_topics()
            self.dispatch_service = DispatchService(self.dispatch_core,
                                                    self.commit_log.get_max_offset,
                                                    self.commit_log, self.notifier)
            self.dispatch_service.on_error = self._dispatch_failed
            self.topic_config_manager.load()
            self.consumer_offset_manager.load()
            if read_only:
                self._open_read_only()
            else:
                self._recover()
                if config.transient_store_pool_enable and config.flush_disk_type == "ASYNC_FLUSH":
                    # only new files borrow buffers; recovered ones are written in place
                    self.transient_pool = TransientStorePool(
                        config.transient_store_pool_size, config.mapped_file_size_commit_log)
                    self.commit_log.set_transient_pool(
                        self.transient_pool, config.fast_fail_if_no_buffer_in_store_pool)
                for name, tc in self.topic_config_manager.all().items():
                    self._apply_topic_rule(tc)
                self._mark_record_crc()
                self._start_flush()
                if not config.warm_maped_file_enable and self.transient_pool is None:
                    self.fault_ahead_service = FaultAheadService(self.commit_log)
                    self.fault_ahead_service.start()
                self.consumer_offset_manager.start()
                self.dispatch_service.start()
                # the hot calls go straight to the compiled commit log (no Python frame per
                # put); it checks types and the closed state itself
                self.put_message = self.commit_log.put_message  # type: ignore[method-assign]
                self.put_messages = self.commit_log.put_messages  # type: ignore[method-assign]
                self.put_message_async = functools.partial(  # type: ignore[method-assign]
                    self.commit_log.put_message_async, acks=self.flush_ack)
                self.put_messages_async = functools.partial(  # type: ignore[method-assign]
                    self.commit_log.put_messages_async, acks=self.flush_ack)
                self.cleanup_service = CleanupService(self, config)
                self.cleanup_service.start()
        except BaseException:
            self._release_files()
            raise

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None,
             config: StoreConfig | None = None, *, read_only: bool = False) -> "MessageStore":
        """Open (creating when missing) the store at ``path``; only one writer at a time.

        ``path`` defaults to ``config.store_path_root_dir``. An existing store keeps the file
        geometry it was written with: settings left at their defaults
        (``mapped_file_size_commit_log``, ``mapped_file_size_consume_queue``,
        ``max_hash_slot_num``/``max_index_num``) take the sizes of its files, and a given
        setting its files contradict raises ``InvalidConfigError`` naming both values
        (``store.config`` holds what was used). Raises ``StoreLockedError`` when
        another process, or another open store object, holds the directory. With
        ``read_only=True`` no lock is taken and nothing is written: the store follows what a
        writer in another process dispatches.
        """
        config = config if config is not None else StoreConfig()
        if not isinstance(config, StoreConfig):
            raise InvalidMessageTypeError("config", "StoreConfig", type(config).__name__)
        root = os.fspath(path) if path is not None else config.store_path_root_dir
        if os.path.exists(root) and not os.path.isdir(root):
            raise InvalidConfigError("path", root, "is a file, not a store directory")
        if read_only:
            if not os.path.isdir(root):
                raise FileNotFoundError(2, "no store directory", root)
            return cls(root, storedir.config_for_files(root, config), None, read_only=True)
        makedirs_durable(root)
        lock = _StoreLock(root, config.commit_log_path(root))
        try:
            return cls(root, storedir.config_for_files(root, config), lock)
        except BaseException:
            lock.release()
            raise

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Dispatch and flush everything, stop the services, remove ``abort``, unlock.

        Message bodies already read stay valid (they pin their mapping). Idempotent. The
        ``abort`` marker stays when dispatch could not catch up, so the next open recovers.
        """
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self.read_only:
            self._release_files()
            return
        try:
            step = self._close_step
            if self.cleanup_service is not None:
                step(self.cleanup_service.shutdown)
            step(self.commit_log.close)
            if self.fault_ahead_service is not None:
                step(self.fault_ahead_service.shutdown)
            if self.commit_service is not None:
                step(self.commit_service.shutdown)      # everything into the files, then flush
            if self.flush_service is not None:
                step(self.flush_service.shutdown)
            step(self.flush_ack.shutdown)       # after the last flush: completes every future
            if self.cq_flush_service is not None:
                step(self.cq_flush_service.shutdown)
            step(self.dispatch_service.shutdown)
            step(self.consumer_offset_manager.shutdown)
            step(self.allocator.shutdown)
            step(self.notifier.close)
            if self.commit_log.flush_error is None:
                step(self.commit_log_queue.flush, 0)
            step(self.consume_queues.flush, 0)
            step(self.index_service.flush)
            step(self._checkpoint_at_close)
            # a failed sync leaves what it covered of unknown durability: keep `abort`, so
            # the next open scans and re-dispatches as after a crash (docs/recovery.md)
            caught_up = (not self.close_errors and self.commit_log.flush_error is None
                         and self.dispatch_service.error is None
                         and self.dispatch_service.dispatch_behind_bytes() == 0
                         and (self.transient_pool is None
                              or self.transient_pool.uncommitted_bytes() == 0))
            if self.transient_pool is not None:
                step(self.transient_pool.close)
            step(self._release_files)
            if caught_up:
                step(self._remove_abort)
        finally:
            if self._lock is not None:
                self._lock.release()

    def _close_step(self, fn, *args) -> None:
        # close() never raises halfway (a full disk, a failed sync): each step runs, what
        # failed is logged and kept in close_errors, and abort stays for the next open
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - logged and kept
            log.error("%s: closing: %s failed: %s", self.root, getattr(fn, "__qualname__", fn), e)
            self.close_errors.append(e)

    def _checkpoint_at_close(self) -> None:
        logics = max((q.get_last_store_timestamp() for q in self.consume_queues.queues()),
                     default=0)
        last = self.commit_log_queue.last_file()
        if self.commit_log.flush_error is None:
            if last is not None and last.store_timestamp:
                self.checkpoint.physic_msg_timestamp = last.store_timestamp
            elif not self.checkpoint.physic_msg_timestamp and logics:
                # nothing put since a recovery that started from a zeroed checkpoint: the
                # last dispatched record is flushed and no later than the log's end
                self.checkpoint.physic_msg_timestamp = logics
        if logics:
            self.checkpoint.logics_msg_timestamp = logics
        self.checkpoint.flush()

    def _remove_abort(self) -> None:
        try:
            metadata_event("delete", paths.abort_path(self.root))
            os.unlink(paths.abort_path(self.root))
            fsync_dir(self.root)
        except FileNotFoundError:
            pass

    # -- service health ------------------------------------------------------------------------

    def service_errors(self) -> dict[str, BaseException]:
        """What the store's services are failing on now, by service (empty when all is
        well): ``dispatch`` (retrying; puts are refused meanwhile), ``flush`` (a failed
        sync: sticky, the store is read-only), ``disk_full``, ``consumer_offset_persist``
        and ``cleanup`` (retried each round)."""
        out: dict[str, BaseException] = {}
        if self.read_only:
            return out
        if self.dispatch_service.error is not None:
            out["dispatch"] = self.dispatch_service.error
        if self.commit_log.flush_error is not None:
            out["flush"] = self.commit_log.flush_error
        if self.consumer_offset_manager.error is not None:
            out["consumer_offset_persist"] = self.consumer_offset_manager.error
        cleanup = self.cleanup_service
        if cleanup is not None:
            if cleanup._disk_full is not None:
                out["disk_full"] = cleanup._disk_full
            if cleanup.error is not None:
                out["cleanup"] = cleanup.error
        return out

    def _dispatch_failed(self, error: BaseException | None) -> None:
        self._dispatch_stall = None if error is None else DispatchStalledError(
            self.dispatch_core.reput_offset, self.dispatch_service.dispatch_behind_bytes(), error)
        self.refresh_put_refusal()

    def refresh_put_refusal(self) -> None:
        """Refuse puts (SERVICE_NOT_AVAILABLE with the cause) while a sync has failed, the
        disk is full or dispatch is stalled; accept them again when none holds."""
        cl = self.commit_log
        cleanup = self.cleanup_service
        cl.set_not_writeable(self.slave_refusal or cl.flush_error
                             or (cleanup._disk_full if cleanup is not None else None)
                             or self._dispatch_stall)

    def set_slave(self, slave: bool) -> None:
        """A SLAVE broker's store: every put is refused (SERVICE_NOT_AVAILABLE with
        ``SlaveStoreError``); only ``CommitLog.append_replicated`` writes the log."""
        self.slave_refusal = SlaveStoreError(self.root) if slave else None
        self.refresh_put_refusal()

    def set_put_acks(self, acks: Any) -> None:
        """Have ``acks`` complete the async puts that wait (``defer``) instead of the flush
        acknowledgement: a SYNC_MASTER's replica wait (``rocketstore.ha.acks``)."""
        self.put_acks = acks
        self.put_message_async = functools.partial(  # type: ignore[method-assign]
            self.commit_log.put_message_async, acks=acks)
        self.put_messages_async = functools.partial(  # type: ignore[method-assign]
            self.commit_log.put_messages_async, acks=acks)

    def _release_files(self) -> None:
        if self.fault_ahead_service is not None:
            self.fault_ahead_service.shutdown()     # before any file is unmapped
        self.allocator.shutdown()
        self.consume_queues.close()
        self.commit_log_queue.close()
        self.index_service.close()
        self.checkpoint.close()

    # -- the record CRC range ------------------------------------------------------------------

    def _load_record_crc_from(self) -> int:
        try:
            v = self._record_crc.load(_decode_record_crc)
        except CorruptionError as e:
            log.warning("%s; the record CRC is checked where present only", e)
            return -1
        return -1 if v is None else v

    def _set_record_crc_from(self, offset: int) -> None:
        self.commit_log_queue.record_crc_from = offset
        self.dispatch_core.crc_from = offset

    def _mark_record_crc(self) -> None:
        """Record from which commit-log offset on every record carries the record CRC (the
        end of the recovered log when the option is turned on), or that none must (off): a
        record there without it is damaged, whatever hid the property."""
        start = self.commit_log_queue.record_crc_from
        if self.commit_log.prop_crc and start < 0:
            start = self.commit_log.get_max_offset()
        elif not self.commit_log.prop_crc:
            start = -1
        if start != self._load_record_crc_from():
            self._record_crc.persist({"recordCrcFrom": start})
        self._set_record_crc_from(start)

    def _load_deleted_topics(self) -> dict[str, int]:
        try:
            return self._deleted_topics.load(_decode_deleted_topics) or {}
        except CorruptionError as e:
            log.warning("%s; deleted topics are not filtered", e)
            return {}

    def bad_records(self) -> list[tuple[int, str]]:
        """(commit-log offset, reason) of every record of this store that failed its integrity
        check (record CRC, body CRC, PHYSICALOFFSET) or could not be dispatched (topic, queue
        id or queue offset no queue can hold), as recovery and the read paths met them: none
        of them is ever handed out."""
        return integrity.reported(self.commit_log_queue.store_path)

    def metadata_resets(self) -> list[dict[str, str]]:
        """Metadata files of this store (``config/``) that could not be read at open and
        what was reset or rebuilt instead (file, path, problem, action), in this process:
        each was also logged as an ERROR. The broker's runtime info shows them
        (``metadataResets``)."""
        from rocketstore.store import configfile
        return configfile.resets(paths.config_dir(self.root))

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store " + self.root)

    # -- recovery ------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Find the end of valid data, drop what lies past it, catch dispatch up.

        After a clean close only the last 3 files are walked and CRC-checked (RocketMQ's
        normal recovery); after a crash (``abort`` present) every file is. Consume-queue units
        pointing past the end are truncated; records past the queues' end are dispatched now;
        each queue's next offset is then its consume queue's max offset.
        """
        t0 = time.perf_counter()
        self.consume_queues.recover()
        files = self.commit_log_queue.files
        if self.last_exit_ok:
            start = max(0, len(files) - 3)
        else:
            start = self._abnormal_start(files)
        end = files[0].file_from_offset if files else 0
        scanned = messages = 0
        total = sum(mf.file_size for mf in files[start:])
        progress = _Progress("recovering commit log", total)
        blanked = 0
        for i in range(start, len(files)):
            mf = files[i]
            # after a clean close, note each queue's next offset as the log has it: a queue
            # whose consume queue ends before that lost units to damage (checked below)
            end_pos, count, blank = self.commit_log.scan_file(mf, self.config.check_crc_on_recover,
                                                              self.last_exit_ok)
            scanned += end_pos
            messages += count
            end = mf.file_from_offset + end_pos
            progress.update(scanned)
            if not blank and i + 1 < len(files) and end_pos + 8 <= mf.file_size \
                    and self.commit_log.next_record(files[i + 1].file_from_offset)[0] is not None:
                # a break inside the log, and the next file starts with a valid record: end
                # this file at the break with a blank record (what the rest of it held cannot
                # be read) and keep the files after it (docs/recovery.md)
                blanked += self._blank_rest(mf, end_pos)
                end = mf.file_from_offset + mf.file_size
                continue
            if not blank:
                break
        progress.close()
        scan_seconds = time.perf_counter() - t0
        # what lies past the end: the torn record's claimed size, and the files dropped
        tail_mf = self.commit_log_queue.find_mapped_file_by_offset(end)
        torn = 0
        if tail_mf is not None and end - tail_mf.file_from_offset + 8 <= tail_mf.file_size:
            head = tail_mf.read_bytes(end - tail_mf.file_from_offset, 4)
            torn = max(0, int.from_bytes(head, "big", signed=True))
        files_dropped = sum(1 for mf in files if mf.file_from_offset > end)
        self.commit_log_queue.truncate_dirty_files(end)
        zeroed = self._zero_tail(end)
        self.commit_log.reset_write_file()
        if not self.last_exit_ok and files:
            # units written after the checkpoint may be torn or point at records a power loss
            # took: drop every unit from the re-dispatch start on and rebuild them from the
            # commit log, the one source of truth (units before it were synced before the
            # checkpoint was)
            self.consume_queues.truncate_dirty(min(end, files[start].file_from_offset))
        elif self.consume_queues.max_physic_offset() > end:
            self.consume_queues.truncate_dirty(end)
        min_phy = max(0, self.commit_log.get_min_offset())
        rebuild_from, queues_cut = -1, []
        if not self.last_exit_ok and files:
            # a cut during an earlier recovery can leave queue files whose units never
            # reached the disk (all zeros, counted as full) anywhere in a queue: check every
            # unit against the log and rebuild each queue from its first bad one
            rebuild_from, queues_cut = self.consume_queues.validate(
                self.commit_log_queue, end, min_phy)
        else:
            seen = self.commit_log.queue_offsets()
            first = self.commit_log.scan_first
            for q in self.consume_queues.queues():
                key = (q.topic, q.queue_id)
                qfiles = q.mapped_file_queue.files
                head = q.get_unit(qfiles[0].file_from_offset // 20) if qfiles else None
                if (key in first and (not qfiles or
                                      first[key][0] < qfiles[0].file_from_offset // 20)) \
                        or (min_phy == 0 and qfiles and qfiles[0].file_from_offset > 0
                            and head is not None and head[1] != 0x7FFFFFFF):
                    # units before the queue's first file are missing, yet the log holds
                    # their records (seen in the scan; or no commit-log file was ever
                    # deleted, so retention cannot have removed them, and no filler says the
                    # queue began there): rebuild the queue whole
                    self.consume_queues.drop_queue(q)
                    rebuild_from = min_phy
                    queues_cut.append(f"{q.topic}/{q.queue_id}@0")
                elif seen.get(key, 0) > q.get_max_offset_in_queue():
                    self.consume_queues.mark_suspect(q)
        if self.last_exit_ok and self.consume_queues.suspect:
            # after a clean close, only queues found cut short, out of sequence or shorter
            # than the log says (damage)
            start2, cut2 = self.consume_queues.validate(
                self.commit_log_queue, end, min_phy, queues=self.consume_queues.suspects())
            queues_cut += cut2
            if start2 >= 0:
                rebuild_from = start2 if rebuild_from < 0 else min(rebuild_from, start2)
        self.consume_queues.correct_min_offset(min_phy)
        if self.dispatch_core.index_last_phy >= end:
            # the index holds keys of records the truncation removed (queries check each
            # record, so they find nothing); the records written from ``end`` on need theirs
            self.dispatch_core.index_last_phy = end - 1
        reput = max(self.consume_queues.max_physic_offset(), min_phy)
        if self.config.message_index_enable:
            # records after the last indexed one need their keys (the queues skip them)
            last_indexed = self.index_service.last_indexed_offset()
            if last_indexed < min_phy:
                reput = min_phy
            elif self.last_exit_ok:
                # a clean close indexed every key of its last record: start after it
                _, after = self.commit_log.next_record(last_indexed)
                reput = min(reput, after if after > last_indexed else last_indexed)
            else:
                # after a crash its keys may be cut short: index it again (missing keys only)
                reput = min(reput, last_indexed)
        if not self.last_exit_ok and files:
            # after a crash every record from the checkpoint's file on is dispatched again:
            # consume-queue units and index entries written after their last flush may be lost
            reput = min(reput, max(files[start].file_from_offset, min_phy))
        if rebuild_from >= 0:
            reput = min(reput, rebuild_from)
        if self.consume_queues.damaged:
            reput = min_phy         # queue files were dropped at load: rebuild them all
        elif min_phy < reput < end and self.commit_log.next_record(reput)[1] == -1:
            # not a record start: a damaged unit (its size or offset) moved the queues' end
            # into a record, where dispatch would stop for good; dispatch the checked files
            # again instead (idempotent: units and keys already there are not rewritten)
            log.warning("%s: the consume queues end at %d, inside a record; re-dispatching "
                        "from %d", self.root, reput, files[start].file_from_offset if files else min_phy)
            reput = max(min_phy, files[start].file_from_offset if files else min_phy)
        self.dispatch_core.reput_offset = reput
        # every record found on disk is checked before it becomes a unit or an index entry
        self.dispatch_core.verify_below = end
        redispatch_from = self.dispatch_core.reput_offset
        dispatched = self.dispatch_service.do_dispatch()
        if not self.last_exit_ok or queues_cut:
            # what re-dispatch rebuilt is on disk before anything trusts it: a cut during
            # the next run must not find these files created but never written
            self.consume_queues.flush(0)
        for (topic, qid), max_offset in self.consume_queues.max_offsets().items():
            self.commit_log.set_queue_offset(topic, qid, max_offset)
        self.recovery = {
            "last_exit_ok": self.last_exit_ok,
            "files": len(files),
            "files_scanned": len(files) - start,
            "bytes_scanned": scanned,
            "messages_scanned": messages,
            "max_offset": end,
            "redispatched_from": redispatch_from,
            "messages_redispatched": dispatched,
            "torn_record_bytes": torn,
            "bytes_zeroed": zeroed,
            "files_dropped": files_dropped,
            "bytes_blanked": blanked,
            "bytes_resynced": self.commit_log.bytes_resynced,
            "queues_rebuilt": queues_cut,
            "records_skipped": self.bad_records(),
            "records_not_dispatched": self.dispatch_core.rejected,
            "scan_seconds": scan_seconds,
            "seconds": time.perf_counter() - t0,
        }

    def _start_flush(self) -> None:
        cfg = self.config
        # what recovery kept is taken as durable (a clean close flushed it; after a crash it
        # is what survived): flush it once so the claim holds
        flushed = self.commit_log_queue.flush(0)
        if self.transient_pool is not None:
            self.commit_service = CommitRealTimeService(
                self.commit_log, self.transient_pool, self._after_commit,
                cfg.commit_interval_commit_log, cfg.commit_commit_log_least_pages)
            self.commit_service.start()
        if cfg.flush_disk_type == "SYNC_FLUSH":
            self.commit_log.enable_sync_flush(cfg.sync_flush_timeout, flushed)
            self.flush_service = GroupCommitService(self.commit_log, self.checkpoint)
            self.flush_ack.start()
            # no consumer offset is persisted past a record not yet durable
            self.consumer_offset_manager.durable_barrier = functools.partial(
                self.wait_durable, "consumerOffset.json")
        else:
            self.flush_service = FlushRealTimeService(
                self.commit_log, self.checkpoint, cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval)
            self.commit_log.set_flushed(flushed)
        self.flush_service.start()
        self.cq_flush_service = FlushConsumeQueueService(
            self.consume_queues, self.commit_log, self.checkpoint,
            cfg.flush_interval_consume_queue, cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval)
        self.cq_flush_service.start()

    def _blank_rest(self, mf, pos: int) -> int:
        """Close ``mf`` at ``pos`` with an end-of-file blank record (docs/format.md §1.6)."""
        left = mf.file_size - pos
        mf.write_at(pos, struct.pack(">iI", left, BLANK_MAGIC_CODE & 0xFFFFFFFF))
        mf.set_positions(mf.file_size)
        mf.flushed_pos = min(mf.flushed_pos, pos)
        log.warning("commit log %s: unreadable from position %d, the next file is intact: "
                    "%d bytes blanked, the files after it kept", mf.path, pos, left)
        start = mf.file_from_offset + pos
        integrity.report(self.commit_log_queue.store_path, start,
                         f"damaged range [{start}, {start + left}) of {left} bytes skipped: "
                         f"no valid record starts in it (blanked at recovery)")
        return left

    def _zero_tail(self, end: int) -> int:
        """Zero what a crash left after the recovered end (a torn record, stale bytes), page
        by page until a page that is already all zeros: the files then hold only the log,
        for any reader of the directory. Returns the bytes zeroed."""
        mf = self.commit_log_queue.find_mapped_file_by_offset(end)
        if mf is None:
            return 0
        pos = end - mf.file_from_offset
        zeroed = 0
        page = 4096
        while pos < mf.file_size:
            n = min(page - pos % page, mf.file_size - pos)
            if mf.read_bytes(pos, n) == bytes(n):
                if zeroed or pos % page == 0:
                    break
            else:
                mf.write_at(pos, bytes(n))
                zeroed += n
            pos += n
        if zeroed:
            log.info("commit log: zeroed %d bytes after the recovered end %d", zeroed, end)
            mf.flushed_pos = min(mf.flushed_pos, end - mf.file_from_offset)
        return zeroed

    def _abnormal_start(self, files: list) -> int:
        """Index of the file abnormal recovery starts from (docs/format.md §8.4): the newest whose
        first record was stored no later than the checkpoint's min timestamp; 0 when none is,
        or when the checkpoint is zeroed or unreadable (a full scan)."""
        from rocketstore.store._codec import decode
        limit = self.checkpoint.min_timestamp()
        if limit <= 0 or limit > time.time() * 1000 + 86_400_000:
            return 0        # zeroed, or not a time this store could have written: scan it all
        for i in range(len(files) - 1, -1, -1):
            try:
                first = decode(files[i].view(0, min(files[i].file_size, 1 << 16)), 0)
            except (ValueError, OSError):
                continue
            if first is not None and 0 < first.store_timestamp <= limit:
                return i
        return 0

    def _open_read_only(self) -> None:
        min_phy = max(0, self.commit_log.get_min_offset())
        self.consume_queues.correct_min_offset(min_phy)
        for name, tc in self.topic_config_manager.all().items():
            self._apply_topic_rule(tc)
        self.put_message = self._refuse_write  # type: ignore[method-assign]
        self.put_messages = self._refuse_write  # type: ignore[method-assign]
        self.put_message_async = self._refuse_write  # type: ignore[method-assign,assignment]
        self.put_messages_async = self._refuse_write  # type: ignore[method-assign,assignment]

    def _refuse_write(self, *args: object, **kwargs: object) -> PutMessageResult:
        self._check_open()
        raise StoreReadOnlyError(self.root)

    def _after_commit(self) -> None:
        # committed bytes are readable now: wake the dispatch thread for them
        self.dispatch_service.wakeup()

    def _create_abort(self) -> None:
        create_abort_marker(self.root)

    # -- topics ----------------------------------------------------------------------------------

    def enforce_topic_rules(self, enforce: bool) -> None:
        """Whether topics.json's perm bits and write queue counts govern puts and gets here
        (the default). A broker turns this off: it applies RocketMQ's own rules, under which
        a plain send checks neither the topic's write perm nor its write queue count."""
        self._check_open()
        self._topic_rules_on = enforce
        for name, tc in self.topic_config_manager.all().items():
            if enforce:
                self._apply_topic_rule(tc)
            else:
                self.commit_log.set_topic_rule(name, None)
        if not enforce:
            self._read_forbidden.clear()

    def _apply_topic_rule(self, tc: TopicConfig) -> None:
        if not self._topic_rules_on:
            return
        self.commit_log.set_topic_rule(tc.topic_name, (tc.is_writeable(), tc.write_queue_nums))
        if tc.is_readable():
            self._read_forbidden.discard(tc.topic_name)
        else:
            self._read_forbidden.add(tc.topic_name)

    def update_topic_config(self, tc: TopicConfig) -> None:
        """Create or change a topic's configuration (``config/topics.json``): its perm bits and
        write queue count then govern puts, its read perm governs gets."""
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        self.topic_config_manager.update(tc)
        self._apply_topic_rule(tc)

    def delete_topic_config(self, topic: str) -> None:
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        self.topic_config_manager.delete(topic)
        self.commit_log.set_topic_rule(topic, None)
        self._read_forbidden.discard(topic)

    def delete_topic(self, topic: str) -> list[int]:
        """Delete ``topic`` as RocketMQ's ``deleteTopic`` does on a broker: its configuration,
        its consume queues and the next offset of each queue (``cleanUnusedTopic``). Its
        records stay in the commit log until retention removes them, but are never served or
        dispatched again: a topic created later under the name starts at queue offset 0,
        across reopens and crash recovery too. Committed consumer offsets are kept, as in
        RocketMQ. A put racing the deletion lands in either: deleted with the old topic, or
        the new topic's at the offset its result says. Returns the ids of the queues removed."""
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        check_name("topic", topic)
        self.delete_topic_config(topic)
        self.dispatch_service.do_dispatch()     # its queues take what was put so far

        def cut_and_reset() -> int:
            # atomic with respect to puts: a record before the cut took an old offset and is
            # deleted with the topic, one after it takes an offset of the new topic
            cut = self.commit_log.get_max_offset()
            for (t, qid) in list(self.commit_log.queue_offsets()):
                if t == topic:
                    self.commit_log.set_queue_offset(topic, qid, 0)
            return cut

        def remove() -> list[int]:
            cut = self.commit_log.under_put_lock(cut_and_reset)
            removed = self.consume_queues.remove_topic(topic)
            deleted = {t: off for t, off in self.dispatch_core.deleted_before.items()
                       if off > max(0, self.commit_log.get_min_offset())}
            deleted[topic] = cut
            self._deleted_topics.persist(deleted)
            self.dispatch_core.deleted_before = deleted
            return removed
        removed = self.dispatch_core.exclusive(remove)
        log.info("%s: topic %s deleted (%d queues)", self.root, topic, len(removed))
        return removed

    def list_topics(self) -> list[str]:
        """Topics with at least one consume queue (messages were stored), sorted; configured
        topics are in ``topic_config_manager.all()``."""
        self._check_open()
        return sorted({t for t, _ in storedir.list_queues(self.root)})

    def list_queues(self, topic: str | None = None) -> list[QueueInfo]:
        """Every consume queue (of ``topic``, or of all topics) with its min and max offset,
        sorted by topic and queue id."""
        self._check_open()
        out = []
        for t, qid in storedir.list_queues(self.root):
            if topic is None or t == topic:
                out.append(QueueInfo(t, qid, self.get_min_offset_in_queue(t, qid),
                                     self.get_max_offset_in_queue(t, qid)))
        return out

    # -- consumer offsets ------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` consumes (``consumerOffset.json``).

        Bad arguments (a negative offset, a queue id outside [0, 2**31)) raise
        ``InvalidMessageError`` / ``InvalidMessageTypeError``; as in RocketMQ, an offset may
        be committed for any queue id (a topic's queue count can shrink and grow again). Committed offsets are kept in
        memory and written to ``config/consumerOffset.json`` every
        ``flush_consumer_offset_interval`` ms (5 s by default, as RocketMQ) and at ``close()``:
        a crash loses the commits of the last few seconds -- the group then consumes those
        messages again (at-least-once). Call ``persist_offsets()`` to write them now.
        """
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        self.consumer_offset_manager.commit_offset(group, topic, queue_id, offset)

    def wait_durable(self, what: str = "progress", timeout_ms: int | None = None) -> None:
        """Under SYNC_FLUSH, return once every record appended so far is durable (puts that
        did not wait, ``WAIT=false``, included: the group commit syncs them within ~10 ms);
        raise ``NotDurableError`` naming ``what`` after ``timeout_ms`` (default
        ``sync_flush_timeout``) or a failed sync. Under ASYNC_FLUSH it returns at once: that
        mode promises nothing past its flush interval. Callers persist progress (offsets)
        only after this, so progress never points past records a power cut can lose."""
        if self.read_only or self.config.flush_disk_type != "SYNC_FLUSH":
            return
        cl = self.commit_log
        end = cl.get_max_offset()
        flushed = cl.flushed_where
        if flushed >= end:
            return
        cl.request_flush(end)
        wait = self.config.sync_flush_timeout if timeout_ms is None else timeout_ms
        flushed, _, _ = cl.wait_flushed(end, wait)
        if flushed < end:
            raise NotDurableError(what, end, flushed)

    def persist_offsets(self) -> None:
        """Write every committed consumer offset to ``config/consumerOffset.json`` now
        (atomically, synced), instead of at the next ``flush_consumer_offset_interval``."""
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        self.consumer_offset_manager.persist()

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset of ``group`` in the queue, or -1."""
        self._check_open()
        return self.consumer_offset_manager.query_offset(group, topic, queue_id)

    # -- puts ----------------------------------------------------------------------------------

    def put_message(self, msg: Message, queue_id: int = 0) -> PutMessageResult:
        """Append ``msg`` to ``queue_id`` of its topic.

        Returns a ``PutMessageResult`` (``status``, ``msg_id``, ``queue_offset``,
        ``commitlog_offset``, ...). Bad input raises ``InvalidMessageError`` and writes nothing.
        A topic in ``topics.json`` (``update_topic_config``) refuses a queue id at or past
        its ``write_queue_nums`` (MESSAGE_ILLEGAL); a topic not configured takes any queue id
        in [0, 2**31), creating the queue, as RocketMQ's store does. The message becomes
        visible to ``get_message`` once dispatched: see ``wait_dispatched``.
        """
        return self.commit_log.put_message(msg, queue_id)

    def put_messages(self, msgs: Sequence[Message], queue_id: int = 0) -> PutMessageResult:
        """Append a batch of one topic to one queue with consecutive queue offsets."""
        return self.commit_log.put_messages(msgs, queue_id)

    def put_message_async(self, msg: Message, queue_id: int = 0, *,
                          transform: Any = None) -> Future[PutMessageResult]:
        """``put_message`` without waiting: a ``concurrent.futures.Future`` of its result.

        Under SYNC_FLUSH the future completes once a sync made the record durable (the
        group-commit service completes every future its sync covered at once; no thread waits
        per put), or with FLUSH_DISK_TIMEOUT when the sync fails or takes longer than
        ``sync_flush_timeout``; never PUT_OK before the bytes are on disk. Otherwise (ASYNC_FLUSH,
        ``WAIT=false``, a refused put) it is already complete. From asyncio:
        ``await asyncio.wrap_future(store.put_message_async(msg))``. Bad input raises here.
        ``transform``: the future's value is ``transform(result)`` instead (computed by the
        completing thread; a broker turns the result into its response without a second future).
        """
        return self.commit_log.put_message_async(msg, queue_id, self.flush_ack, transform)

    def put_messages_async(self, msgs: Sequence[Message], queue_id: int = 0, *,
                           transform: Any = None) -> Future[PutMessageResult]:
        """``put_messages`` without waiting; see ``put_message_async``."""
        return self.commit_log.put_messages_async(msgs, queue_id, self.flush_ack, transform)

    def dispatch_behind_bytes(self) -> int:
        """Commit-log bytes not yet dispatched to consume queues (consumers cannot see them)."""
        self._check_open()
        if self.read_only:
            return 0
        return self.dispatch_service.dispatch_behind_bytes()

    def wait_dispatched(self, timeout: float | None = None, *,
                        until: PutMessageResult | int | None = None) -> bool:
        """Wait until what was put so far is visible to ``get_message`` (read-your-writes).

        Puts return once their record is in the commit log; the dispatch thread then appends
        its consume-queue unit (and index entries), usually within a millisecond or two but
        longer under load. Until then ``get_message`` answers NO_MESSAGE_IN_QUEUE or
        OFFSET_OVERFLOW_ONE and ``get_max_offset_in_queue`` has not moved. This waits for
        every record readable at the call, or with ``until`` (a ``PutMessageResult`` or a
        commit-log offset) for that record; with ``transient_store_pool_enable`` pass the
        result, as its bytes become readable only at the next commit (at most
        ``commit_interval_commit_log`` ms). Returns False when ``timeout`` seconds passed
        first (or dispatch stopped on an error, ``store.dispatch_service.error``).
        """
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(self.root)
        if until is None:
            target = self.dispatch_service.bound()
        elif isinstance(until, PutMessageResult):
            if not until.ok:
                raise InvalidMessageError("until", until.status, "the put failed: nothing to wait for")
            target = until.commitlog_offset + until.wrote_bytes
        elif isinstance(until, int) and not isinstance(until, bool):
            target = until
        else:
            raise InvalidMessageTypeError("until", "PutMessageResult or int", type(until).__name__)
        svc = self.dispatch_service

        def visible() -> bool:
            return svc.reput_offset >= target or svc.error is not None or self._closed
        if not self.notifier.wait(visible, timeout):
            return False
        return svc.reput_offset >= target

    # -- consume queues --------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int, offset: int = -1):
        if not self.read_only:
            per_topic = self.consume_queues._queues.get(topic)
            if per_topic is not None:
                cq = per_topic.get(queue_id)
                if cq is not None:
                    return cq
        if not isinstance(topic, str):
            raise InvalidMessageTypeError("topic", "str", type(topic).__name__)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise InvalidMessageTypeError("queue_id", "int", type(queue_id).__name__)
        cq = self.consume_queues.find(topic, queue_id)
        if cq is not None and self.read_only:
            self._follow_retention(cq, offset)
            cq.refresh()
            max_offset = cq.get_max_offset_in_queue()
            if max_offset > cq.get_min_offset_in_queue():
                last = cq.get_unit(max_offset - 1)
                # the writer's newest record must be readable: if not, it rolled to a file we
                # have not mapped, or replaced one we have (a restart)
                if last is not None and (last[0] + last[1] > self.commit_log_queue.get_max_offset()
                                         or self.commit_log.get_message(last[0]) is None):
                    self.commit_log_queue.refresh_files()
                    for mf in self.commit_log_queue.files:
                        if mf.committed_pos == 0:
                            mf.set_positions(mf.file_size)
        return cq

    def _follow_retention(self, cq, offset: int) -> None:
        """Read-only: drop the files the writer's retention deleted at the front (commit log,
        this queue) and move min offsets past them. Looked for at most once a second, and
        on every read from the queue's first file (where deleted data would be served)."""
        files = cq.mapped_file_queue.files
        if offset < 0 or not files or offset * 20 >= files[0].file_from_offset + cq.file_size:
            now = time.monotonic()
            if now - self._retention_checked < 1.0:
                return
            self._retention_checked = now
        cl = self.commit_log_queue
        dropped = cl.drop_deleted_front()
        if dropped:
            min_phy = max(0, cl.get_min_offset())
            for q in self.consume_queues.queues():
                q.mapped_file_queue.drop_deleted_front()
                q.correct_min_offset(min_phy)
            self.index_service.drop_deleted_front()
            self.index_service.release_retired(RETIRE_GRACE_S)
        elif cq.mapped_file_queue.drop_deleted_front():
            cq.correct_min_offset(max(0, cl.get_min_offset()))
        if cl.retired_count:
            cl.release_retired(RETIRE_GRACE_S)
        if cq.mapped_file_queue.retired_count:
            cq.mapped_file_queue.release_retired(RETIRE_GRACE_S)

    def _tag_filter(self, tags: Any) -> TagFilter | None:
        # RocketMQ's FilterAPI: None, "" and "*" subscribe to every message
        if tags is None or (isinstance(tags, str) and tags.strip() in ("", "*")):
            return None
        f = self._tag_filters.get(tags) if isinstance(tags, (str, tuple)) else None
        if f is not None:
            return f
        if isinstance(tags, str):
            wanted = [t.strip() for t in tags.split("||") if t.strip()]
        elif isinstance(tags, (list, tuple, set, frozenset)):
            wanted = list(tags)
            for t in wanted:
                if not isinstance(t, str) or not t:
                    raise InvalidMessageTypeError("tags", "non-empty str", type(t).__name__)
        else:
            raise InvalidMessageTypeError("tags", "str or list of str", type(tags).__name__)
        if not wanted or wanted == ["*"]:
            return None
        try:
            f = TagFilter(wanted)
        except ValueError as e:
            raise InvalidMessageError("tags", tags, str(e), limit=8) from None
        if isinstance(tags, (str, tuple)) and len(self._tag_filters) < 1024:
            self._tag_filters[tags] = f
        return f

    def get_message(self, group: str, topic: str, queue_id: int, offset: int,
                    max_msgs: int = 32, max_bytes: int | None = None, tags: Any = None, *,
                    timeout_ms: int = 0, raw: bool = False) -> GetMessageResult:
        """Up to ``max_msgs`` messages of a queue from queue ``offset`` (docs/format.md §13).

        ``group`` names the consumer group asking; the store does not use it (RocketMQ's
        signature: a broker uses it for offsets and filters) -- commit progress with
        ``commit_offset(group, ...)``. ``tags``: None or ``"*"`` for every message; a tag,
        ``"TagA || TagB"`` or a list of up to 8 tags. With ``timeout_ms`` a get that finds
        nothing new waits (long polling) for the dispatcher to bring messages past
        ``offset``. Returns a ``GetMessageResult`` (``status``, ``messages``,
        ``next_begin_offset``, ``min_offset``, ``max_offset``).

        Dispatch lag: a message is readable here only once the dispatch thread has written
        its consume-queue unit, a moment after ``put_message`` returned (usually under a
        millisecond or two; tens of milliseconds under load). Right after a put a get may
        still answer NO_MESSAGE_IN_QUEUE / OFFSET_OVERFLOW_ONE: call
        ``store.wait_dispatched()`` first (read-your-writes) or pass ``timeout_ms`` (long
        polling). A consumer loop should not stop at the first empty answer.
        """
        if self._closed:
            raise StoreClosedError("store " + self.root)
        if type(offset) is not int or type(max_msgs) is not int:
            if not isinstance(offset, int) or not isinstance(max_msgs, int):
                raise InvalidMessageTypeError("offset/max_msgs", "int",
                                              f"{type(offset).__name__}/{type(max_msgs).__name__}")
        if max_msgs <= 0 or max_msgs > 0x7FFFFFFF:
            raise InvalidMessageError("max_msgs", max_msgs, "must be in [1, 2147483647]", limit=1)
        if not -(1 << 63) <= offset < (1 << 63):
            raise InvalidMessageError("offset", offset, "outside the 64-bit range", limit=(1 << 63) - 1)
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 0):
            raise InvalidMessageError("max_bytes", max_bytes, "must be a non-negative int or None")
        if self._read_forbidden and topic in self._read_forbidden:
            return _reader.make_result(GetMessageStatus.NO_PERMISSION, offset, 0, 0,
                                       TopicPermissionError(topic, "is not readable (perm in topics.json)"))
        tag_filter = None if tags is None else self._tag_filter(tags)
        cap = max(max_bytes, 100) if max_bytes is not None else 0
        _check_timeout(timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000.0 if timeout_ms > 0 else 0.0
        delay = 0.001
        while True:
            cq = self._queue(topic, queue_id, offset)
            if cq is None:
                r = _reader.make_result(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
            else:
                r = _reader.get_message(cq, self.commit_log_queue, offset, max_msgs, cap,
                                        tag_filter, self._limits,
                                        self.commit_log_queue.get_max_offset(), raw)
            # a tag-filtered poll waits for a match (docs/recovery.md): what did not match is
            # stepped over, and the wait goes on from after it
            skipped = tag_filter is not None and r.status is GetMessageStatus.NO_MATCHED_MESSAGE
            if not deadline or not skipped and r.status not in (
                    GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
                return r
            if skipped:
                offset = max(offset, r.next_begin_offset)
            left = deadline - time.monotonic()
            if left <= 0:
                return r
            if self.read_only:
                # the dispatcher lives in another process: look again after a short sleep
                if self._closing.wait(min(delay, left)):
                    return r
                delay = min(delay * 2, 0.05)
                continue

            def arrived() -> bool:
                q = self.consume_queues.find(topic, queue_id)
                return q is not None and q.get_max_offset_in_queue() > offset
            self.notifier.wait(arrived, left)
            if self._closed:
                return r
            if tag_filter is None:
                deadline = 0.0      # one more look, whatever woke us: the answer is current

    def get_message_bodies(self, topic: str, queue_id: int, offset: int,
                           max_msgs: int = 1024, max_bytes: int = 0) -> "_reader.BodyBatch":
        """The bodies of up to ``max_msgs`` messages of a queue from queue ``offset`` (at most
        ``max_bytes`` of bodies when > 0) in one buffer plus an offsets array: the bulk read
        for consumers that want raw speed (no ``MessageExt`` per message, no tag filter).

        Every record is checked first, as ``get_message`` checks it; statuses and
        ``next_begin_offset`` are ``get_message``'s. Bodies are as stored (``sys_flags`` bit 0
        marks a compressed one).
        """
        self._check_open()
        if not isinstance(offset, int) or not isinstance(max_msgs, int) \
                or not isinstance(max_bytes, int):
            raise InvalidMessageTypeError("offset/max_msgs/max_bytes", "int",
                                          f"{type(offset).__name__}/{type(max_msgs).__name__}/"
                                          f"{type(max_bytes).__name__}")
        if not 0 < max_msgs <= 1 << 24:
            raise InvalidMessageError("max_msgs", max_msgs, "must be in [1, 16777216]", limit=1 << 24)
        if not 0 <= max_bytes < 1 << 62:
            raise InvalidMessageError("max_bytes", max_bytes, "must be in [0, 2**62)")
        if not 0 <= offset < 1 << 62:
            raise InvalidMessageError("offset", offset, "must be in [0, 2**62)")
        return _reader.get_bodies(self._queue(topic, queue_id, offset), self.commit_log_queue,
                                  offset, max_msgs, max_bytes)

    def match_offsets(self, topic: str, queue_id: int, tags: Any, start: int | None = None,
                      end: int | None = None):
        """Queue offsets in [start, end) whose tags code matches ``tags`` (≤ 8 tags), found by
        one vectorized pass over the consume-queue files (numpy int64 array).

        Matching is by tags code, as RocketMQ's consume-queue filter; a hash collision can
        match here, and ``get_message`` then drops it by the real tag.
        """
        return self._scan_queue(topic, queue_id, tags, start, end, count_only=False)

    def count_matches(self, topic: str, queue_id: int, tags: Any, start: int | None = None,
                      end: int | None = None) -> int:
        """How many queue offsets in [start, end) match ``tags`` by tags code (one pass)."""
        return int(self._scan_queue(topic, queue_id, tags, start, end, count_only=True))

    def _scan_queue(self, topic: str, queue_id: int, tags: Any, start: int | None,
                    end: int | None, count_only: bool):
        import numpy as np

        from rocketstore.store import _scan
        self._check_open()
        tag_filter = self._tag_filter(tags)
        cq = self._queue(topic, queue_id)
        found: list = []
        total = 0
        if cq is not None:
            lo = cq.get_min_offset_in_queue() if start is None else max(start, cq.get_min_offset_in_queue())
            hi = cq.get_max_offset_in_queue() if end is None else min(end, cq.get_max_offset_in_queue())
            for index, view in unit_runs(cq, lo, hi):
                n = len(view) // 20
                if count_only:
                    total += n if tag_filter is None else _scan.count_matches(view, tag_filter.codes)
                elif tag_filter is None:
                    found.append(np.arange(index, index + n, dtype=np.int64))
                else:
                    found.append(_scan.match_indices(view, tag_filter.codes) + index)
        if count_only:
            return total
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still stored (0 for an unknown queue)."""
        self._check_open()
        cq = self._queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """One past the queue's last dispatched offset (0 for an unknown queue)."""
        self._check_open()
        cq = self._queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int,
                                    boundary: BoundaryType | str = BoundaryType.LOWER) -> int:
        """Queue offset of the message stored at ``timestamp_ms`` (5.x semantics, docs/format.md §5.4):
        LOWER is the first message stored at or after it, UPPER the last one at or before it."""
        self._check_open()
        if isinstance(boundary, str):
            try:
                boundary = BoundaryType[boundary.upper()]
            except KeyError:
                raise InvalidMessageError("boundary", boundary, "must be LOWER or UPPER") from None
        _java_long("timestamp_ms", timestamp_ms)
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        return _reader.offset_by_time(cq, self.commit_log_queue, timestamp_ms,
                                      boundary is BoundaryType.UPPER,
                                      max(0, self.commit_log.get_min_offset()))

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at a queue offset, or -1."""
        self._check_open()
        _java_long("consume_queue_offset", consume_queue_offset)
        cq = self._queue(topic, queue_id)
        if cq is None:
            return -1
        return _reader.store_timestamp_at(cq, self.commit_log_queue, consume_queue_offset,
                                          max(0, self.commit_log.get_min_offset()))

    # -- lookups -------------------------------------------------------------------------------

    def query_message(self, topic: str, key: str, max_num: int = 64, begin_ts: int = 0,
                      end_ts: int | None = None, *, raw: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``), stored
        in [begin_ts, end_ts] ms, at most ``max_num`` (capped by ``max_msgs_num_batch``), in
        commit-log order.

        The index files are searched newest first, each slot chain walked as RocketMQ does;
        every candidate is then checked against its stored record, so a key that merely
        shares a hash with another ("Aa" / "BB") never returns the other's messages.
        """
        self._check_open()
        if not isinstance(topic, str) or not isinstance(key, str):
            raise InvalidMessageTypeError("topic/key", "str",
                                          f"{type(topic).__name__}/{type(key).__name__}")
        if not isinstance(max_num, int) or max_num <= 0:
            raise InvalidMessageError("max_num", max_num, "must be a positive int", limit=1)
        _java_long("begin_ts", begin_ts)
        end = int(time.time() * 1000) if end_ts is None else _java_long("end_ts", end_ts)
        if self.read_only:
            self.index_service.refresh()
        limit = min(max_num, self.config.max_msgs_num_batch)
        # the index keeps whole seconds since its file's begin time (an entry reads up to 999 ms
        # early): walk a window widened by that, then check each record's real store time
        found = _reader.verify_candidates(self.commit_log_queue,
                                          self.index_service.candidates(topic, key,
                                                                        begin_ts - 999, end),
                                          topic, key, limit, raw, begin_ts, end)
        found.sort(key=lambda m: m.commitlog_offset)
        return found

    def query_message_by_uniq_key(self, topic: str, uniq_key: str, *,
                                  raw: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` with UNIQ_KEY ``uniq_key`` (RocketMQ caps this lookup at 32;
        a retried or re-sent message can share one)."""
        return [m for m in self.query_message(topic, uniq_key, 32, raw=raw)
                if m.uniq_key == uniq_key]

    def look_message_by_offset(self, commitlog_offset: int, raw: bool = False) -> MessageExt | None:
        """The message stored at ``commitlog_offset``, or None if no record starts there.

        Compressed bodies are returned decompressed unless ``raw``.
        """
        self._check_open()
        return self.commit_log.get_message(_java_long("commitlog_offset", commitlog_offset), raw)

    def look_message_by_id(self, msg_id: str, raw: bool = False) -> MessageExt | None:
        """The message with offset message id ``msg_id`` (store host + commit-log offset).

        None when no record starts at that offset or it was stored by another host.
        Raises ``InvalidMessageIdError`` for a string that is not an offset message id.
        """
        self._check_open()
        host, offset = decode_msg_id(msg_id)
        msg = self.commit_log.get_message(offset, raw)
        if msg is None or msg.msg_id != msg_id.upper():
            return None
        return msg

    def iter_messages(self, from_offset: int = 0) -> Iterator[MessageExt]:
        """Every stored message from commit-log offset ``from_offset``, in log order."""
        self._check_open()
        return self.commit_log.iter_messages(_java_long("from_offset", from_offset))

    # -- retention -------------------------------------------------------------------------------

    def execute_delete_files_manually(self) -> None:
        """RocketMQ's manual delete: the next 20 retention runs delete expired commit-log
        files whatever the hour of ``delete_when`` (docs/format.md §9)."""
        self._check_open()
        if self.cleanup_service is None:
            raise StoreReadOnlyError(self.root)
        self.cleanup_service.execute_delete_files_manually()

    def clean_now(self, force: bool = False) -> CleanResult:
        """Run retention once, now, on this thread (the service's run, same rules), and say
        what it deleted. ``force`` deletes the oldest commit-log files whatever their age or
        the hour, still at most ``delete_file_batch_max`` and never the active file."""
        self._check_open()
        if self.cleanup_service is None:
            raise StoreReadOnlyError(self.root)
        return self.cleanup_service.run_once(force=force)

    @property
    def disk_full(self) -> bool:
        """RocketMQ's DISK_FULL running flag: puts answer SERVICE_NOT_AVAILABLE while set."""
        return self.cleanup_service is not None and self.cleanup_service.disk_full

    def get_min_phy_offset(self) -> int:
        """Commit-log offset of the oldest byte still stored."""
        self._check_open()
        return max(0, self.commit_log.get_min_offset())

    def get_max_phy_offset(self) -> int:
        """Commit-log offset one past the last stored record."""
        self._check_open()
        if self.read_only:
            return self._read_only_data_end()
        return self.commit_log.get_max_offset()

    def _read_only_data_end(self) -> int:
        # a reader maps whole files: the end of data is where the records of the last file
        # holding any end (a writer's pre-allocated next file is all zeros)
        q = self.commit_log_queue
        q.refresh_files()
        files = q.files
        for mf in reversed(files[-2:]):
            if mf.committed_pos == 0:
                mf.set_positions(mf.file_size)
            end_pos, _, _ = self.commit_log.scan_file(mf, False, False)
            if end_pos > 0 or mf is files[0]:
                return mf.file_from_offset + end_pos
        return files[-1].file_from_offset if files else 0

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"max_phy_offset={self.commit_log.get_max_offset()}"
        return f"MessageStore({self.root!r}, {state})"


__all__ = ["MessageStore", "QueueInfo", "InvalidMessageIdError"]
