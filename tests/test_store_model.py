"""A hypothesis state machine: puts, batch puts, gets (with and without tag filters), whole
consume loops, close and reopen, checked against a dict model.

The model maps (topic, queue id) to the list of (body, tags) put there; queue offset i is
index i. Files are tiny (commit log 4096 bytes, consume queue 400 bytes = 20 units), so
every sequence rolls both kinds of file, writes blank records and reads across file
boundaries. Each put rule waits for its dispatch (``wait_dispatched``), so a put is visible
to the next get and to the invariants.

hypothesis is a test-only dependency (pyproject ``test`` extra): it explores sequences a
hand-written test would not think of, and shrinks a failure to a short one.
"""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rocketstore import GetMessageStatus, Message, MessageStore, StoreConfig

S = GetMessageStatus
TOPICS = ["TopicA", "TopicB", "TopicC"]
QUEUES = [0, 1, 2]
TAGS = ["A", "B", "Aa", "BB", None]           # "Aa" and "BB" share Java hash 2112
CQ_FILE_SIZE = 400
UNITS_PER_CQ_FILE = CQ_FILE_SIZE // 20
IN_MEMORY_COUNT = 32                          # maxTransferCountOnMessageInMemory
CONFIG = StoreConfig(mapped_file_size_commit_log=4096,
                     mapped_file_size_consume_queue=CQ_FILE_SIZE)

# tag expressions and the set of tags each selects (None: every message)
FILTERS = [
    (None, None),
    ("*", None),
    ("A", {"A"}),
    ("B", {"B"}),
    ("Aa", {"Aa"}),
    ("BB", {"BB"}),
    ("A || B", {"A", "B"}),
    ("Aa||A", {"Aa", "A"}),
    (["BB", "B"], {"BB", "B"}),
    (["Aa", "BB"], {"Aa", "BB"}),
    ("Z", set()),
]

bodies = st.binary(min_size=0, max_size=300)
tags = st.sampled_from(TAGS)
topics = st.sampled_from(TOPICS)
queues = st.sampled_from(QUEUES)
filters = st.sampled_from(range(len(FILTERS)))


def expected_get(items, offset, max_msgs, wanted):
    """(status, [queue offsets], next_begin_offset) that docs/format.md §13 gives for the model."""
    n = len(items)
    if n == 0:
        return S.NO_MESSAGE_IN_QUEUE, [], 0
    if offset < 0:
        return S.OFFSET_TOO_SMALL, [], 0
    if offset == n:
        return S.OFFSET_OVERFLOW_ONE, [], offset
    if offset > n:
        return S.OFFSET_OVERFLOW_BADLY, [], n
    # one call reads the units of one consume-queue file
    end = min(n, (offset // UNITS_PER_CQ_FILE + 1) * UNITS_PER_CQ_FILE)
    found = []
    i = offset
    while i < end:
        if found and (len(found) >= max_msgs or len(found) >= IN_MEMORY_COUNT):
            break                                   # batch full: this unit is not consumed
        if wanted is None or items[i][1] in wanted:
            found.append(i)
        i += 1
    return (S.FOUND if found else S.NO_MATCHED_MESSAGE), found, i


class StoreModel(RuleBasedStateMachine):

    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="rocketstore-model-")
        self.store = MessageStore.open(self.root, CONFIG)
        self.model: dict[tuple[str, int], list[tuple[bytes, str | None]]] = {}
        self.reopens = 0

    def teardown(self):
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def items(self, topic, qid):
        return self.model.get((topic, qid), [])

    # -- puts --------------------------------------------------------------------------------

    @rule(topic=topics, qid=queues, tag=tags, body=bodies)
    def put(self, topic, qid, tag, body):
        r = self.store.put_message(Message(topic, body, tags=tag), qid)
        assert r.ok, r
        items = self.model.setdefault((topic, qid), [])
        assert r.queue_offset == len(items)
        items.append((body, tag))
        assert self.store.wait_dispatched(10, until=r)

    @rule(topic=topics, qid=queues,
          batch=st.lists(st.tuples(bodies, tags), min_size=1, max_size=5))
    def put_batch(self, topic, qid, batch):
        r = self.store.put_messages([Message(topic, b, tags=t) for b, t in batch], qid)
        assert r.ok, r
        items = self.model.setdefault((topic, qid), [])
        assert r.queue_offset == len(items) and r.msg_count == len(batch)
        items.extend(batch)
        assert self.store.wait_dispatched(10, until=r)

    @rule(topic=topics, qid=queues, n=st.integers(5, 25), tag=tags, size=st.integers(0, 300))
    def put_run(self, topic, qid, n, tag, size):
        """Many puts to one queue, so its consume queue rolls (20 units per file)."""
        items = self.model.setdefault((topic, qid), [])
        for i in range(n):
            body = bytes([(len(items) + i) % 256]) * size
            r = self.store.put_message(Message(topic, body, tags=tag), qid)
            assert r.ok and r.queue_offset == len(items), r
            items.append((body, tag))
        assert self.store.wait_dispatched(10, until=r)
        event(f"queue length > 2 consume-queue files: {len(items) > 2 * UNITS_PER_CQ_FILE}")

    # -- gets --------------------------------------------------------------------------------

    def check_get(self, topic, qid, offset, max_msgs, fidx):
        expr, wanted = FILTERS[fidx]
        items = self.items(topic, qid)
        r = self.store.get_message("g", topic, qid, offset, max_msgs=max_msgs, tags=expr)
        status, offsets, nxt = expected_get(items, offset, max_msgs, wanted)
        assert r.status is status, (r, offset, expr)
        assert [m.queue_offset for m in r] == offsets, (r, offset, expr)
        assert [bytes(m.body) for m in r] == [items[i][0] for i in offsets]
        assert [m.tags for m in r] == [items[i][1] for i in offsets]
        assert all(m.topic == topic and m.queue_id == qid for m in r)
        assert r.next_begin_offset == nxt, (r, offset, expr)
        if items:
            assert (r.min_offset, r.max_offset) == (0, len(items))
        if status in (S.FOUND, S.NO_MATCHED_MESSAGE):
            assert r.next_begin_offset == offset + r.units_scanned
            assert r.buffer_total_size == sum(m.store_size for m in r)
        return r

    @rule(topic=topics, qid=queues, data=st.data(), max_msgs=st.integers(1, 40), fidx=filters)
    def get(self, topic, qid, data, max_msgs, fidx):
        n = len(self.items(topic, qid))
        offset = data.draw(st.integers(-2, n + 3), label="offset")
        self.check_get(topic, qid, offset, max_msgs, fidx)

    @rule(topic=topics, qid=queues, max_msgs=st.integers(1, 40), fidx=filters)
    def consume_all(self, topic, qid, max_msgs, fidx):
        """Follow next_begin_offset from 0 to the end: every wanted message once, in order."""
        items = self.items(topic, qid)
        wanted = FILTERS[fidx][1]
        off, seen, calls = 0, [], 0
        while True:
            r = self.check_get(topic, qid, off, max_msgs, fidx)
            if r.status in (S.NO_MESSAGE_IN_QUEUE, S.OFFSET_OVERFLOW_ONE):
                break
            assert r.next_begin_offset > off            # always progresses
            seen.extend(m.queue_offset for m in r)
            off = r.next_begin_offset
            calls += 1
            assert calls <= len(items) + 1
        assert seen == [i for i, (_, t) in enumerate(items) if wanted is None or t in wanted]

    # -- lifecycle ---------------------------------------------------------------------------

    @precondition(lambda self: self.reopens < 4)
    @rule()
    def close_and_reopen(self):
        self.store.close()
        self.store = MessageStore.open(self.root, CONFIG)
        self.reopens += 1
        assert self.store.recovery["last_exit_ok"]

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offsets_match_model(self):
        for topic in TOPICS:
            for qid in QUEUES:
                n = len(self.items(topic, qid))
                assert self.store.get_max_offset_in_queue(topic, qid) == n
                assert self.store.get_min_offset_in_queue(topic, qid) == 0


StoreModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreModel = StoreModel.TestCase


def test_expected_get_oracle():
    """The oracle itself, on a hand-checked case."""
    items = [(b"", "A"), (b"", "B")] * 15             # 30 units: files [0, 20) and [20, 30)
    assert expected_get(items, 18, 10, None) == (S.FOUND, [18, 19], 20)
    assert expected_get(items, 0, 3, {"B"}) == (S.FOUND, [1, 3, 5], 6)
    assert expected_get(items, 20, 40, {"Z"}) == (S.NO_MATCHED_MESSAGE, [], 30)
    assert expected_get(items, 30, 1, None) == (S.OFFSET_OVERFLOW_ONE, [], 30)
    assert expected_get(items, 31, 1, None) == (S.OFFSET_OVERFLOW_BADLY, [], 30)
    assert expected_get([], 5, 1, None) == (S.NO_MESSAGE_IN_QUEUE, [], 0)
