"""A cluster end to end, on real processes (issue 14's "done when"): one ``rocketstore namesrv``
and two ``rocketstore broker`` (SYNC_FLUSH, plain ACL on), a signed producer and consumer group,
ACL refusals, a kill -9 of one broker mid-stream and its restart, then a Spark read over the
wire across both brokers. Nothing that got SEND_OK is lost: the group consumes every one of
them, and Spark reads each exactly once.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from cluster_support import SYNC_FLUSH_CONF, Cluster
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, Producer, PushConsumer,
                                SendStatus)
from rocketstore.errors import MQBrokerError, MQClientError, TransportError

pytestmark = pytest.mark.spark

A, B = "broker-a", "broker-b"
KEY, SECRET = "pipeline1", "pipeline-secret"
ACL = f"""\
accounts:
  - accessKey: {KEY}
    secretKey: {SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - E2E=PUB|SUB
"""
FAST = {"poll_name_server_interval": 300, "heartbeat_broker_interval": 1000}
SIGNED = {"access_key": KEY, "secret_key": SECRET, **FAST}
SEND_ERRORS = (MQBrokerError, MQClientError, TransportError)


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_cluster_with_acl_survives_a_broker_kill_and_spark_reads_both_brokers(tmp_path, spark):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    conf = {**SYNC_FLUSH_CONF, "aclEnable": "true", "aclFile": str(acl_file)}
    with Cluster(tmp_path, (A, B), conf=conf) as c:
        c.create_topic("E2E", {A: 2, B: 2})
        c.create_topic("Secret", {A: 1, B: 1})
        c.start()
        c.wait_route("E2E", {A: 2, B: 2})
        ns = c.namesrv_addr

        # ACL refusals: a wrong secret, and a topic the account may not publish to
        with Producer("e2e-bad", namesrv_addr=ns, access_key=KEY, secret_key="wrong-secret",
                      **FAST) as bad:
            with pytest.raises(SEND_ERRORS, match="(?i)signature|permission"):
                bad.send(Message("E2E", b"refused"))
        with Producer("e2e-denied", namesrv_addr=ns, **SIGNED) as p:
            with pytest.raises(SEND_ERRORS, match="permission for topic:Secret: accessKey=pipeline1"):
                p.send(Message("Secret", b"refused"))

        lock = threading.Lock()
        consumed: Counter[str] = Counter()

        def listener(msgs, ctx):
            with lock:
                consumed.update(m.uniq_key for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        group = PushConsumer("e2e-group", namesrv_addr=ns,
                             consume_from_where="CONSUME_FROM_FIRST_OFFSET", **SIGNED)
        group.subscribe("E2E", "*")
        group.register_message_listener(listener)
        group.start()
        producer = Producer("e2e-pg", namesrv_addr=ns, **SIGNED).start()
        acked: dict[str, str] = {}           # UNIQ_KEY -> broker of every SEND_OK
        raised = 0
        try:
            def send(n: int, tag: str) -> None:
                nonlocal raised
                for i in range(n):
                    try:
                        r = producer.send(Message("E2E", f"{tag}-{i}".encode()))
                    except SEND_ERRORS:
                        raised += 1
                        continue
                    assert r.status is SendStatus.SEND_OK
                    acked[r.msg_id] = r.message_queue.broker_name
                    time.sleep(0.002)

            send(60, "before")
            assert Counter(acked.values()) == {A: 30, B: 30}     # round-robin over 4 queues
            c.kill(B)                                            # kill -9 mid-stream
            send(40, "down")
            c.wait_route("E2E", {A: 2})
            down = list(acked)[60:]
            assert len(down) == 40 and all(acked[k] == A for k in down)   # retried on A
            _wait(lambda: all(consumed[k] for k in down), 60,    # the group keeps consuming A
                  "the group to consume A's messages while B is down")
            c.restart(B)
            c.wait_route("E2E", {A: 2, B: 2})
            send(40, "after")
            assert {A, B} <= set(list(acked.values())[-40:])
            _wait(lambda: all(consumed[k] for k in acked), 90,
                  f"every SEND_OK message consumed ({len(acked)}, {raised} sends raised)")
        finally:
            producer.shutdown()
            group.shutdown()

        # Spark over the wire, signed: every message of both brokers, each once
        def read(**options: str):
            reader = spark.read.format("rocketstore").option("namesrv", ns).option("topics", "E2E")
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        rows = read(accessKey=KEY, secretKey=SECRET).select(
            "broker_name", "queue_id", "queue_offset", "properties").collect()
        where = Counter((r["broker_name"], r["queue_id"], r["queue_offset"]) for r in rows)
        assert max(where.values()) == 1
        read_keys = Counter(dict(r["properties"])["UNIQ_KEY"] for r in rows)
        assert set(acked) <= set(read_keys) and max(read_keys.values()) == 1
        by_broker = Counter(r["broker_name"] for r in rows)
        assert by_broker[A] >= sum(b == A for b in acked.values())
        assert by_broker[B] >= sum(b == B for b in acked.values())
        # and unsigned, the brokers refuse it
        with pytest.raises(Exception, match="(?i)accessKey|permission"):
            read().count()
