"""``rocketstore namesrv``: run a NameServer in the foreground until SIGTERM or SIGINT."""
from __future__ import annotations

import argparse
import asyncio
import logging
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


def _logging(verbose: bool) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _serve(server, ready_line: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    print(ready_line.format(addr=server.addr), file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def _namesrv(args: argparse.Namespace) -> int:
    from rocketstore.namesrv import NameServer
    host, port = parse_listen(args.listen, 9876)
    _logging(args.verbose)
    kv = args.kv_config or os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json")
    server = NameServer(host, port, kv_config_path=kv,
                        order_message_enable=args.order_message_enable)
    try:
        asyncio.run(_serve(server, "rocketstore namesrv: listening on {addr}"))
    except OSError as e:
        raise CommandError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return 0


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
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=_namesrv)
