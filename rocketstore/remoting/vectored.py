"""Vectored socket writes that keep views as views (the zero-copy output of ``Connection``).

An answer whose body is stored records (``rocketstore.remoting.zerocopy.RecordBody``) is a
list of buffers: the frame's prefix and header, then views of the mapped commit log. They
leave with ``writev(2)`` straight from the mapping. What the socket does not take at once
must wait somewhere, and asyncio's selector transport before Python 3.12 copies it into a
``bytearray`` (its ``writelines`` even joins everything first). So on that transport a
``VectorWriter`` keeps the rest as the views themselves and writes them when the socket is
writable: the views (and the mappings they pin) are released as the kernel takes the bytes.
Python 3.12's selector transport and uvloop's keep memoryviews in their own buffers:
there ``Connection`` hands the parts to ``transport.writelines``.

While a writer holds bytes, everything the connection sends goes behind them (order is
kept), and the transport's own buffer stays empty (it registers no writer of its own).
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections import deque
from typing import Any, Callable

log = logging.getLogger("rocketstore.remoting")

try:
    IOV_MAX = max(16, min(os.sysconf("SC_IOV_MAX"), 1024))
except (ValueError, OSError, AttributeError):      # pragma: no cover - not Linux
    IOV_MAX = 1024

Buffer = bytes | memoryview


def writev_all(fd: int, parts: list[Buffer]) -> int:
    """Write ``parts`` in order with ``writev`` until done or the socket is full; the bytes
    written (``BlockingIOError`` only when nothing was)."""
    if len(parts) <= IOV_MAX:
        return os.writev(fd, parts)     # one call: the common case (a pull answer)
    done = 0
    i = 0
    n_parts = len(parts)
    while i < n_parts:
        chunk = parts[i:i + IOV_MAX]
        want = 0
        for p in chunk:
            want += len(p)
        try:
            n = os.writev(fd, chunk)
        except (BlockingIOError, InterruptedError):
            if done:
                return done
            raise
        done += n
        if n < want:
            return done
        i += len(chunk)
    return done


def trim(parts: list[Buffer], n: int) -> list[Buffer]:
    """``parts`` without their first ``n`` bytes (views of the rest, no copy)."""
    i = 0
    while n and n >= len(parts[i]):
        n -= len(parts[i])
        i += 1
    rest = parts[i:]
    if n:
        rest[0] = memoryview(rest[0])[n:]
    return rest


def needs_own_queue(transport: Any, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``transport`` would copy what the socket does not take (asyncio's selector
    transport before 3.12), and this loop lets a writer be registered for its socket."""
    if sys.version_info >= (3, 12):
        return False
    from asyncio.selector_events import _SelectorSocketTransport  # type: ignore[attr-defined]
    return isinstance(transport, _SelectorSocketTransport) and hasattr(loop, "_add_writer")


class VectorWriter:
    """Writes buffers to ``fd`` with ``writev``; keeps the rest (as views) until writable.

    ``on_pause``/``on_resume`` are called when the bytes held cross ``high_water`` and come
    back under a quarter of it (as a transport's flow control does); ``on_error`` when the
    socket fails (the connection aborts)."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, high_water: int,
                 on_pause: Callable[[], None], on_resume: Callable[[], None],
                 on_error: Callable[[OSError], None]) -> None:
        self.fd = fd
        self.loop = loop
        self.high_water = high_water
        self.queue: deque[Buffer] = deque()
        self.nbytes = 0             # bytes held, not yet taken by the socket
        self.paused = False
        self._writing = False       # a writer callback is registered
        self._on_pause = on_pause
        self._on_resume = on_resume
        self._on_error = on_error

    def write(self, parts: list[Buffer], nbytes: int) -> None:
        """Write now what the socket takes; hold the rest (behind what is already held)."""
        if self.queue:
            self.queue.extend(parts)
            self.nbytes += nbytes
            self._check_pause()
            return
        try:
            n = writev_all(self.fd, parts)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._on_error(e)
            return
        if n == nbytes:
            return
        self.queue.extend(trim(parts, n))
        self.nbytes += nbytes - n
        if not self._writing:
            self.loop._add_writer(self.fd, self._ready)  # type: ignore[attr-defined]
            self._writing = True
        self._check_pause()

    def _check_pause(self) -> None:
        if not self.paused and self.nbytes > self.high_water:
            self.paused = True
            self._on_pause()

    def _ready(self) -> None:
        q = self.queue
        parts = list(q) if len(q) <= IOV_MAX else [q[i] for i in range(IOV_MAX)]
        try:
            n = writev_all(self.fd, parts)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.discard()
            self._on_error(e)
            return
        self.nbytes -= n
        while n:
            head = q[0]
            if n >= len(head):
                n -= len(head)
                q.popleft()
            else:
                q[0] = memoryview(head)[n:]
                n = 0
        if not q:
            self._stop_writing()
        if self.paused and self.nbytes <= self.high_water // 4:
            self.paused = False
            self._on_resume()

    def _stop_writing(self) -> None:
        if self._writing:
            self.loop._remove_writer(self.fd)  # type: ignore[attr-defined]
            self._writing = False

    def take(self) -> list[Buffer]:
        """Hand over what is held (for the transport to write before it closes)."""
        parts = list(self.queue)
        self.queue.clear()
        self.nbytes = 0
        self._stop_writing()
        return parts

    def discard(self) -> None:
        """Drop what is held (the connection is gone): the views and their mappings go."""
        self.queue.clear()
        self.nbytes = 0
        self._stop_writing()
