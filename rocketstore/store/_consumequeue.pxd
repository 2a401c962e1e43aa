cimport cython
from libc.stdint cimport int32_t, int64_t

from rocketstore.store._mapped cimport MappedFile


# Write state of a queue's last file, kept in C so the dispatch loop can append units without
# the GIL. ``wrote_pos`` runs ahead of the MappedFile's published positions until publish().
cdef struct CQState:
    char *base                  # mapping of the last file, NULL when there is none or it is full
    int64_t file_from           # logical byte offset of that file
    Py_ssize_t wrote_pos        # bytes written into it
    Py_ssize_t file_size         # the fast path's limit: the file's allocated end (writers)
    int64_t max_physic_offset   # commit-log end (offset + size) of the last unit written
    int64_t last_store_ts       # store time of the last unit written (checkpoint logics time)
    int dirty                   # units appended since the last publish()


@cython.final
cdef class ConsumeQueue:
    cdef readonly str topic
    cdef readonly bytes topic_b         # UTF-8 topic, compared against records by dispatch
    cdef readonly int queue_id
    cdef readonly object mapped_file_queue
    cdef readonly Py_ssize_t file_size
    cdef readonly bint read_only
    cdef MappedFile cur                 # last file, or None
    cdef CQState state
    cdef public int64_t min_logic_offset    # bytes; min queue offset = min_logic_offset / 20

    cdef int put_position(self, int64_t phy_offset, int32_t size, int64_t tags_code,
                          int64_t cq_offset, int64_t store_ts) except -1
    cdef void publish(self) noexcept
    cdef bint offset_plausible(self, int64_t phy_offset, int64_t cq_offset) noexcept
    cdef int _attach_last(self) except -1
    cdef int _reserve_unit(self) except -1
    cdef MappedFile file_for_index(self, int64_t index)
    cdef MappedFile read_file(self, int64_t index)
    cdef MappedFile _published(self, int64_t index, Py_ssize_t *pos)

    cdef inline int64_t max_index(self) noexcept:
        """One past the last published unit (the queue's max offset)."""
        if self.cur is None:
            return 0
        return (self.cur.file_from_offset + self.cur.committed_pos) // 20

    cdef inline int64_t min_index(self) noexcept:
        return self.min_logic_offset // 20
    cdef void _scan_end(self, MappedFile mf) noexcept


# Append a unit to the state's file when it has room and the offsets line up; 1 when written,
# 0 when already present (idempotent re-dispatch), -1 when the GIL path must handle it.
cdef int cq_append_fast(CQState *st, int64_t phy_offset, int32_t size, int64_t tags_code,
                        int64_t cq_offset, int64_t store_ts) noexcept nogil
