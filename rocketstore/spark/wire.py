"""Reading a RocketMQ cluster over the wire, for the Spark source's ``namesrv`` mode; no Spark here.

A read is planned from the NameServer's routes (``GET_ROUTEINFO_BY_TOPIC``): every readable
queue of every broker of each topic is a ``WireQueue``, and its bounds come from the broker
(``GET_MIN_OFFSET`` / ``GET_MAX_OFFSET``). ``read_split`` pulls one queue's offsets
[start, end) with ``PULL_MESSAGE`` at explicit offsets: the subscription travels in the
request (sysFlag 0x4), no offset is committed and no consumer registers, so nothing is
rebalanced and the consumer group (``consumerGroup``, created by the broker on first use)
keeps no state. These are the requests RocketMQ's own clients send, so Apache RocketMQ
brokers answer them as ``rocketstore broker`` does (the tests run rocketstore brokers).

Offsets (options and streaming checkpoints) are JSON ``{"topic": {"broker": {"queue":
offset}}}``: a queue's next offset to read.
"""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rocketstore.acl.signature import SessionCredentials
from rocketstore.client.tcp import TcpTransport
from rocketstore.remoting.records import decode_records
from rocketstore.common.protocol import PullMessageRequest, ResponseCode
from rocketstore.errors import (InvalidOptionError, MQBrokerError, RemotingProtocolError,
                                TransportError)
from rocketstore.spark.arrow import ARROW_SCHEMA, WIRE_SCHEMA_DDL, to_record_batch  # noqa: F401 (re-exported)
from rocketstore.spark.scan import INT64_MAX, INT64_MIN, MAX_TAGS, _int, _str_set
from rocketstore.store import _columns

#: The wire read's schema: the local read's columns, then the broker each row came from.
WIRE_ARROW_SCHEMA = ARROW_SCHEMA.append(pa.field("broker_name", pa.string()))

DEFAULT_GROUP = "rocketstore_spark_reader"
FLAG_SUBSCRIPTION = 0x4        # PULL_MESSAGE sysFlag: the subscription is in the request
PERM_READ = 0x4
GROW_AFTER = 8                 # full answers in a row before a shrunk pull step doubles

#: Offsets of queues: {(topic, broker, queue id): offset}.
Offsets = dict[tuple[str, str, int], int]


@dataclass(frozen=True, order=True)
class WireQueue:
    """One queue of a topic on one broker."""
    topic: str
    broker: str
    queue_id: int


@dataclass(frozen=True)
class WireSplit:
    """Queue offsets [start, end) of one broker's queue: the work of one Spark task."""
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int


@dataclass(frozen=True)
class WireOptions:
    """What a wire read selects and how it pulls (parsed from the source's options)."""
    namesrv: str
    topics: tuple[str, ...]
    queue_ids: frozenset[int] | None = None
    brokers: frozenset[str] | None = None
    starting: str | Offsets = "earliest"        # "earliest", "latest" or explicit offsets
    ending: str | Offsets = "latest"
    tags: frozenset[str] | None = None
    min_ts: int | None = None                   # store time, ms, inclusive
    max_ts: int | None = None
    group: str = DEFAULT_GROUP
    pull_batch: int = 32                        # maxMsgNums of one PULL_MESSAGE
    pull_depth: int = 4                         # pulls of one task in flight
    max_rows_per_split: int = 1 << 20
    timeout_s: float = 10.0
    credentials: SessionCredentials | None = None   # brokers with plain ACL (docs/acl.md)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "WireOptions":
        """Parse the source's options (case-insensitive keys) for the ``namesrv`` mode."""
        o = {str(k).lower(): v for k, v in options.items()}
        namesrv = str(o.get("namesrv") or "").strip()
        if not namesrv:
            raise InvalidOptionError("namesrv", o.get("namesrv"), 'expected "host:port[;host:port]"')
        for local, name in (("startoffset", "startOffset"), ("endoffset", "endOffset")):
            if local in o:
                raise InvalidOptionError(name, o[local], "over the wire give startingOffsets / "
                                         'endingOffsets: JSON {"topic": {"broker": {"queue": offset}}}')
        topics = _str_set(o, "topics") or _str_set(o, "topic")
        if not topics:
            raise InvalidOptionError("topics", None, "a read over the wire needs the topic(s) to read")
        tags = _str_set(o, "tags", seps=("||", ","))
        if tags is not None and len(tags) > MAX_TAGS:
            raise InvalidOptionError("tags", o["tags"], f"at most {MAX_TAGS} tags")
        qids = _str_set(o, "queueids")
        try:
            queue_ids = frozenset(int(x) for x in qids) if qids is not None else None
        except ValueError:
            raise InvalidOptionError("queueIds", o["queueids"],
                                     "expected integers separated by commas") from None
        group = str(o.get("consumergroup", DEFAULT_GROUP)).strip()
        if not group or not all(c.isalnum() or c in "-_%|" for c in group):
            raise InvalidOptionError("consumerGroup", group, "use letters, digits, '-', '_', '%', '|'")
        timeout_ms = _int(o, "timeoutms", 10_000, minimum=1)
        return cls(credentials=credentials_option(o),
            namesrv=namesrv, topics=tuple(sorted(topics)), queue_ids=queue_ids,
            brokers=_str_set(o, "brokers"),
            starting=parse_offsets("startingOffsets", o.get("startingoffsets", "earliest")),
            ending=parse_offsets("endingOffsets", o.get("endingoffsets", "latest")),
            tags=tags, min_ts=_int(o, "starttimestamp"), max_ts=_int(o, "endtimestamp"),
            group=group, pull_batch=_int(o, "pullbatchsize", 32, minimum=1) or 32,
            pull_depth=_int(o, "pulldepth", 4, minimum=1) or 4,
            max_rows_per_split=_int(o, "maxrowsperpartition", 1 << 20, minimum=1) or 1 << 20,
            timeout_s=(timeout_ms or 10_000) / 1000)

    @property
    def subscription(self) -> str:
        """The pull's subscription expression: ``*`` or the tags joined by ``||``."""
        return "||".join(sorted(self.tags)) if self.tags is not None else "*"


# -- offsets as JSON -----------------------------------------------------------------------------

def parse_offsets(option: str, value: Any) -> str | Offsets:
    """``earliest`` / ``latest`` as is; JSON ``{"topic": {"broker": {"queue": offset}}}`` as
    Offsets (an offset of -2 means earliest and -1 latest, as in Kafka's options)."""
    s = str(value).strip()
    if s in ("earliest", "latest"):
        return s
    try:
        return offsets_from_json(json.loads(s))
    except (ValueError, TypeError, AttributeError):
        raise InvalidOptionError(option, value, 'expected "earliest", "latest" or JSON '
                                 '{"topic": {"broker": {"queue": offset}}}') from None


def offsets_from_json(doc: Mapping[str, Any]) -> Offsets:
    """Nested JSON offsets (a parsed dict) as Offsets."""
    out: Offsets = {}
    for topic, brokers in doc.items():
        for broker, queues in brokers.items():
            for qid, off in queues.items():
                out[(str(topic), str(broker), int(qid))] = int(off)
    return out


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, dict[str, int]]]:
    """Offsets as nested JSON-able dicts, keys sorted (queues by number)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (topic, broker, qid), off in sorted(offsets.items()):
        out.setdefault(topic, {}).setdefault(broker, {})[str(qid)] = int(off)
    return out


# -- planning -----------------------------------------------------------------------------------

def credentials_option(o: Mapping[str, Any]) -> SessionCredentials | None:
    """``accessKey`` and ``secretKey`` (lower-cased option keys): the plain-ACL credentials
    every request is signed with; neither for brokers without ACL."""
    ak, sk = o.get("accesskey"), o.get("secretkey")
    if ak is None and sk is None:
        return None
    if not ak or not sk:
        raise InvalidOptionError("accessKey" if not ak else "secretKey", ak if not ak else sk,
                                 "give both accessKey and secretKey (plain ACL), or neither")
    return SessionCredentials(str(ak), str(sk))


def open_transport(opts: WireOptions) -> TcpTransport:
    """A transport to the options' NameServer(s); close it after use."""
    return TcpTransport(opts.namesrv, credentials=opts.credentials)


def discover(transport: TcpTransport, opts: WireOptions) -> list[WireQueue]:
    """Every readable queue the options select, from the topics' current routes (a topic no
    broker has yet has none)."""
    out: list[WireQueue] = []
    for topic in opts.topics:
        route = transport.get_topic_route(topic)
        if route is None:
            continue
        for qd in route.queue_datas:
            if not qd.perm & PERM_READ or not route.broker_addrs.get(qd.broker_name):
                continue
            if opts.brokers is not None and qd.broker_name not in opts.brokers:
                continue
            out.extend(WireQueue(topic, qd.broker_name, q) for q in range(qd.read_queue_nums)
                       if opts.queue_ids is None or q in opts.queue_ids)
    return sorted(out)


def queue_bounds(transport: TcpTransport, queues: list[WireQueue], skip_unreachable: bool = False
                 ) -> dict[tuple[str, str, int], tuple[int, int]]:
    """{(topic, broker, queue id): (min offset, max offset)} asked of each queue's broker now.

    ``skip_unreachable``: a broker that cannot be reached (TransportError: down, but still in
    the NameServer's route until it expires) is left out instead of failing the call (a
    stream reads on from the others; its queues keep their offsets)."""
    out: dict[tuple[str, str, int], tuple[int, int]] = {}
    down: set[str] = set()
    for q in queues:
        if q.broker in down:
            continue
        try:
            out[(q.topic, q.broker, q.queue_id)] = (
                transport.get_min_offset(q.broker, q.topic, q.queue_id),
                transport.get_max_offset(q.broker, q.topic, q.queue_id))
        except TransportError:
            if not skip_unreachable:
                raise
            down.add(q.broker)          # asked once a call: a hung broker costs one timeout
    return out


def resolve(spec: str | Offsets, bounds: dict[tuple[str, str, int], tuple[int, int]],
            default: str) -> Offsets:
    """Each queue's offset under ``spec``: ``earliest`` is its min offset, ``latest`` its max;
    a queue the explicit offsets leave out (or give as -2 / -1) takes ``default``."""
    out: Offsets = {}
    for k, (lo, hi) in bounds.items():
        v: Any = spec if isinstance(spec, str) else spec.get(k, default)
        if v == -2:
            v = "earliest"
        elif v == -1:
            v = "latest"
        out[k] = lo if v == "earliest" else hi if v == "latest" else int(v)
    return out


def splits(start: Offsets, end: Offsets, max_rows: int) -> list[WireSplit]:
    """The splits covering [start, end) of every queue in ``end``, at most ``max_rows``
    offsets each; a queue missing from ``start`` starts at 0."""
    out: list[WireSplit] = []
    for (topic, broker, qid), e in sorted(end.items()):
        s = start.get((topic, broker, qid), 0)
        out.extend(WireSplit(topic, broker, qid, a, min(e, a + max_rows))
                   for a in range(s, e, max_rows))
    return out


def plan(opts: WireOptions, transport: TcpTransport | None = None) -> list[WireSplit]:
    """The splits of a batch read: each selected queue from ``startingOffsets`` (not before
    its min offset) to ``endingOffsets`` (not past its max)."""
    own = transport is None
    t = open_transport(opts) if transport is None else transport
    try:
        bounds = queue_bounds(t, discover(t, opts))
        start = resolve(opts.starting, bounds, "earliest")
        end = resolve(opts.ending, bounds, "latest")
        for k, (lo, hi) in bounds.items():
            start[k] = max(start[k], lo)
            end[k] = max(start[k], min(end[k], hi))
            if opts.min_ts is not None and start[k] < end[k]:
                # searched for a ms earlier: an exact match may be any of the messages
                # stored in that ms, a near one the last before it; either way no message
                # stored at min_ts or later comes before it (rows are still checked)
                topic, broker, qid = k
                start[k] = max(start[k], t.search_offset(broker, topic, qid, opts.min_ts - 1))
                end[k] = max(start[k], end[k])
        return splits(start, end, opts.max_rows_per_split)
    finally:
        if own:
            t.close()


# -- reading ------------------------------------------------------------------------------------

def _code(code: int) -> int:
    try:
        return ResponseCode(code)
    except ValueError:
        return code


def _decompressor(body: bytes) -> Callable[[int], bytes]:
    """The decompressed body of a compressed record of a pull answer, by commit-log offset
    (the answer decoded to messages once, only when a row needs it)."""
    found: dict[int, bytes] = {}

    def get(commitlog_offset: int) -> bytes:
        if not found:
            found.update((m.commitlog_offset, m.body_bytes) for m in decode_records(body))
        return found[commitlog_offset]
    return get


def read_split(transport: TcpTransport, split: WireSplit, opts: WireOptions,
               batch_bytes: int = 4 << 20) -> Iterator[pa.RecordBatch]:
    """RecordBatches (``WIRE_ARROW_SCHEMA``) of the split's messages that pass the tags and
    store-time options, in queue order.

    Up to ``pullDepth`` pulls are in flight: each asks for the ``pullBatchSize`` offsets after
    the one before. When an answer ends elsewhere than the next pull starts (the broker sent
    fewer, or skipped messages the tags filter out), the pulls in flight are dropped and
    pulling resumes at the broker's next offset. Answers are gathered up to ``batch_bytes``
    of records and decoded together into columns in Cython (``_columns.decode_records``):
    one RecordBatch each. The broker filters by the tags' hash codes; each row's real
    TAGS is compared here (a hash collision is dropped), as RocketMQ's clients do. Offsets the
    broker no longer has (deleted by retention: PULL_OFFSET_MOVED) are skipped; a queue that
    ends before the split does fails the read, naming the queue."""
    topic_b = split.topic.encode("utf-8")
    tagset = _columns.tag_set(sorted(opts.tags)) if opts.tags is not None else None
    min_ts = INT64_MIN if opts.min_ts is None else opts.min_ts
    max_ts = INT64_MAX if opts.max_ts is None else opts.max_ts
    broker = pa.scalar(split.broker, pa.string())
    inflight: deque[tuple[int, int, Future]] = deque()    # (offset, count asked, answer)
    step = opts.pull_batch
    full = 0                            # full answers in a row since the step shrank
    bodies: list[bytes] = []            # answers' records, decoded together (one Arrow batch)
    size = 0
    off = ahead = split.start

    def decoded() -> pa.RecordBatch | None:
        body = b"".join(bodies)
        bodies.clear()
        try:
            cols, _ = _columns.decode_records(body, topic_b, split.queue_id, split.start,
                                              split.end, tagset, min_ts, max_ts)
        except ValueError as e:
            raise RemotingProtocolError(f"pulling {split.topic}@{split.broker}/{split.queue_id} "
                                        f"before offset {off}: {e}") from None
        if not cols["rows"]:
            return None
        b = to_record_batch(cols, split.topic, split.queue_id, _decompressor(body))
        return pa.RecordBatch.from_arrays(b.columns + [pa.repeat(broker, b.num_rows)],
                                          schema=WIRE_ARROW_SCHEMA)

    while off < split.end:
        while len(inflight) < opts.pull_depth and ahead < split.end:
            n = min(step, split.end - ahead)
            inflight.append((ahead, n, transport.pull_message_raw(split.broker, PullMessageRequest(
                opts.group, split.topic, split.queue_id, ahead, max_msg_nums=n,
                sys_flag=FLAG_SUBSCRIPTION, suspend_timeout_millis=0,
                subscription=opts.subscription))))
            ahead += n
        at, asked, fut = inflight.popleft()
        assert at == off
        r = fut.result(opts.timeout_s)
        code = _code(r.code)
        nxt = r.int_field("nextBeginOffset")
        where = f"{split.topic}@{split.broker}/{split.queue_id} offset {off}"
        if code == ResponseCode.SUCCESS:
            bodies.append(bytes(r.body))
            size += len(r.body)
            if opts.tags is None and 0 < nxt - at < asked:
                # the broker sends at most this many a pull (its transfer limits): ask no
                # more, so the pulls in flight line up with its answers
                step = nxt - at
                full = 0
            elif opts.tags is None and nxt - at == asked and step < opts.pull_batch:
                full += 1
                if full == GROW_AFTER:
                    # the limit may have been lifted (a broker sends fewer messages a pull
                    # while they are on disk only): ask for more again
                    step = min(opts.pull_batch, step * 2)
                    full = 0
        elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            pass                        # nothing matched the tags up to the next offset
        elif code == ResponseCode.PULL_OFFSET_MOVED and nxt > off:
            pass                        # retention deleted [off, next): those rows are gone
        elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED):
            raise MQBrokerError(code, f"pulling {where}: the queue holds "
                                f"[{r.int_field('minOffset')}, {r.int_field('maxOffset')}), the "
                                f"read wanted up to {split.end} ({r.remark or 'no message'})",
                                split.broker)
        else:
            raise MQBrokerError(code, f"pulling {where}: {r.remark}", split.broker)
        if nxt <= off:
            raise RemotingProtocolError(f"pulling {where}: the broker answered code {int(code)} "
                                        f"with next offset {nxt}, not past the request")
        off = nxt
        if not inflight or inflight[0][0] != off:
            # the answer ended elsewhere than the pulls in flight (or past them) assumed:
            # theirs are dropped when they come, pulling goes on from the broker's offset
            inflight.clear()
            ahead = off
        if size >= batch_bytes:
            batch = decoded()
            size = 0
            if batch is not None:
                yield batch
    if bodies:
        batch = decoded()
        if batch is not None:
            yield batch
