"""``TransactionProducer``: RocketMQ's ``TransactionMQProducer`` (MESSAGING.md §10): half
message, local transaction, commit or rollback, and the answers to the broker's check-backs.
Importable from ``rocketstore.client.producer`` as before."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from rocketstore.client import validators
from rocketstore.client.producer import Producer
from rocketstore.client.sending import (TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK,
                                        SendResult, TransactionSendResult, _rebuilt,
                                        commit_log_offset_of)
from rocketstore.common import LocalTransactionState, Message, MessageExt, SendStatus
from rocketstore.common import constants as C
from rocketstore.common.protocol import (CheckTransactionStateRequest, EndTransactionRequest,
                                         TransactionCommitType)
from rocketstore.errors import MQClientError, TransportError

log = logging.getLogger("rocketstore.client")


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


_COMMIT_TYPE = {LocalTransactionState.COMMIT_MESSAGE: TransactionCommitType.COMMIT_TYPE,
                LocalTransactionState.ROLLBACK_MESSAGE: TransactionCommitType.ROLLBACK_TYPE,
                LocalTransactionState.UNKNOW: TransactionCommitType.NOT_TYPE}


def _state(value: Any) -> LocalTransactionState:
    return value if isinstance(value, LocalTransactionState) else LocalTransactionState.UNKNOW


class TransactionProducer(Producer):
    """Half message, local transaction, commit or rollback (RocketMQ's
    ``TransactionMQProducer``, §10.1); answers the broker's check-backs for its group with
    ``listener.check_local_transaction`` on one check thread (§10.6)."""

    def __init__(self, group: str, listener: TransactionListener, **kw: Any) -> None:
        if listener is None or not callable(getattr(listener, "execute_local_transaction", None)):
            raise MQClientError("TransactionProducer needs a listener with "
                                "execute_local_transaction and check_local_transaction")
        super().__init__(group, **kw)
        self.listener = listener
        self._check_executor: ThreadPoolExecutor | None = None

    def start(self) -> TransactionProducer:
        self._check_executor = ThreadPoolExecutor(1, thread_name_prefix=f"tx-check-{self.group}")
        try:
            super().start()
        except BaseException:
            self._check_executor.shutdown()
            raise
        return self

    def shutdown(self) -> None:
        super().shutdown()
        ex, self._check_executor = self._check_executor, None
        if ex is not None:
            ex.shutdown(wait=True)

    def send_message_in_transaction(self, msg: Message, arg: Any = None
                                    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``execute_local_transaction(msg, arg)``, then
        commit or roll back (UNKNOW leaves it to the broker's check-back)."""
        res = self.send(self.half_message(msg))
        outcome: Any = None
        error: BaseException | None = None
        if res.status is SendStatus.SEND_OK:
            try:
                outcome = self.listener.execute_local_transaction(msg, arg)
            except Exception as e:       # counts as UNKNOW: the check-back decides
                error = e
        return self.end_transaction(res, outcome, error)

    def half_message(self, msg: Message) -> Message:
        """``msg`` as the half message of a transaction (validated; no delay level)."""
        validators.check_message(msg, self.max_message_size)
        props = msg.properties
        props.pop(C.PROPERTY_DELAY_TIME_LEVEL, None)
        props[C.PROPERTY_TRANSACTION_PREPARED] = "true"
        props[C.PROPERTY_PRODUCER_GROUP] = self.group
        return _rebuilt(msg, props, sys_flag=(msg.sys_flag & ~TRANSACTION_TYPE_MASK)
                        | TRANSACTION_PREPARED_TYPE)

    def end_transaction(self, res: SendResult, outcome: Any, error: BaseException | None
                        ) -> TransactionSendResult:
        """Commit or roll back the half message ``res`` by what the local transaction gave
        (``outcome``, or ``error`` raised: UNKNOW); a half message not stored rolls back."""
        if res.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        elif error is not None:
            log.warning("execute_local_transaction failed: %s", error)
            state = LocalTransactionState.UNKNOW
        else:
            state = _state(outcome)
        if res.offset_msg_id:
            self.transport.end_transaction(res.message_queue.broker_name, EndTransactionRequest(
                self.group, res.queue_offset, commit_log_offset_of(res.offset_msg_id),
                _COMMIT_TYPE[state], False, res.msg_id, res.msg_id))
        return TransactionSendResult(res.status, res.msg_id, res.offset_msg_id,
                                     res.message_queue, res.queue_offset, res.msg_id, state)

    def _check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                 msg: MessageExt) -> None:
        ex = self._check_executor
        if ex is None:
            return

        def check() -> None:
            try:
                state = _state(self.listener.check_local_transaction(msg))
            except Exception as e:
                log.warning("check_local_transaction failed: %s", e)
                state = LocalTransactionState.UNKNOW
            try:
                self.transport.end_transaction(broker_name, EndTransactionRequest(
                    self.group, request.tran_state_table_offset, request.commit_log_offset,
                    _COMMIT_TYPE[state], True, request.msg_id, request.transaction_id))
            except (TransportError, MQClientError) as e:
                log.warning("end transaction after check failed: %s", e)
        try:
            ex.submit(check)
        except RuntimeError:
            pass        # shut down meanwhile: the broker asks again later
