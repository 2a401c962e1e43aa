# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# Reads across files and recovery's scan, with the resynchronisation after damage both use.


# -- resynchronising after damage (recovery and reads) -------------------------------------------

cdef inline Py_ssize_t _first_nonzero(const char *b, Py_ssize_t q, Py_ssize_t limit) noexcept nogil:
    """First position >= ``q`` below ``limit`` holding a non-zero byte (``limit`` if none);
    zero runs go by 8 bytes at a time (mapped files are page-aligned)."""
    while q < limit and (q & 7):
        if b[q] != 0:
            return q
        q += 1
    while q + 8 <= limit and (<const uint64_t *>(b + q))[0] == 0:
        q += 8
    while q < limit and b[q] == 0:
        q += 1
    return q


cdef Py_ssize_t resync_record(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit,
                              int64_t crc_from) noexcept nogil:
    """First position after ``pos`` (below ``limit``) where a valid record starts: its
    MAGICCODE, sizes, PHYSICALOFFSET (its own position) and CRCs all check. -1 when there is
    none: what follows ``pos`` is the torn end (or, in an older file, the damaged rest of it,
    which recovery closes with a blank)."""
    cdef const char *b = mf.base
    cdef int64_t from_off = mf.file_from_offset
    cdef Py_ssize_t p = pos + 1, q, rc
    cdef uint32_t magic
    cdef RecordInfo info
    if b == NULL:
        return -1
    while p + 8 <= limit:
        # the last byte of MAGICCODE is never zero: skip to where it could be
        q = _first_nonzero(b, p + 7, limit)
        if q >= limit:
            return -1
        if q - 7 > p:
            p = q - 7
        magic = get_u32(b + p + 4)
        if magic == RS_MAGIC_V1 or magic == RS_MAGIC_V2:
            rc = checked_record(b + p, limit - p, from_off + p, &info, crc_from)
            if rc > 0:
                return p
        p += 1
    return -1


def data_end(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit):
    """``limit``, or the start of the first hole of ``mf``'s file at or after ``pos`` when
    that comes first. A resync never reads a hole: no record was ever written there, and on
    tmpfs (or any filesystem that allocates on a read fault) reading one on a full disk is a
    SIGBUS. Sparse files are what extent allocation leaves past the written log."""
    cdef Py_ssize_t hole
    if mf.path is None:
        return limit
    try:
        fd = os.open(mf.path, os.O_RDONLY)
    except OSError:
        return limit
    try:
        hole = os.lseek(fd, pos, os.SEEK_HOLE)
    except OSError:             # SEEK_HOLE unsupported, or pos past the end
        return limit
    finally:
        os.close(fd)
    return hole if hole < limit else limit


def resync_offset(MappedFile mf, Py_ssize_t pos, Py_ssize_t limit, int64_t crc_from):
    """``resync_record`` for the dispatcher's slow path: the position of the next valid
    record in ``mf`` after damage at ``pos`` (below ``limit``), or -1."""
    return resync_record(mf, pos, data_end(mf, pos, min(limit, mf.file_size)), crc_from)


cdef int report_damaged_range(object where, int64_t start, int64_t end) except -1:
    """Report the commit-log bytes [start, end) skipped as damage (no record could be read)."""
    from rocketstore.store import integrity
    integrity.report(str(where), start,
                     f"damaged range [{start}, {end}) of {end - start} bytes skipped: no valid "
                     f"record starts in it")
    return 0

cdef class _LogReader(_FaultAhead):
    """CommitLog's read layer: records by offset, the walk across files, recovery's scan."""
    cdef public int64_t bytes_resynced  # recovery: damaged bytes skipped to a valid record
    cdef public dict scan_first         # recovery: (topic, qid) -> (queue offset, offset) first scanned

    def __cinit__(self):
        self.scan_first = {}

    # -- reading -------------------------------------------------------------------------------

    def get_min_offset(self):
        """Commit-log offset of the first byte still stored (-1 when there is no file)."""
        return self.mapped_file_queue.get_min_offset()

    def get_max_offset(self):
        """Commit-log offset one past the last readable byte."""
        cdef MappedFile mf
        if self.pool is not None:
            # with write buffers, the first file still holding one ends what is readable
            # (files after it may be further along in the pool, not in the files)
            lent = list(self.pool.lent)     # a copy: the commit service removes entries
            if lent:                        # (and boundscheck is off: test, then index)
                mf = lent[0]
                return mf.file_from_offset + mf.committed_pos
        return self.mapped_file_queue.get_max_offset()

    def get_message(self, int64_t offset, bint raw=False):
        """The message whose record starts at commit-log ``offset``, or None.

        None when the offset is outside the stored range or is not the start of a valid
        record (its PHYSICALOFFSET field must equal ``offset``).
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos, rc, end
        cdef MappedFile mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or mf.base == NULL:
            return None
        pos = offset - mf.file_from_offset
        end = mf.committed_pos
        if pos < 0 or pos >= end:
            return None
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        rc = checked_record(mf.base + pos, end - pos, offset, &info, crc_from)
        if rc == REC_SKIP:
            report_bad_record(self.mapped_file_queue.store_path, offset, mf.base + pos, end - pos,
                              crc_from)
        if rc <= 0:
            return None
        return MessageExt.new(&info, None, mf, mf.base + pos, raw, None)

    def next_record(self, int64_t offset):
        """(MessageExt or None, next offset) for the record at ``offset``.

        A blank record gives (None, start of the next file); the end of data gives
        (None, -1).
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos, rc, end
        cdef MappedFile mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or mf.base == NULL:
            return None, -1
        pos = offset - mf.file_from_offset
        end = mf.committed_pos
        if pos >= end:
            if end == mf.file_size:
                return None, mf.file_from_offset + mf.file_size
            return None, -1
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        cdef Py_ssize_t nxt
        rc = checked_record(mf.base + pos, end - pos, offset, &info, crc_from)
        if rc == 0 and info.total_size == mf.file_size - pos:
            return None, mf.file_from_offset + mf.file_size
        if rc == REC_SKIP:
            # intact framing, failed check: skip it (never handed out), go on after it
            report_bad_record(self.mapped_file_queue.store_path, offset, mf.base + pos, end - pos,
                              crc_from)
            return None, offset + info.total_size
        if rc <= 0:
            # not a record: damage with a valid record after it in this file is skipped and
            # reported; with none, a file that is not the last one is unreadable from here on
            # (reported, the walk goes on in the next file); the last one ends here
            nxt = resync_record(mf, pos, end, crc_from)
            if nxt > pos:
                report_damaged_range(self.mapped_file_queue.store_path, offset,
                                     mf.file_from_offset + nxt)
                return None, mf.file_from_offset + nxt
            if end == mf.file_size and mf is not self.mapped_file_queue.last_file():
                report_damaged_range(self.mapped_file_queue.store_path, offset,
                                     mf.file_from_offset + mf.file_size)
                return None, mf.file_from_offset + mf.file_size
            return None, -1
        return MessageExt.new(&info, None, mf, mf.base + pos, False, None), offset + rc

    def iter_messages(self, int64_t from_offset=0):
        """Every message from ``from_offset`` (a record start) to the end, across files."""
        cdef int64_t off = max(from_offset, self.get_min_offset())
        while off >= 0:
            msg, nxt = self.next_record(off)
            if msg is not None:
                yield msg
            off = nxt

    # -- recovery ----------------------------------------------------------------------------

    def resync(self, MappedFile mf, Py_ssize_t pos, Py_ssize_t limit=-1):
        """Position in ``mf`` of the first valid record after damage at ``pos``, below
        ``limit`` (the file size when negative); -1 when none."""
        if limit < 0 or limit > mf.file_size:
            limit = mf.file_size
        return resync_record(mf, pos, data_end(mf, pos, limit),
                             self.mapped_file_queue.record_crc_from)

    def scan_file(self, MappedFile mf, bint check_crc, bint rebuild_queues=True):
        """Walk the records of one file from position 0 to the end of valid data.

        Returns (end_pos, messages, blank): the position after the last valid record (the file
        size after a blank), how many messages were read, and whether a blank closed the file.
        With ``rebuild_queues`` every NOT/COMMIT record advances its queue's next offset.

        With ``check_crc``, damage that a valid record follows in the same file (a zeroed
        page, garbage) is skipped: the walk resynchronises on that record (magic, sizes,
        PHYSICALOFFSET and CRC all right) and the damaged range is reported
        (``integrity.report``) and added to ``bytes_resynced``. Damage with no valid record
        after it is the torn end of the log, as before.
        """
        cdef RecordInfo info
        cdef Py_ssize_t pos = 0, rc, count = 0
        cdef Py_ssize_t size = mf.file_size
        cdef int64_t from_off = mf.file_from_offset
        cdef int tx
        cdef _QueueOffsets qs
        cdef dict topics = {}
        cdef int64_t crc_from = self.mapped_file_queue.record_crc_from
        while pos < size:
            if check_crc:
                rc = checked_record(mf.base + pos, size - pos, from_off + pos, &info, crc_from)
            else:
                rc = parse_record(mf.base + pos, size - pos, False, &info)
            if rc == 0:
                # a blank must fill the rest of the file exactly
                if info.total_size == size - pos:
                    return size, count, True
            if rc <= 0 or info.phy_offset != from_off + pos:
                if check_crc and rc != 0 and self._skippable(mf, pos, &info):
                    # one damaged record mid-log: skip it (never handed out), keep what follows
                    report_bad_record(self.mapped_file_queue.store_path, from_off + pos,
                                      mf.base + pos, size - pos, crc_from)
                    pos += info.total_size
                    continue
                if check_crc:
                    # within a window: the zero tail of a big preallocated file is not read
                    # into the page cache at every open just to find it empty; and never
                    # into a hole (nothing was ever written there)
                    nxt = resync_record(mf, pos, data_end(mf, pos, min(size, pos + RESYNC_WINDOW)),
                                        crc_from)
                    if nxt > pos:
                        # a zeroed page or garbage with valid records after it: damage
                        # inside the log, not its torn end (docs/recovery.md)
                        report_damaged_range(self.mapped_file_queue.store_path,
                                             from_off + pos, from_off + nxt)
                        self.bytes_resynced += nxt - pos
                        pos = nxt
                        continue
                break
            count += 1
            if rebuild_queues:
                tx = info.sys_flag & RS_SYSFLAG_TX_MASK
                if tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK:
                    tb = info.topic[:info.topic_len]
                    topic = topics.get(tb)
                    if topic is None:
                        topic = tb.decode("utf-8", "replace")
                        topics[tb] = topic
                    if info.queue_id >= 0:      # QUEUEID has no CRC: never trust it blindly
                        qs = self._queues(topic)
                        if info.queue_offset + 1 > qs.get(info.queue_id):
                            qs.set(info.queue_id, info.queue_offset + 1)
                        key = (topic, info.queue_id)
                        if key not in self.scan_first:
                            # recovery compares it with the queue's first unit on disk
                            self.scan_first[key] = (info.queue_offset, from_off + pos)
            pos += rc
        return pos, count, False

    @cython.final
    cdef bint _skippable(self, MappedFile mf, Py_ssize_t pos, RecordInfo *info):
        """The record at ``pos`` frames correctly but fails its check, and a valid record (or
        the file's blank) follows it: damage inside the log, not its torn end."""
        cdef RecordInfo nxt
        cdef Py_ssize_t size = mf.file_size, rc, after
        if checked_record(mf.base + pos, size - pos, mf.file_from_offset + pos, info,
                          self.mapped_file_queue.record_crc_from) != REC_SKIP:
            return False
        after = pos + info.total_size
        if after >= size:
            return False
        rc = parse_record(mf.base + after, size - after, True, &nxt)
        if rc == 0:
            return nxt.total_size == size - after
        return rc > 0 and nxt.phy_offset == mf.file_from_offset + after

    def reset_write_file(self):
        """Point the writer at the queue's last file (after load, recovery or truncation)."""
        self._set_cur(self.mapped_file_queue.last_file())
