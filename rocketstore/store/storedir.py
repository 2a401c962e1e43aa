"""What an existing store directory holds: the sizes its files were written with, and its
queues. A RocketMQ broker may run with any ``mapedFileSizeCommitLog``,
``mappedFileSizeConsumeQueue``, ``maxHashSlotNum`` and ``maxIndexNum``, and files of another
size do not open, so tools that read a store they did not configure (the command, the Spark
source) take the sizes from the files themselves."""
from __future__ import annotations

import os

from rocketstore.store import paths
from rocketstore.store.config import StoreConfig
from rocketstore.errors import InvalidConfigError

INDEX_HEADER, INDEX_SLOT, INDEX_ENTRY = 40, 4, 20
DEFAULT_INDEX_SIZE = INDEX_HEADER + INDEX_SLOT * 5_000_000 + INDEX_ENTRY * 20_000_000


def first_segment_size(directory: str, depth: int = 0) -> int | None:
    """Size of the first non-empty 20-digit file ``depth`` directory levels below
    ``directory`` (0: in it; 2: consumequeue/<topic>/<queue>/), or None."""
    if not os.path.isdir(directory):
        return None
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if depth == 0:
            if paths.is_segment_name(name) and os.path.isfile(path):
                size = os.path.getsize(path)
                if size > 0:
                    return size
        elif os.path.isdir(path):
            found = first_segment_size(path, depth - 1)
            if found:
                return found
    return None


def detect_config(root: str, *, commit_log_file_size: int | None = None,
                  cq_file_size: int | None = None, index_slots: int | None = None,
                  index_num: int | None = None, commitlog_dir: str | None = None,
                  index: bool = True) -> StoreConfig:
    """A StoreConfig whose file sizes match the files in ``root`` (given sizes win).

    An index file is ``40 + 4 * slots + 20 * entries`` bytes: RocketMQ's default, or the
    default ratio of 4 entries per slot, is recognised; any other size needs ``index_slots``
    and ``index_num`` (``InvalidConfigError`` says so), unless ``index=False`` (a reader that
    never opens the index).
    """
    changes: dict[str, object] = {}
    if commitlog_dir:
        changes["store_path_commit_log"] = commitlog_dir
    cl = commit_log_file_size or first_segment_size(commitlog_dir or os.path.join(root, "commitlog"))
    if cl:
        changes["mapped_file_size_commit_log"] = cl
    cq = cq_file_size or first_segment_size(paths.consumequeue_dir(root), 2)
    if cq:
        changes["mapped_file_size_consume_queue"] = cq
    if index_slots and index_num:
        changes.update(max_hash_slot_num=index_slots, max_index_num=index_num)
    elif index:
        index_dir = os.path.join(root, "index")
        names = sorted(n for n in os.listdir(index_dir) if len(n) == 17 and n.isdigit()) \
            if os.path.isdir(index_dir) else []
        if names:
            size = os.path.getsize(os.path.join(index_dir, names[0]))
            if size != DEFAULT_INDEX_SIZE:
                per_slot = INDEX_SLOT + 4 * INDEX_ENTRY
                if (size - INDEX_HEADER) % per_slot or size <= INDEX_HEADER:
                    raise InvalidConfigError(
                        "max_hash_slot_num/max_index_num", size,
                        f"index file {os.path.join(index_dir, names[0])} is {size} bytes, not "
                        f"RocketMQ's default {DEFAULT_INDEX_SIZE}: pass --index-slots and "
                        f"--index-num (size = 40 + 4 * slots + 20 * entries)")
                s = (size - INDEX_HEADER) // per_slot
                changes.update(max_hash_slot_num=s, max_index_num=4 * s)
    return StoreConfig(**changes)  # type: ignore[arg-type]


def list_queues(root: str) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory under ``consumequeue/``, sorted (queues a
    writer created after a reader opened the store included)."""
    cqroot = paths.consumequeue_dir(root)
    out = []
    if os.path.isdir(cqroot):
        for topic in sorted(os.listdir(cqroot)):
            tdir = os.path.join(cqroot, topic)
            if not os.path.isdir(tdir):
                continue
            for q in os.listdir(tdir):
                if q.isdigit() and os.path.isdir(os.path.join(tdir, q)):
                    out.append((topic, int(q)))
    return sorted(out)
