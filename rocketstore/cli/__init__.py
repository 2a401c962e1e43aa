"""The ``rocketstore`` command (console script ``rocketstore``, or ``python -m rocketstore``).

Subcommands, one module per group:

  demo                write a realistic workload, read it back, print figures (``demo``)
  bench               the benchmarks against same-run baselines (``rocketstore.tools.bench``)
  stat                files, sizes, offsets per queue, dispatch lag, flush state, checkpoint
  get / query         messages by queue offset, by key (time range, limit), by message id
  dump / export       messages to JSONL or Parquet; ``import`` puts them back (``transfer``)
  verify / recover    full CRC scan and cross-check of consume queues and index; rebuild them
  offsets             show and reset a consumer group's offsets
  dlq                 list a consumer group's dead letters, resend them (``dlq``)
  namesrv / broker    run a NameServer or a broker on RocketMQ's wire protocol (``servers``)
  proxy               serve RocketMQ 5.x gRPC clients in front of brokers (``servers``)
  admin               mqadmin's commands against running servers (``admin``)

Read-only commands open the store with ``read_only=True``: no lock, nothing written, so they
work beside a broker or an application holding the directory. Errors print one line saying
what was wrong and where, and exit non-zero; ``ROCKETSTORE_TRACEBACK=1`` shows the traceback.
"""
from __future__ import annotations

import argparse
import os
import sys

from rocketstore.cli import admin, check, demo, dlq, lookup, offsets, servers, transfer
from rocketstore.cli.demo import DEFAULT_STORE_DIR

__all__ = ["main", "build_parser", "DEFAULT_STORE_DIR"]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line too (argparse prints the whole usage first); subcommand
    parsers inherit the class."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="rocketstore",
                                 description="RocketMQ-compatible message store: inspect, move "
                                             "and repair store directories")
    from rocketstore import __version__
    ap.add_argument("--version", action="version", version=f"rocketstore {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo.register(sub)
    _register_bench(sub)
    lookup.register(sub)
    transfer.register(sub)
    check.register(sub)
    offsets.register(sub)
    dlq.register(sub)
    servers.register(sub)
    servers.register_broker(sub)
    servers.register_proxy(sub)
    admin.register(sub)
    return ap


def _register_bench(sub) -> None:
    from rocketstore.tools import bench
    p = sub.add_parser("bench", help="the benchmarks (store, broker, messaging) against "
                                     "baselines measured in the same run",
                       description=bench.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(p)
    p.set_defaults(func=lambda args: bench.run(args.which, args.quick))


def _one_line(e: BaseException) -> str:
    from rocketstore.errors import StoreLockedError
    if isinstance(e, StoreLockedError):
        # the library's advice (read_only=True) is for code; say it in the command's terms
        return (f"{e.path}: store is locked by another writer (a broker or an application "
                "has it open): stop that writer first, or use a read-only command (stat, "
                "get, query, export, verify, offsets show), which work beside it")
    if isinstance(e, OSError) and e.strerror:
        where = e.filename if e.filename is not None else ""
        return f"{where}: {e.strerror}" if where else e.strerror
    text = str(e) or type(e).__name__
    return " ".join(text.split())           # never more than one line


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    from rocketstore.errors import RocketStoreError
    command = " ".join(c for c in (args.command, getattr(args, "offsets_command", None),
                                   getattr(args, "dlq_command", None),
                                   getattr(args, "admin_command", None)) if c)
    if unknown:
        # argparse names only the top-level program; the user typed a subcommand's options
        parser.exit(2, f"rocketstore {command}: unrecognized arguments: {' '.join(unknown)} "
                       f"(see rocketstore {command} --help)\n")
    from rocketstore.store import integrity
    since = integrity.mark()
    try:
        rc = args.func(args)
        return _report_skipped(args.command, rc, since)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `rocketstore dump ... | head`: the reader left; not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except (RocketStoreError, OSError, ValueError, LookupError) as e:
        if os.environ.get("ROCKETSTORE_TRACEBACK") == "1":
            raise
        print(f"rocketstore {command}: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the contract is one line, never a traceback
        if os.environ.get("ROCKETSTORE_TRACEBACK") == "1":
            raise
        print(f"rocketstore {command}: internal error: {type(e).__name__}: {_one_line(e)}",
              file=sys.stderr)
        return 3


def _report_skipped(command: str, rc: int, since: int) -> int:
    """Name on stderr every record a command skipped because it failed its integrity check;
    a read that left a message out this way does not exit 0."""
    from rocketstore.store import integrity
    skipped = integrity.reported(since=since)
    for offset, reason in skipped:
        print(f"rocketstore {command}: commit-log offset {offset} skipped: {reason}",
              file=sys.stderr)
    if skipped and command in ("get", "query", "export", "dump"):
        return max(rc, 1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
