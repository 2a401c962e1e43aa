"""The broker's admin request codes: what ``mqadmin`` (Java's or ``rocketstore admin``) sends.

``install(processor)`` adds these handlers to a ``BrokerProcessor`` (its one hook):

  UPDATE_AND_CREATE_TOPIC 17      create or change a topic (the broker then re-registers)
  DELETE_TOPIC_IN_BROKER 215      drop a topic's config (its stored messages age out)
  GET_TOPIC_STATS_INFO 202        min/max offset and last store time per queue
  GET_TOPIC_CONFIG 351            one topic's config with its 5.x attributes (what RocketMQ 5's
                                  proxy reads a topic's message.type from)
  GET_CONSUME_STATS 208           per queue: broker offset, the group's offset, last consumed time
  GET_CONSUMER_CONNECTION_LIST 203 the group's clients, subscriptions and consume settings
  QUERY_MESSAGE 12                messages by key (or client id) through the index
  INVOKE_BROKER_TO_RESET_OFFSET 222 move a group's offsets to a time
  GET_BROKER_RUNTIME_INFO 28      RocketMQ's key/value table plus this broker's metrics
  GET_ALL_TOPIC_CONFIG 21         every topic's config (TopicConfigSerializeWrapper)
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201,
  DELETE_SUBSCRIPTIONGROUP 207    subscription groups (subscriptionGroup.json)
  GET_PRODUCER_CONNECTION_LIST 204 a producer group's clients
  GET_CONSUMER_RUNNING_INFO 307   relayed to the consumer over its own connection, its answer
                                  (bytes untouched) relayed back, as 4.9.8's callConsumer
  QUERY_TOPIC_CONSUME_BY_WHO 300  groups subscribed to a topic or with offsets on it
  GET_BROKER_CONSUME_STATS 317    every group's queues: broker and consumer offsets, total diff
  CLEAN_UNUSED_TOPIC 316          consume queues of topics without a config dropped
  VIEW_BROKER_STATS_DATA 315      a stats item's minute/hour/day sum and tps (statsAll)
  GET_BROKER_CONFIG 26, UPDATE_BROKER_CONFIG 25  settings (rocketstore.broker.runtime_config:
                                  only a whitelist changes at run time)
  GET_ALL_CONSUMER_OFFSET 43, GET_ALL_DELAY_OFFSET 45   consumer and delay offsets; with 21 and
                                  201 what a slave copies from its master every 10 s
                                  (``rocketstore.broker.slave_sync``), in fastjson's form

A SLAVE refuses topic and group changes (SYSTEM_ERROR, RocketMQ's remark): its tables are
its master's copy.

Bodies are what a Java admin reads (``admin_bodies``). Calls that touch the disk or persist
(topic updates, index lookups, resets) run on the processor's thread pool.

Offset reset of a group with consumers online is done by the broker, as RocketMQ 5's
``useServerSideResetOffset``: it writes the group's committed offsets itself and pushes
``RESET_CONSUMER_CLIENT_OFFSET`` (220) to the group's online clients so they drop what they
hold and pull from there (``ResetOffsetBodyForC`` for the C++ client, as 4.9.8's
``Broker2Client`` does). With nobody online it answers CONSUMER_NOT_ONLINE and writes
nothing, as 4.9.8 does; the admin tool (Java's mqadmin or ``rocketstore admin``) then writes
the offsets itself with UPDATE_CONSUMER_OFFSET, which the ACL checks like any offset update.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.broker import runtime_config
from rocketstore.broker import subscription_group as sub_groups
from rocketstore.common import names
from rocketstore.common.protocol import MessageQueue, ResponseCode
from rocketstore.remoting import admin_bodies as bodies
from rocketstore.remoting import fastjson, requests
from rocketstore.errors import RocketStoreError, TransportError
from rocketstore.common.codes import LanguageCode, RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import Connection
from rocketstore.remoting.zerocopy import RecordBody
from rocketstore.store import topic_attributes
from rocketstore.store.topics import MULTI_TAG, SINGLE_TAG, TopicConfig

if TYPE_CHECKING:
    from rocketstore.broker import Broker
    from rocketstore.remoting.broker_processor import BrokerProcessor

log = logging.getLogger("rocketstore.broker.admin")

DEFAULT_QUERY_MAX_NUM = 32              # MessageStoreConfig.defaultQueryMaxNum
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
CALL_CLIENT_TIMEOUT_S = 10.0            # Broker2Client.callClient
VERSION_V3_1_8 = 62                     # MQVersion V3_1_8_SNAPSHOT: older clients are not asked
CREDENTIAL_FIELDS = frozenset({"AccessKey", "Signature", "SecurityToken"})   # acl.signature
SLAVE_REFUSAL = "Can't modify topic or subscription group from slave broker"


def validate_topic(topic: str) -> str | None:
    """``TopicValidator.validateTopic`` (``rocketstore.common.names``): None when valid, else
    the reason."""
    return names.topic_problem(topic)


class AdminProcessor:
    """Admin handlers over one ``Broker``; ``handlers()`` maps request codes to them."""

    def __init__(self, broker: Broker, blocking: Callable[..., asyncio.Future[Any]]) -> None:
        self.broker = broker
        self._blocking = blocking

    def handlers(self) -> dict[int, Callable[[Connection, RemotingCommand, Any], Any]]:
        R = RequestCode
        return {R.UPDATE_AND_CREATE_TOPIC: self.update_topic,
                R.DELETE_TOPIC_IN_BROKER: self.delete_topic,
                R.GET_TOPIC_STATS_INFO: self.topic_stats,
                R.GET_TOPIC_CONFIG: self.topic_config,
                R.GET_CONSUME_STATS: self.consume_stats,
                R.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
                R.QUERY_MESSAGE: self.query_message,
                R.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
                R.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_sub_group,
                R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_sub_groups,
                R.DELETE_SUBSCRIPTIONGROUP: self.delete_sub_group,
                R.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
                R.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
                R.QUERY_TOPIC_CONSUME_BY_WHO: self.topic_consumed_by,
                R.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
                R.CLEAN_UNUSED_TOPIC: self.clean_unused_topic,
                R.VIEW_BROKER_STATS_DATA: self.stats_data,
                R.GET_BROKER_CONFIG: self.broker_config,
                R.GET_ALL_TOPIC_CONFIG: self.all_topic_configs,
                R.UPDATE_BROKER_CONFIG: self.update_broker_config,
                R.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offset,
                R.GET_ALL_DELAY_OFFSET: self.all_delay_offset}

    def _slave_refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """``validateSlave``: a slave's topics and groups change only by its master's sync."""
        if self.broker.is_slave:
            return cmd.response(ResponseCode.SYSTEM_ERROR, SLAVE_REFUSAL)
        return None

    # -- topics -------------------------------------------------------------------------------
    async def update_topic(self, conn: Connection, cmd: RemotingCommand,
                           r: requests.TopicUpdate) -> RemotingCommand:
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused
        topic = r.topic
        why = validate_topic(topic)
        if why is not None:
            return cmd.response(ResponseCode.INVALID_PARAMETER, why)
        if self.broker.topic_manager.is_system_topic(topic):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"The topic[{topic}] is conflict with system topic.")
        filter_type = r.filter_type or SINGLE_TAG
        if filter_type not in (SINGLE_TAG, MULTI_TAG):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"topicFilterType {filter_type!r} is not SINGLE_TAG or MULTI_TAG")
        current = self.broker.topic_manager.select(topic)
        try:
            # RocketMQ 5: the header's modification applies to the topic's current attributes
            # (properties a 4.9 request does not carry are kept, not dropped)
            extra = dict(current.extra) if current is not None else {}
            change = topic_attributes.parse_modification(r.attributes)
            if change:
                attrs = topic_attributes.alter(current.attributes if current else {}, change,
                                               create=current is None)
                if (attrs.get(topic_attributes.MESSAGE_TYPE) == topic_attributes.MIXED
                        and not self.broker.config.enable_mixed_message_type):
                    return cmd.response(ResponseCode.INVALID_PARAMETER,
                                        "MIXED message type is not supported (the broker's "
                                        "enableMixedMessageType is false)")
                extra["attributes"] = attrs
            tc = TopicConfig(topic, r.read_queue_nums, r.write_queue_nums, r.perm, filter_type,
                             r.topic_sys_flag, r.order, extra)
        except (TypeError, ValueError) as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(e))
        if current == tc and current.extra == tc.extra:
            return cmd.response(ResponseCode.SUCCESS)       # unchanged: idempotent, as 5.x
        log.info("update or create topic %s from %s: %s", topic, conn.peer, tc)
        await self._blocking(self.broker.topic_manager.update, tc)
        return cmd.response(ResponseCode.SUCCESS)

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand,
                           r: requests.TopicRef) -> RemotingCommand:
        # the name was checked before dispatch (request_names): never a path; the store
        # removes only the queues its in-memory table holds (4.9.8's cleanUnusedTopic)
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused
        topic = r.topic
        if self.broker.topic_manager.is_system_topic(topic):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"The topic[{topic}] is conflict with system topic.")
        log.info("delete topic %s from %s", topic, conn.peer)
        await self._blocking(self.broker.delete_topic, topic)
        return cmd.response(ResponseCode.SUCCESS)

    def topic_config(self, conn: Connection, cmd: RemotingCommand,
                     r: requests.TopicRef) -> RemotingCommand:
        # RocketMQ 5's TopicConfigAndQueueMapping: the topic's config bean (with "attributes"
        # when it has them) plus "mappingDetail" (static topics; none here)
        tc = self.broker.topic_manager.select(r.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic in this broker. topic: {r.topic}")
        doc = dict(tc.extra)
        doc.update(order=tc.order, perm=tc.perm, readQueueNums=tc.read_queue_nums,
                   topicFilterType=tc.topic_filter_type, topicName=tc.topic_name,
                   topicSysFlag=tc.topic_sys_flag, writeQueueNums=tc.write_queue_nums)
        doc.setdefault("attributes", {})
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(doc).encode())

    def topic_stats(self, conn: Connection, cmd: RemotingCommand,
                    r: requests.TopicRef) -> RemotingCommand:
        topic = r.topic
        tc = self.broker.topic_manager.select(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store, name = self.broker.store, self.broker.broker_name
        table = {}
        for qid in range(max(tc.write_queue_nums, tc.read_queue_nums)):
            lo = max(0, store.get_min_offset_in_queue(topic, qid))
            hi = max(0, store.get_max_offset_in_queue(topic, qid))
            ts = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            table[MessageQueue(topic, name, qid)] = bodies.TopicOffset(lo, hi, max(0, ts))
        m = self.broker.metrics
        tps = m.rates()[0].get(topic, 0.0) if m is not None else 0.0
        return cmd.response(ResponseCode.SUCCESS, body=bodies.encode_topic_stats(table, tps))

    # -- consumers ----------------------------------------------------------------------------
    def _stats_topics(self, group: str, topic: str | None) -> list[str]:
        if topic:
            return [topic]
        topics = set(self.broker.store.consumer_offset_manager.which_topics_by_group(group))
        g = self.broker.consumer_manager.get_consumer_group_info(group)
        if g is not None:
            topics.update(g.subscription_table)
        return sorted(topics)

    def consume_stats(self, conn: Connection, cmd: RemotingCommand,
                      r: requests.ConsumeStatsQuery) -> RemotingCommand:
        group = r.group
        topics = list(r.topic_list) or self._stats_topics(group, r.topic)
        store, name = self.broker.store, self.broker.broker_name
        table = {}
        tps = 0.0
        rates = self.broker.metrics.rates()[1] if self.broker.metrics is not None else {}
        for topic in topics:
            tc = self.broker.topic_manager.select(topic)
            if tc is None:
                continue
            for qid in range(tc.read_queue_nums):
                broker_off = max(0, store.get_max_offset_in_queue(topic, qid))
                consumer_off = max(0, store.query_offset(group, topic, qid))
                last = 0
                if consumer_off > 0:
                    last = max(0, store.get_message_store_timestamp(topic, qid, consumer_off - 1))
                table[MessageQueue(topic, name, qid)] = bodies.OffsetWrapper(
                    broker_off, consumer_off, consumer_off, last)
            tps += rates.get((group, topic), 0.0)
        return cmd.response(ResponseCode.SUCCESS, body=bodies.encode_consume_stats(table, tps))

    def consumer_connections(self, conn: Connection, cmd: RemotingCommand,
                             r: requests.GroupRef) -> RemotingCommand:
        group = r.group
        g = self.broker.consumer_manager.get_consumer_group_info(group)
        if g is None or not g.channel_info_table:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer group[{group}] not online")
        conns = []
        for ch, info in list(g.channel_info_table.items()):
            conns.append(bodies.connection_json(ch, info.client_id))
        body = {"connectionSet": sorted(conns, key=lambda c: c["clientId"]),
                "consumeFromWhere": g.consume_from_where.value,
                "consumeType": g.consume_type.value, "messageModel": g.message_model.value,
                "subscriptionTable": {t: bodies.subscription_json(s)
                                      for t, s in sorted(g.subscription_table.items())}}
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode())

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand,
                           r: requests.ResetOffset) -> RemotingCommand:
        return await self._blocking(self._reset_offset, cmd, r.topic, r.group, r.timestamp,
                                    r.force)

    def _reset_offset(self, cmd: RemotingCommand, topic: str, group: str, timestamp: int,
                      force: bool) -> RemotingCommand:
        broker, store = self.broker, self.broker.store
        tc = broker.topic_manager.select(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "[reset-offset] reset offset "
                                f"failed, no topic in this broker. topic={topic}")
        committed = store.consumer_offset_manager.query_offsets(group, topic)
        online = broker.consumer_manager.get_consumer_group_info(group)
        if not committed and (online is None or topic not in online.subscription_table):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"THe consumer group <{group}> not exist")
        if online is None or not online.channel_info_table:
            # as 4.9.8's Broker2Client: nothing is written; the admin tool then moves the
            # offsets itself with UPDATE_CONSUMER_OFFSET (mqadmin's resetOffsetByTimeOld path)
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                "Consumer not online, so can not reset offset, Group: "
                                f"{group} Topic: {topic} Timestamp: {timestamp}")
        table: dict[MessageQueue, int] = {}
        for qid in range(tc.write_queue_nums):
            current = committed.get(qid, -1)
            if timestamp == -1:
                target = store.get_max_offset_in_queue(topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(topic, qid, timestamp)
            target = max(0, target)
            new = target if force or current < 0 or target < current else current
            table[MessageQueue(topic, broker.broker_name, qid)] = new
            store.commit_offset(group, topic, qid, new)
        store.persist_offsets()
        log.info("[reset-offset] group %s topic %s to %d (force %s): %s", group, topic, timestamp,
                 force, {mq.queue_id: o for mq, o in table.items()})
        for ch in list(online.channel_info_table):
            self._push_reset(ch, topic, group, timestamp, table)
        return cmd.response(ResponseCode.SUCCESS, body=bodies.encode_reset_offsets(table))

    @staticmethod
    def _push_reset(channel: Any, topic: str, group: str, timestamp: int,
                    table: dict[MessageQueue, int]) -> None:
        conn = getattr(channel, "conn", None)
        loop = getattr(channel, "loop", None)
        if conn is None or loop is None:
            return          # an in-process client: it reads the committed offsets again
        is_c = conn.attributes.get("client_language") == LanguageCode.CPP.name
        body = (bodies.encode_reset_offsets_for_c(table) if is_c
                else bodies.encode_reset_offsets(table))
        req = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {
            "topic": topic, "group": group, "timestamp": timestamp, "isForce": True}, body,
            oneway=True)
        try:
            loop.call_soon_threadsafe(conn.oneway, req)
        except RuntimeError:            # the loop is closing: the client is going away anyway
            pass

    # -- messages -----------------------------------------------------------------------------
    async def query_message(self, conn: Connection, cmd: RemotingCommand,
                            r: requests.QueryMessage) -> RemotingCommand:
        topic, key, begin, end = r.topic, r.key, r.begin, r.end
        max_num = DEFAULT_QUERY_MAX_NUM if r.unique else r.max_num
        store = self.broker.store
        msgs = await self._blocking(lambda: store.query_message(topic, key, max(1, max_num),
                                                                begin, end, raw=True))
        ext = {"indexLastUpdateTimestamp": store.checkpoint.index_msg_timestamp,
               "indexLastUpdatePhyoffset": store.get_max_phy_offset()}
        if not msgs:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct",
                                ext_fields=ext)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=ext,
                            body=RecordBody.of(msgs))    # views of the mapping, no copy

    # -- what a slave copies (with GET_ALL_TOPIC_CONFIG and GET_ALL_SUBSCRIPTIONGROUP_CONFIG) --
    def all_consumer_offset(self, conn: Connection, cmd: RemotingCommand,
                            r: None) -> RemotingCommand:
        # a plain function, so copy and encoding both run on the admin pool: an async
        # handler's code before its first await runs on the event loop (13 ms of copying per
        # 320,000 entries, with every connection's sends and pulls waiting)
        table = self.broker.store.consumer_offset_manager.table()
        body = fastjson.dumps_int_keys({"offsetTable": table})
        return cmd.response(ResponseCode.SUCCESS, body=body.encode())

    def all_delay_offset(self, conn: Connection, cmd: RemotingCommand,
                         r: None) -> RemotingCommand:
        service = self.broker.schedule_service
        if service is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "No delay offset in this broker")
        body = fastjson.dumps_int_keys({"offsetTable": dict(sorted(service.offsets().items()))})
        return cmd.response(ResponseCode.SUCCESS, body=body.encode())

    # -- broker -------------------------------------------------------------------------------
    async def runtime_info(self, conn: Connection, cmd: RemotingCommand,
                           r: None) -> RemotingCommand:
        m = self.broker.metrics
        if m is None:
            from rocketstore.broker.metrics import BrokerMetrics
            m = BrokerMetrics(self.broker)      # no counters: the store-derived figures only
        table = await self._blocking(m.runtime_info)
        return cmd.response(ResponseCode.SUCCESS, body=bodies.encode_kv_table(table))

    def all_topic_configs(self, conn: Connection, cmd: RemotingCommand,
                          r: None) -> RemotingCommand:
        # TopicConfigManager.encode(): {"dataVersion":..,"topicConfigTable":..} (mqadmin's
        # exportMetadata / exportMetrics read it through getUserTopicConfig)
        doc = self.broker.store.topic_config_manager.snapshot()
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(doc).encode())

    # -- subscription groups --------------------------------------------------------------------
    async def update_sub_group(self, conn: Connection, cmd: RemotingCommand,
                               r: requests.SubGroupUpdate) -> RemotingCommand:
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused
        why = names.group_problem(r.group)
        if why is not None:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                names.named("groupName", r.group, why))
        try:
            config = sub_groups.from_bean(r.group, r.fields)
        except (TypeError, ValueError) as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(e))
        log.info("update or create subscription group %s from %s: %s", r.group, conn.peer, config)
        await self._blocking(self.broker.subscription_groups.update, config)
        return cmd.response(ResponseCode.SUCCESS)

    def all_sub_groups(self, conn: Connection, cmd: RemotingCommand, r: None) -> RemotingCommand:
        # SubscriptionGroupManager.encode(): {"dataVersion":..,"subscriptionGroupTable":..}
        doc = self.broker.subscription_groups.snapshot()
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(doc).encode())

    async def delete_sub_group(self, conn: Connection, cmd: RemotingCommand,
                               r: requests.SubGroupDelete) -> RemotingCommand:
        refused = self._slave_refusal(cmd)
        if refused is not None:
            return refused
        log.info("delete subscription group %s from %s (remove offsets: %s)", r.group, conn.peer,
                 r.remove_offset)
        await self._blocking(self.broker.subscription_groups.delete, r.group)
        if r.remove_offset:
            await self._blocking(self._remove_offsets, r.group)
        return cmd.response(ResponseCode.SUCCESS)

    def _remove_offsets(self, group: str) -> None:
        store = self.broker.store
        store.consumer_offset_manager.remove_offset(group)
        store.persist_offsets()

    # -- clients --------------------------------------------------------------------------------
    def producer_connections(self, conn: Connection, cmd: RemotingCommand,
                             r: requests.ProducerGroupRef) -> RemotingCommand:
        pm = self.broker.producer_manager
        infos = pm.group_infos(r.group)
        if infos is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the producer group[{r.group}] not exist")
        conns = sorted((bodies.connection_json(ch, info.client_id) for ch, info in infos),
                       key=lambda c: c["clientId"])
        return cmd.response(ResponseCode.SUCCESS,
                            body=fastjson.dumps({"connectionSet": conns}).encode())

    async def consumer_running_info(self, conn: Connection, cmd: RemotingCommand,
                                    r: requests.RunningInfoQuery) -> RemotingCommand:
        """AdminBrokerProcessor.callConsumer: the request, as received, goes to the client
        over its own connection; its answer (``ConsumerRunningInfo``, bytes untouched) comes
        back as this answer."""
        g = self.broker.consumer_manager.get_consumer_group_info(r.group)
        channel = None
        if g is not None:
            channel = next((ch for ch, info in list(g.channel_info_table.items())
                            if info.client_id == r.client_id), None)
        client = getattr(channel, "conn", None)
        if client is None or not client.is_open:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer <{r.group}> <{r.client_id}> not online")
        version = client.attributes.get("client_version", 0)
        if isinstance(version, int) and version < VERSION_V3_1_8:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer <{r.client_id}> Version <{version}> too low to "
                                "finish, please upgrade it to V3_1_8_SNAPSHOT")
        relay = RemotingCommand.request(cmd.code, None, bytes(cmd.body) if cmd.body else None)
        # the admin's fields, but not its credentials: 4.9.8 forwards the AccessKey and the
        # request's Signature to the consumer too, which has no use for them
        relay.ext_fields = {k: v for k, v in cmd.ext_fields.items() if k not in CREDENTIAL_FIELDS}
        client_loop = getattr(channel, "loop", None)
        try:
            if client_loop is None or client_loop is asyncio.get_running_loop():
                answer = await client.request(relay, CALL_CLIENT_TIMEOUT_S)
            else:               # the client came in on another server's loop
                async def call() -> RemotingCommand:
                    return await client.request(relay, CALL_CLIENT_TIMEOUT_S)
                answer = await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(call(), client_loop))
        except TransportError as e:
            timed_out = "no response" in str(e)
            code = ResponseCode.CONSUME_MSG_TIMEOUT if timed_out else ResponseCode.SYSTEM_ERROR
            what = "Timeout" if timed_out else "Exception"
            return cmd.response(code, f"consumer <{r.group}> <{r.client_id}> {what}: {e}")
        return cmd.response(answer.code, answer.remark, ext_fields=dict(answer.ext_fields),
                            body=bytes(answer.body) if answer.body else None)

    # -- topics and groups seen from the broker ------------------------------------------------
    def topic_consumed_by(self, conn: Connection, cmd: RemotingCommand,
                          r: requests.TopicRef) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: groups online with a subscription to the topic, and
        groups with committed offsets on it (``GroupList``)."""
        groups = set(self.broker.store.consumer_offset_manager.which_groups_by_topic(r.topic))
        cm = self.broker.consumer_manager
        for group in cm.groups():
            if cm.find_subscription_data(group, r.topic) is not None:
                groups.add(group)
        return cmd.response(ResponseCode.SUCCESS,
                            body=fastjson.dumps({"groupList": sorted(groups)}).encode())

    def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand,
                             r: requests.BrokerConsumeStatsQuery) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (``fetchAllConsumeStatsInBroker``): for every subscription
        group, per topic it has offsets on, the queues' broker and consumer offsets."""
        b = self.broker
        store, name = b.store, b.broker_name
        rates = b.metrics.rates()[1] if b.metrics is not None else {}
        out = []
        total = 0
        for group in sorted(b.subscription_groups.all()):
            stats = []
            for topic in sorted(store.consumer_offset_manager.which_topics_by_group(group)):
                tc = b.topic_manager.select(topic)
                if tc is None or (r.order and not tc.order):
                    continue
                g = b.consumer_manager.get_consumer_group_info(group)
                if (g is not None and g.subscription_table
                        and g.find_subscription_data(topic) is None):
                    continue        # online, but no longer subscribed to it (as 4.9.8)
                table = {}
                for qid in range(tc.write_queue_nums):
                    broker_off = max(0, store.get_max_offset_in_queue(topic, qid))
                    consumer_off = max(0, store.query_offset(group, topic, qid))
                    last = 0
                    if consumer_off > 0:
                        last = max(0, store.get_message_store_timestamp(topic, qid,
                                                                        consumer_off - 1))
                    w = bodies.OffsetWrapper(broker_off, consumer_off, 0, last)
                    table[MessageQueue(topic, name, qid)] = w
                    total += broker_off - consumer_off      # computeTotalDiff: not clamped
                stats.append((table, rates.get((group, topic), 0.0)))
            out.append((group, stats))
        return cmd.response(ResponseCode.SUCCESS, body=bodies.encode_consume_stats_list(
            b.config.broker_addr, out, total))

    async def clean_unused_topic(self, conn: Connection, cmd: RemotingCommand,
                                 r: None) -> RemotingCommand:
        log.warning("cleanUnusedTopic from %s", conn.peer)
        await self._blocking(self._clean_unused_topics)
        return cmd.response(ResponseCode.SUCCESS)

    def _clean_unused_topics(self) -> list[str]:
        """``cleanUnusedTopic``: drop the consume queues of topics with no config. System
        topics are kept: 4.9.8 keeps the schedule and transaction-op topics only, and would
        drop the half-message queue whose config the check service creates later (pending
        transactions lost)."""
        store = self.broker.store
        configured = set(store.topic_config_manager.all())
        cleaned = []
        for topic in store.list_topics():
            if topic in configured or self.broker.topic_manager.is_system_topic(topic):
                continue
            try:
                self.broker.delete_topic(topic)
            except RocketStoreError as e:       # a name the store refuses: left as it is
                log.warning("cleanUnusedTopic: %s kept: %s", topic, e)
                continue
            log.info("cleanUnusedTopic: %s destroyed", topic)
            cleaned.append(topic)
        return cleaned

    def stats_data(self, conn: Connection, cmd: RemotingCommand,
                   r: requests.StatsQuery) -> RemotingCommand:
        m = self.broker.metrics
        item = m.windows.item(r.name, r.key) if m is not None else None
        if item is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"The stats <{r.name}> <{r.key}> not exist")
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(item).encode())

    # -- settings -------------------------------------------------------------------------------
    def broker_config(self, conn: Connection, cmd: RemotingCommand, r: None) -> RemotingCommand:
        dv = runtime_config.version(self.broker)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"version": fastjson.dumps(
            {"counter": dv.counter, "timestamp": dv.timestamp})},
            body=runtime_config.config_text(self.broker).encode("utf-8"))

    def update_broker_config(self, conn: Connection, cmd: RemotingCommand,
                             r: requests.BrokerConfigUpdate) -> RemotingCommand:
        log.info("updateBrokerConfig from %s: %s", conn.peer, r.properties)
        code, remark = runtime_config.update(self.broker, r.properties)
        return cmd.response(code, remark)


def install(processor: BrokerProcessor) -> None:
    """Register the admin handlers on ``processor``."""
    admin = AdminProcessor(processor.broker, processor._blocking)
    processor._handlers.update(admin.handlers())
