"""The Spark readers of the source's ``namesrv`` mode: a cluster's topics, read over the wire.

``RocketStoreDataSource`` hands reads here when the ``namesrv`` option is given (see
``rocketstore.spark.wire`` for planning and pulling). Partitions are (topic, broker, queue,
[start, end)) pulled by the executors; the driver only talks to the NameServer and asks
brokers for queue bounds.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import (DataSourceReader, DataSourceStreamReader, EqualTo, Filter,
                                    GreaterThan, GreaterThanOrEqual, InputPartition,
                                    LessThan, LessThanOrEqual)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from rocketstore.client.tcp import TcpTransport
from rocketstore.errors import InvalidOptionError
from rocketstore.spark.stream import BoundedStreamProgress
from rocketstore.spark.scan import MAX_TAGS
from rocketstore.spark.wire import (Offsets, WireOptions, WireSplit, discover, offsets_from_json,
                                    offsets_to_json, open_transport, plan, queue_bounds,
                                    read_split, resolve, splits)


class WirePartition(InputPartition):
    """One split (topic, broker, queue, [start, end)) with the read's options, pickled to a task."""

    def __init__(self, split: WireSplit, opts: WireOptions) -> None:
        super().__init__(split)
        self.split = split
        self.opts = opts


def _read_partition(partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, WirePartition):
        return          # Spark's stand-in when planning found nothing to read
    transport = open_transport(partition.opts)
    try:
        yield from read_split(transport, partition.split, partition.opts)
    finally:
        transport.close()


class WireReader(DataSourceReader):
    """Batch read of a cluster: a partition per selected queue of every broker (ranges of at
    most ``maxRowsPerPartition`` offsets), each pulled by offset."""

    def __init__(self, options: Any) -> None:
        self.opts = WireOptions.from_options(options)

    def partitions(self) -> Sequence[WirePartition]:
        return [WirePartition(s, self.opts) for s in plan(self.opts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(partition)


class WirePushdownReader(WireReader):
    """The wire batch reader with filter pushdown (when the session enables it): = / IN on
    ``topic``, ``broker_name`` and ``queue_id`` prune the queues planned, on ``tags`` become
    the pulls' subscription (at most 8 tags), and ``store_timestamp`` ranges find each
    queue's start by time (every row still checked); other filters are left to Spark."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        from rocketstore.spark.datasource import _restrict, filter_target, time_bounds
        o = self.opts
        for f in filters:
            col, vals = filter_target(f)
            strs = vals is not None and all(isinstance(v, str) and v for v in vals)
            if col == "topic" and strs:
                o = replace(o, topics=tuple(sorted(frozenset(o.topics) & frozenset(vals))))
            elif col == "broker_name" and strs:
                o = replace(o, brokers=_restrict(o.brokers, vals))
            elif col == "queue_id" and vals is not None and all(isinstance(v, int) for v in vals):
                o = replace(o, queue_ids=_restrict(o.queue_ids, vals))
            elif col == "tags" and strs and len(_restrict(o.tags, vals)) <= MAX_TAGS:
                o = replace(o, tags=_restrict(o.tags, vals))
            elif col == "store_timestamp" and isinstance(
                    f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                bounds = time_bounds(f, o.min_ts, o.max_ts)
                if bounds is None:
                    yield f
                    continue
                o = replace(o, min_ts=bounds[0], max_ts=bounds[1])
            else:
                yield f
        self.opts = o


class WireStreamReader(BoundedStreamProgress, DataSourceStreamReader,
                       SupportsTriggerAvailableNow):
    """Micro-batches over every selected queue of every broker of the topics.

    An offset is JSON ``{"topic": {"broker": {"queue": next offset}}}``; Spark's checkpoint
    keeps it, so a restarted query reads exactly what it had not. Each micro-batch re-reads
    the routes: a queue or broker that appears starts at its min offset (0 for a new queue);
    one that leaves keeps its offset. ``maxRowsPerBatch`` caps a micro-batch (shared fairly
    across queues); Trigger.AvailableNow reads to the max offsets seen when it starts. A
    broker that cannot be reached is passed over (its queues keep their offsets) until it
    is back, so the others are read on.
    """

    def __init__(self, options: Any) -> None:
        self.opts = WireOptions.from_options(options)
        o = {str(k).lower(): v for k, v in options.items()}
        if "endingoffsets" in o:
            raise InvalidOptionError("endingOffsets", o["endingoffsets"],
                                     "a streaming read has no end: use a batch read")
        self._read_limit_option(o)
        self._transport: TcpTransport | None = None

    def _bounds(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        if self._transport is None:
            self._transport = open_transport(self.opts)
        return queue_bounds(self._transport, discover(self._transport, self.opts),
                            skip_unreachable=True)

    def initialOffset(self) -> dict:
        return offsets_to_json(resolve(self.opts.starting, self._bounds(), "earliest"))

    def _decode(self, offsets: dict) -> Offsets:
        return offsets_from_json(offsets)

    def _encode(self, offsets: Offsets) -> dict:   # type: ignore[override]
        return offsets_to_json(offsets)

    def partitions(self, start: dict, end: dict) -> Sequence[WirePartition]:
        return [WirePartition(s, self.opts) for s in
                splits(offsets_from_json(start), offsets_from_json(end),
                       self.opts.max_rows_per_split)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the checkpoint holds the progress (no broker-side offsets)."""

    def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

