"""Stored records as they travel in response bodies (PULL_MESSAGE, VIEW_MESSAGE_BY_ID,
QUERY_MESSAGE): decoded here once for every reader of the wire (the client transport, the admin
client, the Spark wire source)."""
from __future__ import annotations

from rocketstore.common import MessageExt
from rocketstore.errors import RemotingProtocolError
from rocketstore.store._codec import decode as decode_record


def decode_records(body: bytes | memoryview) -> list[MessageExt]:
    """A body of stored records back to back -> messages (body CRC checked)."""
    out: list[MessageExt] = []
    buf = bytes(body)
    pos, n = 0, len(buf)
    while pos < n:
        try:
            m = decode_record(buf, pos, check_crc=True)
        except ValueError as e:
            raise RemotingProtocolError(f"pull body: {e}") from None
        if m is None:
            break
        out.append(m)
        pos += m.store_size
    return out
