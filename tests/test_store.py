"""MessageStore facade: puts and lookups end to end, lifecycle (abort, lock, close), input
validation, hosts and ids, compression, and file rolling.

Bytes on disk are checked with ``refreader`` (the docs/format.md oracle), never with rocketstore's
own codec.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

import refreader
from conftest import corrupt
from rocketstore import (InvalidConfigError, InvalidMessageError, InvalidMessageTypeError,
                         Message, MessageStore, PutMessageStatus, RocketStoreError,
                         StoreClosedError, StoreConfig, StoreLockedError)
from rocketstore.store._codec import java_hash

REPO = Path(__file__).resolve().parent.parent

# docs/format.md §1.1 concrete vector (ReputMessageServiceTest)
VECTOR_BODY = b"Once, there was a chance for me!"
VECTOR_TOPIC = "FooBar"
VECTOR_TAGS = "TAG1"
VECTOR_SIZE = 158           # KEYS=<13 digits> and TAGS=TAG1 only
UNIQ_PROP_LEN = 42          # "UNIQ_KEY" \x01 <32 hex> \x02, added by the store
CRC_PROP_LEN = 20           # "__CRC32#" \x01 <10 digits> \x02, the 5.x record CRC (default on)


def _rocketmq_layout(cfg: StoreConfig) -> StoreConfig:
    """RocketMQ's default record layout: no record CRC property (byte-exact vectors)."""
    return cfg.replace(enabled_append_prop_crc=False)


def _vector_message(keys: str, **kw) -> Message:
    return Message(VECTOR_TOPIC, VECTOR_BODY, tags=VECTOR_TAGS, keys=keys, **kw)


def _records(root: str, file_size: int | None = None) -> list[tuple[str, int, int, dict]]:
    """Every item of refreader's walk of the commit log: (file, pos, physical offset, rec)."""
    return list(refreader.iter_commitlog(os.path.join(root, "commitlog"), file_size))


def _messages(root: str, file_size: int | None = None) -> dict[int, dict]:
    return {phy: rec for _, _, phy, rec in _records(root, file_size) if rec["kind"] == "msg"}


def _commitlog_bytes(root: str) -> dict[str, bytes]:
    d = os.path.join(root, "commitlog")
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def _run_child(code: str, *args: str, wait=True, check=True):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", textwrap.dedent(code), *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=str(REPO), env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    p = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=60)
    if not check:
        return p
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


TRY_OPEN = """
    import sys
    from rocketstore import MessageStore, StoreConfig
    try:
        MessageStore.open(sys.argv[1], StoreConfig(mapped_file_size_commit_log=4096)).close()
        print("OK")
    except Exception as e:
        print(type(e).__name__)
"""


# -- the docs/format.md vector ----------------------------------------------------------------------

def test_format_vector_record_size(store_dir, small_config):
    keys = "1700000000000"
    assert len(keys) == 13
    size = VECTOR_SIZE + UNIQ_PROP_LEN
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        results = [store.put_message(_vector_message(keys)) for _ in range(10)]
        for i, r in enumerate(results):
            assert r.status is PutMessageStatus.PUT_OK and r.ok
            assert r.wrote_bytes == size
            assert r.commitlog_offset == i * size
            assert r.queue_offset == i and r.queue_id == 0 and r.msg_count == 1
            assert r.msg_id == refreader.offset_msg_id("127.0.0.1", 10911, i * size)
        assert store.get_max_phy_offset() == 10 * size == 2000
        assert store.get_min_phy_offset() == 0
        uniq = {store.look_message_by_offset(r.commitlog_offset).uniq_key for r in results}
    assert len(uniq) == 10      # one fresh UNIQ_KEY per message
    recs = _messages(store_dir)
    assert sorted(recs) == [i * size for i in range(10)]
    for i, (phy, rec) in enumerate(sorted(recs.items())):
        assert rec["total_size"] == size
        assert rec["total_size"] == refreader.record_size(len(VECTOR_BODY), len(VECTOR_TOPIC),
                                                          len(rec["properties_raw"]))
        assert len(rec["properties_raw"]) == 29 + UNIQ_PROP_LEN
        assert rec["properties"]["KEYS"] == keys and rec["properties"]["TAGS"] == VECTOR_TAGS
        assert len(rec["properties"]["UNIQ_KEY"]) == 32
        assert int(rec["properties"]["UNIQ_KEY"], 16) >= 0
        assert rec["properties"]["UNIQ_KEY"] == rec["properties"]["UNIQ_KEY"].upper()
        assert rec["body"] == VECTOR_BODY and rec["topic"] == VECTOR_TOPIC
        assert rec["queue_offset"] == i and rec["physical_offset"] == phy
        assert rec["body_crc"] == refreader.body_crc(VECTOR_BODY)
        assert rec["store_host"] == "127.0.0.1:10911"
        assert rec["magic"] == refreader.MAGIC_V1


def test_format_vector_with_given_uniq_key(store_dir, small_config, rand):
    keys = "1700000000123"
    size = VECTOR_SIZE + UNIQ_PROP_LEN
    given = ["%032X" % rand.getrandbits(128) for _ in range(10)]
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        for i, u in enumerate(given):
            r = store.put_message(_vector_message(keys, properties={"UNIQ_KEY": u}))
            assert r.wrote_bytes == size and r.commitlog_offset == i * size
        assert store.get_max_phy_offset() == 10 * size
        for i, u in enumerate(given):
            assert store.look_message_by_offset(i * size).uniq_key == u
    recs = _messages(store_dir)
    assert [recs[i * size]["properties"]["UNIQ_KEY"] for i in range(10)] == given
    for rec in recs.values():
        # the given key is stored once, not a second generated one next to it
        assert rec["properties_raw"].count(b"UNIQ_KEY") == 1


def test_reopen_reads_back_everything_and_continues(store_dir, small_config, rand):
    sent = []
    with MessageStore.open(store_dir, small_config) as store:
        for i in range(30):
            qid = i % 3
            msg = Message("TopicR", rand.randbytes(rand.randint(0, 200)), tags=f"t{i % 4}",
                          keys=[f"k{i}", f"g{i % 5}"], properties={"n": str(i)})
            sent.append((store.put_message(msg, qid), msg))
        end = store.get_max_phy_offset()
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == 30
        assert store.recovery["last_exit_ok"] is True
        assert store.get_max_phy_offset() == end
        for r, msg in sent:
            m = store.look_message_by_offset(r.commitlog_offset)
            assert bytes(m.body) == msg.body
            assert m.tags == msg.tags and m.keys == msg.keys
            assert m.properties["n"] == msg.properties["n"]
            assert {k: v for k, v in m.properties.items()
                    if k not in ("UNIQ_KEY", "__CRC32#")} == msg.properties
            assert m.queue_id == r.queue_id and m.queue_offset == r.queue_offset
            assert m.store_timestamp == r.store_timestamp
            assert m.msg_id == r.msg_id
            assert store.look_message_by_id(r.msg_id).commitlog_offset == r.commitlog_offset
        assert [m.commitlog_offset for m in store.iter_messages()] == \
            [r.commitlog_offset for r, _ in sent]
        for qid in range(3):
            assert store.commit_log.get_queue_offset("TopicR", qid) == 10
        r = store.put_message(Message("TopicR", b"next"), 1)
        assert r.queue_offset == 10
        fs = small_config.mapped_file_size_commit_log
        if r.wrote_bytes + 8 <= fs - end % fs:
            assert r.commitlog_offset == end
        else:                   # did not fit behind the last record: the next file
            assert r.commitlog_offset == end - end % fs + fs
        r = store.put_message(Message("TopicR", b"next"), 7)
        assert r.queue_offset == 0


# -- lifecycle: abort, lock, close -------------------------------------------------------------

def test_abort_exists_while_open_and_is_removed_at_close(store_dir, small_config):
    abort = os.path.join(store_dir, "abort")
    with MessageStore.open(store_dir, small_config) as store:
        assert os.path.exists(abort)
        store.put_message(Message("T", b"x"))
        assert os.path.exists(abort)
        assert not store.closed
    assert store.closed
    assert not os.path.exists(abort)
    with open(os.path.join(store_dir, "lock"), "rb") as f:
        assert f.read(4) == b"lock"
    store.close()       # idempotent
    assert not os.path.exists(abort)


def test_context_manager_closes_on_exception(store_dir, small_config):
    with pytest.raises(RuntimeError):
        with MessageStore.open(store_dir, small_config) as store:
            store.put_message(Message("T", b"x"))
            raise RuntimeError("boom")
    assert store.closed
    assert not os.path.exists(os.path.join(store_dir, "abort"))
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == 1


def test_crash_leaves_abort_and_reopen_recovers(store_dir, small_config):
    out = _run_child("""
        import os, sys
        from rocketstore import Message, MessageStore, StoreConfig
        s = MessageStore.open(sys.argv[1], StoreConfig(mapped_file_size_commit_log=4096))
        for i in range(50):
            s.put_message(Message("T", b"y" * 100))
        print(s.get_max_phy_offset())
        sys.stdout.flush()
        os._exit(0)          # no close: like a killed process
    """, store_dir)
    end = int(out)
    assert os.path.exists(os.path.join(store_dir, "abort"))
    with MessageStore.open(store_dir, small_config) as store:
        assert store.recovery["last_exit_ok"] is False
        assert sum(1 for _ in store.iter_messages()) == 50
        assert store.get_max_phy_offset() == end
        assert store.commit_log.get_queue_offset("T", 0) == 50


def test_second_open_in_process_is_locked(store_dir, small_config, tmp_path):
    with MessageStore.open(store_dir, small_config) as store:
        with pytest.raises(StoreLockedError):
            MessageStore.open(store_dir, small_config)
        # the same directory through another spelling of its path
        with pytest.raises(StoreLockedError):
            MessageStore.open(os.path.join(store_dir, ".", ""), small_config)
        link = tmp_path / "link"
        link.symlink_to(store_dir)
        with pytest.raises(StoreLockedError):
            MessageStore.open(str(link), small_config)
        # the failed opens did not disturb the holder
        assert os.path.exists(os.path.join(store_dir, "abort"))
        r = store.put_message(Message("T", b"still mine"))
        assert r.ok
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == 1
    with MessageStore.open(store_dir, small_config):
        pass


def test_open_in_another_process_is_locked(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as store:
        store.put_message(Message("T", b"x"))
        assert _run_child(TRY_OPEN, store_dir) == "StoreLockedError"
        # a Java broker's FileChannel.tryLock(0, 1) is a POSIX lock on byte 0: it must fail too
        out = _run_child("""
            import fcntl, os, sys
            fd = os.open(sys.argv[1], os.O_RDWR)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                print("LOCKED")
            except OSError as e:
                print(type(e).__name__)
        """, os.path.join(store_dir, "lock"))
        assert out in ("BlockingIOError", "PermissionError")
    assert _run_child(TRY_OPEN, store_dir) == "OK"
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == 1


def test_posix_lock_held_by_other_process_blocks_open(store_dir, small_config):
    """A broker holding only the POSIX byte-0 lock (as Java does) keeps us out."""
    os.makedirs(store_dir)
    lock = os.path.join(store_dir, "lock")
    with open(lock, "wb") as f:
        f.write(b"lock")
    child = _run_child("""
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("held", flush=True)
        sys.stdin.read()
    """, lock, wait=False)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(StoreLockedError):
            MessageStore.open(store_dir, small_config)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    with MessageStore.open(store_dir, small_config):
        pass


def test_closed_store_raises(store_dir, small_config):
    store = MessageStore.open(store_dir, small_config)
    r = store.put_message(Message("T", b"x"))
    store.close()
    with pytest.raises(StoreClosedError):
        store.put_message(Message("T", b"y"))
    with pytest.raises(StoreClosedError):
        store.put_messages([Message("T", b"y")])
    with pytest.raises(StoreClosedError):
        store.look_message_by_offset(r.commitlog_offset)
    with pytest.raises(StoreClosedError):
        store.look_message_by_id(r.msg_id)
    with pytest.raises(StoreClosedError):
        store.iter_messages()
    # nothing was written by the refused puts
    with MessageStore.open(store_dir, small_config) as again:
        assert sum(1 for _ in again.iter_messages()) == 1
        assert again.get_max_phy_offset() == r.wrote_bytes


def test_closed_store_offsets_raise(store_dir, small_config):
    """get_min/max_phy_offset on a closed store must not answer 0 for a store holding data."""
    store = MessageStore.open(store_dir, small_config)
    store.put_message(Message("T", b"x"))
    store.close()
    with pytest.raises(StoreClosedError):
        store.get_max_phy_offset()
    with pytest.raises(StoreClosedError):
        store.get_min_phy_offset()


def _store_fds_and_maps(root: str) -> list[str]:
    """Open fds and mappings of this process that point into ``root`` (Linux /proc)."""
    real = os.path.realpath(root)
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(real):
            out.append(target)
    with open("/proc/self/maps") as f:
        out += [line.split()[-1] for line in f if real in line]
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_close_releases_every_file(store_dir, small_config):
    store = MessageStore.open(store_dir, small_config)
    for _ in range(100):                    # several files, and a pre-allocated next one
        store.put_message(Message("T", bytes(200)))
    m = store.look_message_by_offset(0)
    assert _store_fds_and_maps(store_dir)
    store.close()
    assert bytes(m.body) == bytes(200)      # a body read before close stays valid
    del m
    assert _store_fds_and_maps(store_dir) == []


def test_queue_offset_of_negative_queue_id_is_safe(store_dir):
    """get_queue_offset(topic, -1) must answer 0 (or raise), never read outside its table.

    Runs in a child: an out-of-bounds read of a NULL table segfaults.
    """
    out = _run_child("""
        import sys
        from rocketstore import Message, MessageStore, StoreConfig
        s = MessageStore.open(sys.argv[1], StoreConfig(mapped_file_size_commit_log=4096))
        for i in range(5):
            s.put_message(Message("T", b"x"), 0)
        s.put_message(Message("H", b"half", sys_flag=0x4), 0)   # a topic with no offsets yet
        for topic in ("T", "H"):
            for qid in (-1, -2, -1000):
                try:
                    print(topic, qid, s.commit_log.get_queue_offset(topic, qid), flush=True)
                except Exception as e:
                    print(topic, qid, type(e).__name__, flush=True)
        s.close()
    """, store_dir, check=False)
    assert out.returncode == 0, f"child died with {out.returncode}: {out.stdout!r}"
    for line in out.stdout.splitlines():
        topic, qid, answer = line.split()
        assert answer in ("0", "InvalidMessageError"), line


def test_open_survives_record_with_negative_queue_id(store_dir, small_config):
    """QUEUEID is not covered by any CRC: a flipped one must not crash recovery (child)."""
    with MessageStore.open(store_dir, small_config) as store:
        first = store.put_message(Message("T", b"good"), 0)
        bad = store.put_message(Message("U", b"flipped"), 0)
    corrupt(os.path.join(store_dir, "commitlog", f"{0:020d}"), bad.commitlog_offset + 12,
            (-1).to_bytes(4, "big", signed=True))
    assert _messages(store_dir)[bad.commitlog_offset]["queue_id"] == -1
    out = _run_child("""
        import sys
        from rocketstore import MessageStore, StoreConfig
        with MessageStore.open(sys.argv[1], StoreConfig(mapped_file_size_commit_log=4096)) as s:
            print(sum(1 for _ in s.iter_messages()), bytes(s.look_message_by_offset(0).body).decode())
    """, store_dir, check=False)
    assert out.returncode == 0, f"open died with {out.returncode}: {out.stderr[-2000:]}"
    count, body = out.stdout.split()
    assert body == "good" and int(count) >= 1


def test_huge_queue_id_needs_no_huge_memory(store_dir):
    """A queue id is a Java int: queue 2**31-1 is accepted, so its bookkeeping must not take
    memory proportional to the id (16 GiB here). Child with a capped address space."""
    out = _run_child("""
        import resource, sys
        from rocketstore import Message, MessageStore, StoreConfig
        s = MessageStore.open(sys.argv[1], StoreConfig(mapped_file_size_commit_log=4096))
        s.put_message(Message("T", b"x"), 0)
        with open("/proc/self/status") as f:
            vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:")][0]
        resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 1024 * 1024, resource.RLIM_INFINITY))
        for qid in (10**8, 2**31 - 1):
            try:
                r = s.put_message(Message("T", b"y"), qid)
                m = s.look_message_by_offset(r.commitlog_offset)
                print(qid, r.status.name, r.queue_offset, m.queue_id, flush=True)
            except Exception as e:
                print(qid, type(e).__name__, flush=True)
        s.close()
    """, store_dir, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line in lines:
        qid, *rest = line.split()
        assert rest in (["PUT_OK", "0", qid], ["InvalidMessageError"]), line


# -- bad input: a clear error naming the field, nothing written ---------------------------------

@pytest.fixture
def open_store(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=65536, max_message_size=1024)
    with MessageStore.open(store_dir, cfg) as store:
        store.put_message(Message("T", b"first"))
        yield store


def _assert_nothing_written(store, before_max, before_qoff, topic="T", qid=0):
    assert store.get_max_phy_offset() == before_max
    assert store.commit_log.get_queue_offset(topic, qid) == before_qoff
    # the next good put lands right where the refused one would have
    r = store.put_message(Message(topic, b"after"), qid)
    assert r.commitlog_offset == before_max and r.queue_offset == before_qoff


def test_body_over_small_max_message_size(open_store):
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_message(Message("T", b"z" * 1025))
    assert ei.value.field == "body" and ei.value.limit == 1024
    assert ei.value.status == "MESSAGE_ILLEGAL"
    assert "max_message_size" in str(ei.value)
    assert isinstance(ei.value, ValueError)
    _assert_nothing_written(open_store, before, 1)
    r = open_store.put_message(Message("T", b"z" * 1024))       # exactly the limit
    assert r.ok
    assert bytes(open_store.look_message_by_offset(r.commitlog_offset).body) == b"z" * 1024
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_messages([Message("T", b"a"), Message("T", b"z" * 1025)])
    assert ei.value.field == "body"
    assert open_store.get_max_phy_offset() == r.commitlog_offset + r.wrote_bytes


def test_body_over_default_max_message_size(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=8 * 1024 * 1024)
    assert cfg.max_message_size == 4 * 1024 * 1024
    with MessageStore.open(store_dir, cfg) as store:
        store.put_message(Message("T", b"first"))
        before = store.get_max_phy_offset()
        big = bytes(4 * 1024 * 1024 + 1)
        with pytest.raises(InvalidMessageError) as ei:
            store.put_message(Message("T", big))
        assert ei.value.field == "body" and ei.value.limit == 4 * 1024 * 1024
        assert store.get_max_phy_offset() == before
        r = store.put_message(Message("T", big[:-1]))              # 4 MiB exactly is fine
        assert r.ok and r.commitlog_offset == before and r.queue_offset == 1
        m = store.look_message_by_offset(r.commitlog_offset)
        assert len(m.body) == 4 * 1024 * 1024 and m.body_crc == refreader.body_crc(big[:-1])


def test_record_larger_than_file(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as store:
        with pytest.raises(InvalidMessageError) as ei:
            store.put_message(Message("T", bytes(4096)))
        assert ei.value.field == "record"
        assert "mapped_file_size_commit_log" in str(ei.value)
        assert store.get_max_phy_offset() == 0
        assert store.commit_log.get_queue_offset("T", 0) == 0


def test_properties_over_32767_bytes(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=128 * 1024, enabled_append_prop_crc=False)
    with MessageStore.open(store_dir, cfg) as store:
        store.put_message(Message("T", b"first"))
        before = store.get_max_phy_offset()
        # "k" \x01 v \x02 + the store's 42-byte UNIQ_KEY: 32767 exactly with a 32722-char value
        with pytest.raises(InvalidMessageError) as ei:
            store.put_message(Message("T", b"x", properties={"k": "v" * 32723}))
        assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
        assert ei.value.field == "properties" and ei.value.limit == 32767
        # counted in UTF-8 bytes, not characters
        with pytest.raises(InvalidMessageError) as ei:
            Message("T", b"x", properties={"k": "ж" * 16400})
        assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
        # with a given UNIQ_KEY nothing is added: the limit applies to what is given
        with pytest.raises(InvalidMessageError) as ei:
            Message("T", b"x", properties={"UNIQ_KEY": "A" * 32, "k": "v" * 32723})
        assert ei.value.status == "PROPERTIES_SIZE_EXCEEDED"
        _assert_nothing_written(store, before, 1)
        r = store.put_message(Message("T", b"x", properties={"k": "v" * 32722}))
        assert r.ok
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.properties["k"] == "v" * 32722
    rec = _messages(store_dir)[r.commitlog_offset]
    assert len(rec["properties_raw"]) == 32767
    assert rec["properties"]["k"] == "v" * 32722


@pytest.mark.parametrize("topic, why", [
    ("", "empty"),
    ("a" * 128, "128 chars"),
    ("Topic A", "space"),
    ("Topic/A", "slash"),
    ("Topic.A", "dot"),
    ("Topic\x01", "control char"),
    ("Tøpic", "non-ASCII"),
])
def test_bad_topic(open_store, topic, why):
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_message(Message(topic, b"x"))
    assert ei.value.field == "topic", why
    assert "topic" in str(ei.value)
    _assert_nothing_written(open_store, before, 1)


def test_topic_of_127_chars_and_allowed_chars(open_store):
    for topic in ("a" * 127, "%RETRY%group|x-Y_9"):
        r = open_store.put_message(Message(topic, b"x"))
        m = open_store.look_message_by_offset(r.commitlog_offset)
        assert m.topic == topic and m.magic & 0xFFFFFFFF == refreader.MAGIC_V1
    # a retry topic over 127 chars takes the v2 layout (2-byte topic length, docs/format.md §1.5)
    long_retry = "%RETRY%" + "g" * 150
    r = open_store.put_message(Message(long_retry, b"retry"))
    m = open_store.look_message_by_offset(r.commitlog_offset)
    assert m.topic == long_retry and m.magic & 0xFFFFFFFF == refreader.MAGIC_V2
    assert r.wrote_bytes == refreader.record_size(5, 157, UNIQ_PROP_LEN + CRC_PROP_LEN, v2=True)
    with pytest.raises(InvalidMessageError) as ei:
        Message("%RETRY%" + "g" * 249, b"x")                      # 256 > 255
    assert ei.value.field == "topic"
    rec = _messages(open_store.root)[r.commitlog_offset]
    assert rec["topic"] == long_retry and rec["magic"] == refreader.MAGIC_V2


@pytest.mark.parametrize("kwargs, field", [
    ({"keys": "a\x01b"}, "keys"),
    ({"keys": "a\x02b"}, "keys"),
    ({"keys": ["ok", "a\x02b"]}, "keys"),
    ({"keys": ["has space"]}, "keys"),
    ({"tags": "t\x01"}, "tags"),
    ({"tags": "\x02t"}, "tags"),
    ({"properties": {"k": "a\x01b"}}, "properties['k']"),
    ({"properties": {"k": "a\x02b"}}, "properties['k']"),
    ({"properties": {"k\x01": "v"}}, "properties name"),
    ({"properties": {"k\x02": "v"}}, "properties name"),
])
def test_separators_in_keys_tags_properties(open_store, kwargs, field):
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_message(Message("T", b"x", **kwargs))
    assert ei.value.field == field
    _assert_nothing_written(open_store, before, 1)


@pytest.mark.parametrize("args, kwargs, field", [
    (("T", "a str body"), {}, "body"),
    (("T", None), {}, "body"),
    ((b"T", b"x"), {}, "topic"),
    ((None, b"x"), {}, "topic"),
    (("T", b"x"), {"tags": 5}, "tags"),
    (("T", b"x"), {"keys": 5}, "keys"),
    (("T", b"x"), {"properties": [("k", "v")]}, "properties"),
    (("T", b"x"), {"properties": {"k": 1}}, "properties['k']"),
    (("T", b"x"), {"flag": "1"}, "flag"),
    (("T", b"x"), {"born_host": 1234}, "born_host"),
])
def test_wrong_types(open_store, args, kwargs, field):
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageTypeError) as ei:
        open_store.put_message(Message(*args, **kwargs))
    assert ei.value.field == field
    assert isinstance(ei.value, TypeError) and isinstance(ei.value, RocketStoreError)
    _assert_nothing_written(open_store, before, 1)


def test_negative_queue_id(open_store):
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_message(Message("T", b"x"), -1)
    assert ei.value.field == "queue_id"
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_messages([Message("T", b"x")], -1)
    assert ei.value.field == "queue_id"
    _assert_nothing_written(open_store, before, 1)


def test_put_argument_types_raise_store_errors(open_store):
    """put_message's own arguments are validated like the Message's fields are."""
    before = open_store.get_max_phy_offset()
    with pytest.raises(InvalidMessageTypeError) as ei:
        open_store.put_message("not a message")
    assert ei.value.field == "msg"
    with pytest.raises(InvalidMessageTypeError) as ei:
        open_store.put_message(Message("T", b"x"), "1")
    assert ei.value.field == "queue_id"
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_message(Message("T", b"x"), 2**31)        # QUEUEID is a Java int
    assert ei.value.field == "queue_id"
    _assert_nothing_written(open_store, before, 1)


def test_other_bad_message_fields(open_store):
    before = open_store.get_max_phy_offset()
    cases = [
        (lambda: Message("T", b"x", flag=2**31), "flag"),
        (lambda: Message("T", b"x", reconsume_times=-2**31 - 1), "reconsume_times"),
        (lambda: Message("T", b"x", sys_flag=0x10), "sys_flag"),
        (lambda: Message("T", b"x", born_host="nohost"), "host"),
        (lambda: Message("T", b"x", born_host="1.2.3.4:99999999999"), "host"),
        (lambda: Message("T", b"x", tags=""), "tags"),
    ]
    assert "KEYS" not in Message("T", b"x", keys=[]).properties   # empty key list: no KEYS
    for make, field in cases:
        with pytest.raises(InvalidMessageError) as ei:
            make()
        assert ei.value.field == field
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_messages([Message("T", b"a"), Message("U", b"b")])
    assert ei.value.field == "msgs[1].topic"
    with pytest.raises(InvalidMessageTypeError) as ei:
        open_store.put_messages([Message("T", b"a"), b"b"])
    assert ei.value.field == "msgs[1]"
    with pytest.raises(InvalidMessageError) as ei:
        open_store.put_messages([])
    _assert_nothing_written(open_store, before, 1)


@pytest.mark.parametrize("kwargs, setting", [
    ({"mapped_file_size_commit_log": 100}, "mapped_file_size_commit_log"),
    ({"mapped_file_size_commit_log": 2**31}, "mapped_file_size_commit_log"),
    ({"mapped_file_size_commit_log": "4096"}, "mapped_file_size_commit_log"),
    ({"mapped_file_size_commit_log": 4096.0}, "mapped_file_size_commit_log"),
    ({"mapped_file_size_commit_log": True}, "mapped_file_size_commit_log"),
    ({"max_message_size": 0}, "max_message_size"),
    ({"max_message_size": -1}, "max_message_size"),
    ({"flush_disk_type": "SOMETIMES"}, "flush_disk_type"),
    ({"flush_disk_type": "sync_flush"}, "flush_disk_type"),
    ({"mapped_file_size_consume_queue": 10}, "mapped_file_size_consume_queue"),
    ({"store_host": "nohost"}, "store_host"),
    ({"store_host": "1.2.3.4"}, "store_host"),
    ({"store_host": "example.com:10911"}, "store_host"),
    ({"store_host": "1.2.3.4:x"}, "store_host"),
    ({"check_crc_on_recover": "yes"}, "check_crc_on_recover"),
    ({"sync_flush_timeout": 0}, "sync_flush_timeout"),
    ({"flush_interval_commit_log": -5}, "flush_interval_commit_log"),
    ({"transient_store_pool_size": 0}, "transient_store_pool_size"),
])
def test_bad_config(kwargs, setting):
    with pytest.raises(InvalidConfigError) as ei:
        StoreConfig(**kwargs)
    assert ei.value.setting == setting
    assert setting in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_config_defaults_and_rounding():
    cfg = StoreConfig()
    assert cfg.mapped_file_size_commit_log == 1024 ** 3
    assert cfg.max_message_size == 4 * 1024 * 1024
    assert cfg.flush_disk_type == "ASYNC_FLUSH"
    assert cfg.store_host == "127.0.0.1:10911"
    assert cfg.mapped_file_size_consume_queue == 6_000_000
    assert StoreConfig(mapped_file_size_consume_queue=128).mapped_file_size_consume_queue == 140
    assert StoreConfig(mapped_file_size_consume_queue=140).mapped_file_size_consume_queue == 140
    with pytest.raises(InvalidConfigError) as ei:
        StoreConfig().replace(max_message_size=0)
    assert ei.value.setting == "max_message_size"


def test_open_with_wrong_config_type(store_dir):
    with pytest.raises(InvalidMessageTypeError) as ei:
        MessageStore.open(store_dir, {"mapped_file_size_commit_log": 4096})
    assert ei.value.field == "config"


# -- non-ASCII text, hashes ---------------------------------------------------------------------

def test_non_ascii_round_trip_and_tags_hash(store_dir, small_config):
    tags = "标签-ж-😀"
    keys = ["ключ", "鍵", "🔑x"]
    props = {"цвет": "синий", "emoji": "😀🎉", "mixed": "aé中𝄞"}
    with MessageStore.open(store_dir, small_config) as store:
        r = store.put_message(Message("T", "тело".encode(), tags=tags, keys=keys,
                                      properties=props))
    with MessageStore.open(store_dir, small_config) as store:
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.tags == tags and m.keys == keys
        for k, v in props.items():
            assert m.properties[k] == v
        assert bytes(m.body).decode() == "тело"
    rec = _messages(store_dir)[r.commitlog_offset]
    assert rec["properties"]["TAGS"] == tags
    assert rec["properties"]["KEYS"] == " ".join(keys)
    assert {k: rec["properties"][k] for k in props} == props
    assert rec["total_size"] == refreader.record_size(len("тело".encode()), 1,
                                                      len(rec["properties_raw"]))
    for s in (tags, "ж", "标签", "😀", "a😀b", "Tag||ж", "é" * 60, "TAG1", "",
              "\x7f\x80\u07ff\u0800\uffff\U00010000\U0010ffff"):
        assert java_hash(s) == refreader.java_hash(s), repr(s)
    # known Java values
    assert java_hash("TAG1") == 2567159
    assert java_hash("Tag0") == 2598902


# -- hosts and ids -----------------------------------------------------------------------------

def test_ipv6_born_and_store_host(store_dir):
    cfg = StoreConfig(mapped_file_size_commit_log=65536, store_host="[::1]:10911")
    with MessageStore.open(store_dir, cfg) as store:
        first = store.put_message(Message("T", b"v4 born", tags="a"))
        r = store.put_message(Message("T", b"v6 both", tags="b", born_host="[::1]:40009"))
        assert len(r.msg_id) == 56 and len(first.msg_id) == 56
        assert r.msg_id == refreader.offset_msg_id("::1", 10911, r.commitlog_offset)
        m = store.look_message_by_id(r.msg_id)
        assert m is not None and m.commitlog_offset == r.commitlog_offset
        assert m.sys_flag & 0x10 and m.sys_flag & 0x20
        assert m.born_host == "[::1]:40009" and m.store_host == "[::1]:10911"
        assert m.msg_id == r.msg_id
        assert store.look_message_by_offset(first.commitlog_offset).sys_flag & 0x30 == 0x20
        # both hosts 12 bytes longer than IPv4
        assert r.wrote_bytes == refreader.record_size(7, 1, 7 + 42 + CRC_PROP_LEN, born_v6=True,
                                                     store_v6=True)
        # an IPv4 id for the same offset is another host's message
        assert store.look_message_by_id(
            refreader.offset_msg_id("127.0.0.1", 10911, r.commitlog_offset)) is None
    recs = _messages(store_dir)
    rec = recs[r.commitlog_offset]
    assert rec["sys_flag"] & 0x30 == 0x30
    assert rec["born_host"] == "0:0:0:0:0:0:0:1:40009"
    assert rec["store_host"] == "0:0:0:0:0:0:0:1:10911"
    assert rec["body"] == b"v6 both" and rec["total_size"] == r.wrote_bytes
    assert recs[first.commitlog_offset]["sys_flag"] & 0x30 == 0x20
    with MessageStore.open(store_dir, cfg) as store:
        assert store.look_message_by_id(r.msg_id).born_host == "[::1]:40009"


def test_ipv6_born_host_with_ipv4_store_host(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as store:
        r = store.put_message(Message("T", b"x", born_host="[2001:db8::7]:1234"))
        assert len(r.msg_id) == 32
        m = store.look_message_by_id(r.msg_id)
        assert m.sys_flag & 0x30 == 0x10
        assert m.born_host == "[2001:db8::7]:1234"
    rec = _messages(store_dir)[r.commitlog_offset]
    assert rec["born_host"] == "2001:db8:0:0:0:0:0:7:1234"
    assert rec["sys_flag"] & 0x30 == 0x10


def test_born_fields_given(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as store:
        r = store.put_message(Message("T", b"x", flag=7, reconsume_times=3,
                                      prepared_transaction_offset=123, born_timestamp=1700000000000,
                                      born_host="10.1.2.3:5555"), 2)
        m = store.look_message_by_offset(r.commitlog_offset)
        assert (m.flag, m.reconsume_times, m.prepared_transaction_offset) == (7, 3, 123)
        assert m.born_timestamp == 1700000000000 and m.born_host == "10.1.2.3:5555"
        assert m.queue_id == 2 and m.store_timestamp == r.store_timestamp
        d = store.put_message(Message("T", b"defaults"))
        m = store.look_message_by_offset(d.commitlog_offset)
        assert m.born_timestamp == m.store_timestamp == d.store_timestamp
        assert m.born_host == "127.0.0.1:0"
        assert (m.flag, m.reconsume_times, m.prepared_transaction_offset, m.sys_flag) == (0, 0, 0, 0)
    rec = _messages(store_dir)[r.commitlog_offset]
    assert rec["born_host"] == "10.1.2.3:5555" and rec["flag"] == 7
    assert rec["reconsume_times"] == 3 and rec["prepared_transaction_offset"] == 123


def test_bad_message_ids(open_store):
    from rocketstore import InvalidMessageIdError
    for bad in ("", "XYZ", "0" * 31, "0" * 33, "G" * 32, "0" * 55):
        with pytest.raises(InvalidMessageIdError):
            open_store.look_message_by_id(bad)
    # well formed but no record there
    assert open_store.look_message_by_id(refreader.offset_msg_id("127.0.0.1", 10911, 3)) is None
    assert open_store.look_message_by_id(
        refreader.offset_msg_id("127.0.0.1", 10911, 10**9)) is None


# -- compressed bodies -------------------------------------------------------------------------

@pytest.mark.parametrize("sys_flag", [0x301, 0x1])        # ZLIB type, and legacy zlib (type 0)
def test_compressed_body(store_dir, small_config, sys_flag):
    plain = b"compressible body " * 100
    stored = zlib.compress(plain)
    with MessageStore.open(store_dir, small_config) as store:
        r = store.put_message(Message("T", stored, tags="z", sys_flag=sys_flag))
        m = store.look_message_by_offset(r.commitlog_offset)
        assert bytes(m.body) == plain
        assert bytes(m.stored_body) == stored
        assert m.sys_flag == sys_flag
        assert m.body_crc == refreader.body_crc(stored)     # CRC of the bytes as stored
        raw = store.look_message_by_offset(r.commitlog_offset, raw=True)
        assert bytes(raw.body) == stored
        assert bytes(store.look_message_by_id(r.msg_id).body) == plain
        assert [bytes(x.body) for x in store.iter_messages()] == [plain]
    rec = _messages(store_dir)[r.commitlog_offset]
    assert rec["body"] == stored and rec["sys_flag"] == sys_flag
    assert zlib.decompress(rec["body"]) == plain


# -- files: rolling, blanks, boundaries ----------------------------------------------------------

def _check_files(root: str, file_size: int, single_puts: bool = True) -> tuple[int, int]:
    """Every full file ends with a blank that fills it exactly; no record straddles files.

    With ``single_puts`` (every record written by its own put, never cut back) each blank
    must also have been needed: the next file's first record did not fit in it.
    Returns (number of files, number of messages).
    """
    by_file: dict[str, list] = {}
    for name, pos, phy, rec in _records(root, file_size):
        by_file.setdefault(name, []).append((pos, phy, rec))
    names = sorted(by_file)
    msgs = 0
    for i, name in enumerate(names):
        items = by_file[name]
        start = int(name)
        assert items[0][0] == 0, f"{name}: data does not start at the file's first byte"
        for pos, phy, rec in items:
            assert phy == start + pos
            if rec["kind"] == "msg":
                msgs += 1
                assert rec["physical_offset"] == phy
                assert pos + rec["total_size"] <= file_size - refreader.END_FILE_MIN_BLANK_LENGTH
            elif rec["kind"] == "blank":
                assert pos + rec["size"] == file_size, f"{name}: blank does not fill the file"
                assert rec["size"] >= refreader.END_FILE_MIN_BLANK_LENGTH
        last = items[-1][2]
        if i < len(names) - 1:
            assert last["kind"] == "blank", f"{name}: a full file must end with a blank"
            # the blank was needed: the next file's first record did not fit here
            nxt = by_file[names[i + 1]][0][2]
            if single_puts and nxt["kind"] == "msg":
                assert nxt["total_size"] + refreader.END_FILE_MIN_BLANK_LENGTH > last["size"]
    return len(names), msgs


def test_rolling_files_blank_fill_and_read_back(store_dir, small_config, rand):
    file_size = small_config.mapped_file_size_commit_log
    sent = []
    with MessageStore.open(store_dir, small_config) as store:
        while store.get_max_phy_offset() < 6 * file_size:
            msg = Message(f"Roll{rand.randint(0, 2)}", rand.randbytes(rand.randint(0, 900)),
                          tags=rand.choice([None, "a", "bb"]), keys=[f"k{len(sent)}"])
            r = store.put_message(msg, rand.randint(0, 3))
            sent.append((r, msg))
            off = r.commitlog_offset
            assert off % file_size + r.wrote_bytes <= file_size - 8
        end = store.get_max_phy_offset()
        files = {}
        for r, msg in sent:
            m = store.look_message_by_offset(r.commitlog_offset)
            assert bytes(m.body) == msg.body and m.topic == msg.topic
            assert m.queue_offset == r.queue_offset
            # re-encoding from the fields gives the bytes on disk (trailing \x02 kept)
            start = r.commitlog_offset - r.commitlog_offset % file_size
            if start not in files:
                with open(os.path.join(store_dir, "commitlog", f"{start:020d}"), "rb") as f:
                    files[start] = f.read()
            pos = r.commitlog_offset - start
            assert m.encode() == files[start][pos:pos + r.wrote_bytes]
        assert [m.commitlog_offset for m in store.iter_messages()] == \
            [r.commitlog_offset for r, _ in sent]
        # first byte of every file is a record; the last byte of a file never starts one
        for k in range(end // file_size):
            assert store.look_message_by_offset(k * file_size) is not None
            assert store.look_message_by_offset((k + 1) * file_size - 1) is None
        assert store.look_message_by_offset(end) is None
    nfiles, nmsgs = _check_files(store_dir, file_size)
    assert nfiles >= 7 and nmsgs == len(sent)
    # queue offsets per topic-queue are dense from 0
    per_queue: dict = {}
    for r, msg in sent:
        per_queue.setdefault((msg.topic, r.queue_id), []).append(r.queue_offset)
    for offs in per_queue.values():
        assert offs == list(range(len(offs)))
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == len(sent)
        assert store.get_max_phy_offset() == end
        for (topic, qid), offs in per_queue.items():
            assert store.commit_log.get_queue_offset(topic, qid) == len(offs)


def test_batch_moves_whole_to_next_file(store_dir, small_config):
    file_size = small_config.mapped_file_size_commit_log
    with MessageStore.open(store_dir, small_config) as store:
        store.put_message(Message("B", bytes(3000)))
        r = store.put_messages([Message("B", bytes(300), keys=[f"k{i}"]) for i in range(3)], 1)
        assert r.ok and r.msg_count == 3
        offs = r.commitlog_offsets
        assert offs[0] == file_size         # did not fit behind the first record
        assert len(r.msg_id.split(",")) == 3
        for i, o in enumerate(offs):
            m = store.look_message_by_offset(o)
            assert m.queue_offset == i and m.keys == [f"k{i}"]
            assert m.msg_id == r.msg_id.split(",")[i]
    _check_files(store_dir, file_size, single_puts=False)


def _body_for_record(total: int, topic: str = "T") -> int:
    """Body length giving a record of ``total`` bytes (no tags/keys, store-added UNIQ_KEY)."""
    return total - refreader.record_size(0, len(topic), UNIQ_PROP_LEN)


def test_record_filling_file_to_the_last_8_bytes(store_dir, small_config):
    """A record may end exactly 8 bytes before the file end; the next put writes an 8-byte
    blank and moves to the next file. Reopen at each step."""
    file_size = small_config.mapped_file_size_commit_log
    small_config = _rocketmq_layout(small_config)
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        r = store.put_message(Message("T", bytes(_body_for_record(file_size - 8))))
        assert r.commitlog_offset == 0 and r.wrote_bytes == file_size - 8
        assert store.get_max_phy_offset() == file_size - 8
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        assert sum(1 for _ in store.iter_messages()) == 1
        assert store.get_max_phy_offset() == file_size - 8
        r2 = store.put_message(Message("T", b"next"))
        assert r2.commitlog_offset == file_size and r2.queue_offset == 1
    recs = _records(store_dir, file_size)
    blanks = [(phy, rec["size"]) for _, _, phy, rec in recs if rec["kind"] == "blank"]
    assert blanks == [(file_size - 8, 8)]
    _check_files(store_dir, file_size)
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        assert sum(1 for _ in store.iter_messages()) == 2
        assert store.get_max_phy_offset() == file_size + r2.wrote_bytes
        assert bytes(store.look_message_by_offset(file_size).body) == b"next"


def test_record_one_byte_too_big_for_remaining_space(store_dir, small_config):
    file_size = small_config.mapped_file_size_commit_log
    small_config = _rocketmq_layout(small_config)
    with MessageStore.open(store_dir, _rocketmq_layout(small_config)) as store:
        store.put_message(Message("T", bytes(_body_for_record(1000))))
        left = file_size - 1000
        # needs left - 7 bytes + 8 reserve: one byte too many
        r = store.put_message(Message("T", bytes(_body_for_record(left - 7))))
        assert r.commitlog_offset == file_size
        # fits exactly (left - 8) in the new file's remaining space? use the new file
        r3 = store.put_message(Message("T", bytes(_body_for_record(file_size - 8 - r.wrote_bytes))))
        assert r3.commitlog_offset == file_size + r.wrote_bytes
        assert store.get_max_phy_offset() == 2 * file_size - 8
    blanks = [(phy, rec["size"]) for _, _, phy, rec in _records(store_dir, file_size)
              if rec["kind"] == "blank"]
    assert blanks == [(1000, left)]
    _check_files(store_dir, file_size)


def test_reopen_after_writing_exactly_to_file_boundary(store_dir, small_config):
    """Data ending exactly at a file boundary (a blank closing the file) reopens cleanly,
    with or without the next (pre-allocated, empty) file on disk, after a clean close or a
    crash, and the next put goes to the next file."""
    file_size = small_config.mapped_file_size_commit_log
    with MessageStore.open(store_dir, small_config) as store:
        store.put_message(Message("T", bytes(_body_for_record(2000))))
        r = store.put_message(Message("T", bytes(_body_for_record(2500))))   # rolls: blank
        assert r.commitlog_offset == file_size
    before = _commitlog_bytes(store_dir)
    # cut the log back to the boundary: drop everything from the second file on
    cl = os.path.join(store_dir, "commitlog")
    for name in sorted(os.listdir(cl)):
        if int(name) >= file_size:
            os.unlink(os.path.join(cl, name))
    assert _records(store_dir, file_size)[-1][3]["kind"] == "blank"
    for crashed in (False, True):
        if crashed:
            open(os.path.join(store_dir, "abort"), "wb").close()
        with MessageStore.open(store_dir, small_config) as store:
            assert store.recovery["last_exit_ok"] is (not crashed)
            assert sum(1 for _ in store.iter_messages()) == 1
            assert store.get_max_phy_offset() == file_size
            assert list(store.iter_messages())[0].commitlog_offset == 0
    with MessageStore.open(store_dir, small_config) as store:
        r = store.put_message(Message("T", b"after boundary"))
        assert r.commitlog_offset == file_size and r.queue_offset == 1
    with MessageStore.open(store_dir, small_config) as store:
        assert sum(1 for _ in store.iter_messages()) == 2
        assert store.get_max_phy_offset() == file_size + r.wrote_bytes
        assert bytes(store.look_message_by_offset(file_size).body) == b"after boundary"
    after = _commitlog_bytes(store_dir)
    first = f"{0:020d}"
    assert after[first] == before[first]        # the closed file was not touched
    _check_files(store_dir, file_size, single_puts=False)
