#!/usr/bin/env python3
"""Broker services: delayed delivery and transactions, each against a same-run baseline.

Rows (100 B bodies unless --body; one broker on a temp store, ASYNC_FLUSH):
  send (baseline)        Broker.send_message of --count plain messages, one at a time
  delay send             the same with DELAY=1: the send path's rewrite to SCHEDULE_TOPIC_XXXX
  delay delivery         ScheduleMessageService restoring those --count records to their real
                         topic, all already due (level 1 = 1 s here): from the service's start
                         to the last record in the real topic's consume queue
  half send              the same count as transactional halves (TRAN_MSG, PGROUP)
  commit                 END_TRANSACTION COMMIT of every half (final record + op message each)
  check round            --count unresolved halves, one check round: re-append a copy, ask the
                         group's producer (a channel that commits at once), commit the copy

Ratios are the row's rate / the plain send rate of the same run. The machine is shared:
figures move with other load.

Usage: python tools/bench_services.py [--count N] [--body B]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketstore import Message, StoreConfig  # noqa: E402
from rocketstore.broker.broker import Broker  # noqa: E402
from rocketstore.broker.config import BrokerConfig  # noqa: E402
from rocketstore.broker.schedule import ScheduleMessageService  # noqa: E402
from rocketstore.common.constants import SCHEDULE_TOPIC  # noqa: E402
from rocketstore.common.protocol import (EndTransactionRequest, HeartbeatData,  # noqa: E402
                                         ResponseCode, SendMessageRequest,
                                         TransactionCommitType)

GROUP = "BenchTx"


def send_all(broker: Broker, topic: str, msgs: list[Message]) -> list:
    futures = [broker.send_message(SendMessageRequest(GROUP, topic, 0, [m])) for m in msgs]
    out = [f.result() for f in futures]
    bad = [r for r in out if r.code != ResponseCode.SUCCESS]
    if bad:
        raise SystemExit(f"send failed: {bad[0]}")
    return out


def wait_queue(broker: Broker, topic: str, queue_id: int, count: int, timeout_s: float) -> None:
    store = broker.store
    ok = store.notifier.wait(lambda: store.get_max_offset_in_queue(topic, queue_id) >= count,
                             timeout_s)
    if not ok:
        raise SystemExit(f"{topic}/{queue_id}: only {store.get_max_offset_in_queue(topic, queue_id)}"
                         f" of {count} after {timeout_s} s")


class CommitAtOnce:
    """A producer's client channel that commits every checked half (oneway)."""

    client_id = "bench-client"

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.checks = 0

    def check_transaction_state(self, broker_name, request, msg) -> None:
        self.checks += 1
        self.broker.end_transaction(EndTransactionRequest(
            GROUP, request.tran_state_table_offset, request.commit_log_offset,
            TransactionCommitType.COMMIT_TYPE, from_transaction_check=True))

    def notify_consumer_ids_changed(self, group: str) -> None:
        pass


def row(name: str, n: int, seconds: float, base: float | None) -> float:
    rate = n / seconds
    ratio = f"{rate / base:6.2f}x" if base else "  base "
    print(f"{name:<16} {n:>8,} msgs {seconds:8.3f} s {rate:>12,.0f} msgs/s  {ratio}")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--body", type=int, default=100)
    args = ap.parse_args()
    n, body = args.count, b"x" * args.body
    root = tempfile.mkdtemp(prefix="bench-services-")
    try:
        cfg = BrokerConfig(transaction_check_interval=3_600_000, transaction_time_out=1)
        with Broker.open(root, cfg, StoreConfig(message_delay_level="1s 2s")) as broker:
            print(f"rocketstore broker services, {n:,} messages of {len(body)} B "
                  f"(shared machine: figures move with other load)")
            msgs = [Message("Plain", body, properties={"WAIT": "true"}) for _ in range(n)]
            t = time.perf_counter()
            send_all(broker, "Plain", msgs)
            base = row("send (baseline)", n, time.perf_counter() - t, None)

            delayed = [Message("Delayed", body, properties={"DELAY": "1", "WAIT": "true"})
                       for _ in range(n)]
            # the broker's service is stopped while the records are sent and come due, so a
            # fresh one measures delivery alone (not the rate at which records come due)
            broker.schedule_service.shutdown()
            t = time.perf_counter()
            sent = send_all(broker, "Delayed", delayed)
            row("delay send", n, time.perf_counter() - t, base)
            wait_queue(broker, SCHEDULE_TOPIC, 0, n, 60)
            last = broker.store.look_message_by_id(sent[-1].msg_id)
            time.sleep(max(0.0, (last.store_timestamp + 1000) / 1000 - time.time()) + 0.05)
            sched = ScheduleMessageService(broker)
            t = time.perf_counter()
            sched.start()
            wait_queue(broker, "Delayed", 0, n, 300)
            row("delay delivery", n, time.perf_counter() - t, base)
            sched.shutdown()
            assert sched.delivered == n

            halves = [Message("Tx", body, properties={"TRAN_MSG": "true", "PGROUP": GROUP,
                                                      "WAIT": "true"}, sys_flag=0x4)
                      for _ in range(n)]
            t = time.perf_counter()
            resp = send_all(broker, "Tx", halves)
            row("half send", n, time.perf_counter() - t, base)
            offs = [broker.store.look_message_by_id(r.msg_id).commitlog_offset for r in resp]
            t = time.perf_counter()
            for r, off in zip(resp, offs):
                res = broker.end_transaction(EndTransactionRequest(
                    GROUP, r.queue_offset, off, TransactionCommitType.COMMIT_TYPE))
                assert res.code == ResponseCode.SUCCESS, res
            row("commit", n, time.perf_counter() - t, base)

            pending = [Message("Tx", body, properties={"TRAN_MSG": "true", "PGROUP": GROUP,
                                                       "WAIT": "true"}, sys_flag=0x4)
                       for _ in range(n)]
            send_all(broker, "Tx", pending)
            channel = CommitAtOnce(broker)
            broker.heartbeat(HeartbeatData(channel.client_id, producer_groups=[GROUP]), channel)
            svc = broker.transaction_service
            store = broker.store
            store.notifier.wait(lambda: store.dispatch_behind_bytes() == 0, 60)
            time.sleep(0.01)
            t = time.perf_counter()
            # one round walks the committed halves (op messages) and checks the pending ones
            svc.check(wait_check_backs=True)
            row("check round", n, time.perf_counter() - t, base)
            if channel.checks != n:
                raise SystemExit(f"check round asked {channel.checks} of {n} halves")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
