"""``rocketstore verify`` and ``recover``.

verify (read-only) walks every commit-log record with a CRC check (``_verify.walk_file``, one
GIL-holding C loop per file, no Python per byte), then cross-checks in numpy:

* every consume-queue unit points at the start of a record of its own topic, queue and queue
  offset, with the record's size and tags code (docs/format.md §5.1, 3);
* every dispatchable record (not a prepared or rolled-back transaction) up to the dispatched
  end has its unit;
* every key a record should be indexed under (UNIQ_KEY, each KEYS token) is reachable through
  its slot's chain in an index file covering it, and every index entry names a key of the
  record it points at, with a time difference matching its store time (docs/format.md §6).

Every disagreement is listed (a whole missing queue as one line). Exit code 1 when any.

recover takes the store's lock, removes the consume queues and index files, zeroes the
checkpoint and marks the store aborted, so that opening it runs RocketMQ's abnormal recovery
from the first file: a CRC-checked scan of the whole commit log and a re-dispatch of every
record. A record that frames correctly but fails its integrity check (record CRC, body CRC,
PHYSICALOFFSET) is skipped by recovery, which keeps what follows; a structural break before
the end of the log would be truncated there, so recover checks first and refuses unless
``--truncate`` is given.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any

import numpy as np

from rocketstore.store._verify import SKIPPED, reachable_keys
from rocketstore.cli._common import CommandError, add_store_options, open_store, progress, table
from rocketstore.cli.lookup import list_queues, queue_phy_end

_CQ_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])
_FILLER_SIZE = 0x7FFFFFFF
_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


class _Report:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str, str]] = []      # (area, where, what)
        self.notes: list[str] = []

    def add(self, area: str, where: str, what: str) -> None:
        self.problems.append((area, where, what))


def _scan_commit_log(store, report: _Report, check_crc: bool = True):
    """Walk every file; returns (records, keys, topic names, end of data)."""
    from rocketstore.store._verify import KEY_DTYPE, RECORD_DTYPE, walk_file
    files = store.commit_log_queue.files
    topics: dict[bytes, int] = {}
    recs, keys = [], []
    end = files[0].file_from_offset if files else 0
    walked = []
    with progress(sum(mf.file_size for mf in files), "verify commit log", "B", True) as bar:
        for mf in files:
            r, k, problems, end_pos, blank = walk_file(
                mf, check_crc, topics, crc_from=store.commit_log_queue.record_crc_from)
            recs.append(r)
            keys.append(k)
            walked.append((mf, end_pos, blank, problems))
            bar.update(mf.file_size)
    # files after the last one holding data are pre-allocated (empty): not a gap
    last_data = max((i for i, w in enumerate(walked) if w[1] > 0 or w[3]), default=0)
    for i, (mf, end_pos, blank, problems) in enumerate(walked):
        if (i == last_data and problems and not store.last_exit_ok
                and _is_tail(mf, problems[-1][0])):
            # the store is open or crashed (abort file), its last record does not parse and
            # only zeros follow: a write in progress, or a torn tail recovery will cut
            pos, reason = problems.pop()
            report.notes.append(f"commitlog {mf.file_name} pos {pos}: the last record does not "
                                f"parse ({reason}): a write in progress, or a torn tail that "
                                f"recovery truncates")
            end_pos = pos
        for pos, reason in problems:
            report.add("commitlog", f"{mf.file_name} pos {pos} (offset {mf.file_from_offset + pos})",
                       reason)
        if i < last_data and not blank and not problems:
            report.add("commitlog", f"{mf.file_name} pos {end_pos}",
                       f"data ends {mf.file_size - end_pos:,} bytes before the file does, "
                       f"without a blank record: the files after it are unreachable")
        if i <= last_data and (i == last_data or not problems):
            end = mf.file_from_offset + end_pos
    records = np.concatenate(recs) if recs else np.zeros(0, RECORD_DTYPE)
    all_keys = np.concatenate(keys) if keys else np.zeros(0, KEY_DTYPE)
    names = [b.decode("utf-8", "replace") for b, _ in sorted(topics.items(), key=lambda kv: kv[1])]
    return records, all_keys, names, end


def _is_tail(mf, pos: int) -> bool:
    """Whether only zeros follow the record claimed at ``pos`` (its TOTALSIZE, when that fits
    the file, else the next 8 bytes): then it is the end of the log, not a record in it."""
    size = int.from_bytes(mf.read_bytes(pos, 4), "big", signed=True) if pos + 4 <= mf.file_size else 0
    after = pos + size if 0 < size <= mf.file_size - pos else pos + 4
    n = min(mf.file_size - after, 4096)
    return n <= 0 or mf.read_bytes(after, n) == bytes(n)


def _units(cq, lo: int, hi: int) -> np.ndarray:
    """Units [lo, hi) of a consume queue as a numpy copy (views released at once)."""
    from rocketstore.store.consumequeue import unit_runs
    parts = [np.frombuffer(view, dtype=_CQ_DTYPE).copy() for _, view in unit_runs(cq, lo, hi)]
    return np.concatenate(parts) if parts else np.zeros(0, _CQ_DTYPE)


def _check_queues(store, records: np.ndarray, names: list[str], end: int, report: _Report,
                  max_listed: int) -> dict[str, int]:
    min_phy = store.get_min_phy_offset()
    topic_no = {n: i for i, n in enumerate(names)}
    phys = records["phy"]
    matched = np.zeros(len(records), dtype=bool)
    queues = list_queues(store)
    dispatched_to = -1
    units_total = 0
    present: set[tuple[int, int]] = set()
    implied: dict[int, set[int]] = {}       # delay level -> delays its units imply (ms)
    for topic, qid in queues:
        lo = store.get_min_offset_in_queue(topic, qid)
        hi = store.get_max_offset_in_queue(topic, qid)
        cq = store.consume_queues.find(topic, qid)
        if cq is None:
            continue
        present.add((topic_no.get(topic, -1), qid))
        dispatched_to = max(dispatched_to, queue_phy_end(store, topic, qid))
        units = _units(cq, lo, hi)
        units_total += len(units)
        if len(units) < hi - lo:
            report.add("consumequeue", f"{topic}/{qid}",
                       f"units {lo + len(units)} .. {hi - 1} cannot be read")
        offsets = np.arange(lo, lo + len(units), dtype=np.int64)
        real = (units["size"] != _FILLER_SIZE) & (units["phy"] >= min_phy)
        u, offs = units[real], offsets[real]
        pos = np.searchsorted(phys, u["phy"])
        pos_c = np.minimum(pos, max(len(phys) - 1, 0))
        found = (pos < len(phys)) & (phys[pos_c] == u["phy"]) if len(phys) else np.zeros(len(u), bool)
        listed = 0
        for i in np.flatnonzero(~found):
            if listed < max_listed:
                report.add("consumequeue", f"{topic}/{qid} offset {int(offs[i])}",
                           f"unit points at commit-log offset {int(u['phy'][i])} (size "
                           f"{int(u['size'][i])}), where no record starts")
            listed += 1
        rec = records[pos_c[found]]
        uf, of = u[found], offs[found]
        tno = topic_no.get(topic, -2)
        same_queue = (rec["topic"] == tno) & (rec["queue_id"] == qid) & (rec["queue_offset"] == of)
        good_size = rec["size"] == uf["size"]
        tags_ok = rec["tags_hash"] == uf["tags"]
        # a delayed record's tags code is its delivery time: dispatch's own rule decides
        for i in np.flatnonzero(~tags_ok & (rec["delay"] == 1) & same_queue):
            m = store.look_message_by_offset(int(rec["phy"][i]))
            tags_ok[i] = m is not None and store.dispatch_core.tags_code_of(m) == int(uf["tags"][i])
            if not tags_ok[i] and topic == _SCHEDULE_TOPIC:
                # the delay the unit implies: its delivery time less the record's store time
                implied.setdefault(qid + 1, set()).add(int(uf["tags"][i]) - int(rec["store_ts"][i]))
        ok = same_queue & good_size & tags_ok
        matched[pos_c[found][ok]] = True
        for i in np.flatnonzero(~ok):
            if listed >= max_listed:
                listed += 1
                continue
            listed += 1
            r, where = rec[i], f"{topic}/{qid} offset {int(of[i])}"
            if not same_queue[i]:
                what = (f"unit points at the record at {int(r['phy'])}, which is "
                        f"{names[r['topic']]}/{int(r['queue_id'])} offset {int(r['queue_offset'])}")
            elif not good_size[i]:
                what = f"unit says size {int(uf['size'][i])}, the record at {int(r['phy'])} is {int(r['size'])} bytes"
            else:
                what = f"unit tags code {int(uf['tags'][i])}, the record's is {int(r['tags_hash'])}"
            report.add("consumequeue", where, what)
        if listed > max_listed:
            report.add("consumequeue", f"{topic}/{qid}",
                       f"... {listed - max_listed:,} more disagreement(s) not listed")
    # records without their unit, up to what the queues say was dispatched
    want = (records["dispatch"] == 1) & (records["queue_id"] >= 0) & (records["phy"] >= min_phy)
    # a deleted topic's records stay in the log but belong to no queue (deleteTopic)
    for t, name in enumerate(names):
        cut = store.dispatch_core.deleted_before.get(name)
        if cut is not None:
            want &= ~((records["topic"] == t) & (records["phy"] < cut))
    lag = want & (records["phy"] >= dispatched_to)
    missing = want & ~matched & ~lag
    if missing.any():
        miss = records[missing]
        for t, q in sorted({(int(a), int(b)) for a, b in zip(miss["topic"], miss["queue_id"])}):
            sel = miss[(miss["topic"] == t) & (miss["queue_id"] == q)]
            where = f"{names[t]}/{q}"
            if (t, q) not in present:
                report.add("consumequeue", where,
                           f"no consume queue: {len(sel):,} record(s) (queue offsets "
                           f"{int(sel['queue_offset'].min())} .. {int(sel['queue_offset'].max())}) "
                           f"are in no queue")
                continue
            cq_lo = store.get_min_offset_in_queue(names[t], q)
            sel = sel[sel["queue_offset"] >= cq_lo]   # below the min: expired or corrected away
            for r in sel[:max_listed]:
                report.add("consumequeue", f"{where} offset {int(r['queue_offset'])}",
                           f"the record at {int(r['phy'])} has no unit pointing at it")
            if len(sel) > max_listed:
                report.add("consumequeue", where,
                           f"... {len(sel) - max_listed:,} more record(s) without a unit")
    if lag.any():
        report.notes.append(f"{int(lag.sum()):,} record(s) past the dispatched end "
                            f"{dispatched_to:,} (dispatch lag; not checked)")
    if implied:
        report.notes.append(_delay_hint(store.config, implied))
    return {"queues": len(queues), "units": units_total, "dispatched_to": dispatched_to}


def _delay_token(ms: int) -> str | None:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms > 0 and ms % size == 0:
            return f"{ms // size}{unit}"
    return None


def _delay_hint(config, implied: dict[int, set[int]]) -> str:
    """What to tell a user whose delayed messages' units disagree with the delay levels
    used: the levels those units imply, as a ``--delay-levels`` value when they are one."""
    levels = config.message_delay_level
    head = (f"units of {_SCHEDULE_TOPIC} disagree with the delay levels '{levels}' used "
            f"(the tags code of a delayed message is its delivery time): if the store was "
            f"written with another messageDelayLevel, pass it with --delay-levels")
    table_ = config.delay_levels_ms()[1:]
    if any(len(v) != 1 for v in implied.values()) or max(implied) > len(table_) + 8:
        return head
    tokens = []
    for level in range(1, max(len(table_), max(implied)) + 1):
        ms = next(iter(implied[level])) if level in implied else (
            table_[level - 1] if level <= len(table_) else None)
        tok = _delay_token(ms) if ms is not None else None
        if tok is None:
            return head
        tokens.append(tok)
    return head + f"; these units imply --delay-levels '{' '.join(tokens)}'"


def _check_index(store, records: np.ndarray, keys: np.ndarray, report: _Report,
                 max_listed: int) -> dict[str, int]:
    files = store.index_service.files
    if not store.config.message_index_enable or not files:
        if len(keys):
            report.notes.append("no index files: index not checked")
        return {"index_files": len(files), "entries": 0}
    first = min(f.begin_phy_offset for f in files)
    last_indexed = store.index_service.last_indexed_offset()
    # expected keys: records from the oldest index file's start to the last indexed record
    exp = keys[(keys["phy"] >= first) & (keys["phy"] <= last_indexed)]
    if (keys["phy"] > last_indexed).any():
        report.notes.append(f"{int((keys['phy'] > last_indexed).sum()):,} key(s) of records past "
                            f"the last indexed offset {last_indexed:,} (index lag; not checked)")
    begins = np.array([f.begin_phy_offset for f in files], dtype=np.int64)
    ends = np.array([f.end_phy_offset for f in files], dtype=np.int64)
    # keys in no file's [begin, end] range: a missing index file; one line per gap
    idx = np.searchsorted(begins, exp["phy"], side="right") - 1
    uncovered = exp["phy"] > ends[np.maximum(idx, 0)]
    for gap in np.unique(idx[uncovered]):
        sel = exp[uncovered & (idx == gap)]
        records_n = len(np.unique(sel["phy"]))
        report.add("index", f"offsets {int(sel['phy'].min())} .. {int(sel['phy'].max())}",
                   f"no index file covers them: {len(sel):,} key(s) of {records_n:,} record(s) "
                   f"not indexed (between {files[gap].file_name} and the next file)")
    exp, idx = exp[~uncovered], idx[~uncovered]
    # reachable through the slot chain of the file covering the record, or of the file
    # before it (a record at a file boundary may have its keys in either)
    found = np.zeros(len(exp), dtype=np.uint8)
    exp_phy = np.ascontiguousarray(exp["phy"])
    exp_hash = np.ascontiguousarray(exp["hash"])
    with progress(2 * len(files), "verify index", "file") as bar:
        for shift in (0, 1):
            cand = np.flatnonzero(found == 0)
            target = idx[cand] - shift
            cand, target = cand[target >= 0], target[target >= 0]
            order = np.argsort(target, kind="stable")
            cand, target = cand[order], target[order]
            bounds = np.searchsorted(target, np.arange(len(files) + 1))
            for j, f in enumerate(files):
                sel = cand[bounds[j]:bounds[j + 1]]
                if len(sel):
                    sub = np.zeros(len(sel), dtype=np.uint8)
                    reachable_keys(f, exp_phy[sel], exp_hash[sel], sub)
                    found[sel] = sub
                bar.update(1)
    missing = np.flatnonzero(found == 0)
    for i in missing[:max_listed]:
        report.add("index", f"offset {int(exp_phy[i])}",
                   f"key hash {int(exp_hash[i])} of the record is not reachable in any index file")
    if len(missing) > max_listed:
        report.add("index", "keys", f"... {len(missing) - max_listed:,} more missing key(s) not listed")
    # entries: each must name a key of the record it points at, stored at its time. A
    # (record number, key hash) pair packs into one uint64, so membership is an integer isin
    phys = records["phy"]
    key_rec = np.searchsorted(phys, keys["phy"]).astype(np.uint64)
    key_codes = np.sort((key_rec << np.uint64(32)) | keys["hash"].astype(np.uint32).astype(np.uint64))
    n_entries = 0
    for f in files:
        count = max(0, f.index_count - 1)
        if count == 0:
            continue
        n_entries += count
        start = 40 + 4 * f.hash_slot_num + 20
        view = f.mapped_file.view(start, count * 20)
        e = np.frombuffer(view, dtype=_ENTRY_DTYPE).copy()
        view.release()
        pos = np.minimum(np.searchsorted(phys, e["phy"]), max(len(phys) - 1, 0))
        at_record = (phys[pos] == e["phy"]) if len(phys) else np.zeros(count, bool)
        codes = (pos.astype(np.uint64) << np.uint64(32)) | e["hash"].astype(np.uint32).astype(np.uint64)
        # sorted + searchsorted: numpy's isin/unique hash 2 M uint64s several times slower
        at = np.minimum(np.searchsorted(key_codes, codes), max(len(key_codes) - 1, 0))
        known = at_record & ((key_codes[at] == codes) if len(key_codes) else False)
        ts = records["store_ts"][pos]
        # timeDiff = (store time - file begin) / 1000, 0 when negative (docs/format.md §6.3)
        tdiff_ok = ~at_record | (np.maximum(ts - f.begin_timestamp, 0) // 1000 == e["tdiff"])
        chain_ok = (e["prev"] >= 0) & (e["prev"] < np.arange(1, count + 1))
        bad = ~(known & at_record & tdiff_ok & chain_ok) & (e["phy"] >= store.get_min_phy_offset())
        flisted = 0
        for i in np.flatnonzero(bad):
            if flisted >= max_listed:
                break
            flisted += 1
            where = f"{f.file_name} entry {i + 1}"
            if not at_record[i]:
                what = f"points at commit-log offset {int(e['phy'][i])}, where no record starts"
            elif not known[i]:
                what = f"key hash {int(e['hash'][i])} is not a key of the record at {int(e['phy'][i])}"
            elif not chain_ok[i]:
                what = f"chain link {int(e['prev'][i])} does not point at an earlier entry"
            else:
                what = (f"time difference {int(e['tdiff'][i])} s disagrees with the record's store "
                        f"time {int(ts[i])} (file begins {f.begin_timestamp})")
            report.add("index", where, what)
        if int(bad.sum()) > flisted:
            report.add("index", f.file_name, f"... {int(bad.sum()) - flisted:,} more bad entries")
    return {"index_files": len(files), "entries": n_entries}


def _v2_topics(store) -> list[str]:
    # the record layout follows the topic's length (v2 past 127 bytes), so the topics say
    # which records a 4.9.x broker cannot decode
    return [t for t in store.consume_queues.topics() if len(t.encode("utf-8")) > 127]


def _verify(args: argparse.Namespace) -> int:
    report = _Report()
    with open_store(args) as store:
        records, keys, names, end = _scan_commit_log(store, report, not args.no_crc)
        stats: dict[str, Any] = {"commit_log_files": len(store.commit_log_queue.files),
                                 "records": len(records), "end": end}
        if not args.commit_log_only:
            stats.update(_check_queues(store, records, names, end, report, args.max_listed))
            stats.update(_check_index(store, records, keys, report, args.max_listed))
        v2_topics = _v2_topics(store)
    if v2_topics:
        report.notes.append(f"{len(v2_topics)} topic(s) longer than 127 characters are stored "
                            "as v2 records, which RocketMQ 4.9.x cannot read (a 5.x broker "
                            "can); StoreConfig(auto_message_version_on_topic_len=False) "
                            "refuses such puts")
    if args.json:
        json.dump({"stats": stats, "notes": report.notes, "v2_topics": v2_topics,
                   "problems": [{"area": a, "where": w, "what": t} for a, w, t in report.problems]},
                  sys.stdout, indent=2)
        print()
    else:
        if report.problems:
            table(report.problems, ("area", "where", "what"))
            print()
        for note in report.notes:
            print(f"note: {note}")
        checks = "" if args.commit_log_only else (
            f"; {stats['queues']} queue(s), {stats['units']:,} unit(s); "
            f"{stats['index_files']} index file(s), {stats['entries']:,} entries")
        verdict = f"{len(report.problems)} problem(s)" if report.problems else "OK"
        print(f"{stats['records']:,} record(s) in {stats['commit_log_files']} commit-log file(s)"
              f"{'' if args.no_crc else ', CRC-checked'}{checks}: {verdict}")
    return 1 if report.problems else 0


def _recover(args: argparse.Namespace) -> int:
    from rocketstore import MessageStore
    from rocketstore.store import paths
    from rocketstore.store.checkpoint import StoreCheckpoint
    from rocketstore.cli._common import detect_config
    from rocketstore.store.storelock import _StoreLock, create_abort_marker
    root = args.store
    config = detect_config(root, args)
    if not os.path.isdir(config.commit_log_path(root)):
        raise CommandError(f"{root}: not a store directory (no {config.commit_log_path(root)})")
    lock = _StoreLock(root, config.commit_log_path(root))   # StoreLockedError when a writer holds it
    try:
        # look before cutting: recovery truncates the log at its first bad record
        with MessageStore.open(root, config, read_only=True) as store:
            report = _Report()
            _, _, _, end = _scan_commit_log(store, report)
            # a damaged record with intact framing is skipped, not cut at (docs/recovery.md)
            bad = [p for p in report.problems if p[0] == "commitlog" and SKIPPED not in p[2]]
        if bad and not args.truncate:
            _, where, what = bad[0]
            raise CommandError(f"commitlog {where}: {what}; recovery would drop what follows "
                               f"it in its file, or the whole log after it when no later file "
                               f"starts intact ({len(bad)} problem(s) in all; see `rocketstore "
                               f"verify`). Pass --truncate to recover anyway")
        for sub in (paths.CONSUMEQUEUE_DIR, paths.INDEX_DIR):
            if os.path.isdir(os.path.join(root, sub)):
                shutil.rmtree(os.path.join(root, sub))
        cp = StoreCheckpoint(paths.checkpoint_path(root))
        cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 0
        cp.flush()
        cp.close()
        create_abort_marker(root)
    finally:
        lock.release()
    # whoever opens the store next now runs the full abnormal recovery; that is us, at once
    with MessageStore.open(root, config) as store:
        rec = dict(store.recovery)
        queues = store.consume_queues.max_offsets()
        index_files = len(store.index_service.files)
    print(f"recovered {root}: scanned {rec['bytes_scanned']:,} bytes of {rec['files']} "
          f"commit-log file(s) in {rec['scan_seconds']:.2f} s; commit log ends at "
          f"{rec['max_offset']:,}; re-dispatched {rec['messages_redispatched']:,} message(s) "
          f"into {len(queues)} queue(s) and {index_files} index file(s)")
    if rec["bytes_blanked"]:
        print(f"blanked {rec['bytes_blanked']:,} unreadable bytes: files whose records broke off "
              f"before their end now end there with a blank record; the files after them are "
              f"kept")
    if rec.get("bytes_resynced"):
        print(f"skipped {rec['bytes_resynced']:,} damaged bytes: the records after them were "
              f"found and kept; each damaged range is listed by `rocketstore verify`")
    if rec["torn_record_bytes"] or rec["files_dropped"] or rec["max_offset"] < end:
        print(f"truncated: the log now ends at {rec['max_offset']:,} (data reached {end:,}; "
              f"{rec['files_dropped']} file(s) dropped)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("verify", help="full CRC scan; cross-check consume queues and index")
    add_store_options(p)
    p.add_argument("--no-crc", action="store_true", help="check record structure only")
    p.add_argument("--commit-log-only", action="store_true",
                   help="skip the consume-queue and index cross-checks")
    p.add_argument("--max-listed", type=int, default=1000,
                   help="disagreements listed per queue or index file (default 1000)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=_verify)

    p = sub.add_parser("recover", help="rebuild consume queues and index from the commit log")
    add_store_options(p)
    p.add_argument("--truncate", action="store_true",
                   help="recover even when a bad record mid-log means truncating there")
    p.set_defaults(func=_recover)
