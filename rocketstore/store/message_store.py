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

import functools
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from rocketstore.store import integrity, paths, storedir
from rocketstore.store._codec import Message
from rocketstore.store._commitlog import CommitLog, PutMessageResult
from rocketstore.store._dispatch import DispatchCore
from rocketstore.store.fault_ahead import FaultAheadService
from rocketstore.store._mapped import fsync_dir, metadata_event
from rocketstore.store._reader import ReadLimits, TagFilter
from rocketstore.store.allocate import AllocateMappedFileService
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.cleanup import CleanResult, CleanupService
from rocketstore.store.index import IndexService
from rocketstore.store.config import StoreConfig
from rocketstore.store.consumequeue import ConsumeQueueStore
from rocketstore.store.dispatch import ArrivalNotifier, DispatchService
from rocketstore.store.fsutil import makedirs_durable
from rocketstore.store.flush import (CommitRealTimeService, FlushAckService,
                                    FlushConsumeQueueService, FlushRealTimeService,
                                    GroupCommitService)
from rocketstore.errors import (CorruptionError, DispatchStalledError, InvalidConfigError,
                                InvalidMessageError, InvalidMessageIdError, NotDurableError,
                                InvalidMessageTypeError, SlaveStoreError, StoreClosedError,
                                StoreReadOnlyError)
from rocketstore.store.configfile import ConfigFile
from rocketstore.store.mapped_file_queue import MappedFileQueue
from rocketstore.store.names import check_name
from rocketstore.store.offsets import ConsumerOffsetManager
from rocketstore.store.topics import TopicConfig, TopicConfigManager
from rocketstore.store.transient_pool import TransientStorePool
from rocketstore.store.recovery import _Recovery
from rocketstore.store.reads import _Reads
from rocketstore.store.storelock import _StoreLock

_PHYS_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

log = logging.getLogger("rocketstore.store")



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


class MessageStore(_Recovery, _Reads):
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
