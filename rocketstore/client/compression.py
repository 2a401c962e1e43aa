"""Body compression as RocketMQ's producer does it (MESSAGING.md §1.7).

A single message whose body is at least ``compress_msg_body_over_howmuch`` bytes is compressed
and sent with ``COMPRESSED_FLAG`` (0x1) plus the type bits (ZLIB 0x300, LZ4 0x100, ZSTD 0x200);
the store keeps it compressed and every consumer read decompresses it.
"""
from __future__ import annotations

import zlib
from typing import Callable

from rocketstore.errors import MQClientError

COMPRESSED_FLAG = 0x1
COMPRESS_TYPE_BITS = {"ZLIB": 0x300, "LZ4": 0x100, "ZSTD": 0x200}


def compressor(kind: str, level: int = 5) -> tuple[int, Callable[[bytes], bytes]]:
    """``(sysflag bits, compress function)`` for ``kind`` in ZLIB, LZ4, ZSTD.

    LZ4 and ZSTD need the optional ``lz4`` / ``zstandard`` packages; without them this raises
    ``MQClientError`` naming the package, when the producer is configured, not at a send.
    """
    kind = kind.upper()
    if kind not in COMPRESS_TYPE_BITS:
        raise MQClientError(f"compress_type {kind!r} is not one of ZLIB, LZ4, ZSTD")
    bits = COMPRESSED_FLAG | COMPRESS_TYPE_BITS[kind]
    if kind == "ZLIB":
        return bits, lambda body: zlib.compress(body, level)
    if kind == "LZ4":
        try:
            import lz4.frame  # type: ignore[import-untyped]
        except ImportError as e:
            raise MQClientError("compress_type LZ4 needs the 'lz4' package "
                                "(pip install 'rocketstore[compression]')") from e
        return bits, lambda body: lz4.frame.compress(body, compression_level=level)
    try:
        import zstandard
    except ImportError as e:
        raise MQClientError("compress_type ZSTD needs the 'zstandard' package "
                            "(pip install 'rocketstore[compression]')") from e
    # a ZstdCompressor is not thread-safe; the module function makes one per call
    return bits, lambda body: zstandard.compress(body, level)
