"""Broker: RocketMQ 4.9.8's messaging model over one store directory (MESSAGING.md).

``Broker.open(path, BrokerConfig(...), StoreConfig(...))`` opens the store, registers the system
topics, loads ``subscriptionGroup.json`` and starts the services: the long-polling hold service,
the client housekeeping scan, and the schedule and transaction-check services when their modules
are present. Its methods are the broker's request handlers, one per RocketMQ request code; the
in-process transport calls them directly and a TCP server maps request codes onto them, so every
messaging rule lives here once. ``close()`` stops the services, answers parked pulls, and closes
the store (which persists consumer offsets).
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Any

from rocketstore.broker.channels import ClientChannelInfo, call_oneway
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.consumer_manager import ConsumerManager
from rocketstore.broker.inner import MessageInner
from rocketstore.broker.lock_manager import RebalanceLockManager
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.producer_manager import ProducerManager
from rocketstore.broker.pull import PullMessageProcessor
from rocketstore.broker.reply import ReplyMessageProcessor
from rocketstore.broker.send import SendMessageProcessor
from rocketstore.broker.pull_lane import PullLane
from rocketstore.broker.send_lane import SendLane
from rocketstore.broker.subscription_group import SubscriptionGroupManager
from rocketstore.broker.topic_manager import BrokerTopicManager
from rocketstore.common import constants as C
from rocketstore.common import names
from rocketstore.common.constants import PermName
from rocketstore.common.sends import WireSend
from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, EndTransactionRequest,
                                         HeartbeatData, MessageQueue, PullMessageRequest,
                                         PullMessageResponse, QueueData, RemotingResult,
                                         ResponseCode,
                                         SendMessageRequest, SendMessageResponse,
                                         TopicRouteData)
from rocketstore.errors import (InvalidMessageError, InvalidMessageTypeError, LimitExceededError,
                               StoreClosedError)
from rocketstore.store import brokerprops, paths
from rocketstore.store._codec import UniqIdGenerator
from rocketstore.store._commitlog import done_future
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import _PHYS_MEMORY, MessageStore
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.types import Message, MessageExt, PutMessageResult

log = logging.getLogger("rocketstore.broker")

_TX_MASK = 0xC
_TX_COMMIT = 0x8
MAX_WIRE_SEND_LANES = 4096      # (producer group, topic, ...) pairs kept for wire sends

# services other modules provide: (module, class, attribute on the broker)
_SERVICES = (("rocketstore.broker.schedule", "ScheduleMessageService", "schedule_service"),
             ("rocketstore.broker.transaction", "TransactionalMessageCheckService",
              "transaction_service"))


class _Housekeeping:
    """``ClientHousekeepingService``: every ``scan_not_active_channel_interval`` ms drop the
    producer and consumer channels not refreshed for ``channel_expired_timeout`` ms."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ClientHousekeepingService",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        interval = self.broker.config.scan_not_active_channel_interval / 1000.0
        while not self._stop.wait(interval):
            try:
                self.broker.scan_not_active_channels()
                if self.broker.metrics is not None:
                    self.broker.metrics.windows.sample()     # statsAll's minute/hour/day
            except Exception:  # noqa: BLE001 - keep scanning
                log.exception("housekeeping scan failed")

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


class Broker:
    """One broker over one store directory; a context manager.

    Examples
    --------
    >>> import tempfile
    >>> from rocketstore.broker import Broker, BrokerConfig
    >>> with Broker.open(tempfile.mkdtemp(), BrokerConfig()) as broker:
    ...     broker.topic_manager.select("TBW102").perm
    7
    """

    def __init__(self, store: MessageStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self.store_config = store.config
        self.broker_name = config.broker_name
        self.slave_sync: Any = None             # rocketstore.broker.slave_sync, set by the server
        self.store_host = store.config.store_host
        self._closed = False
        self._uniq_lock = threading.Lock()
        self._uniq = UniqIdGenerator(self.store_host.rpartition(":")[0].strip("[]") or "127.0.0.1")
        self.max_delay_level = len(store.config.delay_levels_ms()) - 1
        self._memory_limit = _PHYS_MEMORY * store.config.access_message_in_memory_max_ratio // 100
        store.enforce_topic_rules(False)        # RocketMQ's rules apply here instead
        self.topic_manager = BrokerTopicManager(store.topic_config_manager, config)
        self.subscription_groups = SubscriptionGroupManager(
            paths.config_dir(store.root), config.auto_create_subscription_group,
            config.auto_create_subscription_group_max)
        self.subscription_groups.load()
        self.topic_manager.groups = self.subscription_groups    # autoCreateTopicMax's count
        self.consumer_manager = ConsumerManager(config.notify_consumer_ids_changed_enable,
                                                config.channel_expired_timeout)
        self.producer_manager = ProducerManager(config.channel_expired_timeout)
        self.lock_manager = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.send_processor = SendMessageProcessor(self)
        self._wire_send_lanes: dict[tuple[str, str, str, int], SendLane] = {}
        self.reply_processor = ReplyMessageProcessor(self)
        self.pull_processor = PullMessageProcessor(self)
        self._housekeeping = _Housekeeping(self)
        self.schedule_service: Any = None
        self.transaction_service: Any = None
        self._services: list[Any] = []
        self.metrics: BrokerMetrics | None = BrokerMetrics(self) if config.metrics_enable else None
        self.metrics_server: Any = None
        self.config_version: Any = None     # settings' DataVersion (broker.runtime_config)
        self.ha_service: Any = None         # start_ha(): rocketstore.ha.HAService

    @property
    def is_slave(self) -> bool:
        return self.config.broker_role == "SLAVE"

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: BrokerConfig | None = None,
             store_config: StoreConfig | None = None) -> Broker:
        """Open (creating when missing) the broker's store at ``path`` and start the broker."""
        config = config if config is not None else BrokerConfig()
        if not isinstance(config, BrokerConfig):
            raise InvalidMessageTypeError("config", "BrokerConfig", type(config).__name__)
        store_config = store_config if store_config is not None else StoreConfig()
        if store_config.enabled_append_prop_crc is None:
            # a RocketMQ 4.9.8 broker's records, byte for byte (docs/recovery.md), unless
            # the broker is told to write 5.x's record CRC (enabledAppendPropCRC)
            store_config = store_config.replace(
                enabled_append_prop_crc=config.enabled_append_prop_crc)
        default_ratio = StoreConfig().access_message_in_memory_max_ratio
        if config.access_message_in_memory_max_ratio != default_ratio and \
                store_config.access_message_in_memory_max_ratio == default_ratio:
            # broker.conf's accessMessageInMemoryMaxRatio lands in BrokerConfig; the store
            # decides "suggest the slave" (and in-memory limits) from it
            store_config = store_config.replace(
                access_message_in_memory_max_ratio=config.access_message_in_memory_max_ratio)
        if config.broker_role == "SLAVE" and store_config.transient_store_pool_enable:
            # as 4.9.8 (MessageStoreConfig.isTransientStorePoolEnable): a slave's replicated
            # bytes go straight into its files, where its end and its reports are read
            store_config = store_config.replace(transient_store_pool_enable=False)
        store = MessageStore.open(path, store_config)
        try:
            # the settings that shape the files (delay levels ...), for tools reading it later
            brokerprops.write(store.root, config, store.config)
            # a slave's log takes only its master's bytes: every put path is refused
            store.set_slave(config.broker_role == "SLAVE")
            broker = cls(store, config)
            broker._start()
        except BaseException:
            store.close()
            raise
        return broker

    def _start(self) -> None:
        if self.config.metrics_port and self.metrics is not None:
            from rocketstore.broker.metrics import MetricsHttpServer
            self.metrics_server = MetricsHttpServer(self.metrics, self.config.metrics_port,
                                                    self.config.broker_ip1)
        self.pull_processor.hold.start()
        self._housekeeping.start()
        # a slave runs neither the schedule nor the transaction check (docs/replication.md §1): both put
        for module, name, attr in () if self.is_slave else _SERVICES:
            if importlib.util.find_spec(module) is None:
                continue
            service = getattr(importlib.import_module(module), name)(self)
            setattr(self, attr, service)
            self._services.append(service)
        started = []
        try:
            for service in self._services:
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.shutdown()
            self.pull_processor.hold.shutdown()
            self._housekeeping.shutdown()
            if self.metrics_server is not None:
                self.metrics_server.close()
            raise

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop the services (each persists its state), answer parked pulls, persist the
        subscription groups, close the store (consumer offsets persist). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.ha_service is not None:
                # first: its threads read and write the store's files; waiting puts complete
                self.ha_service.shutdown()
            if self.metrics_server is not None:
                self.metrics_server.close()
            for service in reversed(self._services):
                try:
                    service.shutdown()
                except Exception:  # noqa: BLE001 - the others must still stop
                    log.exception("%s shutdown failed", type(service).__name__)
            self.pull_processor.hold.shutdown()
            self._housekeeping.shutdown()
            # what the background writers still hold (auto-created topics and groups)
            self.subscription_groups.close_persister()
            self.subscription_groups.persist()
            self.store.topic_config_manager.close_persister()
        finally:
            self.store.close()

    # -- replication (rocketstore.ha, docs/replication.md) -------------------------------------

    def start_ha(self, host: str | None = None, port: int | None = None) -> str:
        """Start replication: bind the HA port (every role; ``listen_port + 1`` unless
        ``port`` is given, 0 picks one), connect a SLAVE to ``ha_master_address``, and have
        a SYNC_MASTER's sends wait for a slave's acknowledgement. ``BrokerServer`` calls it;
        an in-process broker replicates only when asked. Returns the bound ``host:port``."""
        self._check_open()
        if self.ha_service is not None:
            return self.ha_service.address
        from rocketstore.ha import HAService
        svc = HAService(self.store, self.config)
        svc.start(host or self.config.broker_ip1,
                  self.config.listen_port + 1 if port is None else port)
        self.ha_service = svc
        if svc.acks is not None:
            self.store.set_put_acks(svc.acks)
            self.store.commit_log.wait_replica = True
        return svc.address

    def set_ha_master_address(self, addr: str) -> None:
        """A SLAVE's master HA address (``host:port``), e.g. learned from the NameServer's
        registration answer; used from the next connection on (a live one is kept)."""
        if self.ha_service is not None:
            self.ha_service.set_master_address(addr)
        else:
            import dataclasses
            self.config = dataclasses.replace(self.config, ha_master_address=addr)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("broker " + self.broker_name)

    # -- helpers for the processors and services ---------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def next_uniq_id(self) -> str:
        """A client message id (``MessageClientIDSetter`` layout) for a message without one."""
        with self._uniq_lock:
            return self._uniq.next()

    def put_inner(self, inner: MessageInner, durable: bool = False) -> Future:
        """``DefaultMessageStore.asyncPutMessage`` of a broker-built message: a Future of the
        ``PutMessageResult``.

        As 4.9.8's ``CommitLog.asyncPutMessage``: a message of transaction type NOT or COMMIT
        with ``DELAY`` > 0 in its map is rewritten, in place, to ``SCHEDULE_TOPIC_XXXX`` queue
        ``level - 1`` (level clamped to the last one) with ``REAL_TOPIC``/``REAL_QID`` added and
        the properties re-serialized. No perm or auto-create checks. Under SYNC_FLUSH the
        future completes after the sync unless the map's ``WAIT`` is not true; ``durable``
        makes it wait for the sync whatever ``WAIT`` says (the stored string keeps it).
        """
        self._check_open()
        if inner.sys_flag & _TX_MASK in (0, _TX_COMMIT):
            try:
                level = inner.delay_time_level()
            except ValueError:
                raise InvalidMessageError("properties['DELAY']", inner.properties.get("DELAY"),
                                          "is not an integer delay level") from None
            if level > 0:
                props = inner.properties
                if level > self.max_delay_level:
                    level = self.max_delay_level
                    props.put(C.PROPERTY_DELAY_TIME_LEVEL, str(level))
                props.put(C.PROPERTY_REAL_TOPIC, inner.topic)
                props.put(C.PROPERTY_REAL_QUEUE_ID, str(inner.queue_id))
                inner.freeze()
                inner.topic = C.SCHEDULE_TOPIC
                inner.queue_id = level - 1
        return self.store.put_message_async(inner.to_message(True if durable else None),
                                            inner.queue_id)

    # -- produce -------------------------------------------------------------------------------

    def send_message(self, request: SendMessageRequest) -> Future:
        """``SEND_MESSAGE_V2`` / ``SEND_BATCH_MESSAGE``: a Future of the ``SendMessageResponse``
        (completed after the sync under SYNC_FLUSH; no thread waits for it)."""
        self._check_open()
        if isinstance(request, SendMessageRequest) and request.reply:
            return self.reply_processor.reply_request(request)
        fut = self.send_processor.send_message(request)
        if self.metrics is not None:
            self.metrics.on_send(request, fut)
        return fut

    send_message_async = send_message      # the remoting server's name for the same call

    def send_one(self, producer_group: str, topic: str, queue_id: int, msg: Message,
                 default_topic: str = C.AUTO_CREATE_TOPIC_KEY_TOPIC,
                 default_topic_queue_nums: int = 4) -> SendMessageResponse | Future:
        """One message's ``SEND_MESSAGE_V2`` without a request object (the in-process
        transport's sync send): the ``SendMessageResponse``, or a Future of it when it
        completes later (after the sync under SYNC_FLUSH). Same checks and rewrites as
        ``send_message``."""
        self._check_open()
        r = self.send_processor.send_one(producer_group, topic, queue_id, msg, default_topic,
                                         default_topic_queue_nums)
        if self.metrics is not None:
            self.metrics.on_send_one(topic, msg, r)
        return r

    def delete_topic(self, topic: str) -> list[int]:
        """``DELETE_TOPIC_IN_BROKER``: the store's ``delete_topic`` (config, consume queues,
        queue offsets), then the topic's metrics. Returns the ids of the queues removed."""
        removed = self.store.delete_topic(topic)
        if self.metrics is not None:
            self.metrics.drop_topic(topic)
        return removed

    def send_lane(self, producer_group: str, topic: str,
                  default_topic: str = C.AUTO_CREATE_TOPIC_KEY_TOPIC,
                  default_topic_queue_nums: int = 4) -> SendLane:
        """A ``SendLane``: ``send_one`` for one (group, topic), its per-topic checks made once
        per topic configuration (the in-process producer's sync sends)."""
        self._check_open()
        return SendLane(self, producer_group, topic, default_topic, default_topic_queue_nums)

    def wire_send_lane(self, request: WireSend) -> SendLane:
        """The ``SendLane`` of a send from the wire, by (producer group, topic, default
        topic, default queue nums), kept for the next sends (at most ``MAX_WIRE_SEND_LANES``:
        requests naming ever new pairs only refill the table)."""
        key = (request.producer_group, request.topic, request.default_topic,
               request.default_topic_queue_nums)
        lanes = self._wire_send_lanes
        lane = lanes.get(key)
        if lane is None:
            self._check_open()
            if len(lanes) >= MAX_WIRE_SEND_LANES:
                lanes.clear()
            lane = lanes[key] = SendLane(self, *key)
        return lane

    def send_wire(self, request: WireSend) -> Future:
        """``send_message`` of a send as decoded from the wire (``headers.WireSend``): the
        common shape is stored from its bytes without a ``Message`` (``SendMessageProcessor
        .send_wire_now``), every other the way ``send_message`` does."""
        r = self.send_wire_now(request)
        return r if isinstance(r, Future) else done_future(r)

    def send_wire_now(self, request: WireSend) -> SendMessageResponse | Future:
        """``send_wire``, answered without a future when the response is known at once (an
        ASYNC_FLUSH send: the remoting server's path)."""
        self._check_open()
        r = self.send_processor.send_wire_now(request)
        if self.metrics is not None:
            if isinstance(r, Future):
                self.metrics.on_send(request, r)
            else:
                self.metrics.count_send(request, r)
        return r

    def send_reply(self, request: SendMessageRequest | WireSend) -> Future:
        """``SEND_REPLY_MESSAGE(_V2)`` (request-reply, ``rocketstore.broker.reply``): push the
        reply to the requester's channel and store it; a Future of the
        ``SendMessageResponse`` (SUCCESS once the requester took it)."""
        self._check_open()
        if isinstance(request, SendMessageRequest):
            return self.reply_processor.reply_request(request)
        return self.reply_processor.reply_wire(request)

    def consumer_send_msg_back(self, request: ConsumerSendMsgBackRequest) -> Future:
        """``CONSUMER_SEND_MSG_BACK``: a Future of a ``RemotingResult``."""
        self._check_open()
        return self.send_processor.consumer_send_msg_back(request)

    def end_transaction(self, request: EndTransactionRequest) -> RemotingResult | None:
        """``END_TRANSACTION``: handled by the transaction service (None: ignored)."""
        self._check_open()
        if self.is_slave:
            # EndTransactionProcessor: "end transaction is forbidden" on a slave, no remark
            return RemotingResult(ResponseCode.SLAVE_NOT_AVAILABLE, None)
        if self.transaction_service is None:
            return RemotingResult(ResponseCode.SYSTEM_ERROR,
                                  "transaction service not available on this broker")
        return self.transaction_service.end_transaction(request)

    # -- consume -------------------------------------------------------------------------------

    def pull_message(self, request: PullMessageRequest) -> Future:
        """``PULL_MESSAGE``: a Future of the ``PullMessageResponse``; a suspended pull completes
        when a message arrives or its time is up."""
        self._check_open()
        bad = _bad_names(request.topic, request.consumer_group, "consumer_group")
        if bad is not None:
            fut: Future = Future()
            fut.set_result(PullMessageResponse(bad.code, remark=bad.remark))
            return fut
        fut = self.pull_processor.pull(request)
        if self.metrics is not None:
            self.metrics.on_pull(request, fut)
        return fut

    def pull_lane(self, group: str, topic: str) -> PullLane | None:
        """A ``PullLane``: ``pull_message`` for one (group, topic) of an in-process push
        consumer, its checks made once per configuration; None for names ``pull_message``
        refuses (its refusal is then the answer)."""
        self._check_open()
        if _bad_names(topic, group, "consumer_group") is not None:
            return None
        return PullLane(self, group, topic)

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> RemotingResult:
        """``QUERY_CONSUMER_OFFSET`` (MESSAGING.md 3.7): the committed offset; else 0 when the
        queue's min offset is 0 and its first unit is still in memory (or absent); else
        QUERY_NOT_FOUND."""
        self._check_open()
        offset = self.store.query_offset(group, topic, queue_id)
        if offset >= 0:
            return RemotingResult(ResponseCode.SUCCESS, value=offset)
        if (self.store.get_min_offset_in_queue(topic, queue_id) <= 0
                and not self._in_disk(topic, queue_id, 0)):
            return RemotingResult(ResponseCode.SUCCESS, value=0)
        return RemotingResult(ResponseCode.QUERY_NOT_FOUND,
                              "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def _in_disk(self, topic: str, queue_id: int, offset: int) -> bool:
        """``checkInDiskByConsumeOffset``: the unit's record lies further than the in-memory
        share of RAM behind the commit log's end (no unit: not in disk)."""
        cq = self.store.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return False
        return self.store.get_max_phy_offset() - unit[0] > self._memory_limit

    def update_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``UPDATE_CONSUMER_OFFSET``: overwrite (the broker does not enforce monotonicity)."""
        self._check_open()
        names.check_group(group)
        names.check_topic(topic)
        self.store.commit_offset(group, topic, queue_id, offset)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        self._check_open()
        return self.store.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        self._check_open()
        return self.store.get_min_offset_in_queue(topic, queue_id)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int,
                      boundary: str = "LOWER") -> int:
        """``SEARCH_OFFSET_BY_TIMESTAMP`` by RocketMQ 5's rule (docs/admin.md "Offset by
        timestamp"): LOWER (the default) the first message stored at or after the time (the
        max offset when none is), UPPER the last one stored at or before it. 4.9.8 answers
        the message nearest in time instead."""
        self._check_open()
        return self.store.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms, boundary)

    def get_earliest_msg_store_time(self, topic: str, queue_id: int) -> int:
        """``GET_EARLIEST_MSG_STORETIME``: store time of the queue's first message, or -1."""
        self._check_open()
        return self.store.get_message_store_timestamp(
            topic, queue_id, self.store.get_min_offset_in_queue(topic, queue_id))

    def view_message(self, commit_log_offset: int) -> MessageExt | None:
        """``VIEW_MESSAGE_BY_ID``: the record at a commit-log offset (zero copy)."""
        self._check_open()
        return self.store.look_message_by_offset(commit_log_offset)

    # -- routes (in process: this broker is the whole cluster) ---------------------------------

    def get_topic_route(self, topic: str) -> TopicRouteData | None:
        self._check_open()
        tc = self.topic_manager.select(topic)
        if tc is None:
            return None
        perm = tc.perm & self.config.broker_permission | (tc.perm & PermName.PERM_INHERIT)
        return TopicRouteData((QueueData(self.broker_name, tc.read_queue_nums,
                                         tc.write_queue_nums, perm, tc.topic_sys_flag),),
                              {self.broker_name: {self.config.broker_id: self.store_host}})

    # -- group membership ----------------------------------------------------------------------

    def heartbeat(self, data: HeartbeatData, channel: Any) -> None:
        """``HEART_BEAT`` (MESSAGING.md 2.3): register the client's consumer groups (creating
        their ``%RETRY%`` topics) and producer groups on ``channel``. ``LimitExceededError``
        (nothing registered) past ``heartbeat_max_entries`` entries or when it would
        auto-create groups past ``auto_create_subscription_group_max``."""
        self._check_open()
        bound = self.config.heartbeat_max_entries
        for what, n in (("consumerDataSet", len(data.consumers)),
                        ("producerDataSet", len(data.producer_groups)),
                        ("subscriptionDataSet", max((len(cd.subscriptions)
                                                     for cd in data.consumers), default=0)),
                        # a subscription's tags: each held (and hashed) per client and group
                        ("subscriptionDataSet entry's tagsSet",
                         max((len(sd.tags_set) for cd in data.consumers
                              for sd in cd.subscriptions), default=0))):
            if n > bound:
                raise LimitExceededError("heartbeatMaxEntries", bound,
                                         f"the heartbeat's {what} has {n} entries",
                                         int(ResponseCode.SYSTEM_ERROR))
        # a client's producer groups, across its heartbeats: each one it names stays for the
        # channel expiry (120 s) after its last mention, so fresh names per beat piled up
        if data.producer_groups:
            cap = self.config.client_max_producer_groups
            n = self.producer_manager.groups_after(channel, data.producer_groups)
            if n > cap:
                raise LimitExceededError("clientMaxProducerGroups", cap,
                                         f"this client would be in {n} producer groups",
                                         int(ResponseCode.SYSTEM_ERROR))
        new = {cd.group_name for cd in data.consumers
               if self.subscription_groups.get(cd.group_name) is None}
        if new and self.subscription_groups.creatable(new) < len(new):
            cap = self.subscription_groups.auto_create_max
            raise LimitExceededError(
                "autoCreateSubscriptionGroupMax", cap,
                f"the broker holds {len(self.subscription_groups.all())} subscription groups: "
                f"{len(new)} more may not be auto-created",
                int(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST))
        for cd in data.consumers:
            names.check_group(cd.group_name, "consumers.group_name")
            for sd in cd.subscriptions:
                names.check_topic(sd.topic, "subscriptions.topic")
        for group in data.producer_groups:
            names.check_group(group, "producer_groups")
        info = ClientChannelInfo(channel, data.client_id)
        dropped: list[tuple[str, str]] = []     # one warning for the whole heartbeat
        for cd in data.consumers:
            sgc = self.subscription_groups.find(cd.group_name)
            notify = True
            if sgc is not None:
                notify = sgc.notify_consumer_ids_changed_enable
                self.topic_manager.create_topic_in_send_message_back_method(
                    C.retry_topic(cd.group_name), sgc.retry_queue_nums,
                    int(PermName.PERM_WRITE | PermName.PERM_READ), 1 if cd.unit_mode else 0)
            self.consumer_manager.register_consumer(
                cd.group_name, ClientChannelInfo(channel, data.client_id), cd.consume_type,
                cd.message_model, cd.consume_from_where, list(cd.subscriptions), notify,
                dropped)
        self.consumer_manager.drop_warnings.report(channel, data.client_id, dropped)
        for group in data.producer_groups:
            self.producer_manager.register_producer(group, info)

    def unregister_client(self, client_id: str, producer_group: str | None,
                          consumer_group: str | None, channel: Any = None) -> None:
        """``UNREGISTER_CLIENT``: leave the groups now; the consumer group's others are told."""
        self._check_open()
        if producer_group:
            ch = channel if channel is not None else self.producer_manager.find_channel(client_id)
            if ch is not None:
                self.producer_manager.unregister_producer(producer_group, ch)
        if consumer_group:
            g = self.consumer_manager.get_consumer_group_info(consumer_group)
            if g is None:
                return
            ch = channel
            if ch is None:
                ch = next((c for c, i in g.channel_info_table.items()
                           if i.client_id == client_id), None)
            if ch is None:
                return
            sgc = self.subscription_groups.get(consumer_group)
            notify = sgc.notify_consumer_ids_changed_enable if sgc is not None else True
            self.consumer_manager.unregister_consumer(consumer_group, ch, notify)

    def channel_closed(self, channel: Any) -> None:
        """A client's connection closed: it leaves every group (the others are told)."""
        self.producer_manager.do_channel_close_event(channel)
        self.consumer_manager.do_channel_close_event(channel)

    client_channel_closed = channel_closed

    def scan_not_active_channels(self) -> None:
        """One housekeeping round (120 s expiry, no notification)."""
        self.producer_manager.scan_not_active_channel()
        self.consumer_manager.scan_not_active_channel()

    def get_consumer_list_by_group(self, group: str) -> RemotingResult:
        """``GET_CONSUMER_LIST_BY_GROUP``: the group's client ids, SYSTEM_ERROR when none."""
        self._check_open()
        g = self.consumer_manager.get_consumer_group_info(group)
        ids = g.all_client_ids() if g is not None else []
        if not ids:
            return RemotingResult(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return RemotingResult(ResponseCode.SUCCESS, value=ids)

    def get_consumer_id_list(self, group: str) -> list[str]:
        """The group's client ids (empty when none; ``get_consumer_list_by_group`` gives the
        response code)."""
        r = self.get_consumer_list_by_group(group)
        return list(r.value) if r.code == ResponseCode.SUCCESS else []

    def lock_batch_mq(self, group: str, client_id: str,
                      mqs: set[MessageQueue]) -> set[MessageQueue]:
        """``LOCK_BATCH_MQ``: the queues now locked by ``client_id``."""
        self._check_open()
        return self.lock_manager.try_lock_batch(group, mqs, client_id)

    def served_queues(self, mqs: set[MessageQueue]) -> set[MessageQueue]:
        """The queues of ``mqs`` this broker serves: its name, a topic it holds, a queue id
        below the topic's queue count (what a request may lock: the lock table stays as
        large as the broker's queues, whatever a client sends)."""
        out = set()
        select = self.topic_manager.select
        for mq in mqs:
            if mq.broker_name != self.broker_name:
                continue
            tc = select(mq.topic)
            if tc is not None and 0 <= mq.queue_id < max(tc.read_queue_nums,
                                                         tc.write_queue_nums):
                out.add(mq)
        return out

    def unlock_batch_mq(self, group: str, client_id: str, mqs: set[MessageQueue]) -> None:
        """``UNLOCK_BATCH_MQ``."""
        self._check_open()
        self.lock_manager.unlock_batch(group, mqs, client_id)

    def check_transaction_state(self, group: str, request: Any, msg: MessageExt) -> bool:
        """Send ``CHECK_TRANSACTION_STATE`` to an available producer of ``group``; False when
        the group has none."""
        channel = self.producer_manager.get_available_channel(group)
        if channel is None:
            return False
        call_oneway("CHECK_TRANSACTION_STATE", channel.check_transaction_state,
                    self.broker_name, request, msg)
        return True

    def __repr__(self) -> str:
        return f"Broker({self.broker_name!r}, {self.store.root!r})"


def _bad_names(topic: object, group: object, group_field: str) -> RemotingResult | None:
    """The answer to a request naming an invalid topic or group (``rocketstore.common.names``;
    codes as ``rocketstore.remoting.request_names``), else None."""
    why = names.topic_problem(topic)
    if why is not None:
        return RemotingResult(ResponseCode.SYSTEM_ERROR, names.named("topic", topic, why))
    why = names.group_problem(group)
    if why is not None:
        return RemotingResult(ResponseCode.INVALID_PARAMETER, names.named(group_field, group, why))
    return None


def put_status_ok(r: PutMessageResult) -> bool:
    """Whether a put's status counts as stored for a send (PUT_OK or a flush/slave timeout)."""
    return r.status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                        PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)


__all__ = ["Broker", "BrokerConfig", "put_status_ok"]
