# Included by _commitlog.pyx (one extension module: every call below stays a C call).
# Futures of durable puts: the flush and replica acknowledgements complete them.


from cpython.object cimport PyObject, PyTypeObject
from concurrent.futures import Future as _Future, InvalidStateError as _InvalidStateError
import threading as _threading

try:
    from concurrent.futures._base import (PENDING as _F_PENDING, FINISHED as _F_FINISHED,
                                          CANCELLED as _F_CANCELLED,
                                          CANCELLED_AND_NOTIFIED as _F_CANCELLED_AND_NOTIFIED)
except ImportError:         # not CPython's layout: plain futures below
    _F_PENDING, _F_FINISHED, _F_CANCELLED, _F_CANCELLED_AND_NOTIFIED = (
        "PENDING", "FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED")


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
    what a future costs) that only someone waiting on, listening to, or cancelling the future
    needs. Every such path of ``Future`` reads ``self._condition`` first, which makes it here;
    ``complete_future`` completes a future nobody touched that way without any lock. Otherwise
    it is a plain ``Future`` (``asyncio.wrap_future``, ``concurrent.futures.wait``, callbacks).
    """

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

    def result(self, timeout=None):
        # a finished future never changes again, and its result was stored before its state
        if self._state is _F_FINISHED and self._exception is None:
            return self._result
        return _Future.result(self, timeout)

    def exception(self, timeout=None):
        if self._state is _F_FINISHED:
            return self._exception
        return _Future.exception(self, timeout)


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


def complete_future(fut, value):
    """Complete ``fut`` with ``value``; False when it was cancelled (or already done).

    An ``AckFuture`` without a Condition has no waiter, callback or canceller (each makes the
    Condition before it looks at the state), and nothing between the state check and the two
    stores below runs Python code or lets go of the GIL: the check-and-set is atomic without a
    lock. Any other future goes through ``set_result``."""
    cdef dict d
    if _FAST_FUTURES and type(fut) is AckFuture:
        d = fut.__dict__
        if "_condition" not in d:
            if d["_state"] is not _F_PENDING:
                return False
            d["_result"] = value
            d["_state"] = _F_FINISHED
            return True
    try:
        fut.set_result(value)
    except _InvalidStateError:
        return False
    return True
