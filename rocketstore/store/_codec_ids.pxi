# Included by _codec.pyx (one extension module: every call below stays a C call).
# Hosts and message ids, and the properties string (name\x01value\x02 ...).

# -- hosts and ids -----------------------------------------------------------------------------

cdef dict _host_cache = {}

cpdef bytes encode_host(str host):
    """'a.b.c.d:port', '[v6]:port' (or Java's 'x:x:...:x:port') -> address bytes + int port."""
    cdef bytes out = _host_cache.get(host)
    if out is not None:
        return out
    addr, sep, port_s = host.rpartition(":")
    if not sep or not addr:
        raise InvalidMessageError("host", host, "expected 'ip:port'")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:len(addr) - 1]
    try:
        port = int(port_s)
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise InvalidMessageError("host", host, "expected 'ip:port' with a numeric IP address")
    if not 0 <= port <= 65535:
        # the record holds 4 bytes, but RocketMQ's decoder (InetSocketAddress) refuses more
        raise InvalidMessageError("host", host, "port outside [0, 65535]", limit=65535)
    out = ip.packed + port.to_bytes(4, "big")
    if len(_host_cache) < 4096:
        _host_cache[host] = out
    return out


cdef str decode_host(const char *p, int n):
    cdef const uint8_t *u = <const uint8_t *>p
    cdef uint32_t port = get_u32(p + n - 4)
    if n == RS_HOST_V4_LEN:
        return f"{u[0]}.{u[1]}.{u[2]}.{u[3]}:{port}"
    return f"[{ipaddress.IPv6Address(p[:16]).compressed}]:{port}"


cpdef str format_msg_id(bytes host_bytes, int64_t phy_offset):
    """Offset message id: store host address + port + commit-log offset, uppercase hex."""
    # written in place: every send's result carries one (no joined bytes, hex, upper copies)
    cdef char buf[64]
    cdef Py_ssize_t n = PyBytes_GET_SIZE(host_bytes), i
    cdef const uint8_t *h = <const uint8_t *>PyBytes_AS_STRING(host_bytes)
    cdef uint64_t off = <uint64_t>phy_offset
    if n > 24:
        raise InvalidMessageError("host", repr(host_bytes), "expected 8 or 20 address bytes")
    for i in range(n):
        buf[2 * i] = HEX[h[i] >> 4]
        buf[2 * i + 1] = HEX[h[i] & 15]
    for i in range(16):
        buf[2 * n + 15 - i] = HEX[off & 15]
        off >>= 4
    return PyUnicode_DecodeASCII(buf, 2 * n + 16, NULL)


_HEX_DIGITS = "0123456789abcdefABCDEF"


def decode_msg_id(msg_id):
    """Inverse of the offset message id: (store host 'ip:port', commit-log offset)."""
    if not isinstance(msg_id, str):
        raise InvalidMessageIdError(msg_id, "expected a str")
    n = len(msg_id)
    if n != 2 * RS_MSGID_V4_BYTES and n != 2 * RS_MSGID_V6_BYTES:
        raise InvalidMessageIdError(msg_id, f"expected 32 (IPv4) or 56 (IPv6) hex characters, got {n}")
    # bytes.fromhex skips whitespace: check every character, so the length is the byte count
    if not msg_id.isascii() or msg_id.strip(_HEX_DIGITS):
        raise InvalidMessageIdError(msg_id, "not hexadecimal")
    raw = bytes.fromhex(msg_id)
    hl = len(raw) - 8
    cdef bytes hb = raw[:hl]
    return decode_host(hb, hl), int.from_bytes(raw[hl:], "big", signed=True)


# -- properties --------------------------------------------------------------------------------

def parse_properties(raw):
    """docs/format.md §1.4: split on \\x02; keep 'name\\x01value' with both sides non-empty."""
    cdef dict out = {}
    cdef bytes data = bytes(raw)
    for seg in data.split(b"\x02"):
        i = seg.find(b"\x01")
        if len(seg) >= 3 and 0 < i < len(seg) - 1:
            out[seg[:i].decode("utf-8", "replace")] = seg[i + 1:].decode("utf-8", "replace")
    return out


cdef bytes _encode_properties(dict props):
    parts = []
    for k, v in props.items():
        parts.append(k)
        parts.append("\x01")
        parts.append(v)
        parts.append("\x02")
    return "".join(parts).encode("utf-8")


def encode_properties(dict props):
    """name \\x01 value \\x02 for each entry, UTF-8 (MessageDecoder.messageProperties2String)."""
    return _encode_properties(props)
