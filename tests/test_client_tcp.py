"""The same client over TCP: ``namesrv_addr=`` against ``rocketstore namesrv`` and
``rocketstore broker`` processes (routes from the NameServer, remoting commands)."""
from __future__ import annotations

import threading

import pytest

from messaging_support import OK, Collector, wait_until
from rocketstore.client import (LocalTransactionState, Message, Producer, PushConsumer,
                                SendStatus, TransactionProducer)
from rocketstore.common import ConsumeOrderlyStatus
from rocketstore.common.codes import RequestCode
from rocketstore.errors import TransportError
from rocketstore.remoting.client import RemotingClient
from rocketstore.remoting.command import RemotingCommand
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


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_pull_answers_are_taken_where_they_arrive_without_a_hop_per_answer(namesrv, orderly):
    """Over TCP a pull's answer is handled on the client's I/O thread, which sends the queue's
    next pull itself: no task is queued to the pull service per answer (a thread wake-up
    per round of 32 messages, which on a VM cost about as much as the consumer's own work).
    An orderly consumer's too, once its queue's first pull (which reads the offset from the
    broker, synchronously) went through the pull service."""
    n = 3200
    topic = f"HopTopic{int(orderly)}"
    with Producer("hop-pg", namesrv_addr=namesrv) as p:
        for i in range(0, n, 100):
            p.send_batch([Message(topic, b"%d" % (i + k)) for k in range(100)])
    col = Collector(ConsumeOrderlyStatus.SUCCESS if orderly else OK)
    answers = []
    c = PushConsumer("hop-cg", namesrv_addr=namesrv,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "*")
    c.register_message_listener(col, orderly=orderly)
    found = c._found

    def counting_found(req, next_begin_offset, messages):
        answers.append(len(messages))
        return found(req, next_begin_offset, messages)
    c._found = counting_found
    c.start()
    try:
        hops = []
        svc = c.instance.pull_service
        execute = svc.execute
        svc.execute = lambda fn, *args: (hops.append(fn), execute(fn, *args))[1]
        wait_until(lambda: len(col.msgs) >= n, timeout=60, what=f"{n} messages consumed")
        assert sorted(int(bytes(m.body)) for m in col.msgs) == list(range(n))
        if orderly:                             # each queue consumed in its send order
            per_queue: dict = {}
            for m in col.msgs:
                per_queue.setdefault(m.queue_id, []).append(int(bytes(m.body)))
            assert all(v == sorted(v) for v in per_queue.values())
        assert len(answers) >= n // 32        # pulls of 32 at most: 100 answers at least
        assert len(hops) <= 8, f"{len(hops)} pull-service tasks for {len(answers)} answers"
    finally:
        c.shutdown()


def test_a_synchronous_call_on_the_io_thread_raises_instead_of_waiting_for_itself(namesrv):
    """The I/O thread reads every response: a synchronous call made on it (a callback that
    needs a route, say) could only wait out its timeout. It fails at once, naming why."""
    client = RemotingClient()
    out = []
    done = threading.Event()

    def on_io_thread():
        try:
            out.append(client.invoke(namesrv, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO), 60))
        except Exception as e:
            out.append(e)
        done.set()
    try:
        client._loop.call(on_io_thread)
        assert done.wait(10), "the I/O thread waited for its own response"
        assert isinstance(out[0], TransportError)
        assert "I/O thread" in str(out[0])
        # from any other thread the same call is answered
        assert client.invoke(namesrv, RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO), 10).code == 0
    finally:
        client.close()


def test_a_send_async_callback_may_send_synchronously(namesrv):
    """A send's callback runs off the client's I/O thread when the answer comes through it
    (RocketMQ runs it on its callback executor), so it may make synchronous calls: a callback
    that sends again gets its SEND_OK (it used to wait on the I/O thread for an answer only
    that thread could read)."""
    with Producer("cb-pg", namesrv_addr=namesrv) as p:
        p.send(Message("CbTopic", b"warm"))
        statuses: list = []
        threads: list = []
        lock = threading.Lock()

        def callback(f):
            st = p.send(Message("CbTopic", b"from-callback")).status
            with lock:
                threads.append(threading.current_thread().name)
                statuses.append(st)
        futs = []
        for i in range(200):
            futs.append(p.send_async(Message("CbTopic", b"a%d" % i)))
            futs[-1].add_done_callback(callback)    # mostly before the answer comes
        wait_until(lambda: len(statuses) == 200, timeout=60,
                   what=lambda: f"{len(statuses)} of 200 callbacks done")
        assert statuses == [SendStatus.SEND_OK] * 200
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futs)
        # some answers came after their callback was added: those ran on the callback pool
        assert any(n.startswith("client-callback") for n in threads)
