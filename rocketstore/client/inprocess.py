"""InProcessTransport: a client's ``Transport`` that calls a ``Broker`` in this process.

Requests go straight to the broker's handlers; pulled messages are the store's zero-copy
``MessageExt`` views. Sends and pulls return the broker's futures, so no thread waits per send
(a SYNC_FLUSH send completes after the group commit's sync) or per suspended pull. Broker-side
refusals come back as response codes, as over the wire; a closed broker or transport raises
``TransportError``.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from rocketstore.client.transport import ClientChannel, Transport
from rocketstore.common.protocol import (ConsumerSendMsgBackRequest, EndTransactionRequest,
                                         HeartbeatData, MessageQueue, PullMessageRequest,
                                         PullMessageResponse,
                                         RemotingResult, ResponseCode, SendMessageRequest,
                                         SendMessageResponse, TopicRouteData)
from rocketstore.errors import MQBrokerError, StoreClosedError, TransportError
from rocketstore.store._codec import as_client_messages

if TYPE_CHECKING:
    from rocketstore.broker.broker import Broker
    from rocketstore.store.types import Message, MessageExt


class InProcessTransport(Transport):
    """One client instance's direct line to a ``Broker`` (thread-safe)."""

    inline_callbacks = True

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.name = broker.broker_name
        self._closed = False
        self._channels: set[ClientChannel] = set()

    def _b(self, broker_name: str) -> Broker:
        if self._closed:
            raise TransportError(broker_name, "transport closed")
        if broker_name != self.name:
            raise TransportError(broker_name, f"unknown broker (this transport reaches {self.name!r})")
        if self.broker.closed:
            raise TransportError(broker_name, "broker closed")
        return self.broker

    def _call(self, broker_name: str, fn_name: str, *args):
        b = self._b(broker_name)
        try:
            return getattr(b, fn_name)(*args)
        except StoreClosedError as e:
            raise TransportError(broker_name, f"broker closed: {e}") from e

    # routes
    def get_topic_route(self, topic: str) -> TopicRouteData | None:
        return self._call(self.name, "get_topic_route", topic)

    def broker_names(self) -> list[str]:
        return [self.name]

    # produce
    def send_message(self, broker_name: str, request: SendMessageRequest,
                     timeout_ms: int = 3000) -> SendMessageResponse:
        fut = self.send_message_async(broker_name, request)
        try:
            return fut.result(timeout_ms / 1000.0)
        except TimeoutError:
            raise TransportError(broker_name, f"send timed out after {timeout_ms} ms") from None

    def send_one(self, broker_name: str, producer_group: str, topic: str, queue_id: int,
                 msg: Message, default_topic: str, default_topic_queue_nums: int,
                 timeout_ms: int = 3000) -> SendMessageResponse:
        """The sync send's fast path: ``Broker.send_one`` on this thread, no request object
        and (under ASYNC_FLUSH) no future."""
        b = self._b(broker_name)
        try:
            r = b.send_one(producer_group, topic, queue_id, msg, default_topic,
                           default_topic_queue_nums)
        except StoreClosedError as e:
            raise TransportError(broker_name, f"broker closed: {e}") from e
        if type(r) is SendMessageResponse:
            return r
        try:                            # SYNC_FLUSH: answered after the group commit's sync
            return r.result(timeout_ms / 1000.0)
        except TimeoutError:
            raise TransportError(broker_name, f"send timed out after {timeout_ms} ms") from None

    def send_lane(self, broker_name: str, producer_group: str, topic: str, default_topic: str,
                  default_topic_queue_nums: int
                  ) -> Callable[[Message, int], Any]:
        """The broker's ``SendLane.send`` for the pair: a ``PutMessageResult`` for a put stored
        at once, else ``send_one``'s answer (it raises ``StoreClosedError`` once the broker is
        closed)."""
        return self._b(broker_name).send_lane(producer_group, topic, default_topic,
                                              default_topic_queue_nums).send

    def send_one_async(self, broker_name: str, producer_group: str, topic: str, queue_id: int,
                       msg: Message, default_topic: str, default_topic_queue_nums: int
                       ) -> SendMessageResponse | Future[SendMessageResponse]:
        """``Broker.send_one`` on this thread: the answer itself under ASYNC_FLUSH, the
        broker's future (completed by the group commit) under SYNC_FLUSH."""
        try:
            return self._b(broker_name).send_one(producer_group, topic, queue_id, msg,
                                                 default_topic, default_topic_queue_nums)
        except StoreClosedError as e:
            raise TransportError(broker_name, f"broker closed: {e}") from e

    def send_message_async(self, broker_name: str,
                           request: SendMessageRequest) -> Future[SendMessageResponse]:
        return self._call(broker_name, "send_message", request)

    def send_message_oneway(self, broker_name: str, request: SendMessageRequest) -> None:
        self._call(broker_name, "send_message", request)

    def end_transaction(self, broker_name: str, request: EndTransactionRequest) -> None:
        self._call(broker_name, "end_transaction", request)

    # consume
    def pull_message(self, broker_name: str,
                     request: PullMessageRequest) -> Future[PullMessageResponse]:
        # what a consumer is handed: msg_id is the UNIQ_KEY (RocketMQ's MessageClientExt)
        fut: Future[PullMessageResponse] = self._call(broker_name, "pull_message", request)
        if fut.done():                  # the usual case: no second future
            if fut.exception() is None:
                as_client_messages(fut.result().messages)
            return fut
        out: Future[PullMessageResponse] = Future()

        def done(f: Future[PullMessageResponse]) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
            as_client_messages(f.result().messages)
            out.set_result(f.result())
        fut.add_done_callback(done)
        return out

    def pull_lane(self, broker_name: str, group: str, topic: str) -> Any:
        """The broker's ``PullLane`` of (group, topic) (``pull`` answers a ``PullFound`` or
        None: send the request), or None."""
        return self._b(broker_name).pull_lane(group, topic)

    def query_consumer_offset(self, broker_name: str, group: str, topic: str,
                              queue_id: int) -> RemotingResult:
        return self._call(broker_name, "query_consumer_offset", group, topic, queue_id)

    def update_consumer_offset(self, broker_name: str, group: str, topic: str, queue_id: int,
                               offset: int) -> None:
        self._call(broker_name, "update_consumer_offset", group, topic, queue_id, offset)

    def get_max_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        return self._call(broker_name, "get_max_offset", topic, queue_id)

    def get_min_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        return self._call(broker_name, "get_min_offset", topic, queue_id)

    def search_offset(self, broker_name: str, topic: str, queue_id: int,
                      timestamp_ms: int, boundary: str | None = None) -> int:
        return self._call(broker_name, "search_offset", topic, queue_id, timestamp_ms,
                          boundary or "LOWER")

    def consumer_send_msg_back(self, broker_name: str,
                               request: ConsumerSendMsgBackRequest) -> RemotingResult:
        return self._call(broker_name, "consumer_send_msg_back", request).result(5.0)

    def view_message(self, broker_name: str, commit_log_offset: int) -> MessageExt | None:
        return self._call(broker_name, "view_message", commit_log_offset)

    # group membership
    def heartbeat(self, broker_name: str, data: HeartbeatData, channel: ClientChannel) -> None:
        self._call(broker_name, "heartbeat", data, channel)
        self._channels.add(channel)

    def unregister_client(self, broker_name: str, client_id: str, producer_group: str | None,
                          consumer_group: str | None) -> None:
        self._call(broker_name, "unregister_client", client_id, producer_group, consumer_group)

    def get_consumer_id_list(self, broker_name: str, group: str) -> list[str]:
        r = self._call(broker_name, "get_consumer_list_by_group", group)
        if r.code != ResponseCode.SUCCESS:
            raise MQBrokerError(r.code, r.remark, broker_name)
        return list(r.value)

    def lock_batch_mq(self, broker_name: str, group: str, client_id: str,
                      mqs: set[MessageQueue]) -> set[MessageQueue]:
        return self._call(broker_name, "lock_batch_mq", group, client_id, mqs)

    def unlock_batch_mq(self, broker_name: str, group: str, client_id: str,
                        mqs: set[MessageQueue]) -> None:
        self._call(broker_name, "unlock_batch_mq", group, client_id, mqs)

    def close(self) -> None:
        """The client's connection closes: its channels leave every group on the broker."""
        if self._closed:
            return
        self._closed = True
        if not self.broker.closed:
            for ch in self._channels:
                self.broker.channel_closed(ch)
        self._channels.clear()


__all__ = ["InProcessTransport"]
