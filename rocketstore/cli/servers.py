"""``rocketstore namesrv`` and ``rocketstore broker``: servers in the foreground until SIGTERM
or SIGINT, logging to stderr or to ``--log-file`` at ``--log-level``."""
from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import os
import signal
import sys

from rocketstore.cli._common import CommandError


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``host`` -> (host, port); 127.0.0.1 unless told."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise CommandError(f"--listen {text!r}: the port must be a number 0-65535")
    return host or "127.0.0.1", int(port)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _level(text: str) -> str:
    """``--log-level``'s type: a level name in any case; ``WARN`` as RocketMQ's logback spells it."""
    name = text.upper()
    name = "WARNING" if name == "WARN" else name
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(LOG_LEVELS)}")
    return name


def add_logging_args(p: argparse.ArgumentParser) -> None:
    """``--log-level``, ``--log-file`` and ``-v`` on a server subcommand (set up by
    ``setup_logging``)."""
    p.add_argument("--log-level", type=_level, default=None, metavar="LEVEL",
                   help="lowest level logged: DEBUG, INFO (default), WARNING, ERROR, CRITICAL")
    p.add_argument("--log-file", metavar="PATH",
                   help="append log lines to PATH instead of stderr (reopened when a log "
                        "rotator moves it); the 'listening on' line still goes to stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging (--log-level DEBUG)")


def setup_logging(args: argparse.Namespace) -> logging.Handler:
    """The root logger's one handler, from ``add_logging_args``' options; returns it."""
    level = args.log_level or ("DEBUG" if args.verbose else "INFO")
    handler: logging.Handler
    if args.log_file:
        try:
            # WatchedFileHandler: logrotate's move-and-create needs no signal to the server
            handler = logging.handlers.WatchedFileHandler(args.log_file, encoding="utf-8")
        except OSError as e:
            raise CommandError(f"--log-file {args.log_file}: {e.strerror or e}") from None
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def _run(coro) -> None:
    """Run the server on uvloop when it is installed (the event loop is the server's hot path;
    ``pip install 'rocketstore[server]'``), else on asyncio's loop, and log which."""
    from rocketstore.remoting.server import loop_name, new_event_loop
    loop = new_event_loop()
    logging.getLogger("rocketstore.server").info("event loop: %s", loop_name(loop))
    try:
        loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _announce(line: str) -> None:
    """Write ``line`` to stderr in one write: ``print`` writes the text and the newline
    separately, so a thread logging to stderr meanwhile (the NameServer registration) could
    land inside the ready line that scripts parse the address from."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


async def _serve(server, ready_line: str, beside=None) -> None:
    """Run ``server`` until SIGTERM/SIGINT; ``beside`` (a ``LocalProxy``) starts after it
    and stops before it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    line = ready_line.format(addr=server.addr)
    _announce(line)
    if not any(isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is sys.stderr
               for h in logging.getLogger().handlers):
        logging.getLogger("rocketstore.cli").info("%s", line)     # the log file has it too
    try:
        if beside is not None:
            try:
                await asyncio.to_thread(beside.start)
            except OSError as e:
                raise CommandError(f"grpcServerPort: cannot listen on {beside.addr}: "
                                   f"{e.strerror or e}") from None
            _announce(f"rocketstore proxy: listening on {beside.addr}")
        await stop.wait()
    finally:
        if beside is not None:
            await asyncio.to_thread(beside.stop)
        await server.stop()


def _namesrv(args: argparse.Namespace) -> int:
    from rocketstore.namesrv import NameServer
    host, port = parse_listen(args.listen, 9876)
    setup_logging(args)
    kv = args.kv_config or os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json")
    if args.broker_expire <= 0 or args.scan_interval <= 0:
        raise CommandError(f"--broker-expire {args.broker_expire} / --scan-interval "
                           f"{args.scan_interval}: expected seconds > 0")
    server = NameServer(host, port, kv_config_path=kv,
                        order_message_enable=args.order_message_enable,
                        broker_expire_s=args.broker_expire, scan_interval_s=args.scan_interval,
                        config=namesrv_config(args.config))
    try:
        _run(_serve(server, "rocketstore namesrv: listening on {addr}"))
    except OSError as e:
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return 0


def namesrv_config(path: str | None):
    """A ``NamesrvConfig`` from a namesrv.properties file (camelCase keys; others are logged
    and ignored), its defaults without one."""
    import dataclasses

    from rocketstore.errors import InvalidConfigError
    from rocketstore.namesrv.config import NamesrvConfig
    if not path:
        return NamesrvConfig()
    names = {f.name for f in dataclasses.fields(NamesrvConfig)}
    defaults = NamesrvConfig()
    kw: dict[str, object] = {}
    for key, value in read_properties(path).items():
        name = _snake(key)
        if name in names:
            kw[name] = _typed(value, getattr(defaults, name), key)
        else:
            logging.getLogger("rocketstore.namesrv").warning("%s: %s is not used", path, key)
    try:
        return NamesrvConfig(**kw)  # type: ignore[arg-type]
    except InvalidConfigError as e:
        raise CommandError(f"{path}: {e}") from None


def register(sub) -> None:
    p = sub.add_parser("namesrv", help="run a RocketMQ NameServer (foreground; SIGTERM stops it)",
                       description="Run a NameServer on RocketMQ's wire protocol: brokers "
                                   "register, clients look up topic routes.")
    p.add_argument("--listen", default="127.0.0.1:9876", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9876; port 0 picks one)")
    p.add_argument("--kv-config", metavar="PATH",
                   help="KV config file (default ~/namesrv/kvConfig.json, as RocketMQ)")
    p.add_argument("--order-message-enable", action="store_true",
                   help="serve ORDER_TOPIC_CONFIG as routes' orderTopicConf (RocketMQ's "
                        "orderMessageEnable)")
    p.add_argument("--broker-expire", type=float, default=120.0, metavar="SECONDS",
                   help="drop a broker not registered for this long (default 120, RocketMQ's; "
                        "a broker whose connection closes is dropped at once)")
    p.add_argument("--scan-interval", type=float, default=10.0, metavar="SECONDS",
                   help="how often to look for expired brokers (default 10)")
    p.add_argument("-c", "--config", metavar="FILE",
                   help="namesrv.properties: thread pools, queue capacities and connection "
                        "limits (docs/protocol.md \"Limits\")")
    add_logging_args(p)
    p.set_defaults(func=_namesrv)


# -- rocketstore broker --------------------------------------------------------------------

def read_properties(path: str) -> dict[str, str]:
    """A Java ``.properties`` file (RocketMQ's broker.conf): ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comments; a trailing backslash continues the line."""
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CommandError(f"-c {path}: {e.strerror}") from None
    logical: list[str] = []
    buf = ""
    for raw in lines:
        line = raw.strip() if not buf else raw.lstrip()
        if not buf and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1]
            continue
        logical.append(buf + line)
        buf = ""
    if buf:
        logical.append(buf)
    for line in logical:
        for i, ch in enumerate(line):
            if ch in "=: \t":
                key, rest = line[:i], line[i:].lstrip()
                if rest[:1] in ("=", ":"):
                    rest = rest[1:].lstrip()
                break
        else:
            key, rest = line, ""
        out[key] = rest
    return out


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or
                                   (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out).replace("i_p1", "ip1").replace("i_p2", "ip2")


def _typed(value: str, current: object, key: str) -> object:
    if isinstance(current, bool):
        if value.lower() not in ("true", "false"):
            raise CommandError(f"broker.conf {key}={value!r}: expected true or false")
        return value.lower() == "true"
    if isinstance(current, int):
        try:
            return int(value)
        except ValueError:
            raise CommandError(f"broker.conf {key}={value!r}: expected an integer") from None
    return value


def broker_configs(args: argparse.Namespace):
    """(store dir, BrokerConfig, StoreConfig, NameServer addresses) from the conf file and the
    command line (the command line wins)."""
    import dataclasses

    from rocketstore.broker.config import BrokerConfig
    from rocketstore.store.config import StoreConfig
    props = read_properties(args.config) if args.config else {}
    bkw: dict[str, object] = {}
    skw: dict[str, object] = {}
    bdefaults, sdefaults = BrokerConfig(), StoreConfig()
    bnames = {f.name for f in dataclasses.fields(BrokerConfig)}
    snames = {f.name for f in dataclasses.fields(StoreConfig)}
    namesrv = props.pop("namesrvAddr", "")
    root = props.pop("storePathRootDir", None)
    for key, value in props.items():
        name = _snake(key)
        if name in bnames:
            bkw[name] = _typed(value, getattr(bdefaults, name), key)
        elif name in snames:
            skw[name] = _typed(value, getattr(sdefaults, name), key)
        else:
            logging.getLogger("rocketstore.broker").warning("broker.conf: %s is not used", key)
    store_dir = args.store_dir or root
    if not store_dir:
        raise CommandError("give STORE_DIR or storePathRootDir in the -c file")
    if args.listen:
        host, port = parse_listen(args.listen, 10911)
        bkw.update(broker_ip1=host, listen_port=port)
    if args.broker_name:
        bkw["broker_name"] = args.broker_name
    if args.cluster:
        bkw["broker_cluster_name"] = args.cluster
    if args.namesrv is not None:
        namesrv = args.namesrv
    skw["store_path_root_dir"] = store_dir
    return (store_dir, BrokerConfig(**bkw), StoreConfig(**skw),  # type: ignore[arg-type]
            [a.strip() for a in namesrv.split(";") if a.strip()])


def _broker(args: argparse.Namespace) -> int:
    from rocketstore.errors import AclConfigError
    from rocketstore.remoting.broker_server import BrokerServer
    setup_logging(args)
    store_dir, bc, sc, namesrv = broker_configs(args)
    server = BrokerServer(store_dir, bc, sc, namesrv_addrs=namesrv, host=bc.broker_ip1,
                          register_period_ms=bc.register_name_server_period)
    local = _local_proxy(bc, store_dir, namesrv) if bc.grpc_server_port else None
    try:
        _run(_serve(server, "rocketstore broker: listening on {addr}", local))
    except AclConfigError as e:
        raise CommandError(f"aclEnable=true but the ACL file is not usable: {e}") from None
    except OSError as e:
        raise CommandError(f"cannot listen on {bc.broker_ip1}:{bc.listen_port} and "
                           f"{bc.listen_port - 2}: {e.strerror or e}") from None
    return 0


def _local_proxy(bc, store_dir: str, namesrv: list[str]):
    """``grpcServerPort``: RocketMQ 5's proxy in the broker process (local mode)."""
    try:
        from rocketstore.proxy.limits import CONF_KEYS, ProxyLimits
        from rocketstore.proxy.local import LocalProxy
        from rocketstore.proxy.service import ProxyConfig
    except ImportError as e:
        raise CommandError(f"grpcServerPort needs grpcio and protobuf (pip install "
                           f"'rocketstore[grpc]'): {e}") from None
    if not namesrv:
        raise CommandError("grpcServerPort needs namesrvAddr (--namesrv): the proxy finds the "
                           "broker's topics through the NameServer")
    acl_file = access_key = secret_key = security_token = None
    if bc.acl_enable:
        # the broker's own ACL file checks the 5.x clients, as the wire checks 4.x ones; the
        # proxy reaches the broker through its ACL too, so it signs as the broker's inner client
        creds = bc.inner_credentials
        if creds is None:
            raise CommandError("grpcServerPort with aclEnable=true needs "
                               "innerClientAuthenticationCredentials: the in-broker proxy signs "
                               "its requests to the broker with them (docs/grpc.md)")
        acl_file = bc.acl_path(store_dir)
        access_key, secret_key = creds.access_key, creds.secret_key
        security_token = creds.security_token
    limits = ProxyLimits(**{name: getattr(bc, "grpc_" + _snake(key[4:]))
                            for name, key in CONF_KEYS.items()})
    try:
        cfg = ProxyConfig(";".join(namesrv), os.path.join(store_dir, "proxy"),
                          acl_file=acl_file, access_key=access_key, secret_key=secret_key,
                          security_token=security_token, limits=limits,
                          auth_client_zones=bc.grpc_auth_client_zones)
    except ValueError as e:
        raise CommandError(f"grpcAuthClientZones: {e}") from None
    return LocalProxy(bc.broker_ip1, bc.grpc_server_port, cfg)


def register_broker(sub) -> None:
    p = sub.add_parser("broker", help="run a RocketMQ broker on a store directory (foreground)",
                       description="Serve a store directory as a RocketMQ broker: RocketMQ "
                                   "clients send and consume over its wire protocol. Listens on "
                                   "the port and on port - 2 (RocketMQ's VIP channel); SIGTERM "
                                   "or SIGINT stop it cleanly (offsets persisted, store closed).")
    p.add_argument("store_dir", nargs="?", metavar="STORE_DIR",
                   help="the store directory (or storePathRootDir in the -c file)")
    p.add_argument("--namesrv", metavar="ADDR[;ADDR]",
                   help="NameServer address(es) to register with, e.g. 127.0.0.1:9876")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:10911; port 0 picks a free pair)")
    p.add_argument("--broker-name", help="brokerName (default broker-a)")
    p.add_argument("--cluster", help="brokerClusterName (default DefaultCluster)")
    p.add_argument("-c", "--config", metavar="broker.conf",
                   help="RocketMQ broker properties file (brokerName, listenPort, namesrvAddr, "
                        "storePathRootDir, flushDiskType, ...)")
    add_logging_args(p)
    p.set_defaults(func=_broker)


# -- rocketstore proxy ---------------------------------------------------------------------

def _proxy(args: argparse.Namespace) -> int:
    try:
        from rocketstore.proxy.limits import limits_from
        from rocketstore.proxy.server import ProxyServer
        from rocketstore.proxy.service import ProxyConfig
    except ImportError as e:
        raise CommandError(f"the proxy needs grpcio and protobuf (pip install "
                           f"'rocketstore[grpc]'): {e}") from None
    host, port = parse_listen(args.listen, 8081)
    setup_logging(args)
    attempts: dict[str, int] = {}
    for item in args.group_max_attempts or ():
        group, sep, n = item.rpartition("=")
        if not sep or not group or not n.isdigit() or int(n) < 1:
            raise CommandError(f"--group-max-attempts {item!r}: expected GROUP=N with N >= 1")
        attempts[group] = int(n)
    data_dir = args.data_dir or os.path.join(os.path.expanduser("~"), "rocketstore-proxy")
    types: dict[str, str] = {}
    for item in args.message_type or ():
        topic, sep, kind = item.rpartition("=")
        if not sep or not topic or kind not in ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"):
            raise CommandError(f"--message-type {item!r}: expected TOPIC=TYPE, TYPE one of "
                               "NORMAL FIFO DELAY TRANSACTION MIXED (TOPIC * for the default)")
        types[topic] = kind
    default_type = types.pop("*", "NORMAL")
    if bool(args.access_key) != bool(args.secret_key):
        raise CommandError("give both --access-key and --secret-key, or neither")
    if args.security_token is not None and not args.access_key:
        raise CommandError("--security-token goes with --access-key and --secret-key")
    given: dict[str, int] = {}
    for item in args.limit or ():
        key, sep, n = item.partition("=")
        if not sep or not n.isdigit():
            raise CommandError(f"--limit {item!r}: expected NAME=N, e.g. grpcMaxClients=10000")
        given[key] = int(n)
    try:
        limits = limits_from(given)
    except ValueError as e:
        raise CommandError(f"--limit: {e}") from None
    try:
        cfg = ProxyConfig(args.namesrv, data_dir, fifo_groups=frozenset(args.fifo_group or ()),
                          max_attempts=attempts, acl_file=args.acl_file,
                          access_key=args.access_key, secret_key=args.secret_key,
                          security_token=args.security_token, message_types=types,
                          default_message_type=default_type, limits=limits,
                          auth_client_zones=args.auth_client_zones)
    except ValueError as e:
        raise CommandError(f"--auth-client-zones: {e}") from None
    server = ProxyServer(host, port, cfg)

    async def main() -> None:
        await _serve(server, "rocketstore proxy: listening on {addr}")
    try:
        asyncio.run(main())             # grpc.aio runs on asyncio's own loop
    except OSError as e:
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return 0


def register_proxy(sub) -> None:
    p = sub.add_parser("proxy", help="serve RocketMQ 5.x (gRPC) clients in front of brokers",
                       description="RocketMQ 5's proxy in cluster mode: 5.x clients "
                                   "(rocketmq-python-client, the Java 5 client) speak gRPC to "
                                   "it; it reaches the brokers of the NameServer over "
                                   "RocketMQ's remoting protocol. See docs/grpc.md.")
    p.add_argument("--namesrv", required=True, metavar="ADDR[;ADDR]",
                   help="NameServer address(es), e.g. 127.0.0.1:9876")
    p.add_argument("--listen", default="127.0.0.1:8081", metavar="HOST:PORT",
                   help="gRPC address (default 127.0.0.1:8081; port 0 picks one)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="where the simple-consumption state lives (default ~/rocketstore-proxy)")
    p.add_argument("--fifo-group", action="append", metavar="GROUP",
                   help="a consumer group that consumes in order (RocketMQ 5's "
                        "consumeMessageOrderly); repeatable")
    p.add_argument("--group-max-attempts", action="append", metavar="GROUP=N",
                   help="deliveries before a group's message goes to %%DLQ%%GROUP (default 17: "
                        "retryMaxTimes 16 + 1); repeatable")
    p.add_argument("--message-type", action="append", metavar="TOPIC=TYPE",
                   help="override a topic's RocketMQ 5 message.type (NORMAL, FIFO, DELAY, "
                        "TRANSACTION or MIXED; the broker's topic attribute otherwise, set with "
                        "admin updateTopic -a +message.type=T); '*=T' for topics without one "
                        "(default NORMAL, as RocketMQ); repeatable")
    p.add_argument("--acl-file", metavar="plain_acl.yml",
                   help="authenticate 5.x clients (MQv2-HMAC-SHA1) and check their topic and "
                        "group permissions against this plain ACL file (docs/acl.md)")
    p.add_argument("--auth-client-zones", metavar="ZONES", default="any",
                   help="with --acl-file: the zones clients sign their x-mq-date-time in (the "
                        "5.x clients sign local time): any (default), or e.g. UTC,+08:00; a "
                        "date further than grpcAuthMaxSkewSeconds from now in all of them is "
                        "refused (docs/grpc.md)")
    p.add_argument("--access-key", help="sign the proxy's requests to brokers with ACL on")
    p.add_argument("--secret-key", help="the secret key of --access-key")
    p.add_argument("--security-token", help="a security token sent with --access-key's "
                                            "signature (SecurityToken)")
    p.add_argument("--limit", action="append", metavar="NAME=N",
                   help="a bound on what clients make the proxy hold, by its broker.conf name "
                        "(grpcMaxClients, grpcMaxTopicsPerClient, grpcMaxGroups, "
                        "grpcMaxSubscriptionsPerGroup, grpcGroupIdleMillis, grpcRouteCacheMax, "
                        "grpcMaxPendingDelayMessages, grpcMaxPollingReceives, "
                        "grpcMaxPollingReceivesPerConnection, grpcAuthMaxSkewSeconds; "
                        "docs/grpc.md \"Limits\"); "
                        "repeatable")
    add_logging_args(p)
    p.set_defaults(func=_proxy)
