"""ScheduleMessageService: delayed delivery on short test levels, restored records' bytes,
delayOffset.json, and a restart with delays pending (MESSAGING.md §9)."""
from __future__ import annotations

import os
import threading
import time
import zlib
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.schedule import ScheduleMessageService
from rocketstore.common.constants import SCHEDULE_TOPIC

from pulling import pull_all

LEVELS = "1s 2s 3s 30s"
TOPIC = "DelayTopic"


def _config(**kw) -> StoreConfig:
    # a broker's store: RocketMQ 4.9.8's records byte for byte (no record CRC property)
    kw.setdefault("enabled_append_prop_crc", False)
    # 1 MiB files: a default 1 GiB commit log (allocated for real) per test fills a shared disk
    kw.setdefault("mapped_file_size_commit_log", 1 << 20)
    return StoreConfig(message_delay_level=LEVELS, **kw)


def schedule_put(store: MessageStore, body: bytes, level: int, *, topic: str = TOPIC,
                 queue_id: int = 0, props: dict | None = None, **fields):
    """Store a delayed message as 4.9.8's put-side rewrite does (docs/format.md §11): DELAY stays,
    REAL_TOPIC/REAL_QID added, SCHEDULE_TOPIC_XXXX queue level-1."""
    properties = {"WAIT": "true", **(props or {}), "DELAY": str(level),
                  "REAL_TOPIC": topic, "REAL_QID": str(queue_id)}
    r = store.put_message(Message(SCHEDULE_TOPIC, body, properties=properties, **fields),
                          level - 1)
    assert r.ok, r.status
    return r


def until(cond, timeout_s: float) -> bool:
    """Poll a condition no store event announces (the service's own counters)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def wait_for(store: MessageStore, topic: str, count: int, queue_id: int = 0,
             timeout_s: float = 30.0) -> list:
    """Long-poll the queue until ``count`` messages are there (event-driven, generous limit)."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {count} messages reached {topic} in {timeout_s} s"
        r = store.get_message("test", topic, queue_id, len(out), 32,
                              timeout_ms=int(min(left, 1.0) * 1000))
        out += r.messages
    return out


def test_delivery_waits_for_the_level_and_keeps_order(store_dir):
    with MessageStore.open(store_dir, _config()) as store, \
            ScheduleMessageService(store) as svc:
        sent = {1: [], 2: []}
        for i in range(10):
            level = 1 + i % 2
            sent[level].append(schedule_put(store, f"L{level}-{i}".encode(), level,
                                            queue_id=level))
        got1 = wait_for(store, TOPIC, 5, queue_id=1)
        got2 = wait_for(store, TOPIC, 5, queue_id=2)
        for level, got in ((1, got1), (2, got2)):
            assert [bytes(m.body) for m in got] == \
                [f"L{level}-{i}".encode() for i in range(level - 1, 10, 2)]
            for m, r in zip(got, sent[level]):
                # no earlier than the level's delay after the scheduled record was stored
                assert m.store_timestamp >= r.store_timestamp + level * 1000
        assert svc.delivered == 10
        # nothing else went anywhere
        assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    assert svc.offsets() == {1: 5, 2: 5}


def test_restored_record_keeps_the_stored_properties_and_fields(store_dir):
    body = zlib.compress(b"x" * 5000, 5)
    with MessageStore.open(store_dir, _config()) as store, ScheduleMessageService(store):
        r = schedule_put(store, body, 1, queue_id=3, tags="TagA", keys=["k1", "k2"],
                         props={"UNIQ_KEY": "0A0000017F0018B4AAC2000000000001", "user": "v"},
                         flag=7, sys_flag=0x1, reconsume_times=2,
                         born_timestamp=1_700_000_000_000, born_host="10.0.0.7:4321")
        scheduled = store.look_message_by_offset(r.commitlog_offset, raw=True)
        [m] = wait_for(store, TOPIC, 1, queue_id=3)
        m = store.look_message_by_offset(m.commitlog_offset, raw=True)
        assert (m.topic, m.queue_id) == (TOPIC, 3)
        # messageTimeup serializes before removing DELAY / setting WAIT=false: the stored
        # string is the scheduled record's, DELAY, REAL_TOPIC, REAL_QID and WAIT=true included
        assert m.properties_bytes == scheduled.properties_bytes
        assert m.properties["DELAY"] == "1" and m.properties["WAIT"] == "true"
        assert m.properties["REAL_TOPIC"] == TOPIC and m.properties["REAL_QID"] == "3"
        assert m.uniq_key == "0A0000017F0018B4AAC2000000000001"
        assert bytes(m.stored_body) == body and m.sys_flag == 0x1 and m.flag == 7
        assert m.reconsume_times == 2
        assert (m.born_timestamp, m.born_host) == (1_700_000_000_000, "10.0.0.7:4321")
        assert m.prepared_transaction_offset == 0
        assert m.msg_id != scheduled.msg_id
        # read as a consumer reads it: decompressed
        assert bytes(store.look_message_by_offset(m.commitlog_offset).body) == b"x" * 5000


def test_half_topic_and_broken_destinations_are_not_delivered(store_dir):
    with MessageStore.open(store_dir, _config()) as store, ScheduleMessageService(store) as svc:
        schedule_put(store, b"half", 1, topic="RMQ_SYS_TRANS_HALF_TOPIC")
        store.put_message(Message(SCHEDULE_TOPIC, b"nowhere", properties={"DELAY": "1"}), 0)
        schedule_put(store, b"ok", 1)
        [m] = wait_for(store, TOPIC, 1)
        assert bytes(m.body) == b"ok"
        assert store.get_max_offset_in_queue("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0
        assert svc.delivered == 1
    assert svc.offsets() == {1: 3}


def test_delay_offset_json_layout_and_restart_with_pending_delays(store_dir):
    cfg = _config()
    with MessageStore.open(store_dir, cfg) as store:
        with ScheduleMessageService(store):
            for i in range(3):
                schedule_put(store, b"fast%d" % i, 1)
            wait_for(store, TOPIC, 3)
            for i in range(4):                       # 30 s: still pending at close
                schedule_put(store, b"slow%d" % i, 4, queue_id=1)
        path = os.path.join(store_dir, "config", "delayOffset.json")
        # fastjson layout, unquoted integer level keys; level 4 never delivered: absent
        assert Path(path).read_text() == '{\n\t"offsetTable":{1:3\n\t}\n}'
    # reopened: level 1 resumes after its 3 delivered units; level 4's units are 30 s away
    with MessageStore.open(store_dir, cfg) as store, ScheduleMessageService(store) as svc:
        assert svc.offsets() == {1: 3}
        time.sleep(0.5)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 3      # no redelivery of level 1
        assert store.get_max_offset_in_queue(TOPIC, 1) == 0      # not due yet
        assert svc.delivered == 0


def test_pending_delays_are_delivered_after_a_restart(store_dir):
    cfg = _config()
    with MessageStore.open(store_dir, cfg) as store:
        with ScheduleMessageService(store):
            sent = [schedule_put(store, b"p%d" % i, 3) for i in range(4)]   # 3 s
        # closed at once: nothing was due yet
        assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    with MessageStore.open(store_dir, cfg) as store, ScheduleMessageService(store) as svc:
        got = wait_for(store, TOPIC, 4)
        assert [bytes(m.body) for m in got] == [b"p0", b"p1", b"p2", b"p3"]
        for m, r in zip(got, sent):
            assert m.store_timestamp >= r.store_timestamp + 3000
        time.sleep(0.3)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 4
    assert svc.offsets() == {3: 4}
    path = os.path.join(store_dir, "config", "delayOffset.json")
    assert Path(path).read_text() == '{\n\t"offsetTable":{3:4\n\t}\n}'


def test_out_of_range_offsets_are_clamped_on_load(store_dir):
    cfg = _config()
    with MessageStore.open(store_dir, cfg) as store:
        schedule_put(store, b"a", 1)
        schedule_put(store, b"b", 1)
    os.makedirs(os.path.join(store_dir, "config"), exist_ok=True)
    with open(os.path.join(store_dir, "config", "delayOffset.json"), "w") as f:
        f.write('{"offsetTable":{1:999,2:-5,9:1}}')
    with MessageStore.open(store_dir, cfg) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        # 999 > max 2: clamped (issue #1869 stalled such a level forever); -5 -> 0; level 9
        # is not one of the 4 levels
        assert svc.offsets() == {1: 2, 2: 0}
        svc.close()                 # never started: still writes the corrected table
    assert Path(store_dir, "config", "delayOffset.json").read_text() == \
        '{\n\t"offsetTable":{1:2,2:0\n\t}\n}'


def test_close_stops_the_thread_while_a_delay_is_pending(store_dir):
    with MessageStore.open(store_dir, _config()) as store:
        svc = ScheduleMessageService(store)
        svc.start()
        schedule_put(store, b"later", 4)
        t0 = time.monotonic()
        svc.close()
        assert time.monotonic() - t0 < 5       # woken, not waiting out the 30 s delay
        assert not any(t.name == "ScheduleMessageService" for t in threading.enumerate())


# -- through a real Broker: the send path's DELAY rewrite, then this service ------------------

def _broker(store_dir):
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    return Broker.open(store_dir, BrokerConfig(), _config())


def _send(broker, body: bytes, level: int, queue_id: int = 0):
    from rocketstore.common.protocol import ResponseCode, SendMessageRequest
    msg = Message(TOPIC, body, tags="TagD", properties={"DELAY": str(level), "WAIT": "true"})
    resp = broker.send_message(SendMessageRequest("P", TOPIC, queue_id, [msg])).result(30)
    assert resp.code == ResponseCode.SUCCESS, resp
    return broker.store.look_message_by_id(resp.msg_id, raw=True)


def test_broker_send_with_delay_level_is_delivered_after_its_delay(store_dir):
    with _broker(store_dir) as broker:
        assert broker.schedule_service is not None
        scheduled = [_send(broker, b"d%d" % i, 2) for i in range(3)]
        assert {(m.topic, m.queue_id) for m in scheduled} == {(SCHEDULE_TOPIC, 1)}
        got = wait_for(broker.store, TOPIC, 3)
        assert [bytes(m.body) for m in got] == [b"d0", b"d1", b"d2"]
        for m, s in zip(got, scheduled):
            assert m.store_timestamp >= s.store_timestamp + 2000
            # the scheduled record's string: DELAY=2, REAL_TOPIC/REAL_QID, the client's WAIT
            assert m.properties_bytes == s.properties_bytes
            assert m.properties["DELAY"] == "2" and m.uniq_key == s.uniq_key
    assert Path(store_dir, "config", "delayOffset.json").read_text() == \
        '{\n\t"offsetTable":{2:3\n\t}\n}'


def test_broker_restart_keeps_pending_delays(store_dir):
    with _broker(store_dir) as broker:
        sent = [_send(broker, b"r%d" % i, 3) for i in range(2)]
    with _broker(store_dir) as broker:
        got = wait_for(broker.store, TOPIC, 2)
        assert [bytes(m.body) for m in got] == [b"r0", b"r1"]
        assert all(m.store_timestamp >= s.store_timestamp + 3000 for m, s in zip(got, sent))
        assert broker.schedule_service.offsets() == {3: 2}


def test_delayed_records_written_by_rocketmq_4_9_8_are_delivered_byte_for_byte(rocketmq_store):
    """The fixture store holds 27 DELAY=18 records RocketMQ 4.9.8 scheduled (2 h, long due)
    and its own delayOffset.json ({"offsetTable":{}})."""
    from rocketstore.store.storedir import detect_config
    cfg = detect_config(rocketmq_store)
    # 1 s levels: whatever this machine's clock, the units' 2 h delivery times are either past
    # or, through 4.9.8's clock-jump guard (tags code > now + delay), delivered now
    cfg.message_delay_level = " ".join(["1s"] * 18)
    with _broker_cfg(rocketmq_store, cfg) as broker:
        store = broker.store
        scheduled = store.get_message("t", SCHEDULE_TOPIC, 17, 0, 64, raw=True).messages
        assert len(scheduled) == 27
        wait = store.notifier.wait
        assert until(lambda: broker.schedule_service.offsets().get(18) == 27, 30)
        assert wait(lambda: store.dispatch_behind_bytes() == 0, 30)
        wanted = {m.uniq_key for m in scheduled}
        delivered = {}
        for topic in ("TopicA", "TopicB"):
            for q in range(4):
                for m in pull_all(store, topic, q):
                    if m.uniq_key in wanted:        # a delayed message was never there before
                        delivered[m.uniq_key] = m
        assert len(delivered) == 27
        for s in scheduled:
            d = delivered[s.uniq_key]
            assert (d.topic, d.queue_id) == (s.properties["REAL_TOPIC"],
                                              int(s.properties["REAL_QID"]))
            # 4.9.8's own string (no trailing \x02, HashMap order), DELAY=18 and WAIT kept
            assert d.properties_bytes == s.properties_bytes
            assert bytes(d.stored_body) == bytes(s.stored_body)
            assert (d.sys_flag, d.flag, d.reconsume_times) == (s.sys_flag, s.flag,
                                                               s.reconsume_times)
            assert (d.born_host, d.born_timestamp) == (s.born_host, s.born_timestamp)
        # the fixture's variety reached the copies: compressed (0x301), flag 7, reconsumed 3
        kinds = {(d.flag, d.reconsume_times, d.sys_flag) for d in delivered.values()}
        assert {(0, 0, 0x301), (7, 0, 0), (0, 3, 0)} <= kinds
    assert Path(rocketmq_store, "config", "delayOffset.json").read_text() == \
        '{\n\t"offsetTable":{18:27\n\t}\n}'


def _broker_cfg(root, store_config):
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    return Broker.open(root, BrokerConfig(), store_config)


def test_the_thread_sleeps_until_due_and_wakes_for_a_new_record(store_dir):
    with MessageStore.open(store_dir, _config()) as store, ScheduleMessageService(store) as svc:
        schedule_put(store, b"in 30 s", 4)
        time.sleep(0.3)
        idle_from = svc.rounds
        time.sleep(1.0)
        # asleep on the 30 s delivery time: no polling in between
        assert svc.rounds - idle_from <= 1
        before = svc.rounds
        svc.wake()
        assert until(lambda: svc.rounds > before, 10)
        t0 = time.monotonic()
        schedule_put(store, b"in 1 s", 1)
        [m] = wait_for(store, TOPIC, 1)
        assert bytes(m.body) == b"in 1 s" and time.monotonic() - t0 < 20
        assert store.get_max_offset_in_queue(TOPIC, 0) == 1


SCHEDULE_CHILD = """
import sys, threading
from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.schedule import ScheduleMessageService
store = MessageStore.open(sys.argv[1], StoreConfig(message_delay_level="1s 2s 3s 30s",
                                                   mapped_file_size_commit_log=1 << 20,
                                                   flush_delay_offset_interval=20))
ScheduleMessageService(store).start()
print("delivering", flush=True)
threading.Event().wait()
"""


def test_kill_9_during_delivery_loses_nothing_and_repeats_only_unpersisted(store_dir, tmp_path):
    import json
    import signal
    import subprocess
    import sys
    n = 60_000
    with MessageStore.open(store_dir, _config()) as store:
        for i in range(n):
            schedule_put(store, b"m%05d" % i, 1)
    time.sleep(1.1)                                 # every record is due
    script = tmp_path / "child.py"
    script.write_text(SCHEDULE_CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script), store_dir], stdout=subprocess.PIPE,
                            env=env, text=True)
    offsets = Path(store_dir, "config", "delayOffset.json")
    try:
        assert proc.stdout.readline() == "delivering\n"
        deadline = time.monotonic() + 60
        while not offsets.exists():                 # the first persist: delivery is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    from rocketstore.store.configfile import loads
    persisted = loads(offsets.read_text())["offsetTable"].get("1", 0)
    assert 0 < persisted < n, "the kill did not land during delivery"
    with MessageStore.open(store_dir, _config()) as store:
        svc = ScheduleMessageService(store)
        svc.load()
        assert svc.offsets()[1] == persisted          # resumes from the persisted offset
        svc.start()
        assert until(lambda: svc.offsets().get(1) == n, 120)
        assert store.notifier.wait(lambda: store.dispatch_behind_bytes() == 0, 30)
        seen: dict[bytes, int] = {}
        for m in pull_all(store, TOPIC, 0):
            seen[bytes(m.body)] = seen.get(bytes(m.body), 0) + 1
        svc.close()
    assert set(seen) == {b"m%05d" % i for i in range(n)}                 # nothing lost
    # only records past the persisted offset can have been delivered twice
    assert all(seen[b"m%05d" % i] == 1 for i in range(persisted))
    assert json.loads(offsets.read_text().replace("1:", '"1":'))["offsetTable"] == {"1": n}


@pytest.mark.stress
def test_stress_clean_restarts_mid_delivery_deliver_every_record_once_in_level_order(store_dir):
    n = 200_000
    with MessageStore.open(store_dir, _config()) as store:
        for i in range(n):
            schedule_put(store, b"%d:%06d" % (1 + i % 3, i), 1 + i % 3, queue_id=i % 3)
    time.sleep(3.1)                                   # all due
    for _ in range(3):                                # stop mid-burst, reopen, go on
        with MessageStore.open(store_dir, _config()) as store, ScheduleMessageService(store):
            time.sleep(0.3)
    with MessageStore.open(store_dir, _config()) as store, ScheduleMessageService(store) as svc:
        want = {level: len(range(level - 1, n, 3)) for level in (1, 2, 3)}
        assert until(lambda: svc.offsets() == want, 300)
        assert store.notifier.wait(lambda: store.dispatch_behind_bytes() == 0, 30)
        for level in (1, 2, 3):
            got = [bytes(m.body) for m in pull_all(store, TOPIC, level - 1)]
            # a clean close persists: no duplicates; within a level, send order
            assert got == [b"%d:%06d" % (level, i) for i in range(level - 1, n, 3)]


def test_ordinary_traffic_does_not_wake_the_service(store_dir, monkeypatch):
    """The service waits for its level queues to grow; the dispatch thread runs that test at
    each arrival and wakes it only when a level grew. Plain sends must not wake it once per
    dispatch round (it used to: a thread switch, the GIL and 18 queue lookups per round,
    ~10 µs of broker CPU per send), and a delayed message still does at once."""
    woken_in: list[int] = []
    real_ready = ScheduleMessageService._ready

    def ready(self):
        woken_in.append(threading.get_ident())
        return real_ready(self)
    monkeypatch.setattr(ScheduleMessageService, "_ready", ready)
    with MessageStore.open(store_dir, _config()) as store, \
            ScheduleMessageService(store) as svc:
        assert until(lambda: svc.rounds >= 1, 10)
        service_thread = svc._thread.ident
        woken_in.clear()
        for i in range(300):
            r = store.put_message(Message("Plain", b"p%d" % i), 0)
            assert r.ok
            assert store.wait_dispatched(10, until=r)
        # the test ran, but on the dispatch thread, not the service's
        assert woken_in, "the arrival test never ran"
        assert woken_in.count(service_thread) <= 2, \
            f"the service woke {woken_in.count(service_thread)} times for 300 plain messages"
        # a delayed message still wakes it: delivered after its 1 s level
        schedule_put(store, b"late", 1)
        [m] = wait_for(store, TOPIC, 1)
        assert bytes(m.body) == b"late"
