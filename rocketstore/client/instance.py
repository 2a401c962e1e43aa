"""``ClientInstance``: what producers and consumers of one client id share (MESSAGING.md §2).

RocketMQ's ``MQClientInstance``: one per (process, client id) and broker connection; it
registers groups, heartbeats them to the broker(s), runs the client timers (heartbeat 30 s,
offset persistence 5 s, orderly re-lock 20 s), the rebalance service (every 20 s or when the
broker says the group changed) and the pull service, and is the ``ClientChannel`` the broker
calls back (transaction checks, consumer-ids-changed).
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.client.scheduler import Scheduler, TaskThreads
from rocketstore.client.transport import Transport
from rocketstore.common.protocol import (CheckTransactionStateRequest, HeartbeatData, MessageQueue,
                                         RemotingResult, ReplyMessageRequest, ResponseCode,
                                         TopicRouteData)
from rocketstore.errors import MQClientError, TransportError

if TYPE_CHECKING:
    from rocketstore.common import MessageExt

log = logging.getLogger("rocketstore.client")

HEARTBEAT_BROKER_INTERVAL_MS = 30000
POLL_NAME_SERVER_INTERVAL_MS = 30000
PERSIST_CONSUMER_OFFSET_INTERVAL_MS = 5000
REBALANCE_WAIT_INTERVAL_S = 20.0
MIN_TIMER_INTERVAL_MS = 100      # a shorter period would only load the NameServer and brokers


@dataclass(frozen=True, slots=True)
class ClientTimers:
    """RocketMQ ``ClientConfig``'s periods (ms): ``poll_name_server_interval`` (route refresh:
    producers' publish lists, consumers' queue sets) and ``heartbeat_broker_interval``. The
    first producer or consumer of a client instance sets them for the instance, as in Java."""

    poll_name_server_interval: int = POLL_NAME_SERVER_INTERVAL_MS
    heartbeat_broker_interval: int = HEARTBEAT_BROKER_INTERVAL_MS

    @classmethod
    def checked(cls, poll_name_server_interval: int, heartbeat_broker_interval: int
                ) -> ClientTimers:
        for name, v in (("poll_name_server_interval", poll_name_server_interval),
                        ("heartbeat_broker_interval", heartbeat_broker_interval)):
            if isinstance(v, bool) or not isinstance(v, int) or v < MIN_TIMER_INTERVAL_MS:
                raise MQClientError(f"{name}={v!r}: expected milliseconds, an int >= "
                                    f"{MIN_TIMER_INTERVAL_MS}")
        return cls(poll_name_server_interval, heartbeat_broker_interval)

@functools.lru_cache(maxsize=1)
def local_address() -> str:
    """``RemotingUtil.getLocalAddress``'s preference: a non-loopback IPv4 not in 127.0/192.168,
    else any non-loopback IPv4 found, else 127.0.0.1."""
    found: list[str] = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))     # no packet is sent: routing picks the source
            found.append(s.getsockname()[0])
    except OSError:
        pass
    try:
        found.extend(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    v4 = [a for a in found if not a.startswith("127.")]
    for a in v4:
        if not a.startswith("192.168"):
            return a
    return v4[-1] if v4 else "127.0.0.1"


def build_client_id(instance_name: str | None, change_default: bool) -> str:
    """``clientIP@instanceName``; producers and clustering consumers left at ``DEFAULT`` get
    ``<pid>#<nanotime>`` (so two consumers in one process are two group members)."""
    name = instance_name or os.environ.get("ROCKETMQ_CLIENT_NAME") or "DEFAULT"
    if name == "DEFAULT" and change_default:
        name = f"{os.getpid()}#{time.monotonic_ns()}"
    return f"{local_address()}@{name}"


class SuppliedTransport:
    """The factory of a transport the user made and passed (``broker=transport``): the user's
    to close, so a client instance using it leaves it open when it shuts down."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def __call__(self) -> Transport:
        return self.transport


def transport_for(broker: Any, namesrv_addr: str | None, credentials: Any = None
                  ) -> tuple[object, Callable[[], Transport]]:
    """(key, factory) of the transport of exactly one of ``broker`` / ``namesrv_addr``;
    ``credentials`` (a ``rocketstore.acl.SessionCredentials``) sign every TCP request."""
    if (broker is None) == (namesrv_addr is None):
        raise MQClientError("pass exactly one of broker= (an in-process Broker) or "
                            "namesrv_addr= (a NameServer address)")
    if namesrv_addr is not None:
        if not isinstance(namesrv_addr, str) or not namesrv_addr.strip():
            raise MQClientError(f"namesrv_addr={namesrv_addr!r}: expected 'host:port[;host:port]'")

        def make_tcp() -> Transport:
            from rocketstore.client.tcp import TcpTransport
            return TcpTransport(namesrv_addr, credentials=credentials)
        # clients with other credentials get another connection set: signing is per client
        return ("tcp", namesrv_addr, credentials), make_tcp
    if credentials is not None:
        raise MQClientError("credentials sign requests to a broker over TCP: give "
                            "namesrv_addr= (an in-process broker has no access control)")
    if isinstance(broker, Transport):
        return id(broker), SuppliedTransport(broker)

    def make() -> Transport:
        from rocketstore.client.inprocess import InProcessTransport
        return InProcessTransport(broker)
    return id(broker), make


class PullMessageService(TaskThreads):
    """One thread that sends pull requests and handles their responses (RocketMQ's
    ``PullMessageService``). A pull returns a future; its completion (possibly on a broker
    thread, for a long-polled pull) only queues the response here, so no thread is held per
    queue and the broker's threads do no client work."""

    def __init__(self, name: str) -> None:
        super().__init__(1, name)

    execute = TaskThreads.submit


class ClientInstance:
    """Shared by every producer and consumer of one client id on one transport."""

    _registry: dict[tuple[str, object], ClientInstance] = {}
    _registry_lock = threading.Lock()

    @classmethod
    def acquire(cls, client_id: str, key: object, factory: Callable[[], Transport],
                timers: ClientTimers | None = None) -> ClientInstance:
        with cls._registry_lock:
            inst = cls._registry.get((client_id, key))
            if inst is None:
                # one client id per connection: a transport another instance's id holds
                # gives this one its own (Transport.for_client)
                base = factory()
                transport = base.for_client(client_id)
                # the user's own transport stays open; one made here (or by for_client) is
                # the instance's to close
                owns = not isinstance(factory, SuppliedTransport) or transport is not base
                inst = cls(client_id, transport, key, timers, owns_transport=owns)
                cls._registry[(client_id, key)] = inst
                inst._start()
            inst._refs += 1
            return inst

    def release(self) -> None:
        with ClientInstance._registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            ClientInstance._registry.pop((self.client_id, self._key), None)
        self._shutdown()

    def __init__(self, client_id: str, transport: Transport, key: object,
                 timers: ClientTimers | None = None, *, owns_transport: bool = True) -> None:
        """``owns_transport``: close ``transport`` at shutdown (False for the user's own)."""
        self.client_id = client_id
        self.transport = transport
        self._owns_transport = owns_transport
        self.timers = timers or ClientTimers()
        self._seen_routes: dict[str, tuple] = {}     # topic -> route summary, for the poll
        self._key = key
        self._refs = 0
        self._lock = threading.RLock()
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        tag = client_id.rsplit("@", 1)[-1]
        self.scheduler = Scheduler(f"rocketstore-client-timer-{tag}")
        self.pull_service = PullMessageService(f"rocketstore-client-pull-{tag}")
        self._rebalance_wakeup = threading.Event()
        self._stopping = threading.Event()
        self._rebalance_thread = threading.Thread(target=self._rebalance_loop,
                                                  name=f"rocketstore-client-rebalance-{tag}",
                                                  daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------
    def _start(self) -> None:
        self.scheduler.start()
        self._rebalance_thread.start()
        self.scheduler.schedule_at_fixed_rate(1000, self.timers.heartbeat_broker_interval,
                                              self.send_heartbeat_to_all_brokers)
        self.scheduler.schedule_at_fixed_rate(10, self.timers.poll_name_server_interval,
                                              self.update_topic_routes)
        self.scheduler.schedule_at_fixed_rate(10000, PERSIST_CONSUMER_OFFSET_INTERVAL_MS,
                                              self.persist_all_consumer_offset)

    def _shutdown(self) -> None:
        self._stopping.set()
        self._rebalance_wakeup.set()
        self.scheduler.shutdown()
        self.pull_service.shutdown()
        if self._rebalance_thread.is_alive():
            self._rebalance_thread.join()
        if self._owns_transport:
            self.transport.close()

    # -- groups -------------------------------------------------------------------------------
    def register_producer(self, group: str, producer: Any) -> None:
        with self._lock:
            if group in self.producers:
                raise MQClientError(f"the producer group {group!r} has been created before in "
                                    f"client {self.client_id}, specify another name")
            self.producers[group] = producer
        self.send_heartbeat_to_all_brokers()

    def register_consumer(self, group: str, consumer: Any) -> None:
        with self._lock:
            if group in self.consumers:
                raise MQClientError(f"the consumer group {group!r} has been created before in "
                                    f"client {self.client_id}, specify another name")
            self.consumers[group] = consumer

    def unregister_producer(self, group: str) -> None:
        with self._lock:
            self.producers.pop(group, None)
        self._unregister(group, None)

    def unregister_consumer(self, group: str) -> None:
        with self._lock:
            self.consumers.pop(group, None)
        self._unregister(None, group)

    def _unregister(self, producer_group: str | None, consumer_group: str | None) -> None:
        for name in self.transport.broker_names():
            try:
                self.transport.unregister_client(name, self.client_id, producer_group,
                                                 consumer_group)
            except TransportError as e:
                log.warning("unregister %s from %s failed: %s", self.client_id, name, e)

    # -- heartbeat ----------------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        with self._lock:
            producers = [g for g in self.producers]
            consumers = [c.consumer_data() for c in self.consumers.values()]
        return HeartbeatData(self.client_id, producers, consumers)

    def send_heartbeat_to_all_brokers(self) -> None:
        data = self.heartbeat_data()
        if not data.producer_groups and not data.consumers:
            return
        for name in self.transport.broker_names():
            try:
                self.transport.heartbeat(name, data, self)
            except TransportError as e:
                log.warning("heartbeat to %s failed: %s", name, e)

    # -- routes -------------------------------------------------------------------------------
    def topic_route(self, topic: str) -> TopicRouteData | None:
        try:
            return self.transport.get_topic_route(topic)
        except TransportError as e:
            log.warning("route of %s: %s", topic, e)
            return None

    def update_topic_routes(self) -> None:
        """The route poll (``updateTopicRouteInfoFromNameServer``) for consumers' topics: when
        a topic's brokers or queue counts changed (a broker died, came back or was added), say
        hello to the brokers now and rebalance, rather than at the next heartbeat and
        rebalance periods. Producers re-read their routes on use after the same interval."""
        with self._lock:
            topics = {t for c in self.consumers.values()
                      for t in c.subscriptions_for_rebalance()}
        changed = False
        for topic in sorted(topics):
            route = self.topic_route(topic)
            summary = () if route is None else (
                tuple(sorted((q.broker_name, q.perm, q.read_queue_nums, q.write_queue_nums)
                             for q in route.queue_datas)),
                tuple(sorted((n, tuple(sorted(a.items())))
                             for n, a in route.broker_addrs.items())))
            previous = self._seen_routes.get(topic)
            self._seen_routes[topic] = summary
            if previous is not None and previous != summary:
                log.info("route of %s changed: %s -> %s", topic, previous, summary)
                changed = True
        if changed:
            self.send_heartbeat_to_all_brokers()
            self.rebalance_immediately()

    # -- offsets and rebalance ----------------------------------------------------------------
    def _each_consumer(self, what: str, fn: Callable[[Any], None]) -> None:
        with self._lock:
            consumers = list(self.consumers.values())
        for c in consumers:
            try:
                fn(c)
            except Exception:          # one consumer's failure must not stop the others
                log.exception("%s of %s failed", what, c.group)

    def persist_all_consumer_offset(self) -> None:
        self._each_consumer("persist offsets", lambda c: c.persist_consumer_offset())

    def rebalance_immediately(self) -> None:
        self._rebalance_wakeup.set()

    def do_rebalance(self) -> None:
        self._each_consumer("rebalance", lambda c: c.do_rebalance())

    def _rebalance_loop(self) -> None:
        while not self._stopping.is_set():
            self._rebalance_wakeup.wait(REBALANCE_WAIT_INTERVAL_S)
            self._rebalance_wakeup.clear()
            if self._stopping.is_set():
                return
            self.do_rebalance()

    # -- ClientChannel (what the broker calls back) -------------------------------------------
    def check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                msg: MessageExt) -> None:
        group = msg.properties.get("PGROUP")
        with self._lock:
            producer = self.producers.get(group) if group else None
        if producer is None:
            log.warning("transaction check for group %s: no producer of it in %s", group,
                        self.client_id)
            return
        producer._check_transaction_state(broker_name, request, msg)

    def notify_consumer_ids_changed(self, group: str) -> None:
        self.rebalance_immediately()

    def push_reply_message(self, request: ReplyMessageRequest) -> Future:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: complete the request waiting for this reply
        (``rocketstore.client.reply``); SUCCESS unless the reply could not be read."""
        from rocketstore.client import reply
        try:
            reply.deliver(request)
            result = RemotingResult(ResponseCode.SUCCESS)
        except Exception:                   # noqa: BLE001 - answered, as Java's client does
            log.exception("reply to %s could not be read", self.client_id)
            result = RemotingResult(ResponseCode.SYSTEM_ERROR, "process reply message fail")
        return completed(result)

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (an admin's ``resetOffsetByTime``): for each queue of
        ``group`` held here, drop what was pulled, take the new offset and let the next
        rebalance take the queue again from there (as ``MQClientInstance.resetOffset``)."""
        with self._lock:
            consumer = self.consumers.get(group)
        if consumer is None:
            return
        table = consumer.rebalance.process_queue_table
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            pq = table.get(mq)
            if pq is not None:
                pq.dropped = True
                pq.clear()
            consumer.offset_store.update_offset(mq, offset, False)
            if pq is not None and consumer.remove_unnecessary_message_queue(mq, pq):
                table.pop(mq, None)
        log.info("%s: offsets of %s on %s reset to %s", self.client_id, group, topic,
                 {mq.queue_id: o for mq, o in sorted(offsets.items())})
        self.rebalance_immediately()

    def consumer_running_info(self, group: str, jstack: bool = False) -> bytes | None:
        """GET_CONSUMER_RUNNING_INFO (an admin's ``consumerStatus``, relayed by a broker):
        the group's ``ConsumerRunningInfo`` JSON, None when this client has no such group."""
        from rocketstore.client.running_info import running_info
        with self._lock:
            consumer = self.consumers.get(group)
        if consumer is None:
            return None
        namesrv = ";".join(getattr(self.transport, "namesrv_addrs", ()) or ())
        return running_info(consumer, namesrv, jstack)


def completed(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f
