"""fastjson's dialect: what a Java RocketMQ peer writes that standard JSON parsers refuse.

fastjson writes maps with integer keys unquoted (``{0:"10.0.0.1:10911"}``) and maps keyed by
objects with the object itself as the key (``{{"brokerName":"b","queueId":0,"topic":"t"}:5}``)
(docs/protocol.md §4). ``loads`` reads standard JSON with the C parser and falls back to a small
recursive-descent parser for the rest: integer keys become ``int``, object keys become a
``tuple`` of the object's ``(key, value)`` pairs in sorted order (hashable; ``mq_key`` turns a
MessageQueue's into ``(topic, brokerName, queueId)``). ``dumps_int_keys`` writes the unquoted
integer-key form for peers that expect Java's exact output.
"""
from __future__ import annotations

import json
import re
from typing import Any

from rocketstore.errors import RemotingProtocolError

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_decoder = json.JSONDecoder()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    f = float(text)
    if f - f != 0.0:                 # inf or nan: 1e400 and the like
        raise ValueError(f"number {text[:32]} is out of range")
    return f


_strict = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def strict_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Standard JSON without NaN/Infinity and out-of-range numbers (remoting headers: no
    fastjson forms); every malformed input (bad UTF-8, nesting deeper than the interpreter's
    recursion limit) raises ``RemotingProtocolError`` naming what was wrong."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        return _strict.decode(text)
    except RecursionError:
        raise RemotingProtocolError("JSON nested too deeply") from None
    except ValueError as e:          # JSONDecodeError, UnicodeDecodeError, the hooks above
        raise RemotingProtocolError(f"not JSON: {str(e)[:200]}") from None


def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """Parse JSON or fastjson's non-standard forms. Anything else (bad UTF-8, NaN, Infinity,
    numbers past a double, nesting deeper than the recursion limit) raises
    ``RemotingProtocolError`` naming what was wrong."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RemotingProtocolError(f"not JSON: {e}") from None
    try:
        return _strict.decode(text)
    except RecursionError:
        raise RemotingProtocolError("not JSON: nested too deeply") from None
    except ValueError:
        pass
    p = _Parser(text)
    try:
        value = p.value()
    except RecursionError:
        raise RemotingProtocolError("not JSON: nested too deeply") from None
    p.ws()
    if p.i != len(text):
        p.fail("trailing characters")
    return value


class _Parser:
    __slots__ = ("s", "i")

    def __init__(self, s: str) -> None:
        self.s = s
        self.i = 0

    def fail(self, what: str) -> None:
        raise RemotingProtocolError(f"not JSON at character {self.i}: {what}")

    def ws(self) -> None:
        self.i = _WS.match(self.s, self.i).end()    # type: ignore[union-attr]

    def value(self) -> Any:
        self.ws()
        if self.i >= len(self.s):
            self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            v, self.i = _decoder.raw_decode(self.s, self.i)
            return v
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            t = m.group(0)
            if not (m.group(1) or m.group(2)):
                try:
                    return int(t)
                except ValueError:              # past int's digit limit
                    self.fail("number too long")
            f = float(t)
            if f - f != 0.0:
                self.fail(f"number {t[:32]} is out of range")
            return f
        for word, v in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return v
        self.fail(f"unexpected {c!r}")

    def key(self) -> Any:
        k = self.value()
        if isinstance(k, dict):
            return tuple(sorted(k.items()))
        if isinstance(k, list):
            return tuple(k)
        return k

    def obj(self) -> dict[Any, Any]:
        self.i += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            k = self.key()
            self.ws()
            if not self.s.startswith(":", self.i):
                self.fail("expected ':'")
            self.i += 1
            out[k] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            self.fail("expected ',' or '}'")
        return out      # pragma: no cover

    def arr(self) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            self.fail("expected ',' or ']'")
        return out      # pragma: no cover


def mq_key(key: Any) -> tuple[str, str, int]:
    """A MessageQueue map key as parsed by ``loads`` -> (topic, brokerName, queueId)."""
    d = dict(key)
    return str(d["topic"]), str(d["brokerName"]), int(d["queueId"])


def dumps(obj: Any) -> str:
    """Compact standard JSON (what every RocketMQ peer reads)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def dumps_int_keys(obj: Any) -> str:
    """Like ``dumps`` but with integer map keys unquoted, as plain fastjson writes them."""
    if isinstance(obj, dict):
        parts = []
        for k, v in obj.items():
            ks = str(k) if isinstance(k, int) and not isinstance(k, bool) else dumps(str(k))
            parts.append(f"{ks}:{dumps_int_keys(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(dumps_int_keys(v) for v in obj) + "]"
    return dumps(obj)
