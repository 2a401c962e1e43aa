"""Transactional messages on the broker: ``END_TRANSACTION`` and the check service
(RocketMQ 4.9.8 ``EndTransactionProcessor``, ``TransactionalMessageBridge``,
``TransactionalMessageServiceImpl``, ``TransactionalMessageCheckService``; MESSAGING.md §10).

A half message is stored by the send path in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (with
``REAL_TOPIC``/``REAL_QID``, ``TRAN_MSG``, ``PGROUP``). A COMMIT builds the final record in the real
topic from the half's stored bytes: its properties *string* unchanged (so ``REAL_TOPIC``,
``REAL_QID``, ``TRAN_MSG=true`` and ``PGROUP`` stay on disk, §0.4), sysflag type COMMIT,
prepared-transaction offset = the half's commit-log offset. COMMIT and ROLLBACK then write one op
message to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (same queue id, tags ``d``, body = the half's queue
offset in ASCII). There is no idempotency check, as in 4.9.8 (issues #5574, #8158).

The check service wakes every ``transaction_check_interval`` ms and walks each half queue from the
``CID_RMQ_SYS_TRANS`` offset: op messages tell which half offsets are resolved; an unresolved half
older than ``transaction_time_out`` is re-appended (a new copy with ``TRANSACTION_CHECK_TIMES``
incremented) and the producer group is asked about the *new* copy through a live channel of the
group (``CHECK_TRANSACTION_STATE``); a half younger than the timeout stops that queue's walk for
this round; a half checked ``transaction_check_max`` times (or older than the store's file
retention) is moved to ``TRANS_CHECK_MAX_TIME_TOPIC``. The half and op offsets of
``CID_RMQ_SYS_TRANS`` live in ``consumerOffset.json``, so half messages survive a restart and are
resolved after it.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore.broker.channels import call_oneway
from rocketstore.broker.records import copy_record
from rocketstore.common.constants import (PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
                                          PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_QUEUE_ID,
                                          PROPERTY_REAL_TOPIC, PROPERTY_TRANSACTION_CHECK_TIMES,
                                          PROPERTY_TRANSACTION_PREPARED,
                                          PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
                                          PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                                          PROPERTY_WAIT_STORE_MSG_OK, TRANS_CHECK_GROUP,
                                          TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC,
                                          TRANS_OP_HALF_TOPIC, TRANS_OP_REMOVE_TAG,
                                          NOT_ALLOWED_SEND_TOPICS, PermName)
from rocketstore.common.names import topic_problem
from rocketstore.common.protocol import (CheckTransactionStateRequest, EndTransactionRequest,
                                         RemotingResult, ResponseCode, TransactionCommitType)
from rocketstore.errors import InvalidMessageError, InvalidMessageTypeError, RocketStoreError
from rocketstore.store.status import GetMessageStatus, PutMessageStatus
from rocketstore.store.types import Message

if TYPE_CHECKING:
    from rocketstore.store.types import MessageExt, PutMessageResult

__all__ = ["TransactionalMessageCheckService", "OP_PROPERTIES"]

log = logging.getLogger(__name__)

# the op message's stored properties: new Message(topic, "d", body) puts TAGS then WAIT=true;
# Java's HashMap iterates them by bucket (WAIT 13, TAGS 14 of 16), and UNIQ_KEY and WAIT=false
# are added to the map only after serialization (MESSAGING.md §0.4)
OP_PROPERTIES = "WAIT\x01true\x02TAGS\x01" + TRANS_OP_REMOVE_TAG

MAX_PROCESS_TIME_LIMIT_MS = 60_000     # per half queue and round
MAX_RETRY_COUNT_WHEN_HALF_NULL = 1
OP_PULL_BATCH = 32
TCMT_QUEUE_NUMS = 1                    # TRANS_CHECK_MAX_TIME_TOPIC queues

_TX_TYPE_MASK = 0xC
_UNAPPENDABLE: Any = object()          # _put_back: this half can never be re-appended
_NEVER_APPENDABLE = {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}
_RW = int(PermName.PERM_READ | PermName.PERM_WRITE)

# put statuses END_TRANSACTION answers SUCCESS for (sendFinalMessage)
_FINAL_OK = {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
             PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE}
_FINAL_ERRORS = {
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (ResponseCode.SYSTEM_ERROR,
                                                 "Create mapped file failed."),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL,
                                                "The message properties are too long"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE,
                                             "Service not available now."),
    PutMessageStatus.OS_PAGE_CACHE_BUSY: (ResponseCode.SYSTEM_ERROR,
                                          "OS page cache busy, please try another machine"),
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _java_long(s: str | None) -> int:
    """``Long.parseLong`` with 4.9.8's ``getLong`` fallback: -1 when it does not parse."""
    try:
        return int(s) if s is not None and s.strip() == s else -1
    except ValueError:
        return -1


@dataclass(slots=True)
class _Pull:
    """What ``TransactionalMessageBridge.getMessage`` turns a store get into (a ``PullResult``)."""

    status: str                      # FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
    next_begin_offset: int
    messages: list | None            # None unless FOUND (Java's msgFoundList)


def _props_map(ext: MessageExt) -> Any:
    """The stored properties as the broker's ordered Java-HashMap stand-in (``PropertiesMap``)."""
    from rocketstore.broker.inner import PropertiesMap
    return PropertiesMap.from_string(ext.properties_bytes.decode("utf-8"))


class TransactionalMessageCheckService:
    """END_TRANSACTION processing and the periodic transaction check of one broker.

    Parameters
    ----------
    broker
        The ``Broker``: its ``store``, ``config`` (``transaction_check_interval``,
        ``transaction_time_out``, ``transaction_check_max``), ``store_config``
        (``file_reserved_time``, ``store_host``), ``topic_manager``, ``producer_manager`` and
        ``broker_name`` are used.
    check_interval_ms, timeout_ms, check_max
        Override the broker config's values (tests run rounds in seconds).

    ``start()`` runs the check thread (first round after one interval, as 4.9.8);
    ``shutdown()`` stops it and waits for check-backs in flight. ``check()`` runs one round in
    the caller.
    """

    def __init__(self, broker: Any, *, check_interval_ms: int | None = None,
                 timeout_ms: int | None = None, check_max: int | None = None) -> None:
        self.broker = broker
        self.store = broker.store
        cfg = broker.config
        self.check_interval_ms = (cfg.transaction_check_interval if check_interval_ms is None
                                  else check_interval_ms)
        self.timeout_ms = cfg.transaction_time_out if timeout_ms is None else timeout_ms
        self.check_max = cfg.transaction_check_max if check_max is None else check_max
        store_config = getattr(broker, "store_config", None) or self.store.config
        self.file_reserved_ms = store_config.file_reserved_time * 3_600_000
        self.store_host = store_config.store_host
        self._cond = threading.Condition()      # guards _stopping, _requested, _rounds
        self._stopping = False
        self._requested = False
        self._rounds = 0
        self._thread: threading.Thread | None = None
        self._round_lock = threading.Lock()     # one check round at a time
        self._executor: ThreadPoolExecutor | None = None
        self._sent: list = []                   # check-backs of the round in progress
        # counters a test or an operator reads
        self.checks_sent = 0
        self.discarded = 0
        self.unappendable = 0       # halves skipped: their checked copy cannot be stored

    # -- END_TRANSACTION -----------------------------------------------------------------------

    def end_transaction(self, req: EndTransactionRequest) -> RemotingResult | None:
        """Commit or roll back the half message ``req`` names (None for NOT: no answer)."""
        if not isinstance(req, EndTransactionRequest):
            raise InvalidMessageTypeError("request", "EndTransactionRequest", type(req).__name__)
        for name in ("commit_log_offset", "tran_state_table_offset"):
            value = getattr(req, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidMessageTypeError(f"request.{name}", "int", type(value).__name__)
            if not -(1 << 63) <= value < (1 << 63):
                raise InvalidMessageError(f"request.{name}", value, "outside the 64-bit range")
        kind = req.commit_or_rollback
        if kind not in (TransactionCommitType.COMMIT_TYPE, TransactionCommitType.ROLLBACK_TYPE):
            return None
        half = self.store.look_message_by_offset(req.commit_log_offset, raw=True)
        if half is None:
            return RemotingResult(ResponseCode.SYSTEM_ERROR,
                                  "Find prepared transaction message failed")
        problem = self._check_prepare(half, req)
        if problem is not None:
            return RemotingResult(ResponseCode.SYSTEM_ERROR, problem)
        if kind == TransactionCommitType.ROLLBACK_TYPE:
            self._delete_prepare(half)
            return RemotingResult(ResponseCode.SUCCESS)
        props = half.properties
        try:
            queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, ""))
        except ValueError:
            return RemotingResult(ResponseCode.SYSTEM_ERROR,
                                  f"half message has no valid REAL_QID "
                                  f"({props.get(PROPERTY_REAL_QUEUE_ID)!r})")
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        if not real_topic:
            return RemotingResult(ResponseCode.SYSTEM_ERROR, "half message has no REAL_TOPIC")
        # endMessageTransaction: the half's string is stored as is; REAL_TOPIC, REAL_QID and
        # TRAN_MSG leave only the map (which decides the flush wait and, through the
        # store's CommitLog rule, a DELAY rewrite of the COMMIT-type record)
        from rocketstore.broker.inner import MessageInner
        inner = MessageInner(real_topic, queue_id, bytes(half.stored_body), _props_map(half),
                             properties_string=half.properties_bytes.decode("utf-8"),
                             flag=half.flag,
                             sys_flag=((half.sys_flag & ~_TX_TYPE_MASK) | int(kind)) & ~0x30,
                             born_timestamp=half.born_timestamp, born_host=half.born_host,
                             reconsume_times=half.reconsume_times,
                             prepared_transaction_offset=req.commit_log_offset)
        for name in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED):
            inner.properties.remove(name)
        try:
            result = self.broker.put_inner(inner).result()
        except RocketStoreError as e:
            return RemotingResult(ResponseCode.SYSTEM_ERROR, str(e))
        if result.status in _FINAL_OK:
            self._delete_prepare(half)
            return RemotingResult(ResponseCode.SUCCESS, value=result)
        code, remark = _FINAL_ERRORS.get(result.status, (ResponseCode.SYSTEM_ERROR,
                                                         f"put {result.status.name}"))
        return RemotingResult(code, remark)

    @staticmethod
    def _check_prepare(half: MessageExt, req: EndTransactionRequest) -> str | None:
        # only a prepared half message in the half topic (stricter than 4.9.8, which commits
        # any record whose properties name a REAL_TOPIC: a delayed message's delivered copy,
        # a SCHEDULE_TOPIC_XXXX record, a client's forged properties)
        if half.topic != TRANS_HALF_TOPIC:
            return (f"The message at commit log offset {req.commit_log_offset} is not a "
                    f"prepared transaction message (topic {half.topic})")
        props = half.properties
        if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() != "true":
            return (f"The message at commit log offset {req.commit_log_offset} is not a "
                    "prepared transaction message (no TRAN_MSG=true)")
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        if topic_problem(real_topic) is not None or real_topic in NOT_ALLOWED_SEND_TOPICS:
            return f"The half message's REAL_TOPIC {real_topic!r} is not a topic to commit to"
        if props.get(PROPERTY_PRODUCER_GROUP) != req.producer_group:
            return "The producer group wrong"
        if half.queue_offset != req.tran_state_table_offset:
            return "The transaction state table offset wrong"
        if half.commitlog_offset != req.commit_log_offset:
            return "The commit log offset wrong"
        return None

    def _delete_prepare(self, half: MessageExt) -> bool:
        """Write the op message that marks ``half`` resolved."""
        op = Message.from_properties_string(
            TRANS_OP_HALF_TOPIC, str(half.queue_offset).encode("ascii"), OP_PROPERTIES,
            wait=False, born_timestamp=_now_ms(), born_host=self.store_host)
        result = self.store.put_message(op, half.queue_id)
        if not result.ok:
            log.error("transaction: op message for half queue offset %d: %s",
                      half.queue_offset, result.status)
        return result.ok

    # -- the check -----------------------------------------------------------------------------

    def check(self, wait_check_backs: bool = False) -> None:
        """One check round over every half queue (TransactionalMessageServiceImpl.check).

        Check-backs go out on a small pool, as 4.9.8's; ``wait_check_backs`` returns only
        after the producers' channels have taken this round's checks."""
        with self._round_lock:
            self._sent = []
            tc = self.broker.topic_manager.create_topic_in_send_message_back_method(
                TRANS_HALF_TOPIC, 1, _RW, 0)
            for queue_id in range(tc.read_queue_nums):
                try:
                    self._check_queue(queue_id)
                except Exception:   # noqa: BLE001 - one queue's failure must not end the service
                    log.exception("transaction: check of half queue %d failed", queue_id)
            sent, self._sent = self._sent, []
        if wait_check_backs:
            for f in sent:
                f.result()

    def _offset(self, topic: str, queue_id: int) -> int:
        off = self.store.query_offset(TRANS_CHECK_GROUP, topic, queue_id)
        return off if off >= 0 else self.store.get_min_offset_in_queue(topic, queue_id)

    def _commit(self, topic: str, queue_id: int, offset: int) -> None:
        self.store.commit_offset(TRANS_CHECK_GROUP, topic, queue_id, offset)

    def _pull(self, topic: str, queue_id: int, offset: int, n: int) -> _Pull:
        r = self.store.get_message(TRANS_CHECK_GROUP, topic, queue_id, offset, n, raw=True)
        s = r.status
        if s is GetMessageStatus.FOUND:
            return _Pull("FOUND", r.next_begin_offset, list(r.messages) or None)
        if s is GetMessageStatus.NO_MATCHED_MESSAGE:
            return _Pull("NO_MATCHED_MSG", r.next_begin_offset, None)
        if s in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE):
            return _Pull("NO_NEW_MSG", r.next_begin_offset, None)
        return _Pull("OFFSET_ILLEGAL", r.next_begin_offset, None)

    def _fill_op_remove_map(self, remove: dict[int, int], queue_id: int, op_offset: int,
                            mini_offset: int, done: list[int]) -> _Pull:
        pull = self._pull(TRANS_OP_HALF_TOPIC, queue_id, op_offset, OP_PULL_BATCH)
        if pull.status in ("OFFSET_ILLEGAL", "NO_MATCHED_MSG"):
            self._commit(TRANS_OP_HALF_TOPIC, queue_id, pull.next_begin_offset)
            return pull
        if pull.messages is None:
            return pull
        for op in pull.messages:
            half_offset = _java_long(bytes(op.body).decode("utf-8", "replace"))
            if op.tags == TRANS_OP_REMOVE_TAG:
                if half_offset < mini_offset:
                    done.append(op.queue_offset)
                else:
                    remove[half_offset] = op.queue_offset
            else:
                log.error("transaction: op message at %d has tag %r, not %r", op.queue_offset,
                          op.tags, TRANS_OP_REMOVE_TAG)
        return pull

    def _check_queue(self, queue_id: int) -> None:
        start = _now_ms()
        half_offset = self._offset(TRANS_HALF_TOPIC, queue_id)
        op_offset = self._offset(TRANS_OP_HALF_TOPIC, queue_id)
        done: list[int] = []
        remove: dict[int, int] = {}
        pull = self._fill_op_remove_map(remove, queue_id, op_offset, half_offset, done)
        at = [half_offset]          # the offset to resume from, kept per half handled
        try:
            self._walk(queue_id, start, at, pull, remove, done)
        finally:
            # progress up to the last half handled is kept even when the walk failed on one
            self._save_progress(queue_id, half_offset, at[0], op_offset, done)

    def _walk(self, queue_id: int, start: int, at: list[int], pull: _Pull,
              remove: dict[int, int], done: list[int]) -> None:
        """Walk one half queue from ``at[0]``, leaving there the offset to resume from."""
        half_offset = at[0]
        null_count = 1
        i = half_offset
        while not self._stopping:
            if _now_ms() - start > MAX_PROCESS_TIME_LIMIT_MS:
                break
            if i in remove:
                done.append(remove.pop(i))
            else:
                got = self._pull(TRANS_HALF_TOPIC, queue_id, i, 1)
                if got.messages is None:
                    null_count += 1
                    if null_count - 1 > MAX_RETRY_COUNT_WHEN_HALF_NULL or \
                            got.status == "NO_NEW_MSG":
                        break
                    i = at[0] = got.next_begin_offset
                    continue
                half = got.messages[0]
                props = _props_map(half)
                if self._need_discard(props) or _now_ms() - half.born_timestamp > \
                        self.file_reserved_ms:
                    self._discard(half, props)
                    at[0] = i = i + 1
                    continue
                if half.store_timestamp >= start:
                    break           # stored after this round began
                age = _now_ms() - half.born_timestamp
                immunity = self.timeout_ms
                immunity_s = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
                if immunity_s is not None:
                    immunity = _java_long(immunity_s)
                    immunity = self.timeout_ms if immunity == -1 else immunity * 1000
                    if age < immunity and self._check_prepare_queue_offset(remove, done,
                                                                            half, props):
                        at[0] = i = i + 1
                        continue
                elif 0 <= age < immunity:
                    break           # the later halves are younger still
                ops = pull.messages
                need_check = ((ops is None and age > immunity)
                              or (ops is not None
                                  and ops[-1].born_timestamp - start > self.timeout_ms)
                              or age <= -1)
                if not need_check:
                    pull = self._fill_op_remove_map(remove, queue_id, pull.next_begin_offset,
                                                    half_offset, done)
                    continue
                copy = self._put_back(half, props)
                if copy is None:
                    break           # a put that may pass: this half again next round
                if copy is not _UNAPPENDABLE:
                    self._send_check(copy)
            at[0] = i = i + 1

    def _save_progress(self, queue_id: int, half_offset: int, new_offset: int, op_offset: int,
                       done: list[int]) -> None:
        if new_offset != half_offset:
            self._commit(TRANS_HALF_TOPIC, queue_id, new_offset)
        new_op = op_offset
        for off in sorted(done):
            if off != new_op:
                break
            new_op += 1
        if new_op != op_offset:
            self._commit(TRANS_OP_HALF_TOPIC, queue_id, new_op)

    def _need_discard(self, props: Any) -> bool:
        """4.9.8's needDiscard: count this check in the map; True once the max is reached."""
        times = props.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        n = 1
        if times is not None:
            n = _java_long(times)
            if n >= self.check_max:
                return True
            n += 1
        props.put(PROPERTY_TRANSACTION_CHECK_TIMES, str(n))
        return False

    def _discard(self, half: MessageExt, props: Any) -> None:
        """Move a half checked too often into TRANS_CHECK_MAX_TIME_TOPIC (resolveDiscardMsg)."""
        tc = self.broker.topic_manager.create_topic_of_tran_check_max_time(TCMT_QUEUE_NUMS, _RW)
        try:
            msg = copy_record(half, tc.topic_name, properties=props.to_string())
        except InvalidMessageError:     # no room for the check count: as first stored
            msg = copy_record(half, tc.topic_name)
        result = self.store.put_message(msg, 0)
        self.discarded += 1
        if result.ok:
            log.warning("transaction: half message %s (real topic %s) checked %s times; moved "
                        "to %s", half.uniq_key, half.properties.get(PROPERTY_REAL_TOPIC),
                        props.get(PROPERTY_TRANSACTION_CHECK_TIMES), TRANS_CHECK_MAX_TIME_TOPIC)
        else:
            log.error("transaction: moving half message %s to %s failed: %s", half.uniq_key,
                      TRANS_CHECK_MAX_TIME_TOPIC, result.status)

    def _renew(self, half: MessageExt, props_string: str) -> PutMessageResult:
        # renewHalfMessageInner copies neither the user flag nor the reconsume times
        msg = copy_record(half, half.topic, properties=props_string, flag=False,
                          reconsume_times=False)
        return self.store.put_message(msg, half.queue_id)

    def _put_back(self, half: MessageExt, props: Any) -> Any:
        """Re-append the half with its counted check: the new copy; None if the put failed
        for a reason that may pass; ``_UNAPPENDABLE`` if it never can (reported, skipped)."""
        try:
            r = self._renew(half, props.to_string())
        except InvalidMessageError as e:
            self._unappendable(half, e)
            return _UNAPPENDABLE
        if r.status in _NEVER_APPENDABLE:
            self._unappendable(half, r.status.value)
            return _UNAPPENDABLE
        if not r.ok:
            log.error("transaction: re-append of half %s failed: %s", half.uniq_key, r.status)
            return None
        return self.store.look_message_by_offset(r.commitlog_offset, raw=True)

    def _unappendable(self, half: MessageExt, why: object) -> None:
        """A half whose checked copy cannot be stored (its properties at the 32,767-byte
        limit leave no room for the check count): counted, reported and moved, as first
        stored, to TRANS_CHECK_MAX_TIME_TOPIC; the check goes on with the next half."""
        self.unappendable += 1
        where = f"moved to {TRANS_CHECK_MAX_TIME_TOPIC}"
        try:
            tc = self.broker.topic_manager.create_topic_of_tran_check_max_time(TCMT_QUEUE_NUMS,
                                                                               _RW)
            r = self.store.put_message(copy_record(half, tc.topic_name), 0)
            if not r.ok:
                where = f"not moved ({r.status.value}); left at its offset"
        except RocketStoreError as e:
            where = f"not moved ({e}); left at its offset"
        log.warning("transaction: half %s at commit-log offset %d (real topic %s) cannot be "
                    "re-appended for its check: %s; skipped, %s", half.uniq_key,
                    half.commitlog_offset, half.properties.get(PROPERTY_REAL_TOPIC), why, where)

    def _check_prepare_queue_offset(self, remove: dict[int, int], done: list[int],
                                    half: MessageExt, props: Any) -> bool:
        """Immunity window: True when the half is resolved or re-appended (skip it)."""
        prepared = props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if prepared is not None:
            off = _java_long(prepared)
            if off == -1:
                return False
            if off in remove:
                done.append(remove.pop(off))
                return True
        # renewImmunityHalfMessageInner: WAIT=false lands in the map before re-serializing
        props.put(PROPERTY_WAIT_STORE_MSG_OK, "false")
        props.put(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
                  prepared if prepared is not None else str(half.queue_offset))
        try:
            return self._renew(half, props.to_string()).ok
        except InvalidMessageError as e:
            self._unappendable(half, e)
            return True

    def _send_check(self, copy: MessageExt) -> None:
        """CHECK_TRANSACTION_STATE about the new copy to one live producer of its group."""
        props = copy.properties
        group = props.get(PROPERTY_PRODUCER_GROUP)
        channel = (self.broker.producer_manager.get_available_channel(group)
                   if group else None)
        if channel is None:
            log.warning("transaction: no live producer of group %r to check half %s", group,
                        copy.uniq_key)
            return
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        request = CheckTransactionStateRequest(
            commit_log_offset=copy.commitlog_offset, tran_state_table_offset=copy.queue_offset,
            offset_msg_id=copy.msg_id, msg_id=uniq, transaction_id=uniq)
        msg = _as_real_destination(copy)
        self.checks_sent += 1
        args = ("CHECK_TRANSACTION_STATE", channel.check_transaction_state,
                self.broker.broker_name, request, msg)
        executor = self._executor
        if executor is None:
            call_oneway(*args)
        else:
            self._sent.append(executor.submit(call_oneway, *args))

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the check thread (first round after one interval)."""
        with self._cond:
            if self._thread is not None:
                raise RuntimeError("TransactionalMessageCheckService already started")
            self._stopping = False
            self._executor = ThreadPoolExecutor(max_workers=2,
                                                thread_name_prefix="TransactionCheckBack")
            self._thread = threading.Thread(target=self._run,
                                            name="TransactionalMessageCheckService", daemon=True)
            self._thread.start()

    def wakeup(self) -> None:
        """Run a round now instead of at the end of the interval."""
        with self._cond:
            self._requested = True
            self._cond.notify_all()

    def wait_rounds(self, n: int, timeout_s: float) -> bool:
        """Wait until ``n`` more rounds of the thread have finished (tests, tools)."""
        with self._cond:
            target = self._rounds + n
            return self._cond.wait_for(lambda: self._rounds >= target or self._stopping,
                                       timeout_s) and self._rounds >= target

    def shutdown(self) -> None:
        """Stop the thread after its round, then let check-backs in flight finish."""
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        with self._cond:
            self._thread = None

    close = shutdown

    def _run(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self.check_interval_ms / 1000
                while not self._stopping and not self._requested:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopping:
                    return
                self._requested = False
            try:
                self.check()
            except Exception:   # noqa: BLE001 - the service outlives one bad round
                log.exception("transaction: check round failed")
            with self._cond:
                self._rounds += 1
                self._cond.notify_all()


def _as_real_destination(copy: MessageExt) -> MessageExt:
    """The half copy as the producer is shown it: topic and queue id of its real destination
    (sendCheckMessage); body decompressed when read, like any consumed message."""
    from rocketstore.store._codec import decode, encode_record
    props = copy.properties
    try:
        queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
    except ValueError:
        queue_id = 0
    rec = encode_record(
        topic=props.get(PROPERTY_REAL_TOPIC) or copy.topic, body=copy.stored_body,
        properties_raw=copy.properties_bytes, queue_id=queue_id, flag=copy.flag,
        queue_offset=copy.queue_offset, physical_offset=copy.commitlog_offset,
        sys_flag=copy.sys_flag, born_timestamp=copy.born_timestamp, born_host=copy.born_host,
        store_timestamp=copy.store_timestamp, store_host=copy.store_host,
        reconsume_times=copy.reconsume_times,
        prepared_transaction_offset=copy.prepared_transaction_offset, body_crc=copy.body_crc)
    out = decode(rec)
    assert out is not None          # a record just encoded is never a blank
    return out.copy()
