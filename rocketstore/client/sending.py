"""What every send of the producers shares (MESSAGING.md §1): the results, the broker
answers a send retries on, the process's UNIQ_KEY stamp and small helpers. Importable from
``rocketstore.client.producer`` as before."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from rocketstore.client.instance import local_address
from rocketstore.client.selector import MessageQueueSelector
from rocketstore.common import (LocalTransactionState, Message, MessageQueue, ResponseCode,
                                SendStatus, UniqIdGenerator, stamp_for_send)
from rocketstore.common.protocol import SendMessageRequest
from rocketstore.errors import TransportError
from rocketstore.store._codec import stamp_one

# a selector: an object with ``select(mqs, msg, arg)`` or that function itself
Selector = Union[MessageQueueSelector, Callable[[list, Message, Any], "MessageQueue | None"]]
# one attempt of a retried send: the queue, its request, the ms left of the send's timeout
Attempt = tuple[MessageQueue, SendMessageRequest, int]

# broker answers a sync send retries on another queue (DefaultMQProducer's retryResponseCodes)
RETRY_RESPONSE_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                                  ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION})
_STATUS_BY_CODE = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
                   ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
                   ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
                   ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_TYPE_MASK = 0xC


@dataclass(slots=True)
class SendResult:
    """What a send reports: ``msg_id`` is the UNIQ_KEY (comma list for a batch),
    ``offset_msg_id`` the broker's offset id(s), ``queue_offset`` the (first) logical offset."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str | None
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


_SUCCESS = ResponseCode.SUCCESS
_SEND_OK = SendStatus.SEND_OK
_uniq_lock = threading.Lock()
_uniq_gen: UniqIdGenerator | None = None


def stamp(msgs: list[Message]) -> tuple[list[Message], list[str]]:
    """The messages with UNIQ_KEY (MessageClientIDSetter, one generator per process as in Java)
    and WAIT=true added where absent, and their keys."""
    with _uniq_lock:
        return stamp_for_send(msgs, _uniq_gen if _uniq_gen is not None else _new_uniq_gen())


def stamp_one_message(msg: Message) -> tuple[Message, str]:
    """``stamp`` of one message (the sync send's path: no lists, no lock: ``stamp_one`` takes
    its id from the generator in C code that holds the GIL throughout, which no other
    thread can interleave)."""
    gen = _uniq_gen
    return stamp_one(msg, gen if gen is not None else uniq_generator())


def uniq_generator() -> UniqIdGenerator:
    """The process's UNIQ_KEY generator (one per process, as Java's MessageClientIDSetter)."""
    with _uniq_lock:
        return _uniq_gen if _uniq_gen is not None else _new_uniq_gen()


def _new_uniq_gen() -> UniqIdGenerator:
    global _uniq_gen
    _uniq_gen = UniqIdGenerator(local_address())
    return _uniq_gen


def commit_log_offset_of(offset_msg_id: str) -> int:
    """The commit-log offset inside an offset message id (its last 8 bytes, FORMAT §7)."""
    return int(offset_msg_id[-16:], 16)


def _ms_since(t: float) -> float:
    return (time.monotonic() - t) * 1000


def _rebuilt(msg: Message, props: dict[str, str], body: Any = None, sys_flag: int | None = None
             ) -> Message:
    return Message(msg.topic, msg.body if body is None else body, properties=props,
                   flag=msg.flag, sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
                   reconsume_times=msg.reconsume_times, born_timestamp=msg.born_timestamp,
                   born_host=msg.born_host)


def _chosen_queue_failed(mq: MessageQueue, e: TransportError) -> TransportError:
    return TransportError(mq.broker_name, f"send to the chosen queue {mq.topic}/"
                          f"{mq.broker_name}/{mq.queue_id} failed and is not retried "
                          f"elsewhere (sends to a chosen queue never fail over): {e.reason}")
