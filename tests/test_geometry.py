"""MessageStore.open takes the file geometry from an existing store's own files (issue 15.1):
a store written with non-default sizes reads fully with the default config, a given config
its files contradict is refused naming both values, and a damaged last derived file is not
taken for a contradiction."""
from __future__ import annotations

import os

import pytest

from rocketstore import InvalidConfigError, Message, MessageStore, StoreConfig
from rocketstore.store import paths, storedir
from rocketstore.store.status import GetMessageStatus

WRITTEN = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=40 * 20,
               max_hash_slot_num=64, max_index_num=256)


def write_store(root: str, n: int = 250) -> list:
    results = []
    with MessageStore.open(root, StoreConfig(**WRITTEN)) as store:
        for i in range(n):
            results.append(store.put_message(Message("Geo", b"x" * 300, keys=[f"k{i}"]), queue_id=i % 2))
    return results


def test_read_only_open_with_default_config_reads_every_message(store_dir):
    results = write_store(store_dir)
    assert len(os.listdir(paths.commitlog_dir(store_dir))) > 1
    with MessageStore.open(store_dir, read_only=True) as reader:
        assert reader.config.mapped_file_size_commit_log == WRITTEN["mapped_file_size_commit_log"]
        assert reader.config.mapped_file_size_consume_queue == WRITTEN["mapped_file_size_consume_queue"]
        assert (reader.config.max_hash_slot_num, reader.config.max_index_num) == (64, 256)
        got = []
        for qid in (0, 1):
            offset = 0
            while True:
                r = reader.get_message("g", "Geo", qid, offset, max_msgs=32)
                if r.status is not GetMessageStatus.FOUND:
                    assert r.status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                                        GetMessageStatus.OFFSET_OVERFLOW_ONE)
                    break
                got += [m.commitlog_offset for m in r.messages]
                offset = r.next_begin_offset
        assert sorted(got) == sorted(r.commitlog_offset for r in results)
        assert reader.look_message_by_offset(0) is not None
        assert [m.commitlog_offset for m in reader.query_message("Geo", "k7")] == \
            [results[7].commitlog_offset]


def test_writer_open_with_default_config_keeps_the_files_geometry(store_dir):
    write_store(store_dir, 100)
    with MessageStore.open(store_dir) as store:
        assert store.config.mapped_file_size_commit_log == 64 * 1024
        r = store.put_message(Message("Geo", b"more"), queue_id=0)
        assert r.ok and r.queue_offset == 50
    sizes = {os.path.getsize(os.path.join(paths.commitlog_dir(store_dir), n))
             for n in os.listdir(paths.commitlog_dir(store_dir))}
    assert sizes == {64 * 1024}


@pytest.mark.parametrize("setting,value,shown", [
    ("mapped_file_size_commit_log", 128 * 1024, "65536"),
    ("mapped_file_size_consume_queue", 80 * 20, "800"),
])
@pytest.mark.parametrize("read_only", [False, True])
def test_contradicting_config_is_refused_naming_both_values(store_dir, setting, value, shown,
                                                            read_only):
    write_store(store_dir)
    cfg = StoreConfig(**{**WRITTEN, setting: value})
    with pytest.raises(InvalidConfigError) as e:
        MessageStore.open(store_dir, cfg, read_only=read_only)
    assert setting in str(e.value) and str(value) in str(e.value) and shown in str(e.value)
    with MessageStore.open(store_dir, StoreConfig(**WRITTEN), read_only=read_only) as store:
        assert store.get_max_offset_in_queue("Geo", 0) == 125     # nothing was touched


def test_contradicting_index_settings_are_refused(store_dir):
    write_store(store_dir)
    assert len(os.listdir(paths.index_dir(store_dir))) > 1
    with pytest.raises(InvalidConfigError) as e:
        MessageStore.open(store_dir, StoreConfig(**{**WRITTEN, "max_index_num": 512}))
    assert "64/512" in str(e.value) and "(64/256)" in str(e.value)


def crashed(root: str) -> None:
    """Leave the ``abort`` marker a writer that did not close cleanly leaves."""
    open(paths.abort_path(root), "wb").close()


def test_a_lone_queue_file_of_a_cleanly_closed_store_is_certain(store_dir):
    with MessageStore.open(store_dir, StoreConfig(**WRITTEN)) as store:
        store.put_message(Message("One", b"x"), queue_id=0)
    with MessageStore.open(store_dir, read_only=True) as reader:
        assert reader.config.mapped_file_size_consume_queue == 800
        assert reader.get_message("g", "One", 0, 0).status is GetMessageStatus.FOUND
    with pytest.raises(InvalidConfigError, match="mapped_file_size_consume_queue"):
        MessageStore.open(store_dir, StoreConfig(**{**WRITTEN, "mapped_file_size_consume_queue": 1000}))


def test_damaged_last_consume_queue_file_is_not_a_contradiction(store_dir):
    """After a crash a queue's only (last) file may be short: that is recovery's business,
    not a geometry the configuration contradicts."""
    with MessageStore.open(store_dir, StoreConfig(**WRITTEN)) as store:
        store.put_message(Message("One", b"x"), queue_id=0)
    crashed(store_dir)
    qdir = paths.consumequeue_dir(store_dir, "One", 0)
    (only,) = os.listdir(qdir)
    os.truncate(os.path.join(qdir, only), 200)
    cfg = StoreConfig(**WRITTEN)
    assert storedir.config_for_files(store_dir, cfg) is cfg
    # and with the default consume-queue size a lone short file is no evidence either
    default_cq = StoreConfig(**{**WRITTEN, "mapped_file_size_consume_queue": 6_000_000})
    assert storedir.config_for_files(store_dir, default_cq).mapped_file_size_consume_queue == 6_000_000


def test_damaged_newest_index_file_is_not_a_contradiction(store_dir):
    write_store(store_dir)
    names = sorted(os.listdir(paths.index_dir(store_dir)))
    assert len(names) > 1
    os.truncate(os.path.join(paths.index_dir(store_dir), names[-1]), 1000)
    crashed(store_dir)
    cfg = StoreConfig(**WRITTEN)
    assert storedir.config_for_files(store_dir, cfg) is cfg


def test_complete_consume_queue_files_decide_over_a_damaged_last_one(store_dir):
    write_store(store_dir)
    qdir = paths.consumequeue_dir(store_dir, "Geo", 0)
    names = sorted(os.listdir(qdir))
    assert len(names) > 1
    os.truncate(os.path.join(qdir, names[-1]), 120)
    crashed(store_dir)
    found = storedir.file_geometry(store_dir)["mapped_file_size_consume_queue"]
    assert (found.value, found.certain) == (800, True)


def test_open_on_a_file_raises_the_librarys_error(tmp_path):
    p = tmp_path / "not-a-dir"
    p.write_bytes(b"hello")
    for read_only in (False, True):
        with pytest.raises(InvalidConfigError, match="is a file, not a store directory"):
            MessageStore.open(str(p), read_only=read_only)
    assert p.read_bytes() == b"hello"
