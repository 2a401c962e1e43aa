"""rocketstore: Apache RocketMQ's storage engine as an importable Python library.

The public API is re-exported here; see DESIGN.md for the layers behind it.
"""
try:
    from rocketstore import _mapped as _probe  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on how it was installed
    raise ImportError(
        "rocketstore's compiled extensions are not built. Build them with "
        "`pip install -e .` (or `python setup.py build_ext --inplace`) in the source tree; "
        f"original error: {e}") from e

from rocketstore.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from rocketstore.errors import (CorruptionError, InvalidConfigError, InvalidMessageError,
                                InvalidMessageIdError, InvalidMessageTypeError, RocketStoreError,
                                StoreClosedError, StoreLockedError)
from rocketstore.status import GetMessageStatus, PutMessageStatus, SysFlag, TransactionType
from rocketstore.types import Message, MessageExt, PutMessageResult
from rocketstore.store import MessageStore

__version__ = "0.1.0"

__all__ = [
    "MessageStore", "StoreConfig", "Message", "MessageExt", "PutMessageResult",
    "PutMessageStatus", "GetMessageStatus", "SysFlag", "TransactionType",
    "ASYNC_FLUSH", "SYNC_FLUSH",
    "RocketStoreError", "InvalidMessageError", "InvalidMessageTypeError", "InvalidConfigError",
    "InvalidMessageIdError", "StoreClosedError", "StoreLockedError", "CorruptionError",
]
