"""tools/flush_sweep.py: flush_bench units as Spark tasks -> Parquet rows and PNG plots.

A real local SparkSession runs three short units: an async and a sync one that succeed and a
unit with a bad flush interval, which must come back as a failed row carrying the store's
error instead of failing the sweep.
"""
from __future__ import annotations

import importlib.util
import re
import struct
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

TOOL = Path(__file__).resolve().parent.parent / "tools" / "flush_sweep.py"


def _load_tool():
    spec = importlib.util.spec_from_file_location("flush_sweep", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flush_sweep"] = mod
    spec.loader.exec_module(mod)
    return mod


fs = _load_tool()


@pytest.fixture(scope="module")
def spark():
    from pyspark import SparkContext
    # a session another test module started is reused and left running for it
    shared = SparkContext._active_spark_context is not None
    session = fs.spark_session("local[2]")
    yield session
    if not shared:
        session.stop()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_sweep_writes_a_row_per_unit_failed_units_included_and_both_plots(spark, tmp_path):
    units = [fs.unit(flush="ASYNC_FLUSH", interval_ms=20, threads=2),
             fs.unit(flush="SYNC_FLUSH", threads=2, size=1024),
             fs.unit(interval_ms=-5)]
    out = tmp_path / "out"
    work = tmp_path / "stores"
    rows = fs.run_sweep(spark, units, out, duration=0.5, file_size=8 << 20, work_dir=str(work))

    import pyarrow.parquet as pq
    table = pq.read_table(out / "flush_sweep.parquet")
    assert table.num_rows == 3
    got = sorted(table.to_pylist(), key=lambda r: r["unit_id"])
    assert got == rows
    for r, u in zip(got, units):
        assert {k: r[k] for k in fs.UNIT_KEYS} == u
    ok_async, ok_sync, bad = got
    assert ok_async["ok"] and ok_sync["ok"], (ok_async["error"], ok_sync["error"])
    for r in (ok_async, ok_sync):
        assert r["error"] is None and r["messages"] > 0 and r["msgs_per_s"] > 0
        assert 0 < r["p50_us"] <= r["p99_us"] <= r["p999_us"] <= r["max_us"]
    assert ok_async["policy"] == "ASYNC" and ok_sync["policy"] == "SYNC"
    assert ok_sync["syncs"] > 0 and ok_sync["bytes_per_sync"] > 0
    assert ok_async["unflushed_max_bytes"] > 0
    assert not bad["ok"] and bad["messages"] is None
    assert "flush_interval_commit_log" in bad["error"]

    # every unit's store directory is gone; the plots are real PNGs
    assert list(work.iterdir()) == []
    for name in ("throughput_vs_p99.png", "unflushed_vs_interval.png"):
        w, h = _png_size(out / name)
        assert w > 100 and h > 100


def test_the_grids_cover_every_knob_and_reject_unknown_keys():
    small, full = fs.small_grid(), fs.full_grid()
    for grid in (small, full):
        for key in fs.UNIT_KEYS:
            assert len({u[key] for u in grid}) > 1, key
    assert len({tuple(sorted(u.items())) for u in full}) == len(full)
    # sync flush ignores the async-only knobs: the full grid does not repeat it over them
    sync = [u for u in full if u["flush"] == "SYNC_FLUSH"]
    assert {(u["interval_ms"], u["least_pages"]) for u in sync} == {(500, 4)}
    with pytest.raises(ValueError, match="unknown unit keys"):
        fs.unit(flush_interval=10)


def _task(tmp_path: Path, bench: Path, timeout: float = 30) -> dict:
    return {**fs.unit(), "unit_id": 7, "duration": 0.2, "file_size": 1 << 20, "bench": str(bench),
            "pythonpath": "", "work_dir": str(tmp_path / "stores"), "timeout": timeout}


def test_a_unit_that_exits_with_an_error_is_a_failed_row_with_its_last_stderr_line(tmp_path):
    bench = tmp_path / "flush_bench.py"
    bench.write_text("import sys\nprint('traceback noise', file=sys.stderr)\n"
                     "sys.exit('flush_bench: --transient-pool: not built yet')\n")
    row = fs.run_unit(_task(tmp_path, bench))
    assert row["unit_id"] == 7 and row["ok"] is False and row["messages"] is None
    assert row["error"] == "exit 1: flush_bench: --transient-pool: not built yet"
    assert list((tmp_path / "stores").iterdir()) == []


def test_a_unit_past_its_timeout_is_a_failed_row(tmp_path):
    bench = tmp_path / "flush_bench.py"
    bench.write_text("import time\ntime.sleep(30)\n")
    row = fs.run_unit(_task(tmp_path, bench, timeout=0.5))
    assert row["ok"] is False and row["error"] == "timed out after 0.5 s"


def test_plot_labels_do_not_overlap_and_every_marker_is_in_a_legend(tmp_path):
    """Readable by a person: a cluster of units at one spot (async p99 at its 1 µs floor) gets
    labels that overlap neither each other nor a marker, inside the axes; every policy, thread
    count and body size drawn has a legend entry; every axis names its unit."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import Bbox

    fig, ax = plt.subplots(figsize=(8, 5))
    pts = [(1, 1e5 + 3e3 * i) for i in range(10)] + [(2e4, 2e3), (2.1e4, 2e3)]
    for x, y in pts:
        ax.plot([x], [y], "o")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.5, 1e6)
    ax.set_ylim(1e2, 1e6)
    fs._place_labels(ax, pts, [f"unit {i}, some configuration" for i in range(len(pts))])
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    frame = ax.get_window_extent(r)
    # the text alone (an Annotation's own extent includes its leader line)
    boxes = [matplotlib.text.Text.get_window_extent(t, r) for t in ax.texts]
    assert len(boxes) == len(pts)
    for i, b in enumerate(boxes):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1
        assert not any(b.overlaps(o) for o in boxes[i + 1:]), ax.texts[i].get_text()
        for x, y in pts:
            px, py = ax.transData.transform((x, y))
            assert not b.overlaps(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    plt.close(fig)

    rows = []
    for i, u in enumerate([fs.unit(interval_ms=10), fs.unit(interval_ms=500, least_pages=0),
                           fs.unit(transient_pool=True, threads=16), fs.unit(size=1024),
                           fs.unit(flush="SYNC_FLUSH", threads=1), fs.unit(warm=True)]):
        rows.append({**u, "unit_id": i, "ok": True, "policy": fs.policy(u), "p99_us": 1 + i % 2,
                     "msgs_per_s": 1e5 + i, "unflushed_max_ms": 500.0 + i,
                     "unflushed_max_bytes": 10_000_000 + i})
    seen: list = []
    real_savefig = plt.Figure.savefig

    def keep(self, *a, **kw):
        seen.append(self)
        return real_savefig(self, *a, **kw)
    plt.Figure.savefig = keep
    try:
        fs.plot(rows, tmp_path)
    finally:
        plt.Figure.savefig = real_savefig
    assert len(seen) == 2
    for fig in seen:
        entries = {t.get_text() for a in fig.axes for leg in
                   [c for c in a.get_children() if isinstance(c, matplotlib.legend.Legend)]
                   for t in leg.get_texts()}
        drawn = rows if fig is seen[0] else [r for r in rows if r["flush"] == "ASYNC_FLUSH"]
        for r in drawn:
            assert r["policy"] in entries and f"{r['size']} B messages" in entries, entries
            assert f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}" in entries
        for a in fig.axes:
            for label in (a.get_ylabel(), a.get_xlabel() if a.get_xlabel() else "(ms"):
                assert re.search(r"\((µs|ms|MB|messages/s|msgs/s)\b", label), label
