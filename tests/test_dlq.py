"""Dead-letter tooling: list a group's %DLQ% records with their origin, resend them once
(API and ``rocketstore dlq`` command)."""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.dlq import DeadLetterQueue, DLQResendError
from rocketstore.cli import main
from brokering import subscribe  # noqa: E402  (tests/brokering.py)

# a broker's store: RocketMQ 4.9.8's records byte for byte (no record CRC property)
GROUP = "OrderConsumers"
DLQ = "%DLQ%" + GROUP
TOPIC = "OrderTopic"
# 1 MiB files: a default 1 GiB commit log (allocated for real) per test fills a shared disk
# and no record CRC property: the dead letters are RocketMQ 4.9.8's records byte for byte
def cfg() -> StoreConfig:
    return StoreConfig(mapped_file_size_commit_log=1 << 20, enabled_append_prop_crc=False)


def dead_letter(store: MessageStore, i: int, *, compressed: bool = False):
    """An original message in TOPIC and its dead letter as 4.9.8's send-back stores it
    (MESSAGING.md §5.5: original properties + RETRY_TOPIC, WAIT=false, DELAY=0,
    ORIGIN_MESSAGE_ID = the original's offset msg id; reconsume times 17)."""
    body = f"order-{i}".encode()
    stored = zlib.compress(body) if compressed else body
    orig = store.put_message(Message(TOPIC, stored, tags=f"Tag{i % 2}", keys=[f"k{i}", "shared"],
                                     properties={"tenant": f"t{i}", "WAIT": "true"},
                                     sys_flag=0x1 if compressed else 0), 0)
    ext = store.look_message_by_offset(orig.commitlog_offset, raw=True)
    props = dict(ext.properties)
    props.update({"RETRY_TOPIC": TOPIC, "WAIT": "false", "DELAY": "0",
                  "ORIGIN_MESSAGE_ID": ext.msg_id, "MAX_RECONSUME_TIMES": "16",
                  "RECONSUME_TIME": "17", "REAL_TOPIC": "%RETRY%" + GROUP, "REAL_QID": "0"})
    r = store.put_message(Message(DLQ, bytes(ext.stored_body), properties=props,
                                  sys_flag=ext.sys_flag, reconsume_times=17,
                                  born_timestamp=ext.born_timestamp), 0)
    assert r.ok
    return ext, r


@pytest.fixture
def dlq_store(store_dir):
    with MessageStore.open(store_dir, cfg()) as store:
        originals = [dead_letter(store, i, compressed=(i == 2)) for i in range(3)]
    return store_dir, originals


def test_list_shows_origin_of_each_dead_letter(dlq_store):
    store_dir, originals = dlq_store
    with MessageStore.open(store_dir, cfg(), read_only=True) as store:
        letters = DeadLetterQueue(store, GROUP).list()
    assert len(letters) == 3
    for i, (dl, (orig, put)) in enumerate(zip(letters, originals)):
        assert dl.msg_id == orig.uniq_key
        assert dl.offset_msg_id == put.msg_id
        assert dl.topic == TOPIC
        assert dl.origin_message_id == orig.msg_id
        assert dl.reconsume_times == 17
        assert dl.store_timestamp == put.store_timestamp
        assert dl.tags == f"Tag{i % 2}" and dl.keys == [f"k{i}", "shared"]
        assert dl.properties == {"tenant": f"t{i}"}            # system properties left out
        assert dl.resent_as is None
        assert (dl.queue_id, dl.queue_offset) == (0, i)


def test_resend_selected_then_all_never_twice(dlq_store):
    store_dir, originals = dlq_store
    with MessageStore.open(store_dir, cfg()) as store:
        dlq = DeadLetterQueue(store, GROUP)
        [r] = dlq.resend([originals[1][0].uniq_key])
        assert r.outcome == "resent" and r.topic == TOPIC
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 4
        again = dlq.resend([originals[1][1].msg_id])          # by offset msg id this time
        assert [x.outcome for x in again] == ["already"]
        assert again[0].resent_as == r.resent_as
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 4   # nothing new
        rest = dlq.resend()
        assert [x.outcome for x in rest] == ["resent", "already", "resent"]
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 6
        copies = store.get_message("g", TOPIC, 0, 3, 10).messages
        assert [bytes(m.body) for m in copies] == [b"order-1", b"order-0", b"order-2"]
        for m, i in zip(copies, (1, 0, 2)):
            dl_put = originals[i][1]
            # a new message: original body (decompressed), tags, keys, user properties only
            assert m.tags == f"Tag{i % 2}" and m.keys == [f"k{i}", "shared"]
            assert {k: v for k, v in m.properties.items() if k not in ("TAGS", "KEYS")} == \
                {"tenant": f"t{i}", "UNIQ_KEY": dl_put.msg_id}
            assert m.reconsume_times == 0 and m.sys_flag == 0
        assert [dl.resent_as for dl in dlq.list()] == [m.msg_id for m in
                                                        (copies[1], copies[0], copies[2])]
    doc = Path(store_dir, "config", "dlqResend.json").read_text()
    assert json.loads(doc) == {"resendTable": {GROUP: {
        originals[i][1].msg_id: copies[j].msg_id for i, j in ((0, 1), (1, 0), (2, 2))}}}


def test_resend_interrupted_before_its_record_is_not_repeated(dlq_store):
    store_dir, originals = dlq_store
    with MessageStore.open(store_dir, cfg()) as store:
        [first] = DeadLetterQueue(store, GROUP).resend([originals[0][0].uniq_key])
    # the process died after the put and before dlqResend.json was written
    for name in ("dlqResend.json", "dlqResend.json.bak"):
        p = Path(store_dir, "config", name)
        if p.exists():
            p.unlink()
    with MessageStore.open(store_dir, cfg()) as store:
        [again] = DeadLetterQueue(store, GROUP).resend([originals[0][0].uniq_key])
        assert again.outcome == "recovered" and again.resent_as == first.resent_as
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 4


def test_unknown_id_sends_nothing(dlq_store):
    store_dir, originals = dlq_store
    with MessageStore.open(store_dir, cfg()) as store:
        with pytest.raises(DLQResendError, match="no dead letter with id 0A0000000000"):
            DeadLetterQueue(store, GROUP).resend([originals[0][0].uniq_key, "0A0000000000"])
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 3
        assert not os.path.exists(os.path.join(store_dir, "config", "dlqResend.json"))


def test_cli_list_and_resend(dlq_store, capsys):
    store_dir, originals = dlq_store
    assert main(["dlq", "list", store_dir, "--group", GROUP, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["msg_id"] for r in rows] == [o.uniq_key for o, _ in originals]
    assert rows[0]["topic"] == TOPIC and rows[0]["reconsume_times"] == 17
    assert rows[0]["origin_message_id"] == originals[0][0].msg_id
    assert rows[0]["resent_as"] is None and rows[0]["store_time"].endswith("+00:00")

    assert main(["dlq", "resend", store_dir, "--group", GROUP, "--msg-id",
                 originals[2][0].uniq_key]) == 0
    out = capsys.readouterr().out
    assert originals[2][0].uniq_key in out and "resent" in out
    assert main(["dlq", "resend", store_dir, "--group", GROUP, "--all"]) == 0
    outcomes = [line.split()[1] for line in capsys.readouterr().out.splitlines()[2:]]
    assert sorted(outcomes) == ["already", "resent", "resent"]

    assert main(["dlq", "list", store_dir, "--group", GROUP]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["msg", "id", "topic"] and len(out) == 5
    with MessageStore.open(store_dir, cfg(), read_only=True) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 6


def test_cli_errors_are_one_line(dlq_store, capsys):
    store_dir, _ = dlq_store
    assert main(["dlq", "resend", store_dir, "--group", GROUP]) == 2
    err = capsys.readouterr().err
    assert err == "rocketstore dlq resend: give --msg-id ID ... or --all\n"
    assert main(["dlq", "resend", store_dir, "--group", GROUP, "--msg-id", "ABC"]) == 2
    assert capsys.readouterr().err == \
        f"rocketstore dlq resend: {DLQ}: no dead letter with id ABC\n"
    # nothing dead is not an error (issue 23): exit 0, said on stdout
    assert main(["dlq", "list", store_dir, "--group", "nobody"]) == 0
    assert "no dead letters for group nobody" in capsys.readouterr().out
    # a running broker holds the store's lock: resend refuses, nothing is written
    with MessageStore.open(store_dir, cfg()) as store:
        assert main(["dlq", "resend", store_dir, "--group", GROUP, "--all"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "a running broker holds the store" in err
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 3


# -- on a live Broker: real send-back to the DLQ, in-process resend through the send path ----

def test_live_broker_dead_letters_are_listed_and_resent(store_dir):
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, ResponseCode,
                                             SendMessageRequest)
    with Broker.open(store_dir, BrokerConfig(), cfg()) as broker:
        msg = Message(TOPIC, b"poison", tags="TagP", keys=["order-7"],
                      properties={"tenant": "acme"})
        sent = broker.send_message(SendMessageRequest("P", TOPIC, 0, [msg])).result(30)
        assert sent.code == ResponseCode.SUCCESS
        orig = broker.store.look_message_by_id(sent.msg_id)
        subscribe(broker, GROUP, TOPIC)            # an online consumer of the topic
        # the consumer gave up (delay level -1: straight to the DLQ, MESSAGING.md §5.5 step 7)
        back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
            GROUP, orig.commitlog_offset, -1, origin_msg_id=orig.uniq_key, origin_topic=TOPIC,
            max_reconsume_times=16)).result(30)
        assert back.code == ResponseCode.SUCCESS, back
        store = broker.store
        assert store.notifier.wait(lambda: store.get_max_offset_in_queue(DLQ, 0) == 1, 30)
        dlq = DeadLetterQueue(broker, GROUP)
        [dl] = dlq.list()
        assert (dl.msg_id, dl.topic, dl.origin_message_id) == (orig.uniq_key, TOPIC, orig.msg_id)
        assert (dl.tags, dl.keys, dl.properties) == ("TagP", ["order-7"], {"tenant": "acme"})
        [r] = dlq.resend()
        assert r.outcome == "resent" and dlq.resend()[0].outcome == "already"
        copy = store.look_message_by_id(r.resent_as)
        assert (copy.topic, bytes(copy.body), copy.tags) == (TOPIC, b"poison", "TagP")
        assert copy.properties["tenant"] == "acme" and copy.uniq_key == dl.offset_msg_id
        assert "RETRY_TOPIC" not in copy.properties and copy.reconsume_times == 0
