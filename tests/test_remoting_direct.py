"""A client's requests written by the calling thread (rocketstore.remoting.direct): answered
as before, from many threads at once, and timed out by the loop's sweep."""
from __future__ import annotations

import threading
import time

import pytest

from rocketstore.errors import TransportError
from rocketstore.remoting.client import RemotingClient
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.direct import ClientConnection
from rocketstore.remoting.server import LoopThread, RemotingServer

ECHO, MUTE = 105, 999


class _Echo:
    """Answers ECHO with its own ``n`` field; never answers MUTE."""

    def process(self, conn, cmd):
        if cmd.code == MUTE:
            return None
        return cmd.response(0, cmd.ext_fields.get("n"))

    def connection_closed(self, conn) -> None:
        pass


@pytest.fixture(params=[False, True], ids=["asyncio", "uvloop"])
def setup(request):
    if request.param:
        pytest.importorskip("uvloop")
    server_loop = LoopThread("test-server", use_uvloop=False)
    server = RemotingServer(_Echo(), "127.0.0.1", 0)
    server_loop.run(server.start())
    client_loop = LoopThread("test-client", use_uvloop=request.param)
    c = RemotingClient(loop=client_loop)
    yield c, f"127.0.0.1:{server.port}", server
    c.close()
    client_loop.stop()
    server_loop.run(server.stop())
    server_loop.stop()


def _echo(c, addr, n, timeout=5.0):
    return c.invoke(addr, RemotingCommand.request(ECHO, {"n": str(n)}), timeout).remark


def test_requests_after_the_first_do_not_wake_the_loop_to_be_written(setup):
    c, addr, _ = setup
    assert _echo(c, addr, 0) == "0"                     # connects through the loop
    assert type(c._conns[addr]) is ClientConnection
    flushes = []
    real = c._flush
    c._flush = lambda: (flushes.append(1), real())[1]   # the loop's write of queued frames
    assert [_echo(c, addr, i) for i in range(1, 201)] == [str(i) for i in range(1, 201)]
    assert flushes == []


def test_threads_at_once_each_get_their_own_answers(setup):
    c, addr, _ = setup
    _echo(c, addr, -1)
    bad: list = []

    def run(k: int) -> None:
        futs = [(i, c.invoke_async(addr, RemotingCommand.request(ECHO, {"n": f"{k}-{i}"})))
                for i in range(150)]
        for i, f in futs:
            if f.result(10).remark != f"{k}-{i}":
                bad.append((k, i))
    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_a_request_written_by_its_caller_times_out_and_closes_the_connection(setup):
    c, addr, _ = setup
    _echo(c, addr, 1)
    conn = c._conns[addr]
    t0 = time.monotonic()
    with pytest.raises(TransportError, match="no response within 0.3 s"):
        c.invoke(addr, RemotingCommand.request(MUTE), timeout=0.3)
    assert time.monotonic() - t0 < 3
    deadline = time.monotonic() + 5
    while conn.is_open and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not conn.is_open                             # as RocketMQ: a timeout closes it
    assert _echo(c, addr, 2) == "2"                     # a new connection serves the next


def test_requests_made_while_answers_are_handled_leave_in_one_write(setup, monkeypatch):
    """Answers read at once whose handling sends new requests (a push consumer sends each
    queue's next pull from the last pull's answer, on the loop thread): the new requests
    leave together, in one write after the pass, and are answered as any other."""
    c, addr, _ = setup
    _echo(c, addr, 0)
    conn = c._conns[addr]
    # four requests the server leaves unanswered; their answers are then fed to the
    # connection at once, as one read would bring them
    reqs = [RemotingCommand.request(MUTE) for _ in range(4)]
    futs = [c.invoke_async(addr, r, 30) for r in reqs]
    follow: list = []
    for i, f in enumerate(futs):
        f.add_done_callback(lambda _f, i=i: follow.append(
            c.invoke_async(addr, RemotingCommand.request(ECHO, {"n": str(i)}), 5)))
    import rocketstore.remoting.direct as direct
    syscalls: list = []
    writes: list = []
    real_os_write, real_write = direct.os.write, conn._write
    monkeypatch.setattr(direct, "os", type("os", (), {
        "write": staticmethod(lambda fd, b: (syscalls.append(b), real_os_write(fd, b))[1])}))
    monkeypatch.setattr(conn, "_write", lambda data: (writes.append(bytes(data)),
                                                      real_write(data))[1])
    blob = b"".join(r.response(0, "answered").encode() for r in reqs)
    fed = threading.Event()
    c._loop.call(lambda: (conn.data_received(blob), fed.set()))
    assert fed.wait(5)
    assert [f.result(5).remark for f in futs] == ["answered"] * 4
    assert [f.result(5).remark for f in follow] == ["0", "1", "2", "3"]
    assert syscalls == []                   # none written on its own
    assert len(writes) == 1                 # the four in one write
    sent = FrameDecoder().feed(writes[0])
    assert [(cmd.code, cmd.ext_fields["n"]) for cmd in sent] == [(ECHO, str(i)) for i in range(4)]
