"""``rocketstore bench``: the real benchmarks, each printing its figures beside baselines
measured in the same run.

  store      rocketstore.tools.bench_store: the headline put path (a new Message per put)
             against an f.write loop and lmdb; put / put_batch / get_batch against f.write
             and Python mmap+struct
  broker     rocketstore.tools.bench_broker: namesrv + broker processes over loopback: sync
             sends (1 and 8 threads), batches, push consume; against a TCP echo round trip,
             the C++ client and Redis Streams when installed
  messaging  rocketstore.tools.bench_messaging: producer -> broker -> push consumer in one
             process, against the raw store's put and put+get

``--quick`` runs each on a small count (seconds, not minutes: a smoke run whose figures are
indicative only); without it each runs its full default workload (minutes). For other
options run a module itself: ``python -m rocketstore.tools.bench_store --benchmarks=put``.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

# (module, full-run args, --quick args)
BENCHES: dict[str, tuple[str, list[str], list[str]]] = {
    "store": ("rocketstore.tools.bench_store", [],
              ["--benchmarks=headline,put,put_batch,get_batch", "--num=50000",
               "--num_headline=10000", "--repeat=1", "--no-warm"]),
    "broker": ("rocketstore.tools.bench_broker", [],
               ["--num", "1000", "--no-push"]),
    "messaging": ("rocketstore.tools.bench_messaging", [],
                  ["--count", "20000", "--sync-count", "2000", "--rows",
                   "storeone,storebodies,store,batch32,modes"]),
}


def build_parser(prog: str = "rocketstore bench") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return ap


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``bench``'s options, on its own parser or the ``rocketstore`` subcommand's."""
    ap.add_argument("which", nargs="*", metavar="WHICH", default=[],
                    help=f"benchmarks to run: {', '.join(BENCHES)} (default: all of them)")
    ap.add_argument("--quick", action="store_true",
                    help="small counts: a run of seconds per benchmark (indicative figures)")


def run(which: list[str], quick: bool) -> int:
    """Run the named benchmarks (all when empty) in order; the worst exit code."""
    unknown = [w for w in which if w not in BENCHES]
    if unknown:
        raise ValueError(f"unknown benchmark {unknown[0]!r}: expected one of "
                         f"{', '.join(BENCHES)}")
    names = which or list(BENCHES)
    from rocketstore import __version__
    print(f"rocketstore {__version__} bench{' --quick' if quick else ''}: "
          f"{', '.join(names)}; {os.cpu_count()} cpus, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rc = 0
    for name in names:
        module, full, short = BENCHES[name]
        args = short if quick else full
        print(f"\n== {name}: python -m {module} {' '.join(args)}", flush=True)
        t0 = time.monotonic()
        code = importlib.import_module(module).main(args)
        sys.stdout.flush()
        print(f"== {name}: {time.monotonic() - t0:.1f} s", flush=True)
        rc = max(rc, code or 0)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = build_parser("python -m rocketstore.tools.bench")
    args = ap.parse_args(argv)
    try:
        return run(args.which, args.quick)
    except ValueError as e:
        ap.error(str(e))
        return 2        # not reached: error() exits


if __name__ == "__main__":
    sys.exit(main())
