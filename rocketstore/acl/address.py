"""White remote address patterns of plain ACL (RocketMQ's ``RemoteAddressStrategyFactory``).

A pattern is one of:

* empty: matches nothing;
* ``*`` (or ``*.*.*.*``, ``*:*:*:*:*:*:*:*``): matches every address;
* one address, ``192.168.0.1`` or ``::1``: that address (IPv6 compared in full form);
* a set, ``192.168.1.{1,2,3}`` or ``192.168.1.1,192.168.1.7``: any of those addresses;
* a range, ``192.168.0.*``, ``192.168.1.1-100``, ``10.10.*.*`` (IPv6: ``1050:0:0:0:5:600:300c:1-200``):
  the fields before the first ``*`` or ``a-b`` field are fixed, that field lies in the range
  (``*`` is 0-255, or 0-ffff in IPv6) and later fields are free.

A pattern that is none of these raises ``AclConfigError`` when the file is read, as RocketMQ
refuses the file.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable

from rocketstore.errors import AclConfigError

Matcher = Callable[[str], bool]

_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def host_of(remote: str) -> str:
    """The host part of a ``host:port`` peer (everything before the last colon)."""
    host, sep, _ = remote.rpartition(":")
    return host.strip("[]") if sep else remote


def _ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
        return True
    except ValueError:
        return False


def _ipv6(text: str) -> str | None:
    """The exploded (full, lower-case) form of an IPv6 address, or None."""
    try:
        return ipaddress.IPv6Address(text).exploded
    except ValueError:
        return None


def _canonical(addr: str) -> str | None:
    if _ipv4(addr):
        return addr
    return _ipv6(addr)


def compile_pattern(pattern: object, where: str = "plain_acl.yml",
                    field: str = "whiteRemoteAddress") -> Matcher:
    """A predicate on a host address for one white remote address pattern."""
    text = "" if pattern is None else str(pattern).strip()
    if not text:
        return lambda host: False
    if text in _ALL:
        return lambda host: True

    def bad(reason: str) -> AclConfigError:
        return AclConfigError(where, field, pattern, reason)

    if text.endswith("}"):
        head, brace, items = text.rpartition("{")
        if not brace or (":" not in head and "." not in head):
            raise bad("a set is written like 192.168.1.{1,2}")
        return _set([head + item.strip() for item in items[:-1].split(",") if item.strip()], bad)
    if "," in text:
        return _set([a.strip() for a in text.split(",") if a.strip()], bad)
    if "*" in text or "-" in text:
        return _range6(text, bad) if ":" in text else _range4(text, bad)
    one = _canonical(text)
    if one is None:
        raise bad("not an IPv4 or IPv6 address")
    return lambda host: _canonical(host) == one


def _set(addrs: list[str], bad: Callable[[str], AclConfigError]) -> Matcher:
    wanted = set()
    for a in addrs:
        c = _canonical(a)
        if c is None:
            raise bad(f"{a!r} is not an IPv4 or IPv6 address")
        wanted.add(c)
    frozen = frozenset(wanted)
    return lambda host: _canonical(host) in frozen


def _field_range(value: str, top: int, base: int, bad: Callable[[str], AclConfigError]
                 ) -> tuple[int, int] | None:
    """(start, end) of a ``*`` or ``a-b`` field, None for a plain field."""
    if value == "*":
        return 0, top
    if "-" in value:
        lo, sep, hi = value.partition("-")
        try:
            start, end = int(lo, base), int(hi, base)
        except ValueError:
            raise bad(f"range {value!r} is not two numbers") from None
        if not (sep and 0 <= start <= end <= top):
            raise bad(f"range {value!r} is not within 0-{top:x}" if base == 16 else
                      f"range {value!r} is not within 0-{top}")
        return start, end
    return None


def _range4(text: str, bad: Callable[[str], AclConfigError]) -> Matcher:
    parts = [p.strip() for p in text.split(".")]
    if len(parts) != 4:
        raise bad("an IPv4 range has four fields, like 192.168.0.* or 192.168.1.1-100")
    for index in (1, 2, 3):
        rng = _field_range(parts[index], 255, 10, bad)
        if rng is None:
            continue
        fixed = parts[:index]
        if not all(p.isdigit() and 0 <= int(p) <= 255 for p in fixed):
            raise bad("the fields before the range must be numbers 0-255")
        head = [int(p) for p in fixed]
        start, end = rng

        def match(host: str, head: list[int] = head, index: int = index) -> bool:
            if not _ipv4(host):
                return False
            fields = [int(f) for f in host.split(".")]
            return fields[:index] == head and start <= fields[index] <= end
        return match
    raise bad("the first field cannot be a range (use * for every address)")


def _range6(text: str, bad: Callable[[str], AclConfigError]) -> Matcher:
    parts = text.split(":")
    for index, value in enumerate(parts):
        rng = _field_range(value.strip(), 0xFFFF, 16, bad)
        if rng is None:
            continue
        # the fixed prefix, "::" expanded so the range field is group number len(prefix)
        rest = len(parts) - index
        prefix_text = ":".join(parts[:index])
        if "::" in prefix_text:
            left, _, right = prefix_text.partition("::")
            lg = [g for g in left.split(":") if g]
            rg = [g for g in right.split(":") if g]
            groups = lg + ["0"] * (8 - rest - len(lg) - len(rg)) + rg
        else:
            groups = [g for g in parts[:index]]
        try:
            head = [int(g, 16) for g in groups]
        except ValueError:
            raise bad("the groups before the range must be hex numbers") from None
        if len(head) + rest > 8 or not head or any(not 0 <= g <= 0xFFFF for g in head):
            raise bad("not an IPv6 range")
        start, end = rng
        n = len(head)

        def match(host: str) -> bool:
            full = _ipv6(host)
            if full is None:
                return False
            fields = [int(g, 16) for g in full.split(":")]
            return fields[:n] == head and start <= fields[n] <= end
        return match
    raise bad("not an IPv6 range")
