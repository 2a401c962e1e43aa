"""With ACL on, a 5.x client id belongs to the access key whose Telemetry stream registered it
(docs/grpc.md "Authentication"): another key cannot take the id's stream over, end it, or tie
auto-renewed receipts to it; the same key may reconnect and replace its own stream.

A real NameServer and broker (processes) and the proxy on its own thread (``LocalProxy``) with
a plain ACL of two accounts; every call is a raw, signed gRPC call.
"""
from __future__ import annotations

import datetime

import pytest

from grpc_support import Telemetry, _stub, local_proxy, md, status_code
from servers import wait_until

ACL = """
accounts:
  - accessKey: ak_owner
    secretKey: "sk_owner_1"
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: ak_other
    secretKey: "sk_other_1"
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
OWNER, OTHER = ("ak_owner", "sk_owner_1"), ("ak_other", "sk_other_1")
CID = "c@victim"


def signed(account: tuple[str, str]) -> tuple:
    """The authorization metadata a 5.x client with these credentials sends."""
    from rocketstore.proxy.auth import sign
    ak, sk = account
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return (("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                              f"SignedHeaders=x-mq-date-time, Signature={sign(sk, date)}"),
            ("x-mq-date-time", date))


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grpc_binding")
    acl = tmp / "plain_acl.yml"
    acl.write_text(ACL)
    with local_proxy(tmp, {"t_bind": ""}, acl_file=str(acl)) as (local, _):
        yield local


def _receive(addr: str, account: tuple[str, str]) -> list:
    from rocketstore.proxy import protocol as pb
    ch, receive = _stub(addr, "ReceiveMessage", "ReceiveMessageRequest",
                        "ReceiveMessageResponse", stream=True)
    r = pb.ReceiveMessageRequest(batch_size=4, auto_renew=True)
    r.group.name, r.message_queue.topic.name = "g_bind", "t_bind"
    r.long_polling_timeout.seconds = 5
    try:
        return list(receive(r, metadata=md(CID) + signed(account), timeout=15))
    finally:
        ch.close()


def test_another_key_cannot_take_over_a_client_id(proxy):
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    owner = Telemetry(proxy.addr, CID, signed(OWNER))
    streams = [owner]
    try:
        assert owner.settings(topics=["t_bind"]).status.code == status_code("OK")
        held = svc.streams[CID]

        thief = Telemetry(proxy.addr, CID, signed(OTHER))
        streams.append(thief)
        r = next(thief.replies)
        assert r.status.code == status_code("FORBIDDEN"), r.status
        assert CID in r.status.message and "ak_other" in r.status.message, r.status.message
        # the owner's stream stays, and still answers its settings
        assert svc.streams[CID] is held
        r = owner.settings(topics=["t_bind"], group="g_bind")
        assert r.status.code == status_code("OK"), r.status
        assert svc.settings[CID].subscription.group.name == "g_bind"

        ch, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"held")
        m.topic.name = "t_bind"
        m.system_properties.message_id = "01BIND0001"
        assert send(sr, metadata=md("c@sender") + signed(OWNER), timeout=10).status.code == \
            status_code("OK")
        ch.close()
        # auto-renewed receipts under the owner's id from the other key: refused, nothing taken
        got = _receive(proxy.addr, OTHER)
        assert got[0].status.code == status_code("FORBIDDEN"), got[0].status
        assert CID in got[0].status.message
        assert not svc.renewing
        got = _receive(proxy.addr, OWNER)
        assert got[0].status.code == status_code("OK"), got[0].status
        assert [x.message.body for x in got if x.HasField("message")] == [b"held"]
        assert [(v[0], v[2]) for v in svc.renewing.values()] == [(CID, "ak_owner")]

        ch, end = _stub(proxy.addr, "NotifyClientTermination",
                        "NotifyClientTerminationRequest", "NotifyClientTerminationResponse")
        r = end(pb.NotifyClientTerminationRequest(), metadata=md(CID) + signed(OTHER),
                timeout=10)
        assert r.status.code == status_code("FORBIDDEN"), r.status
        ch.close()
        assert CID in svc.settings

        # the same key reconnecting replaces its own stream (the old one ends)
        again = Telemetry(proxy.addr, CID, signed(OWNER))
        streams.append(again)
        assert again.settings(topics=["t_bind"], group="g_bind").status.code == \
            status_code("OK")
        with pytest.raises(StopIteration):
            next(owner.replies)
        assert svc.streams[CID] is not held
    finally:
        for s in streams:
            s.close()
    wait_until(lambda: not svc.streams and not svc.owners, "every client gone", within=10)


def test_the_identity_of_a_white_listed_caller(tmp_path):
    """A globally white-listed caller needs no signature; it is identified by an access key
    only when it proves one (a valid signature), else it is the anonymous "" (so an unsigned
    caller cannot claim a signed client's id by naming its key)."""
    from rocketstore.proxy.auth import GrpcAuthenticator
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL + 'globalWhiteRemoteAddresses: ["127.0.0.1"]\n')
    auth = GrpcAuthenticator(str(acl))
    try:
        peer = "ipv4:127.0.0.1:5555"
        assert auth.authenticate("Telemetry", None, dict(signed(OWNER)), peer) == \
            (None, "ak_owner")
        forged = dict(signed(("ak_owner", "not-the-secret")))
        assert auth.authenticate("Telemetry", None, forged, peer) == (None, "")
        assert auth.authenticate("Telemetry", None, {}, peer) == (None, "")
        why, ak = auth.authenticate("Telemetry", None, forged, "ipv4:10.1.2.3:5555")
        assert "signature" in why and ak == ""
    finally:
        auth.close()
