"""MessageStore's recovery at open (docs/recovery.md, docs/format.md §8): the end of valid
data found, what lies past it dropped, dispatch caught up. A mixin of ``MessageStore``."""
from __future__ import annotations

import functools
import logging
import struct
import time

from rocketstore.store import integrity
from rocketstore.store._codec import BLANK_MAGIC_CODE
from rocketstore.store._commitlog import PutMessageResult
from rocketstore.store.flush import (CommitRealTimeService, FlushConsumeQueueService,
                                     FlushRealTimeService, GroupCommitService)
from rocketstore.errors import StoreReadOnlyError

from rocketstore.store.storelock import create_abort_marker

log = logging.getLogger("rocketstore.store")


class _Progress:
    """A progress line on stderr for long recoveries, when stderr is a terminal."""

    def __init__(self, what: str, total: int) -> None:
        import sys
        self.what = what
        self.total = total
        self.stream = sys.stderr
        self.on = total >= (1 << 30) and self.stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def update(self, done: int) -> None:
        if not self.on or time.monotonic() - self.last < 0.2:
            return
        self.last = time.monotonic()
        rate = done / max(self.last - self.t0, 1e-9) / 1e9
        self.stream.write(f"\r{self.what}: {done * 100 // max(self.total, 1)}% "
                          f"({done / 1e9:.1f} of {self.total / 1e9:.1f} GB, {rate:.2f} GB/s)")
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\n")
            self.stream.flush()


class _Recovery:
    """Recovery at open: ``MessageStore`` mixes this in."""

    # -- recovery ------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Find the end of valid data, drop what lies past it, catch dispatch up.

        After a clean close only the last 3 files are walked and CRC-checked (RocketMQ's
        normal recovery); after a crash (``abort`` present) every file is. Consume-queue units
        pointing past the end are truncated; records past the queues' end are dispatched now;
        each queue's next offset is then its consume queue's max offset.
        """
        t0 = time.perf_counter()
        self.consume_queues.recover()
        files = self.commit_log_queue.files
        if self.last_exit_ok:
            start = max(0, len(files) - 3)
        else:
            start = self._abnormal_start(files)
        end = files[0].file_from_offset if files else 0
        scanned = messages = 0
        total = sum(mf.file_size for mf in files[start:])
        progress = _Progress("recovering commit log", total)
        blanked = 0
        for i in range(start, len(files)):
            mf = files[i]
            # after a clean close, note each queue's next offset as the log has it: a queue
            # whose consume queue ends before that lost units to damage (checked below)
            end_pos, count, blank = self.commit_log.scan_file(mf, self.config.check_crc_on_recover,
                                                              self.last_exit_ok)
            scanned += end_pos
            messages += count
            end = mf.file_from_offset + end_pos
            progress.update(scanned)
            if not blank and i + 1 < len(files) and end_pos + 8 <= mf.file_size \
                    and self.commit_log.next_record(files[i + 1].file_from_offset)[0] is not None:
                # a break inside the log, and the next file starts with a valid record: end
                # this file at the break with a blank record (what the rest of it held cannot
                # be read) and keep the files after it (docs/recovery.md)
                blanked += self._blank_rest(mf, end_pos)
                end = mf.file_from_offset + mf.file_size
                continue
            if not blank:
                break
        progress.close()
        scan_seconds = time.perf_counter() - t0
        # what lies past the end: the torn record's claimed size, and the files dropped
        tail_mf = self.commit_log_queue.find_mapped_file_by_offset(end)
        torn = 0
        if tail_mf is not None and end - tail_mf.file_from_offset + 8 <= tail_mf.file_size:
            head = tail_mf.read_bytes(end - tail_mf.file_from_offset, 4)
            torn = max(0, int.from_bytes(head, "big", signed=True))
        files_dropped = sum(1 for mf in files if mf.file_from_offset > end)
        self.commit_log_queue.truncate_dirty_files(end)
        zeroed = self._zero_tail(end)
        self.commit_log.reset_write_file()
        if not self.last_exit_ok and files:
            # units written after the checkpoint may be torn or point at records a power loss
            # took: drop every unit from the re-dispatch start on and rebuild them from the
            # commit log, the one source of truth (units before it were synced before the
            # checkpoint was)
            self.consume_queues.truncate_dirty(min(end, files[start].file_from_offset))
        elif self.consume_queues.max_physic_offset() > end:
            self.consume_queues.truncate_dirty(end)
        min_phy = max(0, self.commit_log.get_min_offset())
        rebuild_from, queues_cut = -1, []
        if not self.last_exit_ok and files:
            # a cut during an earlier recovery can leave queue files whose units never
            # reached the disk (all zeros, counted as full) anywhere in a queue: check every
            # unit against the log and rebuild each queue from its first bad one
            rebuild_from, queues_cut = self.consume_queues.validate(
                self.commit_log_queue, end, min_phy)
            # a power cut can also keep a queue's later file without its first (directory
            # entries reach the disk independently): re-dispatch would place nothing below
            # the queue's first file
            if self._drop_headless_queues(min_phy, {}, queues_cut):
                rebuild_from = min_phy
        else:
            seen = self.commit_log.queue_offsets()
            dropped = self._drop_headless_queues(min_phy, self.commit_log.scan_first,
                                                 queues_cut)
            if dropped:
                rebuild_from = min_phy
            for q in self.consume_queues.queues():
                key = (q.topic, q.queue_id)
                # a queue dropped just now is rebuilt whole: nothing in it to validate
                if key not in dropped and seen.get(key, 0) > q.get_max_offset_in_queue():
                    self.consume_queues.mark_suspect(q)
        if self.last_exit_ok and self.consume_queues.suspect:
            # after a clean close, only queues found cut short, out of sequence or shorter
            # than the log says (damage)
            start2, cut2 = self.consume_queues.validate(
                self.commit_log_queue, end, min_phy, queues=self.consume_queues.suspects())
            queues_cut += cut2
            if start2 >= 0:
                rebuild_from = start2 if rebuild_from < 0 else min(rebuild_from, start2)
        self.consume_queues.correct_min_offset(min_phy)
        if self.dispatch_core.index_last_phy >= end:
            # the index holds keys of records the truncation removed (queries check each
            # record, so they find nothing); the records written from ``end`` on need theirs
            self.dispatch_core.index_last_phy = end - 1
        reput = max(self.consume_queues.max_physic_offset(), min_phy)
        if self.config.message_index_enable:
            # records after the last indexed one need their keys (the queues skip them)
            last_indexed = self.index_service.last_indexed_offset()
            if last_indexed < min_phy:
                reput = min_phy
            elif self.last_exit_ok:
                # a clean close indexed every key of its last record: start after it
                _, after = self.commit_log.next_record(last_indexed)
                reput = min(reput, after if after > last_indexed else last_indexed)
            else:
                # after a crash its keys may be cut short: index it again (missing keys only)
                reput = min(reput, last_indexed)
        if not self.last_exit_ok and files:
            # after a crash every record from the checkpoint's file on is dispatched again:
            # consume-queue units and index entries written after their last flush may be lost
            reput = min(reput, max(files[start].file_from_offset, min_phy))
        if rebuild_from >= 0:
            reput = min(reput, rebuild_from)
        if self.consume_queues.damaged:
            reput = min_phy         # queue files were dropped at load: rebuild them all
        elif min_phy < reput < end and self.commit_log.next_record(reput)[1] == -1:
            # not a record start: a damaged unit (its size or offset) moved the queues' end
            # into a record, where dispatch would stop for good; dispatch the checked files
            # again instead (idempotent: units and keys already there are not rewritten)
            log.warning("%s: the consume queues end at %d, inside a record; re-dispatching "
                        "from %d", self.root, reput, files[start].file_from_offset if files else min_phy)
            reput = max(min_phy, files[start].file_from_offset if files else min_phy)
        self.dispatch_core.reput_offset = reput
        # every record found on disk is checked before it becomes a unit or an index entry
        self.dispatch_core.verify_below = end
        redispatch_from = self.dispatch_core.reput_offset
        dispatched = self.dispatch_service.do_dispatch()
        if not self.last_exit_ok or queues_cut:
            # what re-dispatch rebuilt is on disk before anything trusts it: a cut during
            # the next run must not find these files created but never written
            self.consume_queues.flush(0)
        for (topic, qid), max_offset in self.consume_queues.max_offsets().items():
            self.commit_log.set_queue_offset(topic, qid, max_offset)
        self.recovery = {
            "last_exit_ok": self.last_exit_ok,
            "files": len(files),
            "files_scanned": len(files) - start,
            "bytes_scanned": scanned,
            "messages_scanned": messages,
            "max_offset": end,
            "redispatched_from": redispatch_from,
            "messages_redispatched": dispatched,
            "torn_record_bytes": torn,
            "bytes_zeroed": zeroed,
            "files_dropped": files_dropped,
            "bytes_blanked": blanked,
            "bytes_resynced": self.commit_log.bytes_resynced,
            "queues_rebuilt": queues_cut,
            "records_skipped": self.bad_records(),
            "records_not_dispatched": self.dispatch_core.rejected,
            "scan_seconds": scan_seconds,
            "seconds": time.perf_counter() - t0,
        }

    def _drop_headless_queues(self, min_phy: int, first: dict, cut: list[str]
                              ) -> set[tuple[str, int]]:
        """Drop (for a whole rebuild) each queue whose units before its first file are
        missing while the log holds their records: ``first`` (the scan's first queue offset
        of each queue) says so, or no commit-log file was ever deleted (``min_phy`` 0, so
        retention cannot have removed them) and no filler at its first unit says the queue
        began there. The (topic, queue id) of each queue dropped."""
        dropped: set[tuple[str, int]] = set()
        for q in self.consume_queues.queues():
            key = (q.topic, q.queue_id)
            qfiles = q.mapped_file_queue.files
            start = qfiles[0].file_from_offset // 20 if qfiles else 0
            head = q.get_unit(start) if qfiles else None
            if (key in first and (not qfiles or first[key][0] < start)) \
                    or (min_phy == 0 and start > 0
                        and (head is None or head[1] != 0x7FFFFFFF)):
                self.consume_queues.drop_queue(q)
                cut.append(f"{q.topic}/{q.queue_id}@0")
                dropped.add(key)
        return dropped

    def _start_flush(self) -> None:
        cfg = self.config
        # what recovery kept is taken as durable (a clean close flushed it; after a crash it
        # is what survived): flush it once so the claim holds
        flushed = self.commit_log_queue.flush(0)
        if self.transient_pool is not None:
            self.commit_service = CommitRealTimeService(
                self.commit_log, self.transient_pool, self._after_commit,
                cfg.commit_interval_commit_log, cfg.commit_commit_log_least_pages)
            self.commit_service.start()
        if cfg.flush_disk_type == "SYNC_FLUSH":
            self.commit_log.enable_sync_flush(cfg.sync_flush_timeout, flushed)
            self.flush_service = GroupCommitService(self.commit_log, self.checkpoint)
            self.flush_ack.start()
            # no consumer offset is persisted past a record not yet durable
            self.consumer_offset_manager.durable_barrier = functools.partial(
                self.wait_durable, "consumerOffset.json")
        else:
            self.flush_service = FlushRealTimeService(
                self.commit_log, self.checkpoint, cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval)
            self.commit_log.set_flushed(flushed)
        self.flush_service.start()
        self.cq_flush_service = FlushConsumeQueueService(
            self.consume_queues, self.commit_log, self.checkpoint,
            cfg.flush_interval_consume_queue, cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval)
        self.cq_flush_service.start()

    def _blank_rest(self, mf, pos: int) -> int:
        """Close ``mf`` at ``pos`` with an end-of-file blank record (docs/format.md §1.6)."""
        left = mf.file_size - pos
        mf.write_at(pos, struct.pack(">iI", left, BLANK_MAGIC_CODE & 0xFFFFFFFF))
        mf.set_positions(mf.file_size)
        mf.flushed_pos = min(mf.flushed_pos, pos)
        log.warning("commit log %s: unreadable from position %d, the next file is intact: "
                    "%d bytes blanked, the files after it kept", mf.path, pos, left)
        start = mf.file_from_offset + pos
        integrity.report(self.commit_log_queue.store_path, start,
                         f"damaged range [{start}, {start + left}) of {left} bytes skipped: "
                         f"no valid record starts in it (blanked at recovery)")
        return left

    def _zero_tail(self, end: int) -> int:
        """Zero what a crash left after the recovered end (a torn record, stale bytes), page
        by page until a page that is already all zeros: the files then hold only the log,
        for any reader of the directory. Returns the bytes zeroed."""
        mf = self.commit_log_queue.find_mapped_file_by_offset(end)
        if mf is None:
            return 0
        pos = end - mf.file_from_offset
        zeroed = 0
        page = 4096
        while pos < mf.file_size:
            n = min(page - pos % page, mf.file_size - pos)
            if mf.read_bytes(pos, n) == bytes(n):
                if zeroed or pos % page == 0:
                    break
            else:
                mf.write_at(pos, bytes(n))
                zeroed += n
            pos += n
        if zeroed:
            log.info("commit log: zeroed %d bytes after the recovered end %d", zeroed, end)
            mf.flushed_pos = min(mf.flushed_pos, end - mf.file_from_offset)
        return zeroed

    def _abnormal_start(self, files: list) -> int:
        """Index of the file abnormal recovery starts from (docs/format.md §8.4): the newest whose
        first record was stored no later than the checkpoint's min timestamp; 0 when none is,
        or when the checkpoint is zeroed or unreadable (a full scan)."""
        from rocketstore.store._codec import decode
        limit = self.checkpoint.min_timestamp()
        if limit <= 0 or limit > time.time() * 1000 + 86_400_000:
            return 0        # zeroed, or not a time this store could have written: scan it all
        for i in range(len(files) - 1, -1, -1):
            try:
                first = decode(files[i].view(0, min(files[i].file_size, 1 << 16)), 0)
            except (ValueError, OSError):
                continue
            if first is not None and 0 < first.store_timestamp <= limit:
                return i
        return 0

    def _open_read_only(self) -> None:
        min_phy = max(0, self.commit_log.get_min_offset())
        self.consume_queues.correct_min_offset(min_phy)
        for name, tc in self.topic_config_manager.all().items():
            self._apply_topic_rule(tc)
        self.put_message = self._refuse_write  # type: ignore[method-assign]
        self.put_messages = self._refuse_write  # type: ignore[method-assign]
        self.put_message_async = self._refuse_write  # type: ignore[method-assign,assignment]
        self.put_messages_async = self._refuse_write  # type: ignore[method-assign,assignment]

    def _refuse_write(self, *args: object, **kwargs: object) -> PutMessageResult:
        self._check_open()
        raise StoreReadOnlyError(self.root)

    def _after_commit(self) -> None:
        # committed bytes are readable now: wake the dispatch thread for them
        self.dispatch_service.wakeup()

    def _create_abort(self) -> None:
        create_abort_marker(self.root)
