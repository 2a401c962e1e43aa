# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# Futures of durable puts: the flush and replica acknowledgements complete them.


from cpython.object cimport PyObject, PyTypeObject
from concurrent.futures import Future as _Future, InvalidStateError as _InvalidStateError
import threading as _threading

try:
    from concurrent.futures._base import (PENDING as _F_PENDING, FINISHED as _F_FINISHED,
                                          CANCELLED as _F_CANCELLED, RUNNING as _F_RUNNING,
                                          CANCELLED_AND_NOTIFIED as _F_CANCELLED_AND_NOTIFIED,
                                          LOGGER as _F_LOGGER)
except ImportError:         # not CPython's layout: plain futures below
    import logging as _logging
    _F_PENDING, _F_FINISHED, _F_CANCELLED, _F_CANCELLED_AND_NOTIFIED, _F_RUNNING = (
        "PENDING", "FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED", "RUNNING")
    _F_LOGGER = _logging.getLogger("concurrent.futures")


def _future_layout_known():
    """Whether ``Future`` keeps its state in the attributes AckFuture relies on (CPython
    3.8-3.13 do); another Python gets plain futures instead of a wrong fast path."""
    try:
        f = _Future()
        known = (f._state is _F_PENDING and f._result is None and f._exception is None
                 and f._waiters == [] and f._done_callbacks == []
                 and isinstance(f._condition, type(_threading.Condition())))
        f.set_result(1)
        return known and f._state is _F_FINISHED and f._result == 1
    except Exception:       # noqa: BLE001 - any surprise means: do not rely on it
        return False


_FAST_FUTURES = _future_layout_known()
cdef tuple _NO_ARGS = ()


class AckFuture(_Future):
    """The ``concurrent.futures.Future`` of a ``put_message(s)_async``: its
    ``threading.Condition`` is made on first use.

    A standard future builds a Condition (an RLock behind a Python-level ``__init__``: most of
    what a future costs) that only someone waiting on or cancelling the future needs. Every
    such path of ``Future`` reads ``self._condition`` first, which makes it here;
    ``complete_future`` completes a future nobody touched that way without any lock, running
    the callbacks ``add_done_callback`` kept without one. Otherwise it is a plain ``Future``
    (``asyncio.wrap_future``, ``concurrent.futures.wait``).
    """

    # a sync-flush put's: the FlushAckService, the log offset to be durable, the result and
    # its transform, so that a thread waiting in result() completes it itself once durable;
    # _claimed: its completion was taken (by that thread or the acknowledging one)
    _ack = None
    _end = 0
    _put = None
    _tf = None
    _claimed = False
    _waiting = False        # a thread is in wait_own: the acknowledging thread leaves it be

    def __init__(self):
        self._state = _F_PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def __getattr__(self, name):
        # made on first use (dict.setdefault is atomic: racing threads all get the one that
        # landed): a future nobody waits on or calls back costs the GC one object fewer each
        if name == "_condition":
            return self.__dict__.setdefault("_condition", _threading.Condition())
        if name == "_waiters" or name == "_done_callbacks":
            return self.__dict__.setdefault(name, [])
        raise AttributeError(name)

    def done(self):
        # the state is one attribute read; no Condition needed to read it
        s = self._state
        return s is _F_FINISHED or s is _F_CANCELLED or s is _F_CANCELLED_AND_NOTIFIED

    def cancelled(self):
        s = self._state
        return s is _F_CANCELLED or s is _F_CANCELLED_AND_NOTIFIED

    def result(self, timeout=None):
        # a finished future never changes again, and its result was stored before its state
        if self._state is _F_FINISHED and self._exception is None:
            return self._result
        ack = self._ack
        if ack is not None and self._state is _F_PENDING:
            # wait for the sync itself (GIL released) and complete the future here: one
            # thread wake-up fewer than through the acknowledging thread
            timeout = ack.wait_own(self, timeout)
            if self._state is _F_FINISHED and self._exception is None:
                return self._result
        return _Future.result(self, timeout)

    def exception(self, timeout=None):
        if self._state is _F_FINISHED:
            return self._exception
        return _Future.exception(self, timeout)

    def add_done_callback(self, fn):
        # a durable put's future gets the broker's and the producer's callbacks: kept without
        # a Condition (3 us each to build and take) while nobody waits on the future
        _add_callback(self, fn)


cdef void _run_callback(object fut, object fn):
    """``fn(fut)`` for a callback added to a done future; an exception is logged as
    ``Future.add_done_callback`` logs it."""
    try:
        fn(fut)
    except Exception:
        _F_LOGGER.exception("exception calling callback for %r", fut)


cdef object _add_callback(object fut, object fn):
    """``add_done_callback`` of an ``AckFuture``. Without a Condition, the state check and
    the append below are one step under the GIL (no Python code, no allocation that could
    run the collector in between), as ``complete_future``'s check-and-set is: a callback is
    either in the list the completion runs or sees the future done and runs here."""
    cdef dict d = fut.__dict__
    cdef list cbs = d.get("_done_callbacks")
    cdef list fresh = None
    if cbs is None:
        fresh = []          # made first: an allocation may run the collector (finalizers)
    if "_condition" in d:   # someone waits or cancels: the standard path, under its lock
        _Future.add_done_callback(fut, fn)
        return None
    state = d["_state"]
    if state is _F_PENDING or state is _F_RUNNING:
        cbs = d.get("_done_callbacks")
        if cbs is None:
            d["_done_callbacks"] = fresh
            cbs = fresh
        cbs.append(fn)
        return None
    _run_callback(fut, fn)
    return None


cdef object _new_future(object state, object value):
    cdef object f
    if not _FAST_FUTURES:
        f = _Future()
        if state is _F_FINISHED:
            f.set_result(value)
        return f
    # AckFuture.__new__(AckFuture) without the Python-level call (object.__new__'s slot)
    f = (<PyTypeObject *>AckFuture).tp_new(<type>AckFuture, <PyObject *>_NO_ARGS, NULL)
    # attribute stores, not ``f.__dict__``: CPython keeps them in the instance's inline
    # values and makes no dict unless one is asked for (complete_future, __getattr__)
    f._state = state
    f._result = value
    f._exception = None
    return f


def pending_future():
    """A new pending ``AckFuture``."""
    return _new_future(_F_PENDING, None)


def done_future(value):
    """An ``AckFuture`` already completed with ``value``."""
    return _new_future(_F_FINISHED, value)


def sent_future(value):
    """``done_future`` for a send's result that nothing else refers to (the in-process
    ``send_async`` of a put stored at once): also left out of the cycle collector, which
    otherwise walks every such future a caller keeps, as CPython leaves out a dict of atomic
    values. It holds its result and state only; a waiter or callback added to a completed
    future is never kept by it (``concurrent.futures`` runs or removes them), so it is in no
    reference cycle unless a caller stores the future inside its own attributes or result."""
    cdef object f = _new_future(_F_FINISHED, value)
    if _FAST_FUTURES:
        PyObject_GC_UnTrack(<void *>f)
    return f


def claim(fut):
    """Take the completion of ``fut``: True once, for the one thread that completes it (a
    sync-flush put's future may be completed by its waiter or by the acknowledging thread;
    the check-and-set is one step under the GIL). Any other future: always True."""
    if type(fut) is not AckFuture:
        return True
    if fut._claimed:
        return False
    fut._claimed = True
    return True


def has_callbacks(fut):
    """Whether an ``AckFuture`` has callbacks or a Condition (through which it may get some
    under its lock); one without either completes with nothing to run."""
    cdef dict d = fut.__dict__
    return "_condition" in d or bool(d.get("_done_callbacks"))


def complete_future(fut, value):
    """Complete ``fut`` with ``value``; False when it was cancelled (or already done).

    An ``AckFuture`` without a Condition has no waiter or canceller (each makes the Condition
    before it looks at the state), and nothing between the state check and the two stores
    below runs Python code or lets go of the GIL: the check-and-set is atomic without a lock,
    as ``_add_callback``'s check-and-append is, so its callbacks are the list read after it.
    Any other future goes through ``set_result``."""
    cdef dict d
    if _FAST_FUTURES and type(fut) is AckFuture:
        d = fut.__dict__
        if "_condition" not in d:
            if d["_state"] is not _F_PENDING:
                return False
            d["_result"] = value
            d["_state"] = _F_FINISHED
            # callbacks added from here on see it done and run where they are added
            if d.get("_done_callbacks"):
                _Future._invoke_callbacks(fut)      # the list add_done_callback kept
            return True
    try:
        fut.set_result(value)
    except _InvalidStateError:
        return False
    return True
