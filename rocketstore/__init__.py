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
