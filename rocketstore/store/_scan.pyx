# cython: language_level=3
"""Consume-queue scans: tags-code filters over runs of 20-byte units (docs/format.md §3, 5.1).

A consume-queue unit is ``phy offset int64 | size int32 | tags code int64``, big-endian, at
20-byte strides (rs_layout.h). Size 0 marks the end of data (unwritten, zeroed space) and size
RS_CQ_FILLER_SIZE a filler unit written before a queue's first real offset (5.1); a filler
never matches, and every scan stops at the first size-0 unit. The C kernels (``_scan.pxd``)
make one pass, compare raw loads against wanted codes byte-swapped once into stored order
(``TagMatcher``), and never swap a unit: one code is a compare per unit; a set of 0..8 codes
is one load from a 4 KiB table holding each code in a slot of its own (rs_cq_slot) and one
compare. No loop branches on a hit, so a 50 % hit rate scans as fast as a 1 % one. The
Python functions take any C-contiguous buffer of whole units (a memoryview of
a mapped file, bytes, a numpy uint8 array; read-only is fine) and release the GIL for the scan.

Matching compares the full 64-bit code, as stored; RocketMQ's consumer filter compares
``(int) tagsCode`` against its codeSet, which is the same test for hashCode-derived codes
since they are stored sign-extended (docs/format.md §3): pass Java hashCodes as signed ints.

Thread safety: stateless; any number of threads may scan at once, on the same buffer too.
The buffer is pinned (a typed memoryview holds an export) for the length of each call. A
writer appending to the same mapping may be mid-unit past the queue's write position: bound
scans of a growing queue by that position (or re-check the last unit found).
"""
cimport numpy as cnp
from cpython.number cimport PyIndex_Check
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uint8_t

from rocketstore.store._csrc cimport (
    RS_CQ_UNIT_SIZE, RS_CQ_TAGS_POS, RS_CQ_FILLER_SIZE, RS_CQ_PHYOFFSET_POS, RS_CQ_SIZE_POS,
    RS_CQ_SLOTS, RS_CQ_SLOT_SHIFTS, rs_load_u32, rs_load_u64, rs_be32_raw, rs_be64_raw,
    rs_get_be32, rs_get_be64, rs_cq_size_special, rs_cq_slot, rs_cq_slot_shift,
)

cnp.import_array()

cdef enum:
    UNROLL = 4                  # units per step of the unrolled loops (80 bytes)
    FIRST_MATCH_CAP = 1024      # int64 slots match_indices allocates before it knows the count

MAX_CODES = SCAN_MAX_CODES
UNIT_SIZE = RS_CQ_UNIT_SIZE


# -- predicates: one per variant, passed by value so the loops keep them in registers ----------

# One wanted code: one compare per unit.
cdef struct OneCode:
    uint64_t want                   # raw (stored-order) code
    uint32_t filler                 # raw RS_CQ_FILLER_SIZE

# 0..8 codes in a collision-free slot table: one load and one compare per unit.
cdef struct SlotSet:
    const uint64_t *slot            # borrows TagMatcher.slot
    uint32_t shift
    uint32_t filler

# 2..8 codes no slot window separates: eight compares per unit (raw[ncodes:] repeat raw[0]).
cdef struct AnySet:
    const uint64_t *raw             # borrows TagMatcher.raw
    uint32_t filler

ctypedef fused Pred:
    OneCode
    SlotSet
    AnySet


cdef inline bint _eq(const Pred *pr, uint64_t raw) noexcept nogil:
    # tags code test alone; branch-free, so a 50 % hit rate costs what a 1 % one does (a
    # branch here mispredicts half the time at 50 % and drops a scan from ~1.3 to ~0.2 G units/s)
    cdef const uint64_t *r
    if Pred is OneCode:
        return raw == pr.want
    elif Pred is SlotSet:
        return pr.slot[rs_cq_slot(raw, pr.shift)] == raw
    else:
        r = pr.raw
        return ((raw == r[0]) | (raw == r[1]) | (raw == r[2]) | (raw == r[3])
                | (raw == r[4]) | (raw == r[5]) | (raw == r[6]) | (raw == r[7]))


cdef inline bint _hit(const Pred *pr, uint64_t raw, uint32_t size) noexcept nogil:
    return _eq(pr, raw) & (size != pr.filler)


# The loops take four units per step. rs_cq_size_special flags a step holding an end-of-data
# unit, a filler (or a corrupt negative size); such a step, rare and well predicted, goes unit
# by unit with the exact checks, and every other step tests tags codes alone: no filler compare
# per unit, one loop branch per 80 bytes. (One code: 1.26 -> 1.41 G units/s, at the 1.46 G
# units/s numpy needs just to read the same bytes; tools/bench_scan.py.)

cdef inline bint _plain4(const unsigned char *p) noexcept nogil:
    return not (rs_cq_size_special(rs_load_u32(p + RS_CQ_SIZE_POS))
                | rs_cq_size_special(rs_load_u32(p + RS_CQ_UNIT_SIZE + RS_CQ_SIZE_POS))
                | rs_cq_size_special(rs_load_u32(p + 2 * RS_CQ_UNIT_SIZE + RS_CQ_SIZE_POS))
                | rs_cq_size_special(rs_load_u32(p + 3 * RS_CQ_UNIT_SIZE + RS_CQ_SIZE_POS)))


cdef inline bint _eq_at(const Pred *pr, const unsigned char *p, int k) noexcept nogil:
    return _eq(pr, rs_load_u64(p + k * RS_CQ_UNIT_SIZE + RS_CQ_TAGS_POS))


cdef inline Py_ssize_t _count(const unsigned char *units, Py_ssize_t n, Pred pr,
                              Py_ssize_t *stop) noexcept nogil:
    cdef const unsigned char *p = units
    cdef const unsigned char *end = units + n * RS_CQ_UNIT_SIZE
    cdef Py_ssize_t count = 0
    cdef uint32_t size
    while p < end:
        if end - p >= UNROLL * RS_CQ_UNIT_SIZE and _plain4(p):
            count += _eq_at(&pr, p, 0) + _eq_at(&pr, p, 1) + _eq_at(&pr, p, 2) + _eq_at(&pr, p, 3)
            p += UNROLL * RS_CQ_UNIT_SIZE
            continue
        size = rs_load_u32(p + RS_CQ_SIZE_POS)
        if size == 0:                           # end of data: size 0 in either byte order
            break
        count += _hit(&pr, rs_load_u64(p + RS_CQ_TAGS_POS), size)
        p += RS_CQ_UNIT_SIZE
    stop[0] = (p - units) // RS_CQ_UNIT_SIZE
    return count


cdef inline Py_ssize_t _mask(const unsigned char *units, Py_ssize_t n, Pred pr,
                             uint8_t *mask) noexcept nogil:
    cdef const unsigned char *p = units
    cdef const unsigned char *end = units + n * RS_CQ_UNIT_SIZE
    cdef uint8_t *m = mask
    cdef uint32_t size
    while p < end:
        if end - p >= UNROLL * RS_CQ_UNIT_SIZE and _plain4(p):
            m[0] = _eq_at(&pr, p, 0)
            m[1] = _eq_at(&pr, p, 1)
            m[2] = _eq_at(&pr, p, 2)
            m[3] = _eq_at(&pr, p, 3)
            m += UNROLL
            p += UNROLL * RS_CQ_UNIT_SIZE
            continue
        size = rs_load_u32(p + RS_CQ_SIZE_POS)
        if size == 0:
            break
        m[0] = _hit(&pr, rs_load_u64(p + RS_CQ_TAGS_POS), size)
        m += 1
        p += RS_CQ_UNIT_SIZE
    return m - mask


cdef inline Py_ssize_t _match(const unsigned char *units, Py_ssize_t n, Pred pr, int64_t base,
                              int64_t *out, Py_ssize_t max_out, Py_ssize_t *stop) noexcept nogil:
    # every index is written and the count advances on a hit. A four-unit step runs only
    # while count + 4 < max_out: it can neither write past out[max_out - 1] nor fill out,
    # so the unit-by-unit path takes the last matches and *stop is exact
    cdef const unsigned char *p = units
    cdef const unsigned char *end = units + n * RS_CQ_UNIT_SIZE
    cdef Py_ssize_t i = 0, count = 0
    cdef uint32_t size
    while p < end:
        if end - p >= UNROLL * RS_CQ_UNIT_SIZE and count + UNROLL < max_out and _plain4(p):
            out[count] = base + i
            count += _eq_at(&pr, p, 0)
            out[count] = base + i + 1
            count += _eq_at(&pr, p, 1)
            out[count] = base + i + 2
            count += _eq_at(&pr, p, 2)
            out[count] = base + i + 3
            count += _eq_at(&pr, p, 3)
            i += UNROLL
            p += UNROLL * RS_CQ_UNIT_SIZE
            continue
        size = rs_load_u32(p + RS_CQ_SIZE_POS)
        if size == 0:
            break
        out[count] = base + i
        count += _hit(&pr, rs_load_u64(p + RS_CQ_TAGS_POS), size)
        i += 1
        p += RS_CQ_UNIT_SIZE
        if count == max_out:
            break
    stop[0] = i
    return count


# -- kernels (declared in _scan.pxd) ----------------------------------------------------------

cdef inline uint64_t _empty_slot(uint32_t b, uint32_t shift) noexcept nogil:
    # a value whose own slot is b ^ 1, so no code that falls in slot b ever equals it
    return (<uint64_t>(b ^ 1)) << shift


cdef bint _fill_slots(TagMatcher *m, uint32_t shift) noexcept nogil:
    cdef uint32_t b, nslots = RS_CQ_SLOTS
    cdef int i
    m.shift = shift
    for b in range(nslots):
        m.slot[b] = _empty_slot(b, shift)
    for i in range(m.ncodes):
        b = rs_cq_slot(m.raw[i], shift)
        if m.slot[b] != _empty_slot(b, shift) and m.slot[b] != m.raw[i]:
            return False                        # two wanted codes share slot b
        m.slot[b] = m.raw[i]
    return True


cdef int matcher_init(TagMatcher *m, const int64_t *codes, int ncodes) noexcept nogil:
    cdef int i
    cdef uint32_t k, nshifts = RS_CQ_SLOT_SHIFTS
    if ncodes < 0 or ncodes > SCAN_MAX_CODES:
        return -1
    m.ncodes = ncodes
    m.filler_raw = rs_be32_raw(RS_CQ_FILLER_SIZE)
    for i in range(SCAN_MAX_CODES):
        m.raw[i] = rs_be64_raw(<uint64_t>codes[i if i < ncodes else 0]) if ncodes else 0
    # one code is compared directly and needs no table (4 KiB less to write per call)
    m.exact = False
    if ncodes == 1:
        return 0
    # 8 codes in 512 slots collide in one window with p ~ 5 %; the next window is independent
    # enough that 56 windows all failing takes a crafted set (then AnySet is used)
    for k in range(nshifts):
        if _fill_slots(m, rs_cq_slot_shift(k)):
            m.exact = True
            break
    return 0


cdef Py_ssize_t end_of_data_units(const unsigned char *units, Py_ssize_t n) noexcept nogil:
    cdef const unsigned char *p = units + RS_CQ_SIZE_POS
    cdef Py_ssize_t i = 0
    # four sizes per branch; the tail loop finds the exact unit
    while i + UNROLL <= n:
        if ((rs_load_u32(p) == 0) | (rs_load_u32(p + RS_CQ_UNIT_SIZE) == 0)
                | (rs_load_u32(p + 2 * RS_CQ_UNIT_SIZE) == 0)
                | (rs_load_u32(p + 3 * RS_CQ_UNIT_SIZE) == 0)):
            break
        i += UNROLL
        p += UNROLL * RS_CQ_UNIT_SIZE
    while i < n:
        if rs_load_u32(p) == 0:
            return i
        i += 1
        p += RS_CQ_UNIT_SIZE
    return n


cdef Py_ssize_t count_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                            Py_ssize_t *stop) noexcept nogil:
    cdef OneCode one
    cdef SlotSet slots
    cdef AnySet anyset
    if m.ncodes == 1:
        one.want = m.raw[0]
        one.filler = m.filler_raw
        return _count(units, n, one, stop)
    if m.exact:
        slots.slot = &m.slot[0]
        slots.shift = m.shift
        slots.filler = m.filler_raw
        return _count(units, n, slots, stop)
    anyset.raw = &m.raw[0]
    anyset.filler = m.filler_raw
    return _count(units, n, anyset, stop)


cdef Py_ssize_t mask_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                           uint8_t *mask) noexcept nogil:
    cdef OneCode one
    cdef SlotSet slots
    cdef AnySet anyset
    if m.ncodes == 1:
        one.want = m.raw[0]
        one.filler = m.filler_raw
        return _mask(units, n, one, mask)
    if m.exact:
        slots.slot = &m.slot[0]
        slots.shift = m.shift
        slots.filler = m.filler_raw
        return _mask(units, n, slots, mask)
    anyset.raw = &m.raw[0]
    anyset.filler = m.filler_raw
    return _mask(units, n, anyset, mask)


cdef Py_ssize_t match_units(const unsigned char *units, Py_ssize_t n, const TagMatcher *m,
                            int64_t base, int64_t *out, Py_ssize_t max_out,
                            Py_ssize_t *stop) noexcept nogil:
    cdef OneCode one
    cdef SlotSet slots
    cdef AnySet anyset
    if max_out <= 0:
        stop[0] = 0
        return 0
    if m.ncodes == 1:
        one.want = m.raw[0]
        one.filler = m.filler_raw
        return _match(units, n, one, base, out, max_out, stop)
    if m.exact:
        slots.slot = &m.slot[0]
        slots.shift = m.shift
        slots.filler = m.filler_raw
        return _match(units, n, slots, base, out, max_out, stop)
    anyset.raw = &m.raw[0]
    anyset.filler = m.filler_raw
    return _match(units, n, anyset, base, out, max_out, stop)


cdef void decode_units(const unsigned char *units, Py_ssize_t n, int64_t *phy_offsets,
                       int32_t *sizes, int64_t *tags_codes) noexcept nogil:
    cdef const unsigned char *p = units
    cdef Py_ssize_t i
    for i in range(n):
        phy_offsets[i] = rs_get_be64(p + RS_CQ_PHYOFFSET_POS)
        sizes[i] = rs_get_be32(p + RS_CQ_SIZE_POS)
        tags_codes[i] = rs_get_be64(p + RS_CQ_TAGS_POS)
        p += RS_CQ_UNIT_SIZE


# -- argument checks --------------------------------------------------------------------------

cdef const unsigned char[::1] _as_units(object units):
    cdef const unsigned char[::1] view
    try:
        view = units
    except (ValueError, TypeError):
        # another format or shape (int8, (n, 20) uint8, array.array): its bytes, if contiguous
        view = memoryview(units).cast("B")
    return view


cdef Py_ssize_t _unit_count(const unsigned char[::1] view) except -1:
    cdef Py_ssize_t nbytes = view.shape[0]
    if nbytes % RS_CQ_UNIT_SIZE != 0:
        raise ValueError(
            f"units: buffer of {nbytes} bytes is not a whole number of {RS_CQ_UNIT_SIZE}-byte "
            f"consume-queue units ({nbytes % RS_CQ_UNIT_SIZE} bytes past unit "
            f"{nbytes // RS_CQ_UNIT_SIZE})")
    return nbytes // RS_CQ_UNIT_SIZE


cdef int64_t _code(object value) except? -1:
    if not PyIndex_Check(value):    # Cython's conversion would truncate a float
        raise TypeError(f"codes: a tags code is an int, got {type(value).__name__}")
    try:
        return value
    except OverflowError:
        raise ValueError(f"codes: {value!r} is outside int64 (tags codes are signed 64-bit: "
                         f"pass Java hashCodes sign-extended)") from None


cdef int _matcher(TagMatcher *m, object codes) except -1:
    cdef int64_t c_codes[SCAN_MAX_CODES]
    cdef Py_ssize_t i, ncodes
    if PyIndex_Check(codes) and not (isinstance(codes, cnp.ndarray) and (<cnp.ndarray>codes).ndim):
        c_codes[0] = _code(codes)
        ncodes = 1
    else:
        if isinstance(codes, (list, tuple)):
            seq = codes
        elif isinstance(codes, (str, bytes, bytearray)):
            seq = None                          # iterable, but not of tags codes
        else:
            try:
                seq = tuple(codes)
            except TypeError:
                seq = None
        if seq is None:
            raise TypeError(f"codes: expected an int or a sequence of at most {SCAN_MAX_CODES} "
                            f"ints, got {type(codes).__name__}")
        ncodes = len(seq)
        if ncodes > SCAN_MAX_CODES:
            raise ValueError(f"codes: {ncodes} tags codes given; a scan takes at most "
                             f"{SCAN_MAX_CODES} (MAX_CODES)")
        for i in range(ncodes):
            c_codes[i] = _code(seq[i])
    matcher_init(m, c_codes, <int>ncodes)
    return 0


cdef Py_ssize_t _index(object value, str name) except -1:
    cdef Py_ssize_t v
    if not PyIndex_Check(value):
        raise TypeError(f"{name}: a unit index is an int, got {type(value).__name__}")
    try:
        v = value
    except OverflowError:
        if value < 0:
            raise ValueError(f"{name}={value}: unit indexes start at 0") from None
        return PY_SSIZE_T_MAX   # past any buffer: clamped like any end beyond the last unit
    if v < 0:
        raise ValueError(f"{name}={v}: unit indexes start at 0")
    return v


cdef inline cnp.ndarray _empty(Py_ssize_t n, int typenum):
    cdef cnp.npy_intp dim = n
    return <cnp.ndarray>cnp.PyArray_EMPTY(1, &dim, typenum, 0)


cdef inline cnp.ndarray _resized(cnp.ndarray arr, Py_ssize_t n):
    # in place (realloc); the array is ours alone until returned
    cdef cnp.npy_intp dim = n
    cdef cnp.PyArray_Dims shape
    if n != arr.shape[0]:
        shape.ptr = &dim
        shape.len = 1
        cnp.PyArray_Resize(arr, &shape, 0, cnp.NPY_CORDER)
    return arr


# -- Python API -------------------------------------------------------------------------------

def tag_mask(units, codes):
    """Boolean mask over every unit: True where the unit's tags code is one of ``codes``.

    Units from the first size-0 unit on (end of data) and filler units are False.

    Parameters
    ----------
    units : buffer
        Whole 20-byte consume-queue units, C-contiguous (memoryview, bytes, numpy uint8).
    codes : int or sequence of int
        One tags code or at most ``MAX_CODES`` (8), as stored: signed 64-bit.

    Returns
    -------
    numpy.ndarray of bool, one entry per unit.
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef TagMatcher m
    _matcher(&m, codes)
    cdef cnp.npy_intp dim = n
    # calloc'd, so the tail past the end of data stays False; numpy bools are bytes 0 / 1
    cdef cnp.ndarray mask = <cnp.ndarray>cnp.PyArray_ZEROS(1, &dim, cnp.NPY_BOOL, 0)
    if n:
        with nogil:
            mask_units(&view[0], n, &m, <uint8_t *>cnp.PyArray_DATA(mask))
    return mask


def count_matches(units, codes, start=0, end=None):
    """Number of units in ``[start, end)`` whose tags code is one of ``codes``.

    The scan stops at the first size-0 unit at or after ``start`` (end of data); filler units
    never match. ``end`` defaults to, and is clamped at, the number of units; ``start >= end``
    counts nothing. Negative indexes raise ``ValueError``.
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef TagMatcher m
    _matcher(&m, codes)
    cdef Py_ssize_t lo = _index(start, "start")
    cdef Py_ssize_t hi = n if end is None else min(_index(end, "end"), n)
    cdef Py_ssize_t count, stop
    if lo >= hi:
        return 0
    with nogil:
        count = count_units(&view[0] + lo * RS_CQ_UNIT_SIZE, hi - lo, &m, &stop)
    return count


def match_indices(units, codes, start=0, end=None):
    """Unit indexes (int64, ascending) in ``[start, end)`` whose tags code is one of ``codes``.

    Range, end-of-data and filler rules as ``count_matches``. One pass: the result array
    grows by doubling while the scan runs.
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef TagMatcher m
    _matcher(&m, codes)
    cdef Py_ssize_t lo = _index(start, "start")
    cdef Py_ssize_t hi = n if end is None else min(_index(end, "end"), n)
    cdef Py_ssize_t pos = lo, count = 0, got, stop, cap
    if lo >= hi:
        return _empty(0, cnp.NPY_INT64)
    cap = min(hi - lo, <Py_ssize_t>FIRST_MATCH_CAP)
    cdef cnp.ndarray out = _empty(cap, cnp.NPY_INT64)
    cdef int64_t *outp
    cdef const unsigned char *base = &view[0]
    while True:
        outp = <int64_t *>cnp.PyArray_DATA(out)
        with nogil:
            got = match_units(base + pos * RS_CQ_UNIT_SIZE, hi - pos, &m, pos,
                              outp + count, cap - count, &stop)
        count += got
        pos += stop
        if count < cap or pos >= hi:
            break                                   # end of range or of data
        # out is full: the matches left fit in the units left
        cap = min(2 * cap, count + (hi - pos))
        _resized(out, cap)
    return _resized(out, count)


def first_matches(units, codes, start, max_units, max_count):
    """Indexes (int64) of the first ``max_count`` matching units among ``max_units`` from ``start``.

    The window is ``[start, min(start + max_units, number of units))``, cut at end of data;
    the get-message path (docs/format.md §13) scans at most 800 units per pull this way.
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef TagMatcher m
    _matcher(&m, codes)
    cdef Py_ssize_t lo = _index(start, "start")
    cdef Py_ssize_t span = _index(max_units, "max_units")
    cdef Py_ssize_t want = _index(max_count, "max_count")
    cdef Py_ssize_t hi = lo + min(span, n - lo) if lo < n else lo
    cdef Py_ssize_t got, stop
    if lo >= hi or want == 0:
        return _empty(0, cnp.NPY_INT64)
    cdef cnp.ndarray out = _empty(min(want, hi - lo), cnp.NPY_INT64)
    with nogil:
        got = match_units(&view[0] + lo * RS_CQ_UNIT_SIZE, hi - lo, &m, lo,
                          <int64_t *>cnp.PyArray_DATA(out), out.shape[0], &stop)
    return _resized(out, got)


def units_to_arrays(units):
    """Every unit decoded: ``(phy_offsets int64, sizes int32, tags_codes int64)`` arrays.

    A plain decode of all units, with no end-of-data or filler rule (a size-0 unit decodes
    as size 0, a filler as 0x7FFFFFFF).
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef cnp.ndarray phy_offsets = _empty(n, cnp.NPY_INT64)
    cdef cnp.ndarray sizes = _empty(n, cnp.NPY_INT32)
    cdef cnp.ndarray tags_codes = _empty(n, cnp.NPY_INT64)
    if n:
        with nogil:
            decode_units(&view[0], n, <int64_t *>cnp.PyArray_DATA(phy_offsets),
                         <int32_t *>cnp.PyArray_DATA(sizes),
                         <int64_t *>cnp.PyArray_DATA(tags_codes))
    return phy_offsets, sizes, tags_codes


def end_of_data(units, start=0):
    """Index of the first unit at or after ``start`` with size 0, or the number of units.

    A reader tailing a growing queue passes the index it reached last time as ``start``.
    """
    cdef const unsigned char[::1] view = _as_units(units)
    cdef Py_ssize_t n = _unit_count(view)
    cdef Py_ssize_t lo = _index(start, "start")
    cdef Py_ssize_t found
    if lo >= n:
        return n
    with nogil:
        found = lo + end_of_data_units(&view[0] + lo * RS_CQ_UNIT_SIZE, n - lo)
    return found
