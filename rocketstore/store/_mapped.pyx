# cython: language_level=3
"""MappedFile: one file mapped at C level (docs/format.md §4).

A mapped file tracks three positions within itself -- wrote, committed and flushed -- and
its start offset in the whole log (``file_from_offset``, parsed from its 20-digit name).
Bytes are appended through C pointers by the codec; readers get zero-copy read-only
``memoryview`` slices of the mapping.

Lifetime: every view pins the mapping. ``unmap()`` refuses with ``BufferError`` while views
are exported; ``release()`` marks the file done and unmaps when the last view goes, so a
reader holding a message body never sees freed memory.

Disk space is allocated for real with ``posix_fallocate`` before any write reaches it, so a
full disk is an ``OSError(ENOSPC)`` there and never a SIGBUS in a later write through the
mapping. A file may be created whole, or sized sparse with only its first ``extent`` bytes
allocated: its writer then ``reserve()``s ahead of each write, one extent at a time (the
file keeps its full length on disk, as RocketMQ expects; only its blocks grow with the data).

Not thread-safe: ``CommitLog`` serialises writers with its put lock.
"""
cimport cython
from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset

from rocketstore.store._csrc cimport (
    rs_open, rs_close, rs_file_size, rs_allocate, rs_allocate_range, rs_truncate, rs_mmap, rs_munmap, rs_madvise, rs_mlock,
    rs_munlock, rs_msync, rs_fsync, rs_fsync_dir, rs_touch_pages, rs_pwrite_all,
    rs_alloc_aligned, rs_free_aligned, rs_store_release, rs_load_acquire, RS_OS_PAGE_SIZE,
)

import os

cdef enum:
    ADVICE_WILLNEED = 3     # rs_madvise's table index

cdef char *FORMAT_B = "B"

PAGE_SIZE = RS_OS_PAGE_SIZE     # the page of the flush/commit page rules (docs/format.md §4.1)


cdef int check_io(int rc, object path) except -1:
    """Raise the built-in OSError subclass for a -errno code (FileNotFoundError, ...)."""
    if rc == 0:
        return 0
    cdef int err = -rc
    raise OSError(err, os.strerror(err), path)


# -- the one sync function -----------------------------------------------------------------------
# Every msync / fsync / directory fsync of rocketstore goes through durable(), so that tests can
# record the durable image at each sync point or inject I/O errors (set_sync_hook), and so that a
# failure has one shape: OSError from the built-in class of its errno.

cdef object _sync_hook = None
cdef bint _hook_flag = False         # read without the GIL by the group-commit loop


cdef bint sync_hook_active() noexcept nogil:
    return _hook_flag


def set_sync_hook(hook):
    """Install ``hook(op, path, offset, length)`` called before every durability call ('msync',
    'fsync', 'fsync_dir'); raising ``OSError`` from it makes that call fail. None removes it."""
    global _sync_hook, _hook_flag
    _sync_hook = hook
    _hook_flag = hook is not None


cdef int durable(int op, MappedFile mf, object path, Py_ssize_t start, Py_ssize_t length) except -1:
    cdef int rc = 0, rc2 = 0
    cdef bytes p
    cdef const char *pp
    if _sync_hook is not None:
        _sync_hook(("msync", "fsync", "fsync_dir", "fsync")[op], path, start, length)
    if op == SYNC_MSYNC:
        with nogil:
            rc = rs_msync(mf.base + start, <size_t>length)
    elif op == SYNC_FSYNC:
        # mapped files keep no descriptor (see MappedFile): open one for the sync
        rc = mf.fd if mf.fd >= 0 else mf._open_fd()
        with nogil:
            rc2 = rs_fsync(rc)
        if rc != mf.fd:
            rs_close(rc)
        rc = rc2
    elif op == SYNC_FSYNC_FD:
        rc = <int>start
        with nogil:
            rc = rs_fsync(rc)
    else:
        p = os.fsencode(path)
        pp = p
        with nogil:
            rc = rs_fsync_dir(pp)
    return check_io(rc, path)


def metadata_event(str op, str path, Py_ssize_t size=0):
    """File creation, sizing, renaming and deletion also pass the sync hook ('create',
    'allocate', 'truncate', 'rename', 'delete'; the transient pool's copies as 'commit'),
    so tests see every durability-relevant step and can fail one."""
    if _sync_hook is not None:
        _sync_hook(op, path, 0, size)


def sync_hook_installed():
    return _sync_hook is not None


def fsync_dir(str path):
    """fsync a directory (through the one sync function)."""
    durable(SYNC_FSYNC_DIR, None, path, 0, 0)


def fsync_fd(int fd, str path):
    """fsync an open file (through the one sync function)."""
    durable(SYNC_FSYNC_FD, None, path, fd, 0)


CREATING_SUFFIX = ".creating"      # a mapped file being created (renamed once allocated)


def _name_offset(str file_name):
    try:
        return int(file_name)
    except ValueError:
        return -1


@cython.final
cdef class WriteBuffer:
    """One off-heap write buffer of the transient store pool (docs/format.md §4.5).

    ``size`` bytes from ``posix_memalign`` (page-aligned), locked in RAM with ``mlock`` when
    the memlock limit allows it (``locked``; RocketMQ locks them too, and goes on when it
    cannot). Freed when the last reference goes: a mapped file holds the buffer it borrowed.
    """

    def __init__(self, Py_ssize_t size, bint lock=True):
        cdef int rc
        if self.ptr != NULL:
            raise RuntimeError("WriteBuffer is already initialised")
        if size <= 0:
            raise ValueError(f"write buffer size must be positive, got {size}")
        with nogil:
            rc = rs_alloc_aligned(<size_t>size, RS_OS_PAGE_SIZE, &self.ptr)
        if rc != 0:
            self.ptr = NULL
            check_io(rc, f"transient store pool buffer of {size} bytes")
        self.size = size
        if lock:
            with nogil:
                rc = rs_mlock(self.ptr, <size_t>size)
            self.locked = rc == 0

    def __dealloc__(self):
        if self.ptr != NULL:
            if self.locked:
                rs_munlock(self.ptr, <size_t>self.size)
            rs_free_aligned(self.ptr)
            self.ptr = NULL

    @property
    def address(self):
        """Address of the first byte (page-aligned)."""
        return <size_t>self.ptr

    def __repr__(self):
        return f"WriteBuffer(size={self.size}, locked={self.locked})"


@cython.final
cdef class MappedFile:
    """One file of ``file_size`` bytes mapped shared into memory.

    Parameters
    ----------
    path : str
        The file. Its base name, when all digits, is the start offset in the log.
    file_size : int
        Expected size; an existing file of another size is refused (RocketMQ's load rule).
    create : bool
        Create and allocate the file when it does not exist (or exists empty).
    read_only : bool
        Map read-only (readers in other processes); appends then raise.
    """

    def __cinit__(self):
        self.fd = -1
        self.base = NULL

    cdef int _open_fd(self) except -1:
        cdef int fd = -1
        cdef bytes c_path = os.fsencode(self.path)
        check_io(rs_open(c_path, False, self.read_only, &fd), self.path)
        return fd

    def __init__(self, str path, Py_ssize_t file_size, *, bint create=False,
                 bint read_only=False, Py_ssize_t allocate_bytes=-1, Py_ssize_t extent=0,
                 bint sync_create=True):
        cdef int fd = -1, rc
        cdef int64_t actual = 0
        cdef char *addr = NULL
        cdef bytes c_path = os.fsencode(path)
        cdef const char *p = c_path
        if file_size <= 0:
            raise ValueError(f"{path}: file size must be positive, got {file_size}")
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_from_offset = _name_offset(self.file_name)
        self.file_size = file_size
        self.read_only = read_only
        cdef object tmp = None
        if create and not read_only:
            try:
                fresh = os.path.getsize(path) == 0
            except FileNotFoundError:
                fresh = True
            if fresh:
                # created whole under a temporary name, allocated and synced, then renamed:
                # a crash (or a power cut) leaves the final name absent or at full length,
                # never empty or short (RocketMQ's load refuses a store holding such a file)
                tmp = path + CREATING_SUFFIX
                try:
                    os.unlink(tmp)          # a crash's leftover
                except FileNotFoundError:
                    pass
                c_path = os.fsencode(tmp)
                p = c_path
                if _sync_hook is not None:
                    _sync_hook("create", tmp, 0, 0)
        with nogil:
            rc = rs_open(p, create, read_only, &fd)
        check_io(rc, path if tmp is None else tmp)
        try:
            check_io(rs_file_size(fd, &actual), path)
            if actual == 0 and create and not read_only:
                if _sync_hook is not None:
                    try:
                        _sync_hook("allocate", tmp or path, 0, file_size)
                    except OSError:
                        os.unlink(tmp or path)
                        raise
                if allocate_bytes < 0 and 0 < extent < file_size:
                    allocate_bytes = extent
                if 0 <= allocate_bytes < file_size:
                    # sized sparse, the first allocate_bytes real; the owner allocates the
                    # rest (allocate()) before it writes there
                    rc = rs_truncate(fd, file_size)
                    if rc == 0:
                        with nogil:
                            rc = rs_allocate_range(fd, 0, allocate_bytes)
                else:
                    with nogil:
                        rc = rs_allocate(fd, file_size)
                    allocate_bytes = file_size
                if rc != 0:
                    # leave no half-allocated file behind: a later load would refuse its size
                    os.unlink(tmp or path)
                    check_io(rc, path)
                if tmp is not None:
                    try:
                        # the size is durable before the name is: fsync, rename, fsync the
                        # directory. Without sync_create (files derived from the commit log,
                        # which recovery rebuilds) the owner syncs the directory before it
                        # relies on the file (MappedFileQueue.sync_created)
                        if sync_create:
                            durable(SYNC_FSYNC_FD, None, tmp, fd, 0)
                        if _sync_hook is not None:
                            _sync_hook("rename", path, 0, file_size)
                        os.rename(tmp, path)
                        if sync_create:
                            durable(SYNC_FSYNC_DIR, None, os.path.dirname(path) or ".", 0, 0)
                    except BaseException:
                        try:
                            os.unlink(tmp)
                        except FileNotFoundError:
                            pass
                        raise
                self.created = True
                self.allocated_end = allocate_bytes
            elif actual != file_size:
                from rocketstore.errors import CorruptionError
                raise CorruptionError(path, actual,
                    f"file is {actual} bytes, expected {file_size} (is the store's "
                    "mapped file size setting the one it was written with?)")
            with nogil:
                rc = rs_mmap(fd, <size_t>file_size, read_only, &addr)
            check_io(rc, path)
            self.inode = os.fstat(fd).st_ino
        finally:
            # the mapping keeps the file open by itself: no descriptor per file (a store
            # with thousands of queues runs under the default ulimit -n); the rare calls
            # that need one (fsync, fallocate) open it for the call, and a lent write
            # buffer's commits hold one while it is lent
            rs_close(fd)
        self.base = addr
        self.wbase = addr
        self.extent = extent
        self._shape[0] = file_size
        self._strides[0] = 1

    # -- positions ------------------------------------------------------------------------

    @property
    def read_pos(self):
        """Bytes readable: everything committed (equal to wrote_pos without a write buffer)."""
        return self.committed_pos

    def is_full(self):
        """True when no more bytes can be appended (``wrote_pos == file_size``)."""
        return self.wrote_pos == self.file_size

    def set_positions(self, Py_ssize_t pos):
        """Set wrote, committed and flushed positions to ``pos`` (load and truncation)."""
        if pos < 0 or pos > self.file_size:
            raise ValueError(f"{self.path}: position {pos} outside [0, {self.file_size}]")
        self.wrote_pos = pos
        self.committed_pos = pos
        self.flushed_pos = pos

    # -- bytes ------------------------------------------------------------------------------

    cdef int _ensure_mapped(self) except -1:
        if self.base == NULL:
            from rocketstore.errors import StoreClosedError
            raise StoreClosedError(f"mapped file {self.path}")
        return 0

    def append(self, const unsigned char[::1] data not None):
        """Copy ``data`` at the write position; return its position, or -1 if it does not fit."""
        self._ensure_mapped()
        if self.read_only:
            raise OSError(30, "mapped read-only", self.path)
        cdef Py_ssize_t n = data.shape[0]
        cdef Py_ssize_t pos = self.wrote_pos
        if pos + n > self.file_size:
            return -1
        if n:
            with nogil:
                memcpy(self.wbase + pos, &data[0], <size_t>n)
        if self.write_buffer is None:
            self.wrote_pos = pos + n
            self.committed_pos = self.wrote_pos
        else:
            rs_store_release(&self.wrote_pos, pos + n)
        return pos

    def write_at(self, Py_ssize_t pos, const unsigned char[::1] data not None):
        """Overwrite ``len(data)`` bytes at ``pos`` (headers of index files, tests)."""
        self._ensure_mapped()
        if self.read_only:
            raise OSError(30, "mapped read-only", self.path)
        cdef Py_ssize_t n = data.shape[0]
        if pos < 0 or pos + n > self.file_size:
            raise ValueError(f"{self.path}: write of {n} bytes at {pos} outside the file")
        if n:
            memcpy(self.base + pos, &data[0], <size_t>n)

    def read_bytes(self, Py_ssize_t pos, Py_ssize_t size):
        """A copy of ``size`` bytes at ``pos``."""
        self._ensure_mapped()
        if pos < 0 or size < 0 or pos + size > self.file_size:
            raise ValueError(f"{self.path}: read of {size} bytes at {pos} outside the file")
        return (<char *>self.base)[pos:pos + size]

    cdef object _slice(self, Py_ssize_t pos, Py_ssize_t size):
        # lifetime: the slice holds the managed buffer, which holds this MappedFile
        return self.whole_view()[pos:pos + size]

    cdef object whole_view(self):
        if self.released:
            # pinned readers (MessageExt) may still slice a released file; the view is not
            # cached, or it would hold the mapping forever
            self._internal_export = True
            try:
                return memoryview(self)
            finally:
                self._internal_export = False
        if self._mv is None:
            self._mv = memoryview(self)
        return self._mv

    def view(self, Py_ssize_t pos, Py_ssize_t size):
        """Zero-copy read-only ``memoryview`` of ``size`` bytes at ``pos``.

        The view pins the mapping: it stays valid after ``release()``.
        """
        self._ensure_mapped()
        if pos < 0 or size < 0 or pos + size > self.file_size:
            raise ValueError(f"{self.path}: view of {size} bytes at {pos} outside the file")
        return self._slice(pos, size)

    def select(self, Py_ssize_t pos, Py_ssize_t size=-1):
        """A view of readable bytes (up to ``read_pos``) at ``pos``; None when out of range.

        ``size=-1`` means everything from ``pos`` to the read position.
        """
        self._ensure_mapped()
        cdef Py_ssize_t end = self.committed_pos
        if size < 0:
            size = end - pos
        if pos < 0 or size < 0 or pos + size > end:
            return None
        return self._slice(pos, size)

    # -- buffer protocol: read-only, counted -------------------------------------------------

    def __getbuffer__(self, Py_buffer *buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError(f"mapped file {self.path}: views are read-only")
        if self.base == NULL or (self.released and not self._internal_export):
            raise BufferError(f"mapped file {self.path} is released")
        buf.buf = self.base
        buf.obj = self
        buf.len = self.file_size
        buf.readonly = 1
        buf.itemsize = 1
        buf.format = FORMAT_B if (flags & PyBUF_FORMAT) else NULL
        buf.ndim = 1
        buf.shape = self._shape if (flags & PyBUF_ND) else NULL
        buf.strides = self._strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        buf.suboffsets = NULL
        buf.internal = NULL
        self.view_count += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self.view_count -= 1
        if self.released and self.view_count == 0:
            self._unmap_now()

    @property
    def exported_views(self):
        """Buffer exports alive (the internal whole-file view counts as one)."""
        return self.view_count

    # -- transient store pool: write buffer and commit ----------------------------------------

    def set_write_buffer(self, WriteBuffer buf not None):
        """Append into ``buf`` from now on; readers see bytes only once ``commit()`` copied
        them into the file. Only an empty, writable file takes one."""
        self._ensure_mapped()
        if self.read_only or self.wrote_pos != 0 or self.write_buffer is not None:
            raise ValueError(f"{self.path}: a write buffer is lent only to a new, empty file")
        if buf.size < self.file_size:
            raise ValueError(f"{self.path}: write buffer of {buf.size} bytes is smaller "
                             f"than the file ({self.file_size})")
        if self.fd < 0:
            self.fd = self._open_fd()       # commits pwrite through it
        self.write_buffer = buf
        self.wbase = buf.ptr

    def take_write_buffer(self):
        """Detach and return the write buffer once every written byte is committed (None
        without one); appends then go straight to the mapping."""
        cdef WriteBuffer buf = self.write_buffer
        if buf is None:
            return None
        if self.committed_pos != rs_load_acquire(&self.wrote_pos):
            raise ValueError(f"{self.path}: {self.wrote_pos - self.committed_pos} bytes of the "
                             "write buffer are not committed yet")
        self.write_buffer = None
        self.wbase = self.base
        if self.fd >= 0:
            rs_close(self.fd)
            self.fd = -1
        return buf

    def commit(self, int least_pages=0):
        """Copy the written-but-uncommitted bytes of the write buffer into the file (pwrite)
        and publish them to readers; return the committed position.

        With ``least_pages > 0`` nothing is copied until that many whole pages wait, unless
        the file is full (docs/format.md §4.5 ``isAbleToCommit``). Without a write buffer every
        append is committed already. One committer at a time (the commit service, or the
        writer at a roll, under the pool's commit lock); appends may run meanwhile.
        """
        self._ensure_mapped()
        if self.write_buffer is None:
            return self.committed_pos
        cdef Py_ssize_t start = self.committed_pos
        cdef Py_ssize_t end = rs_load_acquire(&self.wrote_pos)    # bytes below it are written
        cdef int rc
        if end <= start:
            return start
        if least_pages > 0 and end != self.file_size:
            if end // RS_OS_PAGE_SIZE - start // RS_OS_PAGE_SIZE < least_pages:
                return start
        if _sync_hook is not None:
            _sync_hook("commit", self.path, start, end - start)    # tests: see or fail it
        with nogil:
            rc = rs_pwrite_all(self.fd, self.wbase + start, <size_t>(end - start), start)
        check_io(rc, self.path)
        # a GIL-free dispatcher reads the committed position: bytes first, then the position
        rs_store_release(&self.committed_pos, end)
        return end

    # -- durability and warm-up ---------------------------------------------------------------

    def flush(self, int least_pages=0):
        """msync the written-but-unflushed bytes; return the new flushed position.

        With ``least_pages > 0`` nothing is synced until that many whole pages are dirty
        (docs/format.md §4.5 ``isAbleToFlush``), unless the file is full.
        """
        self._ensure_mapped()
        cdef Py_ssize_t target = self.committed_pos
        cdef Py_ssize_t start = self.flushed_pos
        cdef int rc = 0
        if target <= start:
            return start
        if least_pages > 0 and target != self.file_size:
            if target // RS_OS_PAGE_SIZE - start // RS_OS_PAGE_SIZE < least_pages:
                return start
        if not self.read_only:
            durable(SYNC_MSYNC, self, self.path, start, target - start)
        self.flushed_pos = target
        return target

    def allocate(self, Py_ssize_t offset, Py_ssize_t length):
        """Allocate [offset, offset+length) of the file for real (posix_fallocate): writes
        there then never fault on a full disk; ``OSError(ENOSPC)`` here instead."""
        self._ensure_mapped()
        if offset < 0 or length < 0 or offset + length > self.file_size:
            raise ValueError(f"{self.path}: allocation of {length} bytes at {offset} outside the file")
        cdef int rc
        cdef int fd = self.fd if self.fd >= 0 else self._open_fd()
        with nogil:
            rc = rs_allocate_range(fd, offset, length)
        if fd != self.fd:
            rs_close(fd)
        check_io(rc, self.path)
        if offset <= self.allocated_end < offset + length:
            self.allocated_end = offset + length

    cdef int _grow(self, Py_ssize_t end) except -1:
        """Allocate up to ``end`` and an extent beyond it (whole extents from the file start;
        the rest of the file when ``extent`` is 0); at the end of the file, call
        ``on_last_extent``."""
        self._ensure_mapped()
        if end > self.file_size:
            raise ValueError(f"{self.path}: reservation up to {end} past the file's end")
        cdef Py_ssize_t step = self.extent
        cdef Py_ssize_t new_end = self.file_size
        if 0 < step:
            new_end = min(self.file_size, (end // step + 1) * step)
        cdef Py_ssize_t start = self.allocated_end
        if _sync_hook is not None:
            _sync_hook("allocate", self.path, start, new_end - start)
        self.allocate(start, new_end - start)       # sets allocated_end
        if new_end == self.file_size and self.on_last_extent is not None:
            hook, self.on_last_extent = self.on_last_extent, None
            hook()
        return 0

    def advise(self, str advice):
        """``madvise`` the whole mapping: "normal", "random" or "sequential".

        "random" turns off read-ahead on faults. A file written through its mapping at a
        place never touched (a new consume-queue file, the index's hash slots) otherwise
        faults in a whole read-ahead window of zeros per first touch: with an 8 MiB window a
        new consume queue's first unit cost 6-20 ms of page zeroing on the dispatch thread.
        """
        cdef int code = {"normal": 0, "random": 1, "sequential": 2}[advice]
        self._ensure_mapped()
        check_io(rs_madvise(self.base, <size_t>self.file_size, code), self.path)

    def sync_metadata(self):
        """fsync the file and its directory, so its allocation survives power loss."""
        self._ensure_mapped()
        durable(SYNC_FSYNC, self, self.path, 0, self.file_size)
        durable(SYNC_FSYNC_DIR, None, os.path.dirname(self.path) or ".", 0, 0)

    def warm(self, bint lock=False, Py_ssize_t flush_pages=0):
        """Fault every page in before writes need it (RocketMQ ``warmMappedFile``).

        A file created here is all zeros, so a zero byte is written per page (the pages are
        then resident and dirty-able without a fault); an existing file is only read. Then
        ``MADV_WILLNEED`` and, with ``lock``, ``mlock`` (failure to lock -- RLIMIT_MEMLOCK --
        leaves ``mlocked`` False and is not an error, as in RocketMQ). With ``flush_pages``
        (sync flush), the zeros are synced every that many pages.
        """
        self._ensure_mapped()
        cdef int write = self.created and not self.read_only
        cdef size_t n = <size_t>self.file_size
        with nogil:
            rs_touch_pages(self.base, n, RS_OS_PAGE_SIZE, write)
            rs_madvise(self.base, n, ADVICE_WILLNEED)
        if write and flush_pages > 0:
            # sync the zeros chunk by chunk (RocketMQ flushLeastPagesWhenWarmMapedFile): the
            # filesystem turns its allocated-but-unwritten extents into written ones now, so a
            # later sync of real data writes data only, not extent metadata through the journal
            chunk = flush_pages * RS_OS_PAGE_SIZE
            for start in range(0, self.file_size, chunk):
                durable(SYNC_MSYNC, self, self.path, start, min(chunk, self.file_size - start))
        if lock and not self.mlocked:
            with nogil:
                rc = rs_mlock(self.base, n)
            self.mlocked = rc == 0

    # -- lifetime ----------------------------------------------------------------------------

    cdef void _unmap_now(self) noexcept:
        if self.base != NULL:
            if self.mlocked:
                rs_munlock(self.base, <size_t>self.file_size)
                self.mlocked = False
            rs_munmap(self.base, <size_t>self.file_size)
            self.base = NULL
            self.wbase = NULL
        if self.fd >= 0:
            rs_close(self.fd)
            self.fd = -1

    def unmap(self):
        """Unmap now; ``BufferError`` if views of the file are still exported."""
        if self._mv is not None:
            self._mv.release()
            self._mv = None
        if self.view_count > 0:
            raise BufferError(f"mapped file {self.path}: {self.view_count} exported view(s) "
                              "still open; release them before unmapping")
        self.released = True
        self._unmap_now()

    def release(self):
        """Done with the file: unmap now, or when the last exported view is released."""
        if self.released:
            return
        self.released = True
        if self._mv is not None:
            mv = self._mv
            self._mv = None
            mv.release()    # may drop view_count to 0 and unmap via __releasebuffer__
        if self.view_count == 0:
            self._unmap_now()

    def destroy(self):
        """Release the mapping and delete the file (views already taken stay valid)."""
        self.release()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def fileno(self):
        """The descriptor a lent write buffer commits through, else -1: a mapped file keeps
        no descriptor open (``inode`` identifies the file)."""
        return self.fd

    @property
    def is_mapped(self):
        return self.base != NULL

    def __dealloc__(self):
        # views hold a reference to self, so no view can be alive here
        self._unmap_now()

    def __repr__(self):
        return (f"MappedFile({self.path!r}, size={self.file_size}, wrote={self.wrote_pos}, "
                f"committed={self.committed_pos}, flushed={self.flushed_pos})")
