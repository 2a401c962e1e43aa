"""Every file and directory name in a store directory (docs/format.md §0)."""
from __future__ import annotations

import os

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
FILE_NAME_DIGITS = 20


def offset_to_file_name(offset: int) -> str:
    """A segment's name: its start offset as 20 zero-padded decimal digits."""
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    return len(name) == FILE_NAME_DIGITS and name.isdigit()


def commitlog_dir(root: str) -> str:
    return os.path.join(root, COMMITLOG_DIR)


def consumequeue_dir(root: str, topic: str | None = None, queue_id: int | None = None) -> str:
    parts = [root, CONSUMEQUEUE_DIR]
    if topic is not None:
        parts.append(topic)
    if queue_id is not None:
        parts.append(str(queue_id))
    return os.path.join(*parts)


def index_dir(root: str) -> str:
    return os.path.join(root, INDEX_DIR)


def config_dir(root: str) -> str:
    return os.path.join(root, CONFIG_DIR)


def checkpoint_path(root: str) -> str:
    return os.path.join(root, CHECKPOINT_FILE)


def abort_path(root: str) -> str:
    return os.path.join(root, ABORT_FILE)


def lock_path(root: str) -> str:
    return os.path.join(root, LOCK_FILE)
