"""StoreCheckpoint: the 4096-byte ``checkpoint`` file (docs/format.md §8.1).

Big-endian longs at 0 (physicMsgTimestamp: store time of the last flushed commit-log data),
8 (logicsMsgTimestamp: of the last flushed consume-queue unit), 16 (indexMsgTimestamp: end
time of the last full, flushed index file), and the 5.x fields at 24 (masterFlushedOffset)
and 32 (confirmPhyOffset). Recovery after a crash starts from the oldest of them.

Not thread-safe: setters are called by the service that owns each timestamp; ``flush``
writes all five at once.
"""
from __future__ import annotations

import logging
import os
import struct

from rocketstore.store._mapped import MappedFile, metadata_event

log = logging.getLogger("rocketstore.store.checkpoint")

CHECKPOINT_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")


class StoreCheckpoint:
    """The checkpoint file of a store (created zeroed when missing)."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        exists = os.path.exists(path)
        if read_only and not exists:
            self._mf = None
            self._values = [0, 0, 0, 0, 0]
            return
        if exists and not read_only and os.path.getsize(path) != CHECKPOINT_SIZE:
            # a hint for crash recovery only: a zeroed one means "scan everything"
            log.warning("%s: %d bytes, not %d (a size change a power cut lost); starting it "
                        "zeroed: the next crash recovery scans the whole commit log",
                        path, os.path.getsize(path), CHECKPOINT_SIZE)
            metadata_event("delete", path)
            os.unlink(path)
        self._mf = MappedFile(path, CHECKPOINT_SIZE, create=not read_only, read_only=read_only)
        self._values = list(_LAYOUT.unpack(self._mf.read_bytes(0, _LAYOUT.size)))

    physic_msg_timestamp = property(lambda self: self._values[0],
                                    lambda self, v: self._set(0, v))
    logics_msg_timestamp = property(lambda self: self._values[1],
                                    lambda self, v: self._set(1, v))
    index_msg_timestamp = property(lambda self: self._values[2],
                                   lambda self, v: self._set(2, v))
    master_flushed_offset = property(lambda self: self._values[3],
                                     lambda self, v: self._set(3, v))
    confirm_phy_offset = property(lambda self: self._values[4],
                                  lambda self, v: self._set(4, v))

    def _set(self, i: int, v: int) -> None:
        self._values[i] = int(v)

    def min_timestamp(self) -> int:
        """Where recovery may start: min(physic, logics) - 3 s (clock slack), at least 0."""
        return max(0, min(self._values[0], self._values[1]) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self._values[2])

    def flush(self) -> None:
        """Write the five values and msync them."""
        if self._mf is None or self.read_only:
            return
        self._mf.write_at(0, _LAYOUT.pack(*self._values))
        self._mf.set_positions(0)
        self._mf.wrote_pos = self._mf.committed_pos = CHECKPOINT_SIZE
        self._mf.flush(0)

    def close(self) -> None:
        if self._mf is not None:
            self._mf.release()
            self._mf = None

    def as_dict(self) -> dict[str, int]:
        return {"physicMsgTimestamp": self._values[0], "logicsMsgTimestamp": self._values[1],
                "indexMsgTimestamp": self._values[2], "masterFlushedOffset": self._values[3],
                "confirmPhyOffset": self._values[4]}
