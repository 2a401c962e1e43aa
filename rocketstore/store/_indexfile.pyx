# cython: language_level=3
"""IndexFile: lookup of commit-log offsets by message key (docs/format.md §6).

Layout: a 40-byte header (begin/end store time, begin/end commit-log offset, used slot count,
next entry number), ``hash_slot_num`` 4-byte slots, then ``index_num`` 20-byte entries
(key hash 4, commit-log offset 8, seconds since the header's begin time 4, previous entry
number in the same slot 4). A slot holds the newest entry number of its chain; entry 0 is
never used, so a file holds ``index_num - 1`` keys. The key hash is the Java hashCode of
``topic#key``, made positive.

``put_key_hash`` (GIL-free) appends one entry; the dispatcher calls it for each key of each
record. Lookups walk a slot's chain as RocketMQ does and return every offset whose 32-bit
hash matches: callers verify candidates against the stored record, since different keys
share hashes ("Aa" and "BB").

Not thread-safe for writers (the dispatcher is the only one); readers walk published entries
(the header is written after each entry, so a concurrent walk sees a consistent chain).
"""
cimport cython
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t

from rocketstore.store._csrc cimport (
    rs_java_hash, rs_java_hash_update, RS_INDEX_HEADER_SIZE, RS_INDEX_SLOT_SIZE,
    RS_INDEX_ENTRY_SIZE,
)
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._bytes cimport put_u32 as _put32, put_u64 as _put64, get_i32 as _get32, get_i64 as _get64

import os

cdef enum:
    INT32_MAX_ = 2147483647
    ENTRY_CHUNK = 1 << 20       # bytes of entries allocated at a time (52,428 entries)


cdef int32_t index_key_hash(const char *topic, Py_ssize_t topic_len, const char *key,
                            Py_ssize_t key_len) noexcept nogil:
    return index_key_hash_from(index_topic_prefix(topic, topic_len), key, key_len)


cdef int32_t index_topic_prefix(const char *topic, Py_ssize_t topic_len) noexcept nogil:
    """Java hash state after "topic#": shared by every key of a record."""
    return rs_java_hash_update(rs_java_hash(topic, <size_t>topic_len), "#", 1)


cdef int32_t index_key_hash_from(int32_t prefix, const char *key, Py_ssize_t key_len) noexcept nogil:
    cdef int32_t h = rs_java_hash_update(prefix, key, <size_t>key_len)
    if h < 0:
        h = -h if h != -2147483647 - 1 else 0      # Math.abs; MIN_VALUE stays negative -> 0
    return h


def key_hash(str topic, str key):
    """The index hash of ``topic#key`` (docs/format.md §6.2)."""
    cdef bytes t = topic.encode("utf-8"), k = key.encode("utf-8")
    return index_key_hash(t, len(t), k, len(k))


def index_file_size(int32_t hash_slot_num, int32_t index_num):
    return RS_INDEX_HEADER_SIZE + hash_slot_num * RS_INDEX_SLOT_SIZE + index_num * RS_INDEX_ENTRY_SIZE


@cython.final
cdef class IndexFile:
    """One index file (``index/yyyyMMddHHmmssSSS``).

    Parameters
    ----------
    path : str
    hash_slot_num, index_num : int
        Geometry (``StoreConfig.max_hash_slot_num`` / ``max_index_num``).
    create : bool
        Create (and allocate for real) a new file; its header starts from ``prev_end_phy`` /
        ``prev_end_ts`` (the previous file's end, as RocketMQ carries it over).
    read_only : bool
    """

    def __init__(self, str path, int32_t hash_slot_num, int32_t index_num, *,
                 bint create=False, int64_t prev_end_phy=0, int64_t prev_end_ts=0,
                 bint read_only=False):
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError(f"index geometry: {hash_slot_num} slots, {index_num} entries")
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        size = index_file_size(hash_slot_num, index_num)
        # header and slots are written anywhere: allocate them now; entries are appended, so
        # allocate them a chunk at a time (a small store's index takes 20 MB of disk, not 420)
        cdef Py_ssize_t fixed = RS_INDEX_HEADER_SIZE + <Py_ssize_t>hash_slot_num * RS_INDEX_SLOT_SIZE
        self.allocated_end = min(size, fixed + ENTRY_CHUNK)
        self.mapped_file = MappedFile(path, size, create=create, read_only=read_only,
                                      allocate_bytes=self.allocated_end)
        if not read_only:
            # hash slots are written at random places: fault one page at a time, not a
            # read-ahead window of zeros (MappedFile.advise)
            self.mapped_file.advise("random")
        self.base = self.mapped_file.base
        if create:
            self.header.index_count = 1
            self.header.hash_slot_count = 0
            if prev_end_phy > 0:
                self.header.begin_phy = prev_end_phy
                self.header.end_phy = prev_end_phy
            if prev_end_ts > 0:
                self.header.begin_ts = prev_end_ts
                self.header.end_ts = prev_end_ts
            self.write_header()
        else:
            self._read_header()
            if not read_only:
                # a file of ours may be sparse past its entries: allocate what writes will use
                self.allocated_end = min(size, self.entry_end(self.header.index_count) + ENTRY_CHUNK)
                self.mapped_file.allocate(0, self.allocated_end)

    def grow(self):
        """Allocate the next chunk of entries for real (``OSError(ENOSPC)`` on a full disk)."""
        cdef Py_ssize_t size = self.mapped_file.file_size
        cdef Py_ssize_t new_end = min(size, self.allocated_end + ENTRY_CHUNK)
        if new_end > self.allocated_end:
            self.mapped_file.allocate(self.allocated_end, new_end - self.allocated_end)
            self.allocated_end = new_end

    def _read_header(self):
        self.header.begin_ts = _get64(self.base)
        self.header.end_ts = _get64(self.base + 8)
        self.header.begin_phy = _get64(self.base + 16)
        self.header.end_phy = _get64(self.base + 24)
        self.header.hash_slot_count = _get32(self.base + 32)
        self.header.index_count = _get32(self.base + 36)
        if self.header.index_count <= 0:
            self.header.index_count = 1                 # load treats <= 0 as 1
        if self.header.index_count > self.index_num:
            self.header.index_count = self.index_num

    def refresh(self):
        """Re-read the header (a reader following a writer in another process)."""
        self._read_header()

    cdef void write_header(self) noexcept nogil:
        _put64(self.base, <uint64_t>self.header.begin_ts)
        _put64(self.base + 8, <uint64_t>self.header.end_ts)
        _put64(self.base + 16, <uint64_t>self.header.begin_phy)
        _put64(self.base + 24, <uint64_t>self.header.end_phy)
        _put32(self.base + 32, <uint32_t>self.header.hash_slot_count)
        _put32(self.base + 36, <uint32_t>self.header.index_count)

    cdef int put_key_hash(self, int32_t key_hash, int64_t phy_offset, int64_t store_ts,
                          bint write_header=True) noexcept nogil:
        """Append an entry (IndexFile.putKey); 1 when written, 0 when the file is full, -1
        when the entry lies past the allocated part (call ``grow()``, then again). The header
        goes to the mapping too unless the caller writes it after a record's last key."""
        cdef IndexHeader *h = &self.header
        if h.index_count >= self.index_num:
            return 0
        if self.entry_end(h.index_count) > self.allocated_end:
            return -1
        cdef int32_t slot = key_hash % self.hash_slot_num
        cdef char *slot_p = self.base + RS_INDEX_HEADER_SIZE + slot * RS_INDEX_SLOT_SIZE
        cdef int32_t slot_value = _get32(slot_p)
        if slot_value <= 0 or slot_value > h.index_count:
            slot_value = 0
        cdef int64_t diff = store_ts - h.begin_ts
        diff = diff // 1000
        if h.begin_ts <= 0:
            diff = 0
        elif diff > INT32_MAX_:
            diff = INT32_MAX_
        elif diff < 0:
            diff = 0
        cdef char *e = (self.base + RS_INDEX_HEADER_SIZE + <int64_t>self.hash_slot_num * RS_INDEX_SLOT_SIZE
                        + <int64_t>h.index_count * RS_INDEX_ENTRY_SIZE)
        _put32(e, <uint32_t>key_hash)
        _put64(e + 4, <uint64_t>phy_offset)
        _put32(e + 12, <uint32_t>diff)
        _put32(e + 16, <uint32_t>slot_value)
        _put32(slot_p, <uint32_t>h.index_count)
        if h.index_count <= 1:
            h.begin_phy = phy_offset
            h.begin_ts = store_ts
        if slot_value == 0:
            h.hash_slot_count += 1
        h.index_count += 1
        h.end_phy = phy_offset
        h.end_ts = store_ts
        if write_header:
            self.write_header()
        return 1

    def put_key(self, str topic, str key, int64_t phy_offset, int64_t store_ts):
        """Index ``topic#key`` (tests and tools); False when the file is full."""
        cdef bytes t = topic.encode("utf-8"), k = key.encode("utf-8")
        cdef int32_t h = index_key_hash(t, len(t), k, len(k))
        cdef int rc = self.put_key_hash(h, phy_offset, store_ts)
        if rc < 0:
            self.grow()
            rc = self.put_key_hash(h, phy_offset, store_ts)
        return rc == 1

    # -- queries ---------------------------------------------------------------------------

    def is_time_matched(self, int64_t begin, int64_t end):
        cdef int64_t b = self.header.begin_ts, e = self.header.end_ts
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    cpdef list select_phy_offsets(self, int32_t key_hash, Py_ssize_t max_num, int64_t begin,
                                  int64_t end):
        """Offsets of the chain of ``key_hash``'s slot whose entry hash equals it and whose
        time is in [begin, end], newest first, at most ``max_num`` (RocketMQ selectPhyOffset:
        a hash match, not a key match)."""
        cdef list out = []
        cdef IndexHeader *h = &self.header
        cdef int32_t slot = key_hash % self.hash_slot_num
        cdef int32_t nxt = _get32(self.base + RS_INDEX_HEADER_SIZE + slot * RS_INDEX_SLOT_SIZE)
        cdef int32_t kh, diff, prev
        cdef int64_t phy, t
        cdef const char *e
        if nxt <= 0 or nxt > h.index_count or h.index_count <= 1:
            return out
        while len(out) < max_num:
            e = (self.base + RS_INDEX_HEADER_SIZE + <int64_t>self.hash_slot_num * RS_INDEX_SLOT_SIZE
                 + <int64_t>nxt * RS_INDEX_ENTRY_SIZE)
            kh = _get32(e)
            phy = _get64(e + 4)
            diff = _get32(e + 12)
            prev = _get32(e + 16)
            if diff < 0:
                break
            t = h.begin_ts + <int64_t>diff * 1000
            if kh == key_hash and begin <= t <= end:
                out.append(phy)
            # a link always points at an older entry (entries are appended; the slot holds
            # the newest): one that does not is damage and ends the walk, or a loop of
            # garbage links would be walked (and appended) without end
            if prev <= 0 or prev >= nxt or t < begin:
                if prev >= nxt:
                    self.bad_links += 1
                break
            nxt = prev
        return out

    cpdef bint has_entry(self, int32_t key_hash, int64_t phy_offset):
        """Whether the file holds an entry (key_hash, phy_offset): a walk of the slot's chain
        down to entries older than ``phy_offset`` (chains run newest first)."""
        cdef IndexHeader *h = &self.header
        cdef int32_t nxt = _get32(self.base + RS_INDEX_HEADER_SIZE
                                  + (key_hash % self.hash_slot_num) * RS_INDEX_SLOT_SIZE)
        cdef const char *e
        cdef int64_t phy
        cdef int32_t prev
        while 0 < nxt < h.index_count:
            e = (self.base + RS_INDEX_HEADER_SIZE + <int64_t>self.hash_slot_num * RS_INDEX_SLOT_SIZE
                 + <int64_t>nxt * RS_INDEX_ENTRY_SIZE)
            phy = _get64(e + 4)
            if phy < phy_offset:
                return False
            if phy == phy_offset and _get32(e) == key_hash:
                return True
            prev = _get32(e + 16)
            if prev >= nxt:             # not an older entry: damage (see select_phy_offsets)
                self.bad_links += 1
                return False
            nxt = prev
        return False

    # -- header and lifecycle -----------------------------------------------------------------

    @property
    def begin_timestamp(self): return self.header.begin_ts
    @property
    def end_timestamp(self): return self.header.end_ts
    @property
    def begin_phy_offset(self): return self.header.begin_phy
    @property
    def end_phy_offset(self): return self.header.end_phy
    @property
    def hash_slot_count(self): return self.header.hash_slot_count
    @property
    def index_count(self): return self.header.index_count
    @property
    def file_name(self): return self.mapped_file.file_name
    @property
    def path(self): return self.mapped_file.path

    def is_full(self):
        return self.is_write_full()

    def header_dict(self):
        return {"beginTimestamp": self.header.begin_ts, "endTimestamp": self.header.end_ts,
                "beginPhyOffset": self.header.begin_phy, "endPhyOffset": self.header.end_phy,
                "hashSlotCount": self.header.hash_slot_count, "indexCount": self.header.index_count}

    def entries(self):
        """Every entry as (number, key hash, commit-log offset, time diff s, prev number)."""
        out = []
        cdef const char *e
        for n in range(1, self.header.index_count):
            e = (self.base + RS_INDEX_HEADER_SIZE + <int64_t>self.hash_slot_num * RS_INDEX_SLOT_SIZE
                 + <int64_t>n * RS_INDEX_ENTRY_SIZE)
            out.append((n, _get32(e), _get64(e + 4), _get32(e + 12), _get32(e + 16)))
        return out

    def flush(self):
        if not self.mapped_file.read_only:
            self.write_header()
            self.mapped_file.set_positions(0)
            self.mapped_file.committed_pos = self.mapped_file.file_size
            self.mapped_file.wrote_pos = self.mapped_file.file_size
            self.mapped_file.flush(0)

    def close(self):
        self.mapped_file.release()
        self.base = NULL

    def destroy(self):
        self.mapped_file.destroy()
        self.base = NULL

    def __repr__(self):
        return f"IndexFile({self.file_name!r}, {self.header_dict()})"
