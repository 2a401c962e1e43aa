"""Stored records as they travel in response bodies (PULL_MESSAGE, VIEW_MESSAGE_BY_ID,
QUERY_MESSAGE): decoded here once for every reader of the wire (the client transport, the admin
client, the Spark wire source)."""
from __future__ import annotations

from rocketstore.common import MessageExt
from rocketstore.errors import RemotingProtocolError
from rocketstore.store._codec import decode_all


def decode_records(body: bytes | memoryview, client: bool = False) -> list[MessageExt]:
    """A body of stored records back to back -> messages (body CRC checked), in one C pass;
    ``client``: as a consumer is handed them (``msg_id`` is the UNIQ_KEY)."""
    try:
        return decode_all(body if type(body) is bytes else bytes(body), check_crc=True,
                          client=client)
    except ValueError as e:
        raise RemotingProtocolError(f"pull body: {e}") from None
