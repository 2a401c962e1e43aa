"""The wire's send lane reached from a send's header text (issue 22): through
``BrokerProcessor.process``, once the whole path chose a warm lane for a header, the next
sends with the same producer group, topic, default topic and queue-nums text are stored by
that lane from the header fields in C, without a decoded request. Only a broker without ACL
takes it; anything the C reader or the lane does not take goes the whole way."""
from __future__ import annotations

import pytest

from rocketstore.common import ResponseCode
from rocketstore.errors import RemotingProtocolError
from rocketstore.remoting import requests
from rocketstore.remoting.broker_processor import BrokerProcessor
from rocketstore.remoting.command import RemotingCommand
from test_wire_send_lane import TOPIC, _command, _conn, _stored


@pytest.fixture
def broker(inproc_broker):
    return inproc_broker


def _decodes(monkeypatch) -> list:
    """The sends ``requests.decode`` decoded (the header lane decodes none it stores)."""
    calls: list = []
    orig = requests.decode

    def counted(cmd, peer):
        calls.append(cmd.opaque)
        return orig(cmd, peer)
    monkeypatch.setattr(requests, "decode", counted)
    return calls


def test_a_warm_lane_takes_sends_from_the_headers_text(broker, monkeypatch):
    """Through ``process``, the third send on decodes nothing: the lane reads the header's
    fields in C. The same text with one field another way (queue nums "04") or a field that
    does not parse goes the whole way, which stores or refuses it as before."""
    decoded = _decodes(monkeypatch)
    proc = BrokerProcessor(broker)
    for i in range(6):
        assert proc.process(_conn(), _command(i)).code == ResponseCode.SUCCESS
    assert decoded == [100, 101, 102]       # created, warmed, remembered its header text
    assert len(_stored(broker)) == 6
    r = proc.process(_conn(), _command(6, d="04"))          # another text: the whole way
    assert r.code == ResponseCode.SUCCESS and decoded[-1] == 106
    # not a number: the decoder refuses it (the connection answers SYSTEM_ERROR)
    with pytest.raises(RemotingProtocolError, match="queueId"):
        proc.process(_conn(), _command(7, e="1x"))
    assert decoded[-1] == 107
    # a batch header: the whole way, which reads the body as a batch's
    with pytest.raises(RemotingProtocolError, match="batch body"):
        proc.process(_conn(), _command(8, m="true"))
    assert decoded[-1] == 108
    assert len(_stored(broker)) == 7
    puts, _, _, _, _ = broker.metrics.counters()
    assert puts[TOPIC] == 7


def test_sends_of_the_first_version_take_their_own_header_lane(broker, monkeypatch):
    """SEND_MESSAGE (long field names) reaches the same lane under its own header text, and
    stores what SEND_MESSAGE_V2 stores."""
    decoded = _decodes(monkeypatch)
    proc = BrokerProcessor(broker)
    long_names = dict(zip("abcdefghijklm", (
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
        "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
        "maxReconsumeTimes", "batch")))
    for i in range(4):
        v2 = _command(i)
        v1 = RemotingCommand(10, opaque=200 + i, body=v2.body,
                             ext_fields={long_names[k]: v for k, v in v2.ext_fields.items()})
        assert proc.process(_conn(), v2).code == ResponseCode.SUCCESS
        assert proc.process(_conn(), v1).code == ResponseCode.SUCCESS
    # created the topic (V2), warmed the lane (V1), then each header text remembered
    assert decoded == [100, 200, 101, 201]
    got = _stored(broker)
    assert len(got) == 8
    assert [g[3:] for g in got[0::2]] == [g[3:] for g in got[1::2]]


def test_with_the_acl_on_no_send_skips_it(broker, tmp_path, monkeypatch):
    """A warm header lane is for brokers without ACL only: once the validator is on, an
    unsigned send is refused, not stored, though its header names the warm lane."""
    from rocketstore.acl import PlainAccessValidator
    proc = BrokerProcessor(broker)
    for i in range(4):
        assert proc.process(_conn(), _command(i)).code == ResponseCode.SUCCESS
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n- {accessKey: RocketMQ, secretKey: 12345678, "
                    "defaultTopicPerm: PUB}\n")
    with PlainAccessValidator(str(path), watch=False) as v:
        proc.acl = v
        r = proc.process(_conn(), _command(4))
        assert r.code == ResponseCode.SYSTEM_ERROR and b"No accessKey" in r.encode()
    assert len(_stored(broker)) == 4


def _cpp_frame(i: int) -> bytes:
    """A SEND_MESSAGE as the C++ client (rocketmq 0.4.4) writes it: long names, numbers as
    JSON numbers, its own extra fields, ``batch`` "0", version 63."""
    import json
    import struct
    header = json.dumps({"code": 10, "extFields": {
        "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x", "batch": "0",
        "bornTimestamp": str(1_700_000_000_000 + i), "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "flag": 0, "producerGroup": "cpp-pg",
        "properties": f"KEYS\u0001k{i}\u0002TAGS\u0001t\u0002UNIQ_KEY\u0001U{i:030d}"
                      "\u0002WAIT\u0001true\u0002",
        "queueId": 1, "reconsumeTimes": "0", "sysFlag": 0, "topic": TOPIC, "unitMode": "0"},
        "flag": 0, "language": "CPP", "opaque": 300 + i, "remark": "", "version": 63},
        separators=(",", ":")).encode()
    body = b"cpp-%d" % i
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def test_the_cpp_clients_sends_take_the_header_lane(broker, monkeypatch):
    """The C++ client's SEND_MESSAGE (JSON numbers, extra fields) is read by the C reader:
    after the first sends, none is decoded, and each is stored."""
    from rocketstore.remoting.command import FrameDecoder
    decoded = _decodes(monkeypatch)
    proc = BrokerProcessor(broker)
    dec = FrameDecoder()
    for i in range(6):
        (cmd,) = dec.feed(_cpp_frame(i))
        assert proc.process(_conn(), cmd).code == ResponseCode.SUCCESS
    assert decoded == [300, 301, 302]
    got = _stored(broker)
    assert [g[3] for g in got] == [b"cpp-%d" % i for i in range(6)]
    # stored as the full path stores them: the client's keys, CLUSTER added, WAIT dropped
    assert [(g[9]["KEYS"], g[9]["UNIQ_KEY"], "CLUSTER" in g[9], "WAIT" in g[9])
            for g in got] == [(f"k{i}", f"U{i:030d}", True, False) for i in range(6)]
