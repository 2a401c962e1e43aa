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
