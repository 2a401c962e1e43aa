"""Broker-built records: a stored message copied into a new record, as 4.9.8's broker builds its
``MessageExtBrokerInner`` from a ``MessageExt`` (delayed delivery, transaction commit, half-message
re-append, discard to ``TRANS_CHECK_MAX_TIME_TOPIC``, DLQ resend).

The copies keep the stored properties *string* of the source (in its stored order), because
4.9.8 serializes the source's property map and only then edits the map (MESSAGING.md §0.4): the
bytes on disk carry the source's properties plus whatever was added before serialization. Bodies
are copied as stored (still compressed when the source is) with the source's sysflag, as the
broker reads them with ``deCompressBody=false``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rocketstore.store.types import Message

if TYPE_CHECKING:
    from rocketstore.store.types import MessageExt

__all__ = ["copy_record", "HOST_V6_BITS"]

# born/store host IPv6 bits: the store sets them from the addresses, a Message must not carry them
HOST_V6_BITS = 0x30


def copy_record(ext: MessageExt, topic: str, *, properties: str | bytes | None = None,
                wait: bool = False, sys_flag: int | None = None, flag: bool = True,
                reconsume_times: bool = True, prepared_transaction_offset: int = 0) -> Message:
    """A new ``Message`` for ``topic`` carrying ``ext``'s stored body, born timestamp and host.

    ``properties`` is the properties string to store (default: ``ext``'s stored string,
    verbatim); ``wait`` is the in-memory ``WAIT`` (4.9.8's broker copies set ``WAIT=false``
    after serializing, so a sync-flush put does not wait); ``sys_flag`` replaces the stored
    sysflag; ``flag`` and ``reconsume_times`` say whether the user flag and the reconsume
    count are copied (4.9.8's half-message re-append copies neither).
    """
    entries = None
    if properties is None:
        properties = ext.properties_bytes
        entries = ext.properties            # parsed once, from that very string
    return Message.from_properties_string(
        topic, ext.stored_body, properties, properties=entries, wait=wait,
        flag=ext.flag if flag else 0,
        sys_flag=(ext.sys_flag if sys_flag is None else sys_flag) & ~HOST_V6_BITS,
        reconsume_times=ext.reconsume_times if reconsume_times else 0,
        prepared_transaction_offset=prepared_transaction_offset,
        born_timestamp=ext.born_timestamp, born_host=ext.born_host)

