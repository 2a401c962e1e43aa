cimport cython
from libc.stdint cimport int32_t, int64_t

from rocketstore.store._mapped cimport MappedFile


# The 40-byte header of an index file, kept in C and written through to the mapping
# (docs/format.md §6.1).
cdef struct IndexHeader:
    int64_t begin_ts
    int64_t end_ts
    int64_t begin_phy
    int64_t end_phy
    int32_t hash_slot_count
    int32_t index_count         # next entry number; entries start at 1


@cython.final
cdef class IndexFile:
    cdef readonly MappedFile mapped_file
    cdef readonly int32_t hash_slot_num
    cdef readonly int32_t index_num
    cdef readonly int64_t bad_links     # chain links found pointing at a newer entry (damage)
    cdef IndexHeader header
    cdef char *base
    cdef Py_ssize_t allocated_end       # bytes allocated for real; entries past it wait for grow()

    cdef int put_key_hash(self, int32_t key_hash, int64_t phy_offset, int64_t store_ts,
                          bint write_header=*) noexcept nogil
    cdef void write_header(self) noexcept nogil
    cpdef bint has_entry(self, int32_t key_hash, int64_t phy_offset)
    cpdef list select_phy_offsets(self, int32_t key_hash, Py_ssize_t max_num, int64_t begin,
                                  int64_t end)
    cdef inline bint is_write_full(self) noexcept nogil:
        return self.header.index_count >= self.index_num

    # can ``n`` more entries be written without growing the allocation?
    cdef inline bint has_room(self, Py_ssize_t n) noexcept nogil:
        return (self.header.index_count + n <= self.index_num
                and self.entry_end(self.header.index_count + n - 1) <= self.allocated_end)

    cdef inline const char *slot_addr(self, int32_t key_hash) noexcept nogil:
        return self.base + 40 + (key_hash % self.hash_slot_num) * 4

    cdef inline Py_ssize_t entry_end(self, Py_ssize_t number) noexcept nogil:
        return 40 + <Py_ssize_t>self.hash_slot_num * 4 + (number + 1) * 20


# abs(Java hashCode) of "topic#key", 0 for Integer.MIN_VALUE (docs/format.md §6.2)
cdef int32_t index_key_hash(const char *topic, Py_ssize_t topic_len, const char *key,
                            Py_ssize_t key_len) noexcept nogil
cdef int32_t index_topic_prefix(const char *topic, Py_ssize_t topic_len) noexcept nogil
cdef int32_t index_key_hash_from(int32_t prefix, const char *key, Py_ssize_t key_len) noexcept nogil
