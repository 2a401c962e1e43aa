"""What every subcommand shares: opening a store (its file sizes read from the directory),
tables, progress bars, times, and a message as one exported row.

Progress bars use tqdm: it draws on stderr only when stderr is a terminal (``disable=None``),
so piped and tested output stays clean, and it handles rates, ETAs and terminal width, which a
hand-written ``\\r`` line gets wrong on resize and on non-terminals.
"""
from __future__ import annotations

import argparse
import base64
import datetime as _dt
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rocketstore.errors import RocketStoreError



class CommandError(RocketStoreError):
    """A command's input is wrong (a missing queue, a bad time): printed as one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


# -- opening a store -------------------------------------------------------------------------

def add_store_options(p: argparse.ArgumentParser) -> None:
    """The store directory and the file-size settings (read from the files when omitted)."""
    p.add_argument("store", help="store directory (ours, or a RocketMQ broker's storePathRootDir)")
    g = p.add_argument_group("store layout (read from the directory's files when omitted)")
    g.add_argument("--commitlog-dir", metavar="DIR",
                   help="storePathCommitLog, when not STORE/commitlog")
    g.add_argument("--commitlog-file-size", type=int, metavar="BYTES",
                   help="mapedFileSizeCommitLog")
    g.add_argument("--cq-file-size", type=int, metavar="BYTES",
                   help="mappedFileSizeConsumeQueue")
    g.add_argument("--index-slots", type=int, metavar="N", help="maxHashSlotNum")
    g.add_argument("--index-num", type=int, metavar="N", help="maxIndexNum")
    g.add_argument("--delay-levels", metavar="LEVELS",
                   help="messageDelayLevel the store was written with, e.g. '1s 5s 10s' (default: "
                        "what its broker recorded in config/broker.properties, else RocketMQ's "
                        "'1s 5s 10s 30s 1m ... 2h'); delayed messages' queue units depend on it")


def detect_config(root: str, args: argparse.Namespace | None = None):
    """A StoreConfig whose file sizes match the files in ``root``; the command's size options
    (``--commitlog-file-size`` ...) win (``rocketstore.store.storedir.detect_config``)."""
    from rocketstore.store.storedir import detect_config as detect
    return detect(root, commit_log_file_size=getattr(args, "commitlog_file_size", None),
                  cq_file_size=getattr(args, "cq_file_size", None),
                  index_slots=getattr(args, "index_slots", None),
                  index_num=getattr(args, "index_num", None),
                  commitlog_dir=getattr(args, "commitlog_dir", None),
                  message_delay_level=getattr(args, "delay_levels", None))


def delay_levels_source(root: str, args: argparse.Namespace | None = None) -> str:
    """Where the delay levels ``detect_config`` used came from: ``--delay-levels``,
    ``config/broker.properties`` or ``default`` (the store does not say)."""
    from rocketstore.store.brokerprops import recorded_delay_levels
    if getattr(args, "delay_levels", None):
        return "--delay-levels"
    return "config/broker.properties" if recorded_delay_levels(root) else "default"


def open_store(args: argparse.Namespace, read_only: bool = True):
    """Open ``args.store``; read-only opening takes no lock and works beside a writer."""
    from rocketstore import MessageStore
    root = args.store
    if not os.path.isdir(root):
        raise CommandError(f"{root}: no such store directory")
    cl_dir = getattr(args, "commitlog_dir", None) or os.path.join(root, "commitlog")
    if read_only and not os.path.isdir(cl_dir):
        raise CommandError(f"{root}: not a store directory (no {cl_dir})" if args.commitlog_dir
                           else f"{root}: not a store directory (no commitlog/ in it)")
    return MessageStore.open(root, detect_config(root, args), read_only=read_only)


# -- output ----------------------------------------------------------------------------------

def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out=None) -> None:
    """Print an aligned table: numbers right-aligned with thousands separators."""
    out = out or sys.stdout

    def cell(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    cells = [[cell(v) for v in r] for r in rows]
    numeric = [all(isinstance(r[i], int) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
               and rows != [] for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    print(line(list(headers)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print(line(r), file=out)


def progress(total: int | None = None, desc: str = "", unit: str = "it", unit_scale: bool = False):
    """A tqdm bar on stderr, drawn only when stderr is a terminal."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, disable=None,
                file=sys.stderr, leave=False, dynamic_ncols=True)


def fmt_ts(ms: int) -> str:
    """Milliseconds since the epoch as local ISO time with milliseconds ('-' for 0)."""
    if ms <= 0:
        return "-"
    try:
        return _dt.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"               # beyond what datetime represents


def parse_time(text: str, what: str) -> int:
    """Milliseconds since the epoch from an int (ms) or an ISO 8601 time (local unless zoned)."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"{what}: {text!r} is neither milliseconds since the epoch nor an "
                           f"ISO 8601 time (2024-05-01T12:00:00)") from None
    return int(d.timestamp() * 1000)


def encode_body(body: bytes) -> tuple[str, str]:
    """(text, encoding): the body as text when it is UTF-8, else base64."""
    try:
        return body.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def decode_body(text: str, encoding: str, where: str) -> bytes:
    if not isinstance(text, str):
        raise CommandError(f"{where}: body is a {type(text).__name__} ({str(text)[:40]}), "
                           f"expected a string ({encoding})")
    if encoding == "utf8":
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise CommandError(f"{where}: body is not valid Unicode ({e.reason})") from None
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise CommandError(f"{where}: body is not valid base64") from None
    raise CommandError(f"{where}: body_encoding {encoding!r} is not 'utf8' or 'base64'")


# One exported message: every stored field, in the order of docs/format.md §1.1.
ROW_FIELDS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "store_size",
              "body_crc", "flag", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
              "store_host", "reconsume_times", "prepared_transaction_offset", "tags", "keys",
              "uniq_key", "properties", "body", "body_encoding")


def message_row(m) -> dict[str, Any]:
    """A MessageExt as a plain dict (JSON- and Arrow-ready)."""
    body, enc = encode_body(bytes(m.body))
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "msg_id": m.msg_id,
            "store_size": m.store_size, "body_crc": m.body_crc, "flag": m.flag,
            "sys_flag": m.sys_flag, "born_timestamp": m.born_timestamp,
            "born_host": m.born_host, "store_timestamp": m.store_timestamp,
            "store_host": m.store_host, "reconsume_times": m.reconsume_times,
            "prepared_transaction_offset": m.prepared_transaction_offset,
            "tags": m.tags, "keys": " ".join(m.keys) if m.keys else None,
            "uniq_key": m.uniq_key, "properties": dict(m.properties),
            "body": body, "body_encoding": enc}


def message_table(msgs: Iterable[Any], out=None, body_chars: int = 40) -> int:
    """Print messages as a table (one line each, body shortened); returns how many."""
    rows = []
    for m in msgs:
        body, enc = encode_body(bytes(m.body))
        body = body.replace("\n", "\\n")
        if len(body) > body_chars:
            body = body[:body_chars - 1] + "…"
        rows.append((m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.msg_id,
                     fmt_ts(m.store_timestamp), m.tags, " ".join(m.keys),
                     f"{body}" if enc == "utf8" else f"b64:{body}"))
    table(rows, ("topic", "queue", "offset", "phy offset", "msg id", "stored", "tags", "keys",
                 "body"), out)
    return len(rows)
