"""Admin codes that dump a whole table run on the broker's admin pool, never on its event loop
(docs/protocol.md "Limits", request kinds): GET_ALL_CONSUMER_OFFSET (43) copies every
committed offset (13 ms per 320,000 entries), GET_ALL_TOPIC_CONFIG (21) and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) every topic and group: time in which no send or pull
of any connection would be answered if it ran on the loop. An in-process broker served over
TCP, so the test can see which thread takes each copy; requests are hand-built frames
(tests/rawwire.py)."""
from __future__ import annotations

import threading
from typing import Any

from messaging_support import open_broker
from rawwire import RawClient
from rocketstore.remoting import fastjson

GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 21, 43, 201
SUCCESS = 0


def _record(obj: Any, method: str, threads: list[str]) -> None:
    """``obj.method`` also notes the thread it runs on."""
    real = getattr(obj, method)

    def wrapped(*a: Any, **kw: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*a, **kw)
    setattr(obj, method, wrapped)


def test_table_dumps_are_copied_on_the_admin_pool(tmp_path) -> None:
    broker = open_broker(tmp_path, "tcp")
    try:
        for i in range(50):
            broker.store.commit_offset(f"g{i}", "T_dump", i % 4, 100 + i)
        copied_on: dict[int, list[str]] = {c: [] for c in (
            GET_ALL_CONSUMER_OFFSET, GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)}
        _record(broker.store.consumer_offset_manager, "table",
                copied_on[GET_ALL_CONSUMER_OFFSET])
        _record(broker.store.topic_config_manager, "snapshot", copied_on[GET_ALL_TOPIC_CONFIG])
        _record(broker.subscription_groups, "snapshot",
                copied_on[GET_ALL_SUBSCRIPTIONGROUP_CONFIG])
        with RawClient(f"127.0.0.1:{broker.config.listen_port}") as c:
            answers = {code: c.call(code) for code in copied_on}
        for code, (h, _) in answers.items():
            assert h["code"] == SUCCESS, (code, h)
        offsets = fastjson.loads(answers[GET_ALL_CONSUMER_OFFSET][1])["offsetTable"]
        assert len(offsets) == 50 and offsets["T_dump@g7"] == {3: 107}
        assert "topicConfigTable" in fastjson.loads(answers[GET_ALL_TOPIC_CONFIG][1])
        for code, names in copied_on.items():
            assert names and all(n.startswith("broker-admin") for n in names), (code, names)
    finally:
        broker.close()
