cimport cython
from libc.stdint cimport int64_t


cdef int check_io(int rc, object path) except -1

cdef enum:
    SYNC_MSYNC = 0
    SYNC_FSYNC = 1
    SYNC_FSYNC_DIR = 2
    SYNC_FSYNC_FD = 3


@cython.final
cdef class WriteBuffer:
    # one transient-pool buffer: page-aligned, off-heap, mlocked when the limit allows
    cdef char *ptr
    cdef readonly Py_ssize_t size
    cdef readonly bint locked


@cython.final
cdef class MappedFile:
    # identity
    cdef readonly str path              # absolute path of the file
    cdef readonly str file_name         # 20-digit start offset (commit log, consume queue)
    cdef readonly int64_t file_from_offset
    cdef readonly Py_ssize_t file_size
    # mapping
    cdef int fd                         # -1 except while a write buffer is lent
    cdef readonly long long inode       # st_ino of the mapped file
    cdef char *base                     # NULL once unmapped
    cdef char *wbase                    # where appends go: base, or a lent write buffer
    cdef readonly WriteBuffer write_buffer  # lent by the transient store pool, or None
    cdef readonly bint read_only
    cdef readonly bint mlocked
    cdef int _open_fd(self) except -1
    cdef readonly bint created                # allocated by this process: all zeros, safe to touch-write
    cdef bint released                  # release() called: unmap when the last view goes
    cdef bint _internal_export          # whole_view() of a released, pinned file
    cdef Py_ssize_t view_count          # buffer exports alive (pgproto _view_count)
    cdef object _mv                     # memoryview over the whole mapping, sliced for views
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]
    # positions: bytes within this file (Kafka's "position"), see docs/format.md §4.2
    cdef public Py_ssize_t wrote_pos
    cdef public Py_ssize_t committed_pos
    cdef public Py_ssize_t flushed_pos
    cdef public int64_t store_timestamp # store time of the last record appended
    # disk allocation (writers): [0, allocated_end) is allocated for real; a write past it
    # first reserve()s, which allocates ``extent`` more (0: the whole file) and calls
    # ``on_last_extent`` once the file is allocated to its end (pre-allocate the next file)
    cdef readonly Py_ssize_t allocated_end
    cdef public Py_ssize_t extent
    cdef public object on_last_extent

    cdef inline char *ptr(self) noexcept:
        return self.base
    cdef int _ensure_mapped(self) except -1
    cdef object _slice(self, Py_ssize_t pos, Py_ssize_t size)
    cdef object whole_view(self)
    cdef void _unmap_now(self) noexcept
    cdef int _grow(self, Py_ssize_t end) except -1

    # make [0, end) writable without a fault on a full disk: OSError(ENOSPC) here instead
    cdef inline int reserve(self, Py_ssize_t end) except -1:
        if end > self.allocated_end:
            return self._grow(end)
        return 0

    # a reader object holding raw pointers into the mapping pins it like a view does
    cdef inline void pin(self) noexcept:
        self.view_count += 1

    cdef inline void unpin(self) noexcept:
        self.view_count -= 1
        if self.released and self.view_count == 0:
            self._unmap_now()


cdef int durable(int op, MappedFile mf, object path, Py_ssize_t start, Py_ssize_t length) except -1
cdef bint sync_hook_active() noexcept nogil
