"""Exceptions raised by rocketstore.

Bad input raises a class that also inherits the matching built-in (``ValueError``,
``TypeError``), so callers may catch either. Expected outcomes of a put or a get
(``FLUSH_DISK_TIMEOUT``, ``OFFSET_OVERFLOW_ONE``) are statuses, not exceptions. OS failures are
the built-in ``OSError`` subclasses chosen by errno, never wrapped.

Every exception passes all its constructor arguments to ``super().__init__`` so it pickles:
they cross process boundaries (readers in other processes, Spark tasks).
"""
from __future__ import annotations

__all__ = [
    "RocketStoreError",
    "SlaveStoreError",
    "InvalidMessageError",
    "InvalidMessageTypeError",
    "InvalidConfigError",
    "InvalidMessageIdError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "StoreClosedError",
    "StoreLockedError",
    "InvalidNameError",
    "DispatchStalledError",
    "StoreReadOnlyError",
    "CorruptionError",
    "TopicPermissionError",
    "DiskFullError",
    "InvalidOptionError",
    "TransportError",
    "RequestTimeoutError",
    "MQClientError",
    "MQBrokerError",
    "RemotingProtocolError",
    "AclConfigError",
    "AccessDeniedError",
    "JvmBuildError",
]


class RocketStoreError(Exception):
    """Base of every rocketstore exception."""


class InvalidMessageError(RocketStoreError, ValueError):
    """A message field is outside what a RocketMQ store accepts; nothing was written.

    ``field`` names the field, ``value`` the offending value (shortened), ``limit`` the bound
    it broke (or None), ``status`` the RocketMQ ``PutMessageStatus`` name a broker would have
    answered (``MESSAGE_ILLEGAL`` or ``PROPERTIES_SIZE_EXCEEDED``).
    """

    def __init__(self, field: str, value: object, reason: str, limit: object = None,
                 status: str = "MESSAGE_ILLEGAL") -> None:
        super().__init__(field, value, reason, limit, status)
        self.field = field
        self.value = value
        self.reason = reason
        self.limit = limit
        self.status = status

    def __str__(self) -> str:
        shown = repr(self.value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"message {self.field}={shown}: {self.reason} ({self.status})"


class InvalidMessageTypeError(RocketStoreError, TypeError):
    """A message field has the wrong Python type; nothing was written."""

    def __init__(self, field: str, expected: str, got: str) -> None:
        super().__init__(field, expected, got)
        self.field = field
        self.expected = expected
        self.got = got

    def __str__(self) -> str:
        return f"message {self.field}: expected {self.expected}, got {self.got}"


class DispatchStalledError(RocketStoreError):
    """Dispatch into the consume queues and the index keeps failing (``cause``): puts are
    refused until it catches up, so none is acknowledged into invisibility."""

    def __init__(self, offset: int, behind: int, cause: BaseException) -> None:
        super().__init__(offset, behind, cause)
        self.offset = offset
        self.behind = behind
        self.cause = cause

    def __str__(self) -> str:
        return (f"dispatch is stalled at commit-log offset {self.offset} ({self.behind} bytes "
                f"behind): {type(self.cause).__name__}: {self.cause}; it retries, and puts "
                "are refused until it catches up")


class InvalidConfigError(RocketStoreError, ValueError):
    """A ``StoreConfig`` (or ``BrokerConfig``, named by ``config``) setting is out of range;
    ``setting`` names it."""

    def __init__(self, setting: str, value: object, reason: str,
                 config: str = "StoreConfig") -> None:
        super().__init__(setting, value, reason)
        self.setting = setting
        self.value = value
        self.reason = reason
        self.config = config

    def __str__(self) -> str:
        return f"{self.config}.{self.setting}={self.value!r}: {self.reason}"


class InvalidMessageIdError(RocketStoreError, ValueError):
    """A message id string is not an offset message id (32 or 56 hex characters)."""

    def __init__(self, msg_id: object, reason: str) -> None:
        super().__init__(msg_id, reason)
        self.msg_id = msg_id
        self.reason = reason

    def __str__(self) -> str:
        return f"message id {self.msg_id!r}: {self.reason}"


class InvalidArgumentError(RocketStoreError, ValueError):
    """An argument of a store call (an offset, a time, a timeout, a group or topic name) is
    outside what it accepts; ``argument`` names it and ``value`` is what was given."""

    def __init__(self, argument: str, value: object, reason: str) -> None:
        super().__init__(argument, value, reason)
        self.argument = argument
        self.value = value
        self.reason = reason

    def __str__(self) -> str:
        shown = repr(self.value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{self.argument}={shown}: {self.reason}"


class InvalidNameError(InvalidArgumentError):
    """A topic or group name that cannot be stored (``field`` names which, ``value`` holds
    it): not valid UTF-8 text, or with a control character."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(field, value, reason)
        self.field = field


class InvalidArgumentTypeError(RocketStoreError, TypeError):
    """An argument of a store call has the wrong Python type; ``argument`` names it."""

    def __init__(self, argument: str, expected: str, got: str) -> None:
        super().__init__(argument, expected, got)
        self.argument = argument
        self.expected = expected
        self.got = got

    def __str__(self) -> str:
        return f"{self.argument}: expected {self.expected}, got {self.got}"


class StoreClosedError(RocketStoreError):
    """The store (or the structure) was closed; open it again to use it."""

    def __init__(self, what: str = "store") -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return f"{self.what} is closed"


class StoreLockedError(RocketStoreError):
    """Another process (or another open in this one) holds the store's ``lock`` file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path

    def __str__(self) -> str:
        return (f"{self.path}: store is locked by another writer "
                "(open it with read_only=True to read alongside it)")


class StoreReadOnlyError(RocketStoreError):
    """A write was attempted on a store opened read-only."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: store is open read-only"


class CorruptionError(RocketStoreError):
    """Stored bytes disagree with the format in a way recovery cannot decide."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(path, offset, reason)
        self.path = path
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path} pos {self.offset}: {self.reason}"


class NotDurableError(RocketStoreError):
    """Progress (consumer offsets, delay offsets) was not persisted because the commit-log
    records it points past are not durable yet: under SYNC_FLUSH the flush did not reach
    ``needed`` within the wait, or a sync failed. Nothing is lost; the next persist retries."""

    def __init__(self, what: str, needed: int, flushed: int) -> None:
        super().__init__(what, needed, flushed)
        self.what = what
        self.needed = needed
        self.flushed = flushed

    def __str__(self) -> str:
        return (f"{self.what}: not persisted, the commit log is durable only up to "
                f"{self.flushed}, below {self.needed}")


class TopicPermissionError(RocketStoreError, PermissionError):
    """A topic's configuration forbids the operation (perm bits or queue count, topics.json).

    Carried in ``PutMessageResult.error`` / ``GetMessageResult.error`` next to the
    ``NO_PERMISSION`` or ``MESSAGE_ILLEGAL`` status; not raised by puts and gets.
    """

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(topic, reason)
        self.topic = topic
        self.reason = reason

    def __str__(self) -> str:
        return f"topic {self.topic!r}: {self.reason}"


class DiskFullError(RocketStoreError):
    """The store's disk is fuller than ``disk_space_warning_level_ratio``: RocketMQ's DISK_FULL
    running flag. Carried in ``PutMessageResult.error`` next to ``SERVICE_NOT_AVAILABLE``
    while puts are refused; the retention service clears it once usage falls to the
    clean-forcibly ratio."""

    def __init__(self, path: str, used_ratio: float, warning_ratio: float) -> None:
        super().__init__(path, used_ratio, warning_ratio)
        self.path = path
        self.used_ratio = used_ratio
        self.warning_ratio = warning_ratio

    def __str__(self) -> str:
        return (f"{self.path}: disk full ({self.used_ratio:.1%} used, above "
                f"disk_space_warning_level_ratio {self.warning_ratio:.0%}); puts are refused "
                "until retention frees space")


class InvalidOptionError(RocketStoreError, ValueError):
    """An option of the Spark data source (``rocketstore.spark``) is missing or malformed;
    ``option`` names it."""

    def __init__(self, option: str, value: object, reason: str) -> None:
        super().__init__(option, value, reason)
        self.option = option
        self.value = value
        self.reason = reason

    def __str__(self) -> str:
        return f"rocketstore option {self.option}={self.value!r}: {self.reason}"


class TransportError(RocketStoreError):
    """A client could not reach its broker (not started, closed, connection lost, timed out);
    ``broker`` names it. The broker's own refusals are response codes, not this."""

    def __init__(self, broker: str, reason: str) -> None:
        super().__init__(broker, reason)
        self.broker = broker
        self.reason = reason

    def __str__(self) -> str:
        return f"broker {self.broker!r}: {self.reason}"


class MQClientError(RocketStoreError):
    """A client refused a call before sending it (RocketMQ's ``MQClientException``): a bad
    topic, group or body, a client not started, no route for a topic."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class RequestTimeoutError(RocketStoreError, TimeoutError):
    """``Producer.request`` got no reply in time (RocketMQ's ``RequestTimeoutException``):
    ``sent`` says whether the request itself was stored (then the replier was slow, gone, or
    its reply could not reach this client)."""

    def __init__(self, topic: str, timeout_ms: int, correlation_id: str, sent: bool) -> None:
        super().__init__(topic, timeout_ms, correlation_id, sent)
        self.topic = topic
        self.timeout_ms = timeout_ms
        self.correlation_id = correlation_id
        self.sent = sent

    def __str__(self) -> str:
        what = "OK, but wait reply message timeout" if self.sent else "timeout"
        return (f"send request message to <{self.topic}> {what}, {self.timeout_ms} ms "
                f"(no reply with CORRELATION_ID {self.correlation_id})")


class MQBrokerError(RocketStoreError):
    """A broker answered a request with an error code (RocketMQ's ``MQBrokerException``);
    ``code`` is the ``ResponseCode`` and ``remark`` the broker's reason."""

    def __init__(self, code: int, remark: str | None, broker: str | None = None) -> None:
        super().__init__(code, remark, broker)
        self.code = code
        self.remark = remark
        self.broker = broker

    def __str__(self) -> str:
        where = f" from broker {self.broker!r}" if self.broker else ""
        return f"CODE: {int(self.code)} DESC: {self.remark}{where}"


class RemotingProtocolError(RocketStoreError):
    """A frame or command on RocketMQ's wire protocol is malformed (a bad length, a header that
    is not JSON, a required header field missing); the reason names what was wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class AclConfigError(RocketStoreError, ValueError):
    """A ``plain_acl.yml`` entry is malformed (``field`` names it, ``value`` is what was read);
    the file is not loaded (a running broker keeps the rules it had)."""

    def __init__(self, path: str, field: str, value: object, reason: str) -> None:
        super().__init__(path, field, value, reason)
        self.path = path
        self.field = field
        self.value = value
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.field}={self.value!r}: {self.reason}"


class AccessDeniedError(RocketStoreError, PermissionError):
    """The broker's access control refused a request (answered as 4.9.8 does: SYSTEM_ERROR);
    ``access_key`` is the requester's (None when it sent none), ``reason`` our wording and
    ``rocketmq_text`` the text a 4.9.8 broker answers the same refusal with (its
    ``AclException`` as the remoting layer prints it), empty when not given."""

    def __init__(self, access_key: str | None, reason: str, rocketmq_text: str = "") -> None:
        super().__init__(access_key, reason)
        self.access_key = access_key
        self.reason = reason
        self.rocketmq_text = rocketmq_text

    @property
    def remark(self) -> str:
        """The response remark: RocketMQ's text first (what users match on), then ours."""
        return f"{self.rocketmq_text}; {self.reason}" if self.rocketmq_text else self.reason

    def __str__(self) -> str:
        return self.reason


class LimitExceededError(RocketStoreError):
    """A request would take the broker past one of its bounds (``setting``, the broker.conf
    name, at ``limit``); refused whole, nothing stored changed. ``code`` is the RocketMQ
    response code the wire answers with."""

    def __init__(self, setting: str, limit: int, reason: str, code: int) -> None:
        super().__init__(setting, limit, reason)
        self.setting = setting
        self.limit = limit
        self.reason = reason
        self.code = code

    def __str__(self) -> str:
        return f"{self.reason} ({self.setting}={self.limit})"


class SlaveStoreError(RocketStoreError):
    """A put on a SLAVE broker's store: its commit log takes only its master's bytes
    (replication, docs/replication.md); a put there is SERVICE_NOT_AVAILABLE."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path

    def __str__(self) -> str:
        return (f"{self.path}: this is a SLAVE's store (brokerRole=SLAVE): it takes only its "
                "master's replicated bytes, send to the master")


class JvmBuildError(RocketStoreError, RuntimeError):
    """The JVM Spark reader (``rocketstore.spark.jvm_jar``) could not be built: no ``javac``
    (a JDK 17+), no pyspark jars, or the compiler failed; the message says which."""
