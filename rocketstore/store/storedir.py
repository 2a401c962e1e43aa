"""What an existing store directory holds: the sizes its files were written with, and its
queues. A RocketMQ broker may run with any ``mapedFileSizeCommitLog``,
``mappedFileSizeConsumeQueue``, ``maxHashSlotNum`` and ``maxIndexNum``, and files of another
size do not open, so the sizes are taken from the files themselves: by ``MessageStore.open``
(``config_for_files``: defaults give way to the files, a contradicting setting is an error)
and by tools that read a store they did not configure (``detect_config``: the command, the
Spark source). One reading of the files (``file_geometry``) serves both."""
from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

from rocketstore.store import paths
from rocketstore.store.config import StoreConfig
from rocketstore.errors import InvalidConfigError

INDEX_HEADER, INDEX_SLOT, INDEX_ENTRY = 40, 4, 20
DEFAULT_INDEX_SIZE = INDEX_HEADER + INDEX_SLOT * 5_000_000 + INDEX_ENTRY * 20_000_000


def detect_config(root: str, *, commit_log_file_size: int | None = None,
                  cq_file_size: int | None = None, index_slots: int | None = None,
                  index_num: int | None = None, commitlog_dir: str | None = None,
                  index: bool = True, message_delay_level: str | None = None) -> StoreConfig:
    """A StoreConfig whose file sizes match the files in ``root`` (given sizes win), for
    tools that read a store they did not configure (the command, the Spark source).

    An index file is ``40 + 4 * slots + 20 * entries`` bytes: RocketMQ's default, or the
    default ratio of 4 entries per slot, is recognised; any other size needs ``index_slots``
    and ``index_num`` (``InvalidConfigError`` says so), unless ``index=False`` (a reader that
    never opens the index).

    The delay levels (the consume-queue tags code of a delayed message is its delivery time)
    are ``message_delay_level`` when given, else those the store's broker recorded in
    ``config/broker.properties`` (``rocketstore.store.brokerprops``), else RocketMQ's default.
    """
    changes: dict[str, object] = {}
    from rocketstore.store.brokerprops import recorded_delay_levels
    levels = message_delay_level or recorded_delay_levels(root)
    if levels:
        changes["message_delay_level"] = levels
    if commitlog_dir:
        changes["store_path_commit_log"] = commitlog_dir
    found = file_geometry(root, commitlog_dir)
    cl = commit_log_file_size or (found["mapped_file_size_commit_log"].value
                                  if "mapped_file_size_commit_log" in found else None)
    if cl:
        changes["mapped_file_size_commit_log"] = cl
    cq = cq_file_size or (found["mapped_file_size_consume_queue"].value
                          if "mapped_file_size_consume_queue" in found else None)
    if cq:
        changes["mapped_file_size_consume_queue"] = cq
    if index_slots and index_num:
        changes.update(max_hash_slot_num=index_slots, max_index_num=index_num)
    elif index and "index_file_size" in found:
        ev = found["index_file_size"]
        slots = index_slots_for(ev.value)
        if slots is None:
            raise InvalidConfigError(
                "max_hash_slot_num/max_index_num", ev.value,
                f"index file {ev.path} is {ev.value} bytes, not RocketMQ's default "
                f"{DEFAULT_INDEX_SIZE}: pass --index-slots and --index-num "
                f"(size = 40 + 4 * slots + 20 * entries)")
        changes.update(max_hash_slot_num=slots[0], max_index_num=slots[1])
    return StoreConfig(**changes)  # type: ignore[arg-type]


class Evidence(NamedTuple):
    """A size read from a store's files: the value, the file it came from, whether that file
    is complete (``certain``), and how many files showed it."""
    value: int
    path: str
    certain: bool
    votes: int = 1


def _segment_sizes(directory: str) -> list[tuple[str, int]]:
    """(path, size) of the 20-digit files of ``directory`` in name order, empty ones left out."""
    out = []
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if paths.is_segment_name(name) and os.path.isfile(path):
                try:
                    size = os.path.getsize(path)
                except FileNotFoundError:   # retention deleted it after the listing
                    continue
                if size > 0:
                    out.append((path, size))
    return out


def file_geometry(root: str, commitlog_dir: str | None = None) -> dict[str, Evidence]:
    """The sizes ``root``'s own files were written with: setting (or ``index_file_size``)
    -> Evidence.

    Only complete files are *certain*: the commit log's first file, a consume-queue file
    that is not its queue's last, an index file that is not the newest, and every file of a
    store whose last writer closed cleanly (no ``abort`` marker). After a crash, or beside a
    running writer, the last file of a derived structure (consume queue, index) may be short,
    long or zero-filled -- recovery drops and rebuilds it -- so a size seen only on last
    files is then a guess: the most common one, with its number of files (``votes``).
    """
    clean = not os.path.exists(paths.abort_path(root))
    found: dict[str, Evidence] = {}
    cl = _segment_sizes(commitlog_dir or paths.commitlog_dir(root))
    if cl:
        found["mapped_file_size_commit_log"] = Evidence(cl[0][1], cl[0][0], True)
    last_sizes: dict[int, list[str]] = {}
    for topic, qid in list_queues(root):
        files = _segment_sizes(paths.consumequeue_dir(root, topic, qid))
        if len(files) > 1:
            found["mapped_file_size_consume_queue"] = Evidence(files[0][1], files[0][0], True)
            break
        if files:
            last_sizes.setdefault(files[-1][1], []).append(files[-1][0])
    else:
        if last_sizes:
            size, where = max(last_sizes.items(), key=lambda kv: len(kv[1]))
            found["mapped_file_size_consume_queue"] = Evidence(size, where[0], clean, len(where))
    index_dir = paths.index_dir(root)
    names = sorted(n for n in os.listdir(index_dir) if len(n) == 17 and n.isdigit()) \
        if os.path.isdir(index_dir) else []
    sizes = []
    for n in names:
        try:
            sizes.append((os.path.join(index_dir, n), os.path.getsize(os.path.join(index_dir, n))))
        except FileNotFoundError:
            continue
    sizes = [(p, n) for p, n in sizes if n > 0]
    if sizes:
        # The size most files share: one odd file (torn by a crash, or damaged) is the
        # index's problem to report or rebuild, not a statement of the store's geometry.
        by_size: dict[int, list[str]] = {}
        for fpath, fsize in sizes:
            by_size.setdefault(fsize, []).append(fpath)
        # most files first; on a tie, the size of the oldest file
        size, where = max(by_size.items(), key=lambda kv: (len(kv[1]), -names.index(os.path.basename(kv[1][0]))))
        certain = len(where) > 1 or (clean and len(by_size) == 1)
        found["index_file_size"] = Evidence(size, where[0], certain, len(where))
    return found


def index_slots_for(size: int) -> tuple[int, int] | None:
    """(slots, entries) of an index file of ``size`` bytes: RocketMQ's default, or the default
    ratio of 4 entries per slot; None for any other size."""
    if size == DEFAULT_INDEX_SIZE:
        return 5_000_000, 20_000_000
    per_slot = INDEX_SLOT + 4 * INDEX_ENTRY
    if size <= INDEX_HEADER or (size - INDEX_HEADER) % per_slot:
        return None
    s = (size - INDEX_HEADER) // per_slot
    return s, 4 * s


def config_for_files(root: str, config: StoreConfig) -> StoreConfig:
    """``config`` with the file geometry of the store at ``root`` (``MessageStore.open``).

    A setting left at its default takes the value the files were written with; a setting
    given (not the default) that a complete file contradicts raises ``InvalidConfigError``
    naming both values and the file. A new (empty) directory keeps ``config`` as it is.
    """
    defaults = StoreConfig(store_path_root_dir=config.store_path_root_dir)
    changes: dict[str, int] = {}
    files = file_geometry(root, config.store_path_commit_log)
    index = files.pop("index_file_size", None)
    if index is not None:
        given = INDEX_HEADER + INDEX_SLOT * config.max_hash_slot_num + INDEX_ENTRY * config.max_index_num
        slots = index_slots_for(index.value)
        if index.value != given:
            if slots is not None and (config.max_hash_slot_num, config.max_index_num) == \
                    (defaults.max_hash_slot_num, defaults.max_index_num):
                changes.update(max_hash_slot_num=slots[0], max_index_num=slots[1])
            elif index.certain:
                raise InvalidConfigError(
                    "max_hash_slot_num/max_index_num",
                    f"{config.max_hash_slot_num}/{config.max_index_num}",
                    f"these make index files of {given} bytes, but {index.path} is "
                    f"{index.value} bytes" + (f" ({slots[0]}/{slots[1]})" if slots else "")
                    + " (size = 40 + 4 * slots + 20 * entries)")
    for name, ev in files.items():
        given = getattr(config, name)
        if given == ev.value:
            continue
        if not ev.certain and (ev.votes < 2 or ev.value % 20):
            continue        # one queue's last file: maybe torn, recovery decides
        if given == getattr(defaults, name):
            changes[name] = ev.value
        elif ev.certain:
            raise InvalidConfigError(
                name, given, f"the store at {root} was written with {name}={ev.value} "
                f"({ev.path} is {ev.value} bytes); open it with that value or leave the "
                f"setting at its default")
    return dataclasses.replace(config, **changes) if changes else config  # type: ignore[arg-type]


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
