"""Two brokers under one NameServer, as real processes (tests/cluster_support.py): merged
routes, producers over every writable queue of both brokers, a consumer group rebalancing over
all of them, and broker B killed with -9 mid-stream and restarted on its store: sends fail over
to A, consumers keep consuming A, and after the restart every SEND_OK message is consumed at
least once. Ordered sends to B's queues fail while B is down. Then the same cluster with
Apache RocketMQ's C++ client.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, MessageQueue, Producer,
                                PullConsumer, PushConsumer, SendStatus)
from rocketstore.errors import MQBrokerError, MQClientError, TransportError
from cluster_support import SYNC_FLUSH_CONF, Cluster, ToBroker  # noqa: E402  (tests/cluster_support.py)

A, B = "broker-a", "broker-b"
QUEUES = {A: 2, B: 3}
FAST = {"poll_name_server_interval": 300, "heartbeat_broker_interval": 1000}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, [A, B])
    c.create_topic("CT", QUEUES)
    try:
        c.start()
        c.wait_route("CT", QUEUES)
        yield c
    finally:
        codes = c.stop()
    assert all(rc == 0 for rc in codes.values()), codes


class Received:
    """What a push consumer group received: UNIQ_KEYs by broker, per member."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_broker: dict[str, list[str]] = {A: [], B: []}
        self.keys: set[str] = set()

    def listener(self, msgs, ctx):
        with self.lock:
            for m in msgs:
                self.by_broker[ctx.message_queue.broker_name].append(m.uniq_key)
                self.keys.add(m.uniq_key)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def wait_for(self, keys: set[str], timeout: float) -> set[str]:
        """Wait until every key arrived; returns those still missing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                missing = keys - self.keys
            if not missing:
                return set()
            time.sleep(0.05)
        return missing


def member(namesrv: str, got: Received, name: str) -> PushConsumer:
    c = PushConsumer("cg-cluster", namesrv_addr=namesrv, instance_name=name,
                     consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST)
    c.subscribe("CT", "*")
    c.register_message_listener(got.listener)
    return c.start()


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_the_route_merges_both_brokers_and_sends_spread_over_every_queue(cluster):
    route = cluster.route("CT")
    assert sorted((q["brokerName"], q["writeQueueNums"], q["readQueueNums"])
                  for q in route["queueDatas"]) == [(A, 2, 2), (B, 3, 3)]
    assert {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"]} == \
        {A: cluster.nodes[A].addr, B: cluster.nodes[B].addr}
    with Producer("pg-spread", namesrv_addr=cluster.namesrv_addr, **FAST) as p:
        res = [p.send(Message("CT", b"m-%d" % i)) for i in range(100)]
    assert all(r.status is SendStatus.SEND_OK for r in res)
    per_queue = Counter((r.message_queue.broker_name, r.message_queue.queue_id) for r in res)
    # round-robin over, B-0, B-1, B-2: 20 each, so A gets 40 and B 60
    assert per_queue == {(A, 0): 20, (A, 1): 20, (B, 0): 20, (B, 1): 20, (B, 2): 20}
    # a lite pull consumer reads all five queues of both brokers
    pc = PullConsumer("pc-cluster", namesrv_addr=cluster.namesrv_addr,
                      consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST)
    pc.subscribe("CT", "*")
    with pc:
        pulled: dict[bytes, str] = {}
        deadline = time.monotonic() + 60
        while len(pulled) < 100 and time.monotonic() < deadline:
            for m in pc.poll(1000):
                pulled[bytes(m.body)] = m.store_host
        assert pc.assignment("CT") == {MessageQueue("CT", n, q) for n, k in QUEUES.items()
                                       for q in range(k)}
    assert Counter(pulled.values()) == {cluster.nodes[A].addr: 40, cluster.nodes[B].addr: 60}
    # and the brokers stored them where the results say
    for name, n in ((A, 40), (B, 60)):
        assert cluster.stop_broker(name) == 0
        node = cluster.nodes[name]
        with MessageStore.open(str(node.store), StoreConfig(mapped_file_size_commit_log=16 << 20),
                               read_only=True) as s:
            stored = {bytes(m.body) for q in range(QUEUES[name])
                      for m in s.get_message("check", "CT", q, 0, max_msgs=100).messages}
        assert len(stored) == n
        assert stored == {bytes(f"m-{i}", "ascii") for i, r in enumerate(res)
                          if r.message_queue.broker_name == name}


def test_kill_9_of_one_broker_mid_stream_fails_over_and_loses_no_send_ok(cluster):
    ns = cluster.namesrv_addr
    got = Received()
    c1 = member(ns, got, "m1")
    c2 = member(ns, got, "m2")
    producer = Producer("pg-failover", namesrv_addr=ns, **FAST).start()
    acked: list[tuple[str, str]] = []          # (UNIQ_KEY, broker) of each SEND_OK
    outcomes: Counter[str] = Counter()
    stop = threading.Event()
    phase = {"now": "before"}

    def send_loop() -> None:
        i = 0
        while not stop.is_set():
            try:
                r = producer.send(Message("CT", b"s-%d" % i))
            except (MQBrokerError, MQClientError, TransportError) as e:
                outcomes[f"raised {type(e).__name__}"] += 1
            else:
                outcomes[r.status.name] += 1
                if r.status is SendStatus.SEND_OK:
                    acked.append((r.msg_id, r.message_queue.broker_name))
                    outcomes[f"{phase['now']} {r.message_queue.broker_name}"] += 1
            i += 1
            time.sleep(0.005)
    sender = threading.Thread(target=send_loop)
    # the clients close whatever fails, so no thread of theirs outlives the test (left
    # running, they log into later tests' captured output)
    try:
        try:
            # the group of two splits all five queues of both brokers between its members
            every = {MessageQueue("CT", n, q) for n, k in QUEUES.items() for q in range(k)}
            wait(lambda: c1.assignment("CT") | c2.assignment("CT") == every
                 and not c1.assignment("CT") & c2.assignment("CT")
                 and c1.assignment("CT") and c2.assignment("CT"), 60, "the group to own all queues")
            sender.start()
            wait(lambda: len(acked) >= 150, 60, "150 sends")
            # the group pauses, so B holds SEND_OK messages nobody consumed when it dies
            c1.suspend()
            c2.suspend()
            phase["now"] = "paused"
            n_paused = len(acked)
            wait(lambda: outcomes[f"paused {B}"] >= 60, 60, "60 sends to B while paused")
            cluster.kill(B)                                   # kill -9 mid-stream
            phase["now"] = "down"
            unconsumed_on_b = {k for k, b in acked[n_paused:] if b == B}
            c1.resume()
            c2.resume()
            cluster.wait_route("CT", {A: 2})                  # the NameServer dropped B at once
            n_down = len(acked)
            wait(lambda: len(acked) >= n_down + 100, 60, "100 sends while B is down")
            # the members rebalanced over A's two queues and keep consuming them
            wait(lambda: c1.assignment("CT") | c2.assignment("CT") ==
                 {MessageQueue("CT", A, 0), MessageQueue("CT", A, 1)}, 30, "a rebalance onto A")
            # the client forgets B when it re-reads the NameServer's broker list (every 30 s;
            # asked for now): no more heartbeats to a dead address
            producer.transport._learn_brokers()
            assert producer.transport.broker_names() == [A]
            sent_to_a_while_down = {k for k, b in acked[n_down:] if b == A}
            assert got.wait_for(sent_to_a_while_down, 60) == set()
            with got.lock:
                consumed_before_restart = unconsumed_on_b & got.keys
            # (a pull already in flight when the group paused may have brought back a few)
            assert len(consumed_before_restart) <= len(unconsumed_on_b) // 2
            # ordered sends to B's queues fail rather than land elsewhere
            with pytest.raises(TransportError, match="never fail over"):
                producer.send(Message("CT", b"ordered"), MessageQueue("CT", B, 1))
            with pytest.raises((MQClientError, TransportError)):
                producer.send(Message("CT", b"ordered"), selector=ToBroker(B), arg=7)
            cluster.restart(B)
            phase["now"] = "after"
            cluster.wait_route("CT", QUEUES)
            wait(lambda: outcomes[f"after {B}"] >= 30, 60, "sends to the restarted B")
            wait(lambda: c1.assignment("CT") | c2.assignment("CT") == every, 60,
                 "the group to own B's queues again")
        finally:
            stop.set()
            if sender.is_alive():
                sender.join(30)
        keys = {k for k, _ in acked}
        missing = got.wait_for(keys, 90)
        assert not missing, f"{len(missing)} SEND_OK messages never consumed " \
                            f"(of {len(keys)}; outcomes {dict(outcomes)})"
    finally:
        producer.shutdown()
        c1.shutdown()
        c2.shutdown()
    # every send either succeeded or raised: no other status under SYNC_FLUSH
    assert set(outcomes) <= {"SEND_OK", "raised TransportError", "raised MQClientError",
                             "raised MQBrokerError"} | {f"{p} {b}" for p in
                                                        ("before", "paused", "down",
                                                         "after")
                                                        for b in (A, B)}
    # before the kill both brokers took sends; while B was down only A did (a send already
    # on its way to B when it died may still have been answered)
    assert outcomes[f"before {A}"] > 0 and outcomes[f"before {B}"] > 0
    assert outcomes[f"down {A}"] >= 100 and outcomes[f"down {B}"] <= 1
    # B's unconsumed messages of before the crash came after the restart
    assert len(unconsumed_on_b) >= 60 and unconsumed_on_b <= set(got.by_broker[B])


def test_a_hung_broker_expires_and_fault_avoidance_stops_waiting_for_it(tmp_path):
    """SIGSTOP: the broker's connections stay open, so only timeouts tell. Without fault
    avoidance every send whose first attempt picks it waits out the whole send timeout (the
    attempt gets all that is left of it, as in RocketMQ); with it, one timeout isolates the
    broker and later sends go straight to the other. The NameServer drops the broker after
    --broker-expire without a registration."""
    # brokers re-register every 10 s (RocketMQ's shortest period), so A stays while the
    # paused B expires after 15 s
    c = Cluster(tmp_path, [A, B], conf={**SYNC_FLUSH_CONF, "registerNameServerPeriod": "10000"},
                namesrv_args=["--broker-expire", "15", "--scan-interval", "0.5"])
    c.create_topic("HT", QUEUES)
    try:
        c.start()
        c.wait_route("HT", QUEUES)
        plain = Producer("pg-plain", namesrv_addr=c.namesrv_addr, send_msg_timeout=400,
                         poll_name_server_interval=60000).start()
        avoid = Producer("pg-avoid", namesrv_addr=c.namesrv_addr, send_msg_timeout=400,
                         poll_name_server_interval=60000, send_latency_fault_enable=True).start()
        try:
            for p in (plain, avoid):          # routes cached (for a minute) while B works
                assert {p.send(Message("HT", b"w")).message_queue.broker_name
                        for _ in range(10)} == {A, B}
            c.pause(B)
            outcome: dict[str, Counter[str]] = {"plain": Counter(), "avoid": Counter()}
            for name, p in (("plain", plain), ("avoid", avoid)):
                for i in range(10):
                    try:
                        r = p.send(Message("HT", b"h-%d" % i))
                    except TransportError:
                        outcome[name]["raised"] += 1
                    else:
                        outcome[name][r.message_queue.broker_name] += 1
            # a retry after a timeout finds no time left: the send raises
            assert outcome["plain"]["raised"] >= 3, outcome
            assert outcome["avoid"]["raised"] <= 1 and outcome["avoid"][A] >= 9, outcome
            assert not avoid.fault_strategy.is_available(B)
            c.wait_route("HT", {A: 2}, timeout=60)        # expired at the NameServer
        finally:
            if c.nodes[B].paused:
                c.resume(B)           # so the producers' goodbyes do not wait for it
            plain.shutdown()
            avoid.shutdown()
    finally:
        codes = c.stop()
    assert all(rc == 0 for rc in codes.values()), codes


CPP_TOPIC = "CppCluster"


def test_cpp_client_sends_and_consumes_across_both_brokers(tmp_path):
    pytest.importorskip("rocketmq.client")
    from test_broker_interop import PRODUCE, PUSH_CONSUME, run_client
    c = Cluster(tmp_path, [A, B])
    c.create_topic(CPP_TOPIC, QUEUES)
    try:
        c.start()
        c.wait_route(CPP_TOPIC, QUEUES)
        sent = run_client(tmp_path, PRODUCE, c.namesrv_addr, CPP_TOPIC, 20, 0, 0)
        assert [r["status"] for r in sent] == [0] * 20
        got = run_client(tmp_path, PUSH_CONSUME, c.namesrv_addr, "CG-cpp-cluster", CPP_TOPIC,
                         20, "0", 60)
        assert sorted({r["body"] for r in got}) == sorted(f"S-{i}" for i in range(20))
    finally:
        codes = c.stop()
    assert all(rc == 0 for rc in codes.values()), codes
    per_broker = {}
    for name, node in c.nodes.items():
        with MessageStore.open(str(node.store), StoreConfig(mapped_file_size_commit_log=16 << 20),
                               read_only=True) as s:
            per_broker[name] = sorted(
                bytes(m.body).decode() for q in range(QUEUES[name])
                for m in s.get_message("check", CPP_TOPIC, q, 0, max_msgs=64).messages)
    # the C++ producer round-robins over all five queues: both brokers got their share
    assert len(per_broker[A]) >= 4 and len(per_broker[B]) >= 6
    assert sorted(per_broker[A] + per_broker[B]) == sorted(f"S-{i}" for i in range(20))


@pytest.mark.parametrize("args", [["--broker-expire", "0"], ["--scan-interval", "-1"]])
def test_namesrv_refuses_non_positive_expiry_settings(args):
    proc = subprocess.run([sys.executable, "-m", "rocketstore", "namesrv", "--listen",
                           "127.0.0.1:0", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("rocketstore namesrv: --broker-expire ")
    assert "expected seconds > 0" in proc.stderr and proc.stderr.count("\n") == 1


def test_broker_conf_register_period_is_checked():
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.errors import InvalidConfigError
    assert BrokerConfig().register_name_server_period == 30_000
    with pytest.raises(InvalidConfigError, match="register_name_server_period"):
        BrokerConfig(register_name_server_period=0)
