"""rocketstore.store._scan against struct and numpy oracles written from docs/format.md §3 and 5.1.

A consume-queue unit is ``>qiq`` (phy offset, size, tags code). The oracle scans a range unit by
unit: it stops at the first size-0 unit at or after the start, never matches a filler
(size 0x7FFFFFFF) and matches the full 64-bit tags code against the wanted set. Random units
come from hypothesis (small runs, every boundary of the four-unit steps) and from numpy (large
runs with fillers, negative sizes and 50 % hit rates); the named tests pin each boundary.
"""
import mmap
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refreader as rr  # noqa: E402

from rocketstore.store import _scan  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = struct.Struct(">qiq")
FILLER = 0x7FFFFFFF
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
CQ_DTYPE = np.dtype({"names": ["phy_offset", "size", "tags_code"],
                     "formats": [">i8", ">i4", ">i8"], "offsets": [0, 8, 12], "itemsize": 20})

# hypothesis: no example database (tests create no files in the tree), no deadline (CI jitter)
HYP = settings(database=None, deadline=None, max_examples=300)

# tags codes as RocketMQ stores them: Java hashCodes sign-extended (negative ones too), 0 (no
# TAGS), delivery timestamps, extremes; a small pool so that wanted codes actually occur
TAG_NAMES = ["TagA", "TagB", "OrderCreated", "OrderPaid", "中文", "😀", "a||b", ""]
POOL = sorted({rr.java_hash(t) for t in TAG_NAMES}
              | {0, 1, -1, 1_717_171_717_000, INT64_MIN, INT64_MAX, 1 << 32, 5, 5 + (1 << 40)})
assert any(c < 0 for c in POOL)

codes_st = st.one_of(st.sampled_from(POOL), st.integers(INT64_MIN, INT64_MAX))
sizes_st = st.one_of(st.integers(1, 4 << 20), st.integers(1, 4 << 20), st.integers(1, 4 << 20),
                     st.just(0), st.just(FILLER),
                     st.integers(-(1 << 31), -1), st.integers(1, FILLER - 1))
unit_st = st.tuples(st.integers(0, INT64_MAX), sizes_st, codes_st)
units_st = st.lists(unit_st, max_size=70)
wanted_st = st.lists(codes_st, max_size=_scan.MAX_CODES)
index_st = st.integers(0, 80)


def pack(units):
    return b"".join(UNIT.pack(*u) for u in units)


def unit(tag, size=100, phy_offset=0):
    return UNIT.pack(phy_offset, size, tag)


def oracle_matches(data, codes, start=0, end=None):
    """Indexes of matching units in [start, end), stopping at the first size-0 unit."""
    wanted = {codes} if isinstance(codes, int) else set(codes)
    units = [UNIT.unpack_from(data, i) for i in range(0, len(data), UNIT.size)]
    end = len(units) if end is None else min(end, len(units))
    found = []
    for i in range(start, end):
        _, size, tag = units[i]
        if size == 0:
            break
        if size != FILLER and tag in wanted:
            found.append(i)
    return found


def oracle_mask(data, codes):
    mask = np.zeros(len(data) // UNIT.size, dtype=bool)
    mask[oracle_matches(data, codes)] = True
    return mask


def numpy_oracle_mask(units, codes):
    """The same rules vectorized: for the large random runs."""
    arr = units.view(CQ_DTYPE)
    sizes = arr["size"].astype(np.int64)
    tags = arr["tags_code"].astype(np.int64)
    hit = np.zeros(len(arr), dtype=bool)
    for c in codes:
        hit |= tags == c
    hit &= sizes != FILLER
    zero = np.flatnonzero(sizes == 0)
    if zero.size:
        hit[zero[0]:] = False
    return hit


def random_units(rng, n, codes, hit_rate, filler_rate=0.0, negative_rate=0.0):
    arr = np.empty(n, dtype=CQ_DTYPE)
    sizes = rng.integers(1, 1 << 20, n).astype(np.int64)
    sizes[rng.random(n) < filler_rate] = FILLER
    sizes[rng.random(n) < negative_rate] = -rng.integers(1, 1 << 31, 1)[0]
    arr["size"] = sizes
    arr["phy_offset"] = rng.integers(0, 1 << 40, n)
    tags = rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64, endpoint=True)
    hits = rng.random(n) < hit_rate
    tags[hits] = rng.choice(np.array(codes, dtype=np.int64), hits.sum())
    arr["tags_code"] = tags
    return arr.view(np.uint8)


# -- against the oracle ----------------------------------------------------------------------

@HYP
@given(units=units_st, codes=wanted_st)
def test_tag_mask_matches_struct_oracle(units, codes):
    data = pack(units)
    got = _scan.tag_mask(data, codes)
    assert got.dtype == np.bool_ and got.shape == (len(units),)
    assert got.tolist() == oracle_mask(data, codes).tolist()


@HYP
@given(units=units_st, codes=wanted_st, start=index_st, end=st.one_of(st.none(), index_st))
def test_count_and_match_indices_match_oracle_over_any_range(units, codes, start, end):
    data = pack(units)
    want = oracle_matches(data, codes, start, end)
    assert _scan.count_matches(data, codes, start, end) == len(want)
    got = _scan.match_indices(data, codes, start, end)
    assert got.dtype == np.int64
    assert got.tolist() == want


@HYP
@given(units=units_st, codes=wanted_st, start=index_st, max_units=index_st,
       max_count=st.integers(0, 12))
def test_first_matches_match_oracle(units, codes, start, max_units, max_count):
    data = pack(units)
    want = oracle_matches(data, codes, start, start + max_units)[:max_count]
    got = _scan.first_matches(data, codes, start, max_units, max_count)
    assert got.dtype == np.int64
    assert got.tolist() == want


@HYP
@given(units=units_st)
def test_units_to_arrays_round_trips_struct_pack(units):
    phy_offsets, sizes, tags_codes = _scan.units_to_arrays(pack(units))
    assert (phy_offsets.dtype, sizes.dtype, tags_codes.dtype) == (np.int64, np.int32, np.int64)
    assert list(zip(phy_offsets.tolist(), sizes.tolist(), tags_codes.tolist())) == units


@HYP
@given(units=units_st, start=index_st)
def test_end_of_data_is_the_first_size_zero_unit(units, start):
    data = pack(units)
    n = len(units)
    sizes = [u[1] for u in units]
    want = next((i for i in range(start, n) if sizes[i] == 0), n)
    assert _scan.end_of_data(data, start) == want
    assert _scan.end_of_data(data) == next((i for i, s in enumerate(sizes) if s == 0), n)


@pytest.mark.parametrize("ncodes", [1, 2, 4, 8])
@pytest.mark.parametrize("hit_rate", [0.01, 0.5, 1.0])
def test_large_random_runs_match_numpy_oracle(ncodes, hit_rate):
    rng = np.random.default_rng(ncodes * 1000 + int(hit_rate * 100))
    codes = [int(c) for c in rng.integers(INT64_MIN, INT64_MAX, ncodes, dtype=np.int64)]
    units = random_units(rng, 100_003, codes, hit_rate, filler_rate=0.001, negative_rate=0.001)
    want = numpy_oracle_mask(units, codes)
    assert _scan.tag_mask(units, codes).tolist() == want.tolist()
    assert _scan.count_matches(units, codes) == int(want.sum())
    assert _scan.match_indices(units, codes).tolist() == np.flatnonzero(want).tolist()
    # an end of data in the middle cuts every scan there
    cut = units.copy().view(CQ_DTYPE)
    cut["size"][77_777] = 0
    want_cut = numpy_oracle_mask(cut.view(np.uint8), codes)
    assert not want_cut[77_777:].any()
    assert _scan.count_matches(cut.view(np.uint8), codes) == int(want_cut.sum())
    assert _scan.end_of_data(cut.view(np.uint8)) == 77_777


# -- boundaries ------------------------------------------------------------------------------

def test_first_and_last_unit_match():
    data = unit(7) + unit(1) * 10 + unit(7)
    assert _scan.match_indices(data, 7).tolist() == [0, 11]
    assert _scan.count_matches(data, 7, 0, 1) == 1
    assert _scan.count_matches(data, 7, 11, 12) == 1
    assert _scan.count_matches(data, 7, 1, 11) == 0
    assert _scan.first_matches(data, 7, 11, 1, 1).tolist() == [11]
    assert _scan.first_matches(data, 7, 0, 1, 5).tolist() == [0]
    assert _scan.tag_mask(data, 7).tolist() == [True] + [False] * 10 + [True]


def test_empty_ranges_and_a_start_beyond_the_end_find_nothing():
    data = unit(7) * 5
    for start, end in [(0, 0), (3, 3), (4, 2), (5, None), (6, None), (100, 200), (2**70, None)]:
        assert _scan.count_matches(data, 7, start, end) == 0
        assert _scan.match_indices(data, 7, start, end).tolist() == []
    assert _scan.first_matches(data, 7, 5, 10, 10).tolist() == []
    assert _scan.first_matches(data, 7, 9, 10, 10).tolist() == []
    assert _scan.first_matches(data, 7, 0, 0, 10).tolist() == []
    assert _scan.first_matches(data, 7, 0, 10, 0).tolist() == []
    assert _scan.end_of_data(data, 5) == 5
    assert _scan.end_of_data(data, 9) == 5


def test_end_beyond_the_buffer_is_clamped():
    data = unit(7) * 5
    assert _scan.count_matches(data, 7, 0, 6) == 5
    assert _scan.count_matches(data, 7, 2, 2**80) == 3
    assert _scan.first_matches(data, 7, 3, 2**80, 2**80).tolist() == [3, 4]


def test_empty_buffer():
    for buf in (b"", memoryview(b""), np.empty(0, np.uint8)):
        assert _scan.tag_mask(buf, 1).tolist() == []
        assert _scan.count_matches(buf, 1) == 0
        assert _scan.match_indices(buf, 1).tolist() == []
        assert _scan.first_matches(buf, 1, 0, 10, 10).tolist() == []
        assert [a.tolist() for a in _scan.units_to_arrays(buf)] == [[], [], []]
        assert _scan.end_of_data(buf) == 0


def test_negative_java_hash_codes_match_sign_extended():
    neg = [t for t in ("Order_Cancelled", "中文", "TagFöö", "😀") if rr.java_hash(t) < 0]
    assert neg
    data = b"".join(unit(rr.java_hash(t)) for t in neg) + unit(rr.java_hash(neg[0]) & 0xFFFFFFFF)
    for i, t in enumerate(neg):
        assert i in _scan.match_indices(data, rr.java_hash(t)).tolist()
    # the unsigned 32-bit form is a different 64-bit code: it matches only itself
    assert _scan.match_indices(data, rr.java_hash(neg[0])).tolist() == [0]
    assert _scan.match_indices(data, rr.java_hash(neg[0]) & 0xFFFFFFFF).tolist() == [len(neg)]
    assert _scan.count_matches(data, [INT64_MIN, -1]) == 0


def test_filler_units_never_match_even_with_the_wanted_code():
    # RocketMQ fillers are (0, 0x7FFFFFFF, 0): tags code 0 is also "no TAGS"
    data = unit(0, FILLER) * 5 + unit(0) + unit(9, FILLER) + unit(9) + unit(0, FILLER)
    for codes in (0, [0], [0, 9], [9, 0, 1, 2, 3, 4, 5, 6]):
        got = _scan.match_indices(data, codes).tolist()
        assert got == ([5, 7] if 9 in np.atleast_1d(codes) else [5])
        assert _scan.tag_mask(data, codes).tolist() == [i in got for i in range(9)]
        assert _scan.count_matches(data, codes) == len(got)
        assert _scan.first_matches(data, codes, 0, 9, 9).tolist() == got
    # a filler is data, not the end of it
    assert _scan.end_of_data(data) == 9


def test_a_size_zero_unit_ends_every_scan():
    data = unit(7) * 6 + unit(7, 0) + unit(7) * 6
    assert _scan.end_of_data(data) == 6
    assert _scan.count_matches(data, 7) == 6
    assert _scan.count_matches(data, [7, 8]) == 6
    assert _scan.match_indices(data, 7).tolist() == list(range(6))
    assert _scan.tag_mask(data, 7).tolist() == [True] * 6 + [False] * 7
    assert _scan.first_matches(data, 7, 4, 100, 100).tolist() == [4, 5]
    # a scan starting past the end-of-data unit sees only its own range
    assert _scan.count_matches(data, 7, 7) == 6
    assert _scan.end_of_data(data, 7) == 13
    assert _scan.count_matches(data, 7, 6) == 0


def test_negative_sizes_are_data_and_only_fillers_are_skipped():
    data = unit(7, -1) + unit(7, -(1 << 31)) + unit(7, FILLER - 1) + unit(7, FILLER) + unit(7, 1)
    assert _scan.match_indices(data, 7).tolist() == [0, 1, 2, 4]
    assert _scan.count_matches(data, [1, 7]) == 4


@pytest.mark.parametrize("max_count", range(1, 10))
def test_first_matches_stops_at_max_count_in_every_position_of_a_step(max_count):
    data = unit(7) * 20
    for start in range(4):
        got = _scan.first_matches(data, 7, start, 20, max_count)
        assert got.tolist() == list(range(start, start + max_count))
        assert _scan.first_matches(data, [7, 8], start, 20, max_count).tolist() == got.tolist()
    assert _scan.first_matches(data, 7, 0, max_count - 1, 100).tolist() == list(range(max_count - 1))


def test_match_indices_grows_past_its_first_allocation():
    data = (unit(7) + unit(1)) * 5000
    assert _scan.match_indices(data, 7).tolist() == list(range(0, 10000, 2))
    assert _scan.match_indices(unit(7) * 3000, [7, 1]).tolist() == list(range(3000))


# -- codes -----------------------------------------------------------------------------------

def test_codes_given_as_int_list_tuple_or_numpy_are_the_same():
    data = pack([(0, 100, c) for c in POOL] * 3)
    c = rr.java_hash("TagA")
    want = _scan.match_indices(data, c).tolist()
    assert want
    for codes in ([c], (c,), np.array([c]), np.int64(c), np.array(c), iter([c]), {c}):
        assert _scan.match_indices(data, codes).tolist() == want
    assert _scan.count_matches(data, [c, c, c]) == len(want)


def test_eight_codes_are_accepted_and_nine_raise_value_error_naming_the_limit():
    data = pack([(0, 100, c) for c in POOL])
    codes = POOL[:8]
    assert _scan.count_matches(data, codes) == 8
    assert _scan.MAX_CODES == 8
    for fn, args in [(_scan.count_matches, ()), (_scan.match_indices, ()), (_scan.tag_mask, ()),
                     (_scan.first_matches, (0, 10, 10))]:
        with pytest.raises(ValueError, match=r"9 tags codes.*at most 8"):
            fn(data, POOL[:9], *args)


def test_no_codes_match_nothing():
    data = unit(0) * 5 + unit(0, 0)
    assert _scan.count_matches(data, []) == 0
    assert _scan.tag_mask(data, ()).tolist() == [False] * 6
    assert _scan.match_indices(data, []).tolist() == []


def test_codes_outside_int64_or_not_ints_are_refused():
    data = unit(1)
    for bad in (1 << 63, [1, -(1 << 63) - 1]):
        with pytest.raises(ValueError, match="outside int64"):
            _scan.count_matches(data, bad)
    for bad in (1.0, [1.5], "TagA", b"x", None):
        with pytest.raises(TypeError, match="codes"):
            _scan.count_matches(data, bad)


def test_codes_equal_in_their_low_bits_are_told_apart():
    # the set scan's slot table starts with the low bits: these collide there
    codes = [5, 5 + (1 << 40), 5 + (1 << 62), 5 - (1 << 63)]
    data = pack([(0, 100, c) for c in codes + [5 + (1 << 41), 5 + (1 << 33)]])
    assert _scan.match_indices(data, codes).tolist() == [0, 1, 2, 3]
    assert _scan.match_indices(data, codes[1:3]).tolist() == [1, 2]


def _from_raw(raw):
    """The tags code whose 8 stored (big-endian) bytes, loaded natively, are ``raw``."""
    return int.from_bytes(raw.to_bytes(8, sys.byteorder), "big", signed=True)


def test_codes_that_no_slot_window_separates_still_match_exactly():
    # pairs differing only in raw bit 0 and only in raw bit 63: no 9-bit window of the raw
    # word holds both bits, so every window has a colliding pair (the eight-compare path)
    a, b = 0x0123456789ABCDEF, 0x0FEDCBA987654321
    codes = [_from_raw(a), _from_raw(a ^ 1), _from_raw(b), _from_raw(b ^ (1 << 63))]
    others = [_from_raw(a ^ 2), _from_raw(b ^ (1 << 62)), 0, -1]
    rng = np.random.default_rng(3)
    order = rng.integers(0, 8, 1000)
    pool = codes + others
    data = pack([(i, FILLER if i % 97 == 0 else 100, pool[k]) for i, k in enumerate(order)])
    assert _scan.match_indices(data, codes).tolist() == oracle_matches(data, codes)
    assert _scan.tag_mask(data, codes).tolist() == oracle_mask(data, codes).tolist()
    assert _scan.count_matches(data, codes, 13, 900) == len(oracle_matches(data, codes, 13, 900))


# -- buffers and arguments -------------------------------------------------------------------

def test_a_buffer_not_a_whole_number_of_units_raises_value_error_naming_its_length():
    for data in (b"\0" * 21, bytearray(39), np.zeros(1001, np.uint8), b"\0" * 19):
        nbytes = len(data)
        for call in (lambda: _scan.tag_mask(data, 1), lambda: _scan.count_matches(data, 1),
                     lambda: _scan.match_indices(data, 1),
                     lambda: _scan.first_matches(data, 1, 0, 1, 1),
                     lambda: _scan.units_to_arrays(data), lambda: _scan.end_of_data(data)):
            with pytest.raises(ValueError, match=rf"{nbytes} bytes .* 20-byte"):
                call()


def test_read_only_buffers_are_accepted(tmp_path):
    data = unit(7) + unit(3) + unit(7)
    ro = np.frombuffer(data, dtype=np.uint8)
    assert not ro.flags.writeable
    path = tmp_path / "00000000000000000000"
    path.write_bytes(data + bytes(20 * 5))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for buf in (data, memoryview(data), ro, memoryview(data)[20:], mm):
            n = len(memoryview(buf)) // 20
            assert _scan.count_matches(buf, 7) == len(oracle_matches(bytes(buf), 7))
            assert _scan.tag_mask(buf, 7).shape == (n,)
            assert _scan.end_of_data(buf) == (3 if buf is mm else n)
        mask = _scan.tag_mask(mm, 7)
        del mask
        assert _scan.units_to_arrays(mm)[1].tolist() == [100, 100, 100, 0, 0, 0, 0, 0]


def test_other_contiguous_buffer_shapes_and_formats_are_read_as_bytes():
    data = unit(7) * 3 + unit(1)
    as_u8 = np.frombuffer(data, dtype=np.uint8)
    for buf in (as_u8.reshape(-1, 20), as_u8.view(np.int8), bytearray(data),
                np.frombuffer(data, dtype=CQ_DTYPE)):
        assert _scan.match_indices(buf, 7).tolist() == [0, 1, 2]
    with pytest.raises((TypeError, ValueError)):
        _scan.count_matches(np.zeros(80, np.uint8)[::2], 7)       # not contiguous


def test_negative_indexes_raise_value_error():
    data = unit(7) * 3
    with pytest.raises(ValueError, match="start=-1"):
        _scan.count_matches(data, 7, -1)
    with pytest.raises(ValueError, match="end=-2"):
        _scan.match_indices(data, 7, 0, -2)
    with pytest.raises(ValueError, match="max_units"):
        _scan.first_matches(data, 7, 0, -1, 3)
    with pytest.raises(ValueError, match="max_count"):
        _scan.first_matches(data, 7, 0, 3, -1)
    with pytest.raises(ValueError, match="start"):
        _scan.end_of_data(data, -(1 << 80))
    with pytest.raises(TypeError, match="start"):
        _scan.count_matches(data, 7, 1.0)


def test_scans_from_many_threads_agree():
    rng = np.random.default_rng(11)
    codes = [rr.java_hash("TagA"), rr.java_hash("TagB")]
    units = random_units(rng, 400_000, codes, 0.3)
    want = _scan.count_matches(units, codes)
    got = []

    def run():
        got.append([_scan.count_matches(units, codes) for _ in range(5)])
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [[want] * 5] * 4


def test_stub_matches_the_compiled_module():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "rocketstore.store._scan", "--ignore-unused-allowlist",
         "--allowlist", os.path.join(ROOT, "tests", "stubtest_allowlist.txt")],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
