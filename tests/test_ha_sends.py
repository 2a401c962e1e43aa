"""SYNC_MASTER's wait for the slave on every kind of send (docs/replication.md §4): batches and
transactional half messages, through the client against an in-process master and slave."""
from __future__ import annotations

import time

from rocketstore import StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.client import (LocalTransactionState, Message, Producer, SendStatus,
                                TransactionProducer)

FILE = 256 * 1024


class Listener:
    def __init__(self) -> None:
        self.ran: list[bytes] = []

    def execute_local_transaction(self, msg, arg):
        self.ran.append(msg.body)
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg):
        return LocalTransactionState.COMMIT_MESSAGE


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pred()


def test_batches_and_transactions_wait_for_the_slave(tmp_path):
    sc = StoreConfig(mapped_file_size_commit_log=FILE)
    master = Broker.open(tmp_path / "m", BrokerConfig(broker_role="SYNC_MASTER",
                                                      slave_timeout=1000), sc)
    p = tp = None
    try:
        addr = master.start_ha("127.0.0.1", 0)
        slave = Broker.open(tmp_path / "s", BrokerConfig(broker_role="SLAVE", broker_id=1,
                                                         ha_master_address=addr), sc)
        slave.start_ha("127.0.0.1", 0)
        _wait(lambda: master.ha_service.connection_count == 1)
        p = Producer("g", broker=master).start()
        listener = Listener()
        tp = TransactionProducer("tg", listener, broker=master).start()
        try:
            r = p.send_batch([Message("HaSends", b"b%d" % i) for i in range(20)])
            assert r.status == SendStatus.SEND_OK
            # answered after the ack: the slave already holds the whole batch
            assert slave.store.get_max_phy_offset() >= master.store.get_max_phy_offset()
            t = tp.send_message_in_transaction(Message("HaSends", b"tx-1"))
            assert t.status == SendStatus.SEND_OK and listener.ran == [b"tx-1"]
        finally:
            slave.close()
        _wait(lambda: master.ha_service.connection_count == 0)
        r = p.send_batch([Message("HaSends", b"c%d" % i) for i in range(20)])
        assert r.status == SendStatus.SLAVE_NOT_AVAILABLE
        # the half message is not replicated: the local transaction never runs, it rolls back
        t = tp.send_message_in_transaction(Message("HaSends", b"tx-2"))
        assert t.status == SendStatus.SLAVE_NOT_AVAILABLE
        assert listener.ran == [b"tx-1"]
        assert t.local_transaction_state == LocalTransactionState.ROLLBACK_MESSAGE
    finally:
        for c in (p, tp):
            if c is not None:
                c.shutdown()
        master.close()
