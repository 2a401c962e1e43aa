#!/usr/bin/env python3
"""Consume-queue scan benchmark (rocketstore.store._scan), in the style of leveldb's db_bench.

Builds --units consume-queue units in RAM (20 bytes each: 50 M units = 1 GB, as ~167 full
RocketMQ CQ files of 300 000 units) with random sizes and random Java-hashCode-like tags codes,
of which --hit-rate (1 %) carry the wanted code, then times on one thread:

  count_one       count_matches with one code
  count_set4      count_matches with a set of 4 codes (the wanted one + 3 absent ones)
  match_one       match_indices with one code (writes the 1 % hit indexes)
  mask_one        tag_mask with one code (writes a bool per unit)
  end_of_data     end_of_data over the whole buffer (no size-0 unit: scans all of it)
  first_matches   get_message's window: 32 matches among at most 800 units (calls/s)
  decode          units_to_arrays (three decoded arrays)

against baselines measured in the same run on the same bytes:

  python_loop     a per-unit Python loop (struct.iter_unpack + compare) over --py-units
                  units, rate extrapolated
  memcpy_bound    np.copyto of the whole buffer into a preallocated, pre-faulted array,
                  reported as units/s (the bytes of one unit copied per unit)
  read_bound      numpy's vectorized sum over the same bytes as uint64: what reading them
                  costs with no work per unit (the real ceiling of a scan)

Each figure is the best of --repeat runs. Usage:
  python tools/bench_scan.py [--units=50000000] [--repeat=5] [--py-units=200000]
"""
from __future__ import annotations

import os

# numpy's OpenBLAS threads spin on start-up and steal a core on small machines
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import struct
import sys
import time
from typing import Callable


import numpy as np  # noqa: E402

from rocketstore.store import _scan  # noqa: E402

FILLER_SIZE = 0x7FFFFFFF
UNIT = _scan.UNIT_SIZE
CQ_DTYPE = np.dtype({"names": ["phy_offset", "size", "tags_code"],
                     "formats": [">i8", ">i4", ">i8"],
                     "offsets": [0, 8, 12], "itemsize": UNIT})


def java_hash(s: str) -> int:
    """Java String.hashCode, sign-extended (what RocketMQ stores as a tags code)."""
    h = 0
    units16 = s.encode("utf-16-be")
    for i in range(0, len(units16), 2):      # over UTF-16 code units, as Java does
        h = (31 * h + int.from_bytes(units16[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


WANTED = java_hash("OrderCreated")
ABSENT = [java_hash(t) for t in ("OrderPaid", "OrderShipped", "OrderCancelled")]


def build_units(n: int, hit_rate: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arr = np.empty(n, dtype=CQ_DTYPE)
    sizes = rng.integers(100, 4096, n, dtype=np.int32)
    arr["size"] = sizes
    arr["phy_offset"] = np.cumsum(sizes, dtype=np.int64) - sizes
    tags = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64)
    taken = np.array([WANTED] + ABSENT, dtype=np.int64)
    while True:  # the random others must not be one of the named codes
        clash = np.flatnonzero((tags[:, None] == taken[None, :]).any(axis=1))
        if clash.size == 0:
            break
        tags[clash] = rng.integers(-(1 << 31), 1 << 31, clash.size, dtype=np.int64)
    tags[rng.random(n) < hit_rate] = WANTED
    arr["tags_code"] = tags
    return arr.view(np.uint8)


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def python_loop(buf: memoryview, want: int) -> int:
    """The per-unit loop a pure-Python reader would run (same stop and filler rules)."""
    count = 0
    for _off, size, tag in struct.iter_unpack(">qiq", buf):
        if size == 0:
            break
        if tag == want and size != FILLER_SIZE:
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=50_000_000, help="units in the buffer")
    ap.add_argument("--hit-rate", type=float, default=0.01, help="share of units with the code")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure (best is shown)")
    ap.add_argument("--py-units", type=int, default=200_000, help="units the Python loop scans")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args(argv)
    n = args.units

    t0 = time.perf_counter()
    units = build_units(n, args.hit_rate, args.seed)
    expected = int(np.count_nonzero(units.view(CQ_DTYPE)["tags_code"] == WANTED))
    print(f"bench_scan: {n:,} units ({units.nbytes / 1e9:.2f} GB) built in "
          f"{time.perf_counter() - t0:.1f} s; {expected:,} carry code {WANTED} "
          f"({expected / n:.2%}); best of {args.repeat}; numpy {np.__version__}")

    results: dict[str, float] = {}      # name -> units/s

    def report(name: str, seconds: float, count: int, note: str = "") -> None:
        rate = count / seconds
        results[name] = rate
        print(f"  {name:14s} {rate / 1e9:8.3f} G units/s  {seconds * 1e3:9.2f} ms  {note}")

    # -- baselines
    dst = np.empty_like(units)
    np.copyto(dst, units)                               # fault the destination's pages in
    dt, _ = best_of(args.repeat, lambda: np.copyto(dst, units))
    report("memcpy_bound", dt, n, f"np.copyto, {units.nbytes / dt / 1e9:.1f} GB/s read")
    del dst
    words = units[:units.nbytes // 8 * 8].view(np.uint64)
    dt, _ = best_of(args.repeat, lambda: words.sum())
    report("read_bound", dt, n, f"numpy uint64 sum: {units.nbytes / dt / 1e9:.1f} GB/s read")
    k = min(args.py_units, n)
    view = memoryview(units)[:k * UNIT]
    dt, got = best_of(max(1, min(args.repeat, 3)), lambda: python_loop(view, WANTED))
    py_expected = int(np.count_nonzero(units[:k * UNIT].view(CQ_DTYPE)["tags_code"] == WANTED))
    assert got == py_expected, (got, py_expected)
    report("python_loop", dt, k, f"{k:,} units, extrapolated")

    # -- kernels
    codes4 = [WANTED] + ABSENT
    dt, got = best_of(args.repeat, lambda: _scan.count_matches(units, WANTED))
    assert got == expected, (got, expected)
    report("count_one", dt, n, f"{got:,} matches")
    dt, got = best_of(args.repeat, lambda: _scan.count_matches(units, codes4))
    assert got == expected, (got, expected)
    report("count_set4", dt, n, f"{got:,} matches")
    dt, got = best_of(args.repeat, lambda: _scan.match_indices(units, WANTED))
    assert len(got) == expected
    report("match_one", dt, n, f"{len(got):,} indexes")
    del got
    dt, got = best_of(args.repeat, lambda: _scan.tag_mask(units, WANTED))
    assert int(got.sum()) == expected
    report("mask_one", dt, n, "one bool per unit")
    del got
    dt, got = best_of(args.repeat, lambda: _scan.end_of_data(units))
    assert got == n
    report("end_of_data", dt, n, "no size-0 unit: whole buffer")
    calls = 20_000
    window = 800

    view_all = memoryview(units)      # what a mapped file hands get_message

    def pulls() -> int:
        fm = _scan.first_matches
        step = max(1, (n - window) // calls)
        found = 0
        for i in range(calls):
            found += len(fm(view_all, WANTED, i * step, window, 32))
        return found
    dt, got = best_of(args.repeat, pulls)
    print(f"  {'first_matches':14s} {calls / dt / 1e6:8.3f} M calls/s   "
          f"{dt / calls * 1e6:7.2f} us/call  800-unit window, {got:,} hits in {calls:,} calls")
    dt, got = best_of(max(1, min(args.repeat, 3)), lambda: _scan.units_to_arrays(units))
    report("decode", dt, n, "units_to_arrays: 3 arrays")
    del got

    # -- ratios
    print()
    for name in ("count_one", "count_set4"):
        r = results[name]
        print(f"  {name:14s} {r / results['python_loop']:9.0f}x python_loop   "
              f"{r / results['memcpy_bound']:5.2f}x memcpy_bound   "
              f"{r / results['read_bound']:5.2f}x read_bound")
    target = 0.5e9
    ok = results["count_one"] >= target and results["count_set4"] >= target
    print(f"\n  target {target / 1e9:.1f} G units/s on one core: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
