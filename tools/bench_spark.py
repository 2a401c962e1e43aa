"""Spark data source benchmark: rows/s of reads and writes, with baselines from the same run.

    python tools/bench_spark.py                  # 10 M messages, 8 queues, 100-byte bodies
    python tools/bench_spark.py --num 1000000    # smaller
    python tools/bench_spark.py --write-only --num 2000000 --arrow-batch 50000
    python tools/bench_spark.py --write-only --code /path/to/other/checkout   # before/after

1. write: a generated DataFrame (topic, queue_id, body, tags) written with
   ``df.write.format("rocketstore")`` (tasks stage Arrow files, the driver appends them
   through the store's single writer), against a trivial Arrow writer that drops the
   batches (Spark's Python write path alone), Spark's ``noop`` format (the rows generated
   and dropped in the JVM: no Python, no Arrow -- the cap the data generation sets) and the
   same DataFrame written to Parquet; the store's write is also split into its tasks (up to
   the last task's end) and the driver's commit (the append, its flush and close), from
   timestamps the benchmark's own writer records;
2. read: ``count()`` and ``groupBy("tags").agg(sum(length("body")))`` over the store, read
   whole (what a query gets with no ``columns`` option: Spark does not tell a Python data
   source the columns a query uses) and pruned (``option("columns", ...)``: none for the
   count, ``tags,body`` for the aggregate), against
   - a trivial Arrow data source that yields prebuilt batches of the same shape (the same
     partitions, rows per batch and columns: one real batch decoded once per task, then
     yielded again and again), i.e. the cost of Spark's Python data source path with no
     decode;
   - the JVM reader (``format("rocketstore-jvm")``, a DSv2 source Spark tells the columns
     a query uses: no ``columns`` option needed);
   - Spark reading the same rows from Parquet (written from the store once, untimed; it
     prunes columns by itself).
Each write and query runs ``--repeat`` times, the sources interleaved (best kept, the range
printed); the load average is printed. Write ratios are store / baseline rows/s; read ratios
are Parquet's time / the source's (>= 1: as fast as Parquet). ``--read-only`` writes the
store and the Parquet copy once, untimed, and times the reads only. ``--arrow-batch`` (Spark's
``spark.sql.execution.arrow.maxRecordsPerBatch``) and ``--partitions`` apply to every sink
alike.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if "--code" in sys.argv[:-1]:       # measure another checkout's rocketstore (before/after)
    ROOT = os.path.abspath(sys.argv[sys.argv.index("--code") + 1])
sys.path.insert(0, ROOT)


def _session(cores: int, memory: str, arrow_batch: int):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("bench_spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", memory).config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch)))
    try:                                    # the JVM reader, format("rocketstore-jvm")
        from rocketstore.spark.jvmjar import configure
    except ImportError:                     # a checkout (--code) from before it
        configure = None
    spark = (configure(spark) if configure is not None else spark).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _baseline_source():
    """The trivial Arrow source: the store's partitions (packed as the real source packs
    them) and projection (option ``columns``), each task yielding one prebuilt batch
    (decoded from the store once per task) until its rows are out."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, path, splits, opts):
            super().__init__(None)
            self.path, self.splits, self.opts = path, splits, opts

    class Reader(DataSourceReader):
        def __init__(self, path, opts):
            self.path = path
            self.opts = opts

        def partitions(self):
            from rocketstore.spark.scan import plan_partitions
            return [Part(self.path, p, self.opts) for p in plan_partitions(self.path, self.opts)]

        def read(self, part):
            from rocketstore.spark.scan import Split, open_reader, read_split
            s = part.splits[0]
            with open_reader(part.path) as store:
                first = next(read_split(store, Split(s.topic, s.queue_id, s.start,
                                                     min(s.end, s.start + part.opts.batch_rows)),
                                        part.opts))
            left = sum(sp.end - sp.start for sp in part.splits)
            while left > 0:
                batch = first if left >= first.num_rows else first.slice(0, left)
                left -= batch.num_rows
                yield batch

    class ArrowBaseline(DataSource):
        @classmethod
        def name(cls):
            return "arrow_baseline"

        def schema(self):
            from rocketstore.spark.datasource import projection_ddl
            return projection_ddl(self.options.get("columns"))

        def reader(self, schema):
            from rocketstore.spark.datasource import projection
            from rocketstore.spark.scan import ScanOptions
            return Reader(self.options["path"], ScanOptions(columns=projection(schema)))

    return ArrowBaseline


def _null_writer_source():
    """The trivial Arrow writer: tasks consume the same Arrow batches and keep nothing (the
    cost of Spark's Python data source write path alone)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class NullWriter(DataSourceArrowWriter):
        def write(self, iterator):
            rows = 0
            for batch in iterator:
                rows += batch.num_rows
            return WriterCommitMessage()

    class ArrowNullSink(DataSource):
        @classmethod
        def name(cls):
            return "arrow_null_sink"

        def writer(self, schema, overwrite):
            return NullWriter()

    return ArrowNullSink


def _timed_store_source(log_dir: str):
    """``rocketstore`` with timestamps: each task's end and the commit's start and end are
    written to files under ``log_dir`` (tasks and commit run in Python workers)."""
    from pyspark.sql.datasource import DataSource

    def stamp(kind: str) -> None:
        import time as _t
        import uuid as _u
        with open(os.path.join(log_dir, f"{kind}-{_u.uuid4().hex}"), "w") as f:
            f.write(repr(_t.time()))

    class Timed:
        def __init__(self, inner):
            self.inner = inner

        def write(self, iterator):
            r = self.inner.write(iterator)
            stamp("task_end")
            return r

        def commit(self, messages):
            stamp("commit_start")
            self.inner.commit(messages)
            stamp("commit_end")

        def abort(self, messages):
            self.inner.abort(messages)

    class TimedStore(DataSource):
        @classmethod
        def name(cls):
            return "rocketstore_timed"

        def writer(self, schema, overwrite):
            from pyspark.sql.datasource import DataSourceArrowWriter
            from rocketstore.spark.writer import RocketStoreWriter
            inner = RocketStoreWriter(self.options["path"], self.options, schema)
            return type("TimedWriter", (Timed, DataSourceArrowWriter), {})(inner)

    return TimedStore


def _stamps(log_dir: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            out.setdefault(name.split("-")[0], []).append(float(f.read()))
        os.unlink(os.path.join(log_dir, name))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num", type=int, default=10_000_000, help="messages (default 10 M)")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--body", type=int, default=100, help="body bytes")
    ap.add_argument("--tags", type=int, default=4, help="distinct tags")
    ap.add_argument("--cores", type=int, default=2, help="local[N]")
    ap.add_argument("--memory", default="4g", help="spark.driver.memory")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    ap.add_argument("--arrow-batch", type=int, default=10_000,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default 10000)")
    ap.add_argument("--partitions", type=int, default=0,
                    help="partitions of the generated DataFrame (default max(4 x cores, 8))")
    ap.add_argument("--write-only", action="store_true", help="skip the reads")
    ap.add_argument("--read-only", action="store_true",
                    help="write the store once (untimed) and time the reads only")
    ap.add_argument("--code", default=None,
                    help="the checkout whose rocketstore is measured (default: this one)")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    work = args.dir or tempfile.mkdtemp(prefix="bench_spark_")
    store, pq_in, pq_store = (os.path.join(work, d) for d in ("store", "pq_generated", "pq_store"))
    spark = _session(args.cores, args.memory, args.arrow_batch)
    spark.dataSource.register(_baseline_source())
    spark.dataSource.register(_null_writer_source())
    stamps_dir = os.path.join(work, "stamps")
    os.makedirs(stamps_dir, exist_ok=True)
    spark.dataSource.register(_timed_store_source(stamps_dir))
    parts = args.partitions or max(args.cores * 4, 8)
    n = args.num
    try:
        # ---- write --------------------------------------------------------------------------
        def generated(rows):
            return (spark.range(0, rows, numPartitions=parts).select(F.lit("BenchTopic").alias("topic"),
                       (F.col("id") % args.queues).cast("int").alias("queue_id"),
                       F.expr(f"cast(rpad(cast(id as string), {args.body}, 'x') as binary)").alias("body"),
                       F.concat(F.lit("tag"), (F.col("id") % args.tags).cast("string")).alias("tags")))
        gen = generated(n)
        # warm-up (JVM, Python workers) on a small frame, not timed
        small = generated(min(n, 100_000))
        small.write.format("arrow_null_sink").mode("append").save(work)
        small.write.format("rocketstore").mode("append").save(os.path.join(work, "warmup"))
        spark.read.format("rocketstore").load(os.path.join(work, "warmup")).count()
        shutil.rmtree(os.path.join(work, "warmup"))
        # the writes, like the reads, repeat interleaved (best kept); each into a fresh
        # directory, the last store stays for the reads
        t_write_null = t_write = t_write_pq = t_noop = float("inf")
        t_tasks = t_commit = float("inf")
        if args.read_only and not os.path.isdir(store):     # (a --dir's store is reused)
            gen.write.format("rocketstore").mode("append").save(store)
        for r in range(0 if args.read_only else args.repeat):
            t = time.perf_counter()
            gen.write.format("noop").mode("overwrite").save()
            t_noop = min(t_noop, time.perf_counter() - t)
            t = time.perf_counter()
            gen.write.format("arrow_null_sink").mode("append").save(work)
            t_write_null = min(t_write_null, time.perf_counter() - t)
            shutil.rmtree(store, ignore_errors=True)
            _stamps(stamps_dir)
            t0 = time.time()
            t = time.perf_counter()
            gen.write.format("rocketstore_timed").mode("append").save(store)
            secs = time.perf_counter() - t
            if secs < t_write:
                st = _stamps(stamps_dir)
                t_write = secs
                t_tasks = max(st["task_end"]) - t0
                t_commit = st["commit_end"][0] - st["commit_start"][0]
            shutil.rmtree(pq_in, ignore_errors=True)
            t = time.perf_counter()
            gen.write.parquet(pq_in)
            t_write_pq = min(t_write_pq, time.perf_counter() - t)

        print(f"bench_spark: {n:,} messages, {args.queues} queues, {args.body}-byte bodies, "
              f"{args.tags} tags, local[{args.cores}], {parts} partitions, arrow batches of "
              f"{args.arrow_batch:,} rows, best of {args.repeat}, "
              f"load average {os.getloadavg()[0]:.1f}, code {ROOT}")
        if not args.read_only:
            print(f"  write rocketstore            {n / t_write:>12,.0f} rows/s  ({t_write:.2f} s: "
                  f"tasks {t_tasks:.2f} s, then the commit {t_commit:.2f} s)")
            print(f"  write arrow null sink        {n / t_write_null:>12,.0f} rows/s  ({t_write_null:.2f} s)"
                  f"   store/baseline {t_write_null / t_write:.2f}")
            print(f"  write noop (JVM only)        {n / t_noop:>12,.0f} rows/s  ({t_noop:.2f} s)"
                  f"   store/baseline {t_noop / t_write:.2f}")
            print(f"  write parquet (same rows)    {n / t_write_pq:>12,.0f} rows/s  ({t_write_pq:.2f} s)"
                  f"   store/baseline {t_write_pq / t_write:.2f}")
        if args.write_only:
            return

        # ---- read ---------------------------------------------------------------------------
        if not args.read_only:                              # a new store: a new copy
            shutil.rmtree(pq_store, ignore_errors=True)
        if not os.path.isdir(pq_store):                     # the same rows, for the baseline
            spark.read.format("rocketstore").load(store).write.parquet(pq_store)

        def rs(fmt: str, columns: str | None):
            r = spark.read.format(fmt)
            return (r if columns is None else r.option("columns", columns)).load(store)

        # (source, query) -> the DataFrame's query: a count, and the sum of the body lengths
        # per tag; "pruned" tells the store the columns the query uses (Spark does not tell a
        # Python data source), Parquet prunes by itself
        def count(df):
            return df.count()

        def body_per_tag(df):
            return df.groupBy("tags").agg(F.sum(F.length("body")).alias("bytes")).collect()

        queries = {"count": ("", count), "body/tag": ("tags,body", body_per_tag)}
        sources = {
            "rocketstore": lambda cols: rs("rocketstore", None),
            "rocketstore pruned": lambda cols: rs("rocketstore", cols),
            "arrow_baseline pruned": lambda cols: rs("arrow_baseline", cols),
            "rocketstore-jvm": lambda cols: spark.read.format("rocketstore-jvm").load(store),
            "parquet": lambda cols: spark.read.parquet(pq_store),
        }
        try:
            spark.read.format("rocketstore-jvm").load(store)
        except Exception:                   # a checkout without the JVM reader
            del sources["rocketstore-jvm"]
        for q, (cols, run) in queries.items():             # warm-up: every source, untimed
            for df in sources.values():
                run(df(cols))
        # repeats interleave the sources, so a noisy moment does not fall on one of them only
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for q, (cols, run) in queries.items():
                for name, df in sources.items():
                    t = time.perf_counter()
                    got = run(df(cols))
                    times.setdefault((name, q), []).append(time.perf_counter() - t)
                    if q == "count":
                        assert got == n, f"{name}: count {got}, expected {n}"
                    else:
                        total = sum(r["bytes"] for r in got)
                        # the baseline repeats one batch: its tags are not the data's
                        assert total == n * args.body, (name, got)
                        assert len(got) == args.tags or name.startswith("arrow"), (name, got)

        print(f"  reads: best of {args.repeat} (range), load average {os.getloadavg()[0]:.1f}; "
              f"vs parquet = parquet's time / this one's (>= 1: as fast as Parquet)")
        for q in queries:
            pq_best = min(times[("parquet", q)])
            for name in sources:
                ts = times[(name, q)]
                line = (f"  read {q:<9}{name:<22}{n / min(ts):>12,.0f} rows/s  "
                        f"({min(ts):.2f} s, {min(ts):.2f}-{max(ts):.2f})")
                if name != "parquet":
                    line += f"   vs parquet {pq_best / min(ts):.2f}"
                print(line)
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
