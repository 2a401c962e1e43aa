"""rocketstore: Apache RocketMQ's storage engine and messaging model as a Python library.

The store's public API is re-exported here. Packages mirror RocketMQ's modules:
``rocketstore.store`` (the storage engine), ``rocketstore.broker`` (messaging services on a
store), ``rocketstore.client`` (producers and consumers over a transport), ``rocketstore.cli``
and ``rocketstore.spark`` (edges). ``rocketstore.errors`` is shared by all of them.
"""
try:
    from rocketstore.store import _mapped as _probe  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on how it was installed
    raise ImportError(
        "rocketstore's compiled extensions are not built. Build them with "
        "`pip install -e .` (or `python setup.py build_ext --inplace`) in the source tree; "
        f"original error: {e}") from e

from rocketstore.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from rocketstore import errors as _errors
from rocketstore.errors import *  # noqa: F401,F403  (every public error: errors.__all__)
from rocketstore.store.status import GetMessageStatus, PutMessageStatus, SysFlag, TransactionType
from rocketstore.store.types import Message, MessageExt, PutMessageResult
from rocketstore.store import MessageStore
from rocketstore.store.topics import TopicConfig

from rocketstore._version import __version__

__all__ = [
    "__version__", "MessageStore", "StoreConfig", "TopicConfig", "Message", "MessageExt",
    "PutMessageResult", "PutMessageStatus", "GetMessageStatus", "SysFlag", "TransactionType",
    "ASYNC_FLUSH", "SYNC_FLUSH",
]
__all__ += _errors.__all__      # every public error, importable as rocketstore.<Name>

# the clients, importable from the top as confluent-kafka's are; loaded on first use, so
# ``import rocketstore`` (the store) does not load the client or asyncio
_CLIENT_NAMES = ("Producer", "TransactionProducer", "PushConsumer", "PullConsumer",
                 "MessageQueue", "SendStatus", "ConsumeConcurrentlyStatus",
                 "ConsumeOrderlyStatus", "LocalTransactionState")
__all__ += list(_CLIENT_NAMES)


def __getattr__(name: str) -> object:
    if name in _CLIENT_NAMES:
        import rocketstore.client as client
        return getattr(client, name)
    if name == "aio":
        import importlib
        return importlib.import_module("rocketstore.aio")
    raise AttributeError(f"module 'rocketstore' has no attribute {name!r}")
