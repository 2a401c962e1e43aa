"""Request-reply in process (issue 26 item 1): ``Producer.request`` / ``request_async``,
``create_reply_message``, the broker's push and store of a reply, and the errors a user gets.
The wire side (324/325 -> 326, our clients over TCP) is in test_wire_parity.py."""
from __future__ import annotations

import threading

import pytest

from rocketstore import TopicConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.client import (ConsumeConcurrentlyStatus, Message, Producer, PushConsumer,
                                create_reply_message)
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import MQBrokerError, MQClientError, RequestTimeoutError

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


def open_broker(store_dir, **cfg):
    b = Broker.open(store_dir, BrokerConfig(**cfg))
    b.store.update_topic_config(TopicConfig("Rpc", 2, 2))
    return b


def replier(broker, producer: Producer, seen: list | None = None, how: str = "send"
            ) -> PushConsumer:
    """A consumer of Rpc answering each request with ``how``: any send of a reply is a reply
    (SEND_REPLY_MESSAGE_V2), as Java's client picks the code by MSG_TYPE."""
    def answer(msgs, ctx):
        for m in msgs:
            if seen is not None:
                seen.append(m)
            r = create_reply_message(m, b"re:" + bytes(m.body))
            if how == "send":
                producer.send(r)
            elif how == "send_async":
                producer.send_async(r).result(30)
            elif how == "send_future":
                producer.send_future(r).result(30)
            else:
                producer.send_oneway(r)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    c = PushConsumer("rpc-cg", broker=broker)
    c.subscribe("Rpc", "*")
    c.register_message_listener(answer)
    return c.start() or c


def test_request_gets_its_reply_and_the_reply_is_stored(store_dir):
    with open_broker(store_dir) as b, Producer("rpc-client", broker=b) as client, \
            Producer("rpc-server", broker=b) as server:
        seen: list = []
        c = replier(b, server, seen)
        try:
            reply = client.request(Message("Rpc", b"ping"), 30_000)
            futs = [client.request_async(Message("Rpc", b"%d" % i), 30_000) for i in range(3)]
            # to a chosen queue, as DefaultMQProducer.request(msg, mq, timeout)
            mq = client.publish_info("Rpc").message_queues[1]
            futs.append(client.request_async(Message("Rpc", b"3"), 30_000, message_queue=mq))
            got = sorted(bytes(f.result(30).body) for f in futs)
        finally:
            c.shutdown()
        assert bytes(reply.body) == b"re:ping" and got == [b"re:0", b"re:1", b"re:2", b"re:3"]
        # what the replier saw: the request with the properties the reply needs
        assert next(m for m in seen if bytes(m.body) == b"3").queue_id == 1
        req = next(m for m in seen if bytes(m.body) == b"ping")
        p = req.properties
        assert p["CLUSTER"] == "DefaultCluster" and p["TTL"] == "30000"
        assert p["REPLY_TO_CLIENT"] == client._instance.client_id
        # the reply as the requester got it
        rp = reply.properties
        assert reply.topic == REPLY_TOPIC and rp["MSG_TYPE"] == "reply"
        assert rp["CORRELATION_ID"] == p["CORRELATION_ID"]
        assert int(rp["ARRIVE_TIME"]) >= int(rp["PUSH_REPLY_TIME"]) > 0
        assert reply.store_host == b.store_host
        # storeReplyMessageEnable (default true): the five replies are in the reply topic,
        # stored as the replier sent them (no PUSH_REPLY_TIME, no CLUSTER)
        b.store.wait_dispatched()
        assert b.get_max_offset(REPLY_TOPIC, 0) == 5
        stored = b.store.get_message("g", REPLY_TOPIC, 0, 0, 5).messages
        assert {bytes(m.body) for m in stored} == {b"re:ping", b"re:0", b"re:1", b"re:2", b"re:3"}
        assert all("PUSH_REPLY_TIME" not in m.properties and "CLUSTER" not in m.properties
                   for m in stored)


@pytest.mark.parametrize("how", ["send_async", "send_future", "send_oneway"])
def test_replies_not_stored_when_disabled(store_dir, how):
    with open_broker(store_dir, store_reply_message_enable=False) as b, \
            Producer("rpc-client", broker=b) as client, Producer("rpc-server", broker=b) as s:
        c = replier(b, s, how=how)
        try:
            assert bytes(client.request(Message("Rpc", b"x"), 30_000).body) == b"re:x"
        finally:
            c.shutdown()
        b.store.wait_dispatched()
        assert b.get_max_offset(REPLY_TOPIC, 0) == 0


def test_no_reply_in_time_raises_request_timeout_error(store_dir):
    with open_broker(store_dir) as b, Producer("rpc-client", broker=b) as client:
        with pytest.raises(RequestTimeoutError) as ei:
            client.request(Message("Rpc", b"nobody listens"), 200)
        assert isinstance(ei.value, TimeoutError) and ei.value.sent
        assert "send request message to <Rpc> OK, but wait reply message timeout, 200 ms" \
            in str(ei.value)
        fut = client.request_async(Message("Rpc", b"nor here"), 200)
        with pytest.raises(RequestTimeoutError):
            fut.result(30)
        with pytest.raises(MQClientError, match="timeout"):
            client.request(Message("Rpc", b"x"), 0)


def test_a_reply_needs_a_request_that_came_through_a_broker(store_dir):
    with pytest.raises(MQClientError, match=r"property\[CLUSTER\] is null"):
        create_reply_message(Message("Rpc", b"never sent"), b"x")
    with open_broker(store_dir) as b, Producer("rpc-server", broker=b) as server:
        # a reply to a requester that is not connected: the broker cannot push it
        orphan = create_reply_message(Message("Rpc", b"q", properties={
            "CLUSTER": "DefaultCluster", "CORRELATION_ID": "c-1", "REPLY_TO_CLIENT": "gone@1",
            "TTL": "3000"}), b"late")
        with pytest.raises(MQBrokerError) as ei:
            server.send(orphan)
        assert ei.value.code == ResponseCode.SYSTEM_ERROR
        assert "channel of <gone@1> not found" in str(ei.value)


def test_a_reply_arriving_after_the_timeout_is_dropped(store_dir):
    """The requester gave up: the late reply is taken (SEND_OK for the replier) and dropped."""
    with open_broker(store_dir) as b, Producer("rpc-client", broker=b) as client, \
            Producer("rpc-server", broker=b) as server:
        release = threading.Event()
        requests: list = []

        def slow(msgs, ctx):
            requests.extend(msgs)
            release.wait(30)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        c = PushConsumer("rpc-slow", broker=b)
        c.subscribe("Rpc", "*")
        c.register_message_listener(slow)
        c.start()
        try:
            with pytest.raises(RequestTimeoutError):
                client.request(Message("Rpc", b"slow"), 300)
            got_it = threading.Event()
            for _ in range(3000):           # the listener holds the request (or soon will)
                if requests:
                    got_it.set()
                    break
                got_it.wait(0.01)
            assert requests, "the consumer never received the request"
            release.set()
            late = server.send(create_reply_message(requests[0], b"too late"))
            assert late.status.name == "SEND_OK"
        finally:
            release.set()
            c.shutdown()


def test_async_producer_request_and_send_reply(store_dir):
    import asyncio

    from rocketstore.aio import AsyncProducer

    async def main() -> bytes:
        with open_broker(store_dir) as b:
            async with AsyncProducer("rpc-client", broker=b) as client, \
                    AsyncProducer("rpc-server", broker=b) as server:
                loop = asyncio.get_running_loop()

                def answer(msgs, ctx):
                    for m in msgs:
                        asyncio.run_coroutine_threadsafe(
                            server.send_reply(m, b"re:" + bytes(m.body)), loop).result(30)
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
                c = PushConsumer("rpc-cg", broker=b)
                c.subscribe("Rpc", "*")
                c.register_message_listener(answer)
                c.start()
                try:
                    return bytes((await client.request(Message("Rpc", b"aio"), 30_000)).body)
                finally:
                    c.shutdown()
    assert asyncio.run(main()) == b"re:aio"


def test_a_reply_after_plain_sends_to_the_reply_topic_is_still_a_reply(store_dir):
    """Plain messages sent to the reply topic (which takes the in-process send lane after the
    first) do not make a later reply a plain send: it still goes as SEND_REPLY_MESSAGE_V2,
    here refused because its requester is not connected."""
    with open_broker(store_dir) as b, Producer("rpc-server", broker=b) as server:
        for i in range(3):
            assert server.send(Message(REPLY_TOPIC, b"plain %d" % i)).status.name == "SEND_OK"
        orphan = create_reply_message(Message("Rpc", b"q", properties={
            "CLUSTER": "DefaultCluster", "CORRELATION_ID": "c-2", "REPLY_TO_CLIENT": "gone@2",
            "TTL": "3000"}), b"late")
        with pytest.raises(MQBrokerError, match="channel of <gone@2> not found"):
            server.send(orphan)
