"""Apache RocketMQ's C++ client (PyPI ``rocketmq`` 0.4.4) against our NameServer and codec.

``rocketstore namesrv`` runs as a process; a recording remoting peer registers with it as a
broker, so the C++ producer looks the topic up in our route JSON, connects to the peer and
sends; the peer decodes what the C++ client wrote and answers in our encoding, which the C++
client must read back (status, message id, queue offset). The client runs in a subprocess: a
native crash there cannot take the test run down.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib

import pytest

from rocketstore.common.protocol import ResponseCode
from rocketstore.remoting.client import RemotingClient
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.server import LoopThread, RemotingServer

import rocketmq.client  # noqa: E402,F401  (the C++ client: the test extra installs rocketmq==0.4.4)

PRODUCER = textwrap.dedent("""
    import json, sys
    from rocketmq.client import Producer, Message
    p = Producer("PG-interop")
    p.set_namesrv_addr(sys.argv[1])
    p.start()
    out = []
    for i in range(3):
        m = Message("InteropT")
        m.set_keys("key-%d" % i)
        m.set_tags("TagA")
        m.set_property("color", "blue-%d" % i)
        m.set_body(("body-%d" % i).encode())
        r = p.send_sync(m)
        out.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    p.shutdown()
    print(json.dumps(out), flush=True)
""")


class RecordingBroker:
    """Answers SEND_MESSAGE like a broker would (offsets counting up) and records requests."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.offset = 100

    def process(self, conn, cmd):
        self.requests.append(cmd)
        if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            self.offset += 1
            return cmd.response(ResponseCode.SUCCESS, ext_fields={
                "msgId": "7F00000100002A9F%016X" % self.offset,
                "queueId": cmd.int_field("queueId"), "queueOffset": self.offset})
        return cmd.response(ResponseCode.SUCCESS)

    def connection_closed(self, conn) -> None:
        pass


@pytest.fixture
def namesrv(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore", "namesrv", "--listen",
                             "127.0.0.1:0"], stderr=subprocess.PIPE, text=True, env=env)
    line = ""
    while not line.startswith("rocketstore namesrv: listening on"):
        line = proc.stderr.readline()
        assert line, "namesrv exited before listening"
    yield line.strip().rsplit(" ", 1)[1]
    proc.terminate()
    assert proc.wait(10) == 0
    proc.stderr.close()


def test_cpp_producer_routes_through_our_namesrv_and_reads_our_responses(namesrv, tmp_path):
    loop = LoopThread(use_uvloop=False)
    peer = RecordingBroker()
    server = RemotingServer(peer, "127.0.0.1", 0)
    loop.run(server.start())
    client = RemotingClient(loop=loop)
    try:
        body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 1, "timestamp": 1},
            "topicConfigTable": {"InteropT": {"order": False, "perm": 6, "readQueueNums": 2,
                                              "topicFilterType": "SINGLE_TAG", "topicName": "InteropT",
                                              "topicSysFlag": 0, "writeQueueNums": 2}}}}).encode()
        r = client.invoke(namesrv, RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": "broker-a", "brokerAddr": f"127.0.0.1:{server.port}",
            "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:10912", "brokerId": 0,
            "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body))
        assert r.code == 0
        script = tmp_path / "producer.py"
        script.write_text(PRODUCER)
        proc = subprocess.run([sys.executable, str(script), namesrv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)))
        assert proc.returncode == 0, proc.stderr[-2000:]
        results = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        client.close()
        loop.run(server.stop())
        loop.stop()

    sends = [c for c in peer.requests if c.code == RequestCode.SEND_MESSAGE]
    assert len(sends) == 3
    for i, (cmd, res) in enumerate(zip(sends, results)):
        # what the C++ 1.2.x client writes, decoded by our codec
        assert cmd.language == LanguageCode.CPP and cmd.version == 63
        assert cmd.field("producerGroup") == "PG-interop" and cmd.field("topic") == "InteropT"
        assert cmd.field("defaultTopic") == "TBW102" and cmd.int_field("defaultTopicQueueNums") == 4
        assert cmd.int_field("queueId") in (0, 1) and cmd.bool_field("batch") is False
        props = dict(kv.split("\x01") for kv in cmd.field("properties").split("\x02") if kv)
        assert props["KEYS"] == f"key-{i}" and props["TAGS"] == "TagA"
        assert props["color"] == f"blue-{i}" and len(props["UNIQ_KEY"]) == 32
        assert cmd.body == f"body-{i}".encode()
        # our JSON response, read back by the C++ client: SEND_OK, its UNIQ_KEY, our offset
        assert res == {"status": 0, "msg_id": props["UNIQ_KEY"], "offset": 101 + i}
    # it found the broker through our route: the first request on the peer came after the lookup
    assert peer.requests[0].code in (RequestCode.SEND_MESSAGE, RequestCode.HEART_BEAT)
