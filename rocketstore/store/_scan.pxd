"""C-level consume-queue scan kernels (docs/format.md §3, 5.1) for other Cython modules.

Every kernel reads ``n`` whole 20-byte units at ``units`` (big-endian, as mapped), makes one
pass, takes no GIL and cannot fail. A scan stops at the first unit whose size is 0 (end of
data) and reports where it stopped; filler units (size RS_CQ_FILLER_SIZE) never match.
The caller keeps the buffer alive and unmoved for the call (hold a typed memoryview of the
mapping, which pins it: MappedFile refuses to unmap while a view is exported).

Usage from Cython::

    from rocketstore.store._scan cimport TagMatcher, matcher_init, count_units
    cdef TagMatcher m
    cdef int64_t codes[2]
    cdef Py_ssize_t stop
    if matcher_init(&m, codes, 2) != 0: ...     # ncodes outside 0..SCAN_MAX_CODES
    with nogil:
        hits = count_units(p, n, &m, &stop)     # p: const unsigned char*, n units
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uint8_t

from rocketstore.store._csrc cimport RS_CQ_SLOTS


cdef enum:
    SCAN_MAX_CODES = 8          # wanted tags codes per scan (a subscription's codeSet)


# The wanted codes of one scan, converted once to the raw (stored-order) form the loops compare
# raw unit loads against, so no unit is byte-swapped. Build with matcher_init; reuse it across
# files and calls (read-only during a scan: threads may share one).
cdef struct TagMatcher:
    int ncodes                          # 0..SCAN_MAX_CODES; 0 matches nothing
    bint exact                          # slot holds every code in a slot of its own (set
                                        # scans; one code is compared directly: no table)
    uint32_t shift                      # slot window: rs_cq_slot(raw, shift)
    uint32_t filler_raw                 # RS_CQ_FILLER_SIZE in stored order
    uint64_t raw[SCAN_MAX_CODES]        # wanted codes in stored order; raw[ncodes:] = raw[0]
    uint64_t slot[RS_CQ_SLOTS]          # a code, or a value that cannot be in that slot;
                                        # written only when ncodes != 1


# 0, or -1 (m untouched) when ncodes is outside 0..SCAN_MAX_CODES. codes are tags codes as
# decoded (Java hashCodes sign-extended, delivery times); duplicates are harmless.
cdef int matcher_init(TagMatcher *m, const int64_t *codes, int ncodes) noexcept nogil

# Index of the first unit with size 0, or n.
cdef Py_ssize_t end_of_data_units(const unsigned char *units, Py_ssize_t n) noexcept nogil

# Number of matching units in units[0:stop]; *stop = index of the first size-0 unit, or n.
cdef Py_ssize_t count_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                            Py_ssize_t *stop) noexcept nogil

# mask[i] = 1 for a matching unit, else 0, for i in [0, stop); returns stop (first size-0
# unit, or n). mask[stop:n] is not written.
cdef Py_ssize_t mask_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                           uint8_t *mask) noexcept nogil

# Writes base + i for up to max_out matching units i, in order, to out; returns how many.
# *stop = where the scan ended: the index after the max_out-th match when out filled up,
# else the first size-0 unit, or n (0 when max_out <= 0). A caller that continues resumes at
# *stop. The stores are branch-free: out[returned:max_out] may hold scratch values.
cdef Py_ssize_t match_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                            int64_t base, int64_t *out, Py_ssize_t max_out,
                            Py_ssize_t *stop) noexcept nogil

# Decodes every field of n units (no end-of-data stop) into three arrays of n entries.
cdef void decode_units(const unsigned char *units, Py_ssize_t n, int64_t *phy_offsets,
                       int32_t *sizes, int64_t *tags_codes) noexcept nogil
