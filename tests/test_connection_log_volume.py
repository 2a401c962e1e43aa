"""A client cannot make the broker write a log line per connection (docs/protocol.md "Limits"):
"new consumer/producer connected" and channel expiry are summed up, one line per interval (or per housekeeping scan) with a count and the first few
names, as heartbeat subscription drops are.

An in-process broker served over TCP (its loggers are this process'), raw HEART_BEAT frames.
"""
from __future__ import annotations

import json
import logging

from messaging_support import open_broker
from rawwire import RawClient

HEART_BEAT, SUCCESS = 34, 0
LOGGERS = ("rocketstore.broker.consumers", "rocketstore.broker.producers")


def _beat(c: RawClient, client: str, groups: list[str], producers: list[str] = ()) -> None:
    body = json.dumps({
        "clientID": client, "producerDataSet": [{"groupName": p} for p in producers],
        "consumerDataSet": [{"groupName": g, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING",
                             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                             "subscriptionDataSet": [{"topic": "T", "subString": "*",
                                                      "tagsSet": [], "codeSet": [],
                                                      "subVersion": 1}]}
                            for g in groups]}).encode()
    h, _ = c.call(HEART_BEAT, {}, body)
    assert h["code"] == SUCCESS, h


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_connection_churn_writes_a_bounded_number_of_lines(tmp_path):
    broker = open_broker(tmp_path / "store", transport="tcp")
    addr = f"127.0.0.1:{broker.config.listen_port}"
    rec = _Lines()
    loggers = [logging.getLogger(n) for n in LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(rec)
        lg.setLevel(logging.INFO)
    try:
        for i in range(300):                 # connect, register, disconnect
            with RawClient(addr) as c:
                _beat(c, f"churn@{i}", ["G_churn"], ["P_churn"])
        with RawClient(addr) as c:           # one connection alternating its client id: each
            # new id is a new channel (the old one leaves its groups), so a new member too
            for i in range(300):
                _beat(c, f"twin@{i % 2}", ["G_twin"])
        assert len(rec.lines) <= 6, rec.lines[:10]
        connected = [ln for ln in rec.lines if "new consumer connected" in ln]
        assert len(connected) == 1 and "G_churn" in connected[0], rec.lines
        assert sum("new producer connected" in ln for ln in rec.lines) == 1, rec.lines

        # what was held back comes out as one line per kind once the interval is over
        for manager in (broker.consumer_manager, broker.producer_manager):
            for limiter in manager.log_limiters:
                limiter.interval_s = 0
        broker.scan_not_active_channels()
        summary = [ln for ln in rec.lines if "new consumer connected" in ln][-1]
        assert "599 times" in summary and "G_churn" in summary, summary    # 299 + the twins' 300
        summary = [ln for ln in rec.lines if "new producer connected" in ln][-1]
        assert "299 times" in summary and "P_churn" in summary, summary
        assert len(rec.lines) <= 8, rec.lines

        # 300 groups of one silent client expire: one line for the scan, not one per group
        rec.lines.clear()
        with RawClient(addr) as c:
            _beat(c, "quiet@1", [f"G_quiet_{i}" for i in range(300)])
            broker.consumer_manager.channel_expired_ms = -1
            broker.scan_not_active_channels()
        expired = [ln for ln in rec.lines if "expired" in ln]
        assert len(expired) == 1 and "300" in expired[0] and "G_quiet_0" in expired[0], \
            rec.lines[:5]
        assert broker.consumer_manager.groups() == []
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(rec)
            lg.setLevel(level)
        broker.close()


def test_bad_requests_write_a_bounded_number_of_lines(tmp_path, monkeypatch):
    """300 requests missing a required field, each answered SYSTEM_ERROR naming it: a line
    or two, not one per request."""
    from rocketstore.common.log_limit import LogLimiter
    from rocketstore.remoting import connection
    old = connection._BAD_REQUEST_LOG           # fresh: no earlier test's minute
    monkeypatch.setattr(connection, "_BAD_REQUEST_LOG",
                        LogLimiter(old.logger, old.level, old.what))
    broker = open_broker(tmp_path / "store", transport="tcp")
    addr = f"127.0.0.1:{broker.config.listen_port}"
    rec = _Lines()
    lg = logging.getLogger("rocketstore.remoting")
    level = lg.level
    lg.addHandler(rec)
    lg.setLevel(logging.INFO)
    try:
        with RawClient(addr) as c:
            for _ in range(300):
                h, _ = c.call(215, {})             # DELETE_TOPIC_IN_BROKER without its topic
                assert h["code"] == 1 and "<topic>" in h["remark"], h
        bad = [ln for ln in rec.lines if "bad request" in ln]
        assert 1 <= len(bad) <= 2 and "<topic>" in bad[0], rec.lines[:10]
    finally:
        lg.removeHandler(rec)
        lg.setLevel(level)
        broker.close()
