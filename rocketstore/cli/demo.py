"""``rocketstore demo``: the README's main job.

A broker on an embedded store directory, used as an application would use RocketMQ: producers
send orders (one by one, in batches, asynchronously), a consumer group of two push consumers
shares the queues, a listener failure goes to the retry topic and comes back, a delayed
message arrives after its delay, a transaction commits, and one topic is consumed in order per
order id. The broker is then closed and reopened (recovery) and a message is looked up by id.
Figures are printed; ``--keep`` keeps the store (it is removed otherwise).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time

DEFAULT_STORE_DIR = os.path.join(".rocketstore", "demo")


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))] if s else float("nan")


PACED_RATE = 5_000          # msgs/s: the steady phase, well below what the group consumes
PACED_SECONDS = 2.0


def _demo(args: argparse.Namespace) -> int:
    from rocketstore import StoreConfig
    from rocketstore.store.topics import TopicConfig
    from rocketstore.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.client import (ConsumeConcurrentlyStatus, ConsumeOrderlyStatus,
                                    LocalTransactionState, Message, Producer, PushConsumer,
                                    SelectMessageQueueByHash, TransactionProducer)

    if os.path.isdir(args.dir) and not args.keep:
        shutil.rmtree(args.dir)
    # one-second delay levels keep the retry and delay legs of the demo short
    store_cfg = StoreConfig(mapped_file_size_commit_log=args.file_size,
                            message_delay_level=" ".join(["1s"] * 18))
    broker_cfg = BrokerConfig(transaction_check_interval=1000, transaction_time_out=500)
    total = args.messages
    tags = ["created", "paid", "shipped", "cancelled", "refunded"]
    payload = b"{" + b'"amount": 12.5, "currency": "EUR", "items": 3' + b"}"
    fails = {f"order-{i}" for i in range(0, total, max(1, total // 20))}
    fails_left = set(fails)
    lock = threading.Lock()
    seen: set[str] = set()
    latencies: list[float] = []
    # the same latencies by how the order was sent: one by one, in batches, async
    phases: tuple[list[float], list[float], list[float]] = ([], [], [])
    third = total // 3
    retried: list[int] = []
    done = threading.Event()
    paced: list[float] = []         # latencies of the steady phase (keys "paced-N")
    paced_n = int(PACED_RATE * PACED_SECONDS)
    paced_done = threading.Event()
    # first deliveries consumed or sent to the retry topic, and when that reached ``total``
    first_handled: list[float] = [0, 0.0]

    def key_of(m) -> str:
        keys = m.keys               # parsed from the record's properties: once per message
        return keys[0] if keys else ""

    def listener(msgs, ctx):
        now = time.time() * 1000
        keys = [key_of(m) for m in msgs]
        with lock:
            for key in keys:
                if key in fails_left:             # fail once: retry topic, then back again
                    fails_left.discard(key)
                    first_handled[0] += len(msgs)
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER
            for m, key in zip(msgs, keys):
                if key.startswith("paced-"):
                    paced.append(now - m.born_timestamp)
                    if len(paced) >= paced_n:
                        paced_done.set()
                    continue
                if m.reconsume_times:
                    retried.append(m.reconsume_times)
                else:
                    lat = now - m.born_timestamp
                    latencies.append(lat)
                    i = int(key[6:])
                    phases[0 if i < third else 1 if i < 2 * third else 2].append(lat)
                    first_handled[0] += 1
                    if first_handled[0] >= total and not first_handled[1]:
                        first_handled[1] = time.perf_counter()
                seen.add(key)
            if len(seen) >= total:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    t_start = time.perf_counter()
    with Broker.open(args.dir, broker_cfg, store_cfg) as broker:
        # topics are created up front, as an operator would (mqadmin updateTopic); a consumer
        # of a topic that does not exist yet finds it only at its next rebalance (20 s)
        for name in ("Orders", "Side", "OrderEvents"):
            broker.store.update_topic_config(TopicConfig(name, read_queue_nums=args.queues,
                                                         write_queue_nums=args.queues))
        consumers = []
        for i in range(2):
            c = PushConsumer("demo-orders", broker=broker, instance_name=f"consumer-{i}",
                             consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                             consume_message_batch_max_size=32, pull_batch_size=64)
            c.subscribe("Orders", "*")
            c.register_message_listener(listener)
            consumers.append(c.start())
        with Producer("demo-producer", broker=broker) as p:
            t_send = t0 = time.perf_counter()
            first = None
            for i in range(third):
                r = p.send(Message("Orders", payload, tags=tags[i % 5], keys=[f"order-{i}"]))
                first = first or r
            sync_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            for j in range(third, 2 * third, 100):
                p.send_batch([Message("Orders", payload, tags=tags[i % 5], keys=[f"order-{i}"])
                              for i in range(j, min(j + 100, 2 * third))])
            batch_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            futs = [p.send_async(Message("Orders", payload, tags=tags[i % 5], keys=[f"order-{i}"]))
                    for i in range(2 * third, total)]
            for f in futs:
                f.result()
            async_s = time.perf_counter() - t0
            ok = done.wait(args.timeout)
            consume_s = time.perf_counter() - t_send
            # latency at a steady rate the group keeps up with: one by one, paced
            t0 = time.perf_counter()
            for i in range(paced_n):
                p.send(Message("Orders", payload, tags=tags[i % 5], keys=[f"paced-{i}"]))
                pause = t0 + (i + 1) / PACED_RATE - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            paced_done.wait(30)
            # a delayed message (level 2) and a committed transaction
            arrived: dict[str, float] = {}
            got = threading.Event()

            def side(msgs, ctx):
                for m in msgs:
                    arrived[m.keys[0]] = time.time()
                if {"delayed", "tx"} <= arrived.keys():
                    got.set()
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            sc = PushConsumer("demo-side", broker=broker,
                              consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            sc.subscribe("Side", "*")
            sc.register_message_listener(side)
            sc.start()
            sent_delayed = time.time()
            p.send(Message("Side", b"later", keys=["delayed"], properties={"DELAY": "2"}))

            class Tx:
                def execute_local_transaction(self, msg, arg):
                    return LocalTransactionState.COMMIT_MESSAGE

                def check_local_transaction(self, msg):
                    return LocalTransactionState.COMMIT_MESSAGE
            tp = TransactionProducer("demo-tx", Tx(), broker=broker).start()
            try:
                tp.send_message_in_transaction(Message("Side", b"paid", keys=["tx"]), None)
                got.wait(30)
            finally:
                tp.shutdown()
            sc.shutdown()
            # orderly: events of each order in send order
            orders: dict[int, list[int]] = {}
            olock = threading.Lock()
            n_orders, steps = 50, 5
            finished = threading.Event()

            def orderly(msgs, ctx):
                with olock:
                    for m in msgs:
                        oid, step = map(int, bytes(m.body).split(b":"))
                        orders.setdefault(oid, []).append(step)
                    if sum(map(len, orders.values())) >= n_orders * steps:
                        finished.set()
                return ConsumeOrderlyStatus.SUCCESS
            oc = PushConsumer("demo-orderly", broker=broker,
                              consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            oc.subscribe("OrderEvents", "*")
            oc.register_message_listener(orderly, orderly=True)
            oc.start()
            by_hash = SelectMessageQueueByHash()
            for step in range(steps):
                for oid in range(n_orders):
                    p.send(Message("OrderEvents", b"%d:%d" % (oid, step)), selector=by_hash,
                           arg=oid)
            finished.wait(30)
            oc.shutdown()
        for c in consumers:
            c.shutdown()
        probe = first.offset_msg_id if first is not None else None
    t0 = time.perf_counter()
    with Broker.open(args.dir, broker_cfg, store_cfg) as broker:
        reopen_s = time.perf_counter() - t0
        found = broker.store.look_message_by_id(probe) if probe else None
        rec = broker.store.recovery
    in_order = all(v == list(range(steps)) for v in orders.values()) and len(orders) == n_orders
    print(f"broker on {os.path.abspath(args.dir)} (topic Orders, {args.queues} queues)")
    print(f"send  {third:,} one by one: {third / sync_s:,.0f} msgs/s; {third:,} in batches of "
          f"100: {third / batch_s:,.0f} msgs/s; {total - 2 * third:,} async: "
          f"{(total - 2 * third) / async_s:,.0f} msgs/s")
    first_s = first_handled[1] - t_send if first_handled[1] else consume_s
    print(f"consumer group 'demo-orders' (2 push consumers, 32-message batches): {len(seen):,} of "
          f"{total:,} orders consumed, every first delivery within {first_s:.1f} s of the first "
          f"send ({total / first_s:,.0f} msgs/s), the retried ones back by {consume_s:.1f} s "
          f"(1 s delay level); end-to-end latency p50 "
          f"{_pct(latencies, .5):.1f} ms, p99 {_pct(latencies, .99):.1f} ms (producers at full "
          f"speed outrun the consumers they share this process with: this is mostly queueing)")
    print(f"end-to-end latency at a steady {PACED_RATE:,} msgs/s ({len(paced):,} orders sent one "
          f"by one): p50 {_pct(paced, .5):.1f} ms, p99 {_pct(paced, .99):.1f} ms")
    print("latency by how orders were sent (p50 / p99 ms): " + "; ".join(
        f"{name} {_pct(v, .5):.1f} / {_pct(v, .99):.1f}"
        for name, v in zip(("one by one", "batches", "async"), phases)))
    print(f"retries: {len(fails)} listener failures sent their batches ({len(retried):,} "
          f"messages) through %RETRY%demo-orders; each came back (reconsume times "
          f"{sorted(set(retried))})")
    if "delayed" in arrived:
        print(f"delay level 2: arrived after {arrived['delayed'] - sent_delayed:.1f} s")
    print(f"transaction: {'committed and consumed' if 'tx' in arrived else 'NOT consumed'}")
    print(f"orderly: {n_orders} orders x {steps} events over {args.queues} queues, "
          f"{'each in send order' if in_order else 'OUT OF ORDER'}")
    print(f"reopen: {reopen_s * 1000:.0f} ms ({rec['files_scanned']} of {rec['files']} "
          f"commit-log file(s) scanned); lookup by id {probe}: "
          f"{'found' if found is not None else 'NOT FOUND'}")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    good = ok and len(seen) == total and in_order and found is not None and \
        {"delayed", "tx"} <= arrived.keys() and len(paced) >= paced_n
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    if not good:
        print("demo: something did not arrive as sent", file=sys.stderr)
    return 0 if good else 1


def register(sub) -> None:
    """Add ``demo``: the README's main job."""
    demo = sub.add_parser("demo",
                          help="a broker, producers and a consumer group on an embedded store")
    demo.add_argument("--dir", default=DEFAULT_STORE_DIR,
                      help=f"store directory (default {DEFAULT_STORE_DIR})")
    demo.add_argument("--messages", type=int, default=200_000,
                      help="orders to send and consume (default 200,000)")
    demo.add_argument("--queues", type=int, default=8, help="queues per topic (default 8)")
    demo.add_argument("--file-size", type=int, default=64 * 1024 * 1024,
                      help="commit-log file size in bytes (RocketMQ's default is 1 GiB)")
    demo.add_argument("--timeout", type=float, default=300, help="seconds to wait for consumers")
    demo.add_argument("--keep", action="store_true", help="keep the store afterwards")
    demo.set_defaults(func=_demo)
