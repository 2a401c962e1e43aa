"""The NameServer's request kinds (docs/protocol.md "Limits"): a flood of registrations from
one client fills only the registrations' bounded queue (SYSTEM_BUSY naming the setting past
it) while other clients' route lookups and KV calls go on being answered.

A real ``rocketstore namesrv`` process attacked with hand-built frames (tests/rawwire.py).
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from rawwire import RawClient, frame
from servers import start_namesrv

PUT_KV_CONFIG, GET_KV_CONFIG, REGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC = 100, 101, 103, 105
SUCCESS, SYSTEM_BUSY, TOPIC_NOT_EXIST = 0, 2, 17


def register_body(topics: int) -> bytes:
    """A REGISTER_BROKER body naming ``topics`` topics (slow to decode and register)."""
    table = {f"Flood{i}": {"topicName": f"Flood{i}", "readQueueNums": 4, "writeQueueNums": 4,
                           "perm": 6} for i in range(topics)}
    return json.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}},
        "filterServerList": []}).encode()


def test_a_registration_flood_fills_its_own_queue_and_lookups_go_on(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("registerBrokerThreadPoolNums=1\nregisterBrokerThreadPoolQueueCapacity=2\n")
    ns = start_namesrv(tmp_path, ["-c", str(conf)])
    try:
        body = register_body(20_000)
        n, conns = 10, 4
        answers: list[dict] = []

        def flood(c: int) -> None:
            # one connection holds about two such bodies at once (its pending bytes): the
            # queue fills from several
            with RawClient(ns.addr, timeout=120) as evil:
                evil.send(b"".join(frame(REGISTER_BROKER, {
                    "brokerName": f"flood{c}-{i}", "brokerAddr": f"10.0.{c}.{i}:10911",
                    "clusterName": "C", "haServerAddr": f"10.0.{c}.{i}:10912", "brokerId": 0,
                    "compressed": "false", "bodyCrc32": 0}, body) for i in range(n)))
                for _ in range(n):
                    answers.append(evil.read_response()[0])
        threads = [threading.Thread(target=flood, args=(c,)) for c in range(conns)]
        for t in threads:
            t.start()
        lookups = 0
        with RawClient(ns.addr, timeout=30) as other:
            h, _ = other.call(PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"})
            assert h["code"] == SUCCESS, h
            while any(t.is_alive() for t in threads):
                h, _ = other.call(GET_ROUTEINFO_BY_TOPIC, {"topic": "Elsewhere"})
                assert h["code"] == TOPIC_NOT_EXIST, h
                h, _ = other.call(GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
                assert h["code"] == SUCCESS and h["extFields"]["value"] == "v", h
                lookups += 1
            for t in threads:
                t.join()
            # what was accepted is registered
            h, body_ = other.call(GET_ROUTEINFO_BY_TOPIC, {"topic": "Flood7"})
            assert h["code"] == SUCCESS, h
        codes = [a["code"] for a in answers]
        print(f"\n{n * conns} registrations: {codes.count(SUCCESS)} registered, "
              f"{codes.count(SYSTEM_BUSY)} SYSTEM_BUSY; {lookups} lookups of another client")
        assert len(answers) == n * conns and set(codes) <= {SUCCESS, SYSTEM_BUSY}, codes
        assert SUCCESS in codes and SYSTEM_BUSY in codes, codes
        busy = next(a for a in answers if a["code"] == SYSTEM_BUSY)
        assert "registerBrokerThreadPoolQueueCapacity" in busy["remark"], busy
        assert lookups > 0
    finally:
        ns.stop()


def test_one_connection_holds_about_max_pending_bytes_of_request_bodies(tmp_path: Path) -> None:
    """A request being answered reserves its body against serverMaxPendingResponseBytes
    (4 MiB): one connection pipelining 2.5 MiB registrations has two in the NameServer at a
    time (the rest wait in the socket), so it neither holds 25 MiB of bodies nor fills the
    registrations' queue (1 thread + 1 waiting) by itself."""
    conf = tmp_path / "namesrv.properties"
    conf.write_text("registerBrokerThreadPoolNums=1\nregisterBrokerThreadPoolQueueCapacity=1\n")
    ns = start_namesrv(tmp_path, ["-c", str(conf)])
    try:
        body = register_body(100)
        pad = (5 << 19) - len(body)            # 2.5 MiB: JSON whitespace after the object
        assert pad > 0
        body += b" " * pad
        n = 10
        with RawClient(ns.addr, timeout=120) as c:
            c.send(b"".join(frame(REGISTER_BROKER, {
                "brokerName": f"pipe{i}", "brokerAddr": f"10.3.0.{i}:10911",
                "clusterName": "C", "haServerAddr": f"10.3.0.{i}:10912", "brokerId": 0,
                "compressed": "false", "bodyCrc32": 0}, body) for i in range(n)))
            codes = [c.read_response()[0]["code"] for _ in range(n)]
        assert codes == [SUCCESS] * n, codes
    finally:
        ns.stop()
