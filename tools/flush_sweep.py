#!/usr/bin/env python3
"""Flush-policy sweeps on Spark: a grid of flush configurations, one Spark task per unit.

Each unit is one ``tools/flush_bench.py`` run (one configuration in, one JSON line out) in a
subprocess with its own temporary store directory on the worker. The driver collects one
row per unit into a DataFrame -- a unit that fails (a bad configuration, a feature not built,
a crash, a timeout) is a row with ``ok = false`` and its error, never a failed sweep -- writes
it to Parquet, and plots with matplotlib:

  throughput_vs_p99.png          msgs/s against p99 put latency, one series per policy
  unflushed_vs_interval.png      the largest unflushed window (ms and bytes) against
                                 flush_interval_commit_log, async units

Grids: ``small`` (the default: 14 units, about a minute on local[2]) and ``full``
(every combination of flush type, interval, least pages, thorough interval, transient pool,
warm-up, producer threads and message size; sync-flush units do not vary the async-only
knobs). On a cluster, ``--master spark://host:7077`` and ``--parquet`` on storage the
executors share (hdfs://, s3a://, a shared mount; the PNGs stay on the driver): every worker
needs this Python with
rocketstore installed (``PYSPARK_PYTHON`` is set to the driver's interpreter path, so install
it at the same path, or pass ``--conf spark.pyspark.python=/path/to/python``); the
flush_bench script is shipped to the workers with the job. Units that run side by side share
their worker's cores and disk (local[2] runs two at once); for figures undisturbed by each
other, give a unit a whole worker with ``--conf spark.task.cpus=<cores per executor>``.

Example:
  python tools/flush_sweep.py --out sweep-out                    # small grid on local[2]
  python tools/flush_sweep.py --master spark://host:7077 --grid full --duration 5 \
      --conf spark.task.cpus=8 --parquet hdfs://namenode/sweeps/flush.parquet --out sweep
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import itertools
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
BENCH = TOOLS / "flush_bench.py"
REPO = TOOLS.parent

# one unit's configuration: these keys, passed to flush_bench as --flags
UNIT_KEYS = ("flush", "interval_ms", "least_pages", "thorough_interval_ms", "transient_pool",
             "warm", "threads", "size")
DEFAULTS = {"flush": "ASYNC_FLUSH", "interval_ms": 500, "least_pages": 4,
            "thorough_interval_ms": 10_000, "transient_pool": False, "warm": False,
            "threads": 4, "size": 100}


def unit(**kw: Any) -> dict:
    """A grid point: RocketMQ's defaults overridden by ``kw``."""
    bad = set(kw) - set(UNIT_KEYS)
    if bad:
        raise ValueError(f"unknown unit keys: {sorted(bad)}")
    return {**DEFAULTS, **kw}


def small_grid() -> list[dict]:
    """A dozen units covering every knob once around RocketMQ's defaults."""
    units = [unit(interval_ms=i) for i in (10, 100, 500, 1000)]           # async flush interval
    units += [unit(least_pages=0), unit(least_pages=64, thorough_interval_ms=1000)]
    units += [unit(flush="SYNC_FLUSH", threads=t) for t in (1, 4, 16)]    # group commit
    # the transient pool only exists with async flush (RocketMQ's rule; flush_bench ignores it
    # under SYNC_FLUSH), so it is varied there: one producer and many
    units += [unit(transient_pool=True), unit(transient_pool=True, threads=16)]
    units += [unit(warm=True), unit(size=1024), unit(flush="SYNC_FLUSH", threads=4, size=1024)]
    return units


def full_grid() -> list[dict]:
    """Every combination; the async-only knobs (interval, least pages, thorough interval) are
    left at their defaults for sync flush, which ignores them."""
    units = []
    for flush, pool, warm, threads, size in itertools.product(
            ("ASYNC_FLUSH", "SYNC_FLUSH"), (False, True), (False, True), (1, 4, 16), (100, 1024)):
        common = dict(flush=flush, transient_pool=pool, warm=warm, threads=threads, size=size)
        if flush == "SYNC_FLUSH":
            if not pool:            # the pool is async-only: a SYNC unit with it repeats one without
                units.append(unit(**common))
            continue
        for interval, least, thorough in itertools.product((10, 100, 500, 1000), (0, 4, 64),
                                                           (1000, 10_000)):
            units.append(unit(interval_ms=interval, least_pages=least,
                              thorough_interval_ms=thorough, **common))
    return units


GRIDS = {"small": small_grid, "full": full_grid}


def policy(u: dict) -> str:
    """The series a unit belongs to in the plots: flush type plus the pool / warm-up switches."""
    name = "SYNC" if u["flush"] == "SYNC_FLUSH" else "ASYNC"
    if u["transient_pool"]:
        name += "+pool"
    if u["warm"]:
        name += "+warm"
    return name


def bench_args(u: dict, duration: float, file_size: int, store_dir: str) -> list[str]:
    args = ["--flush", u["flush"], "--threads", str(u["threads"]), "--size", str(u["size"]),
            "--duration", str(duration), "--interval", str(u["interval_ms"]),
            "--least-pages", str(u["least_pages"]),
            "--thorough-interval", str(u["thorough_interval_ms"]),
            "--file-size", str(file_size), "--dir", store_dir]
    if u["transient_pool"]:
        args.append("--transient-pool")
    if u["warm"]:
        args.append("--warm")
    return args


# -- the Spark task ---------------------------------------------------------------------------

# result columns, in order, with their Spark types (config columns come first, see SCHEMA)
RESULT_COLUMNS = (("messages", "long"), ("seconds", "double"), ("msgs_per_s", "double"),
                  ("mb_per_s", "double"), ("p50_us", "long"), ("p99_us", "long"),
                  ("p999_us", "long"), ("max_us", "long"), ("syncs", "long"),
                  ("bytes_per_sync", "long"), ("unflushed_max_bytes", "long"),
                  ("unflushed_max_ms", "double"))


def run_unit(task: dict) -> dict:
    """Run one flush_bench unit in a fresh store directory; never raises: a failure is a row
    with ``ok`` False and the error. ``task``: the unit plus ``unit_id``, ``duration``,
    ``file_size``, ``bench`` (the driver's flush_bench path), ``pythonpath``, ``work_dir``,
    ``timeout``."""
    u = {k: task[k] for k in UNIT_KEYS}
    row: dict[str, Any] = {"unit_id": task["unit_id"], **u, "policy": policy(u),
                           "duration_s": float(task["duration"]), "ok": False, "error": None,
                           "host": socket.gethostname(), "wall_s": None}
    row.update({name: None for name, _ in RESULT_COLUMNS})
    t0 = time.monotonic()
    store_dir = None
    try:
        bench = task["bench"]
        if not os.path.exists(bench):
            # on a cluster the script arrives through SparkContext.addFile
            from pyspark import SparkFiles
            bench = SparkFiles.get(os.path.basename(bench))
        work_dir = task["work_dir"]
        if work_dir:
            os.makedirs(work_dir, exist_ok=True)
        store_dir = tempfile.mkdtemp(prefix=f"flush-sweep-{task['unit_id']}-", dir=work_dir)
        env = dict(os.environ)
        # the driver's source tree first (local runs from a checkout); a path a worker lacks
        # is skipped by Python, which then imports the installed rocketstore
        env["PYTHONPATH"] = os.pathsep.join(p for p in (task["pythonpath"], env.get("PYTHONPATH"))
                                            if p)
        out = subprocess.run([sys.executable, bench, *bench_args(u, task["duration"],
                                                                  task["file_size"], store_dir)],
                             capture_output=True, text=True, timeout=task["timeout"], env=env)
        if out.returncode != 0:
            lines = [x for x in out.stderr.strip().splitlines() if x.strip()]
            row["error"] = (f"exit {out.returncode}: " + (lines[-1] if lines else "no output"))[:2000]
        else:
            r = json.loads(out.stdout.strip().splitlines()[-1])
            lat = r["latency_us"]
            row.update(messages=r["messages"], seconds=r["seconds"], msgs_per_s=r["msgs_per_s"],
                       mb_per_s=r["mb_per_s"], p50_us=lat["p50"], p99_us=lat["p99"],
                       p999_us=lat["p99.9"], max_us=lat["max"], syncs=r["syncs"],
                       bytes_per_sync=r["bytes_per_sync"],
                       unflushed_max_bytes=r["unflushed_max_bytes"],
                       unflushed_max_ms=float(r["unflushed_max_ms"]), ok=True)
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {task['timeout']} s"
    except Exception as e:          # a row, not a dead sweep: the message says what broke
        row["error"] = f"{type(e).__name__}: {e}"[:2000]
    finally:
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)
        row["wall_s"] = round(time.monotonic() - t0, 3)
    for name, typ in RESULT_COLUMNS:
        if row[name] is not None:
            row[name] = float(row[name]) if typ == "double" else int(row[name])
    return row


def schema():
    from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, StringType,
                                   StructField, StructType)
    spark_type = {"long": LongType(), "double": DoubleType()}
    return StructType(
        [StructField("unit_id", IntegerType(), False),
         StructField("flush", StringType(), False),
         StructField("interval_ms", IntegerType(), False),
         StructField("least_pages", IntegerType(), False),
         StructField("thorough_interval_ms", IntegerType(), False),
         StructField("transient_pool", BooleanType(), False),
         StructField("warm", BooleanType(), False),
         StructField("threads", IntegerType(), False),
         StructField("size", IntegerType(), False),
         StructField("policy", StringType(), False),
         StructField("duration_s", DoubleType(), False),
         StructField("ok", BooleanType(), False),
         StructField("error", StringType(), True),
         StructField("host", StringType(), True),
         StructField("wall_s", DoubleType(), True)]
        + [StructField(name, spark_type[typ], True) for name, typ in RESULT_COLUMNS])


# -- the driver -------------------------------------------------------------------------------

def spark_session(master: str, conf: dict[str, str] | None = None):
    """A SparkSession for the sweep: UI off, workers on this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master(master).appName("rocketstore-flush-sweep")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    return b.getOrCreate()


def run_sweep(spark, units: list[dict], out_dir: str | os.PathLike[str], *, duration: float = 2.0,
              file_size: int = 1 << 30, work_dir: str | None = None,
              timeout: float | None = None, parquet: str | None = None) -> list[dict]:
    """Run ``units`` as Spark tasks (one partition each); write the rows with the DataFrame
    writer to ``parquet`` (default ``out_dir/flush_sweep.parquet``; on a cluster, a location
    the executors share: hdfs://, s3a://, a shared mount) and the two PNGs into ``out_dir``
    on the driver. Returns the rows (dicts, in unit order)."""
    if not units:
        raise ValueError("no units to run")
    if duration <= 0:
        raise ValueError(f"duration must be positive, got {duration}")
    if __name__ != "__main__":
        # imported (tests): send run_unit to the workers by value, they need not import this
        # script (functions of a script run as __main__ travel by value anyway)
        from pyspark import cloudpickle
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sc = spark.sparkContext
    sc.addFile(str(BENCH))
    tasks = [{**unit(**{k: u[k] for k in UNIT_KEYS}), "unit_id": i, "duration": float(duration),
              "file_size": int(file_size), "bench": str(BENCH), "pythonpath": str(REPO),
              "work_dir": work_dir, "timeout": timeout or max(60.0, duration * 10 + 60)}
             for i, u in enumerate(units)]
    # the units run once, as Spark tasks; the rows (one small dict each) come back to the
    # driver, which writes them through a DataFrame
    rows = sorted(sc.parallelize(tasks, len(tasks)).map(run_unit).collect(),
                  key=lambda r: r["unit_id"])
    sch = schema()
    df = spark.createDataFrame([tuple(r[f.name] for f in sch.fields) for r in rows], sch)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.coalesce(1).write.mode("overwrite").parquet(parquet or str(out.resolve() / "flush_sweep.parquet"))
    plot(rows, out)
    return rows


MAX_LABELS = 40         # more points than this are not labelled (the full grid's hundreds)
# marker shape per producer thread count, fill per message size: with the colour per policy,
# every marker's look is explained by the legends (any other thread count gets "D")
THREAD_MARKERS = {1: "v", 2: "^", 4: "o", 8: "P", 16: "s", 32: "X"}


def _thread_marker(threads: int) -> str:
    return THREAD_MARKERS.get(threads, "D")


def _place_labels(ax: Any, points: list[tuple[float, float]], texts: list[str],
                  markers: list[tuple[float, float]] | None = None) -> int:
    """Annotate each point with its text where it overlaps no other label and no marker.

    Points are labelled top to bottom; a label goes right of its point, else the nearest free
    line below (then above) it, with a thin leader line when moved, so a cluster's labels form
    a column in the points' order and their leaders do not cross; left of the point when the
    right side leaves the axes. ``markers``: every marker drawn (default: ``points``). A label
    with no free place is left out rather than drawn over another: returns how many were."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    from matplotlib.transforms import Bbox
    taken = []
    for x, y in markers or points:      # every marker, about 10 px across
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - 6, py - 6, px + 6, py + 6))
    line_pt = 9.5                   # one label line, in points
    order = sorted(range(len(points)), key=lambda i: -points[i][1])
    left_out = 0
    for i in order:
        x, y = points[i]
        placed = None
        steps = [0] + [-k for k in range(1, 30)] + list(range(1, 30))
        for side in (1, -1):
            for dy in steps:
                dx = (7 if dy == 0 else 28) * side
                t = ax.annotate(texts[i], (x, y), xytext=(dx, dy * line_pt),
                                textcoords="offset points", fontsize=7, va="center",
                                ha="left" if side > 0 else "right")
                box = t.get_window_extent(renderer)
                box = Bbox.from_extents(box.x0 - 2, box.y0 - 1, box.x1 + 2, box.y1 + 1)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and \
                    frame.y0 <= box.y0 and box.y1 <= frame.y1
                t.remove()
                if inside and not any(box.overlaps(o) for o in taken):
                    placed = (dx, dy, side, box)
                    break
            if placed:
                break
        if placed is None:
            left_out += 1
            continue
        dx, dy, side, box = placed
        ax.annotate(texts[i], (x, y), xytext=(dx, dy * line_pt), textcoords="offset points",
                    fontsize=7, va="center", ha="left" if side > 0 else "right",
                    arrowprops=None if dy == 0 else dict(arrowstyle="-", lw=0.5, color="0.5",
                                                         shrinkA=1, shrinkB=4))
        taken.append(box)
    return left_out


def plot(rows: list[dict], out: Path) -> list[Path]:
    """The two figures from the successful rows; returns their paths.

    Colour is the policy, marker shape the producer threads, a hollow marker 1 KiB messages
    (filled: 100 B or what the row says), each explained in a legend outside the axes; the
    async units are labelled with their flush interval and least pages, placed so no two
    labels overlap."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    ok = [r for r in rows if r["ok"]]
    paths = [out / "throughput_vs_p99.png", out / "unflushed_vs_interval.png"]
    policies = sorted({r["policy"] for r in rows})
    colors = {name: f"C{i % 10}" for i, name in enumerate(policies)}
    sizes = sorted({r["size"] for r in ok})
    small = sizes[0] if sizes else 0

    def style(r: dict) -> dict:
        c = colors[r["policy"]]
        return dict(marker=_thread_marker(r["threads"]), color=c, markeredgecolor=c,
                    markerfacecolor=c if r["size"] == small else "none", markersize=7,
                    markeredgewidth=1.3, linestyle="none", alpha=0.8)

    def legends(ax: Any, where: float, shown: list[dict]) -> list[Any]:
        """Policy colours, thread shapes and size fills of the ``shown`` rows, stacked right
        of the axes."""
        made = []
        handles = [Patch(color=colors[p], label=p) for p in policies
                   if any(r["policy"] == p for r in shown)]
        made.append(ax.legend(handles=handles, title="policy (colour)", fontsize=8,
                              title_fontsize=8, loc="upper left", bbox_to_anchor=(where, 1.0),
                              borderaxespad=0))
        ax.add_artist(made[-1])
        threads = sorted({r["threads"] for r in shown})
        handles = [Line2D([], [], marker=_thread_marker(t), color="0.3", linestyle="none",
                          markersize=7, label=f"{t} thread{'s' if t != 1 else ''}")
                   for t in threads]
        made.append(ax.legend(handles=handles, title="producers (shape)", fontsize=8,
                              title_fontsize=8, loc="upper left", bbox_to_anchor=(where, 0.62),
                              borderaxespad=0))
        ax.add_artist(made[-1])
        handles = [Line2D([], [], marker="o", color="0.3", linestyle="none", markersize=7,
                          markerfacecolor="0.3" if sz == small else "none",
                          label=f"{sz} B messages") for sz in sizes
                   if any(r["size"] == sz for r in shown)]
        made.append(ax.legend(handles=handles, title="body size (fill)", fontsize=8,
                              title_fontsize=8, loc="upper left", bbox_to_anchor=(where, 0.27),
                              borderaxespad=0))
        return made

    # -- throughput against p99 latency ----------------------------------------------------
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for r in ok:
        ax.plot([r["p99_us"]], [r["msgs_per_s"]], **style(r))
    ax.set_xscale("log")
    ax.set_yscale("log")
    if ok:
        xs = [r["p99_us"] for r in ok]
        ys = [r["msgs_per_s"] for r in ok]
        # room right of the points for their labels, and above/below for stacking them
        ax.set_xlim(min(xs) / 1.6, max(xs) * 8)
        ax.set_ylim(min(ys) / 3, max(ys) * 3)
    ax.set_xlabel("p99 put latency (µs, log scale; recorded in whole µs, so 1 µs is the floor)")
    ax.set_ylabel("throughput (messages/s, log scale)")
    ax.set_title("Flush policies: throughput against p99 put latency\nlabels: policy, producer "
                 "threads, body size; async: flush interval (ms) / least pages (p)")
    ax.grid(True, which="both", alpha=0.3)
    fig.subplots_adjust(left=0.08, right=0.78, top=0.88, bottom=0.1)
    if ok:
        legends(ax, 1.02, ok)
    if 0 < len(ok) <= MAX_LABELS:
        # the whole configuration: markers at one spot (p99 at its 1 µs floor) hide each other
        texts = [f"{r['policy']}, {r['threads']}t, {r['size']} B"
                 + (f", {r['interval_ms']} ms / {r['least_pages']} p"
                    if r["flush"] == "ASYNC_FLUSH" else "") for r in ok]
        missing = _place_labels(ax, [(r["p99_us"], r["msgs_per_s"]) for r in ok], texts)
        if missing:
            ax.text(0.01, 0.01, f"{missing} unit(s) unlabelled: no free space (see the Parquet "
                    "rows)", transform=ax.transAxes, fontsize=7, color="0.4")
    elif ok:
        ax.text(0.01, 0.01, f"{len(ok)} units: too many to label (see the Parquet rows)",
                transform=ax.transAxes, fontsize=7, color="0.4")
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    # -- unflushed window against flush interval: ms above, MB below, one x axis ------------
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 7.5))
    asyncs = [r for r in ok if r["flush"] == "ASYNC_FLUSH"]
    key = lambda r: (r["policy"], r["size"], r["least_pages"], r["threads"])    # noqa: E731
    groups = sorted({key(r) for r in asyncs})
    labelled: list[tuple[float, float, float, str]] = []
    drawn: list[tuple[float, float, float]] = []
    # groups side by side at one interval: a small sideways shift (log x) by the group's rank
    # there keeps each marker visible; an interval with one group stays on its tick
    at: dict[int, list[tuple]] = {}
    for g in groups:
        for r in asyncs:
            if key(r) == g and g not in at.setdefault(r["interval_ms"], []):
                at[r["interval_ms"]].append(g)
    step = min(0.03, 0.2 / max(1, max((len(v) for v in at.values()), default=1)))   # decades

    def dodge(r: dict) -> float:
        there = at[r["interval_ms"]]
        return r["interval_ms"] * 10 ** (step * (there.index(key(r)) - (len(there) - 1) / 2))

    for g in groups:
        pts = sorted((r for r in asyncs if key(r) == g), key=lambda r: r["interval_ms"])
        xs = [dodge(r) for r in pts]
        drawn += [(x, r["unflushed_max_ms"], r["unflushed_max_bytes"] / 1e6)
                  for x, r in zip(xs, pts)]
        st = style(pts[0])
        st["linestyle"] = "-"
        top.plot(xs, [r["unflushed_max_ms"] for r in pts], **st)
        bottom.plot(xs, [r["unflushed_max_bytes"] / 1e6 for r in pts], **st)
        if g[2] != DEFAULTS["least_pages"]:
            labelled += [(x, r["unflushed_max_ms"], r["unflushed_max_bytes"] / 1e6,
                          f"least_pages {g[2]}") for x, r in zip(xs, pts)]
    intervals = sorted({r["interval_ms"] for r in asyncs})
    for a in (top, bottom):
        a.set_xscale("log")
        a.grid(True, which="major", alpha=0.3)
        a.set_ylim(bottom=0)
    if intervals:
        from matplotlib.ticker import FixedLocator, NullLocator
        bottom.xaxis.set_major_locator(FixedLocator(intervals))
        bottom.xaxis.set_minor_locator(NullLocator())
        bottom.set_xticklabels([str(i) for i in intervals])
        bottom.set_xlim(intervals[0] / 1.5, intervals[-1] * 2.5)
        top.set_ylim(0, max(r["unflushed_max_ms"] for r in asyncs) * 1.12)
        bottom.set_ylim(0, max(r["unflushed_max_bytes"] for r in asyncs) / 1e6 * 1.12)
    top.set_ylabel("largest unflushed\nwindow (ms)")
    bottom.set_ylabel("largest unflushed\nwindow (MB)")
    bottom.set_xlabel("flush_interval_commit_log (ms, log scale)")
    top.set_title("Async flush: data at risk on power loss against the flush interval\n"
                  f"(least_pages {DEFAULTS['least_pages']}, RocketMQ's default, unless labelled)")
    fig.subplots_adjust(left=0.1, right=0.76, top=0.9, bottom=0.09, hspace=0.08)
    if asyncs:
        legends(top, 1.02, asyncs)
        if len(labelled) > MAX_LABELS:
            top.text(0.01, 0.97, f"{len(labelled)} units with other least_pages: too many to "
                     "label (see the Parquet rows)", transform=top.transAxes, fontsize=7,
                     color="0.4", va="top")
        elif labelled:
            _place_labels(top, [(x, ms) for x, ms, _, _ in labelled], [t for *_, t in labelled],
                          [(x, ms) for x, ms, _ in drawn])
            _place_labels(bottom, [(x, mb) for x, _, mb, _ in labelled],
                          [t for *_, t in labelled], [(x, mb) for x, _, mb in drawn])
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def summary(rows: list[dict]) -> str:
    lines = [f"{'id':>3} {'policy':11s} {'thr':>3} {'size':>5} {'intv':>5} {'least':>5} "
             f"{'msgs/s':>10} {'p99 us':>8} {'syncs':>7} {'unfl ms':>8} {'unfl MB':>8}  error"]
    for r in rows:
        if r["ok"]:
            lines.append(f"{r['unit_id']:3d} {r['policy']:11s} {r['threads']:3d} {r['size']:5d} "
                         f"{r['interval_ms']:5d} {r['least_pages']:5d} {r['msgs_per_s']:10,.0f} "
                         f"{r['p99_us']:8d} {r['syncs']:7d} {r['unflushed_max_ms']:8.1f} "
                         f"{r['unflushed_max_bytes'] / 1e6:8.2f}")
        else:
            lines.append(f"{r['unit_id']:3d} {r['policy']:11s} {r['threads']:3d} {r['size']:5d} "
                         f"{r['interval_ms']:5d} {r['least_pages']:5d} {'failed':>10} "
                         f"{'':8s} {'':7s} {'':8s} {'':8s}  {r['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default="local[2]", help="Spark master (spark://host:7077 for a cluster)")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="small")
    ap.add_argument("--limit", type=int, default=0, help="run only the grid's first N units")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per unit")
    ap.add_argument("--file-size", type=int, default=1 << 30, help="commit-log file size per unit")
    ap.add_argument("--out", default="flush-sweep", help="output directory (PNGs; Parquet too "
                    "unless --parquet)")
    ap.add_argument("--parquet", default=None,
                    help="where the DataFrame writes the rows (default OUT/flush_sweep.parquet; "
                         "on a cluster a shared location: hdfs://..., s3a://...)")
    ap.add_argument("--work-dir", default=None,
                    help="where units make their stores on the workers (default: the temp dir)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark configuration, repeatable")
    args = ap.parse_args(argv)
    if args.duration <= 0:
        ap.error("--duration must be positive")
    conf = {}
    for kv in args.conf:
        if "=" not in kv:
            ap.error(f"--conf {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        conf[k] = v
    units = GRIDS[args.grid]()
    if args.limit < 0:
        ap.error("--limit must be >= 0")
    if args.limit:
        units = units[:args.limit]
    print(f"flush sweep: {len(units)} units x {args.duration:g} s on {args.master} -> {args.out}",
          flush=True)
    spark = spark_session(args.master, conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        t0 = time.monotonic()
        rows = run_sweep(spark, units, args.out, duration=args.duration, file_size=args.file_size,
                         work_dir=args.work_dir, parquet=args.parquet)
        dt = time.monotonic() - t0
    finally:
        spark.stop()
    print(summary(rows))
    failed = sum(not r["ok"] for r in rows)
    parquet = args.parquet or f"{args.out}/flush_sweep.parquet"
    print(f"\n{len(rows)} units ({failed} failed) in {dt:.1f} s; wrote {parquet}, "
          f"{args.out}/throughput_vs_p99.png, {args.out}/unflushed_vs_interval.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
