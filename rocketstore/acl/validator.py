"""The broker's plain ACL check (RocketMQ 4.x ``PlainAccessValidator``) and its file watcher.

The ACL checks the request the broker executes, not the raw header: ``BrokerProcessor``
first ``authenticate``s a request (access key, white addresses, signature over the raw
fields and body, admin-only codes), then decodes it once (``rocketstore.remoting.requests``)
and ``authorize``s the topics and groups that decoded request touches; the handler then
runs that same decoded object. What each code needs:

==============================  ====================================================
request                         needs
==============================  ====================================================
SEND_MESSAGE(_V2), SEND_BATCH   PUB on the topic; a send to ``%RETRY%g`` needs SUB on
                                group g instead
SEND_REPLY_MESSAGE(_V2)         PUB on the reply topic (a send)
CONSUMER_SEND_MSG_BACK          SUB on the group
PULL_MESSAGE                    SUB on the topic and on the consumer group
QUERY_MESSAGE                   SUB on the topic
HEART_BEAT                      SUB on every consumer group and subscribed topic
UNREGISTER_CLIENT               SUB on the consumer group
GET_CONSUMER_LIST_BY_GROUP      SUB on the consumer group
UPDATE_CONSUMER_OFFSET,         SUB on the topic and on the consumer group
INVOKE_BROKER_TO_RESET_OFFSET
LOCK_BATCH_MQ, UNLOCK_BATCH_MQ  SUB on the group and on every queue's topic
topic/group create and delete,  an ``admin: true`` account
UPDATE_BROKER_CONFIG
anything else                   a valid signature only
==============================  ====================================================

Decisions follow RocketMQ's order: a host in ``globalWhiteRemoteAddresses`` passes; a
request without ``AccessKey`` or with an unknown one is refused; a host in the account's
``whiteRemoteAddress`` passes; a wrong signature is refused; an admin-only code needs
``admin``; a send whose only need is PUB on the trace topic passes; then every resource needs
its permission (the account's own for listed resources, else its default for topics or
groups; an admin account that lists no resources may touch all).

The validator re-reads the file when it changes (a thread polls its modification time, size
and inode every ``watch_interval`` seconds, and reads a change once it has held for a whole
interval, so a file rewritten in place is never read half-written); a file that fails to
parse is logged and the previous rules stay in force.
"""
from __future__ import annotations

import dataclasses
import hmac
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rocketstore.acl import permission
from rocketstore.acl.address import host_of
from rocketstore.acl.config import PlainAccount, PlainAclConfig, load_plain_acl
from rocketstore.acl.signature import (ACCESS_KEY, SECURITY_TOKEN, SIGNATURE,
                                       UNIQUE_MSG_QUERY_FLAG, calc_signature,
                                       combine_request_content)
from rocketstore.errors import AccessDeniedError, AclConfigError
from rocketstore.common.codes import RequestCode

if TYPE_CHECKING:     # acl reads commands; it never imports the remoting package
    from rocketstore.remoting.command import RemotingCommand

log = logging.getLogger("rocketstore.acl")

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
WATCH_INTERVAL_S = 0.5
_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})

# 4.9.8 refuses by throwing an AclException from its RPC hook; the remoting layer answers
# SYSTEM_ERROR with the exception's toString and its top stack frame
# (RemotingHelper.exceptionSimpleDesc). Where each of its refusals is thrown:
_JAVA_FRAMES = {"validate": 664, "unknown_key": 668, "signature": 684, "admin": 581,
                "default_perm": 606, "perm": 611}


def rocketmq_text(message: str, where: str) -> str:
    """The remark a 4.9.8 broker answers an ACL refusal with (``message`` thrown ``where``)."""
    method = "validate" if where in ("validate", "unknown_key", "signature") else "checkPerm"
    return (f"org.apache.rocketmq.acl.common.AclException: {message}, "
            f"org.apache.rocketmq.acl.plain.PlainPermissionManager.{method}"
            f"(PlainPermissionManager.java:{_JAVA_FRAMES[where]})")

R = RequestCode
_SEND_CODES = frozenset({int(R.SEND_MESSAGE), int(R.SEND_MESSAGE_V2), int(R.SEND_BATCH_MESSAGE)})


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
    # set by authenticate: the account whose permissions apply; None when a white address
    # let the request through without any further check
    account: PlainAccount | None = None

    def need(self, resource: str | None, perm: int) -> None:
        if resource is not None and perm:
            self.resources[resource] = perm

    def need_touches(self, touches: Iterable[tuple[str, str, int]]) -> None:
        """The permissions of a decoded request's touches (``rocketstore.remoting.requests``):
        a group is checked under its retry topic, as RocketMQ does."""
        for kind, name, perm in touches:
            if perm:
                self.resources[permission.retry_topic(name) if kind == "group" else name] = perm


def access_request(cmd: RemotingCommand, remote_addr: str) -> AccessRequest:
    """The access key, signature and signed content of ``cmd`` (no resources yet)."""
    req = AccessRequest(int(cmd.code), host_of(remote_addr))
    ext = cmd.ext_fields
    req.access_key = ext.get(ACCESS_KEY)
    req.signature = ext.get(SIGNATURE)
    req.security_token = ext.get(SECURITY_TOKEN)
    req.content = combine_request_content(ext, cmd.body, skip=_UNSIGNED)
    return req


def parse_request(cmd: RemotingCommand, remote_addr: str,
                  touches: Iterable[tuple[str, str, int]] | None = None) -> AccessRequest:
    """The access key, signature, signed content and needed permissions of ``cmd``.
    ``touches`` are those of the decoded request; without them ``cmd`` is decoded here, by the
    broker's own decoder (a malformed request raises ``RemotingProtocolError``)."""
    req = access_request(cmd, remote_addr)
    if touches is None:
        from rocketstore.remoting import requests
        touches = (requests.touches(req.code, requests.decode(cmd, remote_addr))
                   if cmd.code in requests.DECODERS else ())
    req.need_touches(touches)
    return req


def authenticate_request(config: PlainAclConfig, req: AccessRequest) -> PlainAccount | None:
    """Who sent ``req``: its account, or None when a white address lets it through without
    any further check. Raises ``AccessDeniedError`` for an unknown key, a wrong signature
    or an admin-only code from an account that is not admin."""
    host = req.remote_host
    if any(m(host) for m in config.global_white):
        return None
    ak = req.access_key
    if ak is None:
        raise AccessDeniedError(None, f"No accessKey is configured (request code {req.code} "
                                      f"from {host} is not signed)",
                                rocketmq_text("No accessKey is configured", "validate"))
    acct = config.accounts.get(ak)
    if acct is None:
        raise AccessDeniedError(ak, f"No acl config for accessKey={ak}",
                                rocketmq_text(f"No acl config for {ak}", "unknown_key"))
    if acct.white(host):
        return None
    expected = calc_signature(req.content, acct.secret_key)
    if req.signature is None or not hmac.compare_digest(expected, req.signature):
        raise AccessDeniedError(ak, f"Check signature failed for accessKey={ak}",
                                rocketmq_text(f"Check signature failed for accessKey={ak}",
                                              "signature"))
    if permission.needs_admin(req.code) and not acct.admin:
        text = f"Need admin permission for request code={req.code}, but accessKey={ak} is not"
        raise AccessDeniedError(ak, text, rocketmq_text(text, "admin"))
    return acct


def authorize_request(acct: PlainAccount, req: AccessRequest) -> None:
    """Raise ``AccessDeniedError`` unless ``acct`` owns every permission ``req`` needs."""
    resources = req.resources
    if req.code in _SEND_CODES and len(resources) == 1 and resources.get(TRACE_TOPIC) == permission.PUB:
        # RocketMQ's trace exemption: a send into the trace topic itself, nothing else
        return
    _check_perms(acct, req)


def check_request(config: PlainAclConfig, req: AccessRequest) -> None:
    """Raise ``AccessDeniedError`` unless ``config`` lets ``req`` through."""
    acct = authenticate_request(config, req)
    if acct is not None:
        authorize_request(acct, req)


def _check_perms(acct: PlainAccount, req: AccessRequest) -> None:
    ak = acct.access_key
    if not req.resources or (not acct.resource_perms and acct.admin):
        return
    owned_map: Mapping[str, int] = acct.resource_perms
    for resource, needed in req.resources.items():
        is_group = permission.is_group_resource(resource)
        owned = owned_map.get(resource)
        kind, where = "permission", "perm"
        if owned is None:
            owned = acct.default_group_perm if is_group else acct.default_topic_perm
            kind, where = "default permission", "default_perm"
        if not permission.check_permission(needed, owned):
            name = permission.describe_resource(resource)
            raise AccessDeniedError(
                ak, f"No {kind} for {name}: accessKey={ak} has {permission.perm_name(owned)}, "
                    f"the request needs {permission.perm_name(needed)}",
                # 4.9.8 says "default" in both cases
                rocketmq_text(f"No default permission for {name}", where))


class PlainAccessValidator:
    """Plain ACL over one ``plain_acl.yml``, re-read when the file changes.

    ``check(cmd, remote_addr)`` returns None to let a request through, else the remark to
    answer SYSTEM_ERROR with (4.9.8's text, then ours). ``close()`` stops the watcher thread.
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
        # a change is read once the file has kept it for one whole interval: a file being
        # rewritten in place (truncated, then written) is not read half-written, when it
        # could parse as fewer accounts than it is about to hold
        settling = None
        while not self._stop.wait(self.watch_interval):
            stamp = self._file_stamp()
            if stamp is None or stamp == self._stamp:
                settling = None
                continue
            if stamp != settling:
                settling = stamp
                continue
            settling = None
            self._stamp = stamp
            self.reload()

    def validate(self, cmd: RemotingCommand, remote_addr: str) -> None:
        """Raise ``AccessDeniedError`` unless the request may go through. ``cmd`` is decoded
        (by the broker's decoder) only once its sender is authenticated."""
        req = access_request(cmd, remote_addr)
        acct = authenticate_request(self.config, req)
        if acct is not None:
            authorize_request(acct, parse_request(cmd, remote_addr))

    def check(self, cmd: RemotingCommand, remote_addr: str) -> str | None:
        """None when the request may go through, else the refusal's remark (logged)."""
        try:
            self.validate(cmd, remote_addr)
        except AccessDeniedError as e:
            return self._refused(req_code=cmd.code, remote=remote_addr, e=e)
        return None

    def authenticate(self, cmd: RemotingCommand, remote_addr: str) -> AccessRequest | None | str:
        """The first half of the check, before ``cmd`` is decoded: None when a white address
        lets it through unchecked, a string (the remark, logged) when it is refused, else the
        ``AccessRequest`` to pass to ``authorize`` with the decoded request's touches."""
        req = access_request(cmd, remote_addr)
        try:
            req.account = authenticate_request(self.config, req)
        except AccessDeniedError as e:
            return self._refused(cmd.code, remote_addr, e)
        return req if req.account is not None else None

    def authorize(self, req: AccessRequest,
                  touches: Iterable[tuple[str, str, int]]) -> str | None:
        """The second half: None when ``req``'s account owns what the decoded request
        ``touches``, else why not (logged)."""
        assert req.account is not None
        req.need_touches(touches)
        try:
            authorize_request(req.account, req)
        except AccessDeniedError as e:
            return self._refused(req.code, req.remote_host, e)
        return None

    @staticmethod
    def _refused(req_code: int, remote: str, e: AccessDeniedError) -> str:
        log.info("ACL refused request code %s from %s: %s", req_code, remote, e)
        return e.remark

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
