"""``config/broker.properties``: the settings a store was written with, beside its data.

RocketMQ's broker keeps its effective configuration in a Java properties file
(``Configuration.persist``; by default ``~/store/config/broker.properties``, i.e. under the
default ``storePathRootDir``). rocketstore's broker writes the same file into its own store's
``config/`` at every start, so that tools reading the store later (``verify``, ``recover``,
``stat``) use the settings that shaped its files -- above all ``messageDelayLevel``, which
decides the consume-queue tags code (delivery time) of every delayed message.

Keys are RocketMQ's camelCase names (``messageDelayLevel``, ``brokerName``, ...), so the file
also serves as a ``broker.conf`` for ``rocketstore broker -c``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from rocketstore.store import paths

FILE_NAME = "broker.properties"


def properties_path(root: str) -> str:
    return os.path.join(paths.config_dir(root), FILE_NAME)


def camel(name: str) -> str:
    """``message_delay_level`` -> ``messageDelayLevel`` (``broker_ip1`` -> ``brokerIP1``)."""
    head, *rest = name.split("_")
    out = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return out.replace("Ip1", "IP1").replace("Ip2", "IP2")


def _escape(value: str) -> str:
    # Java properties: backslash escapes; leading blanks and line breaks must not be lost
    v = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + v if v[:1] in (" ", "\t") else v


def unescape(value: str) -> str:
    """A java.util.Properties value's escapes undone (``\\n``, ``\\t``, ``\\r``, ``\\x`` -> x)."""
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def write(root: str, *configs: Any) -> str:
    """Write every field of the dataclass ``configs`` (later ones win on a shared name) to
    ``root``/config/broker.properties, atomically; returns the path."""
    values: dict[str, str] = {}
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            v = getattr(cfg, f.name)
            if v is None or not isinstance(v, (str, int, float, bool)):
                continue
            values[camel(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
    path = properties_path(root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("# written by rocketstore's broker at start: the settings this store is "
                "written with\n")
        for k in sorted(values):
            f.write(f"{k}={_escape(values[k])}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read(root: str) -> dict[str, str]:
    """``root``/config/broker.properties as a dict (empty when there is no such file).
    Handles the forms RocketMQ writes and a person edits: ``k=v``, ``k: v``, comments."""
    try:
        with open(properties_path(root), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[str, str] = {}
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = unescape(line[i + 1:].strip())
                break
    return out


def recorded_delay_levels(root: str) -> str | None:
    """The ``messageDelayLevel`` the store at ``root`` was written with, or None when it
    does not say (a store of a plain ``MessageStore``, or of a RocketMQ broker whose config
    file lives elsewhere)."""
    value = read(root).get("messageDelayLevel")
    return value.strip() if value and value.strip() else None
