"""Argument checks the store's public calls share: Java long ranges and timeouts."""
from __future__ import annotations

from typing import Any

from rocketstore.errors import InvalidArgumentError, InvalidArgumentTypeError

MAX_TIMEOUT_MS = 10**12        # ~31 years: longer is a mistake, not a wait


def _java_long(name: str, value: Any) -> int:
    """``value`` when it is an int that fits a Java long (what offsets and times are on
    disk), else the rocketstore error naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", type(value).__name__)
    if not -(1 << 63) <= value < (1 << 63):
        raise InvalidArgumentError(name, value, "outside the 64-bit signed range (a Java long)")
    return value


def _check_timeout(timeout_ms: Any) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
        raise InvalidArgumentTypeError("timeout_ms", "int or float (ms)", type(timeout_ms).__name__)
    if not 0 <= timeout_ms <= MAX_TIMEOUT_MS:       # NaN fails both comparisons
        raise InvalidArgumentError("timeout_ms", timeout_ms,
                                   f"must be a number of ms in [0, {MAX_TIMEOUT_MS}]")

