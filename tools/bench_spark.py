"""Spark data source benchmark: rows/s of reads and writes, with baselines from the same run.

    python tools/bench_spark.py                  # 10 M messages, 8 queues, 100-byte bodies
    python tools/bench_spark.py --num 1000000    # smaller

1. write: a generated DataFrame (topic, queue_id, body, tags) written with
   ``df.write.format("rocketstore")`` (tasks stage Arrow files, the driver appends them
   through the store's single writer), against a trivial Arrow writer that drops the
   batches (Spark's Python write path alone) and the same DataFrame written to Parquet;
2. read: ``count()`` and ``groupBy("tags").count()`` over the store, against
   - a trivial Arrow data source that yields prebuilt batches of the same shape (the same
     splits, rows per batch and columns: one real batch decoded once per task, then yielded
     again and again), i.e. the cost of Spark's Python data source path with no decode;
   - Spark reading the same rows from Parquet (written from the store once, untimed).
Each write and query runs ``--repeat`` times, the sources interleaved (best kept); the load
average is printed. Ratios are store / baseline.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _session(cores: int, memory: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("bench_spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", memory).config("spark.sql.shuffle.partitions", str(cores))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _baseline_source():
    """The trivial Arrow source: the store's splits, each yielding one prebuilt batch (decoded
    from the store once per task) until the split's rows are out."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, path, split, opts):
            super().__init__(split)
            self.path, self.split, self.opts = path, split, opts

    class Reader(DataSourceReader):
        def __init__(self, path):
            from rocketstore.spark.scan import ScanOptions
            self.path = path
            self.opts = ScanOptions()

        def partitions(self):
            from rocketstore.spark.scan import plan
            return [Part(self.path, s, self.opts) for s in plan(self.path, self.opts)]

        def read(self, part):
            from rocketstore.spark.scan import Split, open_reader, read_split
            s = part.split
            with open_reader(part.path) as store:
                first = next(read_split(store, Split(s.topic, s.queue_id, s.start,
                                                     min(s.end, s.start + part.opts.batch_rows)),
                                        part.opts))
            left = s.end - s.start
            while left > 0:
                batch = first if left >= first.num_rows else first.slice(0, left)
                left -= batch.num_rows
                yield batch

    class ArrowBaseline(DataSource):
        @classmethod
        def name(cls):
            return "arrow_baseline"

        def schema(self):
            from rocketstore.spark.arrow import SCHEMA_DDL
            return SCHEMA_DDL

        def reader(self, schema):
            return Reader(self.options["path"])

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
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    work = args.dir or tempfile.mkdtemp(prefix="bench_spark_")
    store, pq_in, pq_store = (os.path.join(work, d) for d in ("store", "pq_generated", "pq_store"))
    spark = _session(args.cores, args.memory)
    spark.dataSource.register(_baseline_source())
    spark.dataSource.register(_null_writer_source())
    n = args.num
    try:
        # ---- write --------------------------------------------------------------------------
        def generated(rows):
            return (spark.range(0, rows, numPartitions=max(args.cores * 4, 8)).select(F.lit("BenchTopic").alias("topic"),
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
        t_write_null = t_write = t_write_pq = float("inf")
        for r in range(args.repeat):
            t = time.perf_counter()
            gen.write.format("arrow_null_sink").mode("append").save(work)
            t_write_null = min(t_write_null, time.perf_counter() - t)
            shutil.rmtree(store, ignore_errors=True)
            t = time.perf_counter()
            gen.write.format("rocketstore").mode("append").save(store)
            t_write = min(t_write, time.perf_counter() - t)
            shutil.rmtree(pq_in, ignore_errors=True)
            t = time.perf_counter()
            gen.write.parquet(pq_in)
            t_write_pq = min(t_write_pq, time.perf_counter() - t)

        # ---- read ---------------------------------------------------------------------------
        src = spark.read.format("rocketstore").load(store)
        src.write.parquet(pq_store)                         # the same rows, for the baseline
        sources = {
            "rocketstore": lambda: spark.read.format("rocketstore").load(store),
            "arrow_baseline": lambda: spark.read.format("arrow_baseline").load(store),
            "parquet": lambda: spark.read.parquet(pq_store),
        }
        # repeats interleave the sources, so a noisy moment does not fall on one of them only
        res: dict[tuple[str, str], float] = {}
        for _ in range(args.repeat):
            for name, df in sources.items():
                t = time.perf_counter()
                got = df().count()
                secs = time.perf_counter() - t
                assert got == n, f"{name}: count {got}, expected {n}"
                res[(name, "count")] = max(res.get((name, "count"), 0.0), n / secs)
                t = time.perf_counter()
                groups = df().groupBy("tags").count().collect()
                secs = time.perf_counter() - t
                assert sum(r["count"] for r in groups) == n and len(groups) == args.tags, groups
                res[(name, "groupby")] = max(res.get((name, "groupby"), 0.0), n / secs)

        print(f"bench_spark: {n:,} messages, {args.queues} queues, {args.body}-byte bodies, "
              f"{args.tags} tags, local[{args.cores}], best of {args.repeat}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"  write rocketstore            {n / t_write:>12,.0f} rows/s  ({t_write:.1f} s)")
        print(f"  write arrow null sink        {n / t_write_null:>12,.0f} rows/s  ({t_write_null:.1f} s)"
              f"   store/baseline {t_write_null / t_write:.2f}")
        print(f"  write parquet (same rows)    {n / t_write_pq:>12,.0f} rows/s  ({t_write_pq:.1f} s)"
              f"   store/baseline {t_write_pq / t_write:.2f}")
        for q in ("count", "groupby"):
            r = res[("rocketstore", q)]
            print(f"  read {q:<8} rocketstore      {r:>12,.0f} rows/s")
            for base in ("arrow_baseline", "parquet"):
                b = res[(base, q)]
                print(f"  read {q:<8} {base:<16} {b:>12,.0f} rows/s   store/baseline {r / b:.2f}")
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
