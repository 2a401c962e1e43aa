"""A slave's metadata sync against a master with plain ACL on (issue 24's trust item).

The slave's requests to its master (GET_ALL_TOPIC_CONFIG 21, GET_ALL_CONSUMER_OFFSET 43,
GET_ALL_DELAY_OFFSET 45, GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201) are signed with the broker's
``innerClientAuthenticationCredentials`` (RocketMQ 5.3's name, a JSON object with accessKey and
secretKey). Real processes: a NameServer, a master with ``aclEnable=true`` and two slaves of it,
one with the credentials and one without; the master's ACL is not bypassed for the second.
Requests to the master are raw frames signed here from the upstream rule (HmacSHA1, Base64).
"""
from __future__ import annotations

import functools
import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
import yaml  # noqa: F401  (the broker's ACL needs it; the test extra installs pyyaml)

from rawwire import RawClient  # tests/rawwire.py
from servers import start_broker, start_namesrv, wait_until  # tests/servers.py

SUCCESS, UPDATE_TOPIC, UPDATE_OFFSET, UPDATE_GROUP, GET_BROKER_CONFIG = 0, 17, 15, 200, 26
WAIT_S = 60.0           # a deadline for polling, never a timing assertion
ADMIN, SECRET = "rocketmq2", "12345678"
ACL_YML = f"""
accounts:
  - accessKey: {ADMIN}
    secretKey: {SECRET}
    admin: true
"""


def _signed(ext: dict[str, object], body: bytes = b"") -> dict[str, str]:
    fields = {k: str(v) for k, v in ext.items()}
    fields["AccessKey"] = ADMIN
    content = "".join(fields[k] for k in sorted(fields)).encode() + body
    fields["Signature"] = base64.b64encode(
        hmac.new(SECRET.encode(), content, hashlib.sha1).digest()).decode()
    return fields


def _config(store: Path, name: str) -> dict:
    from rocketstore.remoting import fastjson
    p = store / "config" / name
    return fastjson.loads(p.read_text()) if p.exists() else {}


_wait = functools.partial(wait_until, within=WAIT_S)   # tests/servers.py


def test_slave_signs_its_sync_with_inner_credentials_and_without_them_is_refused(tmp_path):
    for d in ("m", "s1", "s2"):
        (tmp_path / d).mkdir()
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YML)
    ns = start_namesrv(tmp_path)
    servers = []
    try:
        master = start_broker(tmp_path / "m" / "store", ns.addr,
                              conf={"aclEnable": "true", "aclFile": str(acl_file)})
        servers.append(master)
        with RawClient(master.addr) as c:
            h, _ = c.call(UPDATE_TOPIC, _signed({
                "topic": "AclSynced", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}))
            assert h["code"] == SUCCESS, h
            group = json.dumps({"groupName": "CG-synced", "consumeEnable": True,
                                "retryMaxTimes": 7}).encode()
            h, _ = c.call(UPDATE_GROUP, _signed({}, group), group)
            assert h["code"] == SUCCESS, h
            h, _ = c.call(UPDATE_OFFSET, _signed({
                "consumerGroup": "CG-synced", "topic": "AclSynced", "queueId": 1,
                "commitOffset": 0}))
            assert h["code"] == SUCCESS, h
        creds = json.dumps({"accessKey": ADMIN, "secretKey": SECRET})
        signed_slave = start_broker(tmp_path / "s1" / "store", ns.addr, conf={
            "brokerRole": "SLAVE", "brokerId": "1",
            "innerClientAuthenticationCredentials": creds})
        servers.append(signed_slave)
        bare_slave = start_broker(tmp_path / "s2" / "store", ns.addr,
                                  conf={"brokerRole": "SLAVE", "brokerId": "2"})
        servers.append(bare_slave)

        s1 = tmp_path / "s1" / "store"

        def synced() -> bool:
            return ("AclSynced" in _config(s1, "topics.json").get("topicConfigTable", {})
                    and "CG-synced" in _config(s1, "subscriptionGroup.json").get(
                        "subscriptionGroupTable", {})
                    and "AclSynced@CG-synced" in _config(s1, "consumerOffset.json").get(
                        "offsetTable", {})
                    and (s1 / "config" / "delayOffset.json").exists())
        _wait(synced, "the slave with credentials copied topics, groups and offsets")
        topic = _config(s1, "topics.json")["topicConfigTable"]["AclSynced"]
        assert topic["readQueueNums"] == 2
        group_cfg = _config(s1, "subscriptionGroup.json")["subscriptionGroupTable"]["CG-synced"]
        assert group_cfg["retryMaxTimes"] == 7

        # the slave without credentials: refused by the master's ACL, said in its log
        _wait(lambda: "innerClientAuthenticationCredentials" in bare_slave.output,
              "the unsigned slave logged the refusal")
        log = bare_slave.output
        assert "refused GET_ALL_TOPIC_CONFIG (21)" in log, log[-3000:]
        assert "No accessKey is configured" in log
        s2 = tmp_path / "s2" / "store"
        assert "AclSynced" not in _config(s2, "topics.json").get("topicConfigTable", {})
        assert "CG-synced" not in _config(s2, "subscriptionGroup.json").get(
            "subscriptionGroupTable", {})
        assert "AclSynced@CG-synced" not in _config(s2, "consumerOffset.json").get(
            "offsetTable", {})
        assert "ACL refused request code 21" in master.output
        # nothing in the logs or the broker's settings (GET_BROKER_CONFIG) carries the secret
        assert all(f'"{SECRET}"' not in s.output for s in servers)
        with RawClient(signed_slave.addr) as c:
            h, body = c.call(GET_BROKER_CONFIG)
        assert h["code"] == SUCCESS and b"brokerRole=SLAVE" in body
        assert SECRET.encode() not in body
    finally:
        for s in reversed(servers):
            s.stop()
        ns.stop()


@pytest.mark.parametrize("value, why", [
    ("not json", "a JSON object"),
    ('{"accessKey": "rocketmq2"}', "secretKey"),
    ('{"accessKey": "", "secretKey": "12345678"}', "accessKey"),
    ('["rocketmq2", "12345678"]', "a JSON object"),
])
def test_malformed_inner_credentials_name_the_setting_and_hide_the_secret(value, why):
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError) as e:
        BrokerConfig(inner_client_authentication_credentials=value)
    assert e.value.setting == "inner_client_authentication_credentials"
    assert why in str(e.value)
    assert "12345678" not in str(e.value)


def test_inner_credentials_are_not_shown_in_the_config():
    from rocketstore.broker.config import BrokerConfig
    bc = BrokerConfig(inner_client_authentication_credentials=json.dumps(
        {"accessKey": ADMIN, "secretKey": SECRET}))
    assert bc.inner_credentials is not None
    assert bc.inner_credentials.access_key == ADMIN
    assert SECRET not in repr(bc)
    assert BrokerConfig().inner_credentials is None
