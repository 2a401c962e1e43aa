# The in-process send lane's store step (``rocketstore.broker.send_lane.SendLane``), in C.
#
# A producer sending message after message to one topic in process pays, per message, only
# what depends on the message: the properties string rewritten as 4.9.8 stores it (the same
# rewrite as ``stored_properties``), the record put, and the broker's put counters. The checks
# that depend on the topic's configuration and the broker's settings were made by a full send
# (``SendMessageProcessor.send_one``) and hold while both objects are the very ones it passed
# with: both are immutable and replaced whole on change, so an identity test per send is the
# whole check. Everything else returns to the Python subclass's ``_full``.

from rocketstore.store._codec cimport Message, UniqIdGenerator, mono_s, now_ms, stamped_message
from rocketstore.store._codec import PROPERTY_UNIQ_KEY


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
    cdef object _topics             # the TopicTable (its ``_table`` dict read as ``peek`` does)
    cdef object _processor          # SendMessageProcessor (its ``cfg`` is the settings object)
    cdef object _broker             # its ``_closed`` is read per send (``_check_open``)
    cdef list _transforms           # by queue id: ``transform_of``'s answers
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
    cdef object _put_batch          # CommitLog.put_wire_batch_async
    cdef object _on_batch           # (topic, count, body bytes, answer): the metrics' count
                                    # of a batch's answer but PUT_OK at once, or None
    # what the last full send passed with (None: no send yet)
    cdef object _tc
    cdef object _cfg
    cdef int _bound
    cdef int _sys_bits

    def __init__(self, str topic not None, topics, processor, broker, put, acks,
                 transform_of, response_of, illegal, uniq_id, born_host_of, result_type,
                 put_ok, bytes cluster not None, bytes local_host not None,
                 PutCounter counter, on_send, put_batch=None, on_batch=None):
        self.topic = topic
        self._topics = topics
        self._transforms = []
        self._processor = processor
        self._broker = broker
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
        self._put_batch = put_batch
        self._on_batch = on_batch
        self._tc = None
        self._cfg = None

    def _keep(self, tc, cfg, int bound, int sys_bits):
        """Remember what a full send passed with (``tc``: the topic config, ``cfg``: the
        settings object, ``bound``: the queue ids below it, ``sys_bits``: MULTI_TAGS)."""
        self._tc = tc
        self._cfg = cfg
        self._bound = bound
        self._sys_bits = sys_bits

    def _count_into(self, PutCounter counter):
        """Count stored sends into ``counter`` from now on (the topic's counter changed: it
        was deleted and re-created)."""
        self._counter = counter

    @property
    def warm(self):
        """Whether a full send passed: the next plain sends take the C path."""
        return self._tc is not None

    def send(self, msg, int queue_id):
        """Send ``msg`` (stamped by the producer) to ``queue_id``: a ``PutMessageResult``
        when it was stored at once (PUT_OK, counted), else what ``send_one`` answers (a
        response, or its Future when a flush or replica wait completes it)."""
        cdef Message m
        # TopicTable.peek: a change stores a new config in one assignment or swaps the table
        cdef object tc = self._topics._table.get(self.topic)
        if (self._tc is None or tc is not self._tc or self._processor.cfg is not self._cfg
                or not 0 <= queue_id < self._bound or type(msg) is not Message
                or not self._processor._broker_writable):
            return self._full(msg, queue_id, tc)
        m = <Message>msg
        if m.prepared_transaction_offset or type(m._body) is not bytes:
            return self._full(msg, queue_id, tc)
        if self._broker._closed:
            self._broker._check_open()          # raises StoreClosedError
        r = self._put_plain(m, queue_id)
        if r is None:                       # not the byte path's shape
            return self._full(msg, queue_id, tc)
        return r

    def send_wire(self, w):
        """A plain one-message send as decoded from the wire (``WireSend``) stored in one
        step, as ``SendMessageProcessor.send_wire_now``'s byte path stores it: a
        ``PutMessageResult`` when stored at once (PUT_OK, counted), a refusal or a Future
        (not counted: the caller counts it), or None when the lane is not warm or the send is
        not of that shape (the caller takes ``send_wire_full``)."""
        if w.batch:
            return None
        return self._send_one(w.queue_id, w.flag, w.sys_flag, w.reconsume_times, w.properties,
                              w.body, w.born_timestamp, w.born_host)

    def send_ext(self, dict ext not None, body, int version, str peer, keys,
                 tuple required not None):
        """``send_wire`` of a send request read straight from its header fields (``ext``:
        the command's ``extFields``, ``keys``/``required``: ``headers.send_keys`` of its
        code), without a ``WireSend``: the same answers, and None (nothing stored) for
        anything ``send_header`` does not read in C or the lane does not take."""
        cdef tuple f
        if type(body) is not bytes:
            return None
        fields = send_header(ext, keys, required, version)
        if fields is None:
            return None
        f = <tuple>fields
        if f[11]:           # a batch
            return None
        # (group, topic, default topic, dtqn, queue id, sys flag, born, flag, properties,
        #  reconsume times, max reconsume times, batch)
        return self._send_one(f[4], f[7], f[5], f[9], f[8], body, f[6], peer)

    cdef object _send_one(self, int64_t queue_id, int64_t flag, int64_t sys_flag,
                          int64_t reconsume, object props, object body, object born_ts,
                          object born_host):
        cdef object tc = self._topics._table.get(self.topic)
        cdef object stored, r
        cdef PutCounter c
        # a broker without write permission refuses sends to order topics, whose list the
        # NameServer may change at any time: every send of such a broker takes the full path
        if (self._tc is None or tc is not self._tc or self._processor.cfg is not self._cfg
                or self._processor._slave or not self._processor._broker_writable):
            return None
        if (not 0 <= queue_id < self._bound or sys_flag & 0xC
                or not -0x80000000 <= flag <= 0x7FFFFFFF
                or not -0x80000000 <= sys_flag <= 0x7FFFFFFF
                or not -0x80000000 <= reconsume <= 0x7FFFFFFF):
            return None
        if type(props) is not str or not (<str>props).isascii():
            return None
        stored = stored_properties((<str>props).encode("ascii"), self._cluster, self._uniq_id)
        if stored is None:
            return None
        if self._broker._closed:
            self._broker._check_open()          # raises StoreClosedError
        try:
            r = self._put(self.topic, <int>queue_id, body, stored[0], flag,
                          sys_flag | self._sys_bits, reconsume, born_ts,
                          self._born_host_of(born_host), stored[1], self._acks,
                          self._transform_for(<int>queue_id), True)
        except InvalidMessageError as e:
            return self._illegal(e)
        if type(r) is self._result_type:
            if r.status is self._put_ok:
                c = self._counter
                if c is not None:
                    c.msgs += 1
                    c.size += len(body)
                return r
            return self._response_of(r, <int>queue_id)
        return r

    cdef object _transform_for(self, int queue_id):
        """``transform_of(queue_id)``, kept by queue id below 1024."""
        if queue_id < len(self._transforms):
            return self._transforms[queue_id]
        if queue_id < 1024:
            while len(self._transforms) <= queue_id:
                self._transforms.append(self._transform_of(len(self._transforms)))
            return self._transforms[queue_id]
        return self._transform_of(queue_id)

    cdef object _batch(self, tuple msgs, int queue_id, const char *ids):
        """A producer's batch of unstamped ``Message``s (``ids``: the UNIQ_KEYs it made,
        see ``_batch_records``) stored in one call: a ``PutMessageResult`` when stored at
        once (PUT_OK, counted), else the response or its Future; None (nothing stored) when
        the lane's state or the batch's shape is not this path's: the producer then sends
        it through ``send_batch_full``."""
        cdef Py_ssize_t body_bytes = 0
        cdef PutCounter c
        cdef object tc = self._topics._table.get(self.topic)
        if (self._tc is None or tc is not self._tc or self._processor.cfg is not self._cfg
                or not 0 <= queue_id < self._bound or self._put_batch is None):
            return None
        if self._broker._closed:
            self._broker._check_open()          # raises StoreClosedError
        built = _batch_records(msgs, self._cluster, self._uniq_id, ids, &body_bytes)
        if built is None:
            return None
        body, meta, props = <tuple>built
        try:
            r = self._put_batch(self.topic, queue_id, body, meta, props, self._sys_bits, 0, -1,
                                self._local_host, self._acks, self._transform_for(queue_id),
                                True)
        except InvalidMessageError as e:
            r = self._illegal(e)        # too large for a file, an entry over the limits
        else:
            if type(r) is self._result_type:
                if r.status is self._put_ok:
                    c = self._counter
                    if c is not None:
                        c.msgs += len(msgs)
                        c.size += body_bytes
                    return r
                r = self._response_of(r, queue_id)
        if self._on_batch is not None:      # refused, or a Future (SYNC_FLUSH, SYNC_MASTER)
            self._on_batch(self.topic, len(msgs), body_bytes, r)
        return r

    cdef object _put_plain(self, Message m, int queue_id):
        cdef bytes props = m._props_b if m._user_len >= 0 else m.send_properties()
        cdef bytes uniq_b, stored, host
        cdef _Map pm
        cdef bint wait
        cdef object bt, r, transform
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
        transform = self._transform_for(queue_id)
        try:
            r = self._put(self.topic, queue_id, m._body, stored, m.flag,
                          m.sys_flag | self._sys_bits, 0, -1 if bt is None else bt, host, wait,
                          self._acks, transform, True)
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

from cpython.pythread cimport PyThread_get_thread_ident
from libc.string cimport memset
import random as _random


cdef enum:
    _INDEX_SLOTS = 64               # threads one index tracks before it starts afresh


@cython.final
cdef class ThreadLocalIndex:
    """RocketMQ's ``ThreadLocalIndex`` (a producer's round robin over a topic's queues): each
    thread starts at a random non-negative int and pre-increments, Java int wrap, ``&
    0x7FFFFFFF``. Kept by thread id in a small open-addressing table in C (a send reads and
    writes no Python object); past 64 threads the table is cleared and every thread starts
    afresh at a random index, which round robin allows."""
    cdef unsigned long _ids[_INDEX_SLOTS]
    cdef uint32_t _vals[_INDEX_SLOTS]
    cdef bint _used[_INDEX_SLOTS]

    cdef uint32_t *_slot(self, unsigned long ident) except NULL:
        cdef int h = <int>((ident * <unsigned long>0x9E3779B97F4A7C15) >> 58), i, k
        for i in range(_INDEX_SLOTS):
            k = (h + i) & (_INDEX_SLOTS - 1)
            if not self._used[k]:
                break
            if self._ids[k] == ident:
                return &self._vals[k]
        else:
            for k in range(_INDEX_SLOTS):
                self._used[k] = False
            k = h
        self._used[k] = True
        self._ids[k] = ident
        self._vals[k] = <uint32_t>_random.getrandbits(31)
        return &self._vals[k]

    def increment_and_get(self):
        cdef uint32_t *v = self._slot(PyThread_get_thread_ident())
        v[0] += 1                       # Java int wrap
        return v[0] & 0x7FFFFFFF

    cdef inline uint32_t next_c(self) except? 0xFFFFFFFF:
        cdef uint32_t *v = self._slot(PyThread_get_thread_ident())
        v[0] += 1
        return v[0] & 0x7FFFFFFF

    def set_current(self, uint32_t value):
        """Make ``value`` the calling thread's last index (the next is ``value + 1``)."""
        self._slot(PyThread_get_thread_ident())[0] = value


cdef class FastSendCore:
    """The fast part of a producer's sync send to one topic (``FastSend``, its Python
    subclass, supplies ``_answered`` for every answer but a put stored at once)."""
    cdef readonly object producer
    cdef readonly object info           # TopicPublishInfo
    cdef readonly double expires        # time.monotonic() past which the publish list is old
    cdef readonly object lane           # the broker's SendLane.send
    cdef readonly str broker_name
    cdef list _mqs
    cdef object _index                  # ThreadLocalIndex (the publish list's)
    cdef list _qids                     # queue id of each of _mqs
    cdef bint _one_broker               # every queue of _mqs is on ``broker_name``
    cdef UniqIdGenerator _gen           # the process's UNIQ_KEY generator (stamp_one_message's)
    cdef object _result                 # SendResult
    cdef object _send_ok
    cdef object _stored_type            # PutMessageResult
    cdef object _done_future            # value -> a completed future (the store's AckFuture)
    cdef readonly LaneCore batch_lane   # the lane's object (its batches), or None

    def __init__(self, producer, info, double expires, lane, str broker_name not None,
                 UniqIdGenerator gen not None, result, send_ok, stored_type, done_future):
        self.producer = producer
        self.info = info
        self.expires = expires
        self.lane = lane
        self.broker_name = broker_name
        self._mqs = list(info.message_queues)
        self._index = info.send_which_queue
        self._qids = [mq.queue_id for mq in self._mqs]
        self._one_broker = all(mq.broker_name == broker_name for mq in self._mqs)
        self._gen = gen
        self._result = result
        self._send_ok = send_ok
        self._stored_type = stored_type
        self._done_future = done_future
        owner = getattr(lane, "__self__", None)       # the lane is its SendLane's bound send
        self.batch_lane = owner if isinstance(owner, LaneCore) else None

    cdef Message _pick(self, object msg, Py_ssize_t *which, double *begin):
        """The stamped message and its queue's index in ``which`` when this path takes
        ``msg``, else None."""
        cdef Message m
        cdef Py_ssize_t n
        cdef object idx
        if type(msg) is not Message:
            return None
        m = <Message>msg
        p = self.producer
        n = m._body_len
        begin[0] = mono_s()
        if (not 0 < n < p.compress_msg_body_over_howmuch or n > p.max_message_size
                or begin[0] >= self.expires or p.fault_strategy.send_latency_fault_enable
                or not self._one_broker or not self._mqs):
            return None         # (a route over several brokers: the transport's path)
        idx = self._index
        which[0] = ((<ThreadLocalIndex>idx).next_c() if type(idx) is ThreadLocalIndex
                    else idx.increment_and_get()) % len(self._mqs)
        # stamp_one_message: the id is made while the GIL is held, so threads need no lock
        return stamped_message(m, self._gen, now_ms())

    def _take(self, msg):
        """(start time, queue, stamped message, UNIQ_KEY) when this path takes ``msg``, else
        None."""
        cdef Py_ssize_t i = 0
        cdef double begin = 0
        cdef Message stamped = self._pick(msg, &i, &begin)
        if stamped is None:
            return None
        return begin, self._mqs[i], stamped, stamped._user[PROPERTY_UNIQ_KEY]

    def send(self, msg, int timeout):
        """The send's result, or None when this path does not take the message (the caller
        runs ``Producer.send``'s own path)."""
        cdef Py_ssize_t i = 0
        cdef double begin = 0
        cdef Message stamped = self._pick(msg, &i, &begin)
        if stamped is None:
            return None
        try:
            answer = self.lane(stamped, self._qids[i])
        except StoreClosedError as e:
            answer = e                                  # retried as a transport error
        uniq = stamped._user[PROPERTY_UNIQ_KEY]
        if type(answer) is self._stored_type:           # stored at once
            return self._result(self._send_ok, uniq, answer.msg_id, self._mqs[i],
                                answer.queue_offset, None)
        return self._answered(answer, stamped, uniq, self._mqs[i], begin, timeout)

    def send_async(self, msg):
        """``send_async``'s future (completed at once for a put stored at once), or None when
        this path does not take the message."""
        cdef Py_ssize_t i = 0
        cdef double begin = 0
        cdef Message stamped = self._pick(msg, &i, &begin)
        if stamped is None:
            return None
        try:
            answer = self.lane(stamped, self._qids[i])
        except StoreClosedError as e:
            answer = e                                  # retried as a transport error
        uniq = stamped._user[PROPERTY_UNIQ_KEY]
        if type(answer) is self._stored_type:           # stored at once
            return self._done_future(self._result(self._send_ok, uniq, answer.msg_id,
                                                  self._mqs[i], answer.queue_offset, None))
        return self._async_answered(answer, stamped, uniq, self._mqs[i], begin)

    def send_batch(self, msgs, int timeout):
        """``Producer.send_batch``'s result for a list of ``Message``s to no chosen queue,
        or None when this path does not take the batch (the caller runs the producer's own
        path, which names what is wrong). The producer's checks on the entries' faces
        (``batch_plain``), the next queue, the ids, then the lane; the result is built here
        when the batch was stored at once, every other answer goes to ``_batch_answered``."""
        cdef LaneCore lane = self.batch_lane
        cdef Py_ssize_t n, i, which
        cdef Message m, first
        cdef double begin
        cdef bytes ids
        cdef tuple batch
        cdef char *w
        cdef int64_t now
        cdef object idx
        if lane is None or type(msgs) is not list or not msgs:
            return None
        batch = tuple(msgs)             # what is checked is what is sent (other threads)
        n = len(batch)
        p = self.producer
        limit = p.max_message_size
        if type(limit) is not int:
            return None                 # (compared as Python objects on the full path)
        cdef Py_ssize_t max_size = limit
        topic = lane.topic
        if type(batch[0]) is not Message:
            return None
        first = <Message>batch[0]
        for i in range(n):
            if type(batch[i]) is not Message:
                return None
            m = <Message>batch[i]
            if (m._body_len == 0 or m._body_len > max_size or m._delayed
                    or m._no_wait != first._no_wait
                    or (m.topic is not topic and m.topic != topic)):
                return None
        begin = mono_s()
        if (begin >= self.expires or p.fault_strategy.send_latency_fault_enable
                or not self._one_broker or not self._mqs):
            return None
        idx = self._index
        which = ((<ThreadLocalIndex>idx).next_c() if type(idx) is ThreadLocalIndex
                 else idx.increment_and_get()) % len(self._mqs)
        # stamp_for_send's ids, made while the GIL is held (threads need no lock), in order
        ids = PyBytes_FromStringAndSize(NULL, 32 * n)
        w = PyBytes_AS_STRING(ids)
        now = now_ms()
        for i in range(n):
            if _needs_uniq(<Message>batch[i]):
                self._gen.next_into(w + 32 * i, now)
            else:
                memset(w + 32 * i, 0x30, 32)
        try:
            answer = lane._batch(batch, self._qids[which], w)
        except StoreClosedError as e:
            answer = e                                  # retried as a transport error
        mq = self._mqs[which]
        if answer is None:              # the lane's first batch, or not its shape
            return self._batch_full(batch, mq, begin, timeout)
        joined = _joined_ids(batch, w)
        if type(answer) is self._stored_type:           # stored at once
            return self._result(self._send_ok, joined, answer.msg_id, mq,
                                answer.queue_offset, None)
        return self._batch_answered(answer, batch, ids, joined, mq, begin, timeout)
