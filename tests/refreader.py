"""Pure-Python reference reader of the RocketMQ commit-log format: the FORMAT.md oracle.

Written from /work/shared/FORMAT.md (sections 1, 2, 3 and 7) with ``struct`` and the standard
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
import struct
import zlib

__all__ = [
    "BLANK_MAGIC", "MAGIC_V1", "MAGIC_V2", "END_FILE_MIN_BLANK_LENGTH",
    "BORNHOST_V6_FLAG", "STOREHOST_V6_FLAG",
    "java_hash", "parse_properties", "encode_properties", "body_crc", "record_size",
    "format_host", "parse_host", "offset_msg_id",
    "decode_record", "encode_record", "iter_commitlog",
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
    """BODYCRC (FORMAT.md 1.2): CRC-32 (IEEE) of the body as stored, ``& 0x7FFFFFFF``."""
    return zlib.crc32(bytes(body)) & 0x7FFFFFFF


def record_size(body_len, topic_len, props_len, born_v6=False, store_v6=False, v2=False):
    """TOTALSIZE per ``MessageExtEncoder.calMsgLength`` (91 + B + T + P for v1 / IPv4 hosts)."""
    born_len = 20 if born_v6 else 8
    store_len = 20 if store_v6 else 8
    topic_len_size = 2 if v2 else 1
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
            + born_len + 8 + store_len + 4 + 8
            + 4 + body_len + topic_len_size + topic_len + 2 + props_len)


def parse_properties(raw):
    """Properties bytes -> dict, as ``MessageDecoder.string2messageProperties`` (FORMAT.md 1.4).

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
    5.2.0+ and 4.9.0 and older keep it (the default here, and what FORMAT.md 1.4 describes).
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
    """Offset message id (FORMAT.md 7): uppercase hex of ip + int port + long offset.

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
