"""Requests by kind on executors of their own, each bounded (docs/protocol.md "Limits").

RocketMQ registers each processor on its own thread pool with a bounded queue (send, pull,
query, admin, heartbeat, end transaction, client and consumer management) and answers
SYSTEM_BUSY when a queue is full, so a flood of one kind never stalls the others. Here:

* send and pull stay on the event loop: their answer is usually ready at once (an
  asynchronous flush, a pull that found messages), and a thread hop would halve their rate.
  Their capacity bounds the requests of the kind still waiting for the broker's future
  (a SYNC_FLUSH send, a held pull); past it they are answered SYSTEM_BUSY.
* every other kind runs its handler on its kind's thread pool. What the handler then hands to
  the processor's executor (``BrokerProcessor._blocking``) runs on the same pool
  (``RoutingExecutor``). Queued and running requests of a kind are bounded by the pool's
  threads plus its queue capacity; past that, SYSTEM_BUSY.

Thread counts and capacities are ``BrokerConfig``'s (4.9.8's names and defaults). The
NameServer uses the same machinery with its own ``KindTable`` (rocketstore.namesrv.config).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from rocketstore.common.protocol import ResponseCode
from rocketstore.common.codes import RequestCode
from rocketstore.remoting.command import ANSWERED, RemotingCommand
from rocketstore.remoting.connection import Parked

if TYPE_CHECKING:
    from rocketstore.remoting.connection import Connection, Processor

R = RequestCode
SEND, PULL, QUERY, ADMIN = "send", "pull", "query", "admin"
HEARTBEAT, END_TRANSACTION = "heartbeat", "end_transaction"
CLIENT_MANAGE, CONSUMER_MANAGE = "client_manage", "consumer_manage"
ON_LOOP = frozenset({SEND, PULL})

# BrokerController.registerProcessor's assignment; every other code is the admin processor's
KIND_BY_CODE: dict[int, str] = {
    R.SEND_MESSAGE: SEND, R.SEND_MESSAGE_V2: SEND, R.SEND_BATCH_MESSAGE: SEND,
    R.CONSUMER_SEND_MSG_BACK: SEND,
    # 4.9.8 runs replies on a pool of their own; here they stay on the loop as sends do: the
    # handler only awaits the push's and the put's futures
    R.SEND_REPLY_MESSAGE: SEND, R.SEND_REPLY_MESSAGE_V2: SEND,
    R.PULL_MESSAGE: PULL,
    R.QUERY_MESSAGE: QUERY, R.VIEW_MESSAGE_BY_ID: QUERY,
    R.HEART_BEAT: HEARTBEAT,
    R.UNREGISTER_CLIENT: CLIENT_MANAGE, R.CHECK_CLIENT_CONFIG: CLIENT_MANAGE,
    R.GET_CONSUMER_LIST_BY_GROUP: CONSUMER_MANAGE, R.UPDATE_CONSUMER_OFFSET: CONSUMER_MANAGE,
    R.QUERY_CONSUMER_OFFSET: CONSUMER_MANAGE,
    R.END_TRANSACTION: END_TRANSACTION,
}

# BrokerConfig (thread count, queue capacity) setting names by kind
SETTINGS: dict[str, tuple[str, str]] = {
    SEND: ("send_message_thread_pool_nums", "send_thread_pool_queue_capacity"),
    PULL: ("pull_message_thread_pool_nums", "pull_thread_pool_queue_capacity"),
    QUERY: ("query_message_thread_pool_nums", "query_thread_pool_queue_capacity"),
    ADMIN: ("admin_broker_thread_pool_nums", "admin_broker_thread_pool_queue_capacity"),
    HEARTBEAT: ("heartbeat_thread_pool_nums", "heartbeat_thread_pool_queue_capacity"),
    END_TRANSACTION: ("end_transaction_thread_pool_nums", "end_transaction_pool_queue_capacity"),
    CLIENT_MANAGE: ("client_manage_thread_pool_nums", "client_manager_thread_pool_queue_capacity"),
    CONSUMER_MANAGE: ("consumer_manage_thread_pool_nums",
                      "consumer_manager_thread_pool_queue_capacity"),
}


@dataclass(frozen=True)
class KindTable:
    """How a server sorts requests into kinds: ``kind_by_code`` (codes absent: ``default``;
    a code mapped to ``INLINE`` is answered on the loop outside every kind), each kind's
    config names ``(threads, capacity)`` in ``settings``, the kinds answered on the loop
    (``on_loop``), the kind whose pool runs what is offloaded outside a request
    (``fallback``) and the pools' thread name ``prefix``."""

    kind_by_code: dict[int, str]
    default: str
    settings: dict[str, tuple[str, str]]
    on_loop: frozenset[str]
    fallback: str
    prefix: str


INLINE = "inline"
BROKER_KINDS = KindTable(KIND_BY_CODE, ADMIN, SETTINGS, ON_LOOP, CLIENT_MANAGE, "broker")

# bytes a connection reserves against its pending-answer bound per request still being
# answered (rocketstore.remoting.connection.ConnectionLimits): what runs off the loop may
# answer large (a topic's stats over 1,024 queues, a message, up to 32 of them)
RESERVE_DEFAULT = 64 << 10
RESERVE_BY_CODE: dict[int, int] = {
    **{code: 0 for code, kind in KIND_BY_CODE.items() if kind in ON_LOOP},
    R.VIEW_MESSAGE_BY_ID: 1 << 20, R.QUERY_MESSAGE: 2 << 20,
}

CPU_SLOTS = 1
BUSY_REMARK = "[OVERLOAD]system busy, start flow control for a while ({})"
PARKED_REMARK = BUSY_REMARK.format(
    "held pulls of this connection: {} = serverMaxHeldPulls")


def conf_key(name: str) -> str:
    """A config field's broker.conf key: snake_case -> camelCase."""
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)

_current_pool: contextvars.ContextVar[concurrent.futures.Executor] = contextvars.ContextVar(
    "rocketstore_request_pool")


class KindPool:
    """One kind's bound: ``threads`` workers (none for the loop kinds) and ``capacity``
    requests waiting beyond them."""

    def __init__(self, kind: str, threads: int, capacity: int,
                 settings: tuple[str, str] | None = None, *, on_loop: bool | None = None,
                 prefix: str = "broker") -> None:
        """``settings``: the config names of ``threads`` and ``capacity`` (for the remark);
        ``on_loop``: answered on the event loop, no pool (default: the broker's send and
        pull)."""
        self.kind = kind
        self.threads = threads
        self.capacity = capacity
        loop = kind in ON_LOOP if on_loop is None else on_loop
        self.limit = capacity + (0 if loop else threads)
        t_name, c_name = (conf_key(n) for n in settings or ("threads", "capacity"))
        # the SYSTEM_BUSY remark names the bound and the settings that make it
        self.busy_remark = BUSY_REMARK.format(
            f"{kind} queue full: {self.limit} = {c_name}" if loop else
            f"{kind} queue full: {self.limit} = {t_name} {threads} + {c_name} {capacity}")
        self.outstanding = 0            # queued + running (loop kinds: waiting on the broker)
        self.rejected = 0
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        if not loop:
            self.pool = concurrent.futures.ThreadPoolExecutor(
                threads, thread_name_prefix=f"{prefix}-{kind.replace('_', '-')}")

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


class FairGate:
    """A counting semaphore that hands a freed slot to its longest waiter (FIFO)."""

    def __init__(self, slots: int) -> None:
        self._lock = threading.Lock()
        self._free = slots
        self._waiters: deque[threading.Lock] = deque()

    def __enter__(self) -> None:
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        waiter.acquire()            # released by __exit__ with the slot handed over

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._free += 1


class RoutingExecutor(concurrent.futures.Executor):
    """The executor handed to ``BrokerProcessor``: runs a call on the pool of the request
    being answered (a context variable set per request), else on ``default``."""

    def __init__(self, default: concurrent.futures.Executor) -> None:
        self.default = default

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future[Any]:
        return _current_pool.get(self.default).submit(fn, *args, **kwargs)


class KindExecutors:
    """Every kind's ``KindPool`` of a ``KindTable``, sized by ``config`` (an object with the
    table's settings as attributes: ``BrokerConfig``, ``NamesrvConfig``)."""

    def __init__(self, table: KindTable, config: Any) -> None:
        self.table = table
        self.pools = {kind: KindPool(kind, getattr(config, threads), getattr(config, capacity),
                                     (threads, capacity), on_loop=kind in table.on_loop,
                                     prefix=table.prefix)
                      for kind, (threads, capacity) in table.settings.items()}
        default = self.pools[table.fallback].pool
        assert default is not None
        self.executor = RoutingExecutor(default)

    def shutdown(self) -> None:
        for p in self.pools.values():
            p.shutdown()


class BrokerExecutors(KindExecutors):
    """The broker's kinds (``BROKER_KINDS``), sized by a ``BrokerConfig``."""

    def __init__(self, config: Any) -> None:
        super().__init__(BROKER_KINDS, config)


class RoutingProcessor:
    """Wraps a processor: bounds each request kind and runs the slow kinds off the loop."""

    def __init__(self, inner: Processor, executors: KindExecutors) -> None:
        self.inner = inner
        self.executors = executors
        self._pools = executors.pools
        self._kind_by_code = executors.table.kind_by_code
        self._default = executors.table.default
        self._pull = executors.pools.get(PULL)
        # the handlers' own Python work (a topic's stats over 1,024 queues, a query) runs
        # CPU_SLOTS at a time across every pool: each thread more contending for the GIL
        # delays the event loop's every acquisition (CPython hands the GIL to any waiter).
        # Sends during 1,000 pipelined GET_TOPIC_STATS_INFO: p99 ~700-800 ms ungated, 150-200
        # ms with 2 slots, ~40 ms with 1 (tests/test_redteam_limits.py). The GIL runs one
        # thread's Python at a time anyway; what a handler hands on (``_blocking``: fsyncs,
        # the broker's own locks) runs outside the gate.
        # FIFO: a kind whose handlers follow each other (a registration flood) must not keep
        # the slot from another kind's waiting handler (a semaphore lets its releaser retake it)
        self._cpu_gate = FairGate(CPU_SLOTS)

    def process(self, conn: Connection, cmd: RemotingCommand
                ) -> RemotingCommand | None | Parked | Awaitable[RemotingCommand | None]:
        kind = self._kind_by_code.get(cmd.code, self._default)
        if kind is INLINE:
            return self.inner.process(conn, cmd)        # cheap, on the loop, never queued
        p = self._pools[kind]
        if p.outstanding >= p.limit:
            p.rejected += 1
            return cmd.response(ResponseCode.SYSTEM_BUSY, p.busy_remark)
        if p.pool is None:
            if p is self._pull:
                # a pull may be held (Parked): one connection holds at most max_parked
                limit = conn.limits.max_parked
                if conn.parked_count >= limit:
                    p.rejected += 1
                    return cmd.response(ResponseCode.SYSTEM_BUSY, PARKED_REMARK.format(limit))
            # on the loop, as before; only an answer still pending holds a place
            result = self.inner.process(conn, cmd)
            rtype = type(result)
            if rtype in ANSWERED:
                return result
            if rtype is Parked:
                p.outstanding += 1
                return Parked(self._held(p, result.awaitable))  # type: ignore[union-attr]
            if inspect.isawaitable(result):
                p.outstanding += 1
                return self._held(p, result)
            return result
        p.outstanding += 1
        return self._off_loop(p, conn, cmd)

    @staticmethod
    async def _held(p: KindPool, result: Awaitable[RemotingCommand | None]
                    ) -> RemotingCommand | None:
        try:
            return await result
        finally:
            p.outstanding -= 1

    def _gated(self, conn: Connection, cmd: RemotingCommand) -> Any:
        with self._cpu_gate:
            return self.inner.process(conn, cmd)

    async def _off_loop(self, p: KindPool, conn: Connection, cmd: RemotingCommand
                        ) -> RemotingCommand | None:
        assert p.pool is not None
        try:
            _current_pool.set(p.pool)       # this task's context: what the handler offloads
            result = await asyncio.get_running_loop().run_in_executor(
                p.pool, self._gated, conn, cmd)
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            p.outstanding -= 1

    def connection_closed(self, conn: Connection) -> None:
        self.inner.connection_closed(conn)
