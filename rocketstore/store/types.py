"""Public value types: messages, results and the status enums (RocketMQ's names).

``Message`` and ``MessageExt`` are compiled (``_codec``); ``PutMessageResult`` too
(``_commitlog``). Statuses are outcomes, not exceptions: a put that could not be stored for a
reason the caller cannot prevent by fixing its input (a full disk, a flush timeout) returns a
result carrying the status.
"""
from __future__ import annotations

from rocketstore.store.status import GetMessageStatus, PutMessageStatus, SysFlag, TransactionType
from rocketstore.store._codec import Message, MessageExt  # noqa: E402  (compiled)
from rocketstore.store._commitlog import PutMessageResult  # noqa: E402

__all__ = ["Message", "MessageExt", "PutMessageResult", "PutMessageStatus", "GetMessageStatus",
           "TransactionType", "SysFlag"]
