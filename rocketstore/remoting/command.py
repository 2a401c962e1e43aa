"""``RemotingCommand`` and its frame: RocketMQ's TCP wire unit (docs/protocol.md §1).

A frame is ``int length`` (bytes that follow), ``int headerLengthAndType`` (serialize type in
the high byte, header length in the low three), the header, the body. The header is JSON
(type 0) or RocketMQ's binary layout (type 1); both decode here, and every command is encoded
as JSON because the C++ client reads nothing else. Header values in ``extFields`` are always
emitted as JSON strings (the C++ client ignores non-string values) and accepted as strings or
numbers (the C++ client sends ints as numbers).

JSON goes through CPython's C-accelerated ``json`` module: headers are a few hundred bytes and
the module parses them in a few microseconds, well under the cost of the request they carry.
"""
from __future__ import annotations

import json
import struct
from typing import Any

from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting._wire import encode_header, json_header, split_frames
from rocketstore.common.codes import CURRENT_VERSION, LanguageCode
from rocketstore.remoting.fastjson import strict_json

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
# Netty's frame limit in RocketMQ (com.rocketmq.remoting.frameMaxLength), the length word included
MAX_FRAME = 16 * 1024 * 1024
# a header number outside Java's long is refused (Long.parseLong would throw)
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
# rocketstore's own limits (RocketMQ has none below the frame): a header is a few hundred bytes
# (a send's properties at most 32 KiB, JSON-escaped), so larger ones are refused from the
# length word alone, before they are buffered or parsed (docs/protocol.md "Limits")
MAX_HEADER = 256 * 1024
MAX_EXT_FIELDS = 1024

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhiii")     # code, language, version, opaque, flag, remark length
_LANGUAGE_NAMES = {lc.name: lc for lc in LanguageCode}
_LANGUAGE_BYTES = {int(lc): lc for lc in LanguageCode}
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _text(v: Any) -> str:
    # Java's String.valueOf for what a custom header field holds
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class RemotingCommand:
    """One request or response. ``ext_fields`` maps header field names to their text."""

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body",
                 "serialize_type")

    def __init__(self, code: int, *, opaque: int = 0, flag: int = 0, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: bytes | memoryview | None = None,
                 language: LanguageCode | int = LanguageCode.JAVA,
                 version: int = CURRENT_VERSION) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields if ext_fields is not None else {}
        self.body = body if body is not None else b""
        self.language = language
        self.version = version
        self.serialize_type = SERIALIZE_JSON

    # -- construction helpers ---------------------------------------------------------------
    @classmethod
    def request(cls, code: int, ext_fields: dict[str, Any] | None = None,
                body: bytes | None = None, *, oneway: bool = False) -> "RemotingCommand":
        """A request; values of ``ext_fields`` are turned into their Java text."""
        ext = {k: _text(v) for k, v in ext_fields.items() if v is not None} if ext_fields else {}
        return cls(code, flag=FLAG_ONEWAY if oneway else 0, ext_fields=ext, body=body)

    def response(self, code: int, remark: str | None = None,
                 ext_fields: dict[str, Any] | None = None,
                 body: bytes | memoryview | None = None) -> "RemotingCommand":
        """The response to this request (same opaque, RESPONSE flag)."""
        ext = {k: _text(v) for k, v in ext_fields.items() if v is not None} if ext_fields else {}
        return RemotingCommand(code, opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark,
                               ext_fields=ext, body=body)

    @property
    def is_response(self) -> bool:
        # bit 0 only: the C++ client answers server requests with flag 3 (response + oneway)
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY) and not self.flag & FLAG_RESPONSE

    # -- header field access with Java's parsing rules ----------------------------------------
    def field(self, name: str, default: str | None = None) -> str | None:
        v = self.ext_fields.get(name)
        return default if v is None else v

    def require(self, name: str) -> str:
        """A ``@CFNotNull`` field: absent is a bad request (Java: "the custom field x is null")."""
        v = self.ext_fields.get(name)
        if v is None:
            raise RemotingProtocolError(f"the custom field <{name}> is null")
        return v

    def int_field(self, name: str, default: int = 0, *, required: bool = False) -> int:
        """An int/long field; like Java, a value that does not parse keeps the default. A
        number outside Java's long range is a bad request (RemotingProtocolError)."""
        v = self.require(name) if required else self.ext_fields.get(name)
        if v is None or v == "":
            return default
        try:
            n = int(v)
        except ValueError:
            return default
        if not LONG_MIN <= n <= LONG_MAX:
            raise RemotingProtocolError(f"the custom field <{name}> is outside Java's long range")
        return n

    def bool_field(self, name: str, default: bool = False) -> bool:
        """Java's ``Boolean.parseBoolean``: true only for "true" in any case ("1" is false, as
        a Java broker reads the C++ client's "0"/"1")."""
        v = self.ext_fields.get(name)
        if v is None:
            return default
        return v.lower() == "true"

    # -- encoding -----------------------------------------------------------------------------
    def header_json(self) -> bytes:
        lang = self.language
        name = lang.name if isinstance(lang, LanguageCode) else LanguageCode(lang).name
        # written in C when every header field is text (as request/response make them)
        encoded = encode_header(int(self.code), self.ext_fields, self.flag, name, self.opaque,
                                self.version, self.remark)
        if encoded is not None:
            return encoded
        header: dict[str, Any] = {
            "code": int(self.code),
            "extFields": self.ext_fields,
            "flag": self.flag,
            "language": name,
            "opaque": self.opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": self.version,
        }
        if self.remark is not None:
            header["remark"] = self.remark
        return _dumps(header).encode()

    def encode_parts(self) -> tuple[bytes, bytes, bytes | memoryview]:
        """Prefix, header and body, for ``transport.writelines`` (no copy of a large body)."""
        header = self.header_json()
        body = self.body
        return _PREFIX.pack(4 + len(header) + len(body), len(header)), header, body

    def encode(self) -> bytes:
        """The whole frame as bytes."""
        prefix, header, body = self.encode_parts()
        return b"".join((prefix, header, body))

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (f"RemotingCommand({kind} code={self.code} opaque={self.opaque} "
                f"remark={self.remark!r} ext={self.ext_fields} body={len(self.body)} B)")


class EncodedResponse:
    """A response whose JSON header is already encoded: what a hot path answers with
    (``headers.encode_send_response``) instead of a ``RemotingCommand`` whose header would
    be built as a dict and serialized per request. Only ``encode_parts``/``encode`` and the
    fields a connection reads are there."""

    __slots__ = ("code", "opaque", "header", "body")
    flag = FLAG_RESPONSE
    is_response = True
    is_oneway = False

    def __init__(self, code: int, opaque: int, header: bytes, body: bytes = b"") -> None:
        self.code = code
        self.opaque = opaque
        self.header = header
        self.body = body

    def encode_parts(self) -> tuple[bytes, bytes, bytes | memoryview]:
        header = self.header
        return _PREFIX.pack(4 + len(header) + len(self.body), len(header)), header, self.body

    def encode(self) -> bytes:
        return b"".join(self.encode_parts())

    def __repr__(self) -> str:
        return f"EncodedResponse(code={self.code} opaque={self.opaque} {self.header[:80]!r})"


# -- decoding -------------------------------------------------------------------------------

def decode_frame(frame: bytes | bytearray | memoryview, *,
                 max_ext_fields: int = MAX_EXT_FIELDS) -> RemotingCommand:
    """Decode one frame without its leading length word."""
    n = len(frame)
    if n < 4:
        raise RemotingProtocolError(f"frame of {n} bytes has no header length")
    (word,) = _I32.unpack_from(frame, 0)
    stype = (word >> 24) & 0xFF
    hlen = word & 0xFFFFFF
    if hlen > n - 4:
        raise RemotingProtocolError(f"header length {hlen} is past the frame's {n - 4} bytes")
    if stype == SERIALIZE_JSON:
        # the common shape read in place (rocketstore.remoting._wire); None: the strict reader
        fast = json_header(frame[4:4 + hlen])
        if fast is not None:
            code, opaque, flag, version, lang, remark, ext = fast
            if len(ext) > max_ext_fields:
                raise RemotingProtocolError(f"header has {len(ext)} extFields, more than "
                                            f"{max_ext_fields}")
            cmd = RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                                  language=LanguageCode.JAVA if lang is None
                                  else _LANGUAGE_NAMES.get(lang, LanguageCode.OTHER),
                                  version=version, body=bytes(frame[4 + hlen:]))
            return cmd
    header = bytes(frame[4:4 + hlen])
    body = bytes(frame[4 + hlen:])
    try:
        if stype == SERIALIZE_JSON:
            cmd = _decode_json_header(header)
        elif stype == SERIALIZE_ROCKETMQ:
            cmd = _decode_binary_header(header, max_ext_fields)
        else:
            raise RemotingProtocolError(f"unknown serialize type {stype}")
    except RemotingProtocolError:
        raise
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError, struct.error) as e:
        # whatever a hostile header trips is a malformed frame: one line, never a traceback
        raise RemotingProtocolError(f"malformed header: {type(e).__name__}: {str(e)[:200]}") from None
    if len(cmd.ext_fields) > max_ext_fields:
        raise RemotingProtocolError(f"header has {len(cmd.ext_fields)} extFields, more than "
                                    f"{max_ext_fields}")
    cmd.body = body
    return cmd


def _int32(d: dict[str, Any], name: str, default: int | None = 0) -> int:
    v = d.get(name, default)
    if v is None:
        raise RemotingProtocolError(f"header field {name} missing")
    if isinstance(v, str):
        try:
            v = int(v)
        except ValueError:
            raise RemotingProtocolError(f"header field {name} is not a number") from None
    elif type(v) is not int:
        raise RemotingProtocolError(f"header field {name} is a {type(v).__name__}, not a number")
    if not _INT32_MIN <= v <= _INT32_MAX:
        raise RemotingProtocolError(f"header field {name} is outside Java's int range")
    return v


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        d = strict_json(header)
    except RemotingProtocolError as e:
        raise RemotingProtocolError(f"header is {e}") from None
    if not isinstance(d, dict):
        raise RemotingProtocolError("header is not a JSON object")
    code = _int32(d, "code", None)
    opaque = _int32(d, "opaque")
    flag = _int32(d, "flag")
    version = _int32(d, "version")
    remark = d.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = str(remark)
    ext = d.get("extFields")
    if ext is None:
        ext = {}
    elif not isinstance(ext, dict):
        raise RemotingProtocolError("extFields is not a JSON object")
    else:
        # the C++ client sends ints as JSON numbers: keep their decimal text, as fastjson does
        for k, v in ext.items():
            if type(v) is not str:
                if isinstance(v, (dict, list)):
                    raise RemotingProtocolError(f"extFields value of {k[:64]!r} is not text")
                ext[k] = None if v is None else _text(v)
    lang = d.get("language", "JAVA")
    if isinstance(lang, str):
        language: LanguageCode | int = _LANGUAGE_NAMES.get(lang, LanguageCode.OTHER)
    elif isinstance(lang, int):
        language = _LANGUAGE_BYTES.get(lang, LanguageCode.OTHER)
    else:
        language = LanguageCode.OTHER
    cmd = RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                          language=language, version=version)
    return cmd


def _decode_binary_header(h: bytes, max_ext_fields: int = MAX_EXT_FIELDS) -> RemotingCommand:
    n = len(h)
    if n < _BIN_FIXED.size + 4:
        raise RemotingProtocolError(f"binary header of {n} bytes is too short")
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(h, 0)
    pos = _BIN_FIXED.size
    if rlen < 0 or rlen > n - pos:
        raise RemotingProtocolError(f"remark length {rlen} is past the header")
    # 4.9.8 decodes a zero-length string as absent (null)
    remark = h[pos:pos + rlen].decode("utf-8", "replace") if rlen else None
    pos += rlen
    if pos + 4 > n:
        raise RemotingProtocolError("binary header ends before extFields length")
    (elen,) = _I32.unpack_from(h, pos)
    pos += 4
    if elen < 0 or elen > n - pos:
        raise RemotingProtocolError(f"extFields length {elen} is past the header")
    ext: dict[str, str] = {}
    end = pos + elen
    while pos < end:
        if len(ext) >= max_ext_fields:
            raise RemotingProtocolError(f"header has more than {max_ext_fields} extFields")
        if pos + 2 > end:
            raise RemotingProtocolError("truncated extFields key length")
        klen = struct.unpack_from(">h", h, pos)[0]
        pos += 2
        if klen < 0 or pos + klen + 4 > end:
            raise RemotingProtocolError("extFields key past the header")
        key = h[pos:pos + klen].decode("utf-8", "replace")
        pos += klen
        (vlen,) = _I32.unpack_from(h, pos)
        pos += 4
        if vlen < 0 or pos + vlen > end:
            raise RemotingProtocolError("extFields value past the header")
        if vlen:
            ext[key] = h[pos:pos + vlen].decode("utf-8", "replace")
        pos += vlen
    cmd = RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                          language=_LANGUAGE_BYTES.get(lang, LanguageCode.OTHER), version=version)
    cmd.serialize_type = SERIALIZE_ROCKETMQ
    return cmd


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header of ``cmd`` (what a Java client with
    ``rocketmq.serialize.type=ROCKETMQ`` sends); used by tests and tools."""
    remark = cmd.remark.encode() if cmd.remark else b""
    ext = b"".join(struct.pack(">h", len(kb)) + kb + _I32.pack(len(vb)) + vb
                   for kb, vb in ((k.encode(), v.encode()) for k, v in cmd.ext_fields.items()
                                  if v is not None))
    return (_BIN_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag,
                            len(remark)) + remark + _I32.pack(len(ext)) + ext)


# What other clients open a connection with: named in the error instead of a length that
# makes no sense ("PRI " read as a frame length is 1347569952)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_FOREIGN_OPENINGS = ((HTTP2_PREFACE, "gRPC (RocketMQ 5.x client): not served on this port "
                                     "(it speaks RocketMQ's 4.x remoting protocol)"),
                     (b"\x16\x03", "TLS handshake: this port serves plain (unencrypted) "
                                    "RocketMQ remoting"))


def foreign_opening(head: bytes | bytearray | memoryview) -> str | None:
    """What a connection's first bytes say it is when it is not RocketMQ remoting (an HTTP/2
    preface: a RocketMQ 5.x gRPC client; a TLS handshake), else None. ``head`` may be
    shorter than the pattern: what arrived must match as far as it goes (4 bytes at least)."""
    head = bytes(head[:len(HTTP2_PREFACE)])
    for pattern, what in _FOREIGN_OPENINGS:
        n = min(len(head), len(pattern))
        if n >= 2 and head[:n] == pattern[:n] and n >= min(4, len(pattern)):
            return what
    return None


class FrameDecoder:
    """Splits a byte stream into commands; a bad length raises (the connection is closed).
    At a connection's first bytes it recognises other protocols' openings (``foreign_opening``)
    and names them in the error."""

    __slots__ = ("_buf", "max_frame", "max_header", "max_ext_fields", "_started")

    def __init__(self, max_frame: int = MAX_FRAME, max_header: int = MAX_HEADER,
                 max_ext_fields: int = MAX_EXT_FIELDS) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self.max_header = max_header
        self.max_ext_fields = max_ext_fields
        self._started = False           # a first frame length has been accepted

    @property
    def buffered(self) -> int:
        """Bytes received and not yet a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        # frame splitting and the common JSON header in Cython, over the buffer in place
        out, pos, bad = split_frames(buf, self.max_frame, self.max_header,
                                     self.max_ext_fields, RemotingCommand, _LANGUAGE_NAMES,
                                     LanguageCode.JAVA, LanguageCode.OTHER, self._decode)
        first = not self._started and not pos
        if pos:
            del buf[:pos]
            self._started = True
        if bad:
            self._refuse(first)
        return out

    def _decode(self, frame: bytes) -> RemotingCommand:
        return decode_frame(frame, max_ext_fields=self.max_ext_fields)

    def _refuse(self, first: bool) -> None:
        """Raise the error of the frame at the front of the buffer (its length, or its header
        length, is outside the limits)."""
        buf = self._buf
        (length,) = _I32.unpack_from(buf, 0)
        if length < 4 or length + 4 > self.max_frame:
            # only a connection's very first bytes can be another protocol's opening
            what = foreign_opening(bytes(buf)) if first else None
            raise RemotingProtocolError(
                what or f"frame length {length} outside 4..{self.max_frame - 4}")
        hlen = _I32.unpack_from(buf, 4)[0] & 0xFFFFFF
        # refused on the length word, before a large header is even buffered
        raise RemotingProtocolError(f"header length {hlen} is over the limit of {self.max_header}")


# what a handler answers at once: checked by type before ``inspect.isawaitable`` (a Python
# call of several isinstance checks) on the per-request path
ANSWERED = frozenset({RemotingCommand, EncodedResponse, type(None)})
