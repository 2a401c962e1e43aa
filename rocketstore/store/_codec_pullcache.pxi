# A concurrent push consumer's cache of one queue (rocketstore.client.process_queue
# .ConcurrentProcessQueue), included by _codec.pyx.
#
# RocketMQ keeps a TreeMap of offset -> message and commits its first key. Here a cache is a
# run of pulls: each pull's offsets and body sizes, ascending, with one flag per message
# (finished or not) in C arrays; the messages themselves are held by their consume jobs. A
# pull goes in as one entry (no Python object per message), a finished message is found by
# its offset (the entry by binary search, the index by arithmetic when the pull's offsets
# are dense), and the offset to commit is the head entry's first unfinished message once
# finished entries are dropped from the head: amortised O(1).
#
# Pulls normally ascend (each starts where the previous ended). One that does not (an offset
# reset while messages are still cached) keeps only its offsets not already cached and marks
# the cache ``mixed``: entries may then overlap or be out of order, and first/last are
# found over every entry, until the cache is empty again.

from libc.stdlib cimport malloc, free


@cython.final
cdef class _Pulled:
    """One put's messages (ascending queue offsets): their offsets and body sizes, and which
    are finished. No reference to a message is kept: a finished one is freed as soon as its
    listener call lets go of it, even while an earlier one holds the commit offset back."""
    cdef Py_ssize_t n
    cdef Py_ssize_t left            # messages not finished
    cdef Py_ssize_t lo              # every message before index lo is finished
    cdef Py_ssize_t hi              # one past the last unfinished message
    cdef bint dense                 # offsets are offs[0] .. offs[0] + n - 1
    cdef int64_t *offs
    cdef int64_t *sizes
    cdef unsigned char *gone

    def __dealloc__(self):
        free(self.offs)             # one block: offs, sizes, gone

    cdef Py_ssize_t index_of(self, int64_t off) noexcept:
        """The index of ``off`` in this pull, or -1."""
        cdef Py_ssize_t a = 0, b = self.n - 1, mid
        if off < self.offs[0] or off > self.offs[self.n - 1]:
            return -1
        if self.dense:
            return <Py_ssize_t>(off - self.offs[0])
        while a <= b:
            mid = (a + b) >> 1
            if self.offs[mid] < off:
                a = mid + 1
            elif self.offs[mid] > off:
                b = mid - 1
            else:
                return mid
        return -1

    cdef int64_t first_left(self) noexcept:
        while self.lo < self.n and self.gone[self.lo]:
            self.lo += 1
        return self.offs[self.lo] if self.lo < self.n else -1

    cdef int64_t last_left(self) noexcept:
        while self.hi > 0 and self.gone[self.hi - 1]:
            self.hi -= 1
        return self.offs[self.hi - 1] if self.hi > 0 else -1


cdef int64_t _offset_of(object m) except? -1:
    if type(m) is MessageExt:
        return (<MessageExt>m).queue_offset
    return m.queue_offset


cdef int64_t _size_of(object m) except? -1:
    if type(m) is MessageExt:
        return (<MessageExt>m)._body_len
    return m.body_size


@cython.final
@cython.boundscheck(False)      # every index is within the list by construction
@cython.wraparound(False)
cdef class PullCache:
    """The messages of one queue pulled and not yet finished, in the order of their queue
    offsets (see the comment at the top of ``_codec_pullcache.pxi``). Each method is one C
    call that holds the GIL throughout for ``MessageExt`` entries (their offsets and sizes
    are read in C): threads need no lock around it."""
    cdef list _pulls                # _Pulled, from index _start on
    cdef Py_ssize_t _start
    cdef bint _mixed
    cdef _Pulled _hint              # the pull the last lookup found
    cdef readonly Py_ssize_t count
    cdef readonly int64_t size
    cdef readonly int64_t top_put   # the last offset of the largest put (RocketMQ's
                                    # queueOffsetMax), 0 before any and after ``clear``
    cdef int64_t _top               # the largest offset put since the cache was last empty

    def __cinit__(self):
        self._pulls = []
        self._start = 0
        self._mixed = False
        self.count = 0
        self.size = 0
        self.top_put = 0
        self._top = -1

    cdef _Pulled _live(self, int64_t off, Py_ssize_t *at):
        """The pull holding ``off`` unfinished (its index in ``at``), or None."""
        cdef _Pulled p = self._hint
        cdef Py_ssize_t a, b, mid, i, k
        if p is not None:
            i = p.index_of(off)
            if i >= 0 and not p.gone[i]:
                at[0] = i
                return p
        if self._mixed:
            # entries may overlap: an offset finished in one may be cached again in another
            for k in range(self._start, len(self._pulls)):
                p = <_Pulled>self._pulls[k]
                if p.left:
                    i = p.index_of(off)
                    if i >= 0 and not p.gone[i]:
                        self._hint = p
                        at[0] = i
                        return p
            return None
        a = self._start
        b = len(self._pulls) - 1
        while a <= b:
            mid = (a + b) >> 1
            p = <_Pulled>self._pulls[mid]
            if p.offs[p.n - 1] < off:
                a = mid + 1
            elif p.offs[0] > off:
                b = mid - 1
            else:
                i = p.index_of(off)
                if i < 0 or p.gone[i]:
                    return None
                self._hint = p
                at[0] = i
                return p
        return None

    def put(self, list msgs not None):
        """Cache a pull's messages; offsets already cached are skipped. Returns
        ``(added, their body bytes)``."""
        cdef Py_ssize_t n = len(msgs), i, k
        cdef int64_t off, prev = self._top, added_size = 0
        cdef bint ascending = True
        cdef list keep
        if n == 0:
            return 0, 0
        off = _offset_of(msgs[n - 1])
        if off > self.top_put:
            self.top_put = off
        for i in range(n):
            off = _offset_of(msgs[i])
            if off <= prev:
                ascending = False
                break
            prev = off
        if ascending:
            keep = msgs
        else:
            # below what is cached (a reset): only the offsets not cached, sorted, once each
            seen = set()
            keep = []
            for m in sorted(msgs, key=_offset_of):
                off = _offset_of(m)
                if off in seen or self._live(off, &k) is not None:
                    continue
                seen.add(off)
                keep.append(m)
            n = len(keep)
            if n == 0:
                return 0, 0
            if self.count:
                self._mixed = True
        cdef _Pulled p = _Pulled.__new__(_Pulled)
        cdef char *block = <char *>malloc(n * (2 * sizeof(int64_t) + 1))
        if block == NULL:
            raise MemoryError()
        p.offs = <int64_t *>block
        p.sizes = <int64_t *>(block + n * sizeof(int64_t))
        p.gone = <unsigned char *>(block + 2 * n * sizeof(int64_t))
        p.n = n
        for k in range(n):
            m = keep[k]
            p.offs[k] = _offset_of(m)
            p.sizes[k] = _size_of(m)
            p.gone[k] = 0
            added_size += p.sizes[k]
        p.left = n
        p.lo = 0
        p.hi = n
        p.dense = p.offs[n - 1] - p.offs[0] == n - 1
        if p.offs[n - 1] > self._top:
            self._top = p.offs[n - 1]
        self._pulls.append(p)
        self.count += n
        self.size += added_size
        return n, added_size

    cdef Py_ssize_t _remove(self, object msgs, int64_t *size_out) except -1:
        """Mark ``msgs`` finished: how many were cached (their body bytes in ``size_out``)."""
        cdef Py_ssize_t removed = 0, i, j, n
        cdef int64_t size = 0
        cdef _Pulled p
        cdef list lst
        if type(msgs) is list:          # the consume service's own lists: no iterator
            lst = <list>msgs
            n = len(lst)
            for j in range(n):
                p = self._live(_offset_of(lst[j]), &i)
                if p is not None:
                    p.gone[i] = 1
                    p.left -= 1
                    removed += 1
                    size += p.sizes[i]
        else:
            for m in msgs:
                p = self._live(_offset_of(m), &i)
                if p is not None:
                    p.gone[i] = 1
                    p.left -= 1
                    removed += 1
                    size += p.sizes[i]
        self.count -= removed
        self.size -= size
        if self.count == 0:
            self._reset()
        else:
            self._drop_finished_head()
        size_out[0] = size
        return removed

    def finish(self, msgs):
        """Mark ``msgs`` finished (offsets not cached are skipped), then the offset to commit: the smallest offset still cached, or
        ``top_put + 1`` when none is; -1 (nothing done) when nothing was cached."""
        cdef int64_t first, size
        if self.count == 0:
            return -1
        self._remove(msgs, &size)
        first = self._first()
        return first if first >= 0 else self.top_put + 1

    def span(self):
        """The largest cached offset minus the smallest, 0 when nothing is cached."""
        cdef int64_t first = self._first()
        return 0 if first < 0 else self._last() - first

    cdef void _reset(self):
        # the old entries are released on return, when the state is whole again (nothing
        # a release runs can see it half reset)
        cdef list old = self._pulls
        cdef object hint = self._hint
        self._pulls = []
        self._start = 0
        self._mixed = False
        self._hint = None
        self._top = -1

    cdef void _drop_finished_head(self):
        cdef Py_ssize_t n = len(self._pulls)
        while self._start < n and (<_Pulled>self._pulls[self._start]).left == 0:
            if self._pulls[self._start] is self._hint:
                self._hint = None
            self._pulls[self._start] = None
            self._start += 1
        if self._start > 32 and self._start * 2 > n:
            self._pulls = self._pulls[self._start:]
            self._start = 0

    cdef int64_t _first(self):
        """The smallest cached offset, or -1 when nothing is cached."""
        cdef _Pulled p
        cdef int64_t best = -1, off
        cdef Py_ssize_t i
        if self.count == 0:
            return -1
        if not self._mixed:
            return (<_Pulled>self._pulls[self._start]).first_left()
        for i in range(self._start, len(self._pulls)):
            p = <_Pulled>self._pulls[i]
            if p.left:
                off = p.first_left()
                if best < 0 or off < best:
                    best = off
        return best

    cdef int64_t _last(self):
        """The largest cached offset, or -1 when nothing is cached."""
        cdef _Pulled p
        cdef int64_t best = -1, off
        cdef Py_ssize_t i
        if self.count == 0:
            return -1
        if not self._mixed:
            while (<_Pulled>self._pulls[len(self._pulls) - 1]).left == 0:
                if self._pulls[len(self._pulls) - 1] is self._hint:
                    self._hint = None
                self._pulls.pop()
            return (<_Pulled>self._pulls[len(self._pulls) - 1]).last_left()
        for i in range(self._start, len(self._pulls)):
            p = <_Pulled>self._pulls[i]
            if p.left:
                off = p.last_left()
                if off > best:
                    best = off
        return best

    def offsets(self):
        """Every cached offset, smallest first."""
        cdef list out = []
        cdef _Pulled p
        cdef Py_ssize_t i, k
        for i in range(self._start, len(self._pulls)):
            p = <_Pulled>self._pulls[i]
            for k in range(p.n):
                if not p.gone[k]:
                    out.append(p.offs[k])
        if self._mixed:
            out.sort()
        return out

    def clear(self):
        self.count = 0
        self.size = 0
        self.top_put = 0
        self._reset()
