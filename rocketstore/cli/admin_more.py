"""More of mqadmin's commands for ``rocketstore admin``: subscription groups, producers, a
consumer's running info, broker settings, broker-wide consume stats, statsAll, NameServer
settings and write permission. Same names and option letters as 4.9.8's mqadmin; tables by
default, ``--json`` for scripts (``rocketstore.cli.admin`` wires them in)."""
from __future__ import annotations

import argparse
from typing import Any

from rocketstore.cli._common import CommandError, fmt_ts, table
from rocketstore.cli.admin import _client, _command, _emit, _need
from rocketstore.errors import RocketStoreError

_BOOL = ("true", "false")

# updateSubGroup's options: (letter, long name = SubscriptionGroupConfig field, kind)
SUB_GROUP_OPTIONS = (("-s", "consumeEnable", bool), ("-m", "consumeFromMinEnable", bool),
                     ("-d", "consumeBroadcastEnable", bool), ("-q", "retryQueueNums", int),
                     ("-r", "retryMaxTimes", int), ("-i", "brokerId", int),
                     ("-w", "whichBrokerWhenConsumeSlowly", int),
                     ("-a", "notifyConsumerIdsChangedEnable", bool))


def _bool(text: str, flag: str) -> bool:
    if text.lower() not in _BOOL:
        raise CommandError(f"{flag} {text}: expected true or false")
    return text.lower() == "true"


def _where(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.broker) == bool(args.cluster):
        raise CommandError("give exactly one of -b HOST:PORT (a broker) or -c CLUSTER")
    return {"broker_addr": args.broker or None, "cluster": args.cluster or None}


# -- subscription groups -------------------------------------------------------------------------

@_command("updateSubGroup", "create or change a subscription group (-g) on a broker (-b) or "
                            "a cluster (-c)")
def _update_sub_group(args: argparse.Namespace) -> int:
    _need(args, "group")
    config: dict[str, Any] = {"groupName": args.group}
    for letter, name, kind in SUB_GROUP_OPTIONS:
        v = getattr(args, name)
        if v is None:
            continue
        if kind is bool:
            config[name] = _bool(v, letter)
        else:
            try:
                config[name] = int(v)
            except ValueError:
                raise CommandError(f"{letter} {v}: expected an integer") from None
    with _client(args) as admin:
        done = admin.update_sub_group(config, **_where(args))
    _emit(args, {"config": config, "brokers": done}, None,
          after=f"subscription group {args.group} updated on {', '.join(done)}")
    return 0


@_command("deleteSubGroup", "delete a subscription group (-g) from a broker (-b) or a "
                            "cluster (-c); -r true also drops its offsets")
def _delete_sub_group(args: argparse.Namespace) -> int:
    _need(args, "group")
    remove = _bool(args.remove_offset, "-r")
    with _client(args) as admin:
        done = admin.delete_sub_group(args.group, remove_offset=remove, **_where(args))
    _emit(args, {"group": args.group, "removeOffset": remove, "brokers": done}, None,
          after=f"subscription group {args.group} deleted from {', '.join(done)}")
    return 0


@_command("getConsumerConfig", "a subscription group's settings (-g) on every master broker")
def _get_consumer_config(args: argparse.Namespace) -> int:
    _need(args, "group")
    found = []
    with _client(args) as admin:
        info = admin.cluster_info()
        for cluster, names in sorted(info["clusterAddrTable"].items()):
            for name in sorted(names):
                addrs = (info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}
                addr = addrs.get("0") or addrs.get(0)
                if addr is None:
                    continue
                table_ = admin.sub_group_configs(addr).get("subscriptionGroupTable") or {}
                if args.group in table_:
                    found.append({"cluster": cluster, "brokerName": name, "brokerAddr": addr,
                                  "config": table_[args.group]})
    if not found:
        raise CommandError(f"no broker has subscription group {args.group}")
    if args.json:
        _emit(args, found)
        return 0
    for i, f in enumerate(found):
        print(("\n" if i else "") + f"{f['cluster']}:{f['brokerName']}:{f['brokerAddr']}")
        # Java's words for booleans, as mqadmin prints them
        table([(k, str(v).lower() if isinstance(v, bool) else v)
               for k, v in sorted(f["config"].items())], ("setting", "value"))
    return 0


# -- clients -------------------------------------------------------------------------------------

@_command("producerConnection", "the producers of a group (-g) on the brokers of a topic (-t)")
def _producer_connection(args: argparse.Namespace) -> int:
    _need(args, "group", "topic")
    with _client(args) as admin:
        conns = admin.producer_connection(args.group, args.topic)
    _emit(args, {"connectionSet": conns},
          [(c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"))
           for c in conns], ("client id", "address", "language", "version"))
    return 0


@_command("consumerStatus", "a consumer's running info, asked through its broker (-g, "
                            "-i client id; without -i: each client of the group)")
def _consumer_status(args: argparse.Namespace) -> int:
    _need(args, "group")
    jstack = _bool(args.jstack, "-s")
    with _client(args) as admin:
        if args.client_id:
            raw = admin.consumer_running_info(args.group, args.client_id, jstack)
            text = raw.decode("utf-8", "replace")
            if args.json:
                _emit(args, {"clientId": args.client_id, "runningInfo": text})
            else:
                print(text)
            return 0
        clients = [c.get("clientId") for c in
                   admin.consumer_connection(args.group).get("connectionSet") or ()]
        rows = []
        for cid in clients:
            try:
                raw = admin.consumer_running_info(args.group, cid, jstack)
                rows.append((cid, "yes", len(raw)))
            except RocketStoreError as e:      # one client's failure is a row
                rows.append((cid, f"no: {e}", 0))
    _emit(args, [{"clientId": c, "answered": a, "bytes": n} for c, a, n in rows], rows,
          ("client id", "answered", "running info bytes"))
    return 0


# -- brokers -------------------------------------------------------------------------------------

@_command("getBrokerConfig", "a broker's settings (-b, or every master of -c)")
def _get_broker_config(args: argparse.Namespace) -> int:
    where = _where(args)
    with _client(args) as admin:
        addrs = ([where["broker_addr"]] if where["broker_addr"]
                 else sorted(admin.master_addrs(where["cluster"]).values()))
        configs = {a: admin.broker_config(a) for a in addrs}
    if args.json:
        _emit(args, configs)
        return 0
    for i, (addr, cfg) in enumerate(configs.items()):
        print(("\n" if i else "") + f"============{addr}============")
        table(sorted(cfg.items()), ("setting", "value"))
    return 0


@_command("updateBrokerConfig", "change a setting (-k name -v value) of a running broker (-b) "
                                "or cluster (-c); only settings that can change at run time")
def _update_broker_config(args: argparse.Namespace) -> int:
    if not args.key or args.value is None:
        raise CommandError("-k NAME and -v VALUE are required")
    with _client(args) as admin:
        done = admin.update_broker_config({args.key: args.value}, **_where(args))
    _emit(args, {"key": args.key, "value": args.value, "brokers": done}, None,
          after=f"{args.key}={args.value} set on {', '.join(done)}")
    return 0


@_command("brokerConsumeStats", "every group's queues on a broker (-b): offsets and diff; "
                                "-o true: ordered topics only, -l: rows with diff >= this")
def _broker_consume_stats(args: argparse.Namespace) -> int:
    _need(args, "broker")
    order = _bool(args.order, "-o")
    with _client(args) as admin:
        addr, groups, total = admin.broker_consume_stats(args.broker, order)
    rows = []
    for group, stats in sorted(groups.items()):
        for offsets, _tps in stats:
            for mq, o in sorted(offsets.items()):
                diff = o.broker_offset - o.consumer_offset
                if diff >= args.level:
                    rows.append((mq.topic, group, mq.broker_name, mq.queue_id, o.broker_offset,
                                 o.consumer_offset, diff, fmt_ts(o.last_timestamp)))
    doc = {"brokerAddr": addr, "totalDiff": total,
           "rows": [dict(_mq_row(r)) for r in rows]}
    _emit(args, doc, rows, ("topic", "group", "broker name", "qid", "broker offset",
                            "consumer offset", "diff", "last time"),
          after=f"\nDiff Total: {total}")
    return 0


def _mq_row(r: tuple[Any, ...]) -> dict[str, Any]:
    keys = ("topic", "group", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff",
            "lastTime")
    return dict(zip(keys, r))


@_command("cleanUnusedTopic", "drop the queues of topics a broker (-b) or cluster (-c) has "
                              "no config for")
def _clean_unused_topic(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        done = admin.clean_unused_topic(**_where(args))
    _emit(args, {"brokers": done}, None, after=f"cleaned unused topics on {', '.join(done)}")
    return 0


def _compute_24h_sum(bsd: dict[str, Any]) -> int:
    # StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's, else the minute's
    for w in ("statsDay", "statsHour", "statsMinute"):
        s = int((bsd.get(w) or {}).get("sum") or 0)
        if s:
            return s
    return 0


@_command("statsAll", "per topic and group: accumulation, in/out TPS and messages in 24 h "
                      "(-a active topics only, -t one topic)")
def _stats_all(args: argparse.Namespace) -> int:
    from rocketstore.remoting.admin_client import AdminError
    from rocketstore.errors import TransportError
    rows: list[tuple[Any, ...]] = []
    with _client(args) as admin:
        for topic in admin.topic_list():
            if topic.startswith(("%RETRY%", "%DLQ%")) or (args.topic and topic != args.topic):
                continue
            try:
                masters = admin.topic_masters(topic)
                groups = admin.topic_consumed_by(topic)
            except (AdminError, TransportError):
                continue
            in_tps, in_24h = 0.0, 0
            for addr in masters.values():
                try:
                    bsd = admin.stats_data(addr, "TOPIC_PUT_NUMS", topic)
                except (AdminError, TransportError):
                    continue
                in_tps += float(bsd["statsMinute"]["tps"])
                in_24h += _compute_24h_sum(bsd)
            if not groups:
                if not args.active or in_24h > 0:
                    rows.append((topic, "", 0, f"{in_tps:.2f}", "", in_24h, "NO_CONSUMER"))
                continue
            for group in groups:
                out_tps, out_24h = 0.0, 0
                for addr in masters.values():
                    try:
                        bsd = admin.stats_data(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                    except (AdminError, TransportError):
                        continue
                    out_tps += float(bsd["statsMinute"]["tps"])
                    out_24h += _compute_24h_sum(bsd)
                try:
                    stats, _ = admin.consume_stats(group, topic)
                    acc = max(0, sum(o.broker_offset - o.consumer_offset for o in stats.values()))
                except (AdminError, TransportError):
                    acc = 0
                if not args.active or in_24h > 0 or out_24h > 0:
                    rows.append((topic, group, acc, f"{in_tps:.2f}", f"{out_tps:.2f}", in_24h,
                                 out_24h))
    keys = ("topic", "group", "accumulation", "inTps", "outTps", "inMsg24Hour", "outMsg24Hour")
    _emit(args, [dict(zip(keys, r)) for r in rows], rows,
          ("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour",
           "#OutMsg24Hour"))
    return 0


# -- NameServer ----------------------------------------------------------------------------------

@_command("getNamesrvConfig", "the settings of every NameServer (-n)")
def _get_namesrv_config(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        configs = admin.namesrv_config()
    if args.json:
        _emit(args, configs)
        return 0
    for i, (ns, cfg) in enumerate(configs.items()):
        print(("\n" if i else "") + f"============{ns}============")
        table(sorted(cfg.items()), ("setting", "value"))
    return 0


@_command("wipeWritePerm", "stop writes to a broker (-b broker name) at every NameServer")
def _wipe_write_perm(args: argparse.Namespace) -> int:
    return _write_perm(args, "wipe")


@_command("addWritePerm", "allow writes to a broker (-b broker name) at every NameServer again")
def _add_write_perm(args: argparse.Namespace) -> int:
    return _write_perm(args, "add")


def _write_perm(args: argparse.Namespace, op: str) -> int:
    if not args.broker_name:
        raise CommandError("-b BROKER_NAME is required")
    with _client(args) as admin:
        fn = admin.wipe_write_perm if op == "wipe" else admin.add_write_perm
        counts = fn(args.broker_name)
    _emit(args, counts, [(ns, n) for ns, n in counts.items()],
          ("NameServer", "wipe topic count" if op == "wipe" else "add topic count"))
    return 0


def options(name: str, c: argparse.ArgumentParser) -> None:
    """The options of the commands above (mqadmin's letters)."""
    if name in ("updateSubGroup", "deleteSubGroup", "getConsumerConfig", "producerConnection",
                "consumerStatus"):
        c.add_argument("-g", "--group", help="group name")
    if name in ("updateSubGroup", "deleteSubGroup", "getBrokerConfig", "updateBrokerConfig",
                "brokerConsumeStats", "cleanUnusedTopic"):
        c.add_argument("-b", "--broker", metavar="HOST:PORT", help="broker address")
    if name in ("updateSubGroup", "deleteSubGroup", "getBrokerConfig", "updateBrokerConfig",
                "cleanUnusedTopic"):
        c.add_argument("-c", "--cluster", help="cluster name")
    if name == "updateSubGroup":
        for letter, long, kind in SUB_GROUP_OPTIONS:
            c.add_argument(letter, f"--{long}", dest=long,
                           help=f"{long} ({'true/false' if kind is bool else 'integer'})")
    if name == "deleteSubGroup":
        c.add_argument("-r", "--removeOffset", dest="remove_offset", default="false",
                       help="true: also drop the group's committed offsets (false)")
    if name in ("producerConnection", "statsAll"):
        c.add_argument("-t", "--topic", help="topic")
    if name == "consumerStatus":
        c.add_argument("-i", "--clientId", dest="client_id", help="the consumer's client id")
        c.add_argument("-s", "--jstack", default="false", help="ask for the client's stack "
                                                               "(true/false)")
    if name == "updateBrokerConfig":
        c.add_argument("-k", "--key", help="setting name (RocketMQ's, e.g. brokerPermission)")
        c.add_argument("-v", "--value", help="its new value")
    if name == "brokerConsumeStats":
        c.add_argument("-o", "--order", default="false", help="true: ordered topics only")
        c.add_argument("-l", "--level", type=int, default=0,
                       help="only queues with a diff of at least this (0)")
    if name == "statsAll":
        c.add_argument("-a", "--activeTopic", dest="active", action="store_true",
                       help="only topics with messages in or out in 24 hours")
    if name in ("wipeWritePerm", "addWritePerm"):
        c.add_argument("-b", "--brokerName", dest="broker_name", help="broker name")


__all__ = ["options", "SUB_GROUP_OPTIONS"]
