"""The transport interface: everything a client asks of a broker, and what a broker asks back.

A client (``Producer``, ``PushConsumer``, ...) holds one ``Transport`` and never imports the
broker or the store: the in-process transport (``rocketstore.client.inprocess``) calls a
``Broker`` directly and hands out zero-copy messages; the TCP transport of the wire-protocol
work sends the same requests as RocketMQ remoting commands. Every messaging semantic therefore
lives once, in ``Broker``.

Requests a broker sends to a client (``CHECK_TRANSACTION_STATE``, ``NOTIFY_CONSUMER_IDS_CHANGED``)
go to the ``ClientChannel`` the client registered with its heartbeat.
"""
from __future__ import annotations

import abc
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Protocol

from rocketstore.common.protocol import (CheckTransactionStateRequest, ConsumerSendMsgBackRequest,
                                         EndTransactionRequest, HeartbeatData, MessageQueue,
                                         PullMessageRequest, PullMessageResponse, RemotingResult,
                                         ReplyMessageRequest, SendMessageRequest,
                                         SendMessageResponse, TopicRouteData)

if TYPE_CHECKING:
    from rocketstore.store.types import Message, MessageExt


class ClientChannel(Protocol):
    """What a broker can ask of a connected client instance (oneway calls, and the reply push,
    answered)."""

    client_id: str

    def check_transaction_state(self, broker_name: str, request: CheckTransactionStateRequest,
                                msg: MessageExt) -> None:
        """A half message of one of this client's producer groups needs an answer."""

    def notify_consumer_ids_changed(self, group: str) -> None:
        """The members of a consumer group changed: rebalance now."""

    def push_reply_message(self, request: ReplyMessageRequest) -> Future[RemotingResult]:
        """A reply to one of this client's requests (answered: SUCCESS once taken)."""


def never_blocks(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a future's done-callback as one that never waits (it only hands the result on,
    to an event loop say): it may run on a transport's I/O thread, with no hop to the
    callback threads (``Producer.send_async``'s futures)."""
    fn.never_blocks = True  # type: ignore[attr-defined]
    return fn


class Transport(abc.ABC):
    """One client instance's way to its broker(s). Methods are thread-safe.

    Calls that a RocketMQ client makes synchronously return the response; the pull (which the
    broker may hold for up to ``suspend_timeout_millis``) and async sends return futures.
    Errors of the transport itself (broker unreachable, closed) raise
    ``rocketstore.errors.TransportError``; broker-side refusals come back as response codes.
    """

    # a future this transport returns may run a client's response handling in its done
    # callback (in process: the broker's own thread, which does not block on the client;
    # over TCP: the client's I/O thread, on which a synchronous call raises)
    inline_callbacks: bool = False
    # those callbacks run on an I/O thread that must not wait for a broker's answer
    callbacks_on_io_thread: bool = False

    def on_io_thread(self) -> bool:
        """Whether the calling thread is this transport's I/O thread (on which nothing may
        wait for a broker's answer)."""
        return False

    def run_callback(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` where a user's callback may block: off the I/O thread."""
        fn(*args)

    def for_client(self, client_id: str) -> Transport:
        """The transport the client instance ``client_id`` uses: this one, unless its
        connections already carry another client id (``TcpTransport``)."""
        return self

    # routes
    @abc.abstractmethod
    def get_topic_route(self, topic: str) -> TopicRouteData | None:
        """The topic's brokers and queue counts; None when no broker has the topic."""

    @abc.abstractmethod
    def broker_names(self) -> list[str]:
        """Names of the brokers this transport reaches."""

    # produce
    @abc.abstractmethod
    def send_message(self, broker_name: str, request: SendMessageRequest,
                     timeout_ms: int = 3000) -> SendMessageResponse:
        """``SEND_MESSAGE_V2`` / ``SEND_BATCH_MESSAGE``: store and answer; a ``reply``
        request is ``SEND_REPLY_MESSAGE_V2``, answered once the broker pushed it to its
        requester (this and ``send_message_async`` / ``_oneway``)."""

    def send_one(self, broker_name: str, producer_group: str, topic: str, queue_id: int,
                 msg: Message, default_topic: str, default_topic_queue_nums: int,
                 timeout_ms: int = 3000) -> SendMessageResponse:
        """``send_message`` of one message given by its header fields (a producer's sync
        send). A transport that can skip the request object (in-process) overrides this."""
        return self.send_message(broker_name, SendMessageRequest(
            producer_group, topic, queue_id, [msg], default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums), timeout_ms)

    def send_lane(self, broker_name: str, producer_group: str, topic: str, default_topic: str,
                  default_topic_queue_nums: int
                  ) -> Callable[[Message, int], Any] | None:
        """A function sending one stamped message of ``topic`` to a queue id (``send_one``
        without the per-send topic checks: the broker's ``SendLane``; a ``PutMessageResult``
        answers a put stored at once); None when the transport has none (over TCP every send
        is a request)."""
        return None

    def send_one_async(self, broker_name: str, producer_group: str, topic: str, queue_id: int,
                       msg: Message, default_topic: str, default_topic_queue_nums: int
                       ) -> SendMessageResponse | Future[SendMessageResponse]:
        """``send_message_async`` of one message given by its header fields: the answer when
        the broker gave it at once (in process, ASYNC_FLUSH: no future), else its future."""
        return self.send_message_async(broker_name, SendMessageRequest(
            producer_group, topic, queue_id, [msg], default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums))

    @abc.abstractmethod
    def send_message_async(self, broker_name: str,
                           request: SendMessageRequest) -> Future[SendMessageResponse]:
        """The same send; the future completes when the broker answers (after the sync flush
        under SYNC_FLUSH), without a thread waiting per send."""

    @abc.abstractmethod
    def send_message_oneway(self, broker_name: str, request: SendMessageRequest) -> None:
        """The same send, no answer."""

    @abc.abstractmethod
    def end_transaction(self, broker_name: str, request: EndTransactionRequest) -> None:
        """``END_TRANSACTION`` (oneway)."""

    # consume
    @abc.abstractmethod
    def pull_message(self, broker_name: str,
                     request: PullMessageRequest) -> Future[PullMessageResponse]:
        """``PULL_MESSAGE``; with the suspend flag the broker holds it until a message arrives
        or ``suspend_timeout_millis`` passes."""

    @abc.abstractmethod
    def query_consumer_offset(self, broker_name: str, group: str, topic: str,
                              queue_id: int) -> RemotingResult:
        """``QUERY_CONSUMER_OFFSET``: SUCCESS with the offset, or QUERY_NOT_FOUND."""

    @abc.abstractmethod
    def update_consumer_offset(self, broker_name: str, group: str, topic: str, queue_id: int,
                               offset: int) -> None:
        """``UPDATE_CONSUMER_OFFSET`` (oneway)."""

    @abc.abstractmethod
    def get_max_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        """``GET_MAX_OFFSET``."""

    @abc.abstractmethod
    def get_min_offset(self, broker_name: str, topic: str, queue_id: int) -> int:
        """``GET_MIN_OFFSET``."""

    @abc.abstractmethod
    def search_offset(self, broker_name: str, topic: str, queue_id: int,
                      timestamp_ms: int, boundary: str | None = None) -> int:
        """``SEARCH_OFFSET_BY_TIMESTAMP``; ``boundary`` "LOWER" or "UPPER" (RocketMQ 5's
        ``boundaryType``, sent only when given: a 4.9.8 broker ignores it and answers the
        nearest message)."""

    @abc.abstractmethod
    def consumer_send_msg_back(self, broker_name: str,
                               request: ConsumerSendMsgBackRequest) -> RemotingResult:
        """``CONSUMER_SEND_MSG_BACK``: retry topic with a delay, or the DLQ."""

    @abc.abstractmethod
    def view_message(self, broker_name: str, commit_log_offset: int) -> MessageExt | None:
        """``VIEW_MESSAGE_BY_ID``: the record at a commit-log offset."""

    # group membership
    @abc.abstractmethod
    def heartbeat(self, broker_name: str, data: HeartbeatData, channel: ClientChannel) -> None:
        """``HEART_BEAT``: register (or refresh) this client's producer and consumer groups."""

    @abc.abstractmethod
    def unregister_client(self, broker_name: str, client_id: str, producer_group: str | None,
                          consumer_group: str | None) -> None:
        """``UNREGISTER_CLIENT``: leave a group now (the others rebalance at once)."""

    @abc.abstractmethod
    def get_consumer_id_list(self, broker_name: str, group: str) -> list[str]:
        """``GET_CONSUMER_LIST_BY_GROUP``: client ids of the group's live members."""

    @abc.abstractmethod
    def lock_batch_mq(self, broker_name: str, group: str, client_id: str,
                      mqs: set[MessageQueue]) -> set[MessageQueue]:
        """``LOCK_BATCH_MQ``: the subset of ``mqs`` now locked by this client."""

    @abc.abstractmethod
    def unlock_batch_mq(self, broker_name: str, group: str, client_id: str,
                        mqs: set[MessageQueue]) -> None:
        """``UNLOCK_BATCH_MQ``."""

    def close(self) -> None:
        """Release what the transport holds (connections); the broker is not closed."""
