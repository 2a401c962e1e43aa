"""A newcomer's first hour (issue 15.6): the obvious things work and say what they mean."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rocketstore
from rocketstore import (InvalidArgumentError, InvalidArgumentTypeError, InvalidMessageError,
                         InvalidMessageTypeError, Message, MessageStore,
                         PutMessageStatus, RocketStoreError, StoreConfig, TopicConfig)
from rocketstore import errors
from rocketstore.store import paths
from rocketstore.store.offsets import ConsumerOffsetManager

REPO = Path(__file__).resolve().parent.parent
SMALL = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=2000,
             max_hash_slot_num=64, max_index_num=256)


@pytest.fixture
def store(store_dir):
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as s:
        yield s


def test_body_bytes_is_a_bytes_copy_and_body_stays_a_zero_copy_view(store):
    r = store.put_message(Message("Orders", json.dumps({"id": 7}).encode()))
    m = store.look_message_by_offset(r.commitlog_offset)
    assert isinstance(m.body, memoryview)                       # zero copy, as before
    assert type(m.body_bytes) is bytes
    assert json.loads(m.body_bytes) == {"id": 7}
    assert m.body_bytes.decode() == '{"id": 7}'
    assert m.body_bytes == m.body.tobytes()


def test_body_bytes_of_a_compressed_record_is_the_decompressed_body(store):
    import zlib
    body = b"compress me " * 100
    msg = Message("Orders", zlib.compress(body), sys_flag=rocketstore.SysFlag.COMPRESSED)
    r = store.put_message(msg)
    assert store.look_message_by_offset(r.commitlog_offset).body_bytes == body


def test_every_public_error_is_importable_from_the_package():
    for name in errors.__all__:
        assert getattr(rocketstore, name) is getattr(errors, name), name
        assert name in rocketstore.__all__
    from rocketstore import DiskFullError, StoreReadOnlyError, TopicPermissionError  # noqa: F401
    assert issubclass(TopicPermissionError, RocketStoreError)


def test_list_topics_and_queues(store):
    store.put_message(Message("A", b"1"), queue_id=0)
    store.put_messages([Message("B", b"x")] * 3, queue_id=2)
    store.put_message(Message("B", b"y"), queue_id=0)
    assert store.wait_dispatched(10)
    assert store.list_topics() == ["A", "B"]
    assert store.list_queues("B") == [("B", 0, 0, 1), ("B", 2, 0, 3)]
    assert [(q.topic, q.queue_id, q.max_offset) for q in store.list_queues()] == \
        [("A", 0, 1), ("B", 0, 1), ("B", 2, 3)]
    assert store.list_queues("C") == []


@pytest.mark.parametrize("offset", [-3, -1])
def test_commit_offset_with_a_negative_offset_raises_the_librarys_error(store, offset):
    with pytest.raises(InvalidArgumentError) as e:
        store.commit_offset("g", "T", 0, offset)
    assert isinstance(e.value, RocketStoreError) and isinstance(e.value, ValueError)
    assert "offset" in str(e.value) and str(offset) in str(e.value)
    with pytest.raises(InvalidArgumentTypeError):
        store.commit_offset("g", "T", "0", 5)  # type: ignore[arg-type]
    assert store.query_offset("g", "T", 0) == -1


def test_persist_offsets_writes_consumer_offsets_now(store_dir):
    # default interval: 5 s, so without persist_offsets() nothing would be on disk yet
    with MessageStore.open(store_dir, StoreConfig(**SMALL)) as store:
        assert store.config.flush_consumer_offset_interval == 5000
        store.commit_offset("g", "T", 1, 42)

        def on_disk() -> int:
            # what a process starting now would read (the file is RocketMQ's fastjson)
            fresh = ConsumerOffsetManager(paths.config_dir(store_dir))
            fresh.load()
            return fresh.query_offset("g", "T", 1)
        assert on_disk() == -1
        store.persist_offsets()
        assert on_disk() == 42
    assert "5 s" in MessageStore.commit_offset.__doc__


def test_queue_ids_beyond_a_configured_topic_are_refused(store):
    store.update_topic_config(TopicConfig("Conf", read_queue_nums=4, write_queue_nums=4))
    r = store.put_message(Message("Conf", b"x"), queue_id=100000)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "queue id 100000 is not below its 4 write queues" in str(r.error)
    assert store.put_message(Message("Conf", b"x"), queue_id=3).ok
    assert store.wait_dispatched(10)
    assert [q.queue_id for q in store.list_queues("Conf")] == [3]   # no queue 100000


def test_get_message_documents_its_group_argument_and_the_dispatch_lag(store):
    doc = MessageStore.get_message.__doc__
    assert "``group``" in doc and "does not use it" in doc
    assert "wait_dispatched" in doc and "NO_MESSAGE_IN_QUEUE" in doc
    store.put_message(Message("T", b"x"))
    assert store.wait_dispatched(10)
    a = store.get_message("group-a", "T", 0, 0)
    b = store.get_message("group-b", "T", 0, 0)
    assert [m.commitlog_offset for m in a.messages] == [m.commitlog_offset for m in b.messages]


# -- the command ------------------------------------------------------------------------------

def cli(*args: str, cwd: Path = REPO, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    env.pop("ROCKETSTORE_TRACEBACK", None)
    proc = subprocess.run([sys.executable, "-m", "rocketstore", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_version():
    out = cli("--version").stdout
    assert out.strip() == f"rocketstore {rocketstore.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", rocketstore.__version__)


def test_a_locked_store_gets_command_line_advice(store_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"topic": "T", "body": "x"}) + "\n")
    with MessageStore.open(store_dir, StoreConfig(**SMALL)):
        proc = cli("import", store_dir, str(rows), check_rc=2)
    err = proc.stderr
    assert err.count("\n") == 1
    assert "locked by another writer" in err and "read-only command" in err and "stat" in err
    assert "read_only=True" not in err                      # the library's advice, not ours


def test_query_limit_says_newest_first_and_positionals_have_help():
    query = cli("query", "--help").stdout
    assert re.search(r"--limit.*newest", " ".join(query.split()))
    get = " ".join(cli("get", "--help").stdout.split())
    for positional in ("topic", "queue", "offset"):
        m = re.search(rf"^ *{positional} +(\S.*)$", cli("get", "--help").stdout, re.M)
        assert m and len(m.group(1)) > 5, (positional, get)


# -- the README --------------------------------------------------------------------------------

def readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    snippet = next(b for b in blocks if "MessageStore.open" in b)
    return snippet


def test_the_readme_snippet_runs_as_written_and_takes_a_few_megabytes(tmp_path):
    snippet = readme_snippet()
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("PutMessageStatus.PUT_OK ")
    assert "0 {'id': 1}" in out                             # consumed, body parsed as JSON
    assert "Orders 0 0 1" in out and "Orders 1 0 100" in out
    stores = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(stores) == 1
    used = sum(os.stat(os.path.join(d, f)).st_blocks * 512
               for d, _, fs in os.walk(stores[0]) for f in fs)
    assert used < 8 * 1024 * 1024, used
    assert "/var/lib" not in snippet and "handle(" not in textwrap.dedent(snippet)
