"""TopicConfig and TopicConfigManager (docs/format.md §10, topics.json)."""
from __future__ import annotations

import dataclasses
import json
import re
import os
import threading
from pathlib import Path

import pytest

from rocketstore.store import topics
from rocketstore.store.configfile import loads
from rocketstore.errors import CorruptionError
from rocketstore.store.topics import (MAX_QUEUE_NUMS, TOPICS_FILE, DataVersion, TopicConfig,
                                TopicConfigManager)

NOW_MS = 1_700_000_000_000


@pytest.fixture
def config_dir(tmp_path) -> str:
    return str(tmp_path / "config")


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(topics, "_now_ms", lambda: NOW_MS)


def reloaded(config_dir: str) -> TopicConfigManager:
    m = TopicConfigManager(config_dir)
    m.load()
    return m


# -- TopicConfig ---------------------------------------------------------------------------

def test_topic_config_defaults_are_rocketmq_class_defaults():
    c = TopicConfig("T")
    assert (c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_filter_type,
            c.topic_sys_flag, c.order, c.extra) == (16, 16, 6, "SINGLE_TAG", 0, False, {})


@pytest.mark.parametrize("perm,readable,writeable,inherited", [
    (0, False, False, False),
    (1, False, False, True),
    (2, False, True, False),   # write-only
    (4, True, False, False),   # read-only
    (6, True, True, False),    # read-write
    (7, True, True, True),     # TBW102 with autoCreateTopicEnable
    (8, False, False, False),  # PRIORITY alone grants nothing
    (15, True, True, True),
])
def test_perm_bits_decide_readable_and_writeable(perm, readable, writeable, inherited):
    c = TopicConfig("T", perm=perm)
    assert (c.is_readable(), c.is_writeable(), c.is_inherited()) == (readable, writeable, inherited)


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"perm": 16}, ValueError, "perm"),
    ({"perm": -1}, ValueError, "perm"),
    ({"perm": True}, TypeError, "perm"),
    ({"perm": 6.0}, TypeError, "perm"),
    ({"read_queue_nums": MAX_QUEUE_NUMS + 1}, ValueError, "read_queue_nums"),
    ({"read_queue_nums": -1}, ValueError, "read_queue_nums"),
    ({"read_queue_nums": "4"}, TypeError, "read_queue_nums"),
    ({"write_queue_nums": MAX_QUEUE_NUMS + 1}, ValueError, "write_queue_nums"),
    ({"write_queue_nums": -1}, ValueError, "write_queue_nums"),
    ({"topic_filter_type": "TAG"}, ValueError, "topic_filter_type"),
    ({"topic_sys_flag": -1}, ValueError, "topic_sys_flag"),
    ({"order": 1}, TypeError, "order"),
    ({"topic_name": ""}, ValueError, "topic_name"),
    ({"topic_name": None}, TypeError, "topic_name"),
    ({"extra": {1: "x"}}, TypeError, "extra"),
])
def test_invalid_topic_config_names_the_field(kwargs, exc, name):
    args = {"topic_name": "T", **kwargs}
    with pytest.raises(exc, match=f"TopicConfig.{name}"):
        TopicConfig(**args)


def test_perm_range_message_explains_the_bits():
    with pytest.raises(ValueError, match=r"perm=16 is out of range 0\.\.15 .*READ 4"):
        TopicConfig("T", perm=16)


@pytest.mark.parametrize("kwargs", [
    {"perm": 0}, {"perm": 15}, {"read_queue_nums": 0}, {"read_queue_nums": MAX_QUEUE_NUMS},
    {"write_queue_nums": 0}, {"write_queue_nums": MAX_QUEUE_NUMS},
    {"topic_filter_type": "MULTI_TAG"},
])
def test_topic_config_accepts_values_at_the_bounds(kwargs):
    TopicConfig("T", **kwargs)


def test_topic_config_is_frozen_and_replace_validates():
    c = TopicConfig("T")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.perm = 2  # type: ignore[misc]
    assert dataclasses.replace(c, perm=4).is_writeable() is False
    with pytest.raises(ValueError, match="perm"):
        dataclasses.replace(c, perm=99)


def test_topic_config_copies_extra():
    attrs = {"attributes": {}}
    c = TopicConfig("T", extra=attrs)
    attrs["x"] = 1
    assert c.extra == {"attributes": {}}


# -- TopicConfigManager --------------------------------------------------------------------

def test_missing_file_loads_empty_with_counter_zero(config_dir):
    m = TopicConfigManager(config_dir)
    assert m.load() is False
    assert m.all() == {}
    assert m.data_version.counter == 0
    assert m.get("T") is None
    assert not os.path.exists(config_dir)


def test_written_layout_is_fastjson_pretty_with_alphabetical_properties(config_dir, frozen_clock):
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4))
    assert Path(m.path).read_text() == (
        '{\n'
        '\t"dataVersion":{\n'
        '\t\t"counter":1,\n'
        f'\t\t"timestamp":{NOW_MS}\n'
        '\t},\n'
        '\t"topicConfigTable":{\n'
        '\t\t"TopicTest":{\n'
        '\t\t\t"order":false,\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"TopicTest",\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n'
        '\t\t}\n'
        '\t}\n'
        '}')
    json.loads(Path(m.path).read_text())  # no integer-keyed map: strict JSON too


def test_round_trip_keeps_every_field_and_the_data_version(config_dir):
    m = TopicConfigManager(config_dir)
    configs = [
        TopicConfig("A"),
        TopicConfig("%RETRY%group1", read_queue_nums=1, write_queue_nums=1, perm=2,
                    topic_filter_type="MULTI_TAG", topic_sys_flag=3, order=True),
        TopicConfig("Тема-ü", read_queue_nums=0, write_queue_nums=MAX_QUEUE_NUMS, perm=15),
    ]
    for c in configs:
        m.update(c)
    again = reloaded(config_dir)
    assert again.all() == {c.topic_name: c for c in configs}
    assert again.data_version == m.data_version


def test_update_bumps_counter_and_timestamp(config_dir, monkeypatch):
    clock = iter(range(NOW_MS, NOW_MS + 100))
    monkeypatch.setattr(topics, "_now_ms", lambda: next(clock))
    m = TopicConfigManager(config_dir)
    m.load()
    versions = [m.data_version]
    m.update(TopicConfig("A"))
    versions.append(m.data_version)
    m.update(TopicConfig("A", perm=4))
    versions.append(m.data_version)
    assert [v.counter for v in versions] == [0, 1, 2]
    assert versions[0].timestamp < versions[1].timestamp < versions[2].timestamp
    assert reloaded(config_dir).data_version == versions[2]


def test_timestamp_never_goes_back_when_the_clock_does(config_dir, monkeypatch):
    monkeypatch.setattr(topics, "_now_ms", lambda: NOW_MS)
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("A"))
    monkeypatch.setattr(topics, "_now_ms", lambda: NOW_MS - 60_000)
    m.update(TopicConfig("B"))
    assert m.data_version == DataVersion(2, NOW_MS)


def test_delete_bumps_version_only_when_the_topic_existed(config_dir):
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("A"))
    assert m.delete("missing") is False
    assert m.data_version.counter == 1
    assert m.delete("A") is True
    assert m.data_version.counter == 2
    again = reloaded(config_dir)
    assert again.all() == {}
    assert again.data_version.counter == 2


def test_create_if_absent_follows_the_tbw102_template(config_dir):
    m = TopicConfigManager(config_dir)
    created = m.create_if_absent("Auto")
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (8, 8, 6)
    assert not created.is_inherited()
    assert m.data_version.counter == 1
    assert reloaded(config_dir).get("Auto") == created


def test_create_if_absent_returns_an_existing_topic_untouched(config_dir):
    m = TopicConfigManager(config_dir)
    existing = TopicConfig("T", read_queue_nums=2, write_queue_nums=2, perm=4)
    m.update(existing)
    assert m.create_if_absent("T", default_queue_nums=16) == existing
    assert m.data_version.counter == 1


def test_create_if_absent_takes_default_queue_nums(config_dir):
    m = TopicConfigManager(config_dir)
    c = m.create_if_absent("T", default_queue_nums=3)
    assert (c.read_queue_nums, c.write_queue_nums) == (3, 3)
    with pytest.raises(ValueError, match="default_queue_nums"):
        m.create_if_absent("U", default_queue_nums=MAX_QUEUE_NUMS + 1)
    with pytest.raises(ValueError, match="topic_name"):
        m.create_if_absent("")
    assert set(m.all()) == {"T"}


def test_update_rejects_anything_but_a_topic_config(config_dir):
    m = TopicConfigManager(config_dir)
    with pytest.raises(TypeError, match="config"):
        m.update({"topicName": "T"})  # type: ignore[arg-type]
    assert m.data_version.counter == 0


def test_all_returns_a_copy(config_dir):
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("A"))
    m.all().clear()
    assert set(m.all()) == {"A"}


def test_4x_file_without_topic_sys_flag_or_order_loads_with_defaults(config_dir):
    # the layout of early 4.x brokers: no "order" or "topicSysFlag"
    os.makedirs(config_dir)
    Path(config_dir, TOPICS_FILE).write_text(
        '{"dataVersion":{"counter":2,"timestamp":1393729865073},"topicConfigTable":{'
        '"TopicTest":{"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
        '"topicName":"TopicTest","writeQueueNums":8}}}')
    m = reloaded(config_dir)
    assert m.get("TopicTest") == TopicConfig("TopicTest", read_queue_nums=8, write_queue_nums=8)
    assert m.data_version == DataVersion(2, 1393729865073)


FIVE_X = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"stateVersion":7,
\t\t"timestamp":1780894480298
\t},
\t"futureProperty":{"x":1},
\t"topicConfigTable":{
\t\t"TopicA":{
\t\t\t"attributes":{"+message.type":"FIFO","+queue.type":"SimpleCQ"},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TopicA",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t},
\t\t"TopicB":{"attributes":{},"perm":4,"readQueueNums":1,"topicName":"TopicB","writeQueueNums":1}
\t}
}"""


def test_5x_file_with_attributes_loads(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, TOPICS_FILE).write_text(FIVE_X)
    m = reloaded(config_dir)
    a = m.get("TopicA")
    assert (a.read_queue_nums, a.perm, a.is_readable(), a.is_writeable()) == (4, 6, True, True)
    assert a.extra == {"attributes": {"+message.type": "FIFO", "+queue.type": "SimpleCQ"}}
    assert m.get("TopicB").is_writeable() is False
    assert m.data_version == DataVersion(3, 1780894480298, 7)


def test_5x_properties_survive_a_rewrite(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, TOPICS_FILE).write_text(FIVE_X)
    m = reloaded(config_dir)
    m.update(TopicConfig("TopicC"))
    doc = loads(Path(m.path).read_text())
    assert doc["topicConfigTable"]["TopicA"]["attributes"] == {
        "+message.type": "FIFO", "+queue.type": "SimpleCQ"}
    assert doc["dataVersion"]["stateVersion"] == 7
    assert doc["dataVersion"]["counter"] == 4
    assert doc["futureProperty"] == {"x": 1}
    # properties stay alphabetical with "attributes" merged in, as fastjson writes 5.x beans
    assert list(doc["topicConfigTable"]["TopicA"])[:2] == ["attributes", "order"]


def test_corrupt_topics_json_falls_back_to_bak(config_dir):
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("A"))
    m.update(TopicConfig("B"))
    main = Path(m.path)
    main.write_bytes(main.read_bytes()[:40])
    again = reloaded(config_dir)
    assert set(again.all()) == {"A"}
    assert again.data_version.counter == 1
    # the fallback rewrote a good main file and kept the good .bak
    assert json.loads(main.read_text())["topicConfigTable"].keys() == {"A"}
    assert set(reloaded(config_dir).all()) == {"A"}


def test_out_of_range_value_in_file_falls_back_to_bak(config_dir):
    m = TopicConfigManager(config_dir)
    m.update(TopicConfig("A"))
    m.update(TopicConfig("B"))
    main = Path(m.path)
    main.write_text(main.read_text().replace('"perm":6', '"perm":99'))
    assert set(reloaded(config_dir).all()) == {"A"}


def test_out_of_range_value_without_bak_raises_naming_topic_and_field(config_dir):
    os.makedirs(config_dir)
    Path(config_dir, TOPICS_FILE).write_text(
        '{"topicConfigTable":{"T":{"perm":99,"topicName":"T"}}}')
    with pytest.raises(CorruptionError, match=r"topicConfigTable\['T'\].*TopicConfig\.perm=99"):
        TopicConfigManager(config_dir).load()


def test_concurrent_updates_keep_file_and_counter_in_step(config_dir):
    m = TopicConfigManager(config_dir)
    per_thread = 25

    def worker(n: int) -> None:
        for i in range(per_thread):
            m.update(TopicConfig(f"T{n}-{i % 5}", read_queue_nums=i))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.data_version.counter == 4 * per_thread
    again = reloaded(config_dir)
    assert again.all() == m.all()
    assert again.data_version == m.data_version


def test_message_type_attribute_read_from_the_file(config_dir):
    """RocketMQ 5 stores ``message.type`` under its plain key (TopicConfigManager applies the
    ``+``/``-`` modification before storing); a 4.9.8 topic without attributes is NORMAL."""
    from rocketstore.store import topic_attributes as ta
    os.makedirs(config_dir)
    Path(config_dir, TOPICS_FILE).write_text(
        '{"dataVersion":{"counter":2,"timestamp":1393729865073},"topicConfigTable":{'
        '"Old":{"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",'
        '"topicName":"Old","writeQueueNums":8},'
        '"Fifo":{"attributes":{"message.type":"FIFO"},"perm":6,"readQueueNums":8,'
        '"topicName":"Fifo","writeQueueNums":8}}}')
    m = reloaded(config_dir)
    assert m.get("Old").attributes == {} and ta.message_type(m.get("Old").attributes) == "NORMAL"
    assert ta.message_type(m.get("Fifo").attributes) == "FIFO"


def test_attribute_modifications_follow_rocketmq_5():
    from rocketstore.errors import InvalidArgumentError
    from rocketstore.store import topic_attributes as ta
    parse = ta.parse_modification
    assert parse("+message.type=FIFO") == {"+message.type": "FIFO"}
    assert ta.alter({}, parse("+message.type=DELAY"), create=True) == {"message.type": "DELAY"}
    assert ta.alter({"message.type": "FIFO"}, parse("+message.type=NORMAL"),
                    create=False) == {"message.type": "NORMAL"}
    assert ta.alter({"message.type": "FIFO"}, parse("-message.type"), create=False) == {}
    for text, create, words in (("+message.type=fifo", True, "one of"),
                                ("+cleanup.policy=COMPACTION", True, "unsupported key"),
                                ("-message.type", True, "only +key=value"),
                                ("-message.type", False, "does not have it"),
                                ("+message.type=FIFO,+message.type=DELAY", True, "twice"),
                                ("+message.type", True, "+key=value")):
        with pytest.raises(InvalidArgumentError, match=re.escape(words)):
            ta.alter({}, parse(text), create=create)
