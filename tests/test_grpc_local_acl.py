"""The in-broker gRPC proxy (``grpcServerPort``) under the broker's plain ACL (``aclEnable``).

The local proxy checks every 5.x client against the broker's own ``plain_acl.yml`` and signs
its own requests to the broker with ``innerClientAuthenticationCredentials``; with ACL on and
no inner credentials the broker does not start. Real processes: a NameServer, the broker, and
the official 5.x client in its own interpreter (tests/grpc_client.py).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import yaml  # noqa: F401  (the broker's ACL needs it; the test extra installs pyyaml)

from grpc_support import client_venv  # noqa: F401  (fixture)
from servers import start_broker, start_namesrv, wait_until

ADMIN, SECRET = "rocketmq2", "12345678"
ACL_YML = f"""
accounts:
  - accessKey: {ADMIN}
    secretKey: "{SECRET}"
    admin: true
  - accessKey: publess
    secretKey: "87654321"
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [t_acl_b=SUB]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_local_proxy_checks_clients_and_signs_towards_the_broker(client_venv, tmp_path):
    from rocketstore.acl.signature import SessionCredentials
    from rocketstore.remoting.admin_client import AdminClient
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    port = _free_port()
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr, conf={
        "grpcServerPort": str(port), "aclEnable": "true", "aclFile": str(acl),
        "innerClientAuthenticationCredentials": json.dumps({"accessKey": ADMIN,
                                                            "secretKey": SECRET})})
    try:
        wait_until(lambda: "rocketstore proxy: listening on" in broker.output,
                   "the local proxy listening", within=30)
        with AdminClient(ns.addr, credentials=SessionCredentials(ADMIN, SECRET)) as admin:
            for t in ("t_acl_a", "t_acl_b"):
                admin.update_topic(t, read_queue_nums=2, write_queue_nums=2,
                                   broker_addr=broker.addr)
        r = client_venv.run('''
            def attempt(ak, sk, topic):
                return send_as(ak, sk, topic, "to " + topic)
            res = dict(ok=attempt("rocketmq2", "12345678", "t_acl_a"),
                       wrong_sk=attempt("rocketmq2", "bad-secret", "t_acl_a"),
                       no_creds=attempt("", "", "t_acl_a"),
                       publess_a=attempt("publess", "87654321", "t_acl_a"),
                       publess_b=attempt("publess", "87654321", "t_acl_b"))
            c = SimpleConsumer(ClientConfiguration(ENDPOINT, Credentials("rocketmq2", "12345678")),
                               "g_acl", {"t_acl_a": FilterExpression("*")}, 5)
            c.startup()
            got = receive_until(c, 2)
            for m in got:
                c.ack(m)
            c.shutdown()
            out(got=sorted(m.body.decode() for m in got), **res)
        ''', f"127.0.0.1:{port}", tmp_path / "home", timeout=240)
    finally:
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0
    assert r["ok"] == "sent", r
    assert r["publess_a"] == "sent", r        # PUB by default: refused on t_acl_b only
    assert "failed to fetch" in r["wrong_sk"] and "failed to fetch" in r["no_creds"], r
    assert "40100" in r["publess_b"] and "PUB" in r["publess_b"], r["publess_b"]
    assert r["got"] == ["to t_acl_a", "to t_acl_a"], r          # the admin's and publess's


def test_acl_without_inner_credentials_refuses_to_start(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"grpcServerPort={_free_port()}\naclEnable=true\naclFile={acl}\n"
                    f"namesrvAddr=127.0.0.1:1\nlistenPort=0\n")
    p = subprocess.run([sys.executable, "-m", "rocketstore", "broker", str(tmp_path / "store"),
                        "-c", str(conf)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    err = p.stderr + p.stdout
    assert "aclEnable" in err and "innerClientAuthenticationCredentials" in err, err


def test_local_proxy_signs_with_the_inner_security_token(tmp_path):
    """``innerClientAuthenticationCredentials`` with a ``securityToken``: the in-broker
    proxy's requests carry it as ``SecurityToken`` under the signature, as the wire's
    SessionCredentials sends it. A listener posing as the NameServer reads the request the
    proxy sends for a QueryRoute; the proxy is built from broker.conf settings (its grpc*
    limits too)."""
    import threading

    from grpc_support import _stub
    from rawwire import recv_frame
    from rocketstore.acl.signature import calc_signature, combine_request_content
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.cli.servers import _local_proxy
    from rocketstore.proxy import protocol as pb
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(
        ACL_YML + 'globalWhiteRemoteAddresses: ["127.0.0.1"]\n')
    fake_ns = socket.socket()
    fake_ns.bind(("127.0.0.1", 0))
    fake_ns.listen(1)
    got: list = []

    def serve() -> None:
        conn, _ = fake_ns.accept()
        with conn:
            frame = recv_frame(conn)
            if frame is not None:
                got.append(frame[:2])
    server = threading.Thread(target=serve, daemon=True)
    server.start()
    bc = BrokerConfig(grpc_server_port=_free_port(), acl_enable=True, grpc_max_clients=7,
                      grpc_route_cache_max=9,
                      inner_client_authentication_credentials=json.dumps(
                          {"accessKey": ADMIN, "secretKey": SECRET,
                           "securityToken": "tok-123"}))
    local = _local_proxy(bc, str(store), ["127.0.0.1:%d" % fake_ns.getsockname()[1]])
    # the broker.conf limits reach the proxy (grpcMaxClients=7, grpcRouteCacheMax=9)
    limits = local.server.cfg.limits
    assert (limits.max_clients, limits.route_cache_max, limits.max_groups) == (7, 9, 10_000)
    local.start()
    try:
        ch, query = _stub(local.addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
        req = pb.QueryRouteRequest()
        req.topic.name = "t_token"
        query(req, metadata=(("x-mq-client-id", "tok@1"),), timeout=10)
        ch.close()
        server.join(10)
        assert got, "the proxy sent nothing to its NameServer"
        header, body = got[0]
        ext = header["extFields"]
        assert ext["AccessKey"] == ADMIN and ext["SecurityToken"] == "tok-123", ext
        assert ext["Signature"] == calc_signature(combine_request_content(ext, body), SECRET)
    finally:
        local.stop()
        fake_ns.close()
