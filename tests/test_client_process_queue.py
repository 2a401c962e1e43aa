"""ProcessQueue: the min-offset commit of concurrent consumption (MESSAGING.md §5.3), flow
control counters, orderly take/commit/put-back."""
import random
import sys

import pytest

from rocketstore.client.process_queue import ConcurrentProcessQueue, ProcessQueue
from rocketstore.store._codec import decode, encode_record

# the concurrent consumer's cache answers as the general one does
both = pytest.mark.parametrize("cls", [ProcessQueue, ConcurrentProcessQueue])


def msgs(offsets, body=b"x" * 10):
    out = []
    for o in offsets:
        rec = encode_record(topic="T", body=body, properties_raw=b"", queue_id=0, flag=0,
                            queue_offset=o, physical_offset=o * 100, sys_flag=0,
                            born_timestamp=0, born_host="127.0.0.1:1", store_timestamp=0,
                            store_host="127.0.0.1:10911", reconsume_times=0,
                            prepared_transaction_offset=0)
        out.append(decode(rec).copy())
    return out


@both
def test_worked_example_of_section_5_3(cls):
    pq = cls()
    first = msgs(range(100, 132))
    pq.put_message(first)
    assert pq.msg_count == 32 and pq.msg_size == 320
    assert pq.remove_message([first[1]]) == 100                  # t1: 101 done, 100 pins
    assert pq.remove_message(first[2:]) == 100                   # t2
    second = msgs(range(132, 164))
    pq.put_message(second)                                       # t3
    assert pq.remove_message([first[0]]) == 132                  # t4
    assert pq.remove_message(second) == 164                      # t5: max + 1
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove_message(second) == -1                       # already empty: no update


@both
def test_slow_middle_range_pins_the_offset(cls):
    """Pulled ranges 0-10, 10-20, 20-30 consumed in parallel; 10-20 is slow: the commit
    stays at 10 until it finishes, then jumps to 30."""
    pq = cls()
    a, b, c = msgs(range(0, 10)), msgs(range(10, 20)), msgs(range(20, 30))
    for batch in (a, b, c):
        pq.put_message(batch)
    assert pq.remove_message(a) == 10
    assert pq.remove_message(c) == 10
    assert pq.max_span() == 9
    assert pq.remove_message(b) == 30


@both
def test_duplicates_ignored_and_span(cls):
    pq = cls()
    m = msgs(range(5))
    pq.put_message(m)
    pq.put_message(m[2:])
    assert pq.msg_count == 5
    assert pq.max_span() == 4
    pq.remove_message(m[:2])
    assert pq.max_span() == 2
    assert pq.cached_offsets() == [2, 3, 4]


def test_orderly_take_commit_and_consume_again():
    pq = ProcessQueue()
    m = msgs(range(10, 16))
    assert pq.put_message(m) is True          # dispatch: nothing running yet
    assert pq.put_message(msgs([16])) is False
    taken = pq.take_messages(2)
    assert [x.queue_offset for x in taken] == [10, 11]
    pq.make_message_to_consume_again(taken)   # suspend: back to the head, in order
    assert pq.cached_offsets() == [10, 11, 12, 13, 14, 15, 16]
    taken = pq.take_messages(3)
    assert [x.queue_offset for x in taken] == [10, 11, 12]
    assert pq.commit() == 13
    assert pq.msg_count == 4
    rest = pq.take_messages(10)
    assert [x.queue_offset for x in rest] == [13, 14, 15, 16]
    assert pq.commit() == 17
    assert pq.take_messages(1) == [] and pq.consuming is False
    assert pq.put_message(msgs([17])) is True


def test_out_of_order_put_is_resorted():
    pq = ProcessQueue()
    pq.put_message(msgs([5, 6]))
    pq.put_message(msgs([3, 4]))              # after a reset to an earlier offset
    assert pq.cached_offsets() == [3, 4, 5, 6]
    assert [x.queue_offset for x in pq.take_messages(4)] == [3, 4, 5, 6]


def test_a_pull_overlapping_messages_taken_by_an_orderly_consume_adds_only_the_new_ones():
    """Every message taken (the cache's order empty), then a pull from an earlier offset (a
    re-pull after a rebalance): the taken offsets are not cached twice; counts stay right."""
    pq = ProcessQueue()
    pq.put_message(msgs([10, 11]))
    assert [x.queue_offset for x in pq.take_messages(2)] == [10, 11]
    pq.put_message(msgs([10, 11, 12]))
    assert pq.cached_offsets() == [12]
    assert pq.msg_count == 3 and pq.msg_size == 30
    assert pq.commit() == 12
    assert pq.msg_count == 1 and pq.remove_message(msgs([12])) == 13


@both
def test_a_reset_below_the_cache_keeps_only_new_offsets_and_commits_the_smallest(cls):
    """A pull from an earlier offset (a reset) while 100-131 are cached: only 90-99 are
    added; the commit offset is the smallest unfinished across both pulls."""
    pq = cls()
    late = msgs(range(100, 132))
    pq.put_message(late)
    early = msgs(range(90, 122))
    pq.put_message(early)
    assert pq.msg_count == 42 and pq.msg_size == 420
    assert pq.cached_offsets() == list(range(90, 132))
    assert pq.max_span() == 41
    assert pq.remove_message(late[:5]) == 90          # 100-104 done, 90 pins
    assert pq.remove_message(early[:10]) == 105       # 90-99 done
    # a message is known by its offset (as in RocketMQ's tree): the re-pull's 100-121
    # finish the cached ones, which were not cached twice
    assert pq.remove_message(early[10:]) == 122
    assert pq.msg_count == 10
    assert pq.remove_message(late[5:]) == 132
    assert pq.msg_count == 0 and pq.msg_size == 0


@both
def test_gapped_pulls_and_unknown_offsets(cls):
    """Tag-filtered pulls skip offsets; finishing an offset never cached changes nothing."""
    pq = cls()
    a = msgs([3, 7, 8, 20])
    b = msgs([25, 40])
    pq.put_message(a)
    pq.put_message(b)
    assert pq.remove_message(msgs([5, 9, 30])) == 3
    assert pq.msg_count == 6
    assert pq.remove_message([a[0], a[2]]) == 7
    assert pq.max_span() == 33
    assert pq.remove_message([b[1]]) == 7
    assert pq.max_span() == 18
    assert pq.remove_message([a[1], a[3], b[0]]) == 41
    assert pq.cached_offsets() == []


def test_concurrent_cache_matches_the_general_one_on_random_runs():
    """Random pulls (ascending, gapped, and resets below the cache) and random finishes,
    applied to both caches: every answer and counter the consumer reads is the same."""
    rng = random.Random(2026)

    def one(o):     # one offset is one message: its body is the same in every pull
        return msgs([o], body=b"x" * (1 + o % 5))[0]

    for _ in range(200):
        ref, pq = ProcessQueue(), ConcurrentProcessQueue()
        nxt = 0
        cached: list = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.5 or not cached:
                if rng.random() < 0.15:
                    nxt = max(0, nxt - rng.randint(1, 30))      # a reset
                offs = sorted(rng.sample(range(nxt, nxt + 40), rng.randint(1, 20)))
                nxt = offs[-1] + 1
                batch = [one(o) for o in offs]
                assert pq.put_message(batch) == ref.put_message(batch)
                cached.extend(batch)
            else:
                done = rng.sample(cached, rng.randint(1, min(len(cached), 40)))
                if rng.random() < 0.2:
                    done.append(one(rng.randint(0, nxt + 5)))    # maybe never cached
                assert pq.remove_message(done) == ref.remove_message(done)
            assert (pq.msg_count, pq.msg_size) == (ref.msg_count, ref.msg_size)
            assert pq.max_span() == ref.max_span()
            assert pq.cached_offsets() == ref.cached_offsets()
            assert pq.has_temp_message() == ref.has_temp_message()


def test_the_concurrent_cache_has_no_orderly_take():
    pq = ConcurrentProcessQueue()
    pq.put_message(msgs([1]))
    with pytest.raises(TypeError, match="orderly"):
        pq.take_messages(1)


def test_a_finished_message_is_not_held_while_an_earlier_one_pins_the_offset():
    """A slow first message holds the commit offset back; the cache must not keep the
    later, finished messages (large bodies) alive meanwhile."""
    pq = ConcurrentProcessQueue()
    pull = msgs(range(10), body=b"x" * 4096)
    later = pull[5]
    pq.put_message(pull)
    assert pq.remove_message(pull[1:]) == 0           # the first one pins the offset
    del pull                                          # its consume job is done with it
    assert sys.getrefcount(later) == 2                # this name and the call's argument
