"""``PushConsumer``: RocketMQ's ``DefaultMQPushConsumer`` (MESSAGING.md §3 - §7).

Each owned queue has a ``ProcessQueue`` and one pull request in circulation: the instance's
pull service sends it (long polling: the broker holds it up to 15 s), the response lands back
on the pull service, messages go into the ProcessQueue and to the consume service, and the
request is sent again. Flow control delays the next pull instead of blocking a thread.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable

from rocketstore.client.consume_service import (ConsumeMessageConcurrentlyService,
                                                ConsumeMessageOrderlyService, JAVA_INT_MAX)
from rocketstore.client.consumer import ConsumerBase
from rocketstore.client.instance import (HEARTBEAT_BROKER_INTERVAL_MS, POLL_NAME_SERVER_INTERVAL_MS,
                                         ClientTimers)
from rocketstore.client.offset_store import ReadOffsetType
from rocketstore.client.process_queue import ProcessQueue, now_ms
from rocketstore.client.producer import Producer
from rocketstore.client.subscription import filter_by_tags
from rocketstore.common import MessageModel, MessageQueue, ResponseCode
from rocketstore.common.protocol import PullMessageRequest, PullMessageResponse
from rocketstore.errors import MQClientError
from rocketstore.remoting._wire import PullFound

log = logging.getLogger("rocketstore.client")

BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 1000
PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL = 20
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000
LOCK_INTERVAL_MS = 20000
UNLOCK_DELAY_TIME_MILLS = 20000
OFFSET_MOVED_DELAY_MS = 10000
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4
#: Pulls of one queue answered at once that the pull service sends in a row before the
#: queue lines up behind the others again. 1: more in a row measured no faster draining
#: and slowed a producer sharing the GIL (the pull thread held it longer).
INLINE_PULLS = 1


class PullRequest:
    __slots__ = ("message_queue", "process_queue", "next_offset", "previously_locked")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        self.message_queue = mq
        self.process_queue = pq
        self.next_offset = next_offset
        self.previously_locked = False


def _check_range(name: str, value: int, lo: int, hi: int) -> int:
    if not isinstance(value, int) or not lo <= value <= hi:
        raise MQClientError(f"{name} {value!r} is out of range [{lo}, {hi}]")
    return value


class PushConsumer(ConsumerBase):
    """Consumes subscribed topics with a listener, RocketMQ's push model.

    ``fn(msgs, context)`` returns ``ConsumeConcurrentlyStatus`` (or, registered with
    ``orderly=True``, ``ConsumeOrderlyStatus``); an exception counts as RECONSUME_LATER /
    SUSPEND_CURRENT_QUEUE_A_MOMENT. ``max_reconsume_times`` -1 is RocketMQ's default: 16
    retries for concurrent listeners, unlimited local retries for orderly ones.
    """

    def __init__(self, group: str, *, broker: Any = None, namesrv_addr: str | None = None,
                 message_model: str | MessageModel = "CLUSTERING",
                 consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
                 consume_timestamp_ms: int | None = None,
                 max_reconsume_times: int = -1, consume_thread_nums: int = 20,
                 consume_message_batch_max_size: int = 1, pull_batch_size: int = 32,
                 pull_interval: int = 0, pull_threshold_for_queue: int = 1000,
                 pull_threshold_size_for_queue: int = 100,
                 consume_concurrently_max_span: int = 2000,
                 suspend_current_queue_time_millis: int = 1000,
                 allocate_strategy: Any = "AVG", instance_name: str | None = None,
                 offset_store_dir: Any = None, post_subscription_when_pull: bool = False,
                 poll_name_server_interval: int = POLL_NAME_SERVER_INTERVAL_MS,
                 heartbeat_broker_interval: int = HEARTBEAT_BROKER_INTERVAL_MS,
                 credentials: Any = None, access_key: str | None = None,
                 secret_key: str | None = None,
                 on_assign: Callable[[set[MessageQueue]], Any] | None = None,
                 on_revoke: Callable[[set[MessageQueue]], Any] | None = None,
                 ) -> None:
        """``credentials`` (a ``rocketstore.acl.SessionCredentials``, or ``access_key`` and
        ``secret_key``): sign every request for a broker with plain ACL on (docs/acl.md).
        ``on_assign(queues)`` / ``on_revoke(queues)``: called (on the rebalance thread) with
        the queues a rebalance gave this consumer or took from it (Kafka's rebalance
        listener); leaving the group revokes every queue."""
        super().__init__(group, broker=broker, namesrv_addr=namesrv_addr,
                         message_model=message_model, consume_from_where=consume_from_where,
                         consume_timestamp_ms=consume_timestamp_ms,
                         allocate_strategy_=allocate_strategy, instance_name=instance_name,
                         offset_store_dir=offset_store_dir,
                         timers=ClientTimers.checked(poll_name_server_interval,
                                                     heartbeat_broker_interval),
                         credentials=credentials, access_key=access_key, secret_key=secret_key,
                         on_assign=on_assign, on_revoke=on_revoke)
        self.max_reconsume_times = max_reconsume_times
        self.consume_thread_nums = _check_range("consume_thread_nums", consume_thread_nums, 1, 1000)
        self.consume_message_batch_max_size = _check_range(
            "consume_message_batch_max_size", consume_message_batch_max_size, 1, 1024)
        self.pull_batch_size = _check_range("pull_batch_size", pull_batch_size, 1, 1024)
        self.pull_interval = _check_range("pull_interval", pull_interval, 0, 65535)
        self.pull_threshold_for_queue = _check_range("pull_threshold_for_queue",
                                                     pull_threshold_for_queue, 1, 65535)
        self.pull_threshold_size_for_queue = _check_range(
            "pull_threshold_size_for_queue", pull_threshold_size_for_queue, 1, 1024)
        self.consume_concurrently_max_span = _check_range(
            "consume_concurrently_max_span", consume_concurrently_max_span, 1, 65535)
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.post_subscription_when_pull = post_subscription_when_pull
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        self._inline_answers = False
        self.consume_service: Any = None
        self._inner_producer: Producer | None = None
        self._inner_lock = threading.Lock()
        self._paused = False
        # (broker name, topic) -> the broker's in-process PullLane, or None (over the wire,
        # or names the broker refuses)
        self._pull_lanes: dict[tuple[str, str], Any] = {}

    # -- configuration ------------------------------------------------------------------------
    def register_message_listener(self, fn: Callable[..., Any], orderly: bool = False) -> None:
        """``fn(msgs, context)``: concurrent by default, one queue at a time with ``orderly``."""
        if not callable(fn):
            raise MQClientError(f"message listener {fn!r} is not callable")
        if self._running:
            raise MQClientError("register the message listener before start()")
        self._listener = fn
        self._orderly = orderly

    def is_orderly(self) -> bool:
        return self._orderly

    def max_reconsume_times_concurrently(self) -> int:
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times

    def max_reconsume_times_orderly(self) -> int:
        return JAVA_INT_MAX if self.max_reconsume_times == -1 else self.max_reconsume_times

    def inner_producer(self) -> Producer:
        with self._inner_lock:
            if self._inner_producer is None:
                self._inner_producer = Producer._inner_for(self.instance)
            return self._inner_producer

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> PushConsumer:
        """Join the group: heartbeat, first rebalance, pulls start."""
        if self._running:
            raise MQClientError(f"push consumer {self.group!r} is already started")
        if self._listener is None:
            raise MQClientError("messageListener is null: register_message_listener() first")
        if not self._subscriptions:
            raise MQClientError("no subscription: subscribe() before start()")
        self._start_base()
        t = self.transport
        # answers taken where they arrive (``_pull``); an orderly consumer's on an I/O thread
        # only once the queue's first pull went (``previously_locked``: that pull asks the
        # broker for the offset, synchronously)
        self._inline_answers = t.inline_callbacks and not (self._orderly
                                                          and t.callbacks_on_io_thread)
        svc = ConsumeMessageOrderlyService if self._orderly else ConsumeMessageConcurrentlyService
        self.consume_service = svc(self, self._listener)
        self._running = True
        if self._orderly and self.message_model is MessageModel.CLUSTERING:
            self.instance.scheduler.schedule_at_fixed_rate(1000, LOCK_INTERVAL_MS,
                                                           self._lock_all)
        self.instance.send_heartbeat_to_all_brokers()
        self.instance.rebalance_immediately()
        return self

    def _lock_all(self) -> None:
        if self._running:
            self.rebalance.lock_all()

    def shutdown(self) -> None:
        """Finish running listeners, commit and persist offsets, leave the group: the broker
        notifies the other members, which take this consumer's queues at once."""
        if not self._running:
            return
        self._running = False
        self.consume_service.shutdown()
        if self._orderly and self.message_model is MessageModel.CLUSTERING:
            try:
                self.persist_consumer_offset()
            finally:
                self.rebalance.unlock_all()
        self._leave()

    def suspend(self) -> None:
        """Pause pulling (``suspend()``); ``resume()`` continues."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._running:
            self.instance.rebalance_immediately()

    # -- rebalance hooks ----------------------------------------------------------------------
    def dispatch_pull_requests(self, pulls: list[tuple[MessageQueue, ProcessQueue, int]]) -> None:
        for mq, pq, offset in pulls:
            self.instance.pull_service.execute(self._pull, PullRequest(mq, pq, offset))

    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        if self._orderly and self.message_model is MessageModel.CLUSTERING:
            if not pq.consume_lock.acquire(timeout=1.0):
                return False        # listener still running: keep it, retry next round
            try:
                if pq.has_temp_message():
                    self.instance.scheduler.schedule(UNLOCK_DELAY_TIME_MILLS,
                                                     lambda: self.rebalance.unlock(mq))
                else:
                    self.rebalance.unlock(mq)
            finally:
                pq.consume_lock.release()
        return True

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue],
                              mq_divided: set[MessageQueue]) -> None:
        self.instance.send_heartbeat_to_all_brokers()

    # -- the pull loop (on the pull service thread) -------------------------------------------
    def _later(self, req: PullRequest, delay_ms: float) -> None:
        if self._running:
            self.instance.scheduler.schedule(
                delay_ms, lambda: self.instance.pull_service.execute(self._pull, req))

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        """§4.2 step 3: too many or too large cached messages, or (concurrent) too wide a span."""
        return (pq.msg_count > self.pull_threshold_for_queue
                or (pq.msg_size >> 20) > self.pull_threshold_size_for_queue
                or (not self._orderly and pq.max_span() > self.consume_concurrently_max_span))

    def resume_parked_pull(self, pq: ProcessQueue) -> None:
        """Send the queue's flow-controlled pull if there is room now (consume service)."""
        if pq.parked_pull is None or self._flow_controlled(pq):
            return
        req = pq.take_parked_pull()
        if req is not None:
            self.instance.pull_service.execute(self._pull, req)

    def _pull(self, req: PullRequest, rounds: int = INLINE_PULLS) -> None:
        """Send the queue's pull; an answer that is there at once (an in-process pull that
        found messages) is handled here, with no callback or task per answer, and the next
        pull sent, ``rounds`` times, before the queue goes to the back of the pull
        service's line (fairness)."""
        for _ in range(rounds):
            fut = self._send_pull(req)
            if fut is None:
                return
            if type(fut) is PullFound:
                if not self._found(req, fut.next_begin_offset, fut.messages):
                    return
                continue
            if not fut.done():
                on_response = self._on_response
                if self._inline_answers or (req.previously_locked
                                            and self.transport.inline_callbacks):
                    # an answer that comes later (a held pull in process, any pull over
                    # TCP): handle it on the answering thread (the broker's hold service,
                    # the client's I/O thread) instead of one more thread hop, which costs
                    # a GIL switch interval while a producer is busy, and a wake-up; that
                    # thread sends one more pull at most (it has other answers to take)
                    fut.add_done_callback(lambda f: on_response(req, f, 1))
                    return
                execute = self.instance.pull_service.execute
                fut.add_done_callback(lambda f: execute(on_response, req, f))
                return
            if not self._handle_response(req, fut):
                return
        self.instance.pull_service.execute(self._pull, req)

    def _send_pull(self, req: PullRequest) -> Future[PullMessageResponse] | PullFound | None:
        """The queue's pull request sent: its future, or None when it was held back
        (dropped, suspended, flow control, no lock or subscription: rescheduled); in
        process, a ``PullFound`` when the broker's pull lane found messages at once."""
        pq = req.process_queue
        if pq.dropped or not self._running:
            return None
        pq.last_pull_timestamp = now_ms()
        if self._paused:
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_SUSPEND)
            return None
        if self._flow_controlled(pq):
            # RocketMQ re-tries after 50 ms; here the request waits on the ProcessQueue and the
            # consume service sends it as soon as consumption makes room (the timer stays as
            # a backstop), so a fast consumer never idles behind a fixed delay
            pq.park_pull(req)
            if not self._flow_controlled(pq):
                self.resume_parked_pull(pq)
            else:
                self.instance.scheduler.schedule(PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL * 20,
                                                  lambda: self.resume_parked_pull(pq))
            return None
        if self._orderly and self.message_model is MessageModel.CLUSTERING:
            if not pq.locked:
                self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
                return None
            if not req.previously_locked:
                offset = self.rebalance.compute_pull_from_where(req.message_queue)
                if offset < 0:
                    self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
                    return None
                req.next_offset = offset
                req.previously_locked = True
        mq = req.message_queue
        sub = self.subscriptions_for_rebalance().get(mq.topic)
        if sub is None:
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return None
        sys_flag = FLAG_SUSPEND
        commit = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit = self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            if commit > 0:
                sys_flag |= FLAG_COMMIT_OFFSET
            else:
                commit = 0
        if self.post_subscription_when_pull:
            sys_flag |= FLAG_SUBSCRIPTION
        else:
            key = (mq.broker_name, mq.topic)
            lane = self._pull_lanes.get(key, False)
            if lane is False:
                lane = self._lane_of(mq)
            if lane is not None:
                try:
                    found = lane.pull(mq.queue_id, req.next_offset, self.pull_batch_size,
                                      sys_flag, commit, sub.sub_version)
                except Exception as e:      # the request path answers it, and says why
                    log.debug("pull lane of %s: %s", mq, e)
                    found = None
                if found is not None:
                    return found
        request = PullMessageRequest(self.group, mq.topic, mq.queue_id, req.next_offset,
                                     self.pull_batch_size, sys_flag, commit,
                                     BROKER_SUSPEND_MAX_TIME_MILLIS,
                                     sub.sub_string if sys_flag & FLAG_SUBSCRIPTION else None,
                                     sub.sub_version)
        try:
            return self.transport.pull_message(mq.broker_name, request)
        except Exception as e:
            log.warning("pull %s: %s", mq, e)
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return None

    def _lane_of(self, mq: MessageQueue) -> Any:
        """The transport's pull lane of (broker, topic) for this group, looked up once; None
        over the wire (or when it cannot be had: the request path then answers)."""
        lane = None
        get = getattr(self.transport, "pull_lane", None)
        if get is not None:
            try:
                lane = get(mq.broker_name, self.group, mq.topic)
            except Exception as e:      # a closed or unknown broker: the request path says
                log.debug("no pull lane for %s: %s", mq, e)
                return None
        self._pull_lanes[(mq.broker_name, mq.topic)] = lane
        return lane

    def _on_response(self, req: PullRequest, fut: Future[PullMessageResponse],
                     rounds: int = INLINE_PULLS) -> None:
        if self._handle_response(req, fut):
            self._pull(req, rounds)

    def _found(self, req: PullRequest, next_begin_offset: int, messages: list[Any]) -> bool:
        """A SUCCESS answer taken in: the messages cached and handed to the consume service;
        True when the queue's next pull is to be sent now."""
        pq = req.process_queue
        if pq.dropped or not self._running:
            return False
        mq = req.message_queue
        req.next_offset = next_begin_offset
        sub = self.subscriptions_for_rebalance().get(mq.topic)
        msgs = messages if sub is None else filter_by_tags(messages, sub)
        if msgs:
            dispatch = pq.put_message(msgs)
            self.consume_service.submit(msgs, pq, mq, dispatch)
        elif pq.msg_count == 0:
            self.offset_store.update_offset(mq, next_begin_offset, True)
        if self.pull_interval > 0 and msgs:
            self._later(req, self.pull_interval)
            return False
        return True

    def _handle_response(self, req: PullRequest, fut: Future[PullMessageResponse]) -> bool:
        """A pull's answer taken in; True when the queue's next pull is to be sent now."""
        pq = req.process_queue
        if pq.dropped or not self._running:
            return False
        try:
            resp = fut.result()
        except Exception as e:
            log.warning("pull %s failed: %s", req.message_queue, e)
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return False
        code = resp.code
        mq = req.message_queue
        if code == ResponseCode.SUCCESS:
            return self._found(req, resp.next_begin_offset, resp.messages)
        if code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            req.next_offset = resp.next_begin_offset
            if pq.msg_count == 0:      # correctTagsOffset
                self.offset_store.update_offset(mq, req.next_offset, True)
            return True
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning("pull %s: offset %d illegal, moving to %d", mq, req.next_offset,
                        resp.next_begin_offset)
            req.next_offset = resp.next_begin_offset
            pq.dropped = True

            def correct() -> None:
                self.offset_store.update_offset(mq, req.next_offset, False)
                self.offset_store.persist(mq)
                self.rebalance.process_queue_table.pop(mq, None)
                self.instance.rebalance_immediately()
            self.instance.scheduler.schedule(OFFSET_MOVED_DELAY_MS, correct)
        elif code == ResponseCode.FLOW_CONTROL:
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL)
        else:
            log.warning("pull %s: %s %s", mq, code, resp.remark)
            self._later(req, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
        return False
