# The push consumer's per-call loop (rocketstore.client.consume_service), included by
# _codec.pyx. A one-message listener makes one call per message: the call's bookkeeping
# (context, chunk, timing, success check, done list) is done here in C, and Python only
# sees the calls that need a decision (a failure, a slow call, a commit due, the end).

#: what ``run_calls`` stopped on
CALLS_DONE = 0          # no call left in the job
CALLS_DROPPED = 1       # the queue was dropped (before or during a call): discard
CALLS_COMMIT = 2        # the commit interval passed: commit what is done, then go on
CALLS_RESULT = 3        # a call that was not a plain success (or raised): handle it
CALLS_SLOW = 4          # a plain success that took longer than ``slow_s``: fan out
CALLS_FAST = 5          # a plain success in time while ``was_slow``: the service calms down

cdef enum:
    JAVA_INT_MAX_ = 0x7FFFFFFF


def consume_clock():
    """Seconds on the clock ``ConsumeJob.busy_since`` uses (CLOCK_MONOTONIC)."""
    return mono_s()


@cython.final
cdef class ConsumeConcurrentlyContext:
    """What a concurrent listener may set for its call. ``delay_level_when_next_consume``:
    0 lets the broker choose (3 + reconsume times), -1 sends failures straight to the DLQ.
    ``ack_index``: with CONSUME_SUCCESS, messages after this index are sent back."""

    cdef public object message_queue
    cdef public int delay_level_when_next_consume
    cdef public int ack_index

    def __init__(self, message_queue, int delay_level_when_next_consume=0,
                 int ack_index=JAVA_INT_MAX_):
        self.message_queue = message_queue
        self.delay_level_when_next_consume = delay_level_when_next_consume
        self.ack_index = ack_index

    def __repr__(self):
        return (f"ConsumeConcurrentlyContext(message_queue={self.message_queue!r}, "
                f"delay_level_when_next_consume={self.delay_level_when_next_consume}, "
                f"ack_index={self.ack_index})")

    def __eq__(self, other):
        cdef ConsumeConcurrentlyContext o
        if type(other) is not ConsumeConcurrentlyContext:
            return NotImplemented
        o = <ConsumeConcurrentlyContext>other
        return (self.message_queue == o.message_queue
                and self.delay_level_when_next_consume == o.delay_level_when_next_consume
                and self.ack_index == o.ack_index)

    __hash__ = None


@cython.final
cdef class ConsumeJob:
    """One pull's messages, cut into listener calls of ``bs`` messages.

    Runners on the consume pool take calls in turn (``run_calls`` takes the next index
    while holding the GIL: no call runs twice). ``done`` gathers the messages of calls
    that succeeded until someone commits them (``take_done``, a swap that no runner's
    append can slip between). ``busy_since``: ``consume_clock()`` when a runner entered a
    call, 0 outside (the watchdog's view).
    """

    cdef readonly list msgs
    cdef readonly object pq
    cdef readonly object mq
    cdef readonly Py_ssize_t bs
    cdef readonly Py_ssize_t n_calls
    cdef Py_ssize_t next_call
    cdef public Py_ssize_t runners
    cdef public Py_ssize_t taken
    cdef public double busy_since
    cdef list done

    def __init__(self, list msgs not None, pq, mq, Py_ssize_t bs):
        if bs < 1:
            raise ValueError(f"batch size {bs} < 1")
        self.msgs = msgs
        self.pq = pq
        self.mq = mq
        self.bs = bs
        self.n_calls = (len(msgs) + bs - 1) // bs
        self.next_call = 0
        self.runners = 1
        self.taken = 0
        self.busy_since = 0.0
        self.done = []

    @property
    def calls_left(self):
        """Calls no runner has taken yet."""
        return max(0, self.n_calls - self.next_call)

    def take_done(self):
        """The messages finished since the last take (and forget them)."""
        cdef list out = self.done
        self.done = []
        return out

    def has_done(self):
        return len(self.done) > 0


def run_calls(ConsumeJob job not None, listener, success, double slow_s, double commit_at,
              bint was_slow):
    """Run ``job``'s next listener calls on this thread until one needs a decision.

    Returns ``(what, chunk, status, ctx, error, slow)``: ``what`` is one of the ``CALLS_*``
    codes; for CALLS_RESULT, the call's messages, the listener's status (None when it
    raised), its context, the exception it raised (or None) and whether the call took
    longer than ``slow_s``; for CALLS_SLOW and CALLS_FAST (a call in time while
    ``was_slow``) the call succeeded and its messages are already in ``done``. A plain
    success (``status is success`` and ``ctx.ack_index`` covering the chunk) only appends
    the chunk to ``done``.
    """
    cdef object pq = job.pq
    cdef object mq = job.mq
    cdef list msgs = job.msgs
    cdef Py_ssize_t bs = job.bs, n = job.n_calls, i, lo, hi, k
    cdef list chunk
    cdef ConsumeConcurrentlyContext ctx
    cdef double t0, t1
    cdef bint slow
    cdef object status, error
    if pq.dropped:
        return (CALLS_DROPPED, None, None, None, None, False)
    # one clock read per call: a call's end is the next one's start (what lies between is
    # this loop's own bookkeeping)
    t1 = mono_s()
    while True:
        i = job.next_call
        if i >= n:
            return (CALLS_DONE, None, None, None, None, False)
        job.next_call = i + 1
        job.taken = i + 1
        lo = i * bs
        hi = lo + bs
        if hi > len(msgs):
            hi = len(msgs)
        chunk = msgs[lo:hi]
        ctx = ConsumeConcurrentlyContext.__new__(ConsumeConcurrentlyContext)
        ctx.message_queue = mq
        ctx.delay_level_when_next_consume = 0
        ctx.ack_index = JAVA_INT_MAX_
        t0 = t1
        job.busy_since = t0
        error = None
        try:
            status = listener(chunk, ctx)
        except Exception as e:
            status = None
            error = e
        t1 = mono_s()
        job.busy_since = 0.0
        if pq.dropped:          # the queue went to another consumer meanwhile: discard
            return (CALLS_DROPPED, None, None, None, None, False)
        slow = t1 - t0 > slow_s
        k = hi - lo
        if error is not None or status is not success or ctx.ack_index < k - 1:
            return (CALLS_RESULT, chunk, status, ctx, error, slow)
        if k == 1:
            job.done.append(chunk[0])
        else:
            job.done.extend(chunk)
        if slow:
            return (CALLS_SLOW, chunk, status, ctx, None, True)
        if was_slow:
            return (CALLS_FAST, chunk, status, ctx, None, False)
        if t1 > commit_at:
            return (CALLS_COMMIT, None, None, None, None, False)


def store_sizes(msgs):
    """Total ``store_size`` of ``msgs`` (``MessageExt``, or anything with a
    ``store_size``): a pull's bytes, one pass."""
    cdef int64_t total = 0
    for obj in msgs:
        if type(obj) is MessageExt:
            total += (<MessageExt>obj).store_size
        else:
            total += obj.store_size
    return total


def first_in_flight(order not None, dict tree not None):
    """The smallest offset of ``order`` (a deque of queue offsets, ascending) still in
    ``tree``, popping the finished ones before it; -1 when none is left (a process queue's
    committed offset, amortised O(1), one C pass)."""
    cdef object head
    while order:
        head = order[0]
        if head in tree:
            return head
        order.popleft()
    return -1


def cache_pull(dict tree not None, order not None, list msgs not None, int64_t after):
    """Put a pull's ``msgs`` into a process queue's ``tree`` (queue offset -> message) and
    append their offsets to ``order`` when they are all ``MessageExt`` with offsets
    strictly increasing from above ``after`` (the usual pull): ``(count, body bytes, last
    offset)``. Otherwise None and nothing is changed (the caller goes message by message).
    """
    cdef MessageExt m
    cdef int64_t last = after, size = 0
    cdef Py_ssize_t n = len(msgs), i
    cdef list offs
    cdef object off
    for obj in msgs:
        if type(obj) is not MessageExt:
            return None
        m = <MessageExt>obj
        if m.queue_offset <= last:
            return None
        last = m.queue_offset
        size += m._body_len
    offs = [None] * n
    for i in range(n):
        m = <MessageExt>msgs[i]
        off = m.queue_offset
        tree[off] = m
        offs[i] = off
    order.extend(offs)
    return n, size, last
