"""What a topic or group name may hold, checked where a name enters the store.

A name is written into JSON metadata and used as a directory name; one that cannot be
encoded (a lone surrogate from a bad decode) or that holds a control character would fail
later, far from the call that brought it in -- in a persist thread, or at the next open.
"""
from __future__ import annotations

import re

from rocketstore.errors import InvalidNameError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: names that passed (bounded: applications use few), so a check on every pull's offset
#: commit is one set lookup, as rocketstore.common.names does for the wire's names
_ok: set[str] = set()
_OK_MAX = 65536


def check_name(field: str, value: object) -> str:
    """``value`` if it is a storable name, else ``InvalidNameError`` (``TypeError`` for a
    non-str, ``InvalidNameError`` for an empty one)."""
    if type(value) is str and value in _ok:
        return value
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidNameError(field, value, "must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidNameError(field, value, f"not valid UTF-8 text ({e.reason} at "
                                             f"{e.start})") from None
    m = _CONTROL.search(value)
    if m:
        raise InvalidNameError(field, value, f"holds the control character {m.group()!r} "
                                             f"at {m.start()}")
    if len(_ok) < _OK_MAX:
        _ok.add(value)
    return value
