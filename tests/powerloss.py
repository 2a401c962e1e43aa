"""A durable image of a store directory as its syncs make it, and crash states drawn from it.

The model is what a journaling filesystem such as ext4 may lose at a power cut (ALICE, leveldb's
fault_injection_test), per inode and per directory:

- file bytes: durable where an msync or fsync covered them; other pages may or may not have
  reached the disk, and a page may be torn at a 512-byte sector boundary;
- file sizes (ftruncate, fallocate): durable after an fsync or an msync of the file (both
  write the inode's size with the data); otherwise the file may have its old or its new size,
  the new bytes reading as zeros;
- directory entries (creations, deletions, renames, hard links): durable after an fsync of
  the directory, which records every name it holds then; each later change may or may not
  have happened, independently (a new directory whose own entry is lost takes its files),
  except that a rename is atomic: old names or new ones, never neither.

The hook is installed with ``set_sync_hook``; every sync, creation, allocation, rename and
deletion passes it. At randomly chosen hook calls (reservoir-sampled, so any instant of a
run is as likely as any other) the image takes a *snapshot*: the durable state and the files
as they are at that instant, plus how many puts had been acknowledged. ``crash_state`` writes
one possible post-power-loss directory for a snapshot.
"""
from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field

PAGE = 4096
SECTOR = 512
DIR = -1            # a directory entry naming a directory (files are named by inode)


@dataclass
class Snapshot:
    event: int                                   # hook call number the power went at
    op: str                                      # the call it went before
    acked: int                                   # puts acknowledged before this instant
    marks: dict                                  # caller's counters (offsets persisted, ...)
    durable: dict[int, bytes]                    # inode -> durable bytes (durable size)
    durable_dirs: dict[str, dict[str, int]]      # directory -> {name: inode or DIR}
    current: dict[int, bytes] = field(default_factory=dict)
    current_dirs: dict[str, dict[str, int]] = field(default_factory=dict)


class DurableImage:
    """Records what a power loss would keep, as the store syncs (thread-safe)."""

    def __init__(self, root: str, rnd: random.Random, snapshots: int = 0) -> None:
        self.root = os.path.realpath(root)
        self.rnd = rnd
        self.want = snapshots
        self.lock = threading.RLock()
        self.data: dict[int, bytearray] = {}
        self.dirs: dict[str, dict[str, int]] = {self.root: {}}
        self.events = 0
        self.snapshots: list[Snapshot] = []
        self.acked = 0                  # the workload's counter, read at each snapshot
        self.marks: dict = {}
        self.fresh: set[str] = set()    # created, inode not seen yet
        self.owner: dict[int, str] = {}  # inode -> the name its bytes were synced under
        self.renamed: set[str] = set()  # names a rename gave a file, not synced under yet

    # -- recording -------------------------------------------------------------------------

    def hook(self, op: str, path: str, off: int, n: int) -> None:
        path = os.path.realpath(path) if path else path
        if not path.startswith(self.root):
            return
        with self.lock:
            self.events += 1
            self._forget_reused_inodes(op, path, off)
            if self.want:
                # reservoir sampling over every hook call: the power goes just before it
                if len(self.snapshots) < self.want:
                    self.snapshots.append(self.capture(op))
                elif self.rnd.random() < self.want / self.events:
                    self.snapshots[self.rnd.randrange(self.want)] = self.capture(op)
            try:
                self._apply(op, path, off, n)
            except FileNotFoundError:
                pass                    # deleted meanwhile by another thread

    def _forget_reused_inodes(self, op: str, path: str, off: int) -> None:
        # a new file may get the inode number of a deleted one: what was durable for that
        # number is not the new file's
        # a new file: "create", then "allocate" from 0; an "allocate" further on is a file
        # growing into its next extent (fallocate within its size), whose bytes stay its own
        if op == "create" or (op == "allocate" and off == 0):
            self.fresh.add(path)
        elif op == "rename":
            self.renamed.add(path)
        try:
            ino = os.stat(path).st_ino if op in ("msync", "fsync") and os.path.isfile(path) else -1
        except FileNotFoundError:
            ino = -1
        if ino >= 0:
            # bytes recorded for this inode under a name that no longer holds it came from
            # a deleted file, unless a rename moved the file to this name (its bytes and
            # size stay: a power cut before its first sync here must keep them)
            owner = self.owner.get(ino)
            if path in self.renamed:
                self.renamed.discard(path)
            elif owner is not None and owner != path:
                try:
                    gone = os.stat(owner).st_ino != ino
                except FileNotFoundError:
                    gone = True
                if gone and op == "msync":
                    self.data.pop(ino, None)
            self.owner[ino] = path
        for p in list(self.fresh):
            try:
                self.data.pop(os.stat(p).st_ino, None)
                self.fresh.discard(p)
            except FileNotFoundError:
                pass

    def _apply(self, op: str, path: str, off: int, n: int) -> None:
        if op in ("fsync", "fsync_dir") and os.path.isdir(path):
            self.dirs[path] = self._listing(path)
        elif op == "fsync":
            with open(path, "rb") as f:
                self.data[os.fstat(f.fileno()).st_ino] = bytearray(f.read())
        elif op == "msync":
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                img = self.data.setdefault(st.st_ino, bytearray())
                # msync(MS_SYNC) is fdatasync of the range: the size goes with it
                del img[st.st_size:]
                img.extend(bytes(st.st_size - len(img)))
                f.seek(off)
                got = f.read(n)
                img[off:off + len(got)] = got

    @staticmethod
    def _listing(path: str) -> dict[str, int]:
        out = {}
        for e in os.scandir(path):
            try:
                out[e.name] = DIR if e.is_dir(follow_symlinks=False) else e.inode()
            except FileNotFoundError:
                continue
        return out

    def capture(self, op: str = "end") -> Snapshot:
        """The durable state and the live files, now."""
        with self.lock:
            snap = Snapshot(self.events, op, self.acked, dict(self.marks),
                            {k: bytes(v) for k, v in self.data.items()},
                            {k: dict(v) for k, v in self.dirs.items()})
            fresh = set(self.fresh)
        for dirpath, dirnames, names in os.walk(self.root):
            try:
                snap.current_dirs[dirpath] = self._listing(dirpath)
            except FileNotFoundError:
                continue
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        ino = os.fstat(f.fileno()).st_ino
                        snap.current.setdefault(ino, f.read())
                except FileNotFoundError:
                    continue
                if path in fresh:
                    # created by another thread after the durable state was copied: an inode
                    # number it reused must not bring a deleted file's bytes with it
                    snap.durable.pop(ino, None)
        return snap

    # -- crash states ----------------------------------------------------------------------

    def crash_state(self, snap: Snapshot, dst: str, rnd: random.Random,
                    unsynced_share: float) -> dict[str, int]:
        """Write one possible post-power-loss copy of the store at ``snap`` to ``dst``.
        Returns counts of what the state lost or kept of the unsynced changes."""
        stats = {"entries_lost": 0, "sizes_lost": 0, "pages_kept": 0, "pages_torn": 0}
        os.makedirs(dst, exist_ok=True)
        self._build(snap, self.root, dst, snap.durable_dirs.get(self.root, {}), rnd,
                    unsynced_share, stats)
        return stats

    def _build(self, snap, src_dir, dst_dir, durable_entries, rnd, share, stats) -> None:
        current = snap.current_dirs.get(src_dir, {})
        names = sorted((set(durable_entries) | set(current)) - {"lock"})
        picks = {}
        for name in names:
            d, c = durable_entries.get(name), current.get(name)
            picks[name] = d if d == c else rnd.choice([d, c])
        # a rename is atomic (one journal transaction): a file that moved between names
        # is under its old names or its new ones, never neither nor both
        moved = {i for i in set(durable_entries.values()) & set(current.values()) if i != DIR}
        for ino in moved:
            old = {n for n, i in durable_entries.items() if i == ino}
            new = {n for n, i in current.items() if i == ino}
            if old == new:
                continue
            if rnd.random() < 0.5:
                picks.update({n: ino for n in old})
                picks.update({n: durable_entries.get(n) for n in new - old})
            else:
                picks.update({n: ino for n in new})
                picks.update({n: current.get(n) for n in old - new})
        for name in names:
            pick = picks[name]
            if pick != current.get(name):
                stats["entries_lost"] += 1
            if pick is None:
                continue
            src, dst = os.path.join(src_dir, name), os.path.join(dst_dir, name)
            if pick == DIR:
                os.makedirs(dst, exist_ok=True)
                # a directory never synced holds nothing durably
                self._build(snap, src, dst, snap.durable_dirs.get(src, {}), rnd, share, stats)
                continue
            durable = snap.durable.get(pick, b"")
            now = snap.current.get(pick)
            size = len(durable)
            if now is not None and len(now) != size:
                if rnd.random() < 0.5:
                    stats["sizes_lost"] += 1
                else:
                    size = len(now)
            out = bytearray(durable[:size])
            out.extend(bytes(size - len(out)))
            if now is not None:
                for p in range(0, min(size, len(now)), PAGE):
                    if now[p:p + PAGE] != out[p:p + PAGE] and rnd.random() < share:
                        # a page torn at a sector boundary: drives write 512 B sectors whole
                        torn = rnd.random() < 0.3
                        cut = rnd.randrange(1, PAGE // SECTOR) * SECTOR if torn else PAGE
                        out[p:p + cut] = now[p:p + cut]
                        stats["pages_torn" if torn else "pages_kept"] += 1
            with open(dst, "wb") as f:
                f.write(out)

    def durable_commit_log_end(self, snap: Snapshot) -> int:
        """Commit-log offset below which every byte is durable, name and size included."""
        cl = os.path.join(self.root, "commitlog")
        entries = snap.durable_dirs.get(cl, {})
        if "commitlog" not in snap.durable_dirs.get(self.root, {}):
            return 0
        end = 0
        for name in sorted(n for n in entries if n.isdigit()):
            img = snap.durable.get(entries[name], b"")
            if int(name) != end or not img:
                break
            n = len(img.rstrip(b"\0"))
            end = int(name) + n
            if n < len(img):
                break
        return end
