"""Broker metrics: counters after sends and pulls, scraped over HTTP from the opt-in Prometheus
port and parsed with prometheus_client's own parser."""
from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest

from messaging_support import until
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker.metrics import BUCKETS_S, LatencyHistogram
from rocketstore.client.producer import Producer
from rocketstore.client.pull_consumer import PullConsumer
from rocketstore.errors import InvalidConfigError
from rocketstore.store import Message
from rocketstore.store.config import StoreConfig
from servers import start_broker, start_namesrv  # tests/servers.py

parser = pytest.importorskip("prometheus_client.parser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(port: int) -> list:
    """/metrics parsed by prometheus_client's parser into metric families."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return list(parser.text_string_to_metric_families(r.read().decode()))


def check_exposition(fams: list, cluster: str, broker: str, broker_id: str = "0") -> None:
    """What a Prometheus user relies on: counters and histograms, not broker-side rates or
    percentiles; every sample labelled with its broker; cumulative histogram buckets."""
    assert fams
    for f in fams:
        assert f.type in ("counter", "histogram", "gauge"), (f.name, f.type)
        assert not f.name.endswith("_rate") and "quantile" not in f.name, f.name
        for s in f.samples:
            assert (s.labels.get("cluster"), s.labels.get("broker"),
                    s.labels.get("broker_id")) == (cluster, broker, broker_id), s
            assert "quantile" not in s.labels, s
    types = {f.name: f.type for f in fams}
    assert types["rocketstore_put_messages"] == "counter"
    assert types["rocketstore_get_messages"] == "counter"
    assert types["rocketstore_send_failed"] == "counter"
    assert types["rocketstore_flush_wait_seconds"] == "histogram"
    assert types["rocketstore_commitlog_flush_seconds"] == "histogram"
    for f in fams:
        if f.type != "histogram":
            continue
        buckets = [(s.labels["le"], s.value) for s in f.samples if s.name.endswith("_bucket")]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == "+Inf"
        count = [s.value for s in f.samples if s.name == f.name + "_count"]
        assert count == [buckets[-1][1]]


def select(samples, name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in samples.items()
            if n == name and all(dict(ls).get(k) == x for k, x in labels.items())]



def test_histogram_quantiles():
    h = LatencyHistogram()
    assert h.quantile(0.5) is None
    for _ in range(90):
        h.add(0.001)              # in (0.000512, 0.001024]
    for _ in range(10):
        h.add(0.1)                # in (0.065536, 0.131072]
    assert 0.000512 < h.quantile(0.5) <= 0.001024
    assert 0.065536 < h.quantile(0.99) <= 0.131072
    counts, total, sum_s = h.snapshot()
    assert total == 100 and sum(counts) == 100 and sum_s == pytest.approx(90 * 0.001 + 1.0)
    h.add(BUCKETS_S[-1] * 10)     # past the last bound: the overflow bucket
    assert h.snapshot()[0][-1] == 1


def test_in_process_broker_counts_and_serves(tmp_path):
    port = free_port()
    cfg = BrokerConfig(metrics_port=port)
    broker = Broker.open(tmp_path / "store", cfg, StoreConfig(flush_disk_type="SYNC_FLUSH"))
    try:
        bodies = [b"x" * n for n in (10, 20, 30, 40, 50)]
        with Producer("pg-metrics", broker=broker) as p:
            for b in bodies:
                p.send(Message("MetricsT", b))
        c = PullConsumer("cg-metrics", broker=broker, auto_commit=False,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("MetricsT")
        c.start()
        got = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 5 and time.monotonic() < deadline:
                got += c.poll(1000)
            c.commit()
        finally:
            c.shutdown()
        assert len(got) == 5

        s = scrape(port)
        assert select(s, "rocketstore_put_messages_total", topic="MetricsT") == [5.0]
        assert select(s, "rocketstore_put_bytes_total", topic="MetricsT") == [150.0]
        assert select(s, "rocketstore_get_messages_total", group="cg-metrics",
                      topic="MetricsT") == [5.0]
        assert select(s, "rocketstore_get_bytes_total", group="cg-metrics",
                      topic="MetricsT") == [float(sum(m.store_size for m in got))]
        # every SYNC_FLUSH send waited for its flush acknowledgement, and was timed
        assert select(s, "rocketstore_flush_wait_seconds_count") == [5.0]
        assert select(s, "rocketstore_flush_wait_seconds_bucket", le="+Inf") == [5.0]
        assert select(s, "rocketstore_flush_wait_seconds_sum")[0] > 0
        check_exposition(families(port), "DefaultCluster", "broker-a")
        assert select(s, "rocketstore_disk_used_bytes", dir="commitlog")[0] > 0
        assert select(s, "rocketstore_disk_free_bytes")[0] > 0
        lag = select(s, "rocketstore_consumer_lag", group="cg-metrics", topic="MetricsT")
        assert lag and sum(lag) == 0

        with Producer("pg-metrics", broker=broker) as p:
            for _ in range(2):
                p.send(Message("MetricsT", b"late"))
        broker.store.wait_dispatched(10)
        s = scrape(port)
        assert sum(select(s, "rocketstore_consumer_lag", group="cg-metrics",
                          topic="MetricsT")) == 2
        assert select(s, "rocketstore_put_messages_total", topic="MetricsT") == [7.0]

        info = broker.metrics.runtime_info()
        assert info["msgPutTotalTodayNow"] == "7"
        # >= 5: the consumer's last pull may still be parked at the broker, answered by the
        # late messages after the consumer left (the broker did return them)
        assert int(info["msgGetTotalTodayNow"]) >= 5
        assert info["consumerLagTotal"] == "2" and info["flushWaitCount"] == "7"
    finally:
        broker.close()
    # close() stopped the server
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_metrics_off(tmp_path):
    with Broker.open(tmp_path / "store", BrokerConfig(metrics_enable=False)) as broker:
        assert broker.metrics is None and broker.metrics_server is None
        with Producer("pg-off", broker=broker) as p:
            p.send(Message("OffT", b"x"))
    with pytest.raises(InvalidConfigError, match="metrics_port"):
        BrokerConfig(metrics_port=70000)


def test_metrics_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InvalidConfigError, match=f"cannot serve /metrics on 127.0.0.1:{port}"):
            Broker.open(tmp_path / "store", BrokerConfig(metrics_port=port))
    # the failed open left nothing locked: the store opens again
    with Broker.open(tmp_path / "store", BrokerConfig()) as broker:
        assert broker.metrics_server is None


def test_failed_sends_are_counted_apart(tmp_path):
    from rocketstore.common.protocol import ResponseCode, SendMessageRequest
    with Broker.open(tmp_path / "store", BrokerConfig(auto_create_topic_enable=False)) as broker:
        from rocketstore.store.topics import TopicConfig
        broker.topic_manager.update(TopicConfig("OkT", 1, 1))
        ok = broker.send_message(SendMessageRequest("pg", "OkT", 0, [Message("OkT", b"abc")]))
        refused = broker.send_message(SendMessageRequest("pg", "NoSuchTopicHere", 0,
                                                         [Message("NoSuchTopicHere", b"x")]))
        assert ok.result().code == ResponseCode.SUCCESS
        assert refused.result().code == ResponseCode.TOPIC_NOT_EXIST
        puts, put_bytes, failed, _, _ = broker.metrics.counters()
        assert puts == {"OkT": 1} and put_bytes == {"OkT": 3}
        # a topic the broker does not hold is counted under one shared key (made-up names
        # must not grow the table)
        from rocketstore.broker.metrics import NO_SUCH_TOPIC
        assert failed == {NO_SUCH_TOPIC: 1}


def test_broker_process_metrics_port(tmp_path):
    """broker.conf's metricsPort turns the endpoint on for ``rocketstore broker``."""
    port = free_port()
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr, name="broker-m",
                          conf={"metricsPort": str(port), "brokerClusterName": "ClusterM"})
    try:
        with Producer("pg-proc", namesrv_addr=ns.addr) as p:
            for i in range(3):
                p.send(Message("ProcT", f"m{i}".encode()))
        s = until(lambda: (lambda s: s if select(s, "rocketstore_put_messages_total",
                                                 topic="ProcT") == [3.0] else None)(scrape(port)),
                  "3 puts counted")
        assert select(s, "rocketstore_put_bytes_total", topic="ProcT") == [6.0]
        # ASYNC_FLUSH (the default): no send waits for a flush; the flush service's rounds
        # (every 500 ms) are timed instead
        assert select(s, "rocketstore_flush_wait_seconds_count") == [0.0]
        s = until(lambda: (lambda s: s if select(s, "rocketstore_commitlog_flush_seconds_count")
                           [0] >= 1 else None)(scrape(port)), "a timed flush round")
        assert 0 < select(s, "rocketstore_commitlog_flush_seconds_sum")[0] < 60
        check_exposition(families(port), "ClusterM", "broker-m")
        # the same series from every broker stay apart: one sample per topic, this broker's
        assert [dict(ls) for (n, ls), _ in s.items() if n == "rocketstore_put_messages_total"
                and dict(ls)["topic"] == "ProcT"] == [
            {"cluster": "ClusterM", "broker": "broker-m", "broker_id": "0", "topic": "ProcT"}]
    finally:
        assert broker.stop() == 0, broker.output[-2000:]
        assert ns.stop() == 0
