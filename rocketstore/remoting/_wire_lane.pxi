# The in-process send lane's store step (``rocketstore.broker.send_lane.SendLane``), in C.
#
# A producer sending message after message to one topic in process pays, per message, only
# what depends on the message: the properties string rewritten as 4.9.8 stores it (the same
# rewrite as ``stored_properties``), the record put, and the broker's put counters. The checks
# that depend on the topic's configuration and the broker's settings were made by a full send
# (``SendMessageProcessor.send_one``) and hold while both objects are the very ones it passed
# with: both are immutable and replaced whole on change, so an identity test per send is the
# whole check. Everything else returns to the Python subclass's ``_full``.

from rocketstore.store._codec cimport Message


@cython.final
cdef class PutCounter:
    """Messages and body bytes one topic's in-process lane sends stored (``BrokerMetrics``
    adds them to its per-topic put counters). Updated with the GIL held: no lock per send."""
    cdef readonly int64_t msgs
    cdef readonly int64_t size


cdef class LaneCore:
    """The fast part of ``SendLane.send`` (its Python subclass supplies ``_full`` and sets the
    state through ``_keep``)."""
    cdef readonly str topic
    cdef object _peek               # the topic table's peek: topic -> TopicConfig or None
    cdef object _processor          # SendMessageProcessor (its ``cfg`` is the settings object)
    cdef object _check_open         # the broker's: raises StoreClosedError once closed
    cdef object _put                # CommitLog.put_wire_async
    cdef object _acks
    cdef object _transform_of       # queue id -> the response transform of a deferred answer
    cdef object _response_of        # (PutMessageResult, queue id) -> SendMessageResponse
    cdef object _illegal            # message -> MESSAGE_ILLEGAL response
    cdef object _uniq_id
    cdef object _born_host_of       # "ip:port" -> encoded born host
    cdef object _result_type        # PutMessageResult
    cdef object _put_ok             # PutMessageStatus.PUT_OK
    cdef bytes _cluster
    cdef bytes _local_host
    cdef PutCounter _counter        # None: the broker keeps no metrics
    cdef object _on_send            # the metrics' count of any other answer, or None
    # what the last full send passed with (None: no send yet)
    cdef object _tc
    cdef object _cfg
    cdef int _bound
    cdef int _sys_bits

    def __init__(self, str topic not None, peek, processor, check_open, put, acks,
                 transform_of, response_of, illegal, uniq_id, born_host_of, result_type,
                 put_ok, bytes cluster not None, bytes local_host not None,
                 PutCounter counter, on_send):
        self.topic = topic
        self._peek = peek
        self._processor = processor
        self._check_open = check_open
        self._put = put
        self._acks = acks
        self._transform_of = transform_of
        self._response_of = response_of
        self._illegal = illegal
        self._uniq_id = uniq_id
        self._born_host_of = born_host_of
        self._result_type = result_type
        self._put_ok = put_ok
        self._cluster = cluster
        self._local_host = local_host
        self._counter = counter
        self._on_send = on_send
        self._tc = None
        self._cfg = None

    def _keep(self, tc, cfg, int bound, int sys_bits):
        """Remember what a full send passed with (``tc``: the topic config, ``cfg``: the
        settings object, ``bound``: the queue ids below it, ``sys_bits``: MULTI_TAGS)."""
        self._tc = tc
        self._cfg = cfg
        self._bound = bound
        self._sys_bits = sys_bits

    @property
    def warm(self):
        """Whether a full send passed: the next plain sends take the C path."""
        return self._tc is not None

    def send(self, msg, int queue_id):
        """Send ``msg`` (stamped by the producer) to ``queue_id``: a ``PutMessageResult``
        when it was stored at once (PUT_OK, counted), else what ``send_one`` answers (a
        response, or its Future when a flush or replica wait completes it)."""
        cdef Message m
        cdef object tc = self._peek(self.topic)
        if (self._tc is None or tc is not self._tc or self._processor.cfg is not self._cfg
                or not 0 <= queue_id < self._bound or type(msg) is not Message):
            return self._full(msg, queue_id, tc)
        m = <Message>msg
        if m.prepared_transaction_offset or type(m._body) is not bytes:
            return self._full(msg, queue_id, tc)
        self._check_open()
        r = self._put_plain(m, queue_id)
        if r is None:                       # not the byte path's shape
            return self._full(msg, queue_id, tc)
        return r

    cdef object _put_plain(self, Message m, int queue_id):
        cdef bytes props = m._props_b if m._user_len >= 0 else m.send_properties()
        cdef bytes uniq_b, stored, host
        cdef _Map pm
        cdef bint wait
        cdef object bt, r
        cdef PutCounter c
        if not _plain(PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props)):
            return None
        _init(&pm)
        if _parse_into(&pm, PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props)) < 0:
            return None
        if _find(&pm, b"UNIQ_KEY", 8) < 0:
            uniq_b = self._uniq_id().encode("ascii")
            if _put(&pm, b"UNIQ_KEY", 8, PyBytes_AS_STRING(uniq_b), PyBytes_GET_SIZE(uniq_b)) < 0:
                return None
        if _put(&pm, b"CLUSTER", 7, PyBytes_AS_STRING(self._cluster),
                PyBytes_GET_SIZE(self._cluster)) < 0:
            return None
        wait = _take_wait(&pm)
        stored = _serialize(&pm, NULL, 0)
        host = self._local_host if m.born_host is None else self._born_host_of(m.born_host)
        bt = m.born_timestamp
        try:
            r = self._put(self.topic, queue_id, m._body, stored, m.flag,
                          m.sys_flag | self._sys_bits, 0, -1 if bt is None else bt, host, wait,
                          self._acks, self._transform_of(queue_id), True)
        except InvalidMessageError as e:
            r = self._illegal(e)
            if self._on_send is not None:
                self._on_send(self.topic, m, r)
            return r
        if type(r) is self._result_type:
            if r.status is self._put_ok:
                c = self._counter
                if c is not None:
                    c.msgs += 1
                    c.size += m._body_len
                return r
            r = self._response_of(r, queue_id)
        if self._on_send is not None:       # refused, or a Future (SYNC_FLUSH, SYNC_MASTER)
            self._on_send(self.topic, m, r)
        return r


# -- the producer's end: FastSend (rocketstore.client.fast_send) -----------------------------

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC


cdef inline double _monotonic() noexcept nogil:
    # time.monotonic()'s clock (CLOCK_MONOTONIC on Linux), without a call into Python
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class FastSendCore:
    """The fast part of a producer's sync send to one topic (``FastSend``, its Python
    subclass, supplies ``_answered`` for every answer but a put stored at once)."""
    cdef readonly object producer
    cdef readonly object info           # TopicPublishInfo
    cdef readonly double expires        # time.monotonic() past which the publish list is old
    cdef readonly object lane           # the broker's SendLane.send
    cdef readonly str broker_name
    cdef object _mqs
    cdef object _index
    cdef object _stamp                  # stamp_one_message
    cdef object _result                 # SendResult
    cdef object _send_ok
    cdef object _stored_type            # PutMessageResult

    def __init__(self, producer, info, double expires, lane, str broker_name not None,
                 stamp, result, send_ok, stored_type):
        self.producer = producer
        self.info = info
        self.expires = expires
        self.lane = lane
        self.broker_name = broker_name
        self._mqs = info.message_queues
        self._index = info.send_which_queue
        self._stamp = stamp
        self._result = result
        self._send_ok = send_ok
        self._stored_type = stored_type

    def _take(self, msg):
        """(start time, queue, stamped message, UNIQ_KEY) when this path takes ``msg``, else
        None."""
        cdef Message m
        cdef double begin
        cdef Py_ssize_t n
        if type(msg) is not Message:
            return None
        m = <Message>msg
        p = self.producer
        n = m._body_len
        begin = _monotonic()
        if (not 0 < n < p.compress_msg_body_over_howmuch or n > p.max_message_size
                or begin >= self.expires or p.fault_strategy.send_latency_fault_enable):
            return None
        mqs = self._mqs
        mq = mqs[self._index.increment_and_get() % len(mqs)]
        if mq.broker_name != self.broker_name:
            return None             # a route over several brokers: the transport's path
        stamped, uniq = self._stamp(msg)
        return begin, mq, stamped, uniq

    def send(self, msg, int timeout):
        """The send's result, or None when this path does not take the message (the caller
        runs ``Producer.send``'s own path)."""
        taken = self._take(msg)
        if taken is None:
            return None
        begin, mq, stamped, uniq = <tuple>taken
        try:
            answer = self.lane(stamped, mq.queue_id)
        except StoreClosedError as e:
            answer = e                                  # retried as a transport error
        if type(answer) is self._stored_type:           # stored at once
            return self._result(self._send_ok, uniq, answer.msg_id, mq, answer.queue_offset,
                                None)
        return self._answered(answer, stamped, uniq, mq, begin, timeout)
