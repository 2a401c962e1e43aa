"""Broker metrics: put and get counts, consumer lag, flush-wait latency, disk use.

What the send and pull paths pay is one call per request (a batch is one call): plain ints in
dicts under one lock. Everything derived -- rates, lag, percentiles, disk use -- is computed
when someone asks (a Prometheus scrape, ``GET_BROKER_RUNTIME_INFO``), never per message.

* put counts and bytes per topic: messages a send stored (its response SUCCESS or a flush/slave
  timeout, which RocketMQ counts as stored too), bodies' bytes;
* get counts and bytes per (group, topic): messages pulls returned, their stored sizes;
* rates: the counters' increase over a window of 10 to 20 s ending now (since start at first);
* lag per (group, topic, queue): the queue's max offset minus the group's committed offset;
* flush-wait latency: under SYNC_FLUSH, the time from a send's put to its flush
  acknowledgement -- the wait the broker holds each producer's response for. The store's group
  commit runs in C without the GIL and exposes no per-sync timing, so this is measured around
  the wait instead (it includes the put, a few microseconds). Kept in a log-spaced histogram
  (factor 2 buckets from 1 µs) from which percentiles are interpolated. Under ASYNC_FLUSH no
  send waits for a flush and the histogram stays empty;
* commit-log flush time: under ASYNC_FLUSH, how long each flush round that synced something
  took (the flush service reports it, a couple of rounds a second), in the same histogram
  form; under SYNC_FLUSH the rounds run in C and the flush wait above stands for them;
* disk use of the store's directories (allocated blocks, so preallocated sparse files count for
  what they really hold) and of the file system, cached for ``DISK_CACHE_S``.

``MetricsHttpServer`` serves the counters, histograms and present-state gauges (never a rate or
a percentile: Prometheus derives those) in Prometheus's text format on ``/metrics`` (an opt-in port:
``BrokerConfig.metrics_port``, broker.conf ``metricsPort``) through ``prometheus_client``, an
optional dependency (``pip install rocketstore[metrics]``); the thread stops on ``close()``.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Hashable, Iterator, TypeVar

from rocketstore.store.cleanup import partition_used_ratio
from rocketstore.broker.stats_windows import StatsWindows
from rocketstore.common.protocol import ResponseCode
from rocketstore.remoting._wire import PutCounter
from rocketstore.store._codec import store_sizes

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker
    from rocketstore.common.protocol import PullMessageRequest

log = logging.getLogger("rocketstore.broker.metrics")

RATE_WINDOW_S = 10.0
DISK_CACHE_S = 5.0
STORE_DIRS = ("commitlog", "consumequeue", "index", "config")
# a send whose put stored the message (handlePutMessageResult's "stored" statuses)
_STORED = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                     ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE})
# histogram bounds: 1 µs * 2**k, k = 0..25 (about 33 s); one overflow bucket past the last
BUCKETS_S = tuple(1e-6 * 2 ** k for k in range(26))
_FINISHED = "FINISHED"      # concurrent.futures' state of a future with a result or exception
# the failure-count key of sends refused for a topic the broker does not hold: made-up names
# share it, so refusals cannot grow the table (no topic name may contain '<' or ' ')
NO_SUCH_TOPIC = "<no such topic>"


class _SendDone:
    """The callback counting a send whose answer is a Future (SYNC_FLUSH, SYNC_MASTER) and
    timing its wait: one object per waiting send, where a closure took seven (the GC walks
    every one of them while thousands of sends wait for their flush)."""

    __slots__ = ("metrics", "request", "topic", "n", "size", "t0")

    def __init__(self, metrics: BrokerMetrics, request: Any, topic: str, n: int,
                 size: int) -> None:
        self.metrics = metrics
        self.request = request          # None: topic, n and size say what was sent
        self.topic = topic
        self.n = n
        self.size = size
        self.t0 = time.perf_counter()

    def __call__(self, f: Future) -> None:
        m = self.metrics
        m.flush_wait.add(time.perf_counter() - self.t0)
        if not f.cancelled() and f.exception() is None:
            m._count_answer(self.request, self.topic, self.n, self.size, f.result())


class LatencyHistogram:
    """Counts of durations in ``BUCKETS_S`` (upper bounds); thread-safe, O(log buckets) add."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(BUCKETS_S) + 1)
        self.total = 0
        self.sum_s = 0.0

    def add(self, seconds: float) -> None:
        i = bisect.bisect_left(BUCKETS_S, seconds)
        with self._lock:
            self.counts[i] += 1
            self.total += 1
            self.sum_s += seconds

    def snapshot(self) -> tuple[list[int], int, float]:
        with self._lock:
            return list(self.counts), self.total, self.sum_s

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0 < q <= 1) interpolated within its bucket; None when empty."""
        counts, total, _ = self.snapshot()
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for i, c in enumerate(counts):
            if c and seen + c >= rank:
                lo = BUCKETS_S[i - 1] if i > 0 else 0.0
                hi = BUCKETS_S[i] if i < len(BUCKETS_S) else BUCKETS_S[-1] * 2
                return lo + (hi - lo) * (rank - seen) / c
            seen += c
        return BUCKETS_S[-1]


class _Snapshot:
    __slots__ = ("t", "puts", "gets")

    def __init__(self, t: float, puts: dict[str, int], gets: dict[tuple[str, str], int]) -> None:
        self.t = t
        self.puts = puts
        self.gets = gets


K = TypeVar("K", bound=Hashable)


def _with_lanes(msgs: dict[K, int], size: dict[K, int], lanes: dict[K, PutCounter]
                ) -> tuple[dict[K, int], dict[K, int]]:
    """Copies of a (msgs, bytes) counter pair with the lanes' C counters added."""
    msgs, size = dict(msgs), dict(size)
    for k, c in lanes.items():
        if c.msgs:
            msgs[k] = msgs.get(k, 0) + c.msgs
            size[k] = size.get(k, 0) + c.size
    return msgs, size


class BrokerMetrics:
    """A broker's counters and the figures derived from them (see the module doc)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._lock = threading.Lock()
        self.put_msgs: dict[str, int] = {}
        self.put_bytes: dict[str, int] = {}
        self.put_failed: dict[str, int] = {}
        # the in-process send lanes' counts, per topic (counted in C: no lock per send)
        self._lane_puts: dict[str, PutCounter] = {}
        self.get_msgs: dict[tuple[str, str], int] = {}
        self.get_bytes: dict[tuple[str, str], int] = {}
        # the in-process pull lanes' counts, per (group, topic) (counted in C, as the puts)
        self._lane_gets: dict[tuple[str, str], PutCounter] = {}
        self.flush_wait = LatencyHistogram()
        # async flush: how long each commit-log flush round (msync) took
        self.flush_time = LatencyHistogram()
        service = getattr(broker.store, "flush_service", None)
        if service is not None and hasattr(service, "on_synced"):
            service.on_synced = self.flush_time.add
        self.boot_time_ms = int(time.time() * 1000)
        now = time.monotonic()
        self._older = _Snapshot(now, {}, {})
        self._newer = self._older
        self._disk: tuple[float, dict[str, int]] | None = None
        # VIEW_BROKER_STATS_DATA's minute/hour/day windows (sampled by the housekeeping thread)
        self.windows = StatsWindows(self.stats_counters)

    # -- the hot path: one call per request ---------------------------------------------------
    # Every public method of a Future takes its condition lock (0.5-1 µs each on a loaded
    # machine, several per request): a finished future's state and value are read directly
    # instead, falling back to the public API where those attributes do not exist.
    def on_send(self, request: Any, fut: Future) -> None:
        """Count a send once its response is known (at once, or at its flush acknowledgement
        under SYNC_FLUSH, which is then also timed). ``request``: any send shape with a
        ``topic`` and ``messages`` or ``sizes`` (a request, a wire send, one message)."""
        self._count_future(fut, request, "", 0, 0)

    def _count_future(self, fut: Future, request: Any, topic: str, n: int, size: int) -> None:
        """Count a send answered by ``fut``: now when it is finished, else when it finishes
        (timed). ``request`` None: ``topic``, ``n`` and ``size`` say what was sent."""
        if getattr(fut, "_state", None) == _FINISHED:
            self._count_answer(request, topic, n, size, fut._result)  # type: ignore[attr-defined]
        else:
            fut.add_done_callback(_SendDone(self, request, topic, n, size))

    def _count_answer(self, request: Any, topic: str, n: int, size: int,
                      response: Any) -> None:
        if request is None:
            self._count_sized(topic, n, size, response)
        else:
            self.count_send(request, response)

    def on_send_one(self, topic: str, msg: Any, answer: Any) -> None:
        """``on_send`` of ``Broker.send_one``: ``answer`` is the response or its Future."""
        if isinstance(answer, Future):
            self._count_future(answer, None, topic, 1, len(msg.body))
        elif answer.code in _STORED:        # _count_sized of one message, inlined: per send
            size = len(msg.body)
            with self._lock:
                self.put_msgs[topic] = self.put_msgs.get(topic, 0) + 1
                self.put_bytes[topic] = self.put_bytes.get(topic, 0) + size
        else:
            self._count_sized(topic, 1, 0, answer)

    def on_send_sized(self, topic: str, n: int, size: int, answer: Any) -> None:
        """``on_send`` of ``n`` messages of ``size`` body bytes (an in-process lane's batch
        answered other than PUT_OK at once): ``answer`` is the response or its Future."""
        if isinstance(answer, Future):
            self._count_future(answer, None, topic, n, size)
        else:
            self._count_sized(topic, n, size, answer)

    def put_counter(self, topic: str) -> PutCounter:
        """The counter a ``SendLane`` of ``topic`` adds its stored sends to (one per topic,
        shared by the topic's lanes; read with the dict counters)."""
        with self._lock:
            c = self._lane_puts.get(topic)
            if c is None:
                c = self._lane_puts[topic] = PutCounter()
            return c

    def pull_counter(self, group: str, topic: str) -> PutCounter:
        """The counter a ``PullLane`` of (group, topic) adds the messages and bytes of its
        pulls to (read with the dict counters)."""
        with self._lock:
            c = self._lane_gets.get((group, topic))
            if c is None:
                c = self._lane_gets[(group, topic)] = PutCounter()
            return c

    def _gets(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Copies of (get msgs, get bytes) per (group, topic), the lanes' counts included
        (under the lock)."""
        return _with_lanes(self.get_msgs, self.get_bytes, self._lane_gets)

    def drop_topic(self, topic: str) -> None:
        """``topic`` was deleted: its put/get counters, its lanes' counter and its entries in
        the rate snapshots go (create/send/delete churn must not grow them). A lane still
        holding the old counter takes the topic's new one when it is re-created
        (``SendLane._full``, ``PullLane._warm``); one re-created before this runs keeps its
        counters."""
        with self._lock:
            if self.broker.topic_manager.table.peek(topic) is not None:
                return                  # re-created meanwhile: its lanes count here again
            for table in (self.put_msgs, self.put_bytes, self.put_failed, self._lane_puts,
                          self._older.puts, self._newer.puts):
                table.pop(topic, None)
            for pairs in (self.get_msgs, self.get_bytes, self._lane_gets, self._older.gets,
                          self._newer.gets):
                for key in [k for k in pairs if k[1] == topic]:
                    del pairs[key]

    def _puts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Copies of (put msgs, put bytes) per topic, the lanes' counts included (under the
        lock)."""
        return _with_lanes(self.put_msgs, self.put_bytes, self._lane_puts)

    def count_send(self, request: Any, response: Any) -> None:
        """Count a send by its response (``on_send`` of one answered at once, no future)."""
        sizes = getattr(request, "sizes", None)     # a wire send's, when known
        if sizes is not None:
            self._count_sized(request.topic, sizes[0], sizes[1], response)
        else:
            self._count(request.topic, request.messages, response)

    def _count(self, topic: str, msgs: Any, response: Any) -> None:
        size = 0
        if getattr(response, "code", None) in _STORED:
            for m in msgs:
                size += len(m.body)
        self._count_sized(topic, len(msgs), size, response)

    def _count_sized(self, topic: str, n: int, size: int, response: Any) -> None:
        if getattr(response, "code", None) in _STORED:
            with self._lock:
                self.put_msgs[topic] = self.put_msgs.get(topic, 0) + n
                self.put_bytes[topic] = self.put_bytes.get(topic, 0) + size
        else:
            if self.broker.topic_manager.table.peek(topic) is None:
                topic = NO_SUCH_TOPIC
            with self._lock:
                self.put_failed[topic] = self.put_failed.get(topic, 0) + 1

    def on_pull(self, request: PullMessageRequest, fut: Future) -> None:
        """Count the messages a pull returns (when its parked wait ends, for a held pull)."""
        if getattr(fut, "_state", None) == _FINISHED:
            self._count_pull(request, fut._result)      # type: ignore[attr-defined]
            return

        def done(f: Future) -> None:
            if not f.cancelled() and f.exception() is None:
                self._count_pull(request, f.result())
        fut.add_done_callback(done)

    def _count_pull(self, request: PullMessageRequest, response: Any) -> None:
        msgs = getattr(response, "messages", None)
        if not msgs:
            return
        size = store_sizes(msgs)        # one C pass, not a Python loop per message
        key = (request.consumer_group, request.topic)
        with self._lock:
            self.get_msgs[key] = self.get_msgs.get(key, 0) + len(msgs)
            self.get_bytes[key] = self.get_bytes.get(key, 0) + size

    # -- derived figures ----------------------------------------------------------------------
    def counters(self) -> tuple[dict[str, int], dict[str, int], dict[str, int],
                                dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Copies of (put msgs, put bytes, failed sends, get msgs, get bytes)."""
        with self._lock:
            return (*self._puts(), dict(self.put_failed), *self._gets())

    def stats_counters(self) -> dict[tuple[str, str], int]:
        """The counters under RocketMQ's stats item names and keys (``BrokerStatsManager``):
        TOPIC_PUT_NUMS/SIZE by topic, GROUP_GET_NUMS/SIZE by ``topic@group``,
        BROKER_PUT_NUMS/BROKER_GET_NUMS by cluster name."""
        puts, put_bytes, _, gets, get_bytes = self.counters()
        out: dict[tuple[str, str], int] = {}
        for t, n in puts.items():
            out[("TOPIC_PUT_NUMS", t)] = n
            out[("TOPIC_PUT_SIZE", t)] = put_bytes.get(t, 0)
        for (g, t), n in gets.items():
            out[("GROUP_GET_NUMS", f"{t}@{g}")] = n
            out[("GROUP_GET_SIZE", f"{t}@{g}")] = get_bytes.get((g, t), 0)
        cluster = self.broker.config.broker_cluster_name
        out[("BROKER_PUT_NUMS", cluster)] = sum(puts.values())
        out[("BROKER_GET_NUMS", cluster)] = sum(gets.values())
        return out

    def rates(self) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
        """(put msgs/s per topic, get msgs/s per (group, topic)) over the last 10-20 s."""
        now = time.monotonic()
        with self._lock:
            puts, gets = self._puts()[0], self._gets()[0]
            if now - self._newer.t >= RATE_WINDOW_S:
                self._older, self._newer = self._newer, _Snapshot(now, puts, gets)
            base = self._older
        dt = now - base.t
        if dt <= 0:
            return {t: 0.0 for t in puts}, {k: 0.0 for k in gets}
        return ({t: (n - base.puts.get(t, 0)) / dt for t, n in puts.items()},
                {k: (n - base.gets.get(k, 0)) / dt for k, n in gets.items()})

    def lag(self) -> Iterator[tuple[str, str, int, int, int]]:
        """(group, topic, queue id, committed offset, lag) for every committed offset whose
        queue still exists."""
        store = self.broker.store
        for key, queues in store.consumer_offset_manager.table().items():
            topic, sep, group = key.rpartition("@")
            if not sep:
                continue
            for qid, offset in sorted(queues.items()):
                max_offset = store.get_max_offset_in_queue(topic, qid)
                if max_offset < 0:
                    continue
                yield group, topic, qid, offset, max(0, max_offset - offset)

    def disk_usage(self) -> dict[str, int]:
        """Bytes allocated under each store directory, plus the file system's ``fs_total``
        and ``fs_free`` (cached for ``DISK_CACHE_S``)."""
        now = time.monotonic()
        cached = self._disk
        if cached is not None and now - cached[0] < DISK_CACHE_S:
            return dict(cached[1])
        root = self.broker.store.root
        out: dict[str, int] = {}
        for name in STORE_DIRS:
            out[name] = _allocated_bytes(os.path.join(root, name))
        cl_dir = getattr(self.broker.store_config, "store_path_commit_log", None)
        if cl_dir and os.path.abspath(cl_dir) != os.path.abspath(os.path.join(root, "commitlog")):
            out["commitlog"] = _allocated_bytes(cl_dir)
        try:
            du = shutil.disk_usage(root)
            out["fs_total"], out["fs_free"] = du.total, du.free
        except OSError:
            pass
        self._disk = (now, out)
        return dict(out)

    def runtime_info(self) -> dict[str, str]:
        """``GET_BROKER_RUNTIME_INFO``'s table: RocketMQ's keys where this broker has the
        figure, then this broker's own (``putTps``/``getTps`` as totals per second)."""
        b = self.broker
        store = b.store
        puts, put_bytes, failed, gets, get_bytes = self.counters()
        put_rates, get_rates = self.rates()
        disk = self.disk_usage()
        info: dict[str, str] = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": "409",
            "bootTimestamp": str(self.boot_time_ms),
            "runtime": _uptime(int(time.time() * 1000) - self.boot_time_ms),
            "msgPutTotalTodayNow": str(sum(puts.values())),
            "msgGetTotalTodayNow": str(sum(gets.values())),
            "putTps": f"{sum(put_rates.values()):.2f}",
            "getTransferedTps": f"{sum(get_rates.values()):.2f}",
            "sendFailedTotal": str(sum(failed.values())),
            "putBytesTotal": str(sum(put_bytes.values())),
            "getBytesTotal": str(sum(get_bytes.values())),
            "dispatchBehindBytes": str(store.dispatch_behind_bytes()),
            "commitLogMinOffset": str(store.get_min_phy_offset()),
            "commitLogMaxOffset": str(store.get_max_phy_offset()),
            "startAcceptSendRequestTimeStamp": str(b.config.start_accept_send_request_time_stamp),
            "flushDiskType": str(getattr(store.config, "flush_disk_type", "")),
            "brokerName": b.broker_name,
            "topicCount": str(len(store.topic_config_manager.all())),
            "consumerGroupCount": str(len(b.consumer_manager.groups())),
        }
        resets = store.metadata_resets()
        if resets:
            # damaged metadata the broker started without (docs/recovery.md): loud, not silent
            info["metadataResets"] = "; ".join(f"{r['file']}: {r['problem']} -> {r['action']}"
                                               for r in resets)
        skipped = store.bad_records()
        if skipped:
            info["damagedRecordsReported"] = str(len(skipped))
        # keys Java's mqadmin clusterList parses: this broker counts from its start, so the
        # "morning" snapshots are 0 (today's figure is everything since start); it has no send
        # or pull thread-pool queues and no timer wheel
        put_rate = info["putTps"]
        get_rate = info["getTransferedTps"]
        info.update({"brokerActive": "true", "getTransferredTps": get_rate, "putTps": put_rate,
                     "msgPutTotalYesterdayMorning": "0", "msgPutTotalTodayMorning": "0",
                     "msgGetTotalYesterdayMorning": "0", "msgGetTotalTodayMorning": "0",
                     "pageCacheLockTimeMills": "0", "sendThreadPoolQueueSize": "0",
                     "sendThreadPoolQueueHeadWaitTimeMills": "0", "pullThreadPoolQueueSize": "0",
                     "pullThreadPoolQueueHeadWaitTimeMills": "0", "timerReadBehind": "0",
                     "timerOffsetBehind": "0", "timerCongestNum": "0", "timerEnqueueTps": "0.0",
                     "timerDequeueTps": "0.0",
                     "earliestMessageTimeStamp": str(_earliest_store_time(store))})
        # clusterList's #SPACE: 4.9.8's commitLogDiskRatio of the commit-log directory
        cl_dir = store.config.commit_log_path(store.root)
        info["commitLogDiskRatio"] = java_double(partition_used_ratio(cl_dir))
        info["commitLogDiskRatio_" + cl_dir] = info["commitLogDiskRatio"]
        info["consumeQueueDiskRatio"] = java_double(
            partition_used_ratio(os.path.join(store.root, "consumequeue")))
        if "fs_total" in disk:
            info["commitLogDirCapacity"] = (f"Total : {_human(disk['fs_total'])}, "
                                            f"Free : {_human(disk['fs_free'])}.")
        for name in STORE_DIRS:
            info[f"diskUsed.{name}"] = str(disk.get(name, 0))
        _, total, sum_s = self.flush_wait.snapshot()
        info["flushWaitCount"] = str(total)
        for q, label in ((0.5, "P50"), (0.99, "P99"), (0.999, "P999")):
            v = self.flush_wait.quantile(q)
            info[f"flushWait{label}Ms"] = "-" if v is None else f"{v * 1000:.3f}"
        _, total, _ = self.flush_time.snapshot()
        info["commitLogFlushCount"] = str(total)
        for q, label in ((0.5, "P50"), (0.99, "P99"), (0.999, "P999")):
            v = self.flush_time.quantile(q)
            info[f"commitLogFlush{label}Ms"] = "-" if v is None else f"{v * 1000:.3f}"
        lags = list(self.lag())
        info["consumerLagTotal"] = str(sum(lag for *_, lag in lags))
        return info


def java_double(v: float) -> str:
    """``String.valueOf(double)`` for the plain values used here: 0.43, 1.0, -1.0."""
    return repr(float(v))


def _earliest_store_time(store: Any) -> int:
    """Store time of the oldest message still in the commit log (-1 when it is empty)."""
    msg = store.look_message_by_offset(store.get_min_phy_offset())
    return msg.store_timestamp if msg is not None else -1


def _allocated_bytes(path: str) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        total += _allocated_bytes(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue        # a file deleted meanwhile (retention, a rolled queue)
    except OSError:
        return 0
    return total


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"      # pragma: no cover


def _uptime(ms: int) -> str:
    s = ms // 1000
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"


# -- Prometheus ----------------------------------------------------------------------------------

# every series carries these first, so brokers scraped into one Prometheus stay apart (a
# master and its slave share a broker name: broker_id tells them apart)
BROKER_LABELS = ("cluster", "broker", "broker_id")


class _Collector:
    """A ``prometheus_client`` collector reading ``BrokerMetrics`` at scrape time.

    Only raw series: counters, histograms (cumulative buckets, sum, count) and gauges of
    present state. Rates and percentiles are the query's job (``rate()``,
    ``histogram_quantile()``) over whatever window the reader picks; a broker-side rate or
    quantile would fix the window and cannot be aggregated across brokers."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.m = metrics

    def describe(self) -> list[Any]:
        return []           # no describe-time collection (a scrape reads the broker)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                            HistogramMetricFamily)
        m = self.m
        cfg = m.broker.config
        me = [cfg.broker_cluster_name, m.broker.broker_name, str(cfg.broker_id)]
        puts, put_bytes, failed, gets, get_bytes = m.counters()

        def family(kind: Any, name: str, doc: str, *labels: str) -> Any:
            return kind(name, doc, labels=[*BROKER_LABELS, *labels])

        for name, doc, table in (
                ("rocketstore_put_messages", "Messages stored by sends, per topic", puts),
                ("rocketstore_put_bytes", "Body bytes stored by sends, per topic", put_bytes),
                ("rocketstore_send_failed", "Sends refused or not stored, per topic", failed)):
            c = family(CounterMetricFamily, name, doc, "topic")
            for t, n in sorted(table.items()):
                c.add_metric([*me, t], n)
            yield c
        for name, doc, table2 in (
                ("rocketstore_get_messages", "Messages returned by pulls, per consumer group "
                 "and topic", gets),
                ("rocketstore_get_bytes", "Stored bytes returned by pulls, per consumer group "
                 "and topic", get_bytes)):
            c = family(CounterMetricFamily, name, doc, "group", "topic")
            for (grp, t), n in sorted(table2.items()):
                c.add_metric([*me, grp, t], n)
            yield c

        lag = family(GaugeMetricFamily, "rocketstore_consumer_lag", "Messages stored but not "
                     "consumed: queue max offset minus the group's committed offset",
                     "group", "topic", "queue")
        off = family(GaugeMetricFamily, "rocketstore_consumer_offset", "The group's committed "
                     "offset", "group", "topic", "queue")
        for grp, t, qid, committed, n in m.lag():
            lag.add_metric([*me, grp, t, str(qid)], n)
            off.add_metric([*me, grp, t, str(qid)], committed)
        yield lag
        yield off

        for hist, name, what in (
                (m.flush_wait, "rocketstore_flush_wait_seconds", "SYNC_FLUSH sends: put to "
                 "flush acknowledgement"),
                (m.flush_time, "rocketstore_commitlog_flush_seconds", "ASYNC_FLUSH: one "
                 "commit-log flush round (msync)")):
            counts, total, sum_s = hist.snapshot()
            buckets = []
            acc = 0
            for bound, n in zip(BUCKETS_S, counts):
                acc += n
                buckets.append((repr(bound), acc))
            buckets.append(("+Inf", total))
            h = family(HistogramMetricFamily, name, what)
            h.add_metric(me, buckets, sum_s)
            yield h

        d = family(GaugeMetricFamily, "rocketstore_disk_used_bytes", "Bytes allocated under "
                   "each store directory", "dir")
        disk = m.disk_usage()
        for name in STORE_DIRS:
            d.add_metric([*me, name], disk.get(name, 0))
        yield d
        store = m.broker.store
        gauges = [("rocketstore_dispatch_behind_bytes", "Commit-log bytes not yet in consume "
                   "queues", store.dispatch_behind_bytes()),
                  ("rocketstore_commitlog_max_offset_bytes", "Commit-log offset past the last "
                   "record", store.get_max_phy_offset())]
        if "fs_total" in disk:
            gauges += [("rocketstore_disk_total_bytes", "Size of the store's file system",
                        disk["fs_total"]),
                       ("rocketstore_disk_free_bytes", "Free bytes on the store's file system",
                        disk["fs_free"])]
        for name, doc, value in gauges:
            g = family(GaugeMetricFamily, name, doc)
            g.add_metric(me, value)
            yield g


class MetricsHttpServer:
    """``/metrics`` in Prometheus's text format on ``host:port`` (port 0 picks one), served by
    ``prometheus_client``'s HTTP server on its own thread until ``close()``."""

    def __init__(self, metrics: BrokerMetrics, port: int, host: str = "127.0.0.1") -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            from rocketstore.errors import InvalidConfigError
            raise InvalidConfigError("metrics_port", port, "serving metrics needs "
                                     "prometheus_client: pip install 'rocketstore[metrics]'",
                                     "BrokerConfig") from None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(metrics))     # type: ignore[arg-type]
        try:
            self._server, self._thread = start_http_server(port, addr=host,
                                                           registry=self.registry)
        except OSError as e:
            from rocketstore.errors import InvalidConfigError
            raise InvalidConfigError("metrics_port", port, f"cannot serve /metrics on "
                                     f"{host}:{port}: {e.strerror or e}", "BrokerConfig") from None
        self.host = host
        self.port = self._server.server_address[1]

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving and join the thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


__all__ = ["BrokerMetrics", "LatencyHistogram", "MetricsHttpServer", "BUCKETS_S", "BROKER_LABELS"]
