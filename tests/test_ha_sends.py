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


class DelayingProxy:
    """Forwards a slave's HA connection to the master, holding the slave's reports (its
    acknowledgements) back for ``delay`` seconds."""

    def __init__(self, master_addr: str, delay: float) -> None:
        import socket
        import threading
        host, port = master_addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.delay = delay
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(1)
        self.addr = f"127.0.0.1:{self.ls.getsockname()[1]}"
        self.socks: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading
        try:
            c, _ = self.ls.accept()
        except OSError:
            return
        m = socket.create_connection(self.target)
        self.socks += [c, m]
        threading.Thread(target=self._pump, args=(c, m, self.delay), daemon=True).start()
        threading.Thread(target=self._pump, args=(m, c, 0.0), daemon=True).start()

    @staticmethod
    def _pump(src, dst, delay: float) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if delay:
                    time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.ls.close()
        for s in self.socks:
            s.close()


def test_send_ok_comes_only_after_the_slaves_ack(tmp_path):
    """With the slave's acknowledgements delayed by 0.4 s on the way to the master, every
    SYNC_MASTER send takes at least that long, and is SEND_OK (slaveTimeout 3 s)."""
    sc = StoreConfig(mapped_file_size_commit_log=FILE)
    master = Broker.open(tmp_path / "m", BrokerConfig(broker_role="SYNC_MASTER"), sc)
    proxy = p = None
    try:
        proxy = DelayingProxy(master.start_ha("127.0.0.1", 0), 0.4)
        slave = Broker.open(tmp_path / "s", BrokerConfig(broker_role="SLAVE", broker_id=1,
                                                         ha_master_address=proxy.addr), sc)
        try:
            slave.start_ha("127.0.0.1", 0)
            _wait(lambda: master.ha_service.push2slave_max_offset
                  >= master.store.get_max_phy_offset() and master.ha_service.connection_count)
            p = Producer("g", broker=master).start()
            for i in range(3):
                t0 = time.monotonic()
                r = p.send(Message("HaSends", b"acked %d" % i))
                assert r.status == SendStatus.SEND_OK
                assert time.monotonic() - t0 >= 0.4
        finally:
            slave.close()
    finally:
        if p is not None:
            p.shutdown()
        if proxy is not None:
            proxy.close()
        master.close()


def test_two_slaves_either_ack_completes_a_send(tmp_path):
    from rocketstore.store.status import PutMessageStatus as S
    sc = StoreConfig(mapped_file_size_commit_log=FILE)
    master = Broker.open(tmp_path / "m", BrokerConfig(broker_role="SYNC_MASTER"), sc)
    try:
        addr = master.start_ha("127.0.0.1", 0)
        slaves = [Broker.open(tmp_path / f"s{i}", BrokerConfig(broker_role="SLAVE", broker_id=i,
                                                               ha_master_address=addr), sc)
                  for i in (1, 2)]
        try:
            for s in slaves:
                s.start_ha("127.0.0.1", 0)
            _wait(lambda: master.ha_service.connection_count == 2)
            futs = [master.store.put_message_async(Message("W", b"a%d" % i)) for i in range(50)]
            assert {f.result(10).status for f in futs} == {S.PUT_OK}
            first_end = slaves[0].store.get_max_phy_offset()
            slaves[0].close()
            _wait(lambda: master.ha_service.connection_count == 1)
            r = master.store.put_message_async(Message("W", b"one left")).result(10)
            assert r.status == S.PUT_OK
            end = master.store.get_max_phy_offset()
            assert slaves[1].store.get_max_phy_offset() == end
            assert first_end < end          # only the remaining slave acknowledged it
        finally:
            for s in slaves:
                s.close()
    finally:
        master.close()


def test_code_11_over_tcp_carries_the_stored_message_s_ids(tmp_path):
    """A SYNC_MASTER's SLAVE_NOT_AVAILABLE (11) still stored the message: 4.9.8 answers it
    with msgId, queueId and queueOffset as for SEND_OK (``handlePutMessageResult`` sets them
    for every stored status), so a client can find what it sent. Raw frames and our client."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rawwire import RawClient, props_string
    from servers import start_broker, start_namesrv
    from rocketstore import MessageStore
    ns = start_namesrv(tmp_path)
    master = start_broker(tmp_path / "store", ns.addr, conf={"brokerRole": "SYNC_MASTER"})
    try:
        with RawClient(master.addr) as c:
            h, _ = c.call(310, {"a": "PG", "b": "Code11", "c": "TBW102", "d": 4, "e": 1,
                                "f": 0, "g": int(time.time() * 1000), "h": 0,
                                "i": props_string({}), "j": 0, "k": "false", "m": "false"},
                          b"raw-11")
        assert h["code"] == 11
        ext = h["extFields"]
        assert ext["queueId"] == "1" and ext["queueOffset"] == "0"
        raw_id = ext["msgId"]
        with Producer("PG-11", namesrv_addr=ns.addr, retry_times_when_send_failed=0) as p:
            r = p.send(Message("Code11", b"client-11"))
            f = p.send_future(Message("Code11", b"future-11")).result(10)
        for res in (r, f):
            assert res.status == SendStatus.SLAVE_NOT_AVAILABLE
            assert res.offset_msg_id is not None and res.queue_offset >= 0
            assert res.message_queue.queue_id >= 0
    finally:
        assert master.stop() == 0
        ns.stop()
    with MessageStore.open(tmp_path / "store", read_only=True) as st:
        assert st.look_message_by_id(raw_id).body == b"raw-11"
        got = st.look_message_by_id(r.offset_msg_id)
        assert got.body == b"client-11" and got.queue_offset == r.queue_offset
        assert got.queue_id == r.message_queue.queue_id
        assert st.look_message_by_id(f.offset_msg_id).body == b"future-11"
