"""Broker metadata JSON files: fastjson-compatible text and atomic, backed-up persistence.

``ConfigFile`` is the persistence shared by the files under a store's ``config/`` directory
(docs/format.md §10): ``consumerOffset.json`` (:mod:`rocketstore.store.offsets`) and ``topics.json``
(:mod:`rocketstore.store.topics`). It stands in for RocketMQ's ``ConfigManager`` and
``MixAll.string2File``/``file2String``.

Text (docs/format.md §10). A Java broker writes these files with fastjson's pretty format: tab
indentation, bean properties in alphabetical order, and Integer-keyed maps with *unquoted*
keys (``{0:250,1:250}``), which strict JSON rejects. :func:`loads` accepts that form;
:func:`dumps` writes it, byte for byte as fastjson lays it out, so a Java broker can take over
the directory.

Persistence. :meth:`ConfigFile.persist` writes ``<file>.tmp`` and syncs it, keeps the previous
content as ``<file>.bak``, renames the tmp file over ``<file>`` and syncs the directory. At every
instant ``<file>`` holds a complete old or new version, unlike the 5.1-5.3.3 brokers, which
overwrite it in place. :meth:`ConfigFile.load` falls back to ``<file>.bak`` when ``<file>`` is
missing, empty or unparseable, as RocketMQ does. Unlike RocketMQ, it raises ``CorruptionError``
rather than start empty when neither file can be read but at least one holds content.

Every sync goes through ``_fsync``; ``_fsync_dir`` calls it too, so swapping that one function
reroutes all durability calls.

Thread safety: ``ConfigFile`` serialises its own ``load`` and ``persist`` calls. It assumes one
writing process per store, which the store's ``lock`` file guarantees.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rocketstore.errors import CorruptionError

__all__ = ["ConfigFile", "BatchedPersister", "loads", "dumps", "TMP_SUFFIX", "BAK_SUFFIX",
           "DAMAGED_SUFFIX", "report_reset", "resets"]

log = logging.getLogger(__name__)

T = TypeVar("T")

TMP_SUFFIX = ".tmp"
BAK_SUFFIX = ".bak"
DAMAGED_SUFFIX = ".damaged"     # a copy of a file that could not be read, kept for forensics

# what was reset or rebuilt because a metadata file could not be read, per config directory
# (ConfigFile.load_or_reset, the loaders' salvage): shown by MessageStore.metadata_resets()
# and the broker's runtime info
_resets_lock = threading.Lock()
_resets: dict[str, list[dict[str, str]]] = {}


def report_reset(path: str, problem: str, action: str) -> None:
    """Report loudly (an ERROR log line and an entry in ``resets()``) that metadata file
    ``path`` could not be read (``problem``) and what was done instead (``action``)."""
    log.error("%s: %s; %s", path, problem, action)
    entry = {"file": os.path.basename(path), "path": path, "problem": problem, "action": action}
    with _resets_lock:
        _resets.setdefault(os.path.dirname(os.path.abspath(path)), []).append(entry)


def resets(config_dir: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Every reset ``report_reset`` recorded in this process for files of ``config_dir``."""
    with _resets_lock:
        return list(_resets.get(os.path.abspath(os.fspath(config_dir)), []))
_INDENT = "\t"

# A JSON string literal, or an object key written as a bare integer (after "{" or ","; before
# ":"). The string alternative is tried first at every position, so each string is consumed
# whole and digits inside one (a topic named "a,1:b") are never taken for a key.
_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.S)

# os.link fails with these on filesystems without hard links; persist then copies instead
_NO_HARD_LINK = frozenset(e for e in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS,
                                      getattr(errno, "EOPNOTSUPP", None),
                                      getattr(errno, "ENOTSUP", None)) if e is not None)


def _quote_bare_key(m: re.Match[str]) -> str:
    if m.group(2) is None:  # a string literal: unchanged
        return m.group(0)
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'


def loads(text: str) -> Any:
    """Parse fastjson output, which is strict JSON plus bare integer object keys.

    Bare keys come back as ``str`` (``"0"``), like every other JSON key. Only the schema knows
    that a map is Integer-keyed, and it converts the keys, as fastjson does when it binds
    ``{0:250}`` to ``Map<Integer, Long>``.

    Raises
    ------
    ValueError
        ``json.JSONDecodeError`` for text that is not JSON even with its keys quoted.
    """
    return json.loads(_STRING_OR_BARE_KEY.sub(_quote_bare_key, text))


def dumps(obj: Any, *, sort_keys: bool = True) -> str:
    """Serialise *obj* as fastjson's ``toJSONString(obj, true)`` lays it out.

    Mappings with ``str`` keys put one property per line, indented by a tab per level. Mappings
    with ``int`` keys put their entries on one line with the keys unquoted
    (``{0:250,1:250\\n\\t\\t}``, docs/format.md §10). ``None`` values are left out, as fastjson leaves
    out nulls. An empty mapping is ``{}``. Nothing follows the closing brace, not even a newline.

    *sort_keys* orders the keys of every mapping: fastjson writes bean properties in
    alphabetical order, and sorting the map keys as well gives stable files. With
    ``sort_keys=False`` the mappings' own order is kept.
    """
    out: list[str] = []
    _dump(obj, 0, sort_keys, out)
    return "".join(out)


def _dump(value: Any, depth: int, sort_keys: bool, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(int(value)))  # int() so an IntEnum writes its number, not its name
    elif isinstance(value, float):
        out.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))  # fastjson writes non-ASCII as is
    elif isinstance(value, Mapping):
        _dump_map(value, depth, sort_keys, out)
    elif isinstance(value, (list, tuple)):
        _dump_list(value, depth, sort_keys, out)
    else:
        raise TypeError(f"configfile: cannot serialise a {type(value).__name__}")


def _dump_map(value: Mapping[Any, Any], depth: int, sort_keys: bool, out: list[str]) -> None:
    items = [(k, v) for k, v in value.items() if v is not None]
    if not items:
        out.append("{}")
        return
    int_keys = all(isinstance(k, int) and not isinstance(k, bool) for k, _ in items)
    if not int_keys and not all(isinstance(k, str) for k, _ in items):
        kinds = sorted({type(k).__name__ for k, _ in items})
        raise TypeError(f"configfile: map keys must be all str or all int, got {kinds}")
    if sort_keys:
        items.sort(key=lambda kv: kv[0])
    inner = depth + 1
    out.append("{")
    for i, (k, v) in enumerate(items):
        if i:
            out.append(",")
        if int_keys:
            # fastjson's MapSerializer starts a new line only before String keys
            out.append(str(int(k)))
        else:
            out.append("\n")
            out.append(_INDENT * inner)
            out.append(json.dumps(k, ensure_ascii=False))
        out.append(":")
        _dump(v, inner, sort_keys, out)
    out.append("\n")
    out.append(_INDENT * depth)
    out.append("}")


def _dump_list(value: list[Any] | tuple[Any, ...], depth: int, sort_keys: bool,
               out: list[str]) -> None:
    # No rocketstore file holds a list yet. This follows the layout of a str-keyed map, which
    # has not been compared with fastjson's own list output.
    if not value:
        out.append("[]")
        return
    inner = depth + 1
    out.append("[")
    for i, item in enumerate(value):
        if i:
            out.append(",")
        out.append("\n")
        out.append(_INDENT * inner)
        _dump(item, inner, sort_keys, out)
    out.append("\n")
    out.append(_INDENT * depth)
    out.append("]")


def _fsync(fd: int, path: str = "") -> None:
    """fsync through rocketstore's one sync function (recorded and injectable by tests)."""
    from rocketstore.store._mapped import fsync_fd
    if not path:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
    fsync_fd(fd, path)


def _rename(src: str, dst: str) -> None:
    """A rename that passes rocketstore's sync hook first (tests record and fail renames)."""
    from rocketstore.store._mapped import metadata_event
    metadata_event("rename", dst)
    os.replace(src, dst)


def _fsync_dir(path: str) -> None:
    """Make renames and creations inside directory *path* durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def _read_bytes(path: str) -> bytes | None:
    """The file's content, or None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> None:
    """Create or truncate *path*, write *data* and sync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        _fsync(fd)
    finally:
        os.close(fd)


def _parses(path: str) -> bool:
    data = _read_bytes(path)
    if not data or not data.strip():
        return False
    try:
        loads(data.decode("utf-8"))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        return False
    return True


class ConfigFile:
    """One metadata JSON file with its ``.tmp`` and ``.bak`` siblings (docs/format.md §10).

    Parameters
    ----------
    path
        The file, e.g. ``<store>/config/consumerOffset.json``. Its directory is created on the
        first persist, as RocketMQ's ``string2File`` creates it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.tmp_path = self.path + TMP_SUFFIX
        self.bak_path = self.path + BAK_SUFFIX
        # the file the last load() decoded: path, bak_path, or None when neither had content
        self.loaded_path: str | None = None
        # the text of <file> when the last load() could not decode it (for salvaging loaders)
        self.damaged_text: str | None = None
        self.was_reset = False      # the last load_or_reset found neither copy readable
        self._lock = threading.Lock()
        # whether `path` holds content that parsed (we loaded or wrote it); only such content
        # is rotated into .bak, so a corrupt file can never replace a good backup. None means
        # not yet known: persist() checks the file once.
        self._main_good: bool | None = None

    def load(self, decode: Callable[[Any], T]) -> T | None:
        """Parse the file and return ``decode(document)``, falling back to ``.bak``.

        ``<file>`` missing, empty, unparseable, or rejected by *decode* (``ValueError`` or
        ``TypeError``) → ``<file>.bak`` is tried, with a logged warning. A leftover ``.tmp``
        is never read: a crash may have cut it short.

        Returns
        -------
        The decoded state, or ``None`` when neither file exists or has content, so the
        caller starts empty.

        Raises
        ------
        CorruptionError
            Neither file could be decoded, but at least one has content. RocketMQ would start
            empty here, and its consumers would then reset their offsets. To start empty on
            purpose, delete both files.
        """
        with self._lock:
            self.loaded_path = None
            self.damaged_text = None
            main_error: Exception | None = None
            data = _read_bytes(self.path)
            if data is not None and data.strip():
                try:
                    result = decode(loads(data.decode("utf-8")))
                except (ValueError, TypeError) as e:
                    main_error = e
                    # what a salvaging loader can still read entry by entry
                    self.damaged_text = data.decode("utf-8", "replace")
                else:
                    self._main_good = True
                    self.loaded_path = self.path
                    return result
            self._main_good = False
            state = ("unparseable" if main_error is not None
                     else "missing" if data is None else "empty")
            bak = _read_bytes(self.bak_path)
            if bak is None or not bak.strip():
                if main_error is not None:
                    raise CorruptionError(
                        self.path, 0,
                        f"unparseable ({main_error}) and no {BAK_SUFFIX} to fall back to; "
                        "delete the file to start empty") from main_error
                if data is not None:
                    log.warning("%s: empty and no %s; starting empty", self.path, BAK_SUFFIX)
                return None
            try:
                result = decode(loads(bak.decode("utf-8")))
            except (ValueError, TypeError) as e:
                raise CorruptionError(
                    self.bak_path, 0,
                    f"unparseable ({e}) and {self.path} is {state}; "
                    "delete both files to start empty") from e
            log.warning("%s: %s%s; loaded %s", self.path, state,
                        f" ({main_error})" if main_error is not None else "", self.bak_path)
            self.loaded_path = self.bak_path
            return result

    def load_or_reset(self, decode: Callable[[Any], T], action: str) -> T | None:
        """``load``, but where it would raise ``CorruptionError`` (neither ``<file>`` nor
        ``.bak`` readable): keep a copy of the damaged file as ``<file>.damaged``, report the
        reset (``report_reset``: ERROR log, ``resets()``) with ``action`` (what the caller
        rebuilds or starts with instead) and return None, so the broker starts."""
        self.was_reset = False
        try:
            return self.load(decode)
        except CorruptionError as e:
            self.was_reset = True
            self.keep_damaged_copy()
            report_reset(self.path, f"unreadable ({e.reason})",
                         action)
            return None

    def keep_damaged_copy(self) -> None:
        """Copy ``<file>`` to ``<file>.damaged`` (the next persist replaces ``<file>``)."""
        data = _read_bytes(self.path)
        if data is not None:
            try:
                with open(self.path + DAMAGED_SUFFIX, "wb") as f:
                    f.write(data)
            except OSError as e:
                log.warning("%s: could not keep a copy of the damaged file: %s", self.path, e)

    def persist(self, obj: Any) -> None:
        """Replace the file's content with ``dumps(obj)``, atomically and durably.

        Order (each step is safe to be killed after): 1. write ``<file>.tmp`` and sync it;
        2. make the current ``<file>``, if it parsed, the new ``<file>.bak`` (a hard link, or
        a synced copy); 3. rename ``.tmp`` over ``<file>``; 4. sync the directory.

        Raises
        ------
        OSError
            From the write, unchanged; ``<file>`` then still holds its previous content.
        """
        self.persist_text(dumps(obj))

    def persist_text(self, text: str) -> None:
        """``persist`` of an already encoded document, written as given (a slave keeps its
        master's ``delayOffset.json`` string as RocketMQ's ``SlaveSynchronize`` does)."""
        data = text.encode("utf-8")
        with self._lock:
            directory = os.path.dirname(self.path) or "."
            if not os.path.isdir(directory):
                os.makedirs(directory, exist_ok=True)
                _fsync_dir(os.path.dirname(os.path.abspath(directory)))
            # 1. the new content is on disk before any name points at it
            _write_synced(self.tmp_path, data)
            # 2. keep the previous version
            if self._main_good is None:
                self._main_good = _parses(self.path)
            if self._main_good:
                self._rotate_to_bak()
            # 3. atomic switch: readers see the old or the new file, never a mix
            _rename(self.tmp_path, self.path)
            self._main_good = True
            # 4. the renames of steps 2 and 3 survive a power cut
            _fsync_dir(directory)

    def _rotate_to_bak(self) -> None:
        # A hard link makes .bak the old inode without copying a byte, and <file> keeps
        # naming complete content throughout. Renaming <file> to .bak (RocketMQ HEAD) would
        # leave a window with no <file>, and a crash there leaves any reader that only knows
        # <file> (a tool, a Java broker's admin command) with nothing.
        staged = self.bak_path + TMP_SUFFIX
        try:
            os.unlink(staged)
        except FileNotFoundError:
            pass
        try:
            os.link(self.path, staged)
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno not in _NO_HARD_LINK:
                raise
            data = _read_bytes(self.path)
            if data is None:
                return
            _write_synced(staged, data)
        _rename(staged, self.bak_path)


class BatchedPersister:
    """Runs ``write`` (which persists the caller's current state) on a thread of its own,
    coalescing requests: changes made while a write runs are covered by the next one, so a
    burst of N changes costs about two writes instead of N, and never runs on the caller's
    thread (a broker's event loop). RocketMQ's ``ConfigManager.persist`` is likewise not an
    fsync per change on the network thread.

    ``request()`` returns a future done once a write that began after the call has finished
    (its exception if that write failed): await it before acknowledging a change that must be
    durable. ``flush()`` writes now if anything is pending; ``close()`` flushes and stops.
    """

    def __init__(self, write: Callable[[], None], name: str) -> None:
        self._write = write
        self._name = name
        self._cond = threading.Condition()
        self._requested = 0         # generation of the newest request
        self._done = 0              # generation the last finished write covered
        self._waiters: list[tuple[int, Any]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def request(self) -> "Any":
        """Ask for a write; returns a ``concurrent.futures.Future`` of its completion."""
        import concurrent.futures
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                fut.set_exception(RuntimeError(f"{self._name}: persister closed"))
                return fut
            self._requested += 1
            self._waiters.append((self._requested, fut))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"persist-{self._name}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._requested == self._done and not self._closed:
                    self._cond.wait()
                if self._requested == self._done:
                    return
                gen = self._requested
            self._write_once(gen)

    def _write_once(self, gen: int) -> None:
        error: BaseException | None = None
        try:
            self._write()
        except BaseException as e:  # noqa: BLE001 - reported to every waiter of this write
            log.exception("%s: persisting failed", self._name)
            error = e
        with self._cond:
            self._done = max(self._done, gen)
            ready = [f for g, f in self._waiters if g <= gen]
            self._waiters = [(g, f) for g, f in self._waiters if g > gen]
            self._cond.notify_all()
        for f in ready:
            if error is None:
                f.set_result(None)
            else:
                f.set_exception(error)

    def flush(self) -> None:
        """Write now, on this thread, if a request is pending (a write may run concurrently:
        each writes the state current when it runs, so the file ends current)."""
        with self._cond:
            gen = self._requested
            if gen == self._done:
                return
        self._write_once(gen)

    def close(self) -> None:
        """Flush what is pending and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        self.flush()
