"""Offset stores: the broadcasting file in RocketMQ's object-keyed form, .bak fallback,
increase-only updates."""
import pytest

from rocketstore.client.offset_store import (LocalFileOffsetStore, OffsetStore, ReadOffsetType,
                                             decode_offset_table, encode_offset_table)
from rocketstore.common import MessageQueue
from rocketstore.errors import MQClientError

A0 = MessageQueue("T", "broker-a", 0)
A1 = MessageQueue("T", "broker-a", 1)


def test_fastjson_form_round_trip():
    text = encode_offset_table({A1: 7, A0: 42})
    assert '"offsetTable":{{' in text
    assert text.index('"brokerName"') < text.index('"queueId"') < text.index('"topic"')
    assert decode_offset_table(text) == {A0: 42, A1: 7}
    compact = '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:42}}'
    assert decode_offset_table(compact) == {A0: 42}
    with pytest.raises(ValueError):
        decode_offset_table('{"offsetTable":{"T@0":1}}')


def test_update_is_increase_only_unless_told():
    s = OffsetStore("g")
    s.update_offset(A0, 10, True)
    s.update_offset(A0, 5, True)
    assert s.read_offset(A0, ReadOffsetType.READ_FROM_MEMORY) == 10
    s.update_offset(A0, 5, False)
    assert s.read_offset(A0, ReadOffsetType.READ_FROM_MEMORY) == 5
    assert s.read_offset(A1, ReadOffsetType.READ_FROM_MEMORY) == -1


def test_local_file_persist_merge_and_reload(tmp_path):
    s = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    assert s.path == tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json"
    s.update_offset(A0, 42, False)
    s.update_offset(A1, 7, False)
    s.persist_all([A0, A1])
    s2 = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    s2.update_offset(A0, 50, False)
    s2.persist_all([A0])                       # merged: A1 keeps its value
    assert decode_offset_table(s.path.read_text()) == {A0: 50, A1: 7}
    assert decode_offset_table(s.path.with_name("offsets.json.bak").read_text()) == \
        {A0: 42, A1: 7}
    s3 = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    s3.load()
    assert s3.read_offset(A0, ReadOffsetType.READ_FROM_MEMORY) == 50
    assert s3.read_offset(MessageQueue("T", "broker-a", 9), ReadOffsetType.READ_FROM_STORE) == -1


def test_local_file_falls_back_to_bak_then_fails_clearly(tmp_path):
    s = LocalFileOffsetStore("c", "g", tmp_path)
    s.update_offset(A0, 3, False)
    s.persist_all([A0])
    s.update_offset(A0, 4, False)
    s.persist_all([A0])
    s.path.write_text("{garbage")              # torn main file: the .bak (3) is read
    s2 = LocalFileOffsetStore("c", "g", tmp_path)
    s2.load()
    assert s2.read_offset(A0, ReadOffsetType.READ_FROM_MEMORY) == 3
    s.path.with_name("offsets.json.bak").write_text("{garbage")
    with pytest.raises(MQClientError, match="offsets.json.bak.*unreadable"):
        LocalFileOffsetStore("c", "g", tmp_path).load()
