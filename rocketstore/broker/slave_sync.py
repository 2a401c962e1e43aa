"""``SlaveSynchronize``: a SLAVE broker's copy of its master's metadata.

docs/replication.md, "Reads from slaves and metadata sync".

Every 10 s (the first time 3 s after start) a slave asks its master, one request after the
other, each with no header, no body and a 3 s timeout:

  GET_ALL_TOPIC_CONFIG (21)              on the master's VIP port (its port - 2)
  GET_ALL_CONSUMER_OFFSET (43)           on its port
  GET_ALL_DELAY_OFFSET (45)              on its port
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) on its port

and applies the answers as RocketMQ 4.9.8's slave does: the topic and subscription-group
tables are replaced whole (with the master's data version) when the master's version differs
from the slave's, and written to ``topics.json`` / ``subscriptionGroup.json``; consumer offsets
are merged per ``topic@group`` (an entry the master has replaces the slave's, the others stay)
and written to ``consumerOffset.json``; the delay offsets are written to ``delayOffset.json``
as the master's string (a slave does not deliver delayed messages; the file matters when it is
promoted). The master address is the ``masterAddr`` of the NameServer's answer to the slave's
last registration; without one (no master registered, or it is this broker) nothing is asked.
A failed request is logged and retried at the next round.

Against a master with ACL on, the requests are signed with the broker's
``innerClientAuthenticationCredentials`` (the server's outbound client signs them); a refusal
is logged with the master's remark and the setting to look at, once per round and table.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.broker.subscription_group import _from_bean as _group_from_bean
from rocketstore.common.protocol import ResponseCode
from rocketstore.store import paths
from rocketstore.store.configfile import ConfigFile
from rocketstore.store.topics import _config_from_bean, _version_from_bean

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker

log = logging.getLogger("rocketstore.broker.slave")

GET_ALL_TOPIC_CONFIG = 21
GET_ALL_CONSUMER_OFFSET = 43
GET_ALL_DELAY_OFFSET = 45
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
FIRST_DELAY_S = 3.0
PERIOD_S = 10.0
TIMEOUT_S = 3.0
DELAY_OFFSET_FILE = "delayOffset.json"

# (address, request code, timeout s) -> (response code, body, remark); raises on transport errors
Invoke = Callable[[str, int, float], "tuple[int, bytes, str]"]
_NAMES = {GET_ALL_TOPIC_CONFIG: "GET_ALL_TOPIC_CONFIG", GET_ALL_CONSUMER_OFFSET:
          "GET_ALL_CONSUMER_OFFSET", GET_ALL_DELAY_OFFSET: "GET_ALL_DELAY_OFFSET",
          GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"}
# what a master's plain ACL says when it refuses a request (docs/acl.md §3)
_ACL_WORDS = ("AclException", "accessKey", "Check signature failed")


def vip_address(addr: str) -> str:
    """``MixAll.brokerVIPChannel``: the same host, port - 2."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


def _loads(body: bytes) -> Any:
    from rocketstore.remoting import fastjson       # fastjson's unquoted integer keys
    return fastjson.loads(body)


class SlaveSynchronize:
    """Pulls the master's topics, offsets, delay offsets and groups into a slave broker."""

    def __init__(self, broker: Broker, invoke: Invoke, own_addr: str) -> None:
        self.broker = broker
        self.invoke = invoke
        self.own_addr = own_addr
        self.master_addr: str | None = None
        self.rounds = 0                 # completed sync rounds (all four tried)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="SlaveSynchronize", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        wait = FIRST_DELAY_S
        while not self._stop.wait(wait):
            wait = PERIOD_S
            try:
                self.sync_all()
            except Exception:  # noqa: BLE001 - the next round retries
                log.exception("slave synchronize failed")

    def sync_all(self) -> None:
        """One round: the four requests in RocketMQ's order, each failure logged alone."""
        for step in (self.sync_topic_config, self.sync_consumer_offset,
                     self.sync_delay_offset, self.sync_subscription_group_config):
            master = self.master_addr
            if not master or master == self.own_addr:
                return
            try:
                step(master)
            except Exception as e:  # noqa: BLE001 - one table failing must not stop the rest
                log.warning("slave sync %s from %s failed: %s", step.__name__, master, e)
        self.rounds += 1

    def _ask(self, addr: str, code: int) -> bytes | None:
        rc, body, remark = self.invoke(addr, code, TIMEOUT_S)
        if rc != ResponseCode.SUCCESS:
            hint = ""
            if any(w in remark for w in _ACL_WORDS):
                hint = (" (the master checks ACL: give this broker an account in "
                        "innerClientAuthenticationCredentials, docs/replication.md)")
            log.warning("master %s refused %s (%d) with code %d: %s%s", addr,
                        _NAMES.get(code, "request"), code, rc, remark, hint)
            return None
        return body or None

    def sync_topic_config(self, master: str) -> None:
        body = self._ask(vip_address(master), GET_ALL_TOPIC_CONFIG)
        if body is None:
            return
        doc = _loads(body)
        version = _version_from_bean(doc.get("dataVersion"))
        table = self.broker.store.topic_config_manager
        if _same_version(table.data_version, version):
            return
        topics = {str(n): _config_from_bean(str(n), b)
                  for n, b in (doc.get("topicConfigTable") or {}).items()}
        table.replace_all(topics, version)
        log.info("synced %d topic configs from master %s", len(topics), master)

    def sync_consumer_offset(self, master: str) -> None:
        body = self._ask(master, GET_ALL_CONSUMER_OFFSET)
        if body is None:
            return
        raw = _loads(body).get("offsetTable") or {}
        offsets = self.broker.store.consumer_offset_manager
        offsets.merge_table({str(k): {int(q): int(o) for q, o in v.items()}
                             for k, v in raw.items()})
        offsets.persist()

    def sync_delay_offset(self, master: str) -> None:
        body = self._ask(master, GET_ALL_DELAY_OFFSET)
        if body is None:
            return
        text = bytes(body).decode("utf-8")
        _loads(body)        # only a parsable answer replaces the file
        ConfigFile(os.path.join(paths.config_dir(self.broker.store.root),
                                DELAY_OFFSET_FILE)).persist_text(text)

    def sync_subscription_group_config(self, master: str) -> None:
        body = self._ask(master, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body is None:
            return
        doc = _loads(body)
        version = _version_from_bean(doc.get("dataVersion"))
        groups = self.broker.subscription_groups
        if _same_version(groups.data_version, version):
            return
        table = {str(n): _group_from_bean(str(n), b)
                 for n, b in (doc.get("subscriptionGroupTable") or {}).items()}
        groups.replace_all(table, version)
        log.info("synced %d subscription groups from master %s", len(table), master)


def _same_version(a: Any, b: Any) -> bool:
    """``DataVersion.equals`` of 4.9.8: same timestamp and same counter."""
    return a.timestamp == b.timestamp and a.counter == b.counter
