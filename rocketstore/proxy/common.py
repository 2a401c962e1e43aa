"""What the proxy's RPC modules share: RocketMQ 5's status codes and limits, and the
``status`` helpers (an application error is answered in ``status``, never as a gRPC error)."""
from __future__ import annotations

import time
from typing import Any

from rocketstore.common.protocol import ResponseCode
from rocketstore.proxy import convert, protocol as pb

C = {v.name: v.number for v in pb.FILE.enum_types_by_name["Code"].values}
PERM = {name: pb.enum_value("Permission", name) for name in ("NONE", "READ", "WRITE",
                                                             "READ_WRITE")}
MIXED = [convert.NORMAL, convert.FIFO, convert.DELAY, convert.TRANSACTION]
# a topic's message.type -> the types its queues accept
ACCEPTS = {"NORMAL": [convert.NORMAL], "FIFO": [convert.FIFO], "DELAY": [convert.DELAY],
           "TRANSACTION": [convert.TRANSACTION], "MIXED": MIXED}
PRODUCER = pb.enum_value("ClientType", "PRODUCER")
TAG = pb.enum_value("FilterType", "TAG")

MAX_BODY = 4 * 1024 * 1024
MAX_DELAY_MS = 24 * 3600 * 1000
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 10_000, 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000
# push consumers' receipts (auto_renew): checked every 5 s, extended by 60 s when under 10 s
# remain, for at most 3 h; a client whose Telemetry stream is gone gets them back in 1 s
RENEW_EVERY_S, RENEW_AHEAD_MS, RENEW_MAX_MS, RENEW_GONE_MS = 5.0, 10_000, 3 * 3600_000, 1000
ROUTE_TTL_S = 5.0
DEDUP_WINDOW_S, DEDUP_MAX = 120.0, 100_000
# the consumer back-off the proxy hands out (RocketMQ's CUSTOMIZED default), seconds
BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600,
             7200)
_SEND_CODES = {ResponseCode.FLUSH_DISK_TIMEOUT: "MASTER_PERSISTENCE_TIMEOUT",
               ResponseCode.FLUSH_SLAVE_TIMEOUT: "SLAVE_PERSISTENCE_TIMEOUT",
               ResponseCode.SLAVE_NOT_AVAILABLE: "HA_NOT_AVAILABLE",
               ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS"}


class RpcError(Exception):
    """An application error answered in ``status``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _now() -> int:
    return int(time.time() * 1000)


def _status(target: Any, code: str, message: str = "") -> Any:
    target.code = C[code]
    target.message = message or code
    return target


def _reply(resp: Any, code: str, message: str = "") -> Any:
    _status(resp.status, code, message)
    return resp


def _offset_msg_commit_offset(offset_msg_id: str | None) -> int:
    """The commit-log offset in a 4.x offset message id (store host, then 8 bytes offset)."""
    if not offset_msg_id or len(offset_msg_id) < 16:
        return -1
    return int(offset_msg_id.split(",")[0][-16:], 16)


def _tag_matches(expression: str, tags: str | None) -> bool:
    expr = expression.strip()
    if expr in ("", "*"):
        return True
    return tags is not None and tags in {t.strip() for t in expr.split("||")}
