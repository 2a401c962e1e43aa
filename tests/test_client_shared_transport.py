"""One client id per connection (docs/messaging.md): clients of different client ids handed
the same ``TcpTransport`` each get their own connections, as RocketMQ's Java client gives each
``MQClientInstance`` its own channels.

A broker takes a heartbeat under a new client id on a connection as that connection's client
changing: the old id leaves every group (docs/protocol.md). Two clients sharing connections
would push each other out of their groups at every heartbeat. Real NameServer and broker
processes; the broker's group membership is read with raw frames.
"""
from __future__ import annotations

import json

import pytest

from rawwire import RawClient  # tests/rawwire.py
from servers import start_broker, start_namesrv

GET_CONSUMER_LIST_BY_GROUP, SUCCESS = 38, 0


@pytest.fixture
def shared_setup(tmp_path):
    """A NameServer and a broker (processes), a two-queue topic ``T_shared``, a user's
    ``TcpTransport`` and a list of clients: shut down, closed and stopped after the test."""
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.remoting.admin_client import AdminClient
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    shared = TcpTransport(ns.addr)
    clients: list = []
    try:
        with AdminClient(ns.addr) as admin:
            admin.update_topic("T_shared", read_queue_nums=2, write_queue_nums=2,
                               broker_addr=broker.addr)
        yield broker, shared, clients
    finally:
        for c in reversed(clients):
            c.shutdown()
        shared.close()
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def _members(c: RawClient, group: str) -> list[str]:
    h, body = c.call(GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    return sorted(json.loads(body)["consumerIdList"]) if h["code"] == SUCCESS else []


def test_clients_sharing_a_transport_keep_their_group_membership(shared_setup):
    from rocketstore.client import Message, Producer, PushConsumer
    broker, shared, clients = shared_setup
    for group, name in (("GA", "inst-a"), ("GB", "inst-b")):
        c = PushConsumer(group, broker=shared, instance_name=name)
        c.subscribe("T_shared", "*")
        c.register_message_listener(lambda msgs, ctx: "CONSUME_SUCCESS")
        clients.append(c.start())
    producer = Producer("PG_shared", broker=shared, instance_name="inst-p")
    clients.append(producer.start())
    a, b = clients[0], clients[1]
    assert len({a.client_id, b.client_id, producer._instance.client_id}) == 3
    # every client beats (as its 30 s timer does), in turn: after each beat both groups
    # still hold their member (sharing one connection, each beat pushed the others out)
    with RawClient(broker.addr) as raw:
        for inst in (a.instance, b.instance, producer._instance) * 3:
            inst.send_heartbeat_to_all_brokers()
            assert (_members(raw, "GA"), _members(raw, "GB")) == (
                [a.client_id], [b.client_id]), inst.client_id
    # the producer's own connection works
    assert producer.send(Message("T_shared", b"hello")).status.name == "SEND_OK"
    # the clients' connections are their own: one client id each
    assert len({id(c.transport) for c in (a, b)} | {id(producer._instance.transport)}) == 3
    assert shared in (a.transport, b.transport, producer._instance.transport)


def test_a_transport_refuses_a_heartbeat_of_a_second_client_id(tmp_path):
    """Called directly, a TcpTransport carries one client id: a heartbeat under another one is
    refused before anything is sent, naming both ids."""
    from rocketstore.client.tcp import TcpTransport
    from rocketstore.common.protocol import HeartbeatData
    from rocketstore.errors import MQClientError
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    t = TcpTransport(ns.addr)
    try:
        name = t.broker_names()[0]
        t.heartbeat(name, HeartbeatData("10.0.0.1@one", ["PG1"], []), None)
        with pytest.raises(MQClientError, match=r"10\.0\.0\.1@one.*10\.0\.0\.1@two"):
            t.heartbeat(name, HeartbeatData("10.0.0.1@two", ["PG2"], []), None)
        t.heartbeat(name, HeartbeatData("10.0.0.1@one", ["PG1"], []), None)
    finally:
        t.close()
        assert broker.stop() == 0, broker.output[-3000:]
        assert ns.stop() == 0


def test_a_users_transport_stays_open_when_a_client_using_it_shuts_down(shared_setup):
    """A transport the user made and handed to clients is the user's: a client shutting down
    closes only connections it made itself. The user's own calls on it go on working, so do
    the other clients and a client started on it again; the user closes it last."""
    from rocketstore.client import Message, Producer
    broker, shared, clients = shared_setup
    first = Producer("PG_own1", broker=shared, instance_name="inst-1").start()
    other = Producer("PG_own2", broker=shared, instance_name="inst-2").start()
    clients += [first, other]
    assert first._instance.transport is shared          # the first id uses it
    assert first.send(Message("T_shared", b"a")).status.name == "SEND_OK"
    first.shutdown()
    clients.remove(first)
    assert other.send(Message("T_shared", b"b")).status.name == "SEND_OK"
    assert shared.get_topic_route("T_shared") is not None  # the user's own call
    again = Producer("PG_own1", broker=shared, instance_name="inst-1").start()
    clients.append(again)
    assert again._instance.transport is shared
    assert again.send(Message("T_shared", b"c")).status.name == "SEND_OK"
