"""Directory creation that survives a power cut.

A new directory's name lives in its parent: until the parent is fsynced, a power loss can
take the directory and every file made durable inside it (ext4 keeps the file's blocks but
not the path to them). Every directory the store creates goes through ``makedirs_durable``.
"""
from __future__ import annotations

import os

from rocketstore.store._mapped import fsync_dir


def makedirs_durable(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, then fsync the parent of every directory it
    created, deepest first, so the whole path is durable when it returns."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not missing:
        return
    os.makedirs(path, exist_ok=True)
    for d in missing:
        fsync_dir(os.path.dirname(d))
