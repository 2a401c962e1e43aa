"""rocketstore.aio (issue 23 item 4): asyncio producers and consumers against real brokers,
in-process and over TCP, with the synchronous client's semantics and no thread per call."""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from messaging_support import LATER, OK, client_kw, make_topic, open_broker
from rocketstore.aio import (AsyncProducer, AsyncPullConsumer, AsyncPushConsumer,
                             AsyncTransactionProducer)
from rocketstore.client import LocalTransactionState, Message, Producer, SendStatus
from rocketstore.common import ResponseCode
from rocketstore.errors import MQClientError, TransportError
from test_client_failover import FakeCluster


@pytest.fixture(params=["inprocess", "tcp"])
def transport(request):
    return request.param


@pytest.fixture
def broker(tmp_path, transport):
    b = open_broker(tmp_path / "store", transport)
    yield b
    b.close()


def run(coro, timeout=60.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to it."""

    def __init__(self):
        super().__init__(2)
        self.calls = 0

    def submit(self, fn, /, *args, **kwargs):
        self.calls += 1
        return super().submit(fn, *args, **kwargs)


def test_send_batch_selector_then_async_for_commit_seek(broker, transport):
    kw = client_kw(broker, transport)

    async def main():
        executor = CountingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        async with AsyncProducer("apg", **kw) as p:
            mqs = make_topic(p.producer, "AT", 2)
            started_calls = executor.calls
            threads = threading.active_count()
            # 200 sends in flight at once: no thread, no executor call per send
            results = await asyncio.gather(*(p.send(Message("AT", b"m%d" % i))
                                             for i in range(200)))
            assert executor.calls == started_calls
            assert threading.active_count() == threads
            assert all(r.status is SendStatus.SEND_OK for r in results)
            # round robin over both queues, as the sync producer
            assert {r.message_queue.queue_id for r in results} == {0, 1}
            b = await p.send_batch([Message("AT", b"b%d" % i) for i in range(5)],
                                   message_queue=mqs[1])
            assert b.message_queue == mqs[1] and len(b.msg_id.split(",")) == 5
            s = await p.send(Message("AT", b"sel"), selector=lambda qs, m, arg: qs[arg], arg=0)
            assert s.message_queue.queue_id == 0
            sent = 1 + 200 + 5 + 1

        c = AsyncPullConsumer("acg", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                              auto_commit=False, consumer_timeout_ms=1500, **kw)
        c.subscribe("AT", "*")
        async with c:
            got = [m async for m in c]
            bodies = sorted(bytes(m.body) for m in got)
            assert len(got) == sent and b"sel" in bodies and b"b4" in bodies
            assert bodies.count(b"m7") == 1
            ends = {mq: c.position(mq) for mq in mqs}
            assert sum(ends.values()) == sent
            committed = await c.commit()
            assert committed == ends
            # the commit reached the broker (over TCP it is a oneway request)
            for _ in range(100):
                if [await c.committed(mq) for mq in mqs] == [ends[mq] for mq in mqs]:
                    break
                await asyncio.sleep(0.05)
            assert [await c.committed(mq) for mq in mqs] == [ends[mq] for mq in mqs]
            await c.seek(mqs[1], ends[mqs[1]] - 2)
            again = await c.poll(5000)
            assert [m.queue_offset for m in again] == [ends[mqs[1]] - 2, ends[mqs[1]] - 1]
            assert await c.poll(200) == []
    run(main())


def test_poll_waits_on_the_loop_until_a_message_arrives(broker, transport):
    kw = client_kw(broker, transport)

    async def main():
        async with AsyncProducer("apg2", **kw) as p:
            mq = make_topic(p.producer, "AW", 1)[0]
            c = AsyncPullConsumer("acg2", consume_from_where="CONSUME_FROM_LAST_OFFSET", **kw)
            c.assign([mq])
            async with c:
                # a new group starts at 0 while the queue's first message is in memory
                while await c.poll(300):
                    pass
                waiter = asyncio.create_task(c.poll(20000))
                await asyncio.sleep(0.3)
                assert not waiter.done()        # the loop kept running while it waited
                await p.send(Message("AW", b"late"), message_queue=mq)
                got = await waiter
                assert [bytes(m.body) for m in got] == [b"late"]
                stopper = asyncio.create_task(c.poll(20000))
                await asyncio.sleep(0.1)
            assert await stopper == []         # stop() wakes a pending poll
    run(main())


def test_async_listener_runs_on_the_loop_and_a_failure_is_redelivered(broker, transport):
    kw = client_kw(broker, transport)

    async def main():
        loop_thread = threading.get_ident()
        seen: list[tuple[bytes, int]] = []
        threads: set[int] = set()
        done = asyncio.Event()

        async def listener(msgs, ctx):
            threads.add(threading.get_ident())
            await asyncio.sleep(0)          # a real coroutine, awaited on the loop
            for m in msgs:
                seen.append((bytes(m.body), m.reconsume_times))
            if any(bytes(m.body) == b"fail-once" and m.reconsume_times == 0 for m in msgs):
                return LATER                # the sync rules: sent back, redelivered later
            if (b"fail-once", 1) in seen:
                done.set()
            return OK

        async with AsyncProducer("apg3", **kw) as p:
            make_topic(p.producer, "AL", 2)
            for body in (b"a", b"b", b"fail-once"):
                await p.send(Message("AL", body))
            c = AsyncPushConsumer("acg3", consume_from_where="CONSUME_FROM_FIRST_OFFSET", **kw)
            c.subscribe("AL", "*")
            c.register_message_listener(listener)
            async with c:
                await asyncio.wait_for(done.wait(), 40)
        assert threads == {loop_thread}
        assert sorted(b for b, _ in seen if b != b"create") == \
            [b"a", b"b", b"fail-once", b"fail-once"]
        assert (b"fail-once", 1) in seen
    run(main())


class AsyncListener:
    def __init__(self):
        self.checked: list[bytes] = []

    async def execute_local_transaction(self, msg, arg):
        await asyncio.sleep(0)
        return arg

    async def check_local_transaction(self, msg):
        self.checked.append(bytes(msg.body))
        return LocalTransactionState.COMMIT_MESSAGE


def test_transactions_with_an_async_listener_commit_rollback_and_check_back(broker, transport):
    kw = client_kw(broker, transport)
    listener = AsyncListener()

    async def main():
        async with AsyncTransactionProducer("atpg", listener, **kw) as p:
            make_topic(p.producer, "ATX", 1)
            states = {}
            for body, state in ((b"commit", LocalTransactionState.COMMIT_MESSAGE),
                                (b"rollback", LocalTransactionState.ROLLBACK_MESSAGE),
                                (b"unknown", LocalTransactionState.UNKNOW)):
                r = await p.send_message_in_transaction(Message("ATX", body), state)
                assert r.status is SendStatus.SEND_OK
                states[body] = r.local_transaction_state
            assert states == {b"commit": LocalTransactionState.COMMIT_MESSAGE,
                              b"rollback": LocalTransactionState.ROLLBACK_MESSAGE,
                              b"unknown": LocalTransactionState.UNKNOW}
            c = AsyncPullConsumer("atcg", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                  consumer_timeout_ms=500, **kw)
            c.subscribe("ATX", "*")
            got: list[bytes] = []
            async with c:
                for _ in range(100):       # the broker's check-back asks the loop's listener
                    got += [bytes(m.body) async for m in c]
                    if b"unknown" in got:
                        break
            assert sorted(got) == [b"commit", b"create", b"unknown"]
            assert b"unknown" in listener.checked
    run(main(), timeout=120)


def test_errors_are_the_sync_clients(tmp_path):
    broker = open_broker(tmp_path / "store")
    try:
        async def main():
            with Producer("pg4", broker=broker) as sync:
                async with AsyncProducer("apg4", broker=broker) as p:
                    mq = make_topic(p.producer, "AE", 1)[0]
                    with pytest.raises(MQClientError, match="body length is zero"):
                        await p.send(Message("AE", b""))
                    with pytest.raises(MQClientError, match="neither a function"):
                        await p.send(Message("AE", b"x"), selector=42)
                    with pytest.raises(MQClientError, match="batch is empty"):
                        await p.send_batch([])
                    broker.close()
                    for kw in ({"message_queue": mq}, {}):
                        errors = []
                        for send in (sync.send, p.send):
                            try:
                                r = send(Message("AE", b"x"), **kw)
                                if asyncio.iscoroutine(r):
                                    await r
                            except Exception as e:
                                errors.append((type(e), str(e)))
                        assert len(errors) == 2 and errors[0] == errors[1]
                        if kw:
                            assert errors[0][0] is TransportError
                            assert "never fail over" in errors[0][1]
        run(main())
    finally:
        broker.close()


class LateCluster(FakeCluster):
    """test_client_failover's two-broker fake, answering async sends from another thread
    (as a TCP transport does), so a retry goes through the pull-service hand-off."""

    def send_message_async(self, broker_name, request):
        out: concurrent.futures.Future = concurrent.futures.Future()

        def answer():
            try:
                out.set_result(self._answer(broker_name, request))
            except TransportError as e:
                out.set_exception(e)
        threading.Timer(0.001, answer).start()
        return out


def outcomes(cluster, sends):
    """What each send gave, through send (sync) and AsyncProducer.send, and the attempts."""
    with Producer("pg-sync", broker=cluster) as p:
        sync = []
        for _ in range(sends):
            try:
                sync.append(p.send(Message("T", b"x")).message_queue.broker_name)
            except Exception as e:
                sync.append((type(e).__name__, getattr(e, "code", None)))
    sync_attempts = len(cluster.sends)
    cluster.sends.clear()

    async def main():
        got = []
        async with AsyncProducer("pg-async", broker=cluster) as p:
            for _ in range(sends):
                try:
                    got.append((await p.send(Message("T", b"x"))).message_queue.broker_name)
                except Exception as e:
                    got.append((type(e).__name__, getattr(e, "code", None)))
        return got
    return sync, sync_attempts, run(main()), len(cluster.sends)


@pytest.mark.parametrize("late", [False, True])
def test_await_send_follows_the_sync_retry_rules(late):
    cls = LateCluster if late else FakeCluster
    # a dead broker: every send lands on the other one
    fake = cls()
    fake.dead.add("broker-b")
    sync, _, aio, _ = outcomes(fake, 20)
    assert sync == aio == ["broker-a"] * 20
    # a retryable refusal moves to the other broker too
    fake = cls()
    fake.refuse["broker-b"] = ResponseCode.SYSTEM_ERROR
    sync, _, aio, _ = outcomes(fake, 20)
    assert sync == aio == ["broker-a"] * 20
    # every broker down: TransportError after 1 + 2 attempts per send, for both
    fake = cls()
    fake.dead.update({"broker-a", "broker-b"})
    sync, n_sync, aio, n_aio = outcomes(fake, 4)
    assert sync == aio == [("TransportError", None)] * 4
    assert n_sync == n_aio == 12
    # a refusal that is not retried is raised from the first attempt
    fake = cls()
    fake.refuse.update({"broker-a": ResponseCode.MESSAGE_ILLEGAL,
                        "broker-b": ResponseCode.MESSAGE_ILLEGAL})
    sync, n_sync, aio, n_aio = outcomes(fake, 4)
    assert sync == aio == [("MQBrokerError", ResponseCode.MESSAGE_ILLEGAL)] * 4
    assert n_sync == n_aio == 4


def docs_block(marker):
    """The python block of docs/messaging.md's asyncio section that contains ``marker``."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "messaging.md").read_text()
    section = text[text.index("## asyncio and Kafka's habits"):]
    return next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if marker in b)


def test_the_docs_asyncio_example_runs_as_written(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(docs_block("AsyncProducer"))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "SEND_OK 0", "3", "[b'item-0', b'item-1', b'item-2', b'paid']", "pushed Paid b'paid'"]
