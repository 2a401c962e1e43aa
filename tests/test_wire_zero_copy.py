"""Issue 22 item 2: the answers made of stored records (PULL_MESSAGE, VIEW_MESSAGE_BY_ID,
QUERY_MESSAGE) leave from views of the mapped commit log, never joined into new bytes, and the
mapping stays valid while such an answer is in flight, whatever retention or a closing store
does meanwhile.

In process: the encoded answers' bodies are views whose ``memoryview.obj`` is the commit
log's ``MappedFile``; a ``Connection`` on a real loopback socket whose peer does not read
keeps what the socket did not take as those views (its transport holds no copy), and the
peer then reads exactly the stored records, even after retention deleted the file or the
store closed. Over the wire: a real broker process answers a raw client's pull with the
records byte for byte as they are in the commit-log file, and stopping the broker with a
large answer in flight ends cleanly (the client gets the whole answer or a closed socket).
"""
from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.common.protocol import PullMessageRequest, ResponseCode
from rocketstore.remoting import headers
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import Connection
from rocketstore.remoting.zerocopy import RecordBody
from rocketstore.store._mapped import MappedFile

from rawwire import RawClient, frame
from servers import start_broker, start_namesrv

FILE = 1 << 20
SC = StoreConfig(mapped_file_size_commit_log=FILE, max_transfer_bytes_on_message_in_memory=16 << 20,
                 max_transfer_count_on_message_in_memory=64)
PULL_MESSAGE, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, SEND_MESSAGE = 11, 33, 12, 10
UPDATE_AND_CREATE_TOPIC = 17
SUB = 0x4


def _records_on_disk(store: MessageStore, messages) -> bytes:
    """The messages' records read from the commit-log files with plain file reads."""
    out = []
    for m in messages:
        start = m.commitlog_offset - m.commitlog_offset % FILE
        with open(os.path.join(store.commit_log_queue.store_path, f"{start:020d}"), "rb") as f:
            f.seek(m.commitlog_offset - start)
            out.append(f.read(m.store_size))
    return b"".join(out)


def _pull(b: Broker, topic: str, offset: int = 0, n: int = 32):
    r = b.pull_message(PullMessageRequest("cg", topic, 0, offset, max_msg_nums=n, sys_flag=SUB,
                                          subscription="*")).result(10)
    assert r.code == ResponseCode.SUCCESS, r
    return r


def _send(b: Broker, topic: str, bodies: list[bytes]) -> None:
    from brokering import send, wait_dispatched
    for i, body in enumerate(bodies):
        send(b, topic, body, 0, keys=f"k{i}")
    wait_dispatched(b)


@pytest.fixture
def broker(store_dir):
    with Broker.open(store_dir, BrokerConfig(), SC) as b:
        yield b


# -- the encoded answers are views of the mapping ---------------------------------------------

def _assert_views_of(body: object, files: set[int]) -> None:
    assert isinstance(body, RecordBody), type(body)
    for part in body.parts:
        assert isinstance(part, memoryview) and part.readonly
        assert isinstance(part.obj, MappedFile), part.obj
        assert id(part.obj) in files


def _commit_log_files(b: Broker) -> set[int]:
    return {id(mf) for mf in b.store.commit_log_queue.files}


def test_pull_answer_body_is_the_stored_records_as_views_of_the_mapped_commit_log(broker):
    _send(broker, "ZC", [b"%05d" % i * 20 for i in range(40)])
    r = _pull(broker, "ZC", 0, 40)
    assert len(r.messages) == 40
    cmd = RemotingCommand(PULL_MESSAGE, opaque=7)
    resp = headers.encode_pull_response(cmd, r)
    prefix, header, body = resp.encode_parts()
    _assert_views_of(body, _commit_log_files(broker))
    # one queue, written back to back: the 40 records are one contiguous view
    assert len(body.parts) == 1
    assert bytes(body) == _records_on_disk(broker.store, r.messages)
    assert struct.unpack(">i", prefix[:4])[0] == 4 + len(header) + len(body)


def test_view_and_query_answers_are_views_of_the_mapped_commit_log(broker):
    import rocketstore.remoting.requests as requests
    from rocketstore.remoting.broker_processor import BrokerProcessor
    _send(broker, "ZQ", [b"q" * 300, b"r" * 200])
    msgs = _pull(broker, "ZQ").messages
    proc = BrokerProcessor(broker)
    view = proc.view_message(None, RemotingCommand(VIEW_MESSAGE_BY_ID, opaque=1),
                             requests.ViewMessage(msgs[1].commitlog_offset))
    _assert_views_of(view.body, _commit_log_files(broker))
    assert bytes(view.body) == _records_on_disk(broker.store, msgs[1:])

    async def query():
        proc._blocking = lambda fn, *a: asyncio.get_running_loop().run_in_executor(None, fn, *a)
        handler = proc._handlers[QUERY_MESSAGE]
        cmd = RemotingCommand(QUERY_MESSAGE, opaque=2, ext_fields={
            "topic": "ZQ", "key": "k0", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(2 ** 62)})
        return await handler(None, cmd, requests.decode(cmd, "test"))
    ans = asyncio.run(query())
    assert ans.code == ResponseCode.SUCCESS, ans
    _assert_views_of(ans.body, _commit_log_files(broker))
    assert bytes(ans.body) == _records_on_disk(broker.store, msgs[:1])


# -- a connection writes the views and holds the rest as views --------------------------------

class _Peer:
    """A loopback TCP pair: ``server`` (non-blocking, for the Connection) and ``client`` (a
    blocking socket that reads only when told), both with small buffers."""

    def __init__(self) -> None:
        lsock = socket.create_server(("127.0.0.1", 0))
        self.client = socket.socket()
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.client.connect(lsock.getsockname())
        self.server, _ = lsock.accept()
        lsock.close()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.server.setblocking(False)

    def read_all(self, n: int) -> bytes:
        buf = bytearray()
        self.client.settimeout(10)
        while len(buf) < n:
            chunk = self.client.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
        return bytes(buf)


def _frame_len(data: bytes) -> int:
    return 4 + struct.unpack(">i", data[:4])[0]


def _send_and_hold(messages, after_send) -> tuple[bytes, bytes, dict]:
    """Send a pull answer of ``messages`` on a Connection whose peer does not read; run
    ``after_send()`` (on the loop) while the answer is in flight; then read it all.
    Returns (expected frame, frame read, what was seen in flight)."""
    resp = RemotingCommand(0, opaque=3, flag=1, ext_fields={"nextBeginOffset": "1"},
                           body=RecordBody.of(messages))
    prefix, header, body = resp.encode_parts()
    expected = prefix + header + bytes(body)
    peer = _Peer()
    seen: dict = {}
    got: list[bytes] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        conn = Connection(None)
        transport, _ = await loop.connect_accepted_socket(lambda: conn, sock=peer.server)
        conn.send(resp)
        vw = conn._vw
        seen["transport_buffer"] = transport.get_write_buffer_size()
        seen["held"] = vw.nbytes if vw is not None else 0
        seen["held_views_of"] = ({type(getattr(p, "obj", p)).__name__ for p in vw.queue}
                                 if vw else set())
        after_send()
        reader = threading.Thread(target=lambda: got.append(peer.read_all(len(expected))))
        reader.start()
        while reader.is_alive():
            await asyncio.sleep(0.01)
        seen["held_after"] = vw.nbytes if vw is not None else 0
        conn.close()
        await asyncio.sleep(0)
    try:
        asyncio.run(main())
    finally:
        peer.client.close()
        # the transport owned it; closed here too in case the loop ended before the
        # transport's own close ran (a socket left to the GC warns in a later test)
        peer.server.close()
    return expected, got[0], seen


def _big_messages(store: MessageStore, n: int = 6, size: int = 150_000):
    for i in range(n):
        assert store.put_message(Message("Big", bytes([65 + i]) * size)).status.name == "PUT_OK"
    deadline = time.monotonic() + 10
    while store.dispatch_behind_bytes():
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.002)
    r = store.get_message("g", "Big", 0, 0, n)
    assert len(r.messages) == n
    return r.messages


def test_an_answer_the_peer_does_not_read_waits_as_views_not_copies(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), SC) as store:
        msgs = _big_messages(store)
        expected, got, seen = _send_and_hold(msgs, lambda: None)
    assert got == expected
    # the socket took a little; the rest waits as views of the mapping, none in the transport
    assert seen["held"] > 0 and seen["transport_buffer"] == 0, seen
    held = seen["held_views_of"]
    assert held <= {"MappedFile", "bytes"} and "MappedFile" in held, held
    assert seen["held_after"] == 0


def test_retention_deleting_the_file_under_an_answer_in_flight_keeps_its_bytes(tmp_path):
    with MessageStore.open(str(tmp_path / "s"), SC) as store:
        msgs = _big_messages(store, n=12)        # ~1.8 MiB: two commit-log files
        first = [m for m in msgs if m.commitlog_offset < FILE]
        mf = store.commit_log_queue.files[0]
        path = mf.path
        before = _records_on_disk(store, first)

        def retention() -> None:
            q = store.commit_log_queue
            assert q.delete_expired_file_by_time(0, clean_immediately=True, batch_max=1) == 1
            q.release_retired(0.0)
            assert not os.path.exists(path)
            assert mf.is_mapped            # the views in flight pin the mapping
        expected, got, seen = _send_and_hold(first, retention)
        assert seen["held"] > 0
        assert got == expected and expected.endswith(before)
        del first, msgs, expected
        gc.collect()
        assert not mf.is_mapped            # the last view went: unmapped, nothing leaked


def test_closing_the_store_under_an_answer_in_flight_keeps_its_bytes(tmp_path):
    store = MessageStore.open(str(tmp_path / "s"), SC)
    msgs = _big_messages(store)
    before = _records_on_disk(store, msgs)
    expected, got, seen = _send_and_hold(msgs, store.close)
    assert seen["held"] > 0
    assert got == expected and expected.endswith(before)


# -- over the wire: a broker process and a raw client -------------------------------------------

# the broker process on each event loop: under uvloop the answers' views go through uvloop's
# transport (``writelines``), under asyncio (before 3.12) through the connection's own writer
LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None,
    reason="uvloop is not installed (pyproject's test extra installs it)"))]


@pytest.fixture(params=LOOPS)
def cluster(tmp_path: Path, request, monkeypatch):
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", request.param)
    ns = start_namesrv(tmp_path)
    conf = {"mappedFileSizeCommitLog": str(FILE),
            "maxTransferBytesOnMessageInMemory": str(16 << 20),
            "maxTransferCountOnMessageInMemory": "64"}
    b = start_broker(tmp_path / "store", ns.addr, conf)
    assert f"event loop: {request.param}" in b.output, b.output
    try:
        yield tmp_path / "store", b
    finally:
        b.stop()
        ns.stop()


def _send_fields(topic: str) -> dict[str, object]:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 1, "queueId": 0, "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
            "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}


def _pull_fields(topic: str, n: int) -> dict[str, object]:
    return {"consumerGroup": "cg", "topic": topic, "queueId": 0, "queueOffset": 0,
            "maxMsgNums": n, "sysFlag": SUB, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subscription": "*", "subVersion": 0}


def _fill(addr: str, topic: str, bodies: list[bytes]) -> list[int]:
    with RawClient(addr) as c:
        h, _ = c.call(UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1,
            "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert h["code"] == 0, h
        offsets = []
        for body in bodies:
            h, _ = c.call(SEND_MESSAGE, _send_fields(topic), body)
            assert h["code"] == 0, h
            offsets.append(int(h["extFields"]["msgId"][-16:], 16))
    return offsets


def _disk(store: Path, offset: int, n: int) -> bytes:
    start = offset - offset % FILE
    with open(store / "commitlog" / f"{start:020d}", "rb") as f:
        f.seek(offset - start)
        return f.read(n)


def _assert_stored(store: Path, body: bytes) -> int:
    """Every record of ``body`` equals the bytes at its offset in the commit-log files;
    returns how many records."""
    pos = n = 0
    while pos < len(body):
        size = struct.unpack_from(">i", body, pos)[0]
        offset = struct.unpack_from(">q", body, pos + 28)[0]
        assert body[pos:pos + size] == _disk(store, offset, size), f"record at {offset}"
        pos += size
        n += 1
    assert pos == len(body)
    return n


def test_a_raw_pull_gets_the_records_exactly_as_stored(cluster):
    store, b = cluster
    bodies = [bytes([97 + i % 26]) * (100 + 37 * i) for i in range(30)]
    offsets = _fill(b.addr, "ZW", bodies)
    deadline = time.monotonic() + 10
    with RawClient(b.addr) as c:
        while True:
            h, body = c.call(PULL_MESSAGE, _pull_fields("ZW", 64))
            if h["code"] == 0 and int(h["extFields"]["nextBeginOffset"]) == 30:
                break
            assert time.monotonic() < deadline, h       # dispatch not done yet: ask again
            time.sleep(0.05)
        view_h, view_body = c.call(VIEW_MESSAGE_BY_ID, {"offset": offsets[5]})
    assert body == _disk(store, offsets[0], len(body))     # one file, back to back
    assert _assert_stored(store, body) == 30
    assert struct.unpack_from(">q", body, 28)[0] == offsets[0]     # the first record's offset
    assert view_h["code"] == 0 and view_body == _disk(store, offsets[5], len(view_body))
    assert struct.unpack_from(">i", view_body, 0)[0] == len(view_body)


def test_stopping_the_broker_under_a_large_answer_in_flight_ends_cleanly(cluster):
    store, b = cluster
    _fill(b.addr, "ZS", [bytes([65 + i]) * 200_000 for i in range(10)])     # ~2 MiB
    host, port = b.addr.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    try:
        deadline = time.monotonic() + 10
        while True:       # one pull at a time until the whole queue is in one answer
            sock.sendall(frame(PULL_MESSAGE, _pull_fields("ZS", 64)))
            sock.settimeout(10)
            head = b""
            while len(head) < 8:
                head += sock.recv(8 - len(head))
            total, hlen = struct.unpack(">ii", head)
            header = b""
            while len(header) < (hlen & 0xFFFFFF):
                header += sock.recv((hlen & 0xFFFFFF) - len(header))
            next_begin = json.loads(header).get("extFields", {}).get("nextBeginOffset")
            if total > 1_000_000 and next_begin == "10":
                break       # all 10 records in one answer: most of it is still at the broker
            rest = b""      # fewer (dispatch not done yet): read it all, ask again
            while len(rest) < total - 4 - len(header):
                rest += sock.recv(total - 4 - len(header) - len(rest))
            assert time.monotonic() < deadline, header
            time.sleep(0.05)
        rc = b.stop()
        assert rc == 0, b.output          # no crash (a segfault would be -11)
        data = b""
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        # the whole answer, or a connection closed part way: never other bytes
        assert len(data) <= total - 4 - len(header)
        if len(data) == total - 4 - len(header):
            assert _assert_stored(store, data) == 10
    finally:
        sock.close()
