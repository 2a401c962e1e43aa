# The in-process pull lane's broker step (``rocketstore.broker.pull_lane.PullLane``), in C.
#
# A push consumer pulls one queue after another of the same (group, topic). 4.9.8's checks of a
# pull (broker readable, the group's config, the topic's config and queue range, the group's
# message model and subscription) depend only on objects that are replaced whole when they
# change: the settings, the group's and the topic's configs, the group's registration and its
# subscription. A full pull (``PullMessageProcessor.check``) passes with them once; while the
# managers still hold those very objects and the registration keeps its message model, a pull
# is one store read, the offset commit and the pull counter. Anything else -- another answer
# than FOUND, a changed object, a pull carrying its own subscription -- is the full path's
# (the lane answers None and the consumer sends its request as before).

from rocketstore.store._codec cimport MessageExt

cdef object _FOUND = None           # GetMessageStatus.FOUND (set by the first lane)


@cython.final
cdef class PullFound:
    """A pull the lane answered from the store: the messages (handed out to a consumer:
    their ``msg_id`` is the UNIQ_KEY) and the offsets a SUCCESS response carries."""
    cdef readonly int64_t next_begin_offset
    cdef readonly int64_t min_offset
    cdef readonly int64_t max_offset
    cdef readonly list messages


cdef class PullLaneCore:
    """The fast part of ``PullLane.pull`` (the Python subclass supplies ``_warm``, which makes
    the full checks and sets the state through ``_keep``)."""
    cdef readonly str group
    cdef readonly str topic
    cdef object _broker             # its ``config`` and ``_closed`` are read per pull
    cdef object _groups             # SubscriptionGroupManager (its ``_table``)
    cdef object _topics             # TopicTable (its ``_table``)
    cdef object _consumers          # ConsumerManager (its ``_table``)
    cdef object _store              # MessageStore: ``_closed``, ``_read_forbidden``, ``_limits``
    cdef object _queues             # ConsumeQueueStore's ``_queues`` (topic -> {queue id: cq})
    cdef object _clq                # the commit log's MappedFileQueue
    cdef object _get                # _reader.get_message
    cdef object _commit             # ConsumerOffsetManager.commit_checked
    cdef object _key                # the offset table's key of (group, topic)
    cdef PutCounter _counter        # None: the broker keeps no metrics
    # what the last full check passed with (None: none yet)
    cdef object _cfg
    cdef object _sgc
    cdef object _tc
    cdef object _info
    cdef object _model
    cdef object _sub
    cdef str _expr                  # the subscription's expression as registered
    cdef object _filter
    cdef int _bound
    cdef int64_t _sub_version

    def __init__(self, str group not None, str topic not None, broker, groups, topics,
                 consumers, store, queues, clq, get, commit, key, PutCounter counter, found):
        global _FOUND
        _FOUND = found
        self.group = group
        self.topic = topic
        self._broker = broker
        self._groups = groups
        self._topics = topics
        self._consumers = consumers
        self._store = store
        self._queues = queues
        self._clq = clq
        self._get = get
        self._commit = commit
        self._key = key
        self._counter = counter
        self._cfg = None

    def _keep(self, cfg, sgc, tc, info, model, sub, tag_filter, int bound,
              int64_t sub_version, PutCounter counter):
        """Remember what a full check passed with, and the pull counter of the pair now
        (a deleted topic's counters are dropped: a re-created one counts afresh)."""
        self._counter = counter
        self._cfg = cfg
        self._sgc = sgc
        self._tc = tc
        self._info = info
        self._model = model
        self._sub = sub
        self._expr = sub.sub_string
        self._filter = tag_filter
        self._bound = bound
        self._sub_version = sub_version

    cdef bint _valid(self):
        cdef object info
        if self._cfg is None or self._broker.config is not self._cfg:
            return False
        if self._groups._table.get(self.group) is not self._sgc:
            return False
        if self._topics._table.get(self.topic) is not self._tc:
            return False
        info = self._consumers._table.get(self.group)
        if info is not self._info or info.message_model is not self._model:
            return False
        return info.subscription_table.get(self.topic) is self._sub

    def pull(self, int64_t queue_id, int64_t offset, int64_t max_nums, int64_t sys_flag,
             int64_t commit_offset, int64_t sub_version, bint client=True, bint count=True,
             str expr=None):
        """A pull of ``queue_id`` from ``offset`` answered from the store: a ``PullFound``
        when messages were found (the commit flag's offset committed, the pull counted), else
        None (nothing done: the full path answers). Every argument is a Java long as a
        request carries it; ``client``: the messages are handed to a consumer in process
        (``msg_id`` is the UNIQ_KEY); ``count``: False when the caller's own future is
        counted (a held pull answered by the hold service); ``expr``: the expression a pull
        carrying its own subscription (flag 0x4) filters by, answered only when it is the
        registered one (then the kept filter is the request's)."""
        cdef object per, cq, r, forbidden, store = self._store
        cdef list msgs
        cdef MessageExt m
        cdef PullFound out
        cdef PutCounter c
        if not self._valid():
            if not self._warm() or not self._valid():
                return None
        if (queue_id < 0 or queue_id >= self._bound
                or (sys_flag & 0x4 and (expr is None or expr != self._expr))
                or sub_version > self._sub_version or commit_offset < 0
                or max_nums > 0x7FFFFFFF):
            return None
        if store._closed or self._broker._closed:
            return None
        forbidden = store._read_forbidden
        if forbidden and self.topic in forbidden:
            return None
        per = self._queues.get(self.topic)
        cq = None if per is None else per.get(queue_id)
        if cq is None:
            return None
        r = self._get(cq, self._clq, offset, max_nums if max_nums > 0 else 1, 0, self._filter,
                      store._limits, self._clq.get_max_offset(), False)
        if r.status is not _FOUND:
            return None
        msgs = r.messages
        if client:
            for m in msgs:
                m._client = True
        if sys_flag & 0x1:
            self._commit(self._key, queue_id, commit_offset)
        c = self._counter
        if c is not None and count:
            c.msgs += len(msgs)
            for m in msgs:
                c.size += m.store_size
        out = PullFound.__new__(PullFound)
        out.next_begin_offset = r.next_begin_offset
        out.min_offset = r.min_offset
        out.max_offset = r.max_offset
        out.messages = msgs
        return out
