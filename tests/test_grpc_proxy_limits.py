"""A hostile 5.x client cannot grow the gRPC proxy's memory without bound (docs/grpc.md
"Limits"): Telemetry streams, settings, announced groups, cached routes and types, pop locks
and waiting delay messages each have a cap or leave with their client.

A real NameServer and broker (processes) and the proxy serving gRPC on its own thread
(``LocalProxy``, as in the broker) with small limits, so the test can look at its tables;
every call is a raw gRPC call built from our protocol tables.
"""
from __future__ import annotations

import time

import grpc
import pytest

from grpc_support import Telemetry, _stub, local_proxy, md, status_code
from servers import wait_until

LIMITS = dict(max_clients=3, max_topics_per_client=5, max_groups=4,
              max_subscriptions_per_group=3, group_idle_ms=1000, route_cache_max=50,
              max_pending_delay_messages=2, max_polling_receives=3,
              max_polling_receives_per_connection=2)


_md, _code = md, status_code


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    from rocketstore.proxy.limits import ProxyLimits
    with local_proxy(tmp_path_factory.mktemp("grpc_limits"),
                     {"t_lim": "", "t_lim_delay": "DELAY"},
                     limits=ProxyLimits(**LIMITS)) as (local, _):
        yield local


def test_route_and_type_caches_keep_within_their_cap(proxy):
    """Routes and message types of 300 made-up topic names: the caches (LRU) stay at 50, and
    a real topic still answers."""
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    ch, query = _stub(proxy.addr, "QueryRoute", "QueryRouteRequest", "QueryRouteResponse")
    _, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    for i in range(150):
        req = pb.QueryRouteRequest()
        req.topic.name = f"nope_{i}"
        assert query(req, metadata=_md("c@route"), timeout=10).status.code == _code(
            "TOPIC_NOT_FOUND")
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"x")
        m.topic.name = f"nada_{i}"
        m.system_properties.message_id = f"01NADA{i}"
        assert send(sr, metadata=_md("c@route"), timeout=10).status.code == _code(
            "TOPIC_NOT_FOUND")
    assert len(svc._routes) <= 50 and len(svc._types) <= 50, (len(svc._routes),
                                                               len(svc._types))
    req = pb.QueryRouteRequest()
    req.topic.name = "t_lim"
    resp = query(req, metadata=_md("c@route"), timeout=10)
    assert resp.status.code == _code("OK") and len(resp.message_queues) == 2
    ch.close()


def test_telemetry_streams_are_bounded_and_a_client_leaves_with_its_stream(proxy):
    """Three client ids hold streams (the cap); a fourth is TOO_MANY_REQUESTS naming the
    setting; a second stream under a held id replaces the first (which ends); a closed
    stream's settings and producer topics leave the proxy, making room for a new client."""
    svc = proxy.server.service
    streams = [Telemetry(proxy.addr, f"c@{i}") for i in range(3)]
    try:
        for i, s in enumerate(streams):
            r = s.settings(topics=[f"t_lim_p{i}", "t_lim"])
            assert r.status.code == _code("OK"), r.status
        assert svc.registry.sizes()["producers"] == 4
        extra = Telemetry(proxy.addr, "c@extra")
        r = next(extra.replies)
        assert r.status.code == _code("TOO_MANY_REQUESTS"), r.status
        assert "grpcMaxClients=3" in r.status.message, r.status.message
        extra.close()
        assert "c@extra" not in svc.streams and "c@extra" not in svc.settings

        again = Telemetry(proxy.addr, "c@0")            # same id: replaces the old stream
        assert again.settings(topics=["t_lim_q0"]).status.code == _code("OK")
        with pytest.raises(StopIteration):
            next(streams[0].replies)                    # the old stream was ended
        streams[0] = again
        # c@0 now produces t_lim_q0 only (t_lim_p0 no longer announced); c@1, c@2 hold t_lim
        assert set(svc.registry._producers) == {"t_lim_q0", "t_lim_p1", "t_lim_p2", "t_lim"}

        streams[1].close()
        # its stream, settings and producer topic go; t_lim stays (c@2 produces it)
        wait_until(lambda: "c@1" not in svc.streams and "c@1" not in svc.settings and
                   set(svc.registry._producers) == {"t_lim_q0", "t_lim_p2", "t_lim"},
                   "c@1's stream, settings and topics gone", within=10)
        newcomer = Telemetry(proxy.addr, "c@new")
        assert newcomer.settings(topics=["t_lim"]).status.code == _code("OK")
        streams[1] = newcomer
    finally:
        for s in streams:
            s.close()
    wait_until(lambda: not svc.streams and not svc.settings, "every client gone", within=10)
    wait_until(lambda: svc.registry.sizes() == {"consumers": 0, "producers": 0, "holders": 0},
               "every producer topic gone", within=10)


def test_a_leaving_client_leaves_the_tables_even_when_its_handler_is_cancelled(proxy):
    """gRPC cancels a closed stream's handler again while its cleanup awaits (CI saw a closed
    client's producer topics stay for good): the tables are updated before any await, so a
    cancel at the first await, with every worker thread of the loop busy, loses nothing."""
    import asyncio
    import threading
    svc = proxy.server.service
    loop = svc._loop
    assert svc.registry.set_producer("c@cancel", ["t_lim_cancel", "t_lim"])
    svc.registry.add_consumer("g_lim_cancel", {"t_lim": "*"}, holder="c@cancel")
    release = threading.Event()

    async def forget_cancelled() -> None:
        # 40 blockers: more than the default executor's workers, so a job queued now waits
        busy = [loop.run_in_executor(None, release.wait) for _ in range(40)]
        task = asyncio.ensure_future(svc._forget("c@cancel"))
        await asyncio.sleep(0)                  # the task runs to its first await
        task.cancel()
        release.set()
        await asyncio.gather(*busy)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run_coroutine_threadsafe(forget_cancelled(), loop).result(timeout=30)
    assert svc.registry.sizes() == {"consumers": 0, "producers": 0, "holders": 0}


def test_settings_with_too_many_topics_or_bad_names_are_refused(proxy):
    """Settings naming more topics than grpcMaxTopicsPerClient, or a topic or group that
    breaks the name rule, are refused on the stream and hold nothing; the stream stays
    usable."""
    svc = proxy.server.service
    t = Telemetry(proxy.addr, "c@bad")
    try:
        r = t.settings(topics=[f"t_lim_{i}" for i in range(6)])
        assert r.status.code == _code("BAD_REQUEST"), r.status
        assert "grpcMaxTopicsPerClient=5" in r.status.message, r.status.message
        r = t.settings(topics=["t_lim", "../etc"])
        assert r.status.code == _code("ILLEGAL_TOPIC"), r.status
        r = t.settings(topics=["t_lim"], group="g/../x")
        assert r.status.code == _code("ILLEGAL_CONSUMER_GROUP"), r.status
        r = t.settings(topics=["t_lim", "bad topic"], group="g_ok")
        assert r.status.code == _code("ILLEGAL_TOPIC"), r.status
        assert "c@bad" not in svc.settings
        assert svc.registry.sizes() == {"consumers": 0, "producers": 0, "holders": 0}
        assert t.settings(topics=["t_lim"]).status.code == _code("OK")
    finally:
        t.close()


def test_consumer_groups_are_bounded_and_idle_ones_leave(proxy):
    """ReceiveMessage under made-up groups: at most grpcMaxGroups are announced (then
    TOO_MANY_REQUESTS), idle ones leave after grpcGroupIdleMillis, a group subscribes at most
    grpcMaxSubscriptionsPerGroup topics, and no pop lock outlives its receive."""
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    ch, receive = _stub(proxy.addr, "ReceiveMessage", "ReceiveMessageRequest",
                        "ReceiveMessageResponse", stream=True)

    def first(group: str, topic: str = "t_lim_none") -> object:
        r = pb.ReceiveMessageRequest(batch_size=4)
        r.group.name, r.message_queue.topic.name = group, topic
        r.invisible_duration.seconds = 15
        r.long_polling_timeout.seconds = 5
        return list(receive(r, metadata=_md("c@recv"), timeout=10))[0].status

    for i in range(4):               # a topic that does not exist: answered at once
        assert first(f"g_lim_{i}").code == _code("TOPIC_NOT_FOUND")
    s = first("g_lim_4")
    assert s.code == _code("TOO_MANY_REQUESTS") and "grpcMaxGroups=4" in s.message, s
    assert svc.registry.sizes()["consumers"] == 4
    assert svc._pop_locks == {}
    time.sleep(1.1)                  # past grpcGroupIdleMillis: the four are idle
    assert first("g_lim_4").code == _code("TOPIC_NOT_FOUND")
    assert svc.registry.sizes()["consumers"] == 1
    for t in ("t_lim_a", "t_lim_b"):
        assert first("g_lim_4", t).code == _code("TOPIC_NOT_FOUND")
    s = first("g_lim_4", "t_lim_c")
    assert s.code == _code("BAD_REQUEST") and "grpcMaxSubscriptionsPerGroup=3" in s.message, s
    ch.close()


def test_waiting_delay_messages_are_bounded(proxy):
    """Two delay messages wait in the timer (the cap); the third DELAY send is
    TOO_MANY_REQUESTS naming grpcMaxPendingDelayMessages, and nothing of it is stored."""
    from rocketstore.proxy import convert, protocol as pb
    svc = proxy.server.service
    ch, send = _stub(proxy.addr, "SendMessage", "SendMessageRequest", "SendMessageResponse")
    codes = []
    for i in range(3):
        sr = pb.SendMessageRequest()
        m = sr.messages.add(body=b"later")
        m.topic.name = "t_lim_delay"
        m.system_properties.message_id = f"01DELAY{i}"
        convert._set_ms(m.system_properties.delivery_timestamp, int(time.time() * 1000) + 600_000)
        r = send(sr, metadata=_md("c@delay"), timeout=10)
        codes.append((r.status.code, r.status.message))
    assert [c for c, _ in codes] == [_code("OK")] * 2 + [_code("TOO_MANY_REQUESTS")], codes
    assert "grpcMaxPendingDelayMessages=2" in codes[2][1]
    assert svc.timer.pending == 2
    ch.close()


def test_long_polling_receives_are_bounded_per_connection_and_in_all(proxy):
    """ReceiveMessage calls waiting for messages: a connection holds at most
    grpcMaxPollingReceivesPerConnection, the proxy at most grpcMaxPollingReceives; the next is
    TOO_MANY_REQUESTS naming the setting, and a receive that ends frees its place."""
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    stubs = []
    for _ in range(3):       # three TCP connections (channels share one by default)
        ch = grpc.insecure_channel(proxy.addr, options=[("grpc.use_local_subchannel_pool", 1)])
        stubs.append((ch, ch.unary_stream(
            f"/{pb.SERVICE}/ReceiveMessage",
            request_serializer=pb.ReceiveMessageRequest.SerializeToString,
            response_deserializer=pb.ReceiveMessageResponse.FromString)))

    def start(i: int):
        r = pb.ReceiveMessageRequest(batch_size=4)
        r.group.name, r.message_queue.topic.name = "g_poll", "t_lim"
        r.invisible_duration.seconds = 15
        r.long_polling_timeout.seconds = 20      # t_lim is empty: each call waits
        return stubs[i][1](r, metadata=_md(f"c@poll{i}"), timeout=30)

    def polling() -> int:
        return svc.polling_total

    held = [start(0), start(0)]
    wait_until(lambda: polling() == 2, "2 receives polling", 10)
    s = next(start(0)).status                    # a third on the same connection
    assert s.code == _code("TOO_MANY_REQUESTS"), s
    assert "grpcMaxPollingReceivesPerConnection=2" in s.message, s
    held.append(start(1))                        # another connection: accepted
    wait_until(lambda: polling() == 3, "3 receives polling", 10)
    s = next(start(2)).status                    # a third connection, the proxy is full
    assert s.code == _code("TOO_MANY_REQUESTS") and "grpcMaxPollingReceives=3" in s.message, s
    held.pop(0).cancel()                         # a receive that ends frees its place
    wait_until(lambda: polling() == 2, "2 receives polling", 10)
    held.append(start(2))
    wait_until(lambda: polling() == 3, "3 receives polling", 10)
    for call in held:
        call.cancel()
    wait_until(lambda: polling() == 0 and not svc.polling_receives, "no receive polling", 10)
    for ch, _ in stubs:
        ch.close()


def test_filter_expressions_with_more_tags_than_a_heartbeat_entry_are_refused(proxy):
    """The brokers refuse a heartbeat whose subscription has more than heartbeatMaxEntries
    tags, whole: one client's filter must not keep the other groups of the proxy's heartbeat
    from being announced. Past 500 tags (the proxy's heartbeat entries) a ReceiveMessage or
    the settings are ILLEGAL_FILTER_EXPRESSION, and nothing is registered."""
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    tags = " || ".join(f"tag{i}" for i in range(501))
    ch, receive = _stub(proxy.addr, "ReceiveMessage", "ReceiveMessageRequest",
                        "ReceiveMessageResponse", stream=True)
    r = pb.ReceiveMessageRequest(batch_size=4)
    r.group.name, r.message_queue.topic.name = "g_tags", "t_lim"
    r.invisible_duration.seconds = 15
    r.long_polling_timeout.seconds = 5
    r.filter_expression.type = pb.enum_value("FilterType", "TAG")
    r.filter_expression.expression = tags
    s = list(receive(r, metadata=_md("c@tags"), timeout=10))[0].status
    assert s.code == _code("ILLEGAL_FILTER_EXPRESSION") and "501 tags" in s.message, s
    ch.close()
    tel = Telemetry(proxy.addr, "c@tags")
    try:
        cmd = pb.TelemetryCommand()
        cmd.settings.client_type = pb.enum_value("ClientType", "SIMPLE_CONSUMER")
        cmd.settings.subscription.group.name = "g_tags"
        e = cmd.settings.subscription.subscriptions.add()
        e.topic.name = "t_lim"
        e.expression.expression = tags
        with tel._ready:
            tel._out.append(cmd)
            tel._ready.notify()
        reply = next(tel.replies)
        assert reply.status.code == _code("ILLEGAL_FILTER_EXPRESSION"), reply
    finally:
        tel.close()
    assert "g_tags" not in svc.registry._consumers


def test_limit_settings_are_checked():
    """Each limit must be a positive integer, in ProxyConfig, broker.conf and --limit."""
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.errors import InvalidConfigError
    from rocketstore.proxy.limits import ProxyLimits, limits_from
    assert limits_from({"grpcMaxClients": 7}) == ProxyLimits(max_clients=7)
    with pytest.raises(ValueError, match="grpcRouteCacheMax=0"):
        limits_from({"grpcRouteCacheMax": 0})
    with pytest.raises(ValueError, match="unknown proxy limit 'grpcMaxTopics'"):
        limits_from({"grpcMaxTopics": 3})
    with pytest.raises(InvalidConfigError, match="grpc_max_groups"):
        BrokerConfig(grpc_max_groups=0)


def test_proxy_command_line_limits_are_checked(capsys, tmp_path):
    """``rocketstore proxy --limit NAME=N``: an unknown name, a zero or a malformed item is a
    one-line error (exit 2) naming it, before anything listens."""
    from rocketstore.cli import main
    base = ["proxy", "--namesrv", "127.0.0.1:1", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path)]
    for item, said in (("grpcMaxTopics=3", "unknown proxy limit 'grpcMaxTopics'"),
                       ("grpcMaxClients=0", "grpcMaxClients=0: must be a positive integer"),
                       ("grpcMaxClients", "expected NAME=N")):
        assert main([*base, "--limit", item]) == 2
        assert said in capsys.readouterr().err
    assert main([*base, "--security-token", "t"]) == 2
    assert "--security-token goes with --access-key" in capsys.readouterr().err


def test_notify_client_termination_only_ends_the_callers_own_client(proxy):
    """NotifyClientTermination names its client by the ``x-mq-client-id`` header, which any
    caller can set: from another connection, naming a consumer's id and group, it is
    FORBIDDEN and the consumer keeps its settings and its group; from the connection of the
    client's own Telemetry stream it ends the client (settings gone, group left)."""
    from rocketstore.proxy import protocol as pb
    svc = proxy.server.service
    victim = Telemetry(proxy.addr, "c@victim")
    other = grpc.insecure_channel(proxy.addr, options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        assert victim.settings(group="g_victim", topics=["t_lim"]).status.code == _code("OK")
        req = pb.NotifyClientTerminationRequest()
        req.group.name = "g_victim"
        method = f"/{pb.SERVICE}/NotifyClientTermination"
        kw = dict(request_serializer=pb.NotifyClientTerminationRequest.SerializeToString,
                  response_deserializer=pb.NotifyClientTerminationResponse.FromString)
        s = other.unary_unary(method, **kw)(req, metadata=_md("c@victim"), timeout=10).status
        assert s.code == _code("FORBIDDEN"), s
        assert "c@victim" in s.message and "connection" in s.message, s.message
        assert "c@victim" in svc.settings and "g_victim" in svc.registry._consumers
        assert svc.registry._holders.get("g_victim") == {"c@victim"}

        own = victim.ch.unary_unary(method, **kw)(req, metadata=_md("c@victim"), timeout=10)
        assert own.status.code == _code("OK"), own.status
        wait_until(lambda: "c@victim" not in svc.settings and
                   "g_victim" not in svc.registry._consumers, "c@victim ended", within=10)
        # a client whose stream is gone has nothing left to end: OK from anywhere
        victim.close()
        wait_until(lambda: "c@victim" not in svc.streams, "c@victim's stream gone", within=10)
        s = other.unary_unary(method, **kw)(req, metadata=_md("c@victim"), timeout=10).status
        assert s.code == _code("OK"), s
    finally:
        victim.close()
        other.close()
