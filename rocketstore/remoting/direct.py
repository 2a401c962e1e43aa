"""ClientConnection: a client's connection whose requests the calling thread writes itself.

A client's event loop thread reads every connection; a request made on another thread used
to be handed to it (``call_soon_threadsafe``: a pipe write and a wake-up of the loop thread)
before the loop wrote the frame. On a virtual machine a cross-thread wake-up costs about as
much as the broker's whole handling of a send, so a synchronous send paid it on top of the
round trip. Here the caller writes the frame to the socket itself when nothing is queued ahead
of it, and only the response comes through the loop.

Order and atomicity: ``_direct_lock`` is held around every write of the connection, the
loop's own (its answers, frames a busy caller queued) and the callers'. A caller writes only
while the transport's buffer is empty, so no frame of the loop's can be half written ahead of
it; the write does not release the GIL (``os.write`` with the lock held, a frame being small).
When the kernel takes part of a frame, the rest goes to the loop and callers queue behind it
until it is written.

On the loop thread itself (a request made while a response is handled: a push consumer sends
a queue's next pull from the previous pull's answer), the frame joins the writes of the loop's
pass over the connection's received frames (``Connection._pump``): several answers read at once
(a push consumer's four queues' answers, in its steady state) send their next pulls in one
``send(2)``.

Timeouts: a request written here has no loop timer (the loop is not woken to make one). Its
deadline is kept in a list the loop sweeps every ``SWEEP_S`` while requests are outstanding
(RocketMQ's client scans its response table once a second); an expired request fails with
``TransportError`` and closes the connection, as before.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from rocketstore.errors import TransportError
from rocketstore.remoting.connection import Connection

SWEEP_S = 0.05


class ClientConnection(Connection):
    """A ``Connection`` of ``RemotingClient``: adds ``write_direct``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # reentrant: a transport callback the loop's own write triggers may write again
        self._direct_lock = threading.RLock()
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost = False
        self._rest_pending = False          # part of a frame waits for the loop to write it
        self._deadlines: list[tuple[float, int, float]] = []   # (deadline, opaque, timeout)
        self._sweeping = False
        self._loop_ident = -1               # the loop thread's id

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._loop = asyncio.get_running_loop()
        self._loop_ident = threading.get_ident()
        sock = transport.get_extra_info("socket")
        try:
            self._fd = sock.fileno() if sock is not None else -1
        except (OSError, AttributeError):
            self._fd = -1

    def connection_lost(self, exc: Exception | None) -> None:
        with self._direct_lock:     # no caller registers a request on a connection going away
            self._lost = True
            self._deadlines = []
        super().connection_lost(exc)

    # -- the loop's writes, under the same lock as the callers' --------------------------------
    def _write(self, data: bytes | bytearray | memoryview) -> None:
        with self._direct_lock:
            super()._write(data)

    def _write_parts(self, parts: list[bytes | memoryview], nbytes: int) -> None:
        with self._direct_lock:
            super()._write_parts(parts, nbytes)

    # -- the caller's write ----------------------------------------------------------------------
    def write_direct(self, frame: bytes, opaque: int, fut: Any, timeout: float) -> bool:
        """Write ``frame`` from the calling thread and expect the response to ``opaque`` in
        ``fut`` (None: oneway) within ``timeout`` s. False when it cannot be written here now
        (the caller hands it to the loop instead); True when it was written (or corked: on
        the loop thread during a pass over received frames, it leaves with the pass's
        writes), or when the write failed (``fut`` then holds a ``TransportError``)."""
        with self._direct_lock:
            t = self.transport
            corked = self._corked
            if corked is not None and threading.get_ident() == self._loop_ident:
                if self._lost or t is None or t.is_closing():
                    return False
                if fut is not None:
                    self._expect_swept(opaque, fut, timeout)
                    assert self._loop is not None
                    self._arm_sweep(self._loop.call_soon)
                corked.append(frame)
                self._corked_bytes += len(frame)
                return True
            vw = self._vw
            if (self._lost or self._fd < 0 or self._rest_pending or self._write_paused
                    or t is None or t.is_closing() or t.get_write_buffer_size()
                    or (vw is not None and vw.nbytes)):
                return False
            if fut is not None:
                # before the write: the response may come before this thread runs again
                self._expect_swept(opaque, fut, timeout)
            try:
                n = os.write(self._fd, frame)
            except BlockingIOError:
                n = 0
            except OSError as e:
                if fut is not None:
                    self._pending.pop(opaque, None)
                    if not fut.done():
                        fut.set_exception(TransportError(self.peer, f"write failed: {e}"))
                return True
            self.last_active = time.monotonic()
            loop = self._loop
            assert loop is not None
            if n < len(frame):
                self._rest_pending = True
                loop.call_soon_threadsafe(self._write_rest, frame[n:])
            if fut is not None:
                self._arm_sweep(loop.call_soon_threadsafe)
            return True

    def _expect_swept(self, opaque: int, fut: Any, timeout: float) -> None:
        """``fut`` awaits the response to ``opaque``; its deadline is the sweep's to check
        (under ``_direct_lock``)."""
        self._pending[opaque] = fut
        self._deadlines.append((time.monotonic() + timeout, opaque, timeout))

    def _arm_sweep(self, schedule: Any) -> None:
        """Have the loop sweep deadlines (``schedule``: ``call_soon`` on the loop thread,
        ``call_soon_threadsafe`` from another), unless a sweep is armed already."""
        if not self._sweeping:
            self._sweeping = True
            schedule(self._sweep)

    def _write_rest(self, rest: bytes) -> None:
        with self._direct_lock:
            self._rest_pending = False
            t = self.transport
            if t is not None and not t.is_closing():
                t.write(rest)       # the transport buffers what the kernel does not take

    def _sweep(self) -> None:
        """Fail the requests written by callers whose deadline passed; again in ``SWEEP_S``
        while any is outstanding."""
        now = time.monotonic()
        with self._direct_lock:
            entries, self._deadlines = self._deadlines, []
        live: list[tuple[float, int, float]] = []
        expired: list[tuple[int, float]] = []
        pending = self._pending
        for entry in entries:
            if entry[1] in pending:
                if entry[0] <= now:
                    expired.append((entry[1], entry[2]))
                else:
                    live.append(entry)
        with self._direct_lock:
            self._deadlines[:0] = live
            more = bool(self._deadlines) and not self._lost
            self._sweeping = more
        for opaque, timeout in expired:
            self._expire(opaque, timeout, True)
        if more and self._loop is not None:
            self._loop.call_later(SWEEP_S, self._sweep)
