"""The store directory's ``lock`` file (one writer process per store, and a Java broker's
``tryLock`` conflicts too) and the ``abort`` marker (docs/format.md §8)."""
from __future__ import annotations

import errno
import fcntl
import os
import threading

from rocketstore.store import paths
from rocketstore.store._mapped import fsync_dir, metadata_event
from rocketstore.store.fsutil import makedirs_durable
from rocketstore.errors import StoreLockedError


# Locks taken in this process, by real path: flock conflicts between two open file
# descriptions of one process, but we also want a clear error before even trying.
_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


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
