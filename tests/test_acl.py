"""Plain ACL (RocketMQ 4.x): plain_acl.yml, address patterns, signatures, decisions, reload,
and real processes: ``rocketstore broker`` with aclEnable=true driven by the C++ client's
``set_session_credentials`` and by our own client."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rocketmq.client  # noqa: F401  (the test extra installs rocketmq==0.4.4)

from rocketstore.acl import (PlainAccessValidator, SessionCredentials, check_request,
                             parse_plain_acl, parse_request)
from rocketstore.acl import permission as P
from rocketstore.acl.address import compile_pattern, host_of
from rocketstore.errors import AccessDeniedError, AclConfigError, InvalidArgumentError, MQClientError
from rocketstore.remoting import fastjson
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand, decode_frame
from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

# the sample RocketMQ 4.9 ships as conf/plain_acl.yml, in substance
UPSTREAM_SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def logged(server, text: str, timeout: float = 10.0) -> bool:
    """Whether ``text`` reaches the server's log within ``timeout`` s (its stderr is read by a
    thread, so a line written just before the check may not have arrived yet)."""
    deadline = time.monotonic() + timeout
    while text not in server.output:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def hmac_sha1_b64(content: bytes, secret: str) -> str:
    """The upstream rule written out independently of rocketstore.acl."""
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


# the rest of a header the broker needs to decode a request (the ACL checks decoded requests)
_V2_REST = {"c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
COMPLETE = {
    RequestCode.SEND_MESSAGE_V2: _V2_REST, RequestCode.SEND_BATCH_MESSAGE: _V2_REST,
    RequestCode.SEND_MESSAGE: {"defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                               "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0"},
    RequestCode.PULL_MESSAGE: {"queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                               "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0"},
    RequestCode.UPDATE_CONSUMER_OFFSET: {"queueId": "0", "commitOffset": "0"},
    RequestCode.QUERY_CONSUMER_OFFSET: {"queueId": "0"},
    RequestCode.CONSUMER_SEND_MSG_BACK: {"offset": "0", "delayLevel": "0"},
    RequestCode.UPDATE_AND_CREATE_TOPIC: {"readQueueNums": "4", "writeQueueNums": "4",
                                          "perm": "6"},
}


def signed(code: int, ext: dict[str, str], body: bytes = b"", ak: str = "RocketMQ",
           sk: str = "12345678") -> RemotingCommand:
    """A request signed the way AclClientRPCHook signs, computed here from the rule."""
    fields = dict(COMPLETE.get(code, {}), **ext, AccessKey=ak)
    content = "".join(fields[k] for k in sorted(fields)).encode() + body
    fields["Signature"] = hmac_sha1_b64(content, sk)
    return RemotingCommand(code, ext_fields=fields, body=body)


# -- the file ---------------------------------------------------------------------------------

def test_upstream_sample_parses_with_its_perms():
    cfg = parse_plain_acl(UPSTREAM_SAMPLE)
    assert cfg.global_white_patterns == ("10.10.103.*", "192.168.0.*")
    a = cfg.accounts["RocketMQ"]
    assert a.secret_key == "12345678"          # a YAML number, read as the text it is
    assert a.admin is False and a.white_remote_address is None
    assert a.default_topic_perm == P.DENY and a.default_group_perm == P.SUB
    assert a.resource_perms == {"topicA": P.DENY, "topicB": P.PUB | P.SUB, "topicC": P.SUB,
                                "%RETRY%groupA": P.DENY, "%RETRY%groupB": P.PUB | P.SUB,
                                "%RETRY%groupC": P.SUB}
    b = cfg.accounts["rocketmq2"]
    assert b.admin is True and b.resource_perms == {}
    assert b.default_topic_perm == P.DENY      # missing -> DENY, as RocketMQ reads it
    assert b.white("192.168.1.77") and not b.white("192.168.2.1")


def test_empty_file_has_no_accounts_and_repeated_key_keeps_the_first():
    assert parse_plain_acl("").accounts == {}
    cfg = parse_plain_acl("accounts:\n- {accessKey: AAAAAAA1, secretKey: first111}\n"
                          "- {accessKey: AAAAAAA1, secretKey: second22}\n")
    assert cfg.accounts["AAAAAAA1"].secret_key == "first111"


@pytest.mark.parametrize("text, field", [
    ("accounts:\n- {accessKey: short, secretKey: 12345678}\n", "accounts[0].accessKey"),
    ("accounts:\n- {accessKey: RocketMQ, secretKey: 123456}\n", "accounts[0].secretKey"),
    ("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, topicPerms: [topicA]}\n",
     "accounts[0].topicPerms"),
    ("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, whiteRemoteAddress: 1.2.3}\n",
     "accounts[0].whiteRemoteAddress"),
    ("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, admin: maybe}\n",
     "accounts[0].admin"),
    ("globalWhiteRemoteAddresses: [192.168.1.300-400]\n", "globalWhiteRemoteAddresses"),
    ("accounts: {accessKey: RocketMQ}\n", "accounts"),
    ("- just a list\n", "file"),
    ("accounts: [\n", "file"),
])
def test_malformed_entries_name_the_field(text, field):
    with pytest.raises(AclConfigError) as ei:
        parse_plain_acl(text, "x.yml")
    assert ei.value.field == field and "x.yml" in str(ei.value)


# -- white remote addresses -------------------------------------------------------------------

@pytest.mark.parametrize("pattern, yes, no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("*.*.*.*", ["9.9.9.9"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2", "192.168.0.10"]),
    ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1", "192.168.00.1x"]),
    ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100", "192.168.1.50"],
     ["192.168.1.0", "192.168.1.101", "192.168.2.50"]),
    ("10.10.*.*", ["10.10.0.1", "10.10.255.7"], ["10.11.0.1"]),
    ("10.1-3.*.*", ["10.1.9.9", "10.3.0.0"], ["10.4.0.0", "11.2.0.0"]),
    ("192.168.1.{1,2,30}", ["192.168.1.1", "192.168.1.30"], ["192.168.1.3", "192.168.1.12"]),
    ("192.168.1.1,10.0.0.7", ["192.168.1.1", "10.0.0.7"], ["10.0.0.1"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2", "127.0.0.1"]),
    ("1050:0:0:0:5:600:300c:1-200", ["1050::5:600:300c:1", "1050::5:600:300c:200"],
     ["1050::5:600:300c:201", "1051::5:600:300c:1"]),
    ("1050::5:600:300c:*", ["1050:0:0:0:5:600:300c:ffff"], ["1050:0:0:0:5:600:300d:0"]),
    ("2001:db8::{1,2}", ["2001:db8::1", "2001:0db8:0:0:0:0:0:2"], ["2001:db8::3"]),
])
def test_white_address_patterns(pattern, yes, no):
    m = compile_pattern(pattern)
    assert [a for a in yes if not m(a)] == []
    assert [a for a in no if m(a)] == []


@pytest.mark.parametrize("pattern", ["192.168.1", "192.168.1.5-2", "*.1.1.1", "300.1.1.1",
                                     "192.168.1.{1,x}", "a.b.c.d", "192.168.-1.1"])
def test_bad_address_patterns_are_refused(pattern):
    with pytest.raises(AclConfigError):
        compile_pattern(pattern)


def test_host_of_a_peer():
    assert host_of("127.0.0.1:5123") == "127.0.0.1"
    assert host_of("::1:5123") == "::1"


# -- signatures -------------------------------------------------------------------------------

def test_signature_of_a_fixed_request_matches_the_upstream_rule():
    # sorted names: AccessKey < a < b (upper case sorts first); values then body:
    # "RocketMQ" "PG" "TopicA" "hello", HmacSHA1 with 12345678, Base64. The constant was
    # computed with `printf RocketMQPGTopicAhello | openssl dgst -sha1 -hmac 12345678 -binary
    # | base64`.
    ext = {"b": "TopicA", "a": "PG"}
    SessionCredentials("RocketMQ", "12345678").sign(ext, b"hello")
    assert ext["AccessKey"] == "RocketMQ"
    assert ext["Signature"] == "SUmdnF8EJanxh5bT82KVIgLANuA="
    # the broker side leaves Signature and _UNIQUE_KEY_QUERY out of the content
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=dict(ext, _UNIQUE_KEY_QUERY="x"),
                          body=b"hello")
    assert parse_request(cmd, "1.2.3.4:5", touches=()).content == b"RocketMQPGTopicAhello"


def test_client_signature_survives_the_wire_and_a_token_is_signed_too():
    creds = SessionCredentials("RocketMQ", "12345678", security_token="tok")
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T", "queueId": 3,
                                                             "consumerGroup": "G"})
    creds.sign(cmd.ext_fields, cmd.body)
    again = decode_frame(cmd.encode()[4:])
    fields = {k: v for k, v in again.ext_fields.items() if k != "Signature"}
    assert fields["SecurityToken"] == "tok"
    content = "".join(fields[k] for k in sorted(fields)).encode()
    assert again.ext_fields["Signature"] == hmac_sha1_b64(content, "12345678")
    creds.sign(cmd.ext_fields, cmd.body)         # signing twice gives the same answer
    assert cmd.ext_fields["Signature"] == again.ext_fields["Signature"]


def test_credentials_arguments():
    assert "12345678" not in repr(SessionCredentials("RocketMQ", "12345678"))
    with pytest.raises(InvalidArgumentError):
        SessionCredentials("", "x")
    from rocketstore.client import Producer
    with pytest.raises(InvalidArgumentError):
        Producer("pg", namesrv_addr="127.0.0.1:1", access_key="RocketMQ")
    with pytest.raises(InvalidArgumentError):
        Producer("pg", namesrv_addr="127.0.0.1:1", access_key="RocketMQ", secret_key="x",
                 credentials=SessionCredentials("RocketMQ", "12345678"))
    with pytest.raises(MQClientError):
        Producer("pg", broker=object(), access_key="RocketMQ", secret_key="12345678")


# -- decisions --------------------------------------------------------------------------------

CFG = parse_plain_acl(UPSTREAM_SAMPLE + """
  - accessKey: limitedAdmin
    secretKey: 87654321
    admin: true
    defaultTopicPerm: SUB
    topicPerms: [topicB=PUB]
""")


def decide(cmd: RemotingCommand, peer: str = "127.0.0.1:4000") -> str | None:
    try:
        check_request(CFG, parse_request(cmd, peer))
    except AccessDeniedError as e:
        return str(e)
    return None


def heartbeat_body(group: str, topics: list[str]) -> bytes:
    return fastjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}]}).encode()


def test_send_pub_on_topic():
    S = RequestCode.SEND_MESSAGE_V2
    assert decide(signed(S, {"a": "PG", "b": "topicB"}, b"x")) is None
    why = decide(signed(S, {"a": "PG", "b": "topicA"}, b"x"))
    assert why == ("No permission for topic:topicA: accessKey=RocketMQ has DENY, the request "
                   "needs PUB")
    assert "No default permission for topic:other" in decide(signed(S, {"a": "PG", "b": "other"}))
    assert "topic:topicC" in decide(signed(S, {"a": "PG", "b": "topicC"}))     # SUB only
    assert decide(signed(RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "topic": "topicB"})) \
        is None
    assert "topicA" in decide(signed(RequestCode.SEND_BATCH_MESSAGE, {"a": "PG", "b": "topicA"},
                                     b"x"))


def test_send_to_a_retry_topic_needs_sub_on_the_group():
    S = RequestCode.SEND_MESSAGE_V2
    assert decide(signed(S, {"a": "groupC", "b": "%RETRY%groupC"})) is None
    assert "group:groupA" in decide(signed(S, {"a": "groupA", "b": "%RETRY%groupA"}))


def test_pull_and_offsets_need_sub_on_topic_and_group():
    PULL, UPD = RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET
    assert decide(signed(PULL, {"topic": "topicC", "consumerGroup": "groupC"})) is None
    assert "group:groupA" in decide(signed(PULL, {"topic": "topicC", "consumerGroup": "groupA"}))
    assert "topic:topicA" in decide(signed(PULL, {"topic": "topicA", "consumerGroup": "groupC"}))
    assert decide(signed(PULL, {"topic": "topicB", "consumerGroup": "anyGroup"})) is None
    assert "group:groupA" in decide(signed(UPD, {"topic": "topicB", "consumerGroup": "groupA"}))
    assert decide(signed(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "groupB"})) is None
    assert "group:groupA" in decide(signed(RequestCode.CONSUMER_SEND_MSG_BACK,
                                           {"group": "groupA"}))
    assert "group:groupA" in decide(signed(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                           {"consumerGroup": "groupA"}))
    # codes outside the table need only a valid signature
    assert decide(signed(RequestCode.QUERY_CONSUMER_OFFSET,
                         {"topic": "topicA", "consumerGroup": "groupA"})) is None


def test_heartbeat_needs_sub_on_groups_and_subscriptions():
    HB = RequestCode.HEART_BEAT
    assert decide(signed(HB, {}, heartbeat_body("groupC", ["topicB", "%RETRY%groupC"]))) is None
    assert "topic:topicA" in decide(signed(HB, {}, heartbeat_body("groupC", ["topicA"])))
    assert "group:groupA" in decide(signed(HB, {}, heartbeat_body("groupA", ["topicB"])))


def test_admin_codes_and_admin_accounts():
    create = {"topic": "newTopic"}
    why = decide(signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    assert why == "Need admin permission for request code=17, but accessKey=RocketMQ is not"
    # an admin without resource lists may touch everything (signature still checked)
    assert decide(signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create, ak="rocketmq2")) is None
    assert decide(signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "topicA"},
                         ak="rocketmq2")) is None
    # an admin with resource lists is held to them
    assert decide(signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "topicB"},
                         ak="limitedAdmin", sk="87654321")) is None
    assert "topic:topicX" in decide(signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "topicX"},
                                           ak="limitedAdmin", sk="87654321"))


def test_identity_signature_and_white_addresses():
    S = RequestCode.SEND_MESSAGE_V2
    unsigned = RemotingCommand(S, ext_fields=dict(COMPLETE[S], a="PG", b="topicA"))
    assert decide(unsigned).startswith("No accessKey is configured")
    assert decide(unsigned, "10.10.103.9:1234") is None              # global white list
    assert decide(unsigned, "192.168.0.200:1") is None
    assert decide(signed(S, {"a": "PG", "b": "topicB"}, ak="nobody1")) == \
        "No acl config for accessKey=nobody1"
    assert decide(signed(S, {"a": "PG", "b": "topicB"}, sk="wrongwrong")) == \
        "Check signature failed for accessKey=RocketMQ"
    tampered = signed(S, {"a": "PG", "b": "topicB"}, b"body")
    tampered.body = b"other"
    assert decide(tampered) == "Check signature failed for accessKey=RocketMQ"
    # the account's own white address skips signature and permissions
    bad_sig = signed(S, {"a": "PG", "b": "topicA"}, ak="rocketmq2", sk="wrongwrong")
    assert decide(bad_sig, "192.168.1.5:7") is None
    assert decide(bad_sig, "192.168.2.5:7") == "Check signature failed for accessKey=rocketmq2"
    # a PUB to the trace topic passes on a valid signature alone
    assert decide(signed(S, {"a": "PG", "b": "RMQ_SYS_TRACE_TOPIC"})) is None


def test_permission_bits():
    assert P.check_permission(P.PUB, P.PUB | P.SUB) and not P.check_permission(P.SUB, P.PUB)
    assert P.check_permission(P.ANY, P.SUB) and not P.check_permission(P.ANY, P.DENY)
    assert not P.check_permission(P.PUB, P.PUB | P.DENY)
    assert P.parse_perm(" SUB|PUB ") == P.PUB | P.SUB and P.parse_perm("ALL") == P.DENY


# -- reload -----------------------------------------------------------------------------------

def wait_for(cond, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_validator_reloads_a_changed_file_and_keeps_rules_on_a_bad_one(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, "
                    "defaultTopicPerm: DENY}\n")
    cmd = signed(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T1"})
    with PlainAccessValidator(str(path), watch_interval=0.05) as v:
        assert "topic:T1" in v.check(cmd, "127.0.0.1:1")
        path.write_text("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, "
                        "defaultTopicPerm: PUB}\n")
        wait_for(lambda: v.reloads == 1, "the reload")
        assert v.check(cmd, "127.0.0.1:1") is None
        path.write_text("accounts: [\n")            # broken: the previous rules stay
        wait_for(lambda: v._stamp == v._file_stamp(), "the watcher to see the change")
        assert v.reload() is False
        assert v.reloads == 1 and v.check(cmd, "127.0.0.1:1") is None
        thread = v._thread
    assert thread is not None and not thread.is_alive()


def test_missing_file_refuses_everything_until_written(tmp_path):
    path = tmp_path / "conf" / "plain_acl.yml"
    cmd = signed(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T1"})
    with PlainAccessValidator(str(path), watch_interval=0.05) as v:
        assert v.check(cmd, "127.0.0.1:1") == (
            "org.apache.rocketmq.acl.common.AclException: No acl config for RocketMQ, "
            "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate"
            "(PlainPermissionManager.java:668); No acl config for accessKey=RocketMQ")
        path.parent.mkdir()
        path.write_text("globalWhiteRemoteAddresses: ['127.0.0.1']\n")
        wait_for(lambda: v.reloads == 1, "the reload")
        assert v.check(cmd, "127.0.0.1:1") is None


# -- processes: rocketstore namesrv + rocketstore broker with aclEnable=true -----------------

ACL_YML = """
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - AclTopic=PUB|SUB
      - AclDenied=DENY
"""

CPP_PRODUCE = textwrap.dedent("""
    import json, sys
    from rocketmq.client import Producer, Message
    namesrv, creds, topics = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].split(",")
    p = Producer("PG-acl-cpp")
    p.set_namesrv_addr(namesrv)
    if creds:
        p.set_session_credentials(creds[0], creds[1], "")
    p.start()
    out = []
    for t in topics:
        m = Message(t)
        m.set_keys("k")
        m.set_tags("T")
        m.set_body(b"from-cpp")
        try:
            r = p.send_sync(m)
            out.append({"topic": t, "ok": int(r.status) == 0})
        except Exception as e:
            out.append({"topic": t, "ok": False, "error": str(e)})
    p.shutdown()
    print(json.dumps(out), flush=True)
""")

CPP_PUSH = textwrap.dedent("""
    import json, sys, threading, time
    from rocketmq.client import PushConsumer
    namesrv, creds, group, topic, want, wait = (sys.argv[1], json.loads(sys.argv[2]),
                                               sys.argv[3], sys.argv[4], int(sys.argv[5]),
                                               float(sys.argv[6]))
    got, done = [], threading.Event()
    def on_message(m):
        got.append(m.body.decode())
        if len(got) >= want:
            done.set()
    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.set_session_credentials(creds[0], creds[1], "")
    c.subscribe(topic, on_message)
    c.start()
    done.wait(wait)
    c.shutdown()
    print(json.dumps(got), flush=True)
""")


def run_client(tmp: Path, script: str, *args: object, timeout: float = 120) -> list:
    path = tmp / f"client_{abs(hash(script))}.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp, env=dict(os.environ, HOME=str(tmp)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def acl_cluster(tmp_path):
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    acl_file = store / "conf" / "plain_acl.yml"
    acl_file.write_text(ACL_YML)
    ns = start_namesrv(tmp_path)
    broker = start_broker(store, ns.addr, {"aclEnable": "true", "flushDiskType": "SYNC_FLUSH",
                                           "mappedFileSizeCommitLog": str(16 << 20)})
    yield ns, broker, acl_file
    assert broker.stop() == 0, broker.output[-3000:]
    assert ns.stop() == 0


GOOD = json.dumps(["RocketMQ", "12345678"])
WRONG = json.dumps(["RocketMQ", "not-the-secret"])


def test_cpp_client_with_session_credentials(acl_cluster, tmp_path):
    ns, broker, _ = acl_cluster
    res = run_client(tmp_path, CPP_PRODUCE, ns.addr, GOOD, "AclTopic,AclTopic,AclDenied,Other")
    assert [r["ok"] for r in res] == [True, True, False, False], res
    res = run_client(tmp_path, CPP_PRODUCE, ns.addr, WRONG, "AclTopic")
    assert [r["ok"] for r in res] == [False], res
    res = run_client(tmp_path, CPP_PRODUCE, ns.addr, json.dumps(None), "AclTopic")
    assert [r["ok"] for r in res] == [False], res
    assert logged(broker, "No permission for topic:AclDenied: accessKey=RocketMQ")
    assert logged(broker, "No default permission for topic:Other")
    assert logged(broker, "Check signature failed for accessKey=RocketMQ")
    # without credentials the C++ client still sends AccessKey, empty
    assert logged(broker, "No acl config for accessKey=\n")

    # consumers: the right secret gets both messages, a wrong one gets nothing
    got = run_client(tmp_path, CPP_PUSH, ns.addr, WRONG, "CG-acl-wrong", "AclTopic", 2, 8)
    assert got == []
    assert logged(broker, "ACL refused request code 34")      # its heartbeat, for one
    got = run_client(tmp_path, CPP_PUSH, ns.addr, GOOD, "CG-acl", "AclTopic", 2, 60)
    assert got == ["from-cpp", "from-cpp"]


def test_our_client_signs_and_a_reload_changes_decisions(acl_cluster, tmp_path):
    from rocketstore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
    from rocketstore.errors import MQBrokerError
    ns, broker, acl_file = acl_cluster
    with Producer("PG-acl", namesrv_addr=ns.addr, access_key="RocketMQ",
                  secret_key="12345678", retry_times_when_send_failed=0) as p:
        assert p.send(Message("AclTopic", b"ours")).status.name == "SEND_OK"
        with pytest.raises(MQBrokerError) as ei:
            p.send(Message("AclDenied", b"no"))
        # 4.9.8's answer (SYSTEM_ERROR, its AclException text), then ours; retried at most
        # retry_times_when_send_failed times like any SYSTEM_ERROR, here not at all
        assert ei.value.code == 1 and "topic:AclDenied" in str(ei.value)
        assert ("AclException: No default permission for topic:AclDenied" in str(ei.value)
                and "accessKey=RocketMQ has" in str(ei.value))
    with Producer("PG-acl", namesrv_addr=ns.addr,
                  credentials=SessionCredentials("RocketMQ", "wrong-secret"),
                  retry_times_when_send_failed=0) as p:
        with pytest.raises(MQBrokerError) as ei:
            p.send(Message("AclTopic", b"no"))
        assert ei.value.code == 1 and ("AclException: Check signature failed for "
                                       "accessKey=RocketMQ, ") in str(ei.value)

    got: list[bytes] = []
    done = __import__("threading").Event()

    def listener(msgs, ctx):
        got.extend(bytes(m.body) for m in msgs)
        done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer("CG-acl-ours", namesrv_addr=ns.addr, access_key="RocketMQ",
                     secret_key="12345678", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe("AclTopic", "*")
    c.register_message_listener(listener)
    c.start()
    try:
        assert done.wait(60), broker.output[-2000:]
    finally:
        c.shutdown()
    assert got == [b"ours"]

    from rocketstore.client import PullConsumer
    pc = PullConsumer("CG-acl-pull", namesrv_addr=ns.addr, access_key="RocketMQ",
                      secret_key="12345678", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    pc.subscribe("AclTopic", "*")
    pc.start()
    try:
        queues = pc.fetch_message_queues("AclTopic")
        pulled: list[bytes] = []
        deadline = time.monotonic() + 60
        while not pulled and time.monotonic() < deadline:
            pulled = [bytes(m.body) for m in pc.poll(1000)]
    finally:
        pc.shutdown()
    assert pulled == [b"ours"]
    # a wrong secret: refused from its first request for an offset on
    pc = PullConsumer("CG-acl-pull2", namesrv_addr=ns.addr, access_key="RocketMQ",
                      secret_key="wrong-secret", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    pc.assign(queues)
    try:
        with pytest.raises(MQClientError, match="no start offset"):
            pc.start()
    finally:
        pc.shutdown()
    assert logged(broker, "ACL refused request code 14 ")    # QUERY_CONSUMER_OFFSET

    # an unsigned C++ producer is refused until its address is white-listed in the file
    res = run_client(tmp_path, CPP_PRODUCE, ns.addr, json.dumps(None), "AclTopic")
    assert [r["ok"] for r in res] == [False]
    acl_file.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.*\n" + ACL_YML)
    wait_for(lambda: "ACL reloaded" in broker.output, "the broker to reload plain_acl.yml")
    res = run_client(tmp_path, CPP_PRODUCE, ns.addr, json.dumps(None), "AclTopic,AclDenied")
    assert [r["ok"] for r in res] == [True, True], res


def test_acl_off_by_default_ignores_the_file(tmp_path):
    from rocketstore.client import Message, Producer
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text("accounts: []\n")     # would refuse all
    ns = start_namesrv(tmp_path)
    broker = start_broker(store, ns.addr)
    try:
        with Producer("PG-noacl", namesrv_addr=ns.addr) as p:
            assert p.send(Message("NoAclTopic", b"x")).status.name == "SEND_OK"
        assert "ACL" not in broker.output
    finally:
        assert broker.stop() == 0
        assert ns.stop() == 0


def test_broker_refuses_to_start_on_a_malformed_acl_file(tmp_path):
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(
        "accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, topicPerms: [topicA]}\n")
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\n")
    proc = subprocess.run([sys.executable, "-m", "rocketstore", "broker", str(store), "--listen",
                           "127.0.0.1:0", "-c", str(conf)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode != 0
    assert "accounts[0].topicPerms='topicA'" in proc.stderr, proc.stderr[-2000:]
    assert "listening on" not in proc.stderr
