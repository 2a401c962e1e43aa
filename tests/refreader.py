"""Pure-Python reference reader of the RocketMQ commit-log format: the docs/format.md oracle.

Written from /work/shared/docs/format.md (sections 1, 2, 3, 6 and 7) with ``struct`` and the standard
library only. It shares no code with the Cython codec in ``rocketstore``/``csrc`` on purpose: the
tests use it as an independent oracle that the codec is checked against, and it is itself proven
against the real RocketMQ 4.9.8 store in ``/work/shared/fixtures`` (see ``test_refreader.py``).

Conventions:

* every integer on disk is big-endian; the magic constants are given here as unsigned ints
  (on disk they are Java ``int`` values, i.e. negative);
* hosts are rendered the way Java's ``InetAddress.getHostAddress()`` does, followed by
  ``":" + port``: IPv4 ``"127.0.0.1:10911"``, IPv6 as eight lower-case hex groups without leading
  zeros and without ``::`` compression, e.g. ``"0:0:0:0:0:0:0:1:40009"`` (this is what the
  fixture's ``expected.jsonl`` holds). Like ``InetAddress.getByAddress``, an IPv4-mapped 16-byte
  address (``::ffff:a.b.c.d``) is rendered as plain IPv4;
* ``decode_record`` returns a plain dict; ``encode_record`` is its exact inverse and computes
  nothing (sizes, CRC and offsets are written as given).
"""

import ipaddress
import os
import re
import struct
import zlib

__all__ = [
    "BLANK_MAGIC", "MAGIC_V1", "MAGIC_V2", "END_FILE_MIN_BLANK_LENGTH",
    "BORNHOST_V6_FLAG", "STOREHOST_V6_FLAG",
    "java_hash", "parse_properties", "encode_properties", "body_crc", "record_size",
    "format_host", "parse_host", "offset_msg_id",
    "decode_record", "encode_record", "iter_commitlog",
    "INDEX_HEADER_SIZE", "INDEX_SLOT_SIZE", "INDEX_ENTRY_SIZE",
    "index_key_hash", "index_file_size", "read_index_file", "read_index_dir", "index_chain",
    "index_time_read", "index_select_phy_offsets", "index_query_offsets", "check_index_file",
    "index_keys_of_record",
]

BLANK_MAGIC = 0xCBD43194   # -875286124 as a Java int
MAGIC_V1 = 0xDAA320A7      # -626843481, 1-byte topic length
MAGIC_V2 = 0xDAA320AB      # -626843477, 2-byte topic length
END_FILE_MIN_BLANK_LENGTH = 8

BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
_HEAD = struct.Struct(">iIiiiqqiq")            # 48 bytes
_BLANK = struct.Struct(">iI")                  # maxBlank, BLANK_MAGIC


# --------------------------------------------------------------------------------------------
# small helpers

def _to_int32(v):
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def java_hash(s):
    """Java ``String.hashCode`` of ``s`` (over UTF-16 code units), as a signed 32-bit int."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def body_crc(body):
    """BODYCRC (docs/format.md §1.2): CRC-32 (IEEE) of the body as stored, ``& 0x7FFFFFFF``."""
    return zlib.crc32(bytes(body)) & 0x7FFFFFFF


CRC32_RESERVED_LEN = 20        # len("__CRC32#") + 1 + 10 + 1 (CommitLog.CRC32_RESERVED_LEN)


def record_crc_property(record):
    """The digits of the 5.x record CRC property at the end of a whole record, as the int it
    encodes (least significant digit first, MessageDecoder.createCrc32), or None."""
    tail = bytes(record[-CRC32_RESERVED_LEN:])
    if len(tail) != CRC32_RESERVED_LEN or tail[:9] != b"__CRC32#\x01" or tail[-1:] != b"\x02":
        return None
    return int(tail[9:19][::-1].decode("ascii"))


def record_crc(record):
    """CRC32 & 0x7FFFFFFF of everything before the reserved 20 bytes (UtilAll.crc32)."""
    return zlib.crc32(bytes(record[:-CRC32_RESERVED_LEN])) & 0x7FFFFFFF


def record_size(body_len, topic_len, props_len, born_v6=False, store_v6=False, v2=False):
    """TOTALSIZE per ``MessageExtEncoder.calMsgLength`` (91 + B + T + P for v1 / IPv4 hosts)."""
    born_len = 20 if born_v6 else 8
    store_len = 20 if store_v6 else 8
    topic_len_size = 2 if v2 else 1
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
            + born_len + 8 + store_len + 4 + 8
            + 4 + body_len + topic_len_size + topic_len + 2 + props_len)


def parse_properties(raw):
    """Properties bytes -> dict, as ``MessageDecoder.string2messageProperties`` (docs/format.md §1.4).

    The bytes are decoded as UTF-8 first (invalid sequences become U+FFFD, like Java), then split
    on ``\\x02``; a segment is kept when its first ``\\x01`` lies strictly after the segment's
    first char and strictly before its last char; later duplicates overwrite earlier ones.
    """
    if isinstance(raw, str):
        s = raw
    else:
        s = bytes(raw).decode("utf-8", "replace")
    out = {}
    for seg in s.split(PROPERTY_SEPARATOR):
        if len(seg) < 3:
            continue
        k = seg.find(NAME_VALUE_SEPARATOR)
        if 0 < k < len(seg) - 1:
            out[seg[:k]] = seg[k + 1:]
    return out


def encode_properties(d, trailing=True):
    """dict -> UTF-8 properties bytes: ``name \\x01 value \\x02`` per entry (None values skipped).

    ``trailing=False`` drops the final ``\\x02``, as ``messageProperties2String`` does in
    RocketMQ 4.9.1 through 5.1.x (``sb.deleteCharAt``; the 4.9.8 fixture is written that way).
    5.2.0+ and 4.9.0 and older keep it (the default here, and what docs/format.md §1.4 describes).
    """
    parts = []
    for k, v in d.items():
        if v is None:
            continue
        parts.append(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}")
    s = "".join(parts)
    if not trailing and s:
        s = s[:-1]
    return s.encode("utf-8")


def format_host(addr_bytes, port):
    """Raw address bytes (4 or 16) + port -> ``"host:port"`` in Java ``getHostAddress`` style."""
    addr_bytes = bytes(addr_bytes)
    if len(addr_bytes) == 4:
        host = str(ipaddress.IPv4Address(addr_bytes))
    elif len(addr_bytes) == 16:
        a6 = ipaddress.IPv6Address(addr_bytes)
        if a6.ipv4_mapped is not None:          # InetAddress.getByAddress -> Inet4Address
            host = str(a6.ipv4_mapped)
        else:
            host = ":".join("%x" % g for g in struct.unpack(">8H", addr_bytes))
    else:
        raise ValueError(f"host address must be 4 or 16 bytes, got {len(addr_bytes)}")
    return f"{host}:{port}"


def parse_host(hostport):
    """``"host:port"`` (IPv4, or IPv6 with or without brackets) -> (ipaddress object, port)."""
    if ":" not in hostport:
        raise ValueError(f"host {hostport!r} has no port")
    host, port = hostport.rsplit(":", 1)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return ipaddress.ip_address(host), int(port)


def _host_bytes(hostport, v6):
    addr, port = parse_host(hostport)
    if v6:
        if addr.version == 4:
            raw = ipaddress.IPv6Address("::ffff:" + str(addr)).packed
        else:
            raw = addr.packed
    else:
        if addr.version != 4:
            mapped = addr.ipv4_mapped
            if mapped is None:
                raise ValueError(f"IPv6 host {hostport!r} but the sysflag V6 bit is not set")
            addr = mapped
        raw = addr.packed
    return raw + _I32.pack(port)


def offset_msg_id(host, port, phy_offset):
    """Offset message id (docs/format.md §7): uppercase hex of ip + int port + long offset.

    32 chars for IPv4 (4+4+8 bytes), 56 for IPv6 (16+4+8). ``host`` is the bare address string
    (``"127.0.0.1"`` or ``"0:0:0:0:0:0:0:1"``); an IPv4-mapped IPv6 address counts as IPv4, as
    Java resolves it to an ``Inet4Address``.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    addr = ipaddress.ip_address(host)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return (addr.packed + _I32.pack(port) + _I64.pack(phy_offset)).hex().upper()


# --------------------------------------------------------------------------------------------
# records

def decode_record(buf, pos):
    """Decode the commit-log record starting at ``pos`` of a bytes-like ``buf``.

    Returns a dict with ``kind``:

    * ``"msg"``: total_size, magic (unsigned), body_crc, queue_id, flag, queue_offset,
      physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host,
      reconsume_times, prepared_transaction_offset, body (bytes as stored), topic (str),
      properties (dict), properties_raw (bytes);
    * ``"blank"``: size (the ``maxBlank`` int stored at the record start) and magic;
    * ``"end"``: end of data — TOTALSIZE is 0 (``reason="zero"``) or ``pos`` is at the end of
      the buffer (``reason="eof"``).

    Raises ValueError on a bad magic code, a size that runs past the buffer, or inner lengths
    that do not add up to TOTALSIZE.
    """
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    if pos < 0 or pos > n:
        raise ValueError(f"position {pos} outside buffer of {n} bytes")
    if pos == n:
        return {"kind": "end", "reason": "eof"}
    if n - pos < 4:
        if any(mv[pos:]):
            raise ValueError(f"record at {pos}: {n - pos} trailing bytes, too short for TOTALSIZE")
        return {"kind": "end", "reason": "zero"}
    total = _I32.unpack_from(mv, pos)[0]
    if total == 0:
        return {"kind": "end", "reason": "zero"}
    if n - pos < 8:
        raise ValueError(f"record at {pos}: TOTALSIZE {total} but only {n - pos} bytes left")
    magic = _U32.unpack_from(mv, pos + 4)[0]
    if magic == BLANK_MAGIC:
        if total < END_FILE_MIN_BLANK_LENGTH or pos + total > n:
            raise ValueError(f"blank record at {pos}: size {total} runs past the buffer "
                             f"({n - pos} bytes left) or is below 8")
        return {"kind": "blank", "size": total, "magic": magic}
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"record at {pos}: bad magic code 0x{magic:08X} (TOTALSIZE {total})")
    if total < record_size(0, 0, 0) or pos + total > n:
        raise ValueError(f"record at {pos}: TOTALSIZE {total} runs past the buffer "
                         f"({n - pos} bytes left) or is below the minimum record size")
    end = pos + total

    def need(off, size, what):
        if off + size > end:
            raise ValueError(f"record at {pos}: {what} at +{off - pos} ({size} bytes) runs past "
                             f"TOTALSIZE {total}")

    (_, _, crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts) = _HEAD.unpack_from(mv, pos)
    off = pos + _HEAD.size
    born_len = 16 if sys_flag & BORNHOST_V6_FLAG else 4
    need(off, born_len + 4 + 8, "BORNHOST/STORETIMESTAMP")
    born_host = format_host(mv[off:off + born_len], _I32.unpack_from(mv, off + born_len)[0])
    off += born_len + 4
    store_ts = _I64.unpack_from(mv, off)[0]
    off += 8
    store_len = 16 if sys_flag & STOREHOST_V6_FLAG else 4
    need(off, store_len + 4 + 4 + 8 + 4, "STOREHOST..BODY length")
    store_host = format_host(mv[off:off + store_len], _I32.unpack_from(mv, off + store_len)[0])
    off += store_len + 4
    reconsume = _I32.unpack_from(mv, off)[0]
    off += 4
    prepared = _I64.unpack_from(mv, off)[0]
    off += 8
    body_len = _I32.unpack_from(mv, off)[0]
    off += 4
    if body_len < 0:
        raise ValueError(f"record at {pos}: negative body length {body_len}")
    need(off, body_len, "BODY")
    body = bytes(mv[off:off + body_len])
    off += body_len
    if magic == MAGIC_V2:
        need(off, 2, "TOPIC length")
        topic_len = _I16.unpack_from(mv, off)[0]
        off += 2
    else:
        need(off, 1, "TOPIC length")
        b = mv[off]
        topic_len = b - 0x100 if b >= 0x80 else b       # Java reads a signed byte
        off += 1
    if topic_len < 0:
        raise ValueError(f"record at {pos}: negative topic length {topic_len}")
    need(off, topic_len, "TOPIC")
    topic = bytes(mv[off:off + topic_len]).decode("utf-8", "replace")
    off += topic_len
    need(off, 2, "PROPERTIES length")
    props_len = _I16.unpack_from(mv, off)[0]
    off += 2
    if props_len < 0:
        raise ValueError(f"record at {pos}: negative properties length {props_len}")
    need(off, props_len, "PROPERTIES")
    props_raw = bytes(mv[off:off + props_len])
    off += props_len
    if off != end:
        raise ValueError(f"record at {pos}: fields end at +{off - pos} but TOTALSIZE is {total}")
    return {
        "kind": "msg",
        "total_size": total,
        "magic": magic,
        "body_crc": crc,
        "queue_id": queue_id,
        "flag": flag,
        "queue_offset": queue_offset,
        "physical_offset": phy,
        "sys_flag": sys_flag,
        "born_timestamp": born_ts,
        "born_host": born_host,
        "store_timestamp": store_ts,
        "store_host": store_host,
        "reconsume_times": reconsume,
        "prepared_transaction_offset": prepared,
        "body": body,
        "topic": topic,
        "properties": parse_properties(props_raw),
        "properties_raw": props_raw,
    }


def encode_record(fields):
    """Inverse of ``decode_record`` for a ``"msg"`` dict (computes nothing).

    Every field is written as given, including total_size and body_crc. The V6 bits of sys_flag
    choose 16- vs 4-byte host addresses, the magic chooses a 2- (v2) or 1-byte (v1) topic length.
    ``properties_raw`` is written when present, else ``encode_properties(properties)``.
    """
    if fields.get("kind", "msg") == "blank":
        return _BLANK.pack(fields["size"], fields.get("magic", BLANK_MAGIC))
    magic = fields["magic"] & 0xFFFFFFFF
    sys_flag = fields["sys_flag"]
    body = bytes(fields["body"])
    topic = fields["topic"].encode("utf-8") if isinstance(fields["topic"], str) \
        else bytes(fields["topic"])
    props = fields.get("properties_raw")
    props = encode_properties(fields["properties"]) if props is None else bytes(props)
    out = [
        _HEAD.pack(fields["total_size"], magic, fields["body_crc"], fields["queue_id"],
                   fields["flag"], fields["queue_offset"], fields["physical_offset"], sys_flag,
                   fields["born_timestamp"]),
        _host_bytes(fields["born_host"], sys_flag & BORNHOST_V6_FLAG),
        _I64.pack(fields["store_timestamp"]),
        _host_bytes(fields["store_host"], sys_flag & STOREHOST_V6_FLAG),
        _I32.pack(fields["reconsume_times"]),
        _I64.pack(fields["prepared_transaction_offset"]),
        _I32.pack(len(body)), body,
    ]
    if magic == MAGIC_V2:
        if len(topic) > 0x7FFF:
            raise ValueError(f"topic of {len(topic)} bytes too long for v2")
        out.append(_I16.pack(len(topic)))
    else:
        if len(topic) > 127:
            raise ValueError(f"topic of {len(topic)} bytes too long for v1 (max 127)")
        out.append(bytes([len(topic)]))
    out.append(topic)
    if len(props) > 0x7FFF:
        raise ValueError(f"properties of {len(props)} bytes exceed 32767")
    out.append(_I16.pack(len(props)))
    out.append(props)
    return b"".join(out)


def iter_commitlog(commitlog_dir, file_size=None):
    """Walk a commit-log directory like recovery does.

    Yields ``(file_name, pos_in_file, physical_offset, record_dict)`` for every record, files in
    name order (20-digit start offset names; other names are ignored), ``physical_offset`` =
    file start + pos. After a ``blank`` record it moves to the next file. When the data ends
    inside a file (TOTALSIZE 0, or the file ends without a blank) a final ``"end"`` record is
    yielded at that position and iteration stops; if the last file ended with a blank there is
    no ``"end"`` item. ``file_size``, when given, is checked against every file's size.
    Raises ValueError on a corrupt record, a missing/overlapping file or a size mismatch.
    """
    names = sorted(n for n in os.listdir(commitlog_dir) if len(n) == 20 and n.isdigit())
    expected_start = None
    for name in names:
        start = int(name)
        if expected_start is not None and start != expected_start:
            raise ValueError(f"commit-log file {name} does not start at {expected_start}")
        with open(os.path.join(commitlog_dir, name), "rb") as f:
            data = f.read()
        if file_size is not None and len(data) != file_size:
            raise ValueError(f"commit-log file {name} has {len(data)} bytes, expected {file_size}")
        expected_start = start + len(data)
        pos = 0
        while True:
            rec = decode_record(data, pos)
            if rec["kind"] == "end":
                yield name, pos, start + pos, rec
                return
            yield name, pos, start + pos, rec
            if rec["kind"] == "blank":
                break
            pos += rec["total_size"]


# --------------------------------------------------------------------------------------------
# index files (docs/format.md §6)

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
_INDEX_HEADER = struct.Struct(">qqqqii")     # begin/end ts, begin/end phy, slot count, index count
_INDEX_ENTRY = struct.Struct(">iqii")        # keyHash, phyOffset, timeDiff, prevIndex


def index_key_hash(topic, key):
    """docs/format.md §6.2: ``abs(javaHashCode(topic + "#" + key))``, 0 for ``Integer.MIN_VALUE``
    (Java's ``Math.abs`` leaves it negative)."""
    h = abs(java_hash(f"{topic}#{key}"))
    return 0 if h > 0x7FFFFFFF else h


def index_file_size(hash_slot_num, index_num):
    """docs/format.md §6.1: 40 + slots x 4 + indexNum x 20."""
    return INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def read_index_file(path_or_bytes, hash_slot_num, index_num):
    """Read one index file (a path or its bytes) -> dict.

    ``header``: the six header fields under RocketMQ's names (``beginTimestamp``,
    ``endTimestamp``, ``beginPhyOffset``, ``endPhyOffset``, ``hashSlotCount``, ``indexCount``),
    exactly as stored; ``index_count``: the stored count with load's rule (<= 0 -> 1);
    ``slots``: the slot table (list of ints); ``entries``: entry dicts ``number``, ``key_hash``,
    ``phy_offset``, ``time_diff``, ``prev`` for numbers 1 .. index_count - 1; ``slot_num`` and
    ``index_num``; ``size``: the file's length. Raises ValueError when the length is not
    ``index_file_size(hash_slot_num, index_num)``.
    """
    want = index_file_size(hash_slot_num, index_num)
    base = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        size = len(data)
    else:
        # read the header, the slots and the used entries only (a default file is 420 MB)
        size = os.path.getsize(path_or_bytes)
        with open(path_or_bytes, "rb") as f:
            data = f.read(INDEX_HEADER_SIZE)
            if len(data) == INDEX_HEADER_SIZE and size == want:
                count = _INDEX_HEADER.unpack_from(data, 0)[5]
                used = min(max(count, 1), index_num - 1) + 1    # entries 0 .. indexCount
                data += f.read(base - INDEX_HEADER_SIZE + used * INDEX_ENTRY_SIZE)
    if size != want:
        raise ValueError(f"index file of {size} bytes, expected {want} "
                         f"({hash_slot_num} slots x {index_num} entries)")
    bt, et, bp, ep, slot_count, count = _INDEX_HEADER.unpack_from(data, 0)
    header = {"beginTimestamp": bt, "endTimestamp": et, "beginPhyOffset": bp,
              "endPhyOffset": ep, "hashSlotCount": slot_count, "indexCount": count}
    index_count = count if count > 0 else 1
    if index_count > index_num:
        raise ValueError(f"indexCount {count} exceeds index_num {index_num}")
    slots = list(struct.unpack_from(f">{hash_slot_num}i", data, INDEX_HEADER_SIZE))
    entries = []
    for n in range(1, index_count):
        kh, phy, diff, prev = _INDEX_ENTRY.unpack_from(data, base + n * INDEX_ENTRY_SIZE)
        entries.append({"number": n, "key_hash": kh, "phy_offset": phy, "time_diff": diff,
                        "prev": prev})
    return {"header": header, "index_count": index_count, "slots": slots, "entries": entries,
            "slot_num": hash_slot_num, "index_num": index_num, "size": size,
            "_data": data}


def read_index_dir(index_dir, hash_slot_num, index_num):
    """Every index file of a directory (17-digit names, name order) -> list of
    ``(name, read_index_file(...))``."""
    names = sorted(n for n in os.listdir(index_dir) if len(n) == 17 and n.isdigit())
    return [(n, read_index_file(os.path.join(index_dir, n), hash_slot_num, index_num))
            for n in names]


def _entry(index, number):
    data = index["_data"]
    base = INDEX_HEADER_SIZE + index["slot_num"] * INDEX_SLOT_SIZE
    kh, phy, diff, prev = _INDEX_ENTRY.unpack_from(data, base + number * INDEX_ENTRY_SIZE)
    return {"number": number, "key_hash": kh, "phy_offset": phy, "time_diff": diff,
            "prev": prev}


def index_chain(index, slot):
    """Entry numbers of a slot's chain, newest first, following ``prevIndex`` from the slot
    head with selectPhyOffset's stop rules (invalid head, prev <= 0, > indexCount, == current)
    but no key or time filter."""
    count = index["index_count"]
    nxt = index["slots"][slot]
    out = []
    if nxt <= 0 or nxt > count or count <= 1:
        return out
    while True:
        out.append(nxt)
        prev = _entry(index, nxt)["prev"]
        if prev <= 0 or prev > count or prev == nxt:
            return out
        nxt = prev


def index_time_read(index, entry):
    """The store time the index holds for an entry: beginTimestamp + timeDiff x 1000 (whole
    seconds after the file's begin time, docs/format.md §6.4)."""
    return index["header"]["beginTimestamp"] + entry["time_diff"] * 1000


def index_select_phy_offsets(index, key_hash, max_num, begin, end, out=None):
    """docs/format.md §6.4 ``selectPhyOffset``: walk the slot chain of ``key_hash`` from its head;
    append the offsets of entries with an equal hash and ``begin <= timeRead <= end`` to
    ``out`` (returned) while it holds fewer than ``max_num``."""
    out = [] if out is None else out
    count = index["index_count"]
    nxt = index["slots"][key_hash % index["slot_num"]]
    if nxt <= 0 or nxt > count or count <= 1:
        return out
    while True:
        if len(out) >= max_num:
            break
        e = _entry(index, nxt)
        if e["time_diff"] < 0:
            break
        t = index_time_read(index, e)
        if e["key_hash"] == key_hash and begin <= t <= end:
            out.append(e["phy_offset"])
        prev = e["prev"]
        if prev <= 0 or prev > count or prev == nxt or t < begin:
            break
        nxt = prev
    return out


def _index_time_matched(header, begin, end):
    b, e = header["beginTimestamp"], header["endTimestamp"]
    return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)


def index_query_offsets(indexes, topic, key, max_num, begin, end, max_msgs_num_batch=64):
    """docs/format.md §6.4 ``IndexService.queryOffset`` over ``indexes`` (``read_index_file``
    results, oldest first): files newest first, hash matches only, unverified and unsorted."""
    max_num = min(max_num, max_msgs_num_batch)
    h = index_key_hash(topic, key)
    out = []
    for index in reversed(indexes):
        hdr = index["header"]
        if _index_time_matched(hdr, begin, end):
            index_select_phy_offsets(index, h, max_num, begin, end, out)
        if hdr["beginTimestamp"] < begin or len(out) >= max_num:
            break
    return out


def _nonzero_slots(index):
    """Numbers of the slots holding a non-zero value (a C-speed scan of the slot bytes: a
    default file has 5 M slots)."""
    region = index["_data"][INDEX_HEADER_SIZE:INDEX_HEADER_SIZE + index["slot_num"] * INDEX_SLOT_SIZE]
    return sorted({m.start() // INDEX_SLOT_SIZE for m in re.finditer(rb"[^\x00]", region)})


def check_index_file(index):
    """Structural checks of one index file; returns a list of problems (empty when sound).

    * every slot head is 0 or a valid entry number whose hash maps to that slot;
    * the slot chains partition the entries 1 .. indexCount-1: each entry is on exactly the
      chain of slot ``key_hash % slots``, and its ``prev`` is the previous entry (largest
      smaller number) of the same slot, 0 for the first;
    * ``hashSlotCount`` equals the number of non-empty slots;
    * key hashes are non-negative and time diffs are >= 0;
    * with entries, ``beginPhyOffset``/``endPhyOffset`` are the first/last entry's offsets.
    """
    problems = []
    slots_n = index["slot_num"]
    entries = index["entries"]
    last_in_slot = {}
    for e in entries:
        n = e["number"]
        if e["key_hash"] < 0:
            problems.append(f"entry {n}: negative key hash {e['key_hash']}")
        if e["time_diff"] < 0:
            problems.append(f"entry {n}: negative time diff {e['time_diff']}")
        slot = e["key_hash"] % slots_n
        want_prev = last_in_slot.get(slot, 0)
        if e["prev"] != want_prev:
            problems.append(f"entry {n} (slot {slot}): prev {e['prev']}, expected {want_prev}")
        last_in_slot[slot] = n
    nonempty = _nonzero_slots(index)
    for slot in sorted(set(nonempty) | set(last_in_slot)):
        head = index["slots"][slot]
        if head != last_in_slot.get(slot, 0):
            problems.append(f"slot {slot}: head {head}, expected {last_in_slot.get(slot, 0)}")
    seen = {}
    for slot in nonempty:
        for n in index_chain(index, slot):
            if n in seen:
                problems.append(f"entry {n} on the chains of slots {seen[n]} and {slot}")
            seen[n] = slot
    if len(seen) != len(entries):
        problems.append(f"chains reach {len(seen)} of {len(entries)} entries")
    if index["header"]["hashSlotCount"] != len(nonempty):
        problems.append(f"hashSlotCount {index['header']['hashSlotCount']}, "
                        f"{len(nonempty)} slots non-empty")
    if entries:
        if index["header"]["beginPhyOffset"] != entries[0]["phy_offset"]:
            problems.append(f"beginPhyOffset {index['header']['beginPhyOffset']} but entry 1 "
                            f"is at {entries[0]['phy_offset']}")
        if index["header"]["endPhyOffset"] != entries[-1]["phy_offset"]:
            problems.append(f"endPhyOffset {index['header']['endPhyOffset']} but the last "
                            f"entry is at {entries[-1]['phy_offset']}")
    return problems


def index_keys_of_record(rec):
    """The index keys of a decoded ``"msg"`` record in dispatch order (docs/format.md §6.3):
    UNIQ_KEY (if present), then every non-empty token of ``KEYS.split(" ")``; none for a
    ROLLBACK record (sys_flag & 0xC == 0xC)."""
    if rec["sys_flag"] & 0xC == 0xC:
        return []
    props = rec["properties"]
    keys = []
    if props.get("UNIQ_KEY"):
        keys.append(props["UNIQ_KEY"])
    keys.extend(k for k in props.get("KEYS", "").split(" ") if k)
    return keys
