"""RocketMQ 5's gRPC authentication (``MQv2-HMAC-SHA1``) over the plain ACL of docs/acl.md.

A 5.x client sends ``authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time,
Signature=<hex>``, the hex being HMAC-SHA1 keyed with the secret key over the exact
``x-mq-date-time`` header. The proxy looks the access key up in ``plain_acl.yml`` (the same
accounts, white addresses and topic/group permissions as the broker's 4.x ACL), checks the
signature and that the signed date is fresh (``date_problem``: a captured header must not work
forever), then the permissions the RPC needs: PUB on the topic to send or end a transaction,
SUB on the topic and on the group (``%RETRY%<group>``, as 4.x does) to receive, ack, change
invisibility, forward to the DLQ or ask for an assignment. Any failure is UNAUTHORIZED. The access key a call proves
is also its identity: a client id belongs to the key of its Telemetry stream (docs/grpc.md).
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import time
from typing import Any, Callable

from rocketstore.acl import permission
from rocketstore.acl.address import host_of
from rocketstore.acl.validator import AccessRequest, PlainAccessValidator, authorize_request
from rocketstore.errors import AccessDeniedError

SCHEME = "MQv2-HMAC-SHA1"

# The UTC offsets (minutes) clocks keep today, standard and summer time (tzdata 2024-2026).
# The 5.x clients sign their *local* time marked ``Z`` (Python ``datetime.now()``, Java the
# JVM's default zone), so a fresh date is near now in one of these zones, not only in UTC.
ZONE_OFFSETS_MIN = (-720, -660, -600, -570, -540, -480, -420, -360, -300, -240, -210, -180,
                    -150, -120, -60, 0, 60, 120, 180, 210, 240, 270, 300, 330, 345, 360, 390,
                    420, 480, 525, 540, 570, 600, 630, 660, 720, 765, 780, 825, 840)


def sign(secret_key: str, date_time: str) -> str:
    """The hex signature a client sends for ``date_time``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_zones(text: str) -> tuple[int, ...]:
    """``grpcAuthClientZones``: ``any`` (every zone of ``ZONE_OFFSETS_MIN``), or the zones the
    clients sign in, comma-separated: ``UTC``, ``+08:00``, ``-03:30`` -> their offsets in
    minutes. ``ValueError`` names an entry that is none of these."""
    if text.strip().lower() == "any":
        return ZONE_OFFSETS_MIN
    out = []
    for item in text.split(","):
        z = item.strip()
        if z.upper() in ("UTC", "Z"):
            out.append(0)
            continue
        ok = len(z) == 6 and z[0] in "+-" and z[3] == ":" and z[1:3].isdigit() \
            and z[4:].isdigit() and int(z[4:]) < 60
        minutes = int(z[1:3]) * 60 + int(z[4:]) if ok else 0
        if not ok or minutes > 14 * 60:
            raise ValueError(f"client zone {z!r}: expected any, UTC or an offset like "
                             "+08:00 or -03:30 (at most 14:00), comma-separated")
        out.append(-minutes if z[0] == "-" else minutes)
    return tuple(out)


def date_problem(date: str | None, now: float, max_skew_s: int,
                 offsets_min: tuple[int, ...] = ZONE_OFFSETS_MIN) -> str | None:
    """Why the signed ``x-mq-date-time`` is not fresh, or None.

    Fresh: within ``max_skew_s`` of ``now`` read as local time in one of ``offsets_min`` (the
    zones clients may sign in; ``(0,)`` for UTC only). Anything else, a missing or unparseable
    date included, may be a header captured earlier and replayed."""
    if date is None:
        return "x-mq-date-time is missing"
    signed = _epoch(date)
    if signed is None:
        return f"x-mq-date-time {date[:40]!r} is not a date like 20261126T134434Z"
    ahead = signed - now            # the client's zone offset, plus clock skew (or replay age)
    if abs(ahead) <= max_skew_s or any(abs(ahead - 60 * z) <= max_skew_s for z in offsets_min):
        return None                 # (UTC, the usual case, first)
    sign_ = "-" if ahead < 0 else "+"
    mins = round(abs(ahead) / 60)           # to the nearest minute: the date has whole seconds
    return (f"x-mq-date-time {date} is {sign_}{mins // 60}h{mins % 60:02d}m from the proxy's "
            f"UTC clock: more than {max_skew_s} s from now in every zone clients sign in "
            f"(grpcAuthMaxSkewSeconds={max_skew_s}, grpcAuthClientZones); a stale date may be "
            f"a replayed header")


def _epoch(date: str) -> int | None:
    """``20261126T134434Z`` -> seconds since the epoch (read as UTC), None if not such a date.
    By hand: ``time.strptime`` costs ~11 µs a call here, this ~2, and every signed RPC has
    one."""
    if len(date) != 16 or date[8] != "T" or date[15] != "Z" \
            or not (date[:8].isdigit() and date[9:15].isdigit() and date.isascii()):
        return None
    try:
        return int(datetime.datetime(
            int(date[:4]), int(date[4:6]), int(date[6:8]), int(date[9:11]), int(date[11:13]),
            int(date[13:15]), tzinfo=datetime.timezone.utc).timestamp())
    except ValueError:                  # month 13, hour 24, ...
        return None


def parse_authorization(value: str) -> dict[str, str]:
    """``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=..., Signature=hex`` -> its fields."""
    scheme, _, rest = value.partition(" ")
    if scheme != SCHEME:
        raise AccessDeniedError(None, f"authorization scheme {scheme!r} is not {SCHEME}")
    out = {}
    for item in rest.split(","):
        k, sep, v = item.strip().partition("=")
        if sep:
            out[k] = v
    return out


def _resources(rpc: str, req: Any) -> dict[str, int]:
    """What ``rpc`` needs: topic -> PUB/SUB, ``%RETRY%group`` -> SUB."""
    if rpc in ("SendMessage",):
        return {m.topic.name: permission.PUB for m in req.messages}
    if rpc == "EndTransaction":
        return {req.topic.name: permission.PUB}
    if rpc == "ReceiveMessage":
        return {req.message_queue.topic.name: permission.SUB,
                permission.retry_topic(req.group.name): permission.SUB}
    if rpc in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
               "QueryAssignment"):
        return {req.topic.name: permission.SUB,
                permission.retry_topic(req.group.name): permission.SUB}
    return {}


class GrpcAuthenticator:
    """Checks a call's metadata against ``plain_acl.yml`` (re-read when it changes)."""

    def __init__(self, acl_file: str, max_skew_s: int = 900,
                 offsets_min: tuple[int, ...] = ZONE_OFFSETS_MIN,
                 clock: Callable[[], float] = time.time) -> None:
        """``max_skew_s``/``offsets_min``: how fresh a signed date must be (``date_problem``)."""
        self.validator = PlainAccessValidator(acl_file)
        self.max_skew_s = max_skew_s
        self.offsets_min = offsets_min
        self.clock = clock

    def stale(self, date: str | None) -> str | None:
        """Why a signed ``x-mq-date-time`` is refused, or None (``date_problem``)."""
        return date_problem(date, self.clock(), self.max_skew_s, self.offsets_min)

    def check(self, rpc: str, req: Any, metadata: dict[str, str], peer: str) -> str | None:
        """None when the call may go on, else why not (answered UNAUTHORIZED)."""
        return self.authenticate(rpc, req, metadata, peer)[0]

    def authenticate(self, rpc: str, req: Any, metadata: dict[str, str], peer: str
                     ) -> tuple[str | None, str]:
        """``(why not or None, the caller's access key)``: the key is one the call proves (its
        signature checked, or its account white-lists the address); "" for a globally
        white-listed caller that proves none (they all share that one anonymous identity)."""
        config = self.validator.config
        host = host_of(_peer_addr(peer))
        if any(m(host) for m in config.global_white):
            return None, _proven_key(config, host, metadata, self.stale)
        value = metadata.get("authorization")
        if not value:
            return "no authorization header (the client has no credentials)", ""
        try:
            fields = parse_authorization(value)
            ak = fields.get("Credential", "").split("/", 1)[0]
            if not ak:
                return "the authorization carries no access key", ""
            acct = config.accounts.get(ak)
            if acct is None:
                return f"No acl config for accessKey={ak}", ""
            if not acct.white(host):
                date = metadata.get("x-mq-date-time")
                if date is None:
                    return "x-mq-date-time is missing", ""
                if not hmac.compare_digest(sign(acct.secret_key, date),
                                           fields.get("Signature", "").lower()):
                    return f"Check signature failed for accessKey={ak}", ""
                why = self.stale(date)
                if why:
                    return f"{why} (accessKey={ak})", ""
            access = AccessRequest(0, host, ak)
            access.resources.update(_resources(rpc, req))
            authorize_request(acct, access)
        except AccessDeniedError as e:
            return str(e), ""
        return None, ak

    def close(self) -> None:
        self.validator.close()


def _proven_key(config: Any, host: str, metadata: dict[str, str],
                stale: Callable[[str | None], str | None]) -> str:
    """The access key a globally white-listed caller proves by a valid, fresh signature,
    else ""."""
    try:
        fields = parse_authorization(metadata.get("authorization", ""))
    except AccessDeniedError:
        return ""
    ak = fields.get("Credential", "").split("/", 1)[0]
    acct = config.accounts.get(ak)
    if acct is None:
        return ""
    if acct.white(host):
        return ak
    date = metadata.get("x-mq-date-time")
    if date is not None and hmac.compare_digest(sign(acct.secret_key, date),
                                                fields.get("Signature", "").lower()) \
            and stale(date) is None:
        return ak
    return ""


def _peer_addr(peer: str) -> str:
    """grpc's ``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` -> ``host:port``."""
    return peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer
