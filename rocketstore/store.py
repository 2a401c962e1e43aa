"""MessageStore: the public facade over one store directory (DESIGN.md "Public API").

Opening takes the directory's ``lock`` file (one writer process per store), loads the
commit-log files, recovers the end of valid data, rebuilds each queue's next offset and
creates the ``abort`` marker; a clean ``close()`` flushes everything and removes it, so the
next open knows whether the previous one ended cleanly (FORMAT.md 8).

Thread-safe: puts are serialised by the commit log's put lock; lookups take no lock.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from rocketstore import paths
from rocketstore._codec import Message, MessageExt, decode_msg_id
from rocketstore._commitlog import CommitLog, PutMessageResult
from rocketstore.allocate import AllocateMappedFileService
from rocketstore.config import StoreConfig
from rocketstore.errors import (InvalidMessageIdError, InvalidMessageTypeError, StoreClosedError,
                                StoreLockedError)
from rocketstore.mapped_file_queue import MappedFileQueue

log = logging.getLogger("rocketstore.store")

# Locks taken in this process, by real path: flock conflicts between two open file
# descriptions of one process, but we also want a clear error before even trying.
_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


class _StoreLock:
    """The ``lock`` file held with flock (other opens) and fcntl on byte 0 (a Java broker:
    FileChannel.tryLock is a POSIX record lock). Holds the 4 ASCII bytes ``lock``."""

    def __init__(self, root: str) -> None:
        self.path = paths.lock_path(root)
        self.key = os.path.realpath(root)
        with _open_paths_lock:
            if self.key in _open_paths:
                raise StoreLockedError(root)
            _open_paths.add(self.key)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except BaseException:
            self._forget()
            raise
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            os.close(self.fd)
            self._forget()
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(root) from None
            raise
        os.pwrite(self.fd, b"lock", 0)

    def _forget(self) -> None:
        with _open_paths_lock:
            _open_paths.discard(self.key)

    def release(self) -> None:
        os.close(self.fd)       # drops both locks
        self._forget()


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

    def __init__(self, root: str, config: StoreConfig, lock: _StoreLock) -> None:
        self.root = root
        self.config = config
        self._lock = lock
        self._closed = False
        self.allocator = AllocateMappedFileService(warm=config.warm_maped_file_enable,
                                                   mlock=config.mlock_maped_file)
        self.commit_log_queue = MappedFileQueue(config.commit_log_path(root),
                                                config.mapped_file_size_commit_log,
                                                allocator=self.allocator)
        self.recovery: dict[str, Any] = {}
        self.last_exit_ok = not os.path.exists(paths.abort_path(root))
        self.commit_log_queue.load()
        self.commit_log = CommitLog(self.commit_log_queue, store_host=config.store_host,
                                    max_message_size=config.max_message_size)
        self._recover()
        self._create_abort()
        # the hot calls go straight to the compiled commit log (no Python frame per put);
        # it checks types and the closed state itself
        self.put_message = self.commit_log.put_message  # type: ignore[method-assign]
        self.put_messages = self.commit_log.put_messages  # type: ignore[method-assign]

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None,
             config: StoreConfig | None = None) -> "MessageStore":
        """Open (creating when missing) the store at ``path``; only one writer at a time.

        ``path`` defaults to ``config.store_path_root_dir``. Raises ``StoreLockedError`` when
        another process, or another open store object, holds the directory.
        """
        config = config if config is not None else StoreConfig()
        if not isinstance(config, StoreConfig):
            raise InvalidMessageTypeError("config", "StoreConfig", type(config).__name__)
        root = os.fspath(path) if path is not None else config.store_path_root_dir
        os.makedirs(root, exist_ok=True)
        lock = _StoreLock(root)
        try:
            return cls(root, config, lock)
        except BaseException:
            lock.release()
            raise

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush everything, stop the services, remove ``abort`` and release the lock.

        Message bodies already read stay valid (they pin their mapping). Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.commit_log.close()
            self.allocator.shutdown()
            for mf in self.commit_log_queue.files:
                mf.flush(0)
            self.commit_log_queue.close()
            try:
                os.unlink(paths.abort_path(self.root))
            except FileNotFoundError:
                pass
        finally:
            self._lock.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store " + self.root)

    # -- recovery ------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Find the end of valid data, truncate past it, rebuild queue offsets.

        After a clean close only the last 3 files are CRC-checked (RocketMQ's normal
        recovery); after a crash (``abort`` present) every file is. All files are walked to
        rebuild the next queue offsets until consume queues exist to take them from.
        """
        files = self.commit_log_queue.files
        check_from = 0 if not self.last_exit_ok else max(0, len(files) - 3)
        end = files[0].file_from_offset if files else 0
        scanned = messages = 0
        for i, mf in enumerate(files):
            crc = self.config.check_crc_on_recover and i >= check_from
            end_pos, count, blank = self.commit_log.scan_file(mf, crc)
            scanned += end_pos
            messages += count
            end = mf.file_from_offset + end_pos
            if not blank:
                break
        max_before = self.commit_log_queue.get_max_offset()
        truncated = max(0, files[-1].file_from_offset + files[-1].file_size - end) if files else 0
        self.commit_log_queue.truncate_dirty_files(end)
        self.commit_log.reset_write_file()
        self.recovery = {
            "last_exit_ok": self.last_exit_ok,
            "files": len(files),
            "bytes_scanned": scanned,
            "messages": messages,
            "max_offset": end,
            "bytes_past_end": truncated if max_before else 0,
        }

    def _create_abort(self) -> None:
        fd = os.open(paths.abort_path(self.root), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.close(fd)

    # -- puts ----------------------------------------------------------------------------------

    def put_message(self, msg: Message, queue_id: int = 0) -> PutMessageResult:
        """Append ``msg`` to ``queue_id`` of its topic.

        Returns a ``PutMessageResult`` (``status``, ``msg_id``, ``queue_offset``,
        ``commitlog_offset``, ...). Bad input raises ``InvalidMessageError`` and writes nothing.
        """
        return self.commit_log.put_message(msg, queue_id)

    def put_messages(self, msgs: Sequence[Message], queue_id: int = 0) -> PutMessageResult:
        """Append a batch of one topic to one queue with consecutive queue offsets."""
        return self.commit_log.put_messages(msgs, queue_id)

    # -- lookups -------------------------------------------------------------------------------

    def look_message_by_offset(self, commitlog_offset: int, raw: bool = False) -> MessageExt | None:
        """The message stored at ``commitlog_offset``, or None if no record starts there.

        Compressed bodies are returned decompressed unless ``raw``.
        """
        self._check_open()
        return self.commit_log.get_message(commitlog_offset, raw)

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
        return self.commit_log.iter_messages(from_offset)

    def get_min_phy_offset(self) -> int:
        """Commit-log offset of the oldest byte still stored."""
        self._check_open()
        return max(0, self.commit_log.get_min_offset())

    def get_max_phy_offset(self) -> int:
        """Commit-log offset one past the last stored record."""
        self._check_open()
        return self.commit_log.get_max_offset()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"max_phy_offset={self.commit_log.get_max_offset()}"
        return f"MessageStore({self.root!r}, {state})"


__all__ = ["MessageStore", "InvalidMessageIdError"]
