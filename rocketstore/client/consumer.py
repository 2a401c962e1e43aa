"""What the push and the lite pull consumer share: group membership, subscriptions, offsets
and rebalancing over a client instance."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from rocketstore.acl.signature import SessionCredentials, credentials_from
from rocketstore.client import validators
from rocketstore.client.allocate import AllocateMessageQueueStrategy, allocate_strategy
from rocketstore.client.instance import (ClientInstance, ClientTimers, build_client_id,
                                         transport_for)
from rocketstore.client.offset_store import (LocalFileOffsetStore, OffsetStore,
                                             RemoteBrokerOffsetStore)
from rocketstore.client.process_queue import ProcessQueue
from rocketstore.client.rebalance import RebalanceImpl
from rocketstore.client.subscription import build_subscription_data
from rocketstore.client.transport import Transport
from rocketstore.common import ConsumeFromWhere, ConsumeType, MessageModel, MessageQueue
from rocketstore.common import constants as C
from rocketstore.common.protocol import ConsumerData, SubscriptionData
from rocketstore.errors import MQClientError

log = logging.getLogger("rocketstore.client")


def _enum(cls: Any, value: Any, what: str) -> Any:
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).upper())
    except ValueError:
        raise MQClientError(f"{what} {value!r} is not one of "
                            f"{', '.join(m.value for m in cls)}") from None


class ConsumerBase:
    consume_type = ConsumeType.CONSUME_PASSIVELY
    drop_idle_queues = True

    def __init__(self, group: str, *, broker: Any, namesrv_addr: str | None,
                 message_model: str | MessageModel, consume_from_where: str | ConsumeFromWhere,
                 consume_timestamp_ms: int | None, allocate_strategy_: Any,
                 instance_name: str | None, offset_store_dir: Any,
                 timers: ClientTimers | None = None,
                 credentials: SessionCredentials | None = None, access_key: str | None = None,
                 secret_key: str | None = None,
                 on_assign: Callable[[set[MessageQueue]], Any] | None = None,
                 on_revoke: Callable[[set[MessageQueue]], Any] | None = None) -> None:
        self.group = group
        for name, fn in (("on_assign", on_assign), ("on_revoke", on_revoke)):
            if fn is not None and not callable(fn):
                raise MQClientError(f"{name}={fn!r} is not callable: give a function of the "
                                    f"set of MessageQueues")
        # Kafka's rebalance listener: called with the queues a rebalance gave or took
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.timers = timers or ClientTimers()
        self._transport_key, self._transport_factory = transport_for(
            broker, namesrv_addr, credentials_from(credentials, access_key, secret_key))
        self.message_model: MessageModel = _enum(MessageModel, message_model, "message_model")
        self.consume_from_where: ConsumeFromWhere = _enum(ConsumeFromWhere, consume_from_where,
                                                          "consume_from_where")
        # consumeTimestamp default: half an hour before the consumer was created
        self.consume_timestamp_ms = consume_timestamp_ms if consume_timestamp_ms is not None \
            else time.time_ns() // 1_000_000 - 30 * 60 * 1000
        self.allocate_strategy: AllocateMessageQueueStrategy = allocate_strategy(allocate_strategy_)
        self.instance_name = instance_name
        self.offset_store_dir = offset_store_dir
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._subs_cache: dict[str, SubscriptionData] | None = None
        self.instance: ClientInstance = None  # type: ignore[assignment]
        self.transport: Transport = None      # type: ignore[assignment]
        self.client_id = ""
        self.offset_store: OffsetStore = None  # type: ignore[assignment]
        self.rebalance = RebalanceImpl(self)
        self._running = False

    # -- configuration ------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*", "A || B")."""
        sub = build_subscription_data(topic, expression)
        self._subscriptions[topic] = sub
        self._subs_cache = None
        if self._running:
            self.instance.send_heartbeat_to_all_brokers()
            self.instance.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self._subs_cache = None
        if self._running:
            self.instance.send_heartbeat_to_all_brokers()
            self.instance.rebalance_immediately()

    def subscriptions_for_rebalance(self) -> dict[str, SubscriptionData]:
        """The user's subscriptions plus, clustering, ``%RETRY%<group>`` with ``*`` (§3.2).
        Do not modify the dict returned (it is cached until the subscriptions change)."""
        subs = self._subs_cache
        if subs is None:
            subs = dict(self._subscriptions)
            if self.message_model is MessageModel.CLUSTERING and self.consume_type is \
                    ConsumeType.CONSUME_PASSIVELY:
                subs.setdefault(C.retry_topic(self.group), self._retry_sub)
            self._subs_cache = subs
        return subs

    def assignment(self, topic: str | None = None) -> set[MessageQueue]:
        """The queues this consumer owns now (of ``topic``, or of every subscribed topic)."""
        return {mq for mq in list(self.rebalance.process_queue_table)
                if topic is None or mq.topic == topic}

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, self.consume_type, self.message_model,
                            self.consume_from_where,
                            list(self.subscriptions_for_rebalance().values()))

    # -- lifecycle ----------------------------------------------------------------------------
    def _start_base(self) -> None:
        validators.check_group(self.group)
        if self.group == C.DEFAULT_CONSUMER_GROUP:
            raise MQClientError("consumer group DEFAULT_CONSUMER is reserved: name your group")
        self._retry_sub = build_subscription_data(C.retry_topic(self.group), "*")
        self._subs_cache = None
        clustering = self.message_model is MessageModel.CLUSTERING
        self.client_id = build_client_id(self.instance_name, change_default=clustering)
        self.start_timestamp_ms = time.time_ns() // 1_000_000      # for its running info
        inst = ClientInstance.acquire(self.client_id, self._transport_key,
                                      self._transport_factory, self.timers)
        try:
            inst.register_consumer(self.group, self)
        except BaseException:
            inst.release()
            raise
        try:
            self.instance = inst
            self.transport = inst.transport
            if clustering:
                self.offset_store = RemoteBrokerOffsetStore(self.transport, self.group)
            else:
                self.offset_store = LocalFileOffsetStore(self.client_id, self.group,
                                                         self.offset_store_dir)
            self.offset_store.load()
        except BaseException:
            inst.unregister_consumer(self.group)
            inst.release()
            raise

    def start(self) -> Any:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """``shutdown()`` under Kafka's name."""
        self.shutdown()

    def __enter__(self) -> Any:
        return self.start() if not self._running else self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _leave(self) -> None:
        """Persist offsets, unregister (the broker tells the others to rebalance), release."""
        self.queues_changed(set(self.rebalance.process_queue_table), set())
        try:
            self.persist_consumer_offset()
        finally:
            self.instance.unregister_consumer(self.group)
            self.rebalance.destroy()
            self.instance.release()

    # -- called by the instance ---------------------------------------------------------------
    def persist_consumer_offset(self) -> None:
        if self.offset_store is not None:
            self.offset_store.persist_all(list(self.rebalance.process_queue_table))

    def do_rebalance(self) -> None:
        if self._running:
            self.rebalance.do_rebalance(self.is_orderly())

    def is_orderly(self) -> bool:
        return False

    def queues_changed(self, revoked: set[MessageQueue], assigned: set[MessageQueue]) -> None:
        """Tell ``on_revoke`` / ``on_assign`` (a rebalance, or leaving: every queue is
        revoked). A rebalance has persisted the revoked queues' offsets already; leaving
        persists them right after, so an ``on_revoke`` may still commit. A callback's
        exception is logged, never stops the rebalance."""
        for fn, queues in ((self.on_revoke, revoked), (self.on_assign, assigned)):
            if fn is not None and queues:
                try:
                    fn(set(queues))
                except Exception:
                    log.exception("%s of %s failed", getattr(fn, "__name__", fn), self.group)

    # -- rebalance hooks ----------------------------------------------------------------------
    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        return True

    def dispatch_pull_requests(self, pulls: list[tuple[MessageQueue, ProcessQueue, int]]) -> None:
        raise NotImplementedError

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue],
                              mq_divided: set[MessageQueue]) -> None:
        pass
