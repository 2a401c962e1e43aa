"""The HA wire protocol byte for byte (docs/replication.md §3), against an in-process master's HA port with
a raw socket as the slave, and the slave's append path (``CommitLog.append_replicated``)."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker import Broker, BrokerConfig

FILE = 64 * 1024


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "master closed the HA connection"
        out += chunk
    return out


def _frame(sock: socket.socket) -> tuple[int, bytes]:
    offset, size = struct.unpack(">qi", _read(sock, 12))
    return offset, _read(sock, size)


@pytest.fixture
def master(tmp_path):
    b = Broker.open(tmp_path / "m", BrokerConfig(broker_role="ASYNC_MASTER",
                                                 ha_send_heartbeat_interval=300,
                                                 ha_transfer_batch_size=4096),
                    StoreConfig(mapped_file_size_commit_log=FILE))
    b.start_ha("127.0.0.1", 0)
    yield b
    b.close()


def test_frames_raw_bytes_batch_limit_file_boundary_heartbeat(master):
    for i in range(600):
        master.store.put_message(Message("W", b"x" * (100 + i % 50)))
    top = master.store.get_max_phy_offset()
    assert top > 2 * FILE
    host, port = master.ha_service.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">q", 0))         # an empty slave: request offset 0
        at = top - top % FILE                   # the master's last file only
        got = bytearray()
        while at + len(got) < top:
            offset, body = _frame(s)
            assert offset == at + len(got)
            assert 0 < len(body) <= 4096        # haTransferBatchSize
            # never across a file
            assert offset // FILE == (offset + len(body) - 1) // FILE
            got += body
        mf = master.store.commit_log_queue.find_mapped_file_by_offset(at)
        assert bytes(got) == mf.read_bytes(0, top - at)
        s.sendall(struct.pack(">q", top))       # ack
        t0 = time.monotonic()
        offset, body = _frame(s)                # idle: a heartbeat frame (next offset, 0)
        assert (offset, body) == (top, b"")
        assert time.monotonic() - t0 >= 0.2
    # the ack counted
    assert master.ha_service.push2slave_max_offset == top


def test_report_beyond_master_end_closes_and_acks_nothing(master):
    master.store.put_message(Message("W", b"y"))
    top = master.store.get_max_phy_offset()
    host, port = master.ha_service.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">q", top + 1000))    # first report: the request offset
        time.sleep(0.3)                             # (one read takes the latest report only)
        s.sendall(struct.pack(">q", top + 1000))    # a later one past the end: closed
        s.settimeout(5)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        # only heartbeats at the requested offset may have come; no bytes of the log
        assert len(data) % 12 == 0
        for i in range(0, len(data), 12):
            assert struct.unpack_from(">qi", data, i) == (top + 1000, 0)
    assert master.ha_service.push2slave_max_offset == 0


def test_append_replicated_offsets_and_rolls(tmp_path):
    with MessageStore.open(tmp_path / "s", StoreConfig(mapped_file_size_commit_log=FILE)) as st:
        st.set_slave(True)
        assert not st.put_message(Message("W", b"z")).ok         # a slave refuses puts
        cl = st.commit_log
        assert cl.append_replicated(FILE + 5, b"abc") == -1      # empty: file boundary only
        assert cl.append_replicated(3 * FILE, b"\1" * 100) == 3 * FILE + 100
        assert cl.get_min_offset() == 3 * FILE                   # starts where the master is
        assert cl.append_replicated(3 * FILE + 50, b"x") == -1   # not its end: refused
        assert cl.append_replicated(3 * FILE + 100, b"\2" * (FILE - 100)) == 4 * FILE
        assert cl.append_replicated(4 * FILE, b"\3" * (FILE + 1)) == -1   # never across files
        assert cl.append_replicated(4 * FILE, b"\3" * 10) == 4 * FILE + 10   # rolled
        assert cl.get_max_offset() == 4 * FILE + 10
        files = st.commit_log_queue.files
        assert [f.file_from_offset for f in files] == [3 * FILE, 4 * FILE]
        assert files[0].read_bytes(0, FILE) == b"\1" * 100 + b"\2" * (FILE - 100)


def test_slave_broker_refuses_puts_and_runs_no_schedule_or_transaction_check(tmp_path):
    from rocketstore.errors import SlaveStoreError
    from rocketstore.store.status import PutMessageStatus
    with Broker.open(tmp_path / "s", BrokerConfig(broker_role="SLAVE", broker_id=1)) as slave:
        assert slave.schedule_service is None and slave.transaction_service is None
        r = slave.store.put_message(Message("W", b"z"))
        assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert isinstance(r.error, SlaveStoreError)
        assert slave.store.get_max_phy_offset() == 0
    with Broker.open(tmp_path / "m", BrokerConfig(broker_role="SYNC_MASTER")) as master:
        assert master.schedule_service is not None and master.transaction_service is not None
        assert master.store.put_message(Message("W", b"z")).ok


def test_sync_master_with_sync_flush_statuses(tmp_path):
    """SYNC_MASTER + SYNC_FLUSH: PUT_OK once flushed and acknowledged; with the slave gone
    SLAVE_NOT_AVAILABLE (the replica's verdict wins); WAIT=false never waits."""
    from rocketstore.store.status import PutMessageStatus as S
    sc = StoreConfig(mapped_file_size_commit_log=FILE, flush_disk_type="SYNC_FLUSH")
    master = Broker.open(tmp_path / "m", BrokerConfig(broker_role="SYNC_MASTER",
                                                      slave_timeout=1000), sc)
    try:
        addr = master.start_ha("127.0.0.1", 0)
        slave = Broker.open(tmp_path / "s", BrokerConfig(broker_role="SLAVE", broker_id=1,
                                                         ha_master_address=addr), sc)
        try:
            slave.start_ha("127.0.0.1", 0)
            deadline = time.monotonic() + 10
            while master.ha_service.connection_count == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            futs = [master.store.put_message_async(Message("W", b"v%d" % i)) for i in range(200)]
            assert {f.result(10).status for f in futs} == {S.PUT_OK}
            end = master.store.get_max_phy_offset()
            assert master.store.commit_log.flushed_where >= end
            assert slave.store.get_max_phy_offset() == end
        finally:
            slave.close()
        deadline = time.monotonic() + 10
        while master.ha_service.connection_count and time.monotonic() < deadline:
            time.sleep(0.01)
        r = master.store.put_message_async(Message("W", b"gone")).result(10)
        assert r.status == S.SLAVE_NOT_AVAILABLE
        nowait = Message("W", b"nowait", properties={"WAIT": "false"})
        assert master.store.put_message_async(nowait).result(10).status == S.PUT_OK
    finally:
        master.close()


def test_a_record_cut_by_a_dead_master_is_reported_once_per_position(tmp_path, caplog):
    """A slave whose master died in the middle of sending a record holds that record's first
    bytes: dispatch cannot read it and waits (it may still come). That is said once for the
    position, not every second; when the rest arrives and a later record is cut, that new
    position is said once too."""
    import logging
    with MessageStore.open(tmp_path / "m", StoreConfig(mapped_file_size_commit_log=FILE)) as m:
        offsets = [m.put_message(Message("Cut", b"r%d" % i * 50)).commitlog_offset
                   for i in range(3)]
        end = m.get_max_phy_offset()
        data = m.commit_log_queue.files[0].read_bytes(0, end)
    first_cut, second_cut = offsets[1] + 20, offsets[2] + 20      # inside records 2 and 3
    said = "dispatch cannot read a record"

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if said in r.getMessage()]

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(lines()) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(lines()) >= n, lines()
    caplog.set_level(logging.WARNING, logger="rocketstore")
    with MessageStore.open(tmp_path / "s", StoreConfig(mapped_file_size_commit_log=FILE)) as st:
        st.set_slave(True)
        cl = st.commit_log
        assert cl.append_replicated(0, data[:first_cut]) == first_cut
        wait_for(1)
        time.sleep(2.5)                 # dispatch retries every second: no new line for it
        assert len(lines()) == 1 and f"offset {offsets[1]}" in lines()[0]
        assert cl.append_replicated(first_cut, data[first_cut:second_cut]) == second_cut
        wait_for(2)
        time.sleep(2.5)
        assert len(lines()) == 2 and f"offset {offsets[2]}" in lines()[1]
        assert st.get_max_offset_in_queue("Cut", 0) == 2        # the whole ones dispatched
