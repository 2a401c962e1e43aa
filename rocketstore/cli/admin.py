"""``rocketstore admin COMMAND -n host:port``: mqadmin's everyday commands over the wire.

Commands keep mqadmin's names and option letters (-n NameServer, -t topic, -g group, -b broker
address, -c cluster, -i message id, -k key, -s time, -r/-w queue counts, -p perm or body).
Output is an aligned table, or JSON with ``--json``; errors are one line on stderr and a
non-zero exit (``rocketstore.cli.main``). Talks to any RocketMQ 4.9-compatible NameServer and
broker: ``rocketstore namesrv``/``broker`` or Java ones.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

from rocketstore.cli._common import CommandError, encode_body, fmt_ts, parse_time, table
from rocketstore.errors import RocketStoreError

COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int]]] = {}


def _command(name: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        COMMANDS[name] = (help_text, fn)
        return fn
    return deco


ACCESS_KEY_ENV, SECRET_KEY_ENV = "ROCKETSTORE_ACCESS_KEY", "ROCKETSTORE_SECRET_KEY"
NAMESRV_ENV = "NAMESRV_ADDR"        # what mqadmin reads when -n is not given


def _credentials(args: argparse.Namespace):
    """SessionCredentials from --access-key/--secret-key (or the environment), or None."""
    ak, sk = args.access_key, args.secret_key
    if not ak and not sk:
        return None
    if not ak or not sk:
        missing = "--access-key" if not ak else "--secret-key"
        env = ACCESS_KEY_ENV if not ak else SECRET_KEY_ENV
        raise CommandError(f"{missing} (or {env}) is required with the other key")
    from rocketstore.acl.signature import SessionCredentials
    return SessionCredentials(ak, sk)


def _client(args: argparse.Namespace):
    from rocketstore.remoting.admin_client import AdminClient
    if not args.namesrv:
        raise CommandError(f"-n host:port (the NameServer) is required, or set {NAMESRV_ENV}")
    return AdminClient(args.namesrv, timeout=args.timeout, credentials=_credentials(args))


def _emit(args: argparse.Namespace, doc: Any, rows: list[tuple[Any, ...]] | None = None,
          headers: tuple[str, ...] = (), after: str | None = None) -> None:
    if args.json:
        json.dump(doc, sys.stdout, indent=2, sort_keys=False, default=str)
        sys.stdout.write("\n")
        return
    if rows is not None:
        table(rows, headers)
    if after:
        print(after)


def _mq(mq: Any) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def _message_doc(m: Any) -> dict[str, Any]:
    body, enc = encode_body(bytes(m.body))
    return {"topic": m.topic, "msgId": m.uniq_key or m.offset_msg_id, "offsetMsgId": m.offset_msg_id,
            "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "commitLogOffset": m.commitlog_offset, "tags": m.tags, "keys": list(m.keys),
            "bornHost": m.born_host, "bornTimestamp": m.born_timestamp,
            "storeHost": m.store_host, "storeTimestamp": m.store_timestamp,
            "reconsumeTimes": m.reconsume_times, "properties": dict(m.properties),
            "body": body, "bodyEncoding": enc}


# -- NameServer ----------------------------------------------------------------------------------

def cluster_figures(kv: dict[str, str], now_ms: int) -> tuple[float, float, float, float]:
    """(in TPS, out TPS, #Hour, #SPACE) of one broker's runtime info, as mqadmin clusterList
    computes them: the first number of putTps / getTransferedTps, the hours since
    earliestMessageTimeStamp (-1 when the broker has no message: a huge figure, as on
    RocketMQ) and commitLogDiskRatio."""
    def first(key: str) -> float:
        v = (kv.get(key) or "").split(" ")
        return float(v[0]) if v and v[0] else 0.0
    earliest = kv.get("earliestMessageTimeStamp")
    hour = (now_ms - int(earliest)) / 1000.0 / 60.0 / 60.0 if earliest else 0.0
    ratio = kv.get("commitLogDiskRatio")
    return first("putTps"), first("getTransferedTps"), hour, float(ratio) if ratio else 0.0


@_command("clusterList", "brokers of every cluster: address, version, in/out TPS, hours of "
                         "messages kept (#Hour) and disk used (#SPACE)")
def _cluster_list(args: argparse.Namespace) -> int:
    rows = []
    with _client(args) as admin:
        info = admin.cluster_info()
        for cluster, names in sorted(info["clusterAddrTable"].items()):
            for name in sorted(names):
                bd = info["brokerAddrTable"].get(name, {})
                for bid, addr in sorted((bd.get("brokerAddrs") or {}).items(),
                                        key=lambda x: int(x[0])):
                    try:
                        kv = admin.broker_runtime_info(addr)
                    except RocketStoreError:
                        rows.append((cluster, name, int(bid), addr, "-", "-", "-", "-", "-"))
                        continue
                    in_tps, out_tps, hour, space = cluster_figures(kv, int(time.time() * 1000))
                    rows.append((cluster, name, int(bid), addr, kv.get("brokerVersionDesc", ""),
                                 f"{in_tps:.2f}", f"{out_tps:.2f}", f"{hour:.2f}",
                                 f"{space:.4f}"))
    if args.json:
        keys = ("cluster", "brokerName", "brokerId", "addr", "version", "inTps", "outTps",
                "hour", "space")
        info["brokers"] = [dict(zip(keys, r)) for r in rows]
    _emit(args, info, rows, ("cluster", "broker name", "id", "address", "version", "in tps",
                             "out tps", "#Hour", "#SPACE"))
    return 0


@_command("topicList", "every topic the NameServer routes (-c: with cluster and consumer "
                       "groups)")
def _topic_list(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        if getattr(args, "attributes", False):
            return _topic_attributes(args, admin)
        topics = admin.topic_list()
        if not getattr(args, "cluster_model", False):
            _emit(args, {"topicList": topics}, [(t,) for t in topics], ("topic",))
            return 0
        # TopicListSubCommand -c: retry and DLQ topics left out, a row per consumer group
        info = admin.cluster_info()
        cluster_of = {name: bd.get("cluster", "") for name, bd in info["brokerAddrTable"].items()}
        rows = []
        for t in topics:
            if t.startswith(("%RETRY%", "%DLQ%")):
                continue
            route = admin.topic_route(t)
            bds = route.get("brokerDatas") or ()
            cluster = (bds[0].get("cluster") or cluster_of.get(bds[0].get("brokerName"), "")
                       if bds else "")
            try:
                groups = admin.topic_consumed_by(t)
            except RocketStoreError:
                groups = []
            for g in groups or [""]:
                rows.append((cluster, t, g))
    _emit(args, [{"cluster": c, "topic": t, "consumerGroup": g} for c, t, g in rows], rows,
          ("#Cluster Name", "#Topic", "#Consumer Group"))
    return 0


def _topic_attributes(args: argparse.Namespace, admin: Any) -> int:
    """topicList -a: each topic's RocketMQ 5 attributes (message.type) as the master brokers
    keep them (their topic tables, not the NameServer's list: what a broker has is shown at
    once); a topic without any reads as NORMAL."""
    configs: dict[str, dict[str, Any]] = {}
    for name, addr in sorted(admin.master_addrs().items()):
        table = admin.topic_configs(addr).get("topicConfigTable") or {}
        for t, bean in table.items():
            configs.setdefault(t, {})[name] = bean.get("attributes") or {}
    doc, rows = [], []
    for t in sorted(configs):
        for broker, attrs in sorted(configs[t].items()):
            doc.append({"topic": t, "brokerName": broker, "attributes": attrs})
            rows.append((t, broker, attrs.get("message.type", "NORMAL"),
                         ",".join(f"{k}={v}" for k, v in sorted(attrs.items())) or "-"))
    _emit(args, doc, rows, ("topic", "broker name", "message type", "attributes"))
    return 0


def _need(args: argparse.Namespace, *names: str) -> None:
    flags = {"topic": "-t TOPIC", "group": "-g GROUP", "broker": "-b HOST:PORT",
             "msg_id": "-i MSG_ID", "key": "-k KEY", "timestamp": "-s TIME", "body": "-p BODY"}
    for n in names:
        if not getattr(args, n, None):
            raise CommandError(f"{flags[n]} is required")


@_command("topicRoute", "brokers and queues of a topic (-t)")
def _topic_route(args: argparse.Namespace) -> int:
    _need(args, "topic")
    with _client(args) as admin:
        route = admin.topic_route(args.topic)
    addrs = {bd["brokerName"]: bd.get("brokerAddrs") or {} for bd in route.get("brokerDatas") or ()}
    rows = []
    for qd in sorted(route.get("queueDatas") or (), key=lambda q: q["brokerName"]):
        a = addrs.get(qd["brokerName"], {})
        rows.append((qd["brokerName"], a.get("0") or a.get(0) or "-", int(qd["readQueueNums"]),
                     int(qd["writeQueueNums"]), int(qd["perm"])))
    _emit(args, route, rows, ("broker name", "master address", "read queues", "write queues",
                              "perm"))
    return 0


# -- topics --------------------------------------------------------------------------------------

@_command("topicStatus", "per queue min/max offset and last store time of a topic (-t)")
def _topic_status(args: argparse.Namespace) -> int:
    _need(args, "topic")
    with _client(args) as admin:
        stats = admin.topic_stats(args.topic)
    doc = [dict(_mq(mq), minOffset=o.min_offset, maxOffset=o.max_offset,
                lastUpdateTimestamp=o.last_update_timestamp) for mq, o in stats.items()]
    rows = [(mq.broker_name, mq.queue_id, o.min_offset, o.max_offset,
             fmt_ts(o.last_update_timestamp)) for mq, o in stats.items()]
    _emit(args, doc, rows, ("broker name", "queue", "min offset", "max offset", "last updated"))
    return 0


@_command("updateTopic", "create or change a topic on a broker (-b) or a cluster (-c)")
def _update_topic(args: argparse.Namespace) -> int:
    _need(args, "topic")
    perm = int(args.perm) if args.perm is not None else 6
    if perm not in (2, 4, 6):
        raise CommandError(f"-p {args.perm}: perm must be 2 (write), 4 (read) or 6 (read-write)")
    for flag, n in (("-r", args.read_queues), ("-w", args.write_queues)):
        if not 0 <= n <= 65535:
            raise CommandError(f"{flag} {n}: a queue count is 0..65535")
    with _client(args) as admin:
        done = admin.update_topic(args.topic, read_queue_nums=args.read_queues,
                                  write_queue_nums=args.write_queues, perm=perm,
                                  order=args.order, broker_addr=args.broker, cluster=args.cluster,
                                  attributes=args.attributes)
        attrs = {a: admin.topic_config(a, args.topic).get("attributes") or {} for a in done}
    doc = {"topic": args.topic, "readQueueNums": args.read_queues,
           "writeQueueNums": args.write_queues, "perm": perm, "order": args.order,
           "brokers": done, "attributes": attrs}
    _emit(args, doc, [(a, args.topic, args.read_queues, args.write_queues, perm,
                       ",".join(f"{k}={v}" for k, v in sorted(attrs[a].items())) or "-")
                      for a in done],
          ("broker", "topic", "read queues", "write queues", "perm", "attributes"))
    return 0


@_command("deleteTopic", "delete a topic from the brokers of a cluster (-c; all when omitted) "
                         "and the NameServer")
def _delete_topic(args: argparse.Namespace) -> int:
    _need(args, "topic")
    with _client(args) as admin:
        done = admin.delete_topic(args.topic, args.cluster)
    _emit(args, {"topic": args.topic, "brokers": done}, None,
          after=f"deleted topic {args.topic} from {len(done)} broker(s) and the NameServer")
    return 0


# -- consumers -----------------------------------------------------------------------------------

@_command("consumerProgress", "per queue broker offset, group offset and lag of a group (-g)")
def _consumer_progress(args: argparse.Namespace) -> int:
    _need(args, "group")
    with _client(args) as admin:
        stats, tps = admin.consume_stats(args.group, args.topic)
    total = sum(o.lag for o in stats.values())
    doc = {"group": args.group, "consumeTps": tps, "diffTotal": total,
           "offsetTable": [dict(_mq(mq), brokerOffset=o.broker_offset,
                                consumerOffset=o.consumer_offset, lag=o.lag,
                                lastTimestamp=o.last_timestamp) for mq, o in stats.items()]}
    rows = [(mq.topic, mq.broker_name, mq.queue_id, o.broker_offset, o.consumer_offset, o.lag,
             fmt_ts(o.last_timestamp)) for mq, o in stats.items()]
    _emit(args, doc, rows, ("topic", "broker name", "queue", "broker offset", "consumer offset",
                            "lag", "last consumed"),
          after=f"\nconsume TPS: {tps:.2f}\nlag total: {total:,}")
    return 0


@_command("consumerConnection", "clients, subscriptions and settings of an online group (-g)")
def _consumer_connection(args: argparse.Namespace) -> int:
    _need(args, "group")
    with _client(args) as admin:
        cc = admin.consumer_connection(args.group)
    rows = [(c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"))
            for c in cc.get("connectionSet") or ()]
    subs = "\n".join(f"  {t}: {s.get('subString')}"
                     for t, s in sorted((cc.get("subscriptionTable") or {}).items()))
    _emit(args, cc, rows, ("client id", "address", "language", "version"),
          after=(f"\nsubscriptions:\n{subs}\nconsume type: {cc.get('consumeType')}\n"
                 f"message model: {cc.get('messageModel')}\n"
                 f"consume from: {cc.get('consumeFromWhere')}"))
    return 0


@_command("resetOffsetByTime", "move a group's offsets on a topic to a time (-g -t -s)")
def _reset_offset(args: argparse.Namespace) -> int:
    _need(args, "group", "topic", "timestamp")
    text = args.timestamp.strip()
    if text == "now":
        ts = int(time.time() * 1000)
    elif text in ("-1", "end"):
        ts = -1
    else:
        ts = parse_time(text, "-s")
    force = args.force.lower() != "false"
    with _client(args) as admin:
        table_ = admin.reset_offset_by_time(args.group, args.topic, ts, force)
    doc = {"group": args.group, "topic": args.topic, "timestamp": ts,
           "offsetTable": [dict(_mq(mq), offset=o) for mq, o in table_.items()]}
    _emit(args, doc, [(mq.broker_name, mq.queue_id, o) for mq, o in table_.items()],
          ("broker name", "queue", "new offset"))
    return 0


# -- messages ------------------------------------------------------------------------------------

def _print_message(m: Any) -> None:
    d = _message_doc(m)
    rows = [(k, json.dumps(v) if isinstance(v, (dict, list)) else
             (fmt_ts(v) if k.endswith("Timestamp") else v))
            for k, v in d.items() if k not in ("body", "bodyEncoding")]
    rows.append(("body", d["body"] if d["bodyEncoding"] == "utf8" else "b64:" + d["body"]))
    table(rows, ("field", "value"))


@_command("queryMsgById", "a message by its id (-i): the offset message id, or the client "
                          "id (UNIQ_KEY, what send() returns) with its topic (-t)")
def _query_by_id(args: argparse.Namespace) -> int:
    _need(args, "msg_id")
    msg_id = args.msg_id.strip()
    with _client(args) as admin:
        m, why = _view_by_offset_id(admin, msg_id)
        if m is None:
            # as mqadmin: what does not read as an offset id may be a client id (UNIQ_KEY),
            # found through the index of its topic
            if not args.topic:
                raise CommandError(f"message id {msg_id}: {why}; a client message id "
                                   f"(UNIQ_KEY, what send() returns) is looked up in its "
                                   f"topic's index: give -t TOPIC")
            found = admin.query_message(args.topic, msg_id, unique_key=True)
            if not found:
                raise CommandError(f"message id {msg_id}: {why}, and no message of topic "
                                   f"{args.topic} has it as its UNIQ_KEY")
            m = found[0]
    if args.json:
        _emit(args, _message_doc(m))
    else:
        _print_message(m)
    return 0


def _view_by_offset_id(admin: Any, msg_id: str) -> tuple[Any, str]:
    """(the message, "") when ``msg_id`` is the offset id of a message on a broker the
    NameServer knows, else (None, why not). A UNIQ_KEY has the same length and may decode to
    any address: only registered brokers are asked, and only an answer whose own offset id is
    ``msg_id`` counts (another broker's record at that offset is not the message)."""
    from rocketstore.remoting.admin_client import AdminError
    from rocketstore.store._codec import decode_msg_id
    from rocketstore.errors import RocketStoreError, TransportError
    try:
        host, _ = decode_msg_id(msg_id)
    except (ValueError, RocketStoreError):
        return None, "not an offset message id (32 or 56 hex digits)"
    info = admin.cluster_info()
    known = {a for bd in (info.get("brokerAddrTable") or {}).values()
             for a in (bd.get("brokerAddrs") or {}).values()}
    if host not in known:
        return None, f"read as an offset id it names {host}, which is no broker of the NameServer"
    try:
        m = admin.view_message(msg_id)
    except (AdminError, TransportError) as e:
        return None, f"read as an offset id: {e}"
    if m.offset_msg_id.upper() != msg_id.upper():
        return None, f"read as an offset id, the record there is {m.offset_msg_id}"
    return m, ""


@_command("queryMsgByKey", "messages of a topic by key (-t -k), through the index")
def _query_by_key(args: argparse.Namespace) -> int:
    _need(args, "topic", "key")
    begin = parse_time(args.begin, "--begin") if args.begin else 0
    end = parse_time(args.end, "--end") if args.end else None
    with _client(args) as admin:
        msgs = admin.query_message(args.topic, args.key, args.max_num, begin, end)
    if not msgs:
        raise CommandError(f"no message of topic {args.topic} has key {args.key!r}")
    docs = [_message_doc(m) for m in msgs]
    rows = [(d["msgId"], d["offsetMsgId"], d["queueId"], d["queueOffset"],
             fmt_ts(d["storeTimestamp"]), d["tags"], " ".join(d["keys"])) for d in docs]
    _emit(args, docs, rows, ("msg id", "offset msg id", "queue", "offset", "stored", "tags",
                             "keys"))
    return 0


@_command("sendMessage", "send one message (-t topic, -p body, -k keys, -c tags)")
def _send_message(args: argparse.Namespace) -> int:
    _need(args, "topic", "body")
    if not args.namesrv:
        raise CommandError(f"-n host:port (the NameServer) is required, or set {NAMESRV_ENV}")
    from rocketstore.client.producer import Producer
    from rocketstore.store import Message
    producer = Producer(args.producer_group, namesrv_addr=args.namesrv,
                        send_msg_timeout=int(args.timeout * 1000),
                        credentials=_credentials(args)).start()
    try:
        r = producer.send(Message(args.topic, args.body.encode("utf-8"), tags=args.tags or None,
                                  keys=args.key or None))
    finally:
        producer.shutdown()
    doc = {"status": r.status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
           "brokerName": r.message_queue.broker_name, "queueId": r.message_queue.queue_id,
           "queueOffset": r.queue_offset}
    _emit(args, doc, [(r.message_queue.broker_name, r.message_queue.queue_id, r.queue_offset,
                       r.status.value, r.msg_id, r.offset_msg_id)],
          ("broker name", "queue", "offset", "status", "msg id", "offset msg id"))
    return 0


# -- brokers -------------------------------------------------------------------------------------

@_command("brokerStatus", "a broker's runtime figures and metrics (-b host:port)")
def _broker_status(args: argparse.Namespace) -> int:
    from rocketstore.remoting.admin_client import AdminClient
    if not args.broker and not args.namesrv:
        raise CommandError("-b HOST:PORT (or -n host:port for every broker) is required")
    with AdminClient(args.namesrv or "", timeout=args.timeout, allow_no_namesrv=True,
                     credentials=_credentials(args)) as admin:
        addrs = [args.broker] if args.broker else sorted(admin.master_addrs(args.cluster).values())
        tables = {a: admin.broker_runtime_info(a) for a in addrs}
    if args.json:
        _emit(args, tables if not args.broker else tables[args.broker])
        return 0
    for i, (addr, t) in enumerate(tables.items()):
        if len(tables) > 1:
            print(("\n" if i else "") + f"broker {addr}")
        table(sorted(t.items()), ("key", "value"))
    return 0


# -- wiring --------------------------------------------------------------------------------------

def _run(args: argparse.Namespace) -> int:
    try:
        return COMMANDS[args.admin_command][1](args)
    except (AttributeError, TypeError, LookupError, RecursionError) as e:
        # the options were checked before anything was sent: what trips here is a reply of
        # the wrong shape (a list where an object belongs ...), an error like any refusal
        raise CommandError(f"malformed reply from the server: {type(e).__name__}: "
                           f"{str(e)[:200]}") from e


def register(sub: Any) -> None:
    p = sub.add_parser("admin", help="mqadmin's everyday commands against a NameServer and "
                                     "brokers (clusterList, topicRoute, consumerProgress, ...)",
                       description="RocketMQ admin over the wire: the commands of mqadmin, "
                                   "with its option letters. Tables by default, --json for "
                                   "scripts.")
    asub = p.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")
    for name, (help_text, _fn) in COMMANDS.items():
        c = asub.add_parser(name, help=help_text, description=help_text)
        c.add_argument("-n", "--namesrv", metavar="HOST:PORT[;HOST:PORT]",
                       default=os.environ.get(NAMESRV_ENV) or None,
                       help=f"NameServer address(es) (default ${NAMESRV_ENV}, as mqadmin)")
        c.add_argument("--access-key", metavar="KEY", default=os.environ.get(ACCESS_KEY_ENV),
                       help=f"sign requests for a broker with ACL on: the account's accessKey "
                            f"(default ${ACCESS_KEY_ENV})")
        c.add_argument("--secret-key", metavar="KEY", default=os.environ.get(SECRET_KEY_ENV),
                       help=f"its secretKey (default ${SECRET_KEY_ENV}; the environment keeps "
                            f"it out of the process list)")
        c.add_argument("--json", action="store_true", help="print JSON instead of a table")
        c.add_argument("--timeout", type=float, default=5.0, metavar="S",
                       help="seconds to wait for each answer (default 5)")
        _options(name, c)
        c.set_defaults(func=_run)


def _options(name: str, c: argparse.ArgumentParser) -> None:
    if name in ("topicRoute", "topicStatus", "updateTopic", "deleteTopic", "consumerProgress",
                "queryMsgByKey", "resetOffsetByTime", "sendMessage", "queryMsgById"):
        c.add_argument("-t", "--topic", help="topic")
    if name in ("consumerProgress", "consumerConnection", "resetOffsetByTime"):
        c.add_argument("-g", "--group", help="consumer group")
    if name in ("updateTopic", "brokerStatus"):
        c.add_argument("-b", "--broker", metavar="HOST:PORT", help="broker address")
    if name in ("updateTopic", "deleteTopic", "brokerStatus"):
        c.add_argument("-c", "--cluster", help="cluster name")
    if name == "updateTopic":
        c.add_argument("-r", "--read-queues", type=int, default=8, help="read queues (8)")
        c.add_argument("-w", "--write-queues", type=int, default=8, help="write queues (8)")
        c.add_argument("-p", "--perm", help="2 write, 4 read, 6 read-write (6)")
        c.add_argument("-o", "--order", action="store_true", help="an ordered topic")
        c.add_argument("-a", "--attributes", metavar="+KEY=VALUE,-KEY",
                       help="RocketMQ 5 topic attributes to add, change (+) or remove (-), "
                            "e.g. +message.type=FIFO")
    if name == "queryMsgById":
        c.add_argument("-i", "--msg-id", help="offset message id (or, with -t, client id)")
    if name in ("queryMsgByKey", "sendMessage"):
        c.add_argument("-k", "--key", help="message key")
    if name == "queryMsgByKey":
        c.add_argument("--begin", help="stored at or after (ms or ISO time)")
        c.add_argument("--end", help="stored at or before (ms or ISO time; default now)")
        c.add_argument("--max-num", type=int, default=64, help="at most this many per broker")
    if name == "resetOffsetByTime":
        c.add_argument("-s", "--timestamp", help="ms since the epoch, ISO time, 'now', or -1 "
                                                 "(the end)")
        c.add_argument("-f", "--force", default="true",
                       help="true (default): also move offsets forward; false: only back")
    if name == "topicList":
        c.add_argument("-c", "--clusterModel", dest="cluster_model", action="store_true",
                       help="with each topic's cluster and consumer groups")
        c.add_argument("-a", "--attributes", action="store_true",
                       help="with each topic's RocketMQ 5 attributes (message.type) per broker")
    admin_more.options(name, c)
    if name == "sendMessage":
        c.add_argument("-p", "--body", help="message body (UTF-8)")
        c.add_argument("-c", "--tags", help="tags")
        c.add_argument("--producer-group", default="rocketstore_admin_producer",
                       help="producer group (rocketstore_admin_producer)")


# the commands of rocketstore.cli.admin_more register themselves in COMMANDS on import
from rocketstore.cli import admin_more  # noqa: E402  (needs the helpers above)
