"""Subscription groups: RocketMQ's ``SubscriptionGroupManager`` and ``config/subscriptionGroup.json``.

The file is ``{"dataVersion":{"counter":N,"timestamp":ms},"subscriptionGroupTable":{"<group>":
{...}}}`` in fastjson's pretty layout (MESSAGING.md 12.3), written atomically with a ``.bak`` by
the store's ``ConfigFile``. The groups 4.9.8 pre-creates at start live in memory and reach the
file with the first change; a group is auto-created by a heartbeat, pull or send-back naming it
when ``auto_create_subscription_group`` (and always for ``CID_RMQ_SYS_*`` groups). An
auto-created group is written by the background writer (``persist_later``, never on the
event loop); ``update``/``delete`` (admin calls) are on disk when they return.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

from rocketstore.common.constants import SYS_GROUP_PREFIX
from rocketstore.store.topics import (MAX_QUEUE_NUMS, DataVersion, VersionedConfigTable,
                                     _version_from_bean)

log = logging.getLogger("rocketstore.broker.subscription")

SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"

# SubscriptionGroupManager.init(): created in memory at every start
PRECREATED_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                     "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                     "CID_ONSAPI_OWNER")

_BEAN = {"brokerId": "broker_id", "consumeBroadcastEnable": "consume_broadcast_enable",
         "consumeEnable": "consume_enable", "consumeFromMinEnable": "consume_from_min_enable",
         "groupName": "group_name",
         "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable",
         "retryMaxTimes": "retry_max_times", "retryQueueNums": "retry_queue_nums",
         "whichBrokerWhenConsumeSlowly": "which_broker_when_consume_slowly"}


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """One consumer group's broker-side settings (``SubscriptionGroupConfig``, 4.9.8 defaults)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.group_name, str) or not self.group_name:
            raise ValueError("SubscriptionGroupConfig.group_name must be a non-empty str")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type == "bool" and not isinstance(v, bool):
                raise TypeError(f"SubscriptionGroupConfig.{f.name} must be a bool, got {v!r}")
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"SubscriptionGroupConfig.{f.name} must be an int, got {v!r}")


def _to_bean(c: SubscriptionGroupConfig) -> dict[str, Any]:
    return {prop: getattr(c, name) for prop, name in _BEAN.items()}


def _from_bean(name: str, bean: Any) -> SubscriptionGroupConfig:
    if not isinstance(bean, dict):
        raise ValueError(f"subscriptionGroupTable[{name!r}] is not an object")
    kw = {field: bean[prop] for prop, field in _BEAN.items() if prop in bean}
    kw.setdefault("group_name", name)
    try:
        return SubscriptionGroupConfig(**kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"subscriptionGroupTable[{name!r}]: {e}") from e


def from_bean(name: str, bean: Any) -> SubscriptionGroupConfig:
    """A ``SubscriptionGroupConfig`` from its fastjson form (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's
    body); absent fields take 4.9.8's defaults, a field of the wrong type raises ValueError,
    and so does a ``retryQueueNums`` no topic may have (the group's %RETRY% topic gets that
    many queues at the next heartbeat: out of 0..65,535 every heartbeat would fail)."""
    config = _from_bean(name, bean)
    if not 0 <= config.retry_queue_nums <= MAX_QUEUE_NUMS:
        raise ValueError(f"subscriptionGroupTable[{name!r}]: retryQueueNums="
                         f"{config.retry_queue_nums} is out of range 0..{MAX_QUEUE_NUMS}")
    return config


def _decode(doc: Any) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    if not isinstance(doc, dict):
        raise ValueError("top level is not an object")
    raw = doc.get("subscriptionGroupTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("subscriptionGroupTable is not an object")
    return ({n: _from_bean(n, b) for n, b in raw.items()},
            _version_from_bean(doc.get("dataVersion")))


class SubscriptionGroupManager(VersionedConfigTable):
    """Subscription group configs by name, persisted to ``subscriptionGroup.json`` on change."""

    def __init__(self, config_dir: str | os.PathLike[str], auto_create: bool = True,
                 auto_create_max: int = 20_000) -> None:
        """``auto_create_max``: nothing is auto-created once the table holds this many groups
        (however they were made), so clients cannot grow it without bound."""
        super().__init__(os.path.join(os.fspath(config_dir), SUBSCRIPTION_GROUP_FILE))
        self.auto_create = auto_create
        self.auto_create_max = auto_create_max
        self._table: dict[str, SubscriptionGroupConfig] = {
            g: SubscriptionGroupConfig(g) for g in PRECREATED_GROUPS}

    def load(self) -> bool:
        """Merge the file's groups over the pre-created ones (the file wins).

        Neither the file nor ``.bak`` readable: the broker starts with the pre-created
        groups, the others come back when their consumers next send a heartbeat
        (``autoCreateSubscriptionGroup``), and the reset is reported (ERROR log,
        ``configfile.resets``); the damaged file is kept as ``.damaged``."""
        with self._lock:
            decoded = self._file.load_or_reset(
                _decode, "started with the pre-created groups; the others are re-created on "
                         "their consumers' next heartbeat" if self.auto_create else
                         "started with the pre-created groups; autoCreateSubscriptionGroup is "
                         "off: re-create the others (updateSubGroup)")
            if decoded is not None:
                table, self._data_version = decoded
                self._table.update(table)
                return True
            reset = self._file.was_reset
        if reset:
            self.persist()      # a readable file again (the damaged one is kept aside)
        return False

    def _snapshot(self) -> Any:
        return {"dataVersion": self._version_bean(),
                "subscriptionGroupTable": {n: _to_bean(c) for n, c in self._table.items()}}

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        with self._lock:
            return self._table.get(group)

    def creatable(self, groups: set[str]) -> int:
        """How many of ``groups`` (none held) ``find`` may still auto-create, the bound
        permitting: ``len(groups)`` when all of them."""
        with self._lock:
            room = max(0, self.auto_create_max - len(self._table))
        may = [g for g in groups if self.auto_create or g.startswith(SYS_GROUP_PREFIX)]
        return len(groups) - len(may) + min(len(may), room)

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        with self._lock:
            return dict(self._table)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """``findSubscriptionGroupConfig``: the group's config, auto-created (and persisted)
        when allowed; None when the group is unknown and may not be created."""
        with self._lock:
            c = self._table.get(group)
            if c is not None:
                return c
            if not (self.auto_create or group.startswith(SYS_GROUP_PREFIX)):
                return None
            if len(self._table) >= self.auto_create_max:
                return None     # as auto-creation off; the heartbeat says why (Broker.heartbeat)
            c = SubscriptionGroupConfig(group)
            self._table[group] = c
            self._data_version = self._data_version.next_version()
        self.persist_later()
        log.info("auto-created subscription group %s", group)
        return c

    def update(self, config: SubscriptionGroupConfig) -> None:
        """``updateSubscriptionGroupConfig``: create or replace, bump the version, persist."""
        with self._lock:
            self._table[config.group_name] = config
            self._data_version = self._data_version.next_version()
        self.persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            if self._table.pop(group, None) is None:
                return False
            self._data_version = self._data_version.next_version()
        self.persist()
        return True
