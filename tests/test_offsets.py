"""ConsumerOffsetManager and the ConfigFile persistence under it (docs/format.md §10)."""
from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocketstore.store import configfile
from rocketstore.store.configfile import ConfigFile, dumps, loads
from rocketstore.errors import CorruptionError
from rocketstore.store.offsets import CONSUMER_OFFSET_FILE, ConsumerOffsetManager

ROOT = Path(__file__).resolve().parent.parent
SERVICE_THREAD = "ConsumerOffsetPersistService"


def wait_until(predicate, timeout: float = 5.0) -> None:
    """Poll *predicate* until true; fail after *timeout* seconds (a bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s")
        time.sleep(0.005)


@pytest.fixture
def config_dir(tmp_path) -> str:
    return str(tmp_path / "config")


@pytest.fixture
def fixture_config(tmp_path, fixture_root) -> str:
    """A writable copy of the 4.9.8 fixture's config directory."""
    dst = tmp_path / "rmq-config"
    shutil.copytree(fixture_root / "store" / "config", dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return str(dst)


def persisted(config_dir: str, table: dict[str, dict[int, int]]) -> ConsumerOffsetManager:
    m = ConsumerOffsetManager(config_dir)
    for key, queues in table.items():
        topic, group = key.split("@")
        for queue_id, offset in queues.items():
            m.commit_offset(group, topic, queue_id, offset)
    m.persist()
    return m


def loaded_table(config_dir: str) -> dict[str, dict[int, int]]:
    m = ConsumerOffsetManager(config_dir)
    m.load()
    return m.table()


V1 = {"TopicA@g1": {0: 10, 1: 11}}
V2 = {"TopicA@g1": {0: 20, 1: 21}, "TopicB@g2": {3: 5}}


# -- fastjson text -------------------------------------------------------------------------

def test_loads_accepts_unquoted_integer_keys():
    assert loads('{"offsetTable":{"T@g":{0:250,1:250\n\t\t}}}') == {
        "offsetTable": {"T@g": {"0": 250, "1": 250}}}


def test_loads_accepts_negative_and_spaced_integer_keys():
    assert loads("{ -1 : 2 ,\n\t3\t:4}") == {"-1": 2, "3": 4}


def test_loads_leaves_digits_inside_strings_alone():
    # each string looks like a bare key once its quotes are ignored; escaped quotes included
    text = r'{"a,1:b":{"{2:":1},"k":"{3:4,5:6}","q\",7:":"\\",8:9}'
    assert loads(text) == {"a,1:b": {"{2:": 1}, "k": "{3:4,5:6}", 'q",7:': "\\", "8": 9}


def test_loads_does_not_quote_numbers_in_arrays_or_values():
    assert loads('{"a":[1,2,3],"b":4,5:[6]}') == {"a": [1, 2, 3], "b": 4, "5": [6]}


def test_loads_rejects_text_that_is_not_json_even_with_keys_quoted():
    with pytest.raises(ValueError):
        loads('{"offsetTable":{"T@g":{0:250,1:')


def test_dumps_writes_format_md_example_exactly():
    doc = {"offsetTable": {"TopicTest@group1": {0: 250, 1: 250}}}
    assert dumps(doc) == '{\n\t"offsetTable":{\n\t\t"TopicTest@group1":{0:250,1:250\n\t\t}\n\t}\n}'


def test_dumps_writes_empty_map_as_braces():
    assert dumps({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'


def test_dumps_sorts_properties_and_integer_keys():
    assert dumps({"b": {2: 1, 0: 1}, "a": True}) == '{\n\t"a":true,\n\t"b":{0:1,2:1\n\t}\n}'


def test_dumps_leaves_out_none_values_like_fastjson():
    assert dumps({"a": None, "b": 1}) == '{\n\t"b":1\n}'


def test_dumps_rejects_maps_mixing_str_and_int_keys():
    with pytest.raises(TypeError, match="all str or all int"):
        dumps({"a": 1, 2: 3})


def test_dumps_rejects_unserialisable_values():
    with pytest.raises(TypeError, match="set"):
        dumps({"a": {1, 2}})


# -- the RocketMQ 4.9.8 fixture ------------------------------------------------------------

def test_fixture_loads_to_rocketmq_reading(fixture_config, expected_lines):
    expected = sorted((e["topicAtGroup"], e["queueId"], e["offset"])
                      for e in expected_lines if e["type"] == "consumer_offset")
    assert [e["loadOk"] for e in expected_lines if e["type"] == "consumer_offset_file"] == [True]
    m = ConsumerOffsetManager(fixture_config)
    assert m.load() is True
    got = sorted((key, queue_id, offset)
                 for key, queues in m.table().items() for queue_id, offset in queues.items())
    assert got == expected


def test_fixture_bytes_are_reproduced_by_dumps(fixture_config):
    # same layout as fastjson byte for byte, once the HashMap order of the keys is kept
    m = ConsumerOffsetManager(fixture_config)
    m.load()
    raw = Path(m.path).read_bytes()
    assert dumps({"offsetTable": m.table()}, sort_keys=False).encode() == raw


def test_fixture_answers_group_and_topic_queries(fixture_config):
    m = ConsumerOffsetManager(fixture_config)
    m.load()
    assert m.which_groups_by_topic("TopicA") == {"OracleGroup", "OracleGroup2"}
    assert m.which_topics_by_group("OracleGroup") == {"TopicA", "TopicB"}
    assert m.query_offset("OracleGroup2", "TopicA", 2) == 121
    assert m.query_offsets("OracleGroup", "TopicB") == {0: 60, 1: 61, 2: 61, 3: 61}


def test_fixture_rewritten_is_read_back_identically(fixture_config):
    m = ConsumerOffsetManager(fixture_config)
    m.load()
    before = m.table()
    m.persist()
    assert loaded_table(fixture_config) == before


# -- table semantics -----------------------------------------------------------------------

def test_query_offset_of_unknown_queue_is_minus_one(config_dir):
    m = ConsumerOffsetManager(config_dir)
    m.commit_offset("g", "T", 0, 5)
    assert m.query_offset("g", "T", 1) == -1
    assert m.query_offset("g", "Other", 0) == -1
    assert m.query_offsets("other", "T") == {}


def test_commit_of_smaller_offset_replaces_like_a_reset(config_dir):
    m = ConsumerOffsetManager(config_dir)
    m.commit_offset("g", "T", 0, 100)
    m.commit_offset("g", "T", 0, 0)
    assert m.query_offset("g", "T", 0) == 0


def test_offset_limits_are_accepted_at_java_bounds(config_dir):
    m = ConsumerOffsetManager(config_dir)
    m.commit_offset("g", "T", 2**31 - 1, 2**63 - 1)
    m.commit_offset("g", "T", 0, 0)
    m.persist()
    assert loaded_table(config_dir) == {"T@g": {2**31 - 1: 2**63 - 1, 0: 0}}


def test_remove_offset_removes_group_on_every_topic_and_nothing_else(config_dir):
    m = ConsumerOffsetManager(config_dir)
    for topic in ("T1", "T2"):
        m.commit_offset("g", topic, 0, 1)
        m.commit_offset("g2", topic, 0, 2)
    m.commit_offset("xg", "g", 0, 3)  # a topic named like the group
    m.remove_offset("g")
    assert m.table() == {"T1@g2": {0: 2}, "T2@g2": {0: 2}, "g@xg": {0: 3}}


def test_table_returns_a_copy(config_dir):
    m = ConsumerOffsetManager(config_dir)
    m.commit_offset("g", "T", 0, 1)
    m.table()["T@g"][0] = 99
    m.query_offsets("g", "T")[0] = 99
    assert m.query_offset("g", "T", 0) == 1


def test_keys_without_exactly_one_separator_survive_and_are_skipped_by_queries(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, CONSUMER_OFFSET_FILE).write_text(
        '{"offsetTable":{"weird":{0:1},"a@b@c":{0:2},"T@g":{0:3}}}')
    m = ConsumerOffsetManager(config_dir)
    m.load()
    assert m.which_topics_by_group("b") == set()
    assert m.which_groups_by_topic("T") == {"g"}
    m.commit_offset("g", "T", 1, 4)
    m.persist()
    assert loaded_table(config_dir) == {"weird": {0: 1}, "a@b@c": {0: 2}, "T@g": {0: 3, 1: 4}}


@pytest.mark.parametrize("group,topic,queue_id,offset,exc,name", [
    ("", "T", 0, 0, ValueError, "group"),
    ("a@b", "T", 0, 0, ValueError, "group"),
    (5, "T", 0, 0, TypeError, "group"),
    ("g", "", 0, 0, ValueError, "topic"),
    ("g", "T@x", 0, 0, ValueError, "topic"),
    ("g", b"T", 0, 0, TypeError, "topic"),
    ("g", "T", -1, 0, ValueError, "queue_id"),
    ("g", "T", 2**31, 0, ValueError, "queue_id"),
    ("g", "T", True, 0, TypeError, "queue_id"),
    ("g", "T", "0", 0, TypeError, "queue_id"),
    ("g", "T", 0, -1, ValueError, "offset"),
    ("g", "T", 0, 2**63, ValueError, "offset"),
    ("g", "T", 0, 1.0, TypeError, "offset"),
])
def test_commit_offset_rejects_bad_argument_naming_it(config_dir, group, topic, queue_id, offset,
                                                      exc, name):
    m = ConsumerOffsetManager(config_dir)
    with pytest.raises(exc, match=name):
        m.commit_offset(group, topic, queue_id, offset)
    assert m.table() == {}


def test_queries_validate_their_arguments(config_dir):
    m = ConsumerOffsetManager(config_dir)
    with pytest.raises(ValueError, match="queue_id"):
        m.query_offset("g", "T", -1)
    with pytest.raises(ValueError, match="group"):
        m.remove_offset("")
    with pytest.raises(TypeError, match="topic"):
        m.which_groups_by_topic(None)


@pytest.mark.parametrize("interval,exc", [(0, ValueError), (-5, ValueError), (1.5, TypeError),
                                          (True, TypeError)])
def test_flush_interval_must_be_a_positive_int(config_dir, interval, exc):
    with pytest.raises(exc, match="flush_interval_ms"):
        ConsumerOffsetManager(config_dir, flush_interval_ms=interval)


# -- persistence ---------------------------------------------------------------------------

def test_load_of_missing_files_is_empty_and_writes_nothing(config_dir):
    m = ConsumerOffsetManager(config_dir)
    assert m.load() is False
    assert m.table() == {}
    assert not os.path.exists(config_dir)


def test_commit_persist_load_round_trip(config_dir):
    persisted(config_dir, V2)
    assert loaded_table(config_dir) == V2


def test_written_file_has_unquoted_keys_and_is_not_strict_json(config_dir):
    m = persisted(config_dir, V2)
    text = Path(m.path).read_text()
    assert '"TopicB@g2":{3:5\n\t\t}' in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # proves the Java-compatible form
    assert loads(text) == {"offsetTable": {"TopicA@g1": {"0": 20, "1": 21},
                                           "TopicB@g2": {"3": 5}}}


def test_persist_creates_the_config_directory(tmp_path):
    config_dir = tmp_path / "a" / "b" / "config"
    persisted(str(config_dir), V1)
    assert loaded_table(str(config_dir)) == V1


def test_bak_holds_the_previous_version(config_dir):
    persisted(config_dir, V1)
    first = Path(config_dir, CONSUMER_OFFSET_FILE).read_bytes()
    persisted(config_dir, V2)
    assert Path(config_dir, CONSUMER_OFFSET_FILE + ".bak").read_bytes() == first
    assert not os.path.exists(os.path.join(config_dir, CONSUMER_OFFSET_FILE + ".tmp"))


def test_persist_syncs_tmp_before_rename_and_directory_after(config_dir, monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to name synced descriptors")
    persisted(config_dir, V1)
    events: list[tuple[str, ...]] = []
    real_replace, real_link = os.replace, os.link

    def fsync(fd):
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))

    def replace(src, dst):
        events.append(("replace", os.path.basename(src), os.path.basename(dst)))
        real_replace(src, dst)

    def link(src, dst):
        events.append(("link", os.path.basename(src), os.path.basename(dst)))
        real_link(src, dst)

    monkeypatch.setattr(configfile, "_fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    m = ConsumerOffsetManager(config_dir)
    m.load()
    m.commit_offset("g", "T", 0, 1)
    m.persist()
    f = CONSUMER_OFFSET_FILE
    assert events == [
        ("fsync", f + ".tmp"),
        ("link", f, f + ".bak.tmp"),
        ("replace", f + ".bak.tmp", f + ".bak"),
        ("replace", f + ".tmp", f),
        ("fsync", "config"),
    ]


def test_bak_is_a_synced_copy_when_hard_links_are_unsupported(config_dir, monkeypatch):
    persisted(config_dir, V1)
    first = Path(config_dir, CONSUMER_OFFSET_FILE).read_bytes()

    def no_link(src, dst):
        raise OSError(errno.EPERM, "hard links not supported", src)

    monkeypatch.setattr(os, "link", no_link)
    persisted(config_dir, V2)
    assert Path(config_dir, CONSUMER_OFFSET_FILE + ".bak").read_bytes() == first
    assert loaded_table(config_dir) == V2


class SimulatedCrash(Exception):
    pass


def test_crash_after_tmp_is_written_leaves_the_old_file_loadable(config_dir, monkeypatch):
    persisted(config_dir, V1)
    real_replace = os.replace

    def crash_before_main_rename(src, dst):
        if src.endswith(CONSUMER_OFFSET_FILE + ".tmp"):
            raise SimulatedCrash
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_before_main_rename)
    with pytest.raises(SimulatedCrash):
        persisted(config_dir, V2)
    monkeypatch.undo()
    assert os.path.exists(os.path.join(config_dir, CONSUMER_OFFSET_FILE + ".tmp"))
    assert loaded_table(config_dir) == V1


def test_torn_tmp_file_is_ignored_on_load(config_dir):
    persisted(config_dir, V1)
    Path(config_dir, CONSUMER_OFFSET_FILE + ".tmp").write_text('{"offsetTable":{"T@g":{0:')
    assert loaded_table(config_dir) == V1


def test_truncated_main_file_falls_back_to_bak(config_dir, caplog):
    persisted(config_dir, V1)
    persisted(config_dir, V2)
    main = Path(config_dir, CONSUMER_OFFSET_FILE)
    main.write_bytes(main.read_bytes()[:len(main.read_bytes()) // 2])
    with caplog.at_level(logging.WARNING, logger="rocketstore.store.configfile"):
        assert loaded_table(config_dir) == V1
    assert "unparseable" in caplog.text and ".bak" in caplog.text


def test_repair_after_fallback_keeps_the_good_bak(config_dir):
    persisted(config_dir, V1)
    persisted(config_dir, V2)
    bak = Path(config_dir, CONSUMER_OFFSET_FILE + ".bak")
    good_bak = bak.read_bytes()
    Path(config_dir, CONSUMER_OFFSET_FILE).write_text("{garbage")
    m = ConsumerOffsetManager(config_dir)
    m.load()
    m.shutdown()  # loaded from .bak, so dirty: rewrites the main file
    assert bak.read_bytes() == good_bak  # the corrupt file was not rotated over it
    assert loaded_table(config_dir) == V1
    assert ConfigFile(m.path).load(lambda doc: doc) is not None


@pytest.mark.parametrize("content", [b"", b"  \n", b'{"offsetTable":[1,2]}',
                                     b'{"offsetTable":{"T@g":{"x":1}}}', b"\xff\xfe{}"])
def test_empty_or_malformed_main_file_falls_back_to_bak(config_dir, content):
    persisted(config_dir, V1)
    persisted(config_dir, V2)
    Path(config_dir, CONSUMER_OFFSET_FILE).write_bytes(content)
    assert loaded_table(config_dir) == V1


def test_missing_main_file_with_bak_loads_bak(config_dir):
    # the window of RocketMQ HEAD's persist: <file> moved to .bak, new file not yet written
    persisted(config_dir, V1)
    os.replace(os.path.join(config_dir, CONSUMER_OFFSET_FILE),
               os.path.join(config_dir, CONSUMER_OFFSET_FILE + ".bak"))
    assert loaded_table(config_dir) == V1


def test_empty_main_file_without_bak_loads_empty(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, CONSUMER_OFFSET_FILE).write_bytes(b"")
    m = ConsumerOffsetManager(config_dir)
    assert m.load() is False
    assert m.table() == {}


def test_corrupt_main_file_without_bak_raises_corruption_error(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, CONSUMER_OFFSET_FILE).write_text('{"offsetTable":{"T@g":{0:')
    with pytest.raises(CorruptionError, match="no .bak") as info:
        ConsumerOffsetManager(config_dir).load()
    assert info.value.path.endswith(CONSUMER_OFFSET_FILE)


def test_corrupt_main_file_and_corrupt_bak_raise_corruption_error_naming_bak(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, CONSUMER_OFFSET_FILE).write_text("{")
    Path(config_dir, CONSUMER_OFFSET_FILE + ".bak").write_text("[")
    with pytest.raises(CorruptionError) as info:
        ConsumerOffsetManager(config_dir).load()
    assert info.value.path.endswith(".bak")


_CHILD = """
import sys
from rocketstore.store.offsets import ConsumerOffsetManager
m = ConsumerOffsetManager(sys.argv[1])
m.load()
i = max(m.query_offsets("g", "T").values(), default=0)  # continue from what survived
first = i + 1
while True:
    i += 1
    for q in range(4):
        m.commit_offset("g", "T", q, i)
    m.persist()
    if i == first:
        print("ready", flush=True)
"""


def test_sigkill_during_persist_loop_always_leaves_a_loadable_consistent_file(config_dir, rand):
    last = 0
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, config_dir], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline() == "ready\n"
            time.sleep(rand.uniform(0.0, 0.05))  # a random kill point, not a timing assertion
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        offsets = ConsumerOffsetManager(config_dir)
        offsets.load()
        values = set(offsets.query_offsets("g", "T").values())
        assert len(values) == 1, "one persist wrote all four queues: never a mix"
        value = values.pop()
        assert value > last  # the persist acknowledged by "ready" survived
        last = value


# -- persist service -----------------------------------------------------------------------

def test_service_persists_after_interval_when_dirty(config_dir):
    with ConsumerOffsetManager(config_dir, flush_interval_ms=50) as m:
        m.commit_offset("g", "T", 0, 7)
        wait_until(lambda: os.path.exists(m.path))
        wait_until(lambda: loaded_table(config_dir) == {"T@g": {0: 7}})
        m.commit_offset("g", "T", 0, 8)
        wait_until(lambda: loaded_table(config_dir) == {"T@g": {0: 8}})


def test_service_does_not_persist_when_clean(config_dir):
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=50)
    m.start()
    try:
        wait_until(lambda: m._service_rounds >= 3)
        assert not os.path.exists(m.path)
        m.commit_offset("g", "T", 0, 1)
        wait_until(lambda: os.path.exists(m.path))
        st = os.stat(m.path)
        rounds = m._service_rounds
        wait_until(lambda: m._service_rounds >= rounds + 3)
        after = os.stat(m.path)
        assert (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
        # an unchanged value is no change either
        m.commit_offset("g", "T", 0, 1)
        wait_until(lambda: m._service_rounds >= rounds + 6)
        assert os.stat(m.path).st_ino == st.st_ino
    finally:
        m.shutdown()


def test_shutdown_wakes_joins_the_thread_and_persists(config_dir):
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=600_000)  # only shutdown persists
    m.start()
    m.commit_offset("g", "T", 3, 42)
    started = time.monotonic()
    m.shutdown()
    assert time.monotonic() - started < 5, "shutdown must wake the sleeping service"
    assert SERVICE_THREAD not in [t.name for t in threading.enumerate()]
    assert loaded_table(config_dir) == {"T@g": {3: 42}}


def test_shutdown_of_a_clean_table_writes_nothing(config_dir):
    persisted(config_dir, V1)
    before = os.stat(os.path.join(config_dir, CONSUMER_OFFSET_FILE)).st_ino
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=600_000)
    m.load()
    m.start()
    m.shutdown()
    assert os.stat(os.path.join(config_dir, CONSUMER_OFFSET_FILE)).st_ino == before


def test_context_manager_runs_the_service_and_shuts_it_down(config_dir):
    with ConsumerOffsetManager(config_dir, flush_interval_ms=600_000) as m:
        assert SERVICE_THREAD in [t.name for t in threading.enumerate()]
        m.commit_offset("g", "T", 0, 1)
    assert SERVICE_THREAD not in [t.name for t in threading.enumerate()]
    assert loaded_table(config_dir) == {"T@g": {0: 1}}


def test_start_twice_raises_and_shutdown_twice_is_harmless(config_dir):
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=600_000)
    m.start()
    with pytest.raises(RuntimeError, match="already started"):
        m.start()
    m.shutdown()
    m.shutdown()
    m.start()  # restartable after shutdown
    m.shutdown()


def test_failed_periodic_persist_is_logged_and_retried(config_dir, monkeypatch, caplog):
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=20)
    real_persist = m._file.persist
    failures = []

    def flaky_persist(obj):
        if not failures:
            failures.append(1)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_persist(obj)

    monkeypatch.setattr(m._file, "persist", flaky_persist)
    with caplog.at_level(logging.ERROR, logger="rocketstore.store.offsets"), m:
        m.commit_offset("g", "T", 0, 9)
        wait_until(lambda: os.path.exists(m.path))
    assert failures == [1]
    assert "periodic persist failed" in caplog.text
    assert loaded_table(config_dir) == {"T@g": {0: 9}}


# -- concurrency ---------------------------------------------------------------------------

def test_four_threads_committing_concurrently_leave_the_exact_table(config_dir):
    commits = 500
    m = ConsumerOffsetManager(config_dir, flush_interval_ms=1)  # persists race the commits
    m.start()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            r = random.Random(n)
            barrier.wait()
            for i in range(commits):
                m.commit_offset(f"g{n}", "T", i % 8, i)
                m.commit_offset("shared", "T", n * 100 + r.randrange(4), i)  # disjoint queues
                m.query_offset("shared", "T", 0)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m.shutdown()
    assert errors == []
    table = m.table()
    expected_shared: dict[int, int] = {}
    for n in range(4):  # replay each worker: the last commit to each queue wins
        r = random.Random(n)
        for i in range(commits):
            expected_shared[n * 100 + r.randrange(4)] = i
        assert table[f"T@g{n}"] == {i % 8: i for i in range(commits)}
    assert table["T@shared"] == expected_shared
    assert loaded_table(config_dir) == table


class _WatchedLock:
    """The offset table's lock, counting the holds of one thread and calling ``between`` in
    that thread each time it lets the lock go (so another thread can take it then)."""

    def __init__(self, watched: threading.Thread, between) -> None:
        self._lock = threading.Lock()
        self.watched, self.between, self.holds = watched, between, 0

    def __enter__(self):
        self._lock.acquire()
        if threading.current_thread() is self.watched:
            self.holds += 1
        return self

    def __exit__(self, *exc):
        self._lock.release()
        if threading.current_thread() is self.watched:
            self.between(self.holds)


@pytest.mark.parametrize("how,n", [("table", 300_000), ("persist", 100_000)])
def test_copying_a_big_table_lets_commits_in_between_chunks(tmp_path, how, n):
    """table() and persist() copy ~300k entries a few thousand per hold of the lock, so a
    pull committing an offset waits for one chunk, not the whole table; what they return or
    write is every entry, each with a whole value (here a commit made between two chunks to an
    entry not copied yet is in the copy), and the file reloads to the same table."""
    mgr = ConsumerOffsetManager(tmp_path)
    mgr.merge_table({f"t{i:06d}@g": {0: i, 1: i + 1} for i in range(n)})
    last = f"t{n - 1:06d}@g"
    committed = []

    def between(holds: int) -> None:
        if holds == 2 and not committed:     # the copy has begun: another thread commits
            t = threading.Thread(target=mgr.commit_offset, args=("g", f"t{n - 1:06d}", 1, 7))
            t.start()
            t.join()
            committed.append(holds)
        elif holds == 4 and len(committed) == 1:     # a key added mid-copy (the iterator
            # would fail or skip entries): the copy goes on over the keys left
            t = threading.Thread(target=mgr.commit_offset, args=("g2", "t_new", 0, 5))
            t.start()
            t.join()
            committed.append(holds)

    mgr._lock = _WatchedLock(threading.current_thread(), between)
    if how == "table":
        copy = mgr.table()
    else:
        mgr.persist()
        mgr._lock = threading.Lock()
        again = ConsumerOffsetManager(tmp_path)
        assert again.load()
        copy = again.table()
    holds = mgr._lock.holds if how == "table" else None
    assert committed == [2, 4]
    copy.pop("t_new@g2", None)                   # added during the copy: in it or not
    assert len(copy) == n
    assert copy[last] == {0: n - 1, 1: 7}          # committed between chunks, before its chunk
    assert all(copy[f"t{i:06d}@g"] == {0: i, 1: i + 1} for i in range(0, n - 1, 997))
    if holds is not None:
        assert holds >= n // 8192, holds            # a few thousand entries per hold
    assert mgr.table() == {**copy, last: {0: n - 1, 1: 7}, "t_new@g2": {0: 5}}
