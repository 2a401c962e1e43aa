"""Corruption fuzz over every file of a store (issue 16 item 10).

A template store (several commit-log, consume-queue and index files, consumer offsets and
topic config) is copied per case and one file is damaged: bytes flipped or overwritten,
a range zeroed, the file cut short, grown with garbage, or deleted; half of the cases also
leave ``abort`` behind, as after a crash. Each case runs in a forked child with a deadline,
which opens the store read-only and then as the writer and reads everything back through
every path that hands out a message. What must hold, case by case:

* no crash (the child exits normally) and no hang (it finishes before its deadline);
* no exception that is not a ``rocketstore.errors`` class (a refused open is allowed);
* no wrong message: whatever is handed out is exactly a message that was put, at the queue,
  queue offset and commit-log offset it was put at.

CI runs ``CASES`` cases; ``--run-stress`` runs ``STRESS_CASES``. The broker-store variant
below (``BROKER_CASES`` / ``BROKER_STRESS_CASES``) counts silent losses.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import traceback

import pytest

from conftest import flip_bits
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import RocketStoreError

CASES = 300
STRESS_CASES = 3000
DEADLINE_S = 60.0
CFG = StoreConfig(mapped_file_size_commit_log=16 * 1024, mapped_file_size_consume_queue=40 * 20,
                  max_hash_slot_num=64, max_index_num=256,
                  flush_consumer_offset_interval=100_000)
TOPICS = ("FuzzA", "FuzzB")
QUEUES = 2


def _build_template(root: str) -> dict:
    """The store every case starts from, and what was put: (topic, queue, queue offset) ->
    (commit-log offset, body, tags, keys, uniq key)."""
    rng = random.Random(20261124)
    truth = {}
    with MessageStore.open(root, CFG) as store:
        for i in range(240):
            topic, qid = TOPICS[i % 2], (i // 2) % QUEUES
            body = rng.randbytes(rng.randint(0, 300))
            msg = Message(topic, body, tags=f"tag{i % 3}", keys=[f"key{i}", "shared"],
                          properties={"n": str(i)})
            if i % 40 == 39:
                r = store.put_messages([msg, Message(topic, b"batched", tags="tagB")], qid)
                offs = list(r.commitlog_offsets)
                extra = store.look_message_by_offset(offs[1])
                truth[(topic, qid, r.queue_offset + 1)] = (offs[1], b"batched", "tagB", [],
                                                           extra.uniq_key)
                phy = offs[0]
            else:
                r = store.put_message(msg, qid)
                phy = r.commitlog_offset
            m = store.look_message_by_offset(phy)
            truth[(topic, qid, r.queue_offset)] = (phy, body, f"tag{i % 3}", [f"key{i}", "shared"],
                                                   m.uniq_key)
        assert store.wait_dispatched(10)    # queues and index complete in the template
        for t in TOPICS:
            for q in range(QUEUES):
                store.commit_offset("group", t, q, 3)
    return truth


def _files(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            if n != "lock":
                out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def _damage(root: str, rng: random.Random) -> str:
    """Damage one file of the store; returns what was done."""
    rel = rng.choice(_files(root))
    path = os.path.join(root, rel)
    size = os.path.getsize(path)
    action = rng.choice(["flip", "flip", "flip", "bytes", "zero", "truncate", "grow", "delete"])
    if action == "delete":
        os.unlink(path)
    elif action == "truncate":
        with open(path, "r+b") as f:
            f.truncate(rng.randint(0, max(0, size - 1)))
    elif action == "grow":
        with open(path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 5000)))
    elif size == 0:
        action = "empty"
    else:
        with open(path, "r+b") as f:
            # most damage lands where data is: the first quarter of a sparse file
            hot = max(1, size // 4) if rng.random() < 0.7 else size
            if action == "flip":
                flip_bits(f, rng, rng.randint(1, 4), hot)
            elif action == "bytes":
                pos = rng.randrange(hot)
                f.seek(pos)
                f.write(rng.randbytes(rng.randint(1, 16)))
            else:
                pos = rng.randrange(hot)
                f.seek(pos)
                f.write(bytes(min(size - pos, rng.randint(1, 4096))))
    return f"{action} {rel}"


def _check_store(store: MessageStore, truth: dict, writable: bool) -> int:
    """Read everything back through every path that hands out a message; assert each is the
    message put there. Returns how many were read."""
    by_phy = {v[0]: (k, v) for k, v in truth.items()}
    seen = 0

    def same(m, key=None) -> None:
        nonlocal seen
        k, v = by_phy.get(m.commitlog_offset, (None, None))
        assert v is not None, f"message at {m.commitlog_offset} was never put there"
        assert key is None or key == k, f"{key} handed out {k}'s message"
        assert (m.topic, m.queue_id, m.queue_offset) == k, (m.topic, m.queue_id, m.queue_offset, k)
        assert bytes(m.body) == v[1] and m.tags == v[2] and m.keys == v[3] and m.uniq_key == v[4]
        seen += 1

    for t in TOPICS:
        for q in range(QUEUES):
            off, guard = 0, 0
            while guard < 500:
                guard += 1
                r = store.get_message("fuzz", t, q, off, 32)
                for m in r.messages:
                    same(m, (t, q, m.queue_offset))
                if r.next_begin_offset <= off:
                    break
                off = r.next_begin_offset
            b = store.get_message_bodies(t, q, 0, 10_000)
            for qo, body in zip(b.queue_offsets, b):
                v = truth.get((t, q, int(qo)))
                assert v is not None and bytes(body) == v[1], (t, q, qo)
            for tag in ("tag0", "tagB"):
                for m in store.get_message("fuzz", t, q, 0, 32, tags=tag).messages:
                    same(m, (t, q, m.queue_offset))
                    assert m.tags == tag
    for m in store.iter_messages():
        same(m)
        same(m.copy())
    for phy in list(by_phy)[::7]:
        m = store.look_message_by_offset(phy)
        if m is not None:
            same(m)
    for key in ("key7", "shared"):
        for t in TOPICS:
            for m in store.query_message(t, key, 32, 0, 2**62):
                same(m)
                assert key in m.keys
    store.query_offset("group", TOPICS[0], 0)
    if writable:
        r = store.put_message(Message(TOPICS[0], b"after the damage", keys=["after"]), 0)
        if r.ok:
            assert store.wait_dispatched(10, until=r), store.dispatch_service.error
            m = store.look_message_by_offset(r.commitlog_offset)
            assert bytes(m.body) == b"after the damage"
            assert [bytes(x.body) for x in store.query_message(TOPICS[0], "after", 4, 0, 2**62)] \
                == [b"after the damage"]
    return seen


def _case(template: str, work: str, truth: dict, seed: int, conn) -> None:
    """One case, in a forked child: sends (outcome, detail)."""
    try:
        rng = random.Random(seed)
        root = os.path.join(work, f"case-{seed}")
        shutil.copytree(template, root)
        what = _damage(root, rng)
        if rng.random() < 0.5:
            what += " +abort"
            with open(os.path.join(root, "abort"), "wb"):
                pass
        outcome = []
        for read_only in (True, False):
            try:
                with MessageStore.open(root, CFG, read_only=read_only) as store:
                    outcome.append(_check_store(store, truth, not read_only))
            except RocketStoreError as e:
                outcome.append(f"refused: {type(e).__name__}")
        shutil.rmtree(root, ignore_errors=True)
        conn.send(("ok", f"{what}: {outcome}"))
    except AssertionError as e:
        conn.send(("wrong", f"{what}: {e}\n{traceback.format_exc()}"))
    except BaseException as e:  # noqa: BLE001 - any other exception is what the fuzz looks for
        conn.send(("exception", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _run(cases: int, tmp_path) -> None:
    template = str(tmp_path / "template")
    truth = _build_template(template)
    ctx = multiprocessing.get_context("fork")
    failures, counts = [], {}
    for seed in range(cases):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_case, args=(template, str(tmp_path), truth, seed, send))
        p.start()
        send.close()
        got = recv.recv() if recv.poll(DEADLINE_S) else ("hang", f"no answer in {DEADLINE_S} s")
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
        if got[0] == "ok" and p.exitcode != 0:
            got = ("crash", f"exit code {p.exitcode}")
        counts[got[0]] = counts.get(got[0], 0) + 1
        if got[0] != "ok":
            failures.append((seed, *got))
    print(f"corruption fuzz: {cases} cases: {counts}")
    assert not failures, failures[:5]


def test_corruption_fuzz(tmp_path):
    _run(CASES, tmp_path)


@pytest.mark.stress
def test_corruption_fuzz_stress(tmp_path):
    _run(STRESS_CASES, tmp_path)


# -- broker stores: count silent losses (issue 21 item 7) ----------------------------------------
#
# A store written by a rocketstore Broker (plain sends, delayed messages delivered by the
# schedule service, consumer send-backs through the retry topic, committed and rolled-back
# transactions; 4.9.8's records, no record CRC) is damaged one place per case, as above, and
# opened as the broker's store would be. Every message of every queue of the template whose
# record bytes are still intact must be handed out by its queue at its queue offset, or be
# reported: its commit-log offset, a damaged range holding it, or its unit in bad_records().
# An intact message neither handed out nor reported is a silent loss; the goal is none.

import re as _re
import time as _time

BROKER_CASES = 150
BROKER_STRESS_CASES = 1500
BROKER_LEVELS = "1s 1s 1s 1s"
BROKER_CFG = StoreConfig(mapped_file_size_commit_log=16 * 1024,
                         mapped_file_size_consume_queue=40 * 20, max_hash_slot_num=64,
                         max_index_num=256, flush_consumer_offset_interval=100_000,
                         message_delay_level=BROKER_LEVELS, enabled_append_prop_crc=False)
_RANGE = _re.compile(r"damaged range \[(\d+), (\d+)\)")
_UNIT = _re.compile(r"consume queue unit (.+)/(\d+)/(\d+):")


def _build_broker_template(root: str) -> dict:
    """A broker-written store; returns {(topic, queue, queue offset): (phy, size)} of every
    unit of every queue (system topics included)."""
    from rocketstore.broker.broker import Broker
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, EndTransactionRequest,
                                             SendMessageRequest, TransactionCommitType)
    rng = random.Random(20261126)
    with Broker.open(root, BrokerConfig(transaction_check_interval=3_600_000),
                     BROKER_CFG) as broker:
        def send(topic, qid, body, props=None, sys_flag=0, group="P"):
            msg = Message(topic, body, tags=f"tag{len(body) % 3}", keys=[f"k{len(body)}"],
                          properties=props or {}, sys_flag=sys_flag)
            r = broker.send_message(SendMessageRequest(group, topic, qid, [msg])).result(30)
            assert r.code == 0, r
            return broker.store.look_message_by_id(r.msg_id, raw=True)
        plain = [send(TOPICS[i % 2], i % QUEUES, rng.randbytes(rng.randint(1, 300)))
                 for i in range(160)]
        for i in range(20):
            send(TOPICS[0], i % QUEUES, b"delayed-%d" % i, {"DELAY": "1", "WAIT": "true"})
        from brokering import subscribe     # tests/brokering.py
        subscribe(broker, "cg", *TOPICS)        # send-back needs an online consumer of the topic
        for m in plain[:15]:
            back = broker.consumer_send_msg_back(ConsumerSendMsgBackRequest(
                "cg", m.commitlog_offset, 0, origin_msg_id=m.uniq_key, origin_topic=m.topic,
                max_reconsume_times=16)).result(30)
            assert back.code == 0, back
        for i in range(10):
            half = send(TOPICS[1], 1, b"tx-%d" % i, {"TRAN_MSG": "true", "PGROUP": "TX",
                                                    "WAIT": "true"}, sys_flag=4, group="TX")
            broker.end_transaction(EndTransactionRequest(
                "TX", half.queue_offset, half.commitlog_offset,
                TransactionCommitType.COMMIT_TYPE if i % 3 else TransactionCommitType.ROLLBACK_TYPE,
                msg_id=half.uniq_key, transaction_id=half.uniq_key))
        deadline = _time.monotonic() + 60
        sched = broker.schedule_service
        while sum(sched.offsets().values()) < 35:          # 20 delayed + 15 retries delivered
            assert _time.monotonic() < deadline, sched.offsets()
            _time.sleep(0.02)
        store = broker.store
        assert store.wait_dispatched(10)
        truth = {}
        for topic in store.consume_queues.topics():
            for qid in store.consume_queues.queue_ids(topic):
                cq = store.consume_queues.find(topic, qid)
                for i in range(cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()):
                    u = cq.get_unit(i)
                    if u is not None and u[1] != 0x7FFFFFFF:
                        truth[(topic, qid, i)] = (u[0], u[1])
    return truth


def _damage_broker(root: str, rng: random.Random) -> str:
    """Like ``_damage``, aimed where messages live: commit log and consume queues mostly."""
    files = _files(root)
    pick = rng.random()
    want = "commitlog" if pick < 0.45 else "consumequeue" if pick < 0.85 else None
    pool = [f for f in files if want is None or f.startswith(want + os.sep)] or files
    action = rng.choice(["flip", "flip", "flip", "bytes", "zero", "zero-page", "truncate",
                         "grow", "delete"])
    rel = rng.choice(pool)
    path = os.path.join(root, rel)
    size = os.path.getsize(path)
    if action == "delete":
        os.unlink(path)
    elif action == "truncate":
        with open(path, "r+b") as f:
            f.truncate(rng.randint(0, max(0, size - 1)))
    elif action == "grow":
        with open(path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 5000)))
    elif size == 0:
        action = "empty"
    else:
        with open(path, "r+b") as f:
            hot = max(1, size // 2) if rng.random() < 0.7 else size
            if action == "flip":
                flip_bits(f, rng, 1, hot)
            elif action == "bytes":
                f.seek(rng.randrange(hot))
                f.write(rng.randbytes(rng.randint(1, 16)))
            elif action == "zero-page":
                pos = rng.randrange(hot) & ~4095
                f.seek(pos)
                f.write(bytes(min(size - pos, 4096)))
            else:
                pos = rng.randrange(hot)
                f.seek(pos)
                f.write(bytes(min(size - pos, rng.randint(1, 4096))))
    return f"{action} {rel}"


def _record_bytes(root: str, phy: int, size: int) -> bytes | None:
    fsize = BROKER_CFG.mapped_file_size_commit_log
    path = os.path.join(root, "commitlog", "%020d" % (phy - phy % fsize))
    try:
        with open(path, "rb") as f:
            if os.path.getsize(path) != fsize:
                return None
            f.seek(phy % fsize)
            return f.read(size)
    except OSError:
        return None


def _silent_losses(store: MessageStore, truth: dict, template: str, root: str) -> list:
    """(topic, queue, queue offset) of every intact message neither handed out nor reported."""
    got = set()
    for topic, qid in {(t, q) for t, q, _ in truth}:
        off = store.get_min_offset_in_queue(topic, qid)
        for _ in range(2000):
            r = store.get_message("fuzz", topic, qid, off, 32)
            got.update((topic, qid, m.queue_offset, m.commitlog_offset) for m in r.messages)
            if r.next_begin_offset <= off:
                break
            off = r.next_begin_offset
    bad = store.bad_records()
    offsets = {off for off, _ in bad}
    ranges = [(int(a), int(b)) for _, why in bad for a, b in _RANGE.findall(why)]
    units = {(m.group(1), int(m.group(2)), int(m.group(3)))
             for _, why in bad for m in [_UNIT.search(why)] if m}
    lost = []
    for (topic, qid, qo), (phy, size) in truth.items():
        if (topic, qid, qo, phy) in got or phy in offsets or (topic, qid, qo) in units \
                or any(a <= phy < b for a, b in ranges):
            continue
        if _record_bytes(root, phy, size) != _record_bytes(template, phy, size):
            continue                    # the record itself was damaged: not intact
        lost.append((topic, qid, qo))
    return lost


def _broker_case(template: str, work: str, truth: dict, seed: int, conn) -> None:
    try:
        rng = random.Random(seed)
        root = os.path.join(work, f"bcase-{seed}")
        shutil.copytree(template, root)
        what = _damage_broker(root, rng)
        if rng.random() < 0.5:
            what += " +abort"
            with open(os.path.join(root, "abort"), "wb"):
                pass
        try:
            with MessageStore.open(root, BROKER_CFG) as store:
                lost = _silent_losses(store, truth, template, root)
        except RocketStoreError as e:
            lost = [f"refused: {type(e).__name__}: {e}"]
        shutil.rmtree(root, ignore_errors=True)
        conn.send(("ok", what, lost))
    except BaseException as e:  # noqa: BLE001 - any exception is what the fuzz looks for
        conn.send(("exception", f"{type(e).__name__}: {e}\n{traceback.format_exc()}", []))


def _run_broker(cases: int, tmp_path) -> dict:
    template = str(tmp_path / "btemplate")
    truth = _build_broker_template(template)
    ctx = multiprocessing.get_context("fork")
    failures, silent_cases, silent_msgs, refused = [], [], 0, 0
    refusals: dict[str, int] = {}
    for seed in range(cases):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_broker_case, args=(template, str(tmp_path), truth, seed, send))
        p.start()
        send.close()
        got = recv.recv() if recv.poll(DEADLINE_S) else ("hang", f"no answer in {DEADLINE_S} s", [])
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
        if got[0] == "ok" and p.exitcode != 0:
            got = ("crash", f"exit code {p.exitcode}", [])
        if got[0] != "ok":
            failures.append((seed, got[0], got[1]))
            continue
        lost = got[2]
        if lost and isinstance(lost[0], str):
            refused += 1
            why = got[1].split()[1].split(os.sep)[0]
            refusals[why] = refusals.get(why, 0) + 1
        elif lost:
            silent_cases.append((seed, got[1], len(lost), lost[:3]))
            silent_msgs += len(lost)
    stats = {"cases": cases, "messages": len(truth), "silent_loss_cases": len(silent_cases),
             "silently_lost": silent_msgs, "refused": refused, "refused_by": refusals,
             "failures": len(failures)}
    print(f"broker corruption fuzz: {stats}")
    for c in silent_cases[:20]:
        print("  silent loss:", c)
    assert not failures, failures[:5]
    assert not silent_cases, silent_cases[:10]
    return stats


def test_broker_store_corruption_fuzz_has_no_silent_loss(tmp_path):
    _run_broker(BROKER_CASES, tmp_path)


@pytest.mark.stress
def test_broker_store_corruption_fuzz_stress(tmp_path):
    _run_broker(BROKER_STRESS_CASES, tmp_path)
