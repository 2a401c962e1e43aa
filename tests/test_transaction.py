"""Transactional messages on a real Broker: END_TRANSACTION commit/rollback bytes, the check
service (check-back to another live producer of the group, max checks, young halves), the
CID_RMQ_SYS_TRANS offsets and half messages across a restart (MESSAGING.md §10)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rocketstore import Message, StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.transaction import OP_PROPERTIES
from rocketstore.common.constants import (TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC,
                                          TRANS_OP_HALF_TOPIC)
from rocketstore.common.protocol import (EndTransactionRequest, HeartbeatData,
                                         LocalTransactionState, ResponseCode,
                                         SendMessageRequest, TransactionCommitType)
from rocketstore.store.configfile import loads

GROUP = "TxProducers"
TOPIC = "TxTopic"
_TYPE = {LocalTransactionState.COMMIT_MESSAGE: TransactionCommitType.COMMIT_TYPE,
         LocalTransactionState.ROLLBACK_MESSAGE: TransactionCommitType.ROLLBACK_TYPE,
         LocalTransactionState.UNKNOW: TransactionCommitType.NOT_TYPE}


def _done(x):
    return x.result(timeout=30) if hasattr(x, "result") and callable(x.result) else x


class TxClient:
    """A producer client instance of GROUP as the broker sees it: a ClientChannel that
    answers CHECK_TRANSACTION_STATE with END_TRANSACTION (fromTransactionCheck), the way a
    TransactionMQProducer's client does (MESSAGING.md §10.6)."""

    def __init__(self, broker: Broker, client_id: str, answer) -> None:
        self.broker = broker
        self.client_id = client_id
        self.answer = answer
        self.checks: list = []
        self.checked = threading.Event()
        broker.heartbeat(HeartbeatData(client_id, producer_groups=[GROUP]), self)

    def check_transaction_state(self, broker_name, request, msg) -> None:
        state = self.answer(msg)
        self.checks.append((broker_name, request, msg, state))
        self.broker.end_transaction(EndTransactionRequest(
            GROUP, request.tran_state_table_offset, request.commit_log_offset, _TYPE[state],
            from_transaction_check=True, msg_id=request.msg_id,
            transaction_id=request.transaction_id))
        self.checked.set()

    def notify_consumer_ids_changed(self, group: str) -> None:
        pass

    def leave(self) -> None:
        self.broker.unregister_client(self.client_id, GROUP, None)


def send_half(broker: Broker, body: bytes, **props):
    """What TransactionMQProducer.sendMessageInTransaction sends (§10.1 step 2)."""
    msg = Message(TOPIC, body, tags="TagT", keys=["order-9"],
                  properties={"TRAN_MSG": "true", "PGROUP": GROUP, "WAIT": "true", **props},
                  sys_flag=int(TransactionCommitType.PREPARED_TYPE))
    resp = _done(broker.send_message(SendMessageRequest(GROUP, TOPIC, 1, [msg])))
    assert resp.code == ResponseCode.SUCCESS, resp
    half = broker.store.look_message_by_id(resp.msg_id, raw=True)
    assert half.topic == TRANS_HALF_TOPIC and half.queue_offset == resp.queue_offset
    return half


def end(broker: Broker, half, state, group: str = GROUP, **kw):
    return broker.end_transaction(EndTransactionRequest(
        group, kw.get("queue_offset", half.queue_offset),
        kw.get("commit_log_offset", half.commitlog_offset), _TYPE[state],
        msg_id=half.uniq_key, transaction_id=half.uniq_key))


def queue(broker: Broker, topic: str, queue_id: int = 0) -> list:
    """Every record of a queue, once the dispatcher has caught up with the commit log."""
    store = broker.store
    assert store.notifier.wait(lambda: store.dispatch_behind_bytes() == 0, 30)
    out, offset = [], 0
    while True:
        r = broker.store.get_message("t", topic, queue_id, offset, 32, raw=True)
        if not r.messages:
            return out
        out += r.messages
        offset = r.next_begin_offset


def offsets_file(root: str) -> dict:
    return loads(Path(root, "config", "consumerOffset.json").read_text())["offsetTable"]


def open_broker(root: str, **cfg) -> Broker:
    # the check thread only runs when a test asks for it (interval 1 h unless given)
    cfg.setdefault("transaction_check_interval", 3_600_000)
    cfg.setdefault("transaction_time_out", 300)
    return Broker.open(root, BrokerConfig(**cfg), StoreConfig())


def aged(ms: int = 400) -> None:
    """Let halves grow older than the 300 ms test transaction_time_out."""
    time.sleep(ms / 1000)


def test_commit_stores_the_final_record_as_4_9_8_and_an_op_message(store_dir):
    with open_broker(store_dir) as broker:
        half = send_half(broker, b"pay 10")
        assert queue(broker, TOPIC, 1) == []                      # invisible before commit
        r = end(broker, half, LocalTransactionState.COMMIT_MESSAGE)
        assert r.code == ResponseCode.SUCCESS
        [final] = queue(broker, TOPIC, 1)
        # the half's properties string as stored: REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP stay
        assert final.properties_bytes == half.properties_bytes
        p = final.properties
        assert (p["REAL_TOPIC"], p["REAL_QID"], p["TRAN_MSG"], p["PGROUP"]) == \
            (TOPIC, "1", "true", GROUP)
        assert final.sys_flag & 0xC == 0x8                       # COMMIT type
        assert final.prepared_transaction_offset == half.commitlog_offset
        assert bytes(final.body) == b"pay 10" and final.tags == "TagT"
        assert (final.born_timestamp, final.uniq_key) == (half.born_timestamp, half.uniq_key)
        [op] = queue(broker, TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(half.queue_offset).encode()
        assert op.properties_bytes == OP_PROPERTIES.encode()   # no UNIQ_KEY, WAIT=true
        assert op.tags == "d" and op.sys_flag == 0 and op.queue_id == half.queue_id


def test_op_properties_are_java_hashmap_order():
    from rocketstore.broker.inner import PropertiesMap
    m = PropertiesMap.from_string(None)
    m.put("TAGS", "d")
    m.put("WAIT", "true")
    assert m.to_string() == OP_PROPERTIES


def test_rollback_writes_only_the_op_message_and_the_check_advances(store_dir):
    with open_broker(store_dir) as broker:
        half = send_half(broker, b"cancel me")
        assert end(broker, half, LocalTransactionState.ROLLBACK_MESSAGE).code == \
            ResponseCode.SUCCESS
        assert queue(broker, TOPIC, 1) == []
        assert len(queue(broker, TRANS_OP_HALF_TOPIC)) == 1
        client = TxClient(broker, "c1", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        aged()
        broker.transaction_service.check(wait_check_backs=True)
        assert client.checks == []                              # resolved: never asked
        assert queue(broker, TOPIC, 1) == []
    table = offsets_file(store_dir)
    assert table[f"{TRANS_HALF_TOPIC}@CID_RMQ_SYS_TRANS"] == {"0": 1}
    assert table[f"{TRANS_OP_HALF_TOPIC}@CID_RMQ_SYS_TRANS"] == {"0": 1}


def test_end_transaction_refuses_what_does_not_match(store_dir):
    with open_broker(store_dir) as broker:
        half = send_half(broker, b"x")
        c = LocalTransactionState.COMMIT_MESSAGE
        r = end(broker, half, c, group="OtherGroup")
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        r = end(broker, half, c, queue_offset=half.queue_offset + 1)
        assert r.remark == "The transaction state table offset wrong"
        r = end(broker, half, c, commit_log_offset=half.commitlog_offset + 1)
        assert r.remark == "Find prepared transaction message failed"
        assert end(broker, half, LocalTransactionState.UNKNOW) is None     # no answer
        assert queue(broker, TOPIC, 1) == [] and queue(broker, TRANS_OP_HALF_TOPIC) == []


def test_unknow_is_resolved_by_another_producer_of_the_group(store_dir):
    with open_broker(store_dir, transaction_check_interval=200) as broker:
        first = TxClient(broker, "first", lambda m: LocalTransactionState.UNKNOW)
        half = send_half(broker, b"maybe")
        assert end(broker, half, LocalTransactionState.UNKNOW) is None
        first.leave()                                           # the producer is gone
        second = TxClient(broker, "second", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        assert second.checked.wait(30), "no check-back reached the live producer"
        assert first.checks == []
        [(broker_name, req, msg, state)] = second.checks
        assert broker_name == broker.broker_name
        # the check names the re-appended copy; the message shows its real destination
        halves = queue(broker, TRANS_HALF_TOPIC)
        assert len(halves) == 2
        copy = halves[1]
        assert (req.commit_log_offset, req.tran_state_table_offset, req.offset_msg_id) == \
            (copy.commitlog_offset, 1, copy.msg_id)
        assert req.msg_id == req.transaction_id == half.uniq_key
        assert (msg.topic, msg.queue_id, bytes(msg.body)) == (TOPIC, 1, b"maybe")
        assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert "TRANSACTION_CHECK_TIMES" not in half.properties
        assert copy.flag == 0 and copy.born_timestamp == half.born_timestamp
        [final] = queue(broker, TOPIC, 1)
        assert bytes(final.body) == b"maybe" and final.prepared_transaction_offset == \
            copy.commitlog_offset
        # later rounds see the op message for the copy: no second check, offsets move on
        assert broker.transaction_service.wait_rounds(2, 30)
        assert len(second.checks) == 1 and len(queue(broker, TOPIC, 1)) == 1
    table = offsets_file(store_dir)
    assert table[f"{TRANS_HALF_TOPIC}@CID_RMQ_SYS_TRANS"] == {"0": 2}
    assert table[f"{TRANS_OP_HALF_TOPIC}@CID_RMQ_SYS_TRANS"] == {"0": 1}


def test_after_the_max_checks_the_half_goes_to_trans_check_max_time_topic(store_dir):
    with open_broker(store_dir, transaction_check_max=2) as broker:
        client = TxClient(broker, "c", lambda m: LocalTransactionState.UNKNOW)
        half = send_half(broker, b"never decided")
        svc = broker.transaction_service
        for _ in range(3):
            aged()
            svc.check(wait_check_backs=True)
        assert len(client.checks) == 2                          # at most check_max checks
        assert [c[2].properties["TRANSACTION_CHECK_TIMES"] for c in client.checks] == ["1", "2"]
        [dead] = queue(broker, TRANS_CHECK_MAX_TIME_TOPIC)
        assert dead.properties["TRANSACTION_CHECK_TIMES"] == "2"
        assert (dead.properties["REAL_TOPIC"], bytes(dead.body)) == (TOPIC, b"never decided")
        assert dead.uniq_key == half.uniq_key
        tc = broker.topic_manager.select(TRANS_CHECK_MAX_TIME_TOPIC)
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
        assert broker.topic_manager.select(TRANS_HALF_TOPIC).perm == 6
        aged()
        svc.check(wait_check_backs=True)                                             # nothing left to check
        assert len(client.checks) == 2 and len(queue(broker, TRANS_CHECK_MAX_TIME_TOPIC)) == 1
        assert queue(broker, TOPIC, 1) == []
    assert offsets_file(store_dir)[f"{TRANS_HALF_TOPIC}@CID_RMQ_SYS_TRANS"] == {"0": 3}


def test_a_young_half_stops_the_scan_until_it_is_old_enough(store_dir):
    with open_broker(store_dir, transaction_time_out=60_000) as broker:
        client = TxClient(broker, "c", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        send_half(broker, b"young")
        time.sleep(0.05)
        broker.transaction_service.check(wait_check_backs=True)
        assert client.checks == [] and queue(broker, TOPIC, 1) == []
        # the scan stopped at the half: no offset was committed for the round
        assert broker.store.query_offset("CID_RMQ_SYS_TRANS", TRANS_HALF_TOPIC, 0) == -1
        assert len(queue(broker, TRANS_HALF_TOPIC)) == 1        # and nothing re-appended


def test_half_messages_survive_a_restart_and_are_resolved_after_it(store_dir):
    with open_broker(store_dir) as broker:
        half = send_half(broker, b"across restart")
        committed = send_half(broker, b"done before")
        end(broker, committed, LocalTransactionState.COMMIT_MESSAGE)
    with open_broker(store_dir, transaction_check_interval=200) as broker:
        client = TxClient(broker, "after", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        assert client.checked.wait(30)
        assert [c[1].msg_id for c in client.checks] == [half.uniq_key]
        assert sorted(bytes(m.body) for m in queue(broker, TOPIC, 1)) == \
            [b"across restart", b"done before"]


def test_shutdown_stops_the_check_thread(store_dir):
    broker = open_broker(store_dir, transaction_check_interval=100)
    svc = broker.transaction_service
    assert svc.wait_rounds(1, 30)
    broker.close()
    names = {t.name for t in threading.enumerate()}
    assert "TransactionalMessageCheckService" not in names
    assert not any(n.startswith("TransactionCheckBack") for n in names)


@pytest.mark.parametrize("immunity", ["1"])
def test_check_immunity_time_delays_the_first_check(store_dir, immunity):
    with open_broker(store_dir) as broker:
        client = TxClient(broker, "c", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        send_half(broker, b"immune", CHECK_IMMUNITY_TIME_IN_SECONDS=immunity)
        aged()
        broker.transaction_service.check(wait_check_backs=True)
        # younger than its 1 s immunity: re-appended with TRAN_PREPARED_QUEUE_OFFSET, no check
        assert client.checks == []
        halves = queue(broker, TRANS_HALF_TOPIC)
        assert len(halves) == 2
        assert halves[1].properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
        assert halves[1].properties["WAIT"] == "false"
        time.sleep(1.2)
        broker.transaction_service.check(wait_check_backs=True)
        assert len(client.checks) == 1
        assert [bytes(m.body) for m in queue(broker, TOPIC, 1)] == [b"immune"]


TX_CHILD = """
import sys
from rocketstore import Message, StoreConfig
from rocketstore.broker.broker import Broker
from rocketstore.broker.config import BrokerConfig
from rocketstore.common.protocol import EndTransactionRequest, SendMessageRequest
broker = Broker.open(sys.argv[1], BrokerConfig(transaction_check_interval=3_600_000),
                     StoreConfig())
for i in range(300):
    msg = Message("TxTopic", b"t%03d" % i, properties={"TRAN_MSG": "true", "PGROUP": "TxProducers"},
                  sys_flag=4)
    r = broker.send_message(SendMessageRequest("TxProducers", "TxTopic", 1, [msg])).result()
    half = broker.store.look_message_by_id(r.msg_id)
    if i % 3 < 2:                         # 0: commit, 1: rollback, 2: left unknown
        broker.end_transaction(EndTransactionRequest(
            "TxProducers", half.queue_offset, half.commitlog_offset, 8 if i % 3 == 0 else 12))
print("done", flush=True)
import threading; threading.Event().wait()
"""


def test_kill_9_with_half_messages_pending_then_resolved_once_each(store_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    script = tmp_path / "child.py"
    script.write_text(TX_CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script), store_dir], stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        assert proc.stdout.readline() == "done\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    with open_broker(store_dir, transaction_check_interval=200) as broker:
        assert broker.store.recovery["last_exit_ok"] is False
        client = TxClient(broker, "after-crash", lambda m: LocalTransactionState.COMMIT_MESSAGE)
        store = broker.store
        assert store.notifier.wait(lambda: len(client.checks) >= 100, 60)
        assert broker.transaction_service.wait_rounds(2, 30)
        bodies = sorted(bytes(m.body) for m in queue(broker, TOPIC, 1))
    # committed before the kill, or unknown and committed by the check after it: once each;
    # rolled back: never
    assert bodies == sorted(b"t%03d" % i for i in range(300) if i % 3 != 1)
    assert sorted(bytes(c[2].body) for c in client.checks) == \
        sorted(b"t%03d" % i for i in range(300) if i % 3 == 2)


def test_end_transaction_rejects_malformed_requests(store_dir):
    from rocketstore.errors import InvalidMessageError, InvalidMessageTypeError
    with open_broker(store_dir) as broker:
        half = send_half(broker, b"x")
        commit = TransactionCommitType.COMMIT_TYPE
        with pytest.raises(InvalidMessageTypeError, match="request.commit_log_offset"):
            broker.end_transaction(EndTransactionRequest(GROUP, 0, "12", commit))
        with pytest.raises(InvalidMessageError, match="request.tran_state_table_offset"):
            broker.end_transaction(EndTransactionRequest(GROUP, 1 << 70, 0, commit))
        with pytest.raises(InvalidMessageTypeError, match="EndTransactionRequest"):
            broker.transaction_service.end_transaction({"producer_group": GROUP})
        r = broker.end_transaction(EndTransactionRequest(GROUP, 0, -1, commit))
        assert r.remark == "Find prepared transaction message failed"
        # nothing was touched: the half still commits
        assert end(broker, half, LocalTransactionState.COMMIT_MESSAGE).code == ResponseCode.SUCCESS
