"""The same client over TCP: ``namesrv_addr=`` against ``rocketstore namesrv`` and
``rocketstore broker`` processes (routes from the NameServer, remoting commands)."""
from __future__ import annotations

import pytest

from messaging_support import Collector, wait_until
from rocketstore.client import (LocalTransactionState, Message, Producer, PushConsumer,
                                SendStatus, TransactionProducer)
from servers import start_broker, start_namesrv


@pytest.fixture
def namesrv(tmp_path):
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    yield ns.addr
    broker.stop()
    ns.stop()


class _Commit:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg):
        return LocalTransactionState.COMMIT_MESSAGE


def test_produce_and_consume_over_tcp(namesrv):
    col = Collector()
    with Producer("tcp-pg", namesrv_addr=namesrv) as p:
        first = p.send(Message("TcpTopic", b"create", tags="A"))
        assert first.status is SendStatus.SEND_OK
        c = PushConsumer("tcp-cg", namesrv_addr=namesrv,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("TcpTopic", "A")
        c.register_message_listener(col)
        c.start()
        try:
            wait_until(lambda: len(c.assignment("TcpTopic")) == 4, what="the 4 queues")
            keys = [p.send(Message("TcpTopic", b"m%d" % i, tags="A")).msg_id for i in range(20)]
            p.send(Message("TcpTopic", b"other", tags="B"))
            keys.append(p.send_async(Message("TcpTopic", b"async", tags="A")).result(10).msg_id)
            keys += p.send_batch([Message("TcpTopic", b"b%d" % i, tags="A")
                                  for i in range(5)]).msg_id.split(",")
            with TransactionProducer("tcp-tx", _Commit(), namesrv_addr=namesrv) as tp:
                keys.append(tp.send_message_in_transaction(
                    Message("TcpTopic", b"tx", tags="A"), None).msg_id)
            col.wait_keys(keys + [first.msg_id])
        finally:
            c.shutdown()
    assert all(m.tags == "A" for m in col.msgs)
    assert {bytes(m.body) for m in col.msgs} >= {b"async", b"tx", b"b4", b"m19"}
