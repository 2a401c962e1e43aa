# The orderly push consumer's per-call loop (rocketstore.client.consume_service
# .ConsumeMessageOrderlyService), included by _codec.pyx. An orderly consumer takes a queue's
# lowest cached offsets, calls the listener under the queue's consume lock, and on a success
# commits them: with a one-message listener that is one round per message. Here the round is C
# (the take and the commit under the process queue's lock, the context, the lock checks);
# Python sees only what needs its rules: a suspend, a failure, no auto-commit, a lost lock, the
# time slice spent, the offset to publish.

#: what ``run_orderly`` stopped on
ORDERLY_EMPTY = 0       # nothing cached is left (the queue is marked not consuming)
ORDERLY_DROPPED = 1     # the queue was dropped (before or during a call)
ORDERLY_LOCK = 2        # clustering: the queue's broker lock is lost or expired
ORDERLY_TIME = 3        # past ``until``: yield the thread (MAX_TIME_CONSUME_CONTINUOUSLY)
ORDERLY_COMMIT = 4      # publish the committed offset now (interval passed, or a parked pull)
ORDERLY_RESULT = 5      # a call that was not a plain auto-committed success (or raised)

@cython.final
cdef class ConsumeOrderlyContext:
    """What an orderly listener may set for its call. ``auto_commit``: commit the call's
    messages when it returns SUCCESS (False: only the listener's COMMIT does).
    ``suspend_current_queue_time_millis``: how long SUSPEND_CURRENT_QUEUE_A_MOMENT waits
    before the same messages are offered again (-1: the consumer's setting)."""

    cdef public object message_queue
    cdef public bint auto_commit
    cdef public int64_t suspend_current_queue_time_millis

    def __init__(self, message_queue, bint auto_commit=True,
                 int64_t suspend_current_queue_time_millis=-1):
        self.message_queue = message_queue
        self.auto_commit = auto_commit
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis

    def __repr__(self):
        return (f"ConsumeOrderlyContext(message_queue={self.message_queue!r}, "
                f"auto_commit={bool(self.auto_commit)}, "
                f"suspend_current_queue_time_millis={self.suspend_current_queue_time_millis})")

    def __eq__(self, other):
        cdef ConsumeOrderlyContext o
        if type(other) is not ConsumeOrderlyContext:
            return NotImplemented
        o = <ConsumeOrderlyContext>other
        return (self.message_queue == o.message_queue and self.auto_commit == o.auto_commit
                and self.suspend_current_queue_time_millis
                == o.suspend_current_queue_time_millis)

    __hash__ = None


cdef list _orderly_take(object pq, Py_ssize_t batch):
    """``ProcessQueue.take_messages`` (the caller holds ``pq._lock``)."""
    cdef dict tree = pq._tree
    cdef dict consuming = pq._consuming
    cdef object order = pq._order
    cdef list out = []
    cdef object head, m
    pq.last_consume_timestamp = now_ms()
    while len(out) < batch:
        head = None
        while order:
            head = order[0]
            if head in tree:
                break
            order.popleft()
            head = None
        if head is None:
            break
        order.popleft()
        m = tree.pop(head)
        consuming[head] = m
        out.append(m)
    if not out:
        pq.consuming = False
    return out


cdef int64_t _orderly_commit(object pq) except -2:
    """``ProcessQueue.commit`` (the caller holds ``pq._lock``): the offset to commit, or -1."""
    cdef dict consuming = pq._consuming
    cdef dict reconsume = pq.reconsume
    cdef int64_t last = -1, off, size = 0
    cdef object k, m
    if not consuming:
        return -1
    for k, m in consuming.items():
        off = k
        if off > last:
            last = off
        size += m.body_size
        if reconsume:
            reconsume.pop(k, None)
    pq.msg_count = pq.msg_count - len(consuming)
    pq.msg_size = pq.msg_size - size
    consuming.clear()
    return last + 1


def run_orderly(pq, mq, listener, suspend, Py_ssize_t batch, bint clustering,
                int64_t lock_live_ms, double until, double commit_every, reset=None):
    """Consume ``pq``'s cached messages in order, ``batch`` per call, on this thread, until
    something needs ``ConsumeMessageOrderlyService``'s rules.

    Returns ``(what, msgs, status, ctx, error, offset)``: ``what`` one of the ``ORDERLY_*``
    codes (clustering: a lock older than ``lock_live_ms`` has expired); for ORDERLY_RESULT
    the call's messages, the listener's status (None when it raised), its context and the
    exception; ``offset`` the offset the calls committed here (-1: none), for the caller to
    publish. A call's status other than ``suspend`` (and not None) with ``ctx.auto_commit``
    commits in C. ``reset(msgs, mq)``: run on each call's messages first (the retry topic's
    names), or None.
    """
    cdef object lock = pq._lock
    cdef object consume_lock = pq.consume_lock
    cdef object acquire = lock.acquire, release = lock.release
    cdef object c_acquire = consume_lock.acquire, c_release = consume_lock.release
    cdef list msgs
    cdef ConsumeOrderlyContext ctx
    cdef object status, error
    cdef int64_t offset = -1, got
    cdef double commit_at = mono_s() + commit_every
    while True:
        if pq.dropped:
            return (ORDERLY_DROPPED, None, None, None, None, offset)
        if clustering and (not pq.locked
                           or now_ms() - <int64_t>pq.last_lock_timestamp > lock_live_ms):
            return (ORDERLY_LOCK, None, None, None, None, offset)
        if mono_s() > until:
            return (ORDERLY_TIME, None, None, None, None, offset)
        acquire()
        try:
            msgs = _orderly_take(pq, batch)
        finally:
            release()
        if not msgs:
            return (ORDERLY_EMPTY, None, None, None, None, offset)
        if reset is not None:
            reset(msgs, mq)
        ctx = ConsumeOrderlyContext.__new__(ConsumeOrderlyContext)
        ctx.message_queue = mq
        ctx.auto_commit = True
        ctx.suspend_current_queue_time_millis = -1
        error = None
        c_acquire()
        try:
            if pq.dropped:
                return (ORDERLY_DROPPED, None, None, None, None, offset)
            try:
                status = listener(msgs, ctx)
            except Exception as e:
                status = None
                error = e
        finally:
            c_release()
        if status is None or status is suspend or not ctx.auto_commit:
            return (ORDERLY_RESULT, msgs, status, ctx, error, offset)
        acquire()
        try:
            got = _orderly_commit(pq)
        finally:
            release()
        if got >= 0:
            offset = got
        if pq.parked_pull is not None or mono_s() > commit_at:
            return (ORDERLY_COMMIT, None, None, None, None, offset)
