# cython: language_level=3
"""ConsumeQueue: one topic-queue's index into the commit log (docs/format.md §5).

Unit i (queue offset i) is 20 bytes at logical byte i*20: commit-log offset (8), size (4),
tags code (8), big-endian. Files hold ``mapped_file_size_consume_queue / 20`` units and are
named by the logical byte offset of their first unit. A queue whose first unit is not 0 has
filler units (offset 0, size 0x7FFFFFFF) before it and ``min_logic_offset`` pointing past
them. Unwritten space is zero, so a unit of size 0 marks the end of data.

Writes come from the dispatch service only (one thread), through ``put_position`` or the
GIL-free ``cq_append_fast``; both keep the idempotence rules of RocketMQ's
``putMessagePositionInfo``, so re-dispatching a range after a crash writes nothing twice.
Units written by the fast path become visible to readers at ``publish()``. Readers take no
lock: they read units below the published write position.
"""
cimport cython
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t
from libc.string cimport memset, memcmp

from rocketstore.store._csrc cimport RS_CQ_UNIT_SIZE, RS_CQ_FILLER_SIZE, RS_RECORD_FIXED_V1
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._codec cimport RecordInfo, parse_record
from rocketstore.store._bytes cimport (put_u64 as _put_be64, put_u32 as _put_be32, get_i64 as _get_be64,
                                 get_i32 as _get_be32)

import logging
import os

from rocketstore.errors import CorruptionError
from rocketstore.store.allocate import CONSUME_QUEUE_EXTENT as _EXTENT
from rocketstore.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger("rocketstore.store.consumequeue")

CQ_UNIT_SIZE = RS_CQ_UNIT_SIZE


cdef inline void _write_unit(char *p, int64_t phy_offset, int32_t size, int64_t tags_code) noexcept nogil:
    _put_be64(p, <uint64_t>phy_offset)
    _put_be32(p + 8, <uint32_t>size)
    _put_be64(p + 12, <uint64_t>tags_code)


cdef inline bint _unit_valid(const char *base, Py_ssize_t pos, Py_ssize_t file_size) noexcept nogil:
    """Whether a unit lies at ``pos`` (inside the file) with offset >= 0 and size > 0."""
    return pos + RS_CQ_UNIT_SIZE <= file_size and _get_be64(base + pos) >= 0 \
        and _get_be32(base + pos + 8) > 0


cdef inline bint _damaged_unit(const char *u) noexcept nogil:
    """A unit no record can have: a negative offset, or a size <= 0 (fillers are fine)."""
    return _get_be64(u) < 0 or _get_be32(u + 8) <= 0


cdef inline bint _below_min(const char *u, int64_t min_phy) noexcept nogil:
    """A sound unit (not a filler) whose record lies below the commit log's min."""
    return not _damaged_unit(u) and _get_be32(u + 8) != RS_CQ_FILLER_SIZE \
        and _get_be64(u) < min_phy


cdef int cq_append_fast(CQState *st, int64_t phy_offset, int32_t size, int64_t tags_code,
                        int64_t cq_offset, int64_t store_ts) noexcept nogil:
    cdef int64_t expect
    if phy_offset + size <= st.max_physic_offset:
        return 0                                # already built (docs/format.md §5.2)
    if st.base == NULL or st.wrote_pos + RS_CQ_UNIT_SIZE > st.file_size:
        return -1                               # no file, or it is full: roll under the GIL
    expect = cq_offset * RS_CQ_UNIT_SIZE
    if expect != st.file_from + st.wrote_pos:
        # a repeated build (expect below) is a no-op only on the GIL path, which logs it;
        # a gap (expect above) needs fillers: both are rare
        return -1
    _write_unit(st.base + st.wrote_pos, phy_offset, size, tags_code)
    st.wrote_pos += RS_CQ_UNIT_SIZE
    st.max_physic_offset = phy_offset + size
    st.last_store_ts = store_ts
    st.dirty = 1
    return 1


@cython.final
cdef class ConsumeQueue:
    """The consume queue of one topic-queue, in ``<root>/consumequeue/<topic>/<queue_id>/``.

    Parameters
    ----------
    root : str
        The ``consumequeue`` directory.
    topic, queue_id
        The queue.
    file_size : int
        Bytes per file (a multiple of 20; ``StoreConfig.mapped_file_size_consume_queue``).
    read_only : bool
        Map files read-only (readers in other processes); ``refresh()`` then follows a writer.
    """

    def __init__(self, str root, str topic, int queue_id, Py_ssize_t file_size,
                 bint read_only=False):
        if file_size % RS_CQ_UNIT_SIZE:
            raise ValueError(f"consume-queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.topic_b = topic.encode("utf-8")
        self.queue_id = queue_id
        self.file_size = file_size
        self.read_only = read_only
        self.mapped_file_queue = MappedFileQueue(os.path.join(root, topic, str(queue_id)),
                                                 file_size, read_only=read_only,
                                                 create_dir=False, extent=_EXTENT,
                                                 sync_create=False)
        self.state.file_size = file_size
        self.state.max_physic_offset = -1

    # -- load and recovery ------------------------------------------------------------------

    def load(self):
        """Map the queue's files (positions at file end until ``recover()``; a read-only
        queue finds the end of its last file at once)."""
        self.mapped_file_queue.load()
        cdef MappedFile last = self.mapped_file_queue.last_file()
        if self.read_only and last is not None:
            last.set_positions(0)
            self._scan_end(last)
        self._attach_last()

    def recover(self):
        """Find the end of valid units and truncate after it (docs/format.md §5.3).

        Scans from the third-to-last file: a unit is valid while ``offset >= 0`` and
        ``size > 0``; a completely valid file continues into the next one.
        """
        files = self.mapped_file_queue.files
        if not files:
            self._attach_last()
            return
        cdef Py_ssize_t idx = max(0, len(files) - 3), pos
        cdef MappedFile mf
        cdef int64_t phy, max_phy = -1, process = 0
        cdef int32_t size
        while idx < len(files):
            mf = files[idx]
            pos = 0
            while pos + RS_CQ_UNIT_SIZE <= self.file_size:
                phy = _get_be64(mf.base + pos)
                size = _get_be32(mf.base + pos + 8)
                if phy >= 0 and size > 0:
                    pos += RS_CQ_UNIT_SIZE
                    if size != RS_CQ_FILLER_SIZE:
                        max_phy = phy + size
                elif _unit_valid(mf.base, pos + RS_CQ_UNIT_SIZE, self.file_size):
                    # one damaged unit with a valid one after it: damage inside the queue,
                    # not its end (readers skip and report it)
                    pos += RS_CQ_UNIT_SIZE
                else:
                    break
            process = mf.file_from_offset + pos
            if pos + RS_CQ_UNIT_SIZE > self.file_size and idx + 1 < len(files):
                idx += 1            # this file is full of valid units: go on
                continue
            break
        self.mapped_file_queue.truncate_dirty_files(process)
        self._attach_last()
        self.state.max_physic_offset = max_phy

    cdef int _attach_last(self) except -1:
        cdef MappedFile mf = self.mapped_file_queue.last_file()
        self.cur = mf
        if mf is None or self.read_only:
            self.state.base = NULL
            self.state.file_from = 0 if mf is None else mf.file_from_offset
            self.state.wrote_pos = 0 if mf is None else mf.wrote_pos
        else:
            self.state.base = mf.base
            self.state.file_from = mf.file_from_offset
            self.state.wrote_pos = mf.wrote_pos
        # the GIL-free fast path writes only where disk is allocated; past it, the slow
        # path reserves the next extent
        self.state.file_size = mf.allocated_end if mf is not None and not self.read_only \
            else self.file_size
        return 0

    cdef int _reserve_unit(self) except -1:
        """Allocate disk for the unit at the write position (a full disk: OSError here)."""
        if self.cur is not None and not self.read_only:
            self.cur.reserve(self.state.wrote_pos + RS_CQ_UNIT_SIZE)
            self.state.file_size = self.cur.allocated_end
        return 0

    # -- writing ---------------------------------------------------------------------------

    cdef void publish(self) noexcept:
        """Make units written by the fast path visible: copy the C write position out."""
        if self.state.dirty and self.cur is not None:
            self.cur.wrote_pos = self.state.wrote_pos
            self.cur.committed_pos = self.state.wrote_pos
            self.cur.store_timestamp = self.state.last_store_ts
            self.state.dirty = 0

    cdef MappedFile file_for_index(self, int64_t index):
        """The last file, created (with fillers before a first unit that is not 0) when the
        queue has none or its last file is full."""
        cdef int64_t expect = index * RS_CQ_UNIT_SIZE
        cdef MappedFile mf
        cdef Py_ssize_t pos
        self.publish()
        mfq = self.mapped_file_queue
        mf = mfq.last_file()
        if mf is not None and mf.wrote_pos < self.file_size:
            return mf
        first = mf is None
        start = (expect - expect % self.file_size) if first else mf.file_from_offset + self.file_size
        if not first:
            mf.advise("normal")     # full: read-ahead serves its readers again
        mf = mfq.create_next(start)
        # written unit by unit through the mapping: no read-ahead window of zeros per fault
        mf.advise("random")
        if first and index != 0:
            # docs/format.md §5.1: fillers before the first unit, and the min offset past them
            mf.reserve(expect - mf.file_from_offset)
            pos = 0
            while mf.file_from_offset + pos < expect:
                _write_unit(mf.base + pos, 0, RS_CQ_FILLER_SIZE, 0)
                pos += RS_CQ_UNIT_SIZE
            mf.set_positions(pos)
            mf.flushed_pos = 0
            self.min_logic_offset = expect
        self._attach_last()
        return mf

    cdef int put_position(self, int64_t phy_offset, int32_t size, int64_t tags_code,
                          int64_t cq_offset, int64_t store_ts) except -1:
        """Append the unit of queue offset ``cq_offset`` (RocketMQ putMessagePositionInfo)."""
        cdef int rc = cq_append_fast(&self.state, phy_offset, size, tags_code, cq_offset, store_ts)
        if rc >= 0:
            self.publish()
            return rc
        if self.read_only:
            raise OSError(30, "consume queue is read-only", self.mapped_file_queue.store_path)
        cdef MappedFile mf = self.file_for_index(cq_offset)
        cdef int64_t expect = cq_offset * RS_CQ_UNIT_SIZE
        cdef int64_t current = mf.file_from_offset + mf.wrote_pos
        if expect < current:
            unit = self.get_unit(cq_offset)
            if cq_offset != 0 or (unit is not None and unit[0] == phy_offset and unit[1] == size):
                # docs/format.md §5.2: a unit below the write position is a repeated build
                log.debug("%s/%d: unit %d built already", self.topic, self.queue_id, cq_offset)
                return 0
            if unit is not None and unit[1] != RS_CQ_FILLER_SIZE:
                # queue offset 0 of a queue that holds another record there: stale or torn
                # after a crash (RocketMQ would append it past the end, breaking index ==
                # offset). The commit log is the truth: drop the queue and write it again
                log.warning("%s/%d: unit %d points at %s, the commit log says (%d, %d): "
                            "rebuilding from there", self.topic, self.queue_id, cq_offset,
                            unit[:2], phy_offset, size)
                self._truncate_at_index(cq_offset)
                mf = self.file_for_index(cq_offset)
                current = mf.file_from_offset + mf.wrote_pos
            else:
                return 0
        while expect > current:
            # units are missing before this one: fill the gap so index == queue offset holds
            log.warning("%s/%d: queue offset %d expected at %d, queue ends at %d; filling",
                        self.topic, self.queue_id, cq_offset, expect, current)
            if self.state.wrote_pos + RS_CQ_UNIT_SIZE > self.file_size:
                mf = self.file_for_index(current // RS_CQ_UNIT_SIZE)
            self._reserve_unit()
            _write_unit(self.state.base + self.state.wrote_pos, 0, RS_CQ_FILLER_SIZE, 0)
            self.state.wrote_pos += RS_CQ_UNIT_SIZE
            self.state.dirty = 1
            self.publish()
            current += RS_CQ_UNIT_SIZE
        if self.state.wrote_pos + RS_CQ_UNIT_SIZE > self.file_size:
            self.file_for_index(cq_offset)
        self._reserve_unit()
        rc = cq_append_fast(&self.state, phy_offset, size, tags_code, cq_offset, store_ts)
        if rc < 0:
            raise CorruptionError(self.mapped_file_queue.store_path, expect,
                                  "consume queue could not place a unit")
        self.publish()
        return rc

    cdef bint offset_plausible(self, int64_t phy_offset, int64_t cq_offset) noexcept:
        """Whether a record found on disk at ``phy_offset`` can hold queue offset ``cq_offset``.

        QUEUEOFFSET has no body CRC. Offset N means N earlier records of this queue, each at
        least RS_RECORD_FIXED_V1 bytes, before phy_offset; a gap after the last unit can only
        be records between that unit's record and this one. A claim beyond that is damage
        (placing it would write fillers up to it, file after file)."""
        cdef int64_t next_index = (self.state.file_from + self.state.wrote_pos) // RS_CQ_UNIT_SIZE
        if cq_offset < 0 or cq_offset > phy_offset // RS_RECORD_FIXED_V1:
            return False
        if self.cur is None or self.state.max_physic_offset <= 0 or cq_offset <= next_index:
            return True
        return cq_offset - next_index <= (phy_offset - self.state.max_physic_offset) \
            // RS_RECORD_FIXED_V1

    def _truncate_at_index(self, int64_t index):
        """Drop units ``index`` and later (zeroed), whatever they point at."""
        self.publish()
        mfq = self.mapped_file_queue
        cdef int64_t at = index * RS_CQ_UNIT_SIZE
        cdef MappedFile mf
        while True:
            mf = mfq.last_file()
            if mf is None or mf.file_from_offset < at or len(mfq.files) == 1:
                break
            mfq.delete_last_file()
        mf = mfq.last_file()
        cdef Py_ssize_t keep
        if mf is not None:
            keep = max(0, min(mf.file_size, at - mf.file_from_offset))
            if keep < mf.committed_pos:
                memset(mf.base + keep, 0, mf.committed_pos - keep)
            mf.set_positions(keep)
        self._attach_last()
        prev = self.get_unit(index - 1) if index > 0 else None
        self.state.max_physic_offset = prev[0] + prev[1] if prev is not None and prev[1] != RS_CQ_FILLER_SIZE else -1

    def put_message_position_info(self, int64_t phy_offset, int32_t size, int64_t tags_code,
                                  int64_t cq_offset, int64_t store_ts=0):
        """Python entry to ``put_position`` (tests, tools)."""
        return self.put_position(phy_offset, size, tags_code, cq_offset, store_ts)

    # -- offsets ---------------------------------------------------------------------------

    @property
    def max_physic_offset(self):
        return self.state.max_physic_offset

    def get_max_offset_in_queue(self):
        """Queue offset one past the last published unit."""
        return self.max_index()

    def get_min_offset_in_queue(self):
        return self.min_index()

    cdef MappedFile read_file(self, int64_t index):
        """The file holding unit ``index`` (by arithmetic: files are contiguous), or None."""
        files = self.mapped_file_queue.files
        if not files:
            return None
        cdef MappedFile first = files[0]
        cdef int64_t pos = index * RS_CQ_UNIT_SIZE - first.file_from_offset
        if pos < 0:
            return None
        cdef Py_ssize_t i = pos // self.file_size
        if i >= len(files):
            return None
        return files[i]

    def get_message_total_in_queue(self):
        return self.get_max_offset_in_queue() - self.get_min_offset_in_queue()

    def get_last_store_timestamp(self):
        return self.state.last_store_ts

    def roll_next_file(self, int64_t index):
        """First queue offset of the file after the one holding ``index``."""
        cdef int64_t per_file = self.file_size // RS_CQ_UNIT_SIZE
        return index + per_file - index % per_file

    cdef MappedFile _published(self, int64_t index, Py_ssize_t *pos):
        """The file holding published unit ``index`` and its position there, or None."""
        if index < 0 or index >= self.max_index():
            return None
        cdef MappedFile mf = self.read_file(index)
        if mf is None:
            return None
        pos[0] = index * RS_CQ_UNIT_SIZE - mf.file_from_offset
        if pos[0] + RS_CQ_UNIT_SIZE > mf.committed_pos:
            return None
        return mf

    def get_unit(self, int64_t index):
        """(commit-log offset, size, tags code) of unit ``index``, or None if unpublished."""
        cdef Py_ssize_t pos
        cdef MappedFile mf = self._published(index, &pos)
        if mf is None:
            return None
        return (_get_be64(mf.base + pos), _get_be32(mf.base + pos + 8), _get_be64(mf.base + pos + 12))

    def units_view(self, int64_t index, Py_ssize_t max_units=-1):
        """Zero-copy view of published units from ``index`` to the end of its file (or of
        ``max_units``); None when ``index`` is not published."""
        cdef Py_ssize_t pos
        cdef MappedFile mf = self._published(index, &pos)
        if mf is None:
            return None
        cdef Py_ssize_t end = mf.committed_pos
        if max_units >= 0:
            end = min(end, pos + max_units * RS_CQ_UNIT_SIZE)
        return mf.view(pos, end - pos)

    def correct_min_offset(self, int64_t min_phy_offset):
        """Point ``min_logic_offset`` at the first unit whose commit-log offset is still stored
        (5.x rule: a queue whose last unit is below the min has no valid entries)."""
        files = self.mapped_file_queue.files
        if not files:
            return
        cdef int64_t max_index = self.get_max_offset_in_queue()
        if max_index == 0:
            return
        last = self.get_unit(max_index - 1)
        if last is not None and 0 <= last[0] < min_phy_offset and 0 < last[1] != RS_CQ_FILLER_SIZE:
            self.min_logic_offset = max_index * RS_CQ_UNIT_SIZE
            return
        cdef MappedFile mf
        cdef Py_ssize_t lo, hi, mid, n, first
        cdef int32_t size
        for mf in files:
            n = mf.committed_pos // RS_CQ_UNIT_SIZE
            if n == 0 or mf.file_from_offset + n * RS_CQ_UNIT_SIZE <= self.min_logic_offset:
                continue
            # every unit of this file gone? (its last real unit is below the min) -> next file;
            # a damaged last unit says nothing (it would hide the whole file)
            if _below_min(mf.base + (n - 1) * RS_CQ_UNIT_SIZE, min_phy_offset):
                continue
            first = lo = max(0, self.min_logic_offset - mf.file_from_offset) // RS_CQ_UNIT_SIZE
            hi = n
            # units are in commit-log order: binary search the first kept one (fillers sort low)
            while lo < hi:
                mid = (lo + hi) // 2
                size = _get_be32(mf.base + mid * RS_CQ_UNIT_SIZE + 8)
                if size == RS_CQ_FILLER_SIZE or _get_be64(mf.base + mid * RS_CQ_UNIT_SIZE) < min_phy_offset:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > first and _damaged_unit(mf.base + (lo - 1) * RS_CQ_UNIT_SIZE):
                # a damaged unit (a negative offset sorts low) misled the search: walk the
                # file instead, and stop at the first unit that is kept or damaged
                lo = first
                while lo < n and (_get_be32(mf.base + lo * RS_CQ_UNIT_SIZE + 8) == RS_CQ_FILLER_SIZE
                                  or _below_min(mf.base + lo * RS_CQ_UNIT_SIZE, min_phy_offset)):
                    lo += 1
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + lo * RS_CQ_UNIT_SIZE)
            return

    def truncate_dirty_logic_files(self, int64_t phy_offset):
        """Drop units pointing at or past commit-log ``phy_offset`` (docs/format.md §5.3)."""
        self.publish()
        mfq = self.mapped_file_queue
        cdef MappedFile mf
        cdef Py_ssize_t pos, keep
        cdef int64_t phy, max_phy = -1
        cdef int32_t size
        while True:
            mf = mfq.last_file()
            if mf is None:
                break
            if mf.committed_pos == 0 and len(mfq.files) > 1:
                mfq.delete_last_file()      # empty: the units to look at are before it
                continue
            if mf.committed_pos >= RS_CQ_UNIT_SIZE and _get_be64(mf.base) >= phy_offset \
                    and _get_be32(mf.base + 8) != RS_CQ_FILLER_SIZE:
                mfq.delete_last_file()
                continue
            keep = 0
            pos = 0
            while pos + RS_CQ_UNIT_SIZE <= mf.committed_pos:
                phy = _get_be64(mf.base + pos)
                size = _get_be32(mf.base + pos + 8)
                if size <= 0 or (size != RS_CQ_FILLER_SIZE and phy >= phy_offset):
                    # the end, unless the next unit is one to keep: then this one is a
                    # damaged unit inside the queue (readers skip and report it)
                    if not (pos + 2 * RS_CQ_UNIT_SIZE <= mf.committed_pos
                            and _get_be32(mf.base + pos + 28) > 0
                            and _get_be32(mf.base + pos + 28) != RS_CQ_FILLER_SIZE
                            and 0 <= _get_be64(mf.base + pos + 20) < phy_offset):
                        break
                elif size != RS_CQ_FILLER_SIZE:
                    max_phy = phy + size
                pos += RS_CQ_UNIT_SIZE
                keep = pos
            if keep < mf.committed_pos:
                # zero what is dropped so a later recovery cannot read it back
                memset(mf.base + keep, 0, mf.committed_pos - keep)
            mf.set_positions(keep)
            break
        self._attach_last()
        self.state.max_physic_offset = max_phy

    def validate(self, commit_log_queue, int64_t end, int64_t min_phy, int64_t deep_from):
        """Check every published unit against the commit log (abnormal recovery); returns
        the index of the first unit that does not hold, or -1 when all do.

        Every unit: size > 0, offsets increasing record after record, the record inside
        [min_phy, end) (units below ``min_phy`` point at deleted files: size only). Units of
        files starting at or after logical byte ``deep_from``, and the first and last unit
        of every file, are also read against the record's header (magic, size,
        PHYSICALOFFSET, queue id, queue offset, topic): a zeroed, stale or shifted file
        shows there without reading the whole log."""
        self.publish()
        cdef MappedFile mf, cl = None
        cdef Py_ssize_t pos, n, cl_pos
        cdef int64_t index, phy, prev_end = -1
        cdef int32_t size
        cdef RecordInfo info
        cdef bint deep
        cdef const char *topic_p = self.topic_b
        cdef Py_ssize_t topic_len = len(self.topic_b)
        for mf in list(self.mapped_file_queue.files):
            n = mf.committed_pos // RS_CQ_UNIT_SIZE
            deep = mf.file_from_offset >= deep_from
            for pos in range(0, n * RS_CQ_UNIT_SIZE, RS_CQ_UNIT_SIZE):
                index = (mf.file_from_offset + pos) // RS_CQ_UNIT_SIZE
                phy = _get_be64(mf.base + pos)
                size = _get_be32(mf.base + pos + 8)
                if size == RS_CQ_FILLER_SIZE:
                    continue                # fillers: before the first unit, or in a gap
                if size <= 0 or phy < 0 or phy < prev_end \
                        or phy + size > end:
                    return index
                prev_end = phy + size
                if phy < min_phy or not (deep or pos == 0 or pos == (n - 1) * RS_CQ_UNIT_SIZE):
                    continue
                if cl is None or not (cl.file_from_offset <= phy < cl.file_from_offset + cl.file_size):
                    cl = commit_log_queue.find_mapped_file_by_offset(phy)
                    if cl is None or cl.base == NULL:
                        return index
                cl_pos = phy - cl.file_from_offset
                if cl_pos + size > cl.file_size \
                        or parse_record(cl.base + cl_pos, size, False, &info) != size \
                        or info.phy_offset != phy or info.queue_id != self.queue_id \
                        or info.queue_offset != index or info.topic_len != topic_len \
                        or memcmp(info.topic, topic_p, <size_t>topic_len) != 0:
                    return index
        return -1

    def truncate_at(self, int64_t index):
        """Drop units ``index`` and later; returns the commit-log offset re-dispatch must
        start from to rebuild them (the end of the last unit kept, or -1 when none is)."""
        self._truncate_at_index(index)
        cdef int64_t i = index - 1
        while i >= self.min_index() and i >= 0:
            u = self.get_unit(i)
            if u is None:
                break
            if u[1] != RS_CQ_FILLER_SIZE:
                return u[0] + u[1]
            i -= 1
        return -1

    cdef void _scan_end(self, MappedFile mf) noexcept:
        # readers find the end of a writer's data by the first unit of size 0
        cdef Py_ssize_t pos = mf.committed_pos - mf.committed_pos % RS_CQ_UNIT_SIZE
        while pos + RS_CQ_UNIT_SIZE <= self.file_size and _get_be32(mf.base + pos + 8) != 0:
            pos += RS_CQ_UNIT_SIZE
        mf.wrote_pos = pos
        mf.committed_pos = pos
        mf.flushed_pos = pos

    def refresh(self):
        """Follow a writer in another process: pick up new units and files (read-only)."""
        mfq = self.mapped_file_queue
        cdef MappedFile last = mfq.last_file()
        cdef Py_ssize_t before
        if last is not None and last.committed_pos < self.file_size:
            before = last.committed_pos
            self._scan_end(last)
            if before < last.committed_pos < self.file_size:
                return          # it grew and is not full: nothing else can be new
            # nothing new at the tail: the writer may have restarted, and its recovery
            # deleted this file and wrote it again (another inode): refresh_files remaps it
        # a file before the last is full; one we hold short was rewritten by a restarted
        # writer (remapped here, from it on) or scanned while being written (scanned again)
        files = mfq.files
        short = [mf for mf in files[:len(files) - 1] if mf.committed_pos < self.file_size]
        if short:
            mfq.remap_replaced(short)
            files = mfq.files
            for mf in files[:len(files) - 1]:
                if mf.committed_pos < self.file_size:
                    self._scan_end(mf)
        added = mfq.refresh_files()
        for mf in added:
            self._scan_end(mf)
        if added:
            # the writer may have filled the old last file between its scan above and the
            # listing: a unit left unseen there would be skipped (OFFSET_FOUND_NULL) once
            # the new file's start counts as the queue's end
            files = mfq.files
            for mf in files[max(0, len(files) - len(added) - 1):len(files) - 1]:
                if mf.committed_pos < self.file_size:
                    self._scan_end(mf)
        self._attach_last()

    def flush(self, int least_pages=0):
        self.publish()
        # files and directories created by dispatch are made durable here, off its thread,
        # before the flush service's checkpoint can count on them
        self.mapped_file_queue.sync_created()
        for mf in self.mapped_file_queue.files:
            mf.flush(least_pages)

    def close(self):
        self.publish()
        self.mapped_file_queue.close()
        self.cur = None
        self.state.base = NULL

    def destroy(self):
        """Delete every file of the queue."""
        self.close()
        for name in os.listdir(self.mapped_file_queue.store_path) if os.path.isdir(self.mapped_file_queue.store_path) else []:
            os.unlink(os.path.join(self.mapped_file_queue.store_path, name))

    def __repr__(self):
        return (f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.get_min_offset_in_queue()}, "
                f"max={self.get_max_offset_in_queue()})")
