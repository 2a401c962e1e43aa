"""The broker's settings over the wire: GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25).

``config_text(broker)`` is what ``mqadmin getBrokerConfig`` prints: every ``BrokerConfig`` and
``StoreConfig`` setting under RocketMQ's camelCase name, one ``name=value`` line each (4.9.8's
``Configuration.getAllConfigsFormatString``).

``update(broker, properties)`` changes settings of a running broker. RocketMQ 4.9.8 accepts
any name except a short black list (``brokerConfigPath``, ``rocketmqHome``, ``configBlackList``)
and sets fields whose new value most of its services never read again. Here only the settings
in ``RUNTIME_SETTINGS`` change, the ones whose new value the broker acts on at once; paths,
ports, names and the store's geometry are refused (NO_PERMISSION, RocketMQ's code and words for
its black list, then which names may change). A request is applied whole or not at all. The
change lives until the broker stops, as on RocketMQ when its config file cannot be written:
put it in broker.conf to keep it.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any

from rocketstore.common.constants import PermName
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import InvalidConfigError, RocketStoreError
from rocketstore.store.brokerprops import camel
from rocketstore.store.topics import DataVersion

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker

log = logging.getLogger("rocketstore.broker.config")

# camelCase name -> BrokerConfig field: what may change while the broker runs
RUNTIME_SETTINGS: dict[str, str] = {camel(f): f for f in (
    "broker_permission", "reject_transaction_message", "start_accept_send_request_time_stamp",
    "auto_create_topic_enable", "auto_create_subscription_group", "long_polling_enable",
    "short_polling_time_mills", "notify_consumer_ids_changed_enable",
    "transaction_time_out", "transaction_check_max", "transaction_check_interval",
    "heartbeat_max_entries", "auto_create_subscription_group_max",
    "client_max_producer_groups", "auto_create_topic_max")}

_lock = threading.Lock()


def _settings(broker: Broker) -> dict[str, str]:
    values: dict[str, str] = {}
    for cfg in (broker.store_config, broker.config):     # BrokerConfig's wins on a shared name
        for f in dataclasses.fields(cfg):
            if not f.repr:
                continue            # a secret (inner_client_authentication_credentials)
            v = getattr(cfg, f.name)
            if f.name == "store_path_commit_log":
                v = broker.store_config.commit_log_path(broker.store.root)
            if v is None:
                v = ""              # a setting left to its default: named all the same
            if not isinstance(v, (str, int, float, bool)):
                continue
            values[camel(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
    return values


def version(broker: Broker) -> DataVersion:
    """The settings' data version (GET_BROKER_CONFIG's ``version`` header): bumped by each
    accepted update."""
    v = getattr(broker, "config_version", None)
    if v is None:
        v = broker.config_version = DataVersion()
    return v


def config_text(broker: Broker) -> str:
    """Every setting as ``name=value`` lines, sorted by name."""
    return "".join(f"{k}={v}\n" for k, v in sorted(_settings(broker).items()))


def _parse(name: str, field: str, text: str, current: Any) -> Any:
    if isinstance(current, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name}={text!r}: expected true or false")
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected an integer") from None


def update(broker: Broker, properties: dict[str, str]) -> tuple[int, str | None]:
    """Apply ``properties`` (camelCase names) to ``broker``: (response code, remark)."""
    known = _settings(broker)
    refused = sorted(n for n in properties if n in known and n not in RUNTIME_SETTINGS)
    if refused:
        return (ResponseCode.NO_PERMISSION,
                f"Can not update config in black list. {', '.join(refused)} cannot change while "
                f"the broker runs (set it in broker.conf and restart); changeable: "
                f"{', '.join(sorted(RUNTIME_SETTINGS))}")
    unknown = sorted(n for n in properties if n not in known)
    if unknown:
        return (ResponseCode.INVALID_PARAMETER,
                f"unknown broker setting(s): {', '.join(unknown)}; changeable: "
                f"{', '.join(sorted(RUNTIME_SETTINGS))}")
    if not properties:
        return ResponseCode.SUCCESS, None
    with _lock:
        changes: dict[str, Any] = {}
        try:
            for name, text in properties.items():
                field = RUNTIME_SETTINGS[name]
                changes[field] = _parse(name, field, text, getattr(broker.config, field))
            new = dataclasses.replace(broker.config, **changes)
        except InvalidConfigError as e:
            return ResponseCode.INVALID_PARAMETER, f"{camel(e.setting)}={e.value!r}: {e.reason}"
        except (ValueError, TypeError, RocketStoreError) as e:
            return ResponseCode.INVALID_PARAMETER, str(e)
        apply(broker, new)
        broker.config_version = version(broker).next_version()
    log.info("broker settings changed: %s", {camel(k): v for k, v in changes.items()})
    return ResponseCode.SUCCESS, None


def apply(broker: Broker, new: Any) -> None:
    """Make ``new`` (a ``BrokerConfig``) the broker's, telling each part that read the old one."""
    old = broker.config
    broker.config = new
    sp = broker.send_processor
    sp.cfg = new
    sp._broker_writable = bool(new.broker_permission & int(PermName.PERM_WRITE))
    broker.topic_manager.cfg = new
    broker.subscription_groups.auto_create = new.auto_create_subscription_group
    broker.subscription_groups.auto_create_max = new.auto_create_subscription_group_max
    broker.consumer_manager.notify_enabled = new.notify_consumer_ids_changed_enable
    broker.pull_processor.hold.check_interval = (
        new.long_polling_check_interval if new.long_polling_enable
        else new.short_polling_time_mills) / 1000.0
    tx = broker.transaction_service
    if tx is not None:
        tx.check_interval_ms = new.transaction_check_interval
        tx.timeout_ms = new.transaction_time_out
        tx.check_max = new.transaction_check_max
    if new.broker_permission != old.broker_permission:
        # as 4.9.8: a new topic data version, so the NameServers take the new perms now
        broker.store.topic_config_manager.touch()
