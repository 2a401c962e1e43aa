"""Directory creation that survives a power cut.

A new directory's name lives in its parent: until the parent is fsynced, a power loss can
take the directory and every file made durable inside it (ext4 keeps the file's blocks but
not the path to them). Every directory the store creates goes through ``makedirs_durable``,
or through ``makedirs`` when the caller syncs the parents later (consume queues: before the
checkpoint counts on them).
"""
from __future__ import annotations

import os

from rocketstore.store._mapped import fsync_dir


def makedirs(path: str) -> list[str]:
    """``os.makedirs(path, exist_ok=True)``; returns the parents of the directories it
    created, deepest first: the directories an fsync must make durable."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if missing:
        os.makedirs(path, exist_ok=True)
    return [os.path.dirname(d) for d in missing]


def makedirs_durable(path: str) -> None:
    """``makedirs``, then fsync the parent of every directory it created, deepest first,
    so the whole path is durable when it returns."""
    for d in makedirs(path):
        fsync_dir(d)
