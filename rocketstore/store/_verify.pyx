# cython: language_level=3
"""Full commit-log walk for ``rocketstore verify``: every record of one mapped file, CRC-checked,
as numpy columns, with every problem listed instead of stopping at the first (docs/format.md §1.1,
3, 6.3).

Recovery (``CommitLog.scan_file``) stops at the first record that does not parse: it wants the
end of valid data. A verifier wants every disagreement, so a record whose structure parses but
whose BODYCRC does not match is reported and stepped over (its TOTALSIZE is consistent with
its fields, so the next record start is known); only a record whose structure is broken ends
the walk of its file, since nothing after it can be found without guessing.

For each message record the walk yields: its commit-log offset, size, QUEUEID, QUEUEOFFSET,
STORETIMESTAMP, SYSFLAG, a topic number (into ``topics``), the Java hashCode of TAGS (0 when
absent), whether it carries DELAY (its tags code is then a delivery time), and the index key
hashes dispatch would write for it (UNIQ_KEY and each KEYS token, docs/format.md §6.2-6.3).

Thread safety: stateless; reads the mapping only. A writer appending to the same file in
another process may be mid-record at the end of data: callers treat a broken record followed
by zeros in the newest file as the end of data.
"""
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from rocketstore.store._csrc cimport (RS_SYSFLAG_TX_MASK, RS_SYSFLAG_TX_PREPARED,
                                RS_SYSFLAG_TX_ROLLBACK, rs_java_hash)
from rocketstore.store._codec cimport (RecordInfo, PropRefs, parse_record, find_dispatch_props,
                                       record_check, REC_OK)
from rocketstore.store._codec import REC_REASONS

# what recovery and every read path do with such a record (verify and recover say so)
SKIPPED = "skipped by recovery and every read path, never handed out"
from rocketstore.store._mapped cimport MappedFile
from rocketstore.store._indexfile cimport IndexFile, index_topic_prefix, index_key_hash_from

import numpy as np

cnp.import_array()

cdef enum:
    FIRST_CAP = 4096            # rows allocated before the walk knows how many records there are

RECORD_DTYPE = np.dtype([("phy", "<i8"), ("size", "<i4"), ("queue_id", "<i4"),
                         ("queue_offset", "<i8"), ("store_ts", "<i8"), ("sys_flag", "<i4"),
                         ("topic", "<i4"), ("tags_hash", "<i8"), ("delay", "u1"),
                         ("dispatch", "u1")])
KEY_DTYPE = np.dtype([("phy", "<i8"), ("hash", "<i4")])


cdef packed struct Row:
    int64_t phy
    int32_t size
    int32_t queue_id
    int64_t queue_offset
    int64_t store_ts
    int32_t sys_flag
    int32_t topic
    int64_t tags_hash
    unsigned char delay
    unsigned char dispatch


cdef packed struct KeyRow:
    int64_t phy
    int32_t hash


cdef bint _all_zero(const char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] != 0:
            return False
    return True


cdef object _grow(object arr, Py_ssize_t cap):
    # np.resize refills by repeating the data, slowly for structured dtypes: copy once instead
    out = np.empty(cap, dtype=arr.dtype)
    out[:len(arr)] = arr
    return out


def walk_file(MappedFile mf, bint check_crc=True, dict topics=None, Py_ssize_t limit=-1,
              int64_t crc_from=-1):
    """Walk every record of ``mf`` from position 0.

    Returns ``(records, keys, problems, end_pos, blank)``: a structured array of RECORD_DTYPE,
    one row per message; a KEY_DTYPE array of the index keys each message should have;
    ``problems`` as ``(position, reason)`` tuples; the position after the last record read
    (the file size after a blank); and whether a blank record closed the file. ``topics`` maps
    topic bytes to numbers and grows as new topics are met (pass the same dict for every
    file). ``limit`` stops the walk at that position (the end of data a caller already knows).
    """
    if topics is None:
        topics = {}
    cdef const char *base = mf.base
    if base == NULL:
        raise ValueError(f"{mf.path}: file is not mapped")
    cdef Py_ssize_t size = mf.file_size if limit < 0 else min(limit, mf.file_size)
    cdef int64_t from_off = mf.file_from_offset
    cdef Py_ssize_t pos = 0, rc, n = 0, nk = 0, cap = FIRST_CAP, kcap = FIRST_CAP
    cdef Py_ssize_t i, start
    cdef RecordInfo info
    cdef PropRefs refs
    cdef int32_t prefix, tx
    cdef int32_t topic_no = -1
    cdef const char *last_topic = NULL
    cdef int32_t last_topic_len = -1
    cdef bint blank = False
    cdef bint crc_bad, need
    records = np.zeros(cap, dtype=RECORD_DTYPE)
    keys = np.zeros(kcap, dtype=KEY_DTYPE)
    cdef Row[::1] rows = records
    cdef KeyRow[::1] krows = keys
    problems = []
    while pos < size:
        # one parse with the CRC; only a failure is parsed again without it, to tell a bad
        # body (step over it) from a broken structure (stop)
        crc_bad = False
        need = 0 <= crc_from <= from_off + pos
        rc = parse_record(base + pos, size - pos, False, &info)
        if rc > 0 and check_crc:
            crc_bad = record_check(&info, base + pos, need) != REC_OK
        if rc == 0:
            if info.total_size != size - pos:
                problems.append((pos, f"blank record of {info.total_size} bytes does not fill "
                                      f"the {size - pos} bytes left in the file"))
            else:
                blank = True
                pos = size
            break
        if rc < 0:
            if _all_zero(base + pos, min(size - pos, 8)):
                break               # end of data
            problems.append((pos, "TOTALSIZE disagrees with the record's fields" if rc == -2
                             else "not a record (bad magic code or size)"))
            break
        if info.phy_offset != from_off + pos:
            problems.append((pos, f"PHYSICALOFFSET field says {info.phy_offset}, record is at "
                                  f"{from_off + pos}: {SKIPPED}"))
            crc_bad = True
        elif crc_bad:
            problems.append((pos, f"{REC_REASONS[record_check(&info, base + pos, need)]}: {SKIPPED}"))
        if n == cap:
            cap *= 2
            records = _grow(records, cap)
            rows = records
        # topics: consecutive records mostly share one, so compare with the last before the dict
        if (info.topic_len != last_topic_len
                or memcmp(info.topic, last_topic, <size_t>info.topic_len) != 0):
            tb = info.topic[:info.topic_len]
            topic_no = topics.get(tb, -1)
            if topic_no < 0:
                topic_no = len(topics)
                topics[tb] = topic_no
            last_topic = info.topic
            last_topic_len = info.topic_len
        find_dispatch_props(info.props, info.props_len, &refs)
        tx = info.sys_flag & RS_SYSFLAG_TX_MASK
        rows[n].phy = from_off + pos
        rows[n].size = <int32_t>rc
        rows[n].queue_id = info.queue_id
        rows[n].queue_offset = info.queue_offset
        rows[n].store_ts = info.store_ts
        rows[n].sys_flag = info.sys_flag
        rows[n].topic = topic_no
        rows[n].tags_hash = (<int64_t>rs_java_hash(refs.tags, <size_t>refs.tags_len)
                             if refs.tags != NULL and refs.tags_len > 0 else 0)
        rows[n].delay = refs.delay != NULL
        rows[n].dispatch = tx != RS_SYSFLAG_TX_PREPARED and tx != RS_SYSFLAG_TX_ROLLBACK
        n += 1
        # index keys: UNIQ_KEY, then each space-separated KEYS token; none for a rollback
        if tx != RS_SYSFLAG_TX_ROLLBACK and (refs.uniq != NULL or refs.keys != NULL):
            prefix = index_topic_prefix(info.topic, info.topic_len)
            if nk + 1 + refs.keys_len // 2 + 1 > kcap:
                kcap = 2 * kcap + refs.keys_len
                keys = _grow(keys, kcap)
                krows = keys
            if refs.uniq != NULL and refs.uniq_len > 0:
                krows[nk].phy = from_off + pos
                krows[nk].hash = index_key_hash_from(prefix, refs.uniq, refs.uniq_len)
                nk += 1
            if refs.keys != NULL:
                start = 0
                for i in range(refs.keys_len + 1):
                    if i == refs.keys_len or refs.keys[i] == 32:
                        if i > start:
                            krows[nk].phy = from_off + pos
                            krows[nk].hash = index_key_hash_from(prefix, refs.keys + start,
                                                                 i - start)
                            nk += 1
                        start = i + 1
        pos += rc
    return records[:n].copy(), keys[:nk].copy(), problems, pos, blank


def reachable_keys(IndexFile f, const int64_t[::1] phys, const int32_t[::1] hashes,
                   unsigned char[::1] found):
    """Set ``found[i]`` when key ``hashes[i]`` of the record at ``phys[i]`` is reachable
    through its slot's chain in index file ``f`` (what a query walks, docs/format.md §6.4); entries
    already found are skipped."""
    cdef Py_ssize_t i, n = phys.shape[0]
    if hashes.shape[0] != n or found.shape[0] != n:
        raise ValueError("phys, hashes and found must have one length")
    for i in range(n):
        if not found[i] and f.has_entry(hashes[i], phys[i]):
            found[i] = 1
