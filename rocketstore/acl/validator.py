"""The broker's plain ACL check (RocketMQ 4.x ``PlainAccessValidator``) and its file watcher.

``parse_request`` finds what a request touches and with which permission:

==============================  ====================================================
request                         needs
==============================  ====================================================
SEND_MESSAGE(_V2), SEND_BATCH   PUB on the topic; a send to ``%RETRY%g`` needs SUB on
                                group g instead
CONSUMER_SEND_MSG_BACK          SUB on the group
PULL_MESSAGE                    SUB on the topic and on the consumer group
QUERY_MESSAGE                   SUB on the topic
HEART_BEAT                      SUB on every consumer group and subscribed topic
UNREGISTER_CLIENT               SUB on the consumer group
GET_CONSUMER_LIST_BY_GROUP      SUB on the consumer group
UPDATE_CONSUMER_OFFSET          SUB on the topic and on the consumer group
topic/group create and delete,  an ``admin: true`` account
UPDATE_BROKER_CONFIG
anything else                   a valid signature only
==============================  ====================================================

``PlainAccessValidator.validate`` then decides, in RocketMQ's order: a host in
``globalWhiteRemoteAddresses`` passes; a request without ``AccessKey`` or with an unknown one
is refused; a host in the account's ``whiteRemoteAddress`` passes; a wrong signature is
refused; a PUB to the trace topic passes; then an admin-only code needs ``admin``, and every
resource needs its permission (the account's own for listed resources, else its default for
topics or groups; an admin account that lists no resources may touch all).

The validator re-reads the file when it changes (a thread polls its modification time, size
and inode every ``watch_interval`` seconds); a file that fails to parse is logged and the
previous rules stay in force.
"""
from __future__ import annotations

import dataclasses
import hmac
import logging
import os
import threading
from collections.abc import Mapping

from rocketstore.acl import permission
from rocketstore.acl.address import host_of
from rocketstore.acl.config import PlainAccount, PlainAclConfig, load_plain_acl
from rocketstore.acl.signature import (ACCESS_KEY, SECURITY_TOKEN, SIGNATURE,
                                       UNIQUE_MSG_QUERY_FLAG, calc_signature,
                                       combine_request_content)
from rocketstore.errors import AccessDeniedError, AclConfigError
from rocketstore.remoting import fastjson
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand

log = logging.getLogger("rocketstore.acl")

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
WATCH_INTERVAL_S = 0.5
_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})

R = RequestCode
_SEND_BATCH = int(R.SEND_BATCH_MESSAGE)


@dataclasses.dataclass
class AccessRequest:
    """What one request asks for (RocketMQ's ``PlainAccessResource`` of a request)."""

    code: int
    remote_host: str
    access_key: str | None = None
    signature: str | None = None
    security_token: str | None = None
    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    content: bytes = b""

    def need(self, resource: str | None, perm: int) -> None:
        if resource is not None:
            self.resources[resource] = perm


def _group(name: str | None) -> str | None:
    return None if name is None else permission.retry_topic(name)


def parse_request(cmd: RemotingCommand, remote_addr: str) -> AccessRequest:
    """The access key, signature, signed content and needed permissions of ``cmd``."""
    req = AccessRequest(int(cmd.code), host_of(remote_addr))
    ext = cmd.ext_fields
    req.access_key = ext.get(ACCESS_KEY)
    req.signature = ext.get(SIGNATURE)
    req.security_token = ext.get(SECURITY_TOKEN)
    code = req.code
    if code == R.SEND_MESSAGE or code == R.SEND_MESSAGE_V2 or code == _SEND_BATCH:
        v2 = code != R.SEND_MESSAGE
        topic = ext.get("b" if v2 else "topic")
        if topic is not None and permission.is_group_resource(topic):
            req.need(_group(ext.get("a" if v2 else "producerGroup")), permission.SUB)
        else:
            req.need(topic, permission.PUB)
    elif code == R.CONSUMER_SEND_MSG_BACK:
        req.need(_group(ext.get("group")), permission.SUB)
    elif code == R.PULL_MESSAGE:
        req.need(ext.get("topic"), permission.SUB)
        req.need(_group(ext.get("consumerGroup")), permission.SUB)
    elif code == 12:      # QUERY_MESSAGE
        req.need(ext.get("topic"), permission.SUB)
    elif code == R.HEART_BEAT:
        _heartbeat_resources(cmd, req)
    elif code in (R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP):
        req.need(_group(ext.get("consumerGroup")), permission.SUB)
    elif code == R.UPDATE_CONSUMER_OFFSET:
        req.need(_group(ext.get("consumerGroup")), permission.SUB)
        req.need(ext.get("topic"), permission.SUB)
    req.content = combine_request_content(ext, cmd.body, skip=_UNSIGNED)
    return req


def _heartbeat_resources(cmd: RemotingCommand, req: AccessRequest) -> None:
    try:
        doc = fastjson.loads(bytes(cmd.body)) if cmd.body else {}
    except ValueError as e:
        raise AccessDeniedError(req.access_key, f"heartbeat body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        return
    for consumer in doc.get("consumerDataSet") or ():
        if not isinstance(consumer, dict):
            continue
        name = consumer.get("groupName")
        req.need(_group(None if name is None else str(name)), permission.SUB)
        for sub in consumer.get("subscriptionDataSet") or ():
            if isinstance(sub, dict) and sub.get("topic") is not None:
                req.need(str(sub["topic"]), permission.SUB)


def check_request(config: PlainAclConfig, req: AccessRequest) -> None:
    """Raise ``AccessDeniedError`` unless ``config`` lets ``req`` through."""
    host = req.remote_host
    if any(m(host) for m in config.global_white):
        return
    ak = req.access_key
    if ak is None:
        raise AccessDeniedError(None, f"No accessKey is configured (request code {req.code} "
                                      f"from {host} is not signed)")
    acct = config.accounts.get(ak)
    if acct is None:
        raise AccessDeniedError(ak, f"No acl config for accessKey={ak}")
    if acct.white(host):
        return
    expected = calc_signature(req.content, acct.secret_key)
    if req.signature is None or not hmac.compare_digest(expected, req.signature):
        raise AccessDeniedError(ak, f"Check signature failed for accessKey={ak}")
    if req.resources.get(TRACE_TOPIC) == permission.PUB:
        return
    _check_perms(acct, req)


def _check_perms(acct: PlainAccount, req: AccessRequest) -> None:
    ak = acct.access_key
    if permission.needs_admin(req.code) and not acct.admin:
        raise AccessDeniedError(ak, f"Need admin permission for request code={req.code}, "
                                    f"but accessKey={ak} is not")
    if not req.resources or (not acct.resource_perms and acct.admin):
        return
    owned_map: Mapping[str, int] = acct.resource_perms
    for resource, needed in req.resources.items():
        is_group = permission.is_group_resource(resource)
        owned = owned_map.get(resource)
        kind = "permission"
        if owned is None:
            owned = acct.default_group_perm if is_group else acct.default_topic_perm
            kind = "default permission"
        if not permission.check_permission(needed, owned):
            raise AccessDeniedError(
                ak, f"No {kind} for {permission.describe_resource(resource)}: accessKey={ak} "
                    f"has {permission.perm_name(owned)}, the request needs "
                    f"{permission.perm_name(needed)}")


class PlainAccessValidator:
    """Plain ACL over one ``plain_acl.yml``, re-read when the file changes.

    ``check(cmd, remote_addr)`` returns None to let a request through, else the reason to
    answer NO_PERMISSION with. ``close()`` stops the watcher thread.
    """

    def __init__(self, path: str, *, watch: bool = True,
                 watch_interval: float = WATCH_INTERVAL_S) -> None:
        if watch_interval <= 0:
            raise AclConfigError(path, "watch_interval", watch_interval, "must be positive")
        self.path = os.path.abspath(path)
        self.watch_interval = watch_interval
        self.reloads = 0             # successful re-reads after the first (tests, logs)
        self._stamp = self._file_stamp()
        self.config = self._initial_load()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if watch:
            self._thread = threading.Thread(target=self._watch, name="rocketstore-acl-watch",
                                            daemon=True)
            self._thread.start()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _initial_load(self) -> PlainAclConfig:
        if self._stamp is None:
            log.warning("ACL file %s does not exist: every request not white-listed is "
                        "refused until it is written", self.path)
            return PlainAclConfig.empty()
        config = load_plain_acl(self.path)
        log.info("ACL: %d account(s), %d global white address pattern(s) from %s",
                 len(config.accounts), len(config.global_white), self.path)
        return config

    def reload(self) -> bool:
        """Re-read the file now; False (and the old rules kept) when it cannot be used."""
        try:
            config = load_plain_acl(self.path)
        except FileNotFoundError:
            log.warning("ACL file %s disappeared; keeping the rules read before", self.path)
            return False
        except (OSError, AclConfigError) as e:
            log.error("ACL file %s not reloaded, keeping the rules read before: %s",
                      self.path, e)
            return False
        self.config = config        # one reference swap: requests see old or new, never half
        self.reloads += 1
        log.info("ACL reloaded from %s: %d account(s)", self.path, len(config.accounts))
        return True

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_interval):
            stamp = self._file_stamp()
            if stamp is None or stamp == self._stamp:
                continue
            self._stamp = stamp
            self.reload()

    def validate(self, cmd: RemotingCommand, remote_addr: str) -> None:
        """Raise ``AccessDeniedError`` unless the request may go through."""
        check_request(self.config, parse_request(cmd, remote_addr))

    def check(self, cmd: RemotingCommand, remote_addr: str) -> str | None:
        """None when the request may go through, else why not (logged)."""
        try:
            self.validate(cmd, remote_addr)
        except AccessDeniedError as e:
            log.info("ACL refused request code %s from %s: %s", cmd.code, remote_addr, e)
            return str(e)
        return None

    def close(self) -> None:
        """Stop watching the file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "PlainAccessValidator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
