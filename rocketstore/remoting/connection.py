"""One TCP connection speaking RocketMQ remoting, in either direction (docs/protocol.md §1.5).

Both ends of a RocketMQ connection are client and server at once: the client sends requests
and the broker pushes requests back over the same socket (CHECK_TRANSACTION_STATE,
NOTIFY_CONSUMER_IDS_CHANGED). ``Connection`` is therefore used by the servers and by the client:
frames in are split by ``FrameDecoder``; a response completes the future its opaque names; a
request goes to the ``Processor``. Requests this side sends get opaques from its own counter.

Back-pressure (``ConnectionLimits``, docs/protocol.md "Limits"): a connection stops taking
requests from its peer -- it leaves decoded frames in a backlog and pauses reading -- while
``max_in_flight`` of its requests are being answered, or while the bytes of its answers not yet
written to the socket (the transport's buffer, the answers collected for the current write, and
a reservation for each answer still being produced of a kind that can be large) exceed
``max_pending_bytes``. Checked before every request, not per read: a 256 KiB read holds
thousands of small requests whose answers may each be megabytes. So a peer that never reads
costs at most about ``max_pending_bytes`` plus one answer, however much it pipelines.

A request whose answer waits on something outside the connection for long (a held pull,
parked until a message arrives) is ``Parked`` by the processor: it does not count against
``max_in_flight`` (the connection goes on reading and answering its other requests), it is
counted in ``parked_count`` for the processor to bound (``max_parked``), and it is cancelled the
moment the connection closes, so what it holds is freed then, not at its deadline.

Answers whose body is stored records (``zerocopy.RecordBody``, a read-only memoryview) leave
as views of the mapped commit log with ``writev`` (``vectored.VectorWriter``): no copy, and
what the socket does not take at once waits as views, counted in the pending bytes.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, cast

from rocketstore.common.log_limit import LogLimiter
from rocketstore.common.protocol import ResponseCode
from rocketstore.errors import RemotingProtocolError, TransportError
from rocketstore.remoting.command import (ANSWERED, FLAG_ONEWAY, MAX_EXT_FIELDS, MAX_FRAME,
                                          MAX_HEADER, FrameDecoder, RemotingCommand)
from rocketstore.remoting.vectored import VectorWriter, needs_own_queue
from rocketstore.remoting.zerocopy import RecordBody

log = logging.getLogger("rocketstore.remoting")
# a peer decides how many bad requests it sends: summed up, not a line each (a bad frame
# closes the connection and keeps its own warning: one per connection)
_BAD_REQUEST_LOG = LogLimiter(log, logging.INFO, "bad request")

MAX_IN_FLIGHT = 1024          # requests from one peer being processed before reading pauses
WRITE_HIGH_WATER = 4 << 20    # bytes of answers queued to a peer before reading pauses
JOIN_BELOW = 256 << 10        # bodies smaller than this are copied into one write with the header
# requests one connection dispatches in a turn before the event loop serves the others: a
# read of 256 KiB holds thousands of small pipelined requests (route lookups: ~0.5 s of them)
PUMP_TURN = 256
MAX_PARKED = 1024             # held pulls of one peer (a consumer holds one per queue)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may hold of this process's memory (docs/protocol.md "Limits").

    ``reserve_by_code`` (``reserve_default`` for other codes): bytes counted against
    ``max_pending_bytes`` for each request of that code still being answered (its answer may
    be large: QUERY_MESSAGE), so a peer cannot have many such answers in production at once.
    ``max_parked``: ``Parked`` requests the processor lets one connection hold (it checks
    ``Connection.parked_count`` before it parks one). ``reserve_body``: a request still being
    answered also reserves its own body's size (held until answered: a NameServer's 16 MiB
    REGISTER_BROKER).
    """

    max_in_flight: int = MAX_IN_FLIGHT
    max_pending_bytes: int = WRITE_HIGH_WATER
    max_frame: int = MAX_FRAME
    max_header: int = MAX_HEADER
    max_ext_fields: int = MAX_EXT_FIELDS
    reserve_by_code: dict[int, int] = field(default_factory=dict)
    reserve_default: int = 0
    max_parked: int = MAX_PARKED
    reserve_body: bool = False


DEFAULT_LIMITS = ConnectionLimits()


class Parked:
    """A processor's answer that waits outside the connection (a held pull): the connection
    awaits ``awaitable`` and sends what it returns, without counting it in flight; it is
    cancelled when the connection closes."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[RemotingCommand | None]) -> None:
        self.awaitable = awaitable


class Processor(Protocol):
    """Handles requests that arrive on a connection."""

    def process(self, conn: "Connection", cmd: RemotingCommand
                ) -> RemotingCommand | None | Parked | Awaitable[RemotingCommand | None]:
        """The response (``None`` for none: oneway, or answered later with ``conn.send``;
        ``Parked`` for one that waits outside the connection)."""

    def connection_closed(self, conn: "Connection") -> None:
        """The peer went away; forget what it registered."""


class Connection(asyncio.Protocol):
    """A remoting connection; create through ``RemotingServer`` or ``RemotingClient``."""

    def __init__(self, processor: Processor | None, *, max_frame: int = MAX_FRAME,
                 on_close: "Callable[[Connection], None] | None" = None,
                 limits: ConnectionLimits | None = None) -> None:
        self.processor = processor
        lim = self.limits = limits or DEFAULT_LIMITS
        self.decoder = FrameDecoder(min(max_frame, lim.max_frame), lim.max_header,
                                    lim.max_ext_fields)
        self._max_in_flight = lim.max_in_flight
        self._max_pending = lim.max_pending_bytes
        self._reserve_by_code = lim.reserve_by_code
        self._reserve_default = lim.reserve_default
        self._reserve_body = lim.reserve_body
        self._reserved = 0                          # bytes reserved for answers in production
        self._backlog: deque[RemotingCommand] = deque()     # decoded, not yet dispatched
        self._corked_bytes = 0
        self._corked_views = False                  # the corked parts hold views
        self._vw: VectorWriter | None = None        # views the socket has not taken yet
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.last_active = time.monotonic()
        self.closed: asyncio.Event | None = None    # made in connection_made, on the loop
        # asyncio futures (requests made on the loop) or concurrent ones (client calls)
        self._pending: dict[int, Any] = {}
        self._opaques = itertools.count(1)
        self._in_flight = 0
        self._parked: set[asyncio.Future[RemotingCommand | None]] = set()
        self._reading_paused = False
        self._turn_scheduled = False
        self._write_paused = False
        self._on_close = on_close
        self._corked: list[bytes | memoryview] | None = None
        self.attributes: dict[str, object] = {}     # what the processor records (client id ...)

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence no isinstance check
        self.transport = cast(asyncio.Transport, transport)
        self.closed = asyncio.Event()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.transport.set_write_buffer_limits(high=self._max_pending)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            loop = asyncio.get_running_loop()
            if needs_own_queue(transport, loop):
                self._vw = VectorWriter(sock.fileno(), loop, self._max_pending,
                                        self.pause_writing, self.resume_writing,
                                        self._write_failed)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            cmds = self.decoder.feed(data)
        except RemotingProtocolError as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        self._backlog.extend(cmds)
        self._pump()

    def _over_limit(self) -> bool:
        if self._in_flight >= self._max_in_flight:
            return True
        t = self.transport
        pending = self._corked_bytes + self._reserved
        if t is not None:
            pending += t.get_write_buffer_size()
        if self._vw is not None:
            pending += self._vw.nbytes
        return pending > self._max_pending

    def _pump(self) -> None:
        """Dispatch backlogged frames while the limits allow; the rest wait (reading paused)
        until answers drain (``resume_writing``) or finish (``_finished``)."""
        backlog = self._backlog
        t = self.transport
        turn = PUMP_TURN
        while backlog and t is not None and not t.is_closing():
            # answers made in one pass leave in one write (one send(2) for a pipelining
            # client instead of one per answer)
            corked: list[bytes | memoryview] = []
            self._corked = corked
            try:
                while backlog and turn and not self._over_limit():
                    turn -= 1
                    cmd = backlog.popleft()
                    if cmd.is_response:
                        fut = self._pending.pop(cmd.opaque, None)
                        if fut is not None and not fut.done():
                            fut.set_result(cmd)
                        continue
                    self._dispatch(cmd)
            finally:
                self._corked = None
                nbytes, self._corked_bytes = self._corked_bytes, 0
                views, self._corked_views = self._corked_views, False
                if corked and not t.is_closing():
                    if views:
                        self._write_parts(corked, nbytes)
                    else:
                        self._write(corked[0] if len(corked) == 1 else b"".join(corked))
            if not turn:
                # the other connections' turn: the rest of the backlog (reading paused)
                # is taken up on the loop's next iteration
                if backlog and not self._turn_scheduled:
                    self._turn_scheduled = True
                    asyncio.get_running_loop().call_soon(self._next_turn)
                break
            if self._over_limit():
                break
        self._update_reading()

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self._backlog.clear()
        parked, self._parked = self._parked, set()
        for task in parked:         # frees what they hold now, not at their deadline
            task.cancel()
        if self._vw is not None:
            self._vw.discard()
        err = TransportError(self.peer, f"connection closed{': ' + str(exc) if exc else ''}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        if self.closed is not None:
            self.closed.set()
        if self.processor is not None:
            try:
                self.processor.connection_closed(self)
            except Exception:       # a processor's bookkeeping must not break the loop
                log.exception("connection_closed handler failed for %s", self.peer)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    # -- requests in --------------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: request code %s opaque %s %s", self.peer, cmd.code, cmd.opaque,
                      cmd.ext_fields)
        if self.processor is None:
            if not cmd.is_oneway:
                self.send(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                       f" request type {cmd.code} not supported"))
            return
        try:
            result = self.processor.process(self, cmd)
        except Exception as e:
            self._answer_error(cmd, e)
            return
        if type(result) not in ANSWERED and inspect.isawaitable(result):
            self._in_flight += 1
            reserve = self._reserve_by_code.get(cmd.code, self._reserve_default)
            if self._reserve_body:
                reserve += len(cmd.body)
            self._reserved += reserve
            task = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._finished, cmd, reserve))
        elif type(result) is Parked:
            task = asyncio.ensure_future(result.awaitable)
            self._parked.add(task)
            task.add_done_callback(functools.partial(self._unparked, cmd))
        elif result is not None and not cmd.is_oneway:
            self.send(result)

    @property
    def parked_count(self) -> int:
        """``Parked`` requests of this connection not answered yet."""
        return len(self._parked)

    def _unparked(self, cmd: RemotingCommand,
                  task: "asyncio.Future[RemotingCommand | None]") -> None:
        self._parked.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._answer_error(cmd, exc)
            return
        result = task.result()
        if result is not None and not cmd.is_oneway:
            self.send(result)

    def _finished(self, cmd: RemotingCommand, reserve: int,
                  task: "asyncio.Future[RemotingCommand | None]") -> None:
        self._in_flight -= 1
        self._reserved -= reserve
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._answer_error(cmd, exc)
            else:
                result = task.result()
                if result is not None and not cmd.is_oneway:
                    self.send(result)
        # the answer is in the transport's buffer (and counted there) before more is taken
        if self._backlog:
            self._pump()
        else:
            self._update_reading()

    def _answer_error(self, cmd: RemotingCommand, exc: BaseException) -> None:
        # a failure of ours, answered as RocketMQ's exception reply: SYSTEM_ERROR with the text
        if isinstance(exc, RemotingProtocolError):
            _BAD_REQUEST_LOG.event(f"from {self.peer} code {cmd.code}: {exc}")
        else:
            log.exception("request code %s from %s failed", cmd.code, self.peer, exc_info=exc)
        if not cmd.is_oneway:
            self.send(cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"))

    def _update_reading(self) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        want_pause = (self._write_paused or self._in_flight >= self._max_in_flight
                      or bool(self._backlog))
        if want_pause and not self._reading_paused:
            t.pause_reading()
            self._reading_paused = True
        elif not want_pause and self._reading_paused:
            t.resume_reading()
            self._reading_paused = False

    # -- frames out ---------------------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        """Write a command (a response, or a request whose answer nobody awaits)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        prefix, header, body = cmd.encode_parts()
        corked = self._corked
        btype = type(body)
        if btype is RecordBody or (btype is memoryview
                                   and body.readonly):  # type: ignore[union-attr]
            # stored records: written from the mapping, never joined into new bytes
            parts = body.parts if btype is RecordBody else [body]  # type: ignore[union-attr]
            head = prefix + header
            nbytes = len(head) + len(body)
            if corked is not None:
                corked.append(head)
                corked.extend(parts)
                self._corked_bytes += nbytes
                self._corked_views = True
            else:
                self._write_parts([head, *parts], nbytes)
        elif len(body) < JOIN_BELOW:
            # one write, one send(2): asyncio's writelines writes each part on its own
            frame = b"".join((prefix, header, body))
            if corked is not None:
                corked.append(frame)
                self._corked_bytes += len(frame)
            else:
                self._write(frame)
        else:
            if corked:
                if self._corked_views:
                    self._write_parts(corked, self._corked_bytes)
                else:
                    self._write(b"".join(corked))
                corked.clear()
                self._corked_bytes = 0
                self._corked_views = False
            self._write(prefix + header)
            self._write(body)
        self.last_active = time.monotonic()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        """Write bytes the transport may copy (behind any views still held)."""
        vw = self._vw
        if vw is not None and vw.nbytes:
            vw.write([data], len(data))
        else:
            self.transport.write(data)  # type: ignore[union-attr]

    def _write_parts(self, parts: list[bytes | memoryview], nbytes: int) -> None:
        """Write buffers that must not be copied: ``writev`` now, the rest held as views.
        Behind bytes already in the transport's buffer they go through the transport (which
        copies them on asyncio before 3.12: counted in its buffer size like any answer)."""
        t = self.transport
        assert t is not None
        vw = self._vw
        if vw is not None and (vw.nbytes or not t.get_write_buffer_size()):
            vw.write(parts, nbytes)
        else:
            t.writelines(parts)

    def _write_failed(self, exc: OSError) -> None:
        log.info("closing %s: write failed: %s", self.peer, exc)
        if self.transport is not None:
            self.transport.abort()

    def request(self, cmd: RemotingCommand, timeout: float) -> "asyncio.Future[RemotingCommand]":
        """Send a request and return the future of its response (fails after ``timeout``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        t = self.transport
        if t is None or t.is_closing():
            fut.set_exception(TransportError(self.peer, "connection closed"))
            return fut
        opaque = cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        self._pending[opaque] = fut
        handle = loop.call_later(timeout, self._expire, opaque, timeout, False)
        fut.add_done_callback(lambda f: handle.cancel())
        self.send(cmd)
        return fut

    def expect(self, opaque: int, fut: Any, timeout: float) -> None:
        """Complete ``fut`` (any future with ``set_result``) with the response to ``opaque``,
        or fail it after ``timeout`` (which also closes the connection, as RocketMQ does)."""
        self._pending[opaque] = fut
        handle = asyncio.get_running_loop().call_later(timeout, self._expire, opaque, timeout, True)
        fut.add_done_callback(lambda f: handle.cancel())

    def write_frames(self, frames: list[bytes]) -> None:
        t = self.transport
        if t is None or t.is_closing():
            err = TransportError(self.peer, "connection closed")
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(err)
            self._pending.clear()
            return
        self._write(frames[0] if len(frames) == 1 else b"".join(frames))
        self.last_active = time.monotonic()

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.flag |= FLAG_ONEWAY
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        self.send(cmd)

    def _expire(self, opaque: int, timeout: float, close: bool) -> None:
        fut = self._pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(TransportError(self.peer, f"no response within {timeout:g} s"))
            if close:
                self.close()

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        """Close after what was sent is written (as ``transport.close``)."""
        t = self.transport
        if t is not None:
            vw = self._vw
            if vw is not None and vw.nbytes and not t.is_closing():
                # the transport flushes its own buffer before it closes: hand it the views
                # still held (a copy, on this rare path only)
                t.writelines(vw.take())
            t.close()
