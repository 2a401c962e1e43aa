"""The storage engine: RocketMQ's commit log, consume queues, index and their services.

Layers, bottom up (each imports only from those below it): the C layer in ``csrc/`` reached
through ``_csrc.pxd``; compiled primitives (``_mapped``, ``_codec``, ``_scan``); structures
(``_commitlog``, ``_consumequeue``, ``_indexfile``, ``mapped_file_queue``, ``allocate``,
``checkpoint``, ``transient_pool``); services (``flush``, ``dispatch``, ``cleanup``,
``offsets``, ``topics``); and the facade ``MessageStore`` (``message_store``) with
``StoreConfig``, the statuses and the value types. The broker (``rocketstore.broker``) is
built on this package; nothing here imports the broker or the client.
"""
from rocketstore.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from rocketstore.store.message_store import MessageStore
from rocketstore.store.status import GetMessageStatus, PutMessageStatus, SysFlag, TransactionType
from rocketstore.store.types import Message, MessageExt, PutMessageResult

__all__ = ["MessageStore", "StoreConfig", "Message", "MessageExt", "PutMessageResult",
           "PutMessageStatus", "GetMessageStatus", "SysFlag", "TransactionType",
           "ASYNC_FLUSH", "SYNC_FLUSH"]
