"""With ACL on, a signed ``x-mq-date-time`` must be fresh (docs/grpc.md "Authentication"): the
signature covers only that date, so without a freshness check a header captured once (no TLS)
works forever. A date more than ``grpcAuthMaxSkewSeconds`` from now in every zone clients sign
in (they sign *local* time marked ``Z``) is UNAUTHORIZED, naming the skew and the setting.

A real NameServer and broker (processes) and the proxy on its own thread (``LocalProxy``);
every call is a raw, signed gRPC call.
"""
from __future__ import annotations

import datetime

import pytest

from grpc_support import Telemetry, _stub, local_proxy, md, status_code

ACL = """
accounts:
  - accessKey: ak_fresh
    secretKey: "sk_fresh_1"
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
CID = "c@fresh"


def header(date: str | None, sk: str = "sk_fresh_1") -> tuple:
    """A 5.x client's authorization metadata signing ``date`` (None: no date header)."""
    from rocketstore.proxy.auth import sign
    out = (("authorization", f"MQv2-HMAC-SHA1 Credential=ak_fresh, "
                             f"SignedHeaders=x-mq-date-time, Signature={sign(sk, date or '')}"),)
    return out + ((("x-mq-date-time", date),) if date is not None else ())


def stamp(delta: datetime.timedelta = datetime.timedelta(0)) -> str:
    """UTC now + ``delta`` as a client writes it."""
    return (datetime.datetime.now(datetime.timezone.utc) + delta).strftime("%Y%m%dT%H%M%SZ")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grpc_fresh")
    acl = tmp / "plain_acl.yml"
    acl.write_text(ACL)
    with local_proxy(tmp, {"t_fresh": ""}, acl_file=str(acl)) as (local, ns):
        local.ns, local.acl, local.tmp = ns, acl, tmp        # for a second proxy
        yield local


def _route(addr: str, extra: tuple) -> tuple[int, str]:
    from rocketstore.proxy import protocol as pb
    ch, query = _stub(addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
    req = pb.QueryRouteRequest()
    req.topic.name = "t_fresh"
    try:
        st = query(req, metadata=md(CID) + extra, timeout=10).status
    finally:
        ch.close()
    return st.code, st.message


def test_stale_or_garbage_dates_are_refused_fresh_ones_accepted(proxy):
    ok, refused = status_code("OK"), status_code("UNAUTHORIZED")
    assert _route(proxy.addr, header(stamp()))[0] == ok
    # the 5.x clients sign local time marked Z: a fresh date in UTC+08:00 (and -03:30) is fine
    assert _route(proxy.addr, header(stamp(datetime.timedelta(hours=8))))[0] == ok
    assert _route(proxy.addr, header(stamp(datetime.timedelta(hours=-3, minutes=-30))))[0] == ok

    # a header signed 20 minutes ago: correctly signed, but stale
    code, why = _route(proxy.addr, header(stamp(datetime.timedelta(minutes=-20))))
    assert code == refused, why
    assert "-0h20m" in why and "grpcAuthMaxSkewSeconds=900" in why and "ak_fresh" in why, why
    # two days old: no zone's local time is that far from now
    code, why = _route(proxy.addr, header(stamp(datetime.timedelta(days=-2))))
    assert code == refused and "-48h00m" in why, why
    code, why = _route(proxy.addr, header("yesterday"))
    assert code == refused and "not a date" in why, why
    code, why = _route(proxy.addr, header(None))
    assert code == refused and "x-mq-date-time is missing" in why, why
    # the signature is still checked first: a fresh date signed with the wrong key
    code, why = _route(proxy.addr, header(stamp(), sk="wrong"))
    assert code == refused and "signature" in why, why


def test_a_replayed_telemetry_header_opens_no_stream(proxy):
    svc = proxy.server.service
    stale = Telemetry(proxy.addr, CID, header(stamp(datetime.timedelta(minutes=-20))))
    try:
        r = next(stale.replies)
        assert r.status.code == status_code("UNAUTHORIZED"), r.status
        assert "grpcAuthMaxSkewSeconds" in r.status.message, r.status.message
        assert CID not in svc.streams
    finally:
        stale.close()
    fresh = Telemetry(proxy.addr, CID, header(stamp()))
    try:
        assert fresh.settings(topics=["t_fresh"]).status.code == status_code("OK")
    finally:
        fresh.close()


def test_the_window_and_zones_are_settings():
    """``date_problem``: the window is ``grpcAuthMaxSkewSeconds``; zones can be narrowed."""
    import calendar
    import time
    from rocketstore.proxy.auth import date_problem
    now = float(calendar.timegm(time.strptime("20261127T120000Z", "%Y%m%dT%H%M%SZ")))
    assert date_problem("20261127T115500Z", now, 900) is None            # 5 min: fine
    assert "grpcAuthMaxSkewSeconds=60" in date_problem("20261127T115500Z", now, 60)
    assert date_problem("20261127T200000Z", now, 900) is None            # UTC+08:00
    assert date_problem("20261127T200000Z", now, 900, (0,)) is not None  # UTC clients only
    # +1 h 20 min matches no zone (+01:00 is 20 min off, +01:30 is none)
    assert "+1h20m" in date_problem("20261127T132000Z", now, 900)
    assert date_problem("20261127T115500", now, 900) is not None         # no Z: not the format


def test_the_zones_clients_sign_in_can_be_pinned(proxy):
    """``grpcAuthClientZones=UTC`` (clients known to sign in UTC): the window holds around UTC
    only, so a fresh date in UTC+08:00 is as stale as one signed eight hours ago."""
    from rocketstore.proxy.local import LocalProxy
    from rocketstore.proxy.service import ProxyConfig
    with pytest.raises(ValueError, match="client zone '\\+8'"):
        ProxyConfig(proxy.ns.addr, str(proxy.tmp / "p2"), auth_client_zones="UTC,+8")
    utc_only = LocalProxy("127.0.0.1", 0, ProxyConfig(
        proxy.ns.addr, str(proxy.tmp / "p2"), acl_file=str(proxy.acl), auth_client_zones="UTC"))
    utc_only.start()
    try:
        assert _route(utc_only.addr, header(stamp()))[0] == status_code("OK")
        code, why = _route(utc_only.addr, header(stamp(datetime.timedelta(hours=8))))
        assert code == status_code("UNAUTHORIZED") and "+8h00m" in why, why
    finally:
        utc_only.stop()


def test_a_bad_zone_is_a_start_up_error(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "rocketstore", "proxy", "--namesrv", "127.0.0.1:1",
                        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
                        "--auth-client-zones", "UTC,+8"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "--auth-client-zones: client zone '+8'" in p.stderr, p.stderr


@pytest.mark.parametrize("date", ["20261327T120000Z", "20261127T240000Z", "2026112\uff17T120000Z",
                                  "20261127 120000Z", "20261127T120000", "", "x" * 1000])
def test_malformed_dates_are_named(date):
    from rocketstore.proxy.auth import date_problem
    why = date_problem(date, 1795780800.0, 900)
    assert why is not None and "is not a date like 20261126T134434Z" in why
    assert len(why) < 200                       # a long header is not echoed whole
