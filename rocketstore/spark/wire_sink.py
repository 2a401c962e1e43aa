"""Writes of the source's ``namesrv`` mode: a DataFrame's rows sent to a cluster by a Producer.

``df.write.format("rocketstore").option("namesrv", "host:9876").option("topic", "T").save()``
(and the streaming sink alike). Each task starts a ``Producer`` (group ``producerGroup``)
and sends its rows as SYNC batch sends (``SEND_BATCH_MESSAGE``) of at most ``batchSize``
messages and about 1 MiB, rows of one topic and queue in their order. The queue of a row:

* ``broker_name`` and ``queue_id`` columns: that queue (e.g. a wire read's rows sent back);
* a sharding key column (option ``shardingKey``, default ``sharding_key``): one queue of the
  topic's route (brokers by name, then queue ids) chosen by xxhash64 of the key, so equal
  keys land in one queue while the route stays the same;
* neither: each batch goes to the producer's next queue, round robin over every broker.

Columns ``body``, ``topic``, ``tags``, ``keys`` and ``properties`` are read as in the local
write (``rocketstore.spark.writer``). A send that fails after the producer's retries, or is
answered with a status other than SEND_OK, fails the task with ``WireSendError`` naming the
topic, the queue and the rows already sent. Sends cannot be taken back: a failed or retried
task, or a replayed micro-batch, may send rows twice (at-least-once).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import StructType

from rocketstore.client.producer import Producer
from rocketstore.common import Message, MessageQueue, SendStatus
from rocketstore.errors import InvalidOptionError, RocketStoreError
from rocketstore.spark.scan import _int
from rocketstore.spark.wire import credentials_option
from rocketstore.spark.writer import message_columns, shard_queue

DEFAULT_GROUP = "rocketstore_spark_writer"
BATCH_BYTES = 1 << 20          # well below a broker's default maxMessageSize (4 MiB) per batch
OVERHEAD = 256                 # a message's bytes in a batch body beyond its body, roughly


class WireSendError(RocketStoreError):
    """Rows of a Spark task could not be sent to the cluster; ``topic`` and ``queue`` say
    where they were going (``queue`` None: the producer's choice), ``sent`` how many rows
    of the task had been sent before."""

    def __init__(self, topic: str, queue: MessageQueue | None, rows: int, sent: int,
                 cause: object) -> None:
        super().__init__(topic, queue, rows, sent, cause)
        self.topic, self.queue, self.rows, self.sent, self.cause = topic, queue, rows, sent, cause

    def __str__(self) -> str:
        where = (f"{self.queue.broker_name}/{self.queue.queue_id}" if self.queue is not None
                 else "the producer's next queue")
        return (f"rocketstore write: sending {self.rows} rows of topic {self.topic!r} to "
                f"{where} failed ({self.sent} rows of this task were sent before): {self.cause}")


@dataclass
class Sent(WriterCommitMessage):
    """What one task sent: rows per ``broker/queue``."""
    rows: int = 0
    queues: dict[str, int] = field(default_factory=dict)


class WireWritePlan:
    """How rows become sends (options checked at the driver, used in the tasks)."""

    def __init__(self, options: Any, schema: StructType) -> None:
        o = {str(k).lower(): v for k, v in options.items()}
        self.namesrv = str(o.get("namesrv") or "").strip()
        if not self.namesrv:
            raise InvalidOptionError("namesrv", o.get("namesrv"), 'expected "host:port[;host:port]"')
        names = set(schema.fieldNames())
        if "body" not in names:
            raise InvalidOptionError("body", None, "the DataFrame needs a body column (binary or string)")
        self.topic = o.get("topic")
        if "topic" not in names and not self.topic:
            raise InvalidOptionError("topic", None, "give a topic column or the topic option")
        self.explicit = "queue_id" in names
        if self.explicit and "broker_name" not in names:
            raise InvalidOptionError("queue_id", None, "over the wire a queue_id column needs a "
                                     "broker_name column too (or drop it to spread the rows)")
        self.sharding = str(o.get("shardingkey", "sharding_key"))
        self.sharded = self.sharding in names
        if self.explicit and self.sharded:
            raise InvalidOptionError("shardingKey", self.sharding, "give either broker_name and "
                                     "queue_id columns or a sharding key column, not both")
        self.group = str(o.get("producergroup", DEFAULT_GROUP)).strip()
        if not self.group or not all(c.isalnum() or c in "-_%|" for c in self.group):
            raise InvalidOptionError("producerGroup", self.group,
                                     "use letters, digits, '-', '_', '%', '|'")
        self.batch_size = _int(o, "batchsize", 128, minimum=1) or 128
        self.timeout_ms = _int(o, "sendtimeoutms", 3000, minimum=1) or 3000
        self.retries = _int(o, "retrytimes", 2, minimum=0)
        self.credentials = credentials_option(o)

    def producer(self) -> Producer:
        """A started producer of this write's group."""
        return Producer(self.group, namesrv_addr=self.namesrv, send_msg_timeout=self.timeout_ms,
                        retry_times_when_send_failed=int(self.retries or 0),
                        credentials=self.credentials).start()

    def send(self, batches: Iterator[pa.RecordBatch]) -> Sent:
        """Send every row of the task's batches; raises WireSendError on the first failure."""
        out = Sent()
        producer = self.producer()
        try:
            for b in batches:
                if b.num_rows:
                    self._send_batch(producer, b, out)
        finally:
            producer.shutdown()
        return out

    def _send_batch(self, producer: Producer, b: pa.RecordBatch, out: Sent) -> None:
        m = message_columns(b, self.topic)
        topics = m["topic"].to_pylist()
        bodies = m["body"].to_pylist()
        tags = m["tags"].to_pylist()
        keys = m["keys"].to_pylist()
        props = m["properties"].to_pylist()
        names = b.schema.names
        if self.explicit:
            brokers = b.column(names.index("broker_name")).cast(pa.string()).to_pylist()
            qids = b.column(names.index("queue_id")).cast(pa.int32()).to_pylist()
            if None in brokers or None in qids:
                raise InvalidOptionError("queue_id", None, "a row has a null broker_name or queue_id")
        elif self.sharded:
            shard_keys = b.column(names.index(self.sharding)).cast(pa.string()).to_pylist()
        # rows grouped by destination, each group in row order
        groups: dict[tuple[str, MessageQueue | None], list[Message]] = {}
        for i, topic in enumerate(topics):
            msg = Message(topic, bodies[i], tags=tags[i], keys=keys[i] or None,
                          properties=dict(props[i]) if props[i] else None)
            mq: MessageQueue | None = None
            if self.explicit:
                mq = MessageQueue(topic, brokers[i], qids[i])
            elif self.sharded and shard_keys[i] is not None:
                queues = producer.publish_info(topic).message_queues
                mq = queues[shard_queue(shard_keys[i], len(queues))]
            groups.setdefault((topic, mq), []).append(msg)
        for (topic, mq), msgs in groups.items():
            for chunk in _chunks(msgs, self.batch_size):
                self._send_chunk(producer, topic, mq, chunk, out)

    def _send_chunk(self, producer: Producer, topic: str, mq: MessageQueue | None,
                    chunk: list[Message], out: Sent) -> None:
        try:
            r = producer.send_batch(chunk, mq)
        except RocketStoreError as e:
            raise WireSendError(topic, mq, len(chunk), out.rows, e) from e
        if r.status is not SendStatus.SEND_OK:
            raise WireSendError(topic, r.message_queue, len(chunk), out.rows,
                                f"the broker answered {r.status.name}")
        out.rows += len(chunk)
        k = f"{r.message_queue.broker_name}/{r.message_queue.queue_id}"
        out.queues[k] = out.queues.get(k, 0) + len(chunk)


def _chunks(msgs: list[Message], max_count: int) -> Iterator[list[Message]]:
    """Runs of at most ``max_count`` messages and about BATCH_BYTES (at least one each)."""
    run: list[Message] = []
    size = 0
    for m in msgs:
        n = len(m.body) + OVERHEAD
        if run and (len(run) >= max_count or size + n > BATCH_BYTES):
            yield run
            run, size = [], 0
        run.append(m)
        size += n
    if run:
        yield run


class WireWriter(DataSourceArrowWriter):
    """Batch write to a cluster (``mode("append")``)."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.plan = WireWritePlan(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:  # type: ignore[override]
        return self.plan.send(iterator)

    def commit(self, messages: list[Any]) -> None:  # type: ignore[override]
        """Nothing to do: every row was stored by its broker when its task ended."""

    def abort(self, messages: list[Any]) -> None:  # type: ignore[override]
        """Nothing can be taken back: the rows the finished tasks sent stay sent."""


class WireStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink to a cluster: each micro-batch's rows sent by its tasks (at-least-once:
    a replayed batch is sent again)."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self.plan = WireWritePlan(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:  # type: ignore[override]
        return self.plan.send(iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        """Nothing to do: the rows are stored."""

    def abort(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        """Nothing can be taken back."""

