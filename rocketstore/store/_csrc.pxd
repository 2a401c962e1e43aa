# Every `cdef extern` of csrc/, and nothing else (uvloop's includes/ rule).
# Extern functions are noexcept: callers test the returned 0 / -errno themselves.
from libc.stdint cimport int32_t, uint32_t, int64_t, uint64_t


cdef extern from "rs_layout.h" nogil:
    enum:
        RS_MAGIC_V1
        RS_MAGIC_V2
        RS_BLANK_MAGIC
        RS_END_FILE_MIN_BLANK
        RS_TOTALSIZE_POS
        RS_MAGIC_POS
        RS_BODYCRC_POS
        RS_QUEUEID_POS
        RS_FLAG_POS
        RS_QUEUEOFFSET_POS
        RS_PHYOFFSET_POS
        RS_SYSFLAG_POS
        RS_BORNTIMESTAMP_POS
        RS_BORNHOST_POS
        RS_HOST_V4_LEN
        RS_HOST_V6_LEN
        RS_HOST_V6_EXTRA
        RS_STORETIMESTAMP_LEN
        RS_RECONSUME_LEN
        RS_PREPARED_TX_LEN
        RS_BODYLEN_LEN
        RS_TOPICLEN_V1_LEN
        RS_TOPICLEN_V2_LEN
        RS_PROPLEN_LEN
        RS_RECORD_FIXED_V1
        RS_SYSFLAG_COMPRESSED
        RS_SYSFLAG_MULTI_TAGS
        RS_SYSFLAG_TX_MASK
        RS_SYSFLAG_TX_NOT
        RS_SYSFLAG_TX_PREPARED
        RS_SYSFLAG_TX_COMMIT
        RS_SYSFLAG_TX_ROLLBACK
        RS_SYSFLAG_BORNHOST_V6
        RS_SYSFLAG_STOREHOST_V6
        RS_SYSFLAG_NEED_UNWRAP
        RS_SYSFLAG_INNER_BATCH
        RS_SYSFLAG_COMPRESS_TYPE
        RS_SYSFLAG_COMPRESS_LZ4
        RS_SYSFLAG_COMPRESS_ZSTD
        RS_SYSFLAG_COMPRESS_ZLIB
        RS_MAX_TOPIC_LEN_V1
        RS_MAX_TOPIC_LEN
        RS_MAX_PROPERTIES_LEN
        RS_MAX_RECORD_SLACK
        RS_NAME_VALUE_SEPARATOR
        RS_PROPERTY_SEPARATOR
        RS_CRC32_RESERVED_LEN
        RS_CRC32_NAME_LEN
        RS_MSGID_V4_BYTES
        RS_MSGID_V6_BYTES
        RS_UNIQ_ID_BYTES
        RS_OS_PAGE_SIZE
        RS_FILE_NAME_DIGITS
        RS_CQ_UNIT_SIZE
        RS_CQ_PHYOFFSET_POS
        RS_CQ_SIZE_POS
        RS_CQ_TAGS_POS
        RS_CQ_FILLER_SIZE
        RS_INDEX_HEADER_SIZE
        RS_INDEX_SLOT_SIZE
        RS_INDEX_ENTRY_SIZE
        RS_CHECKPOINT_SIZE


cdef extern from "rs_io.h" nogil:
    int rs_open(const char *path, int create, int readonly, int *fd_out)
    int rs_close(int fd)
    int rs_file_size(int fd, int64_t *size_out)
    int rs_allocate(int fd, int64_t size)
    int rs_truncate(int fd, int64_t size)
    int rs_allocate_range(int fd, int64_t offset, int64_t len)
    int rs_mmap(int fd, size_t size, int readonly, char **addr_out)
    int rs_munmap(char *addr, size_t size)
    int rs_madvise(char *addr, size_t size, int advice)
    int rs_populate_write(char *addr, size_t size)
    int rs_mlock(char *addr, size_t size)
    int rs_munlock(char *addr, size_t size)
    int rs_msync(char *addr, size_t size)
    int rs_fsync(int fd)
    int rs_fdatasync(int fd)
    int rs_fsync_dir(const char *dir_path)
    int rs_pwrite_all(int fd, const char *buf, size_t size, int64_t offset)
    uint64_t rs_touch_pages(char *addr, size_t size, size_t page_size, int write)
    int rs_alloc_aligned(size_t size, size_t align, char **out)
    void rs_free_aligned(char *p)


cdef extern from "rs_hash.h" nogil:
    int32_t rs_java_hash(const char *utf8, size_t len)
    int32_t rs_java_hash_update(int32_t h, const char *utf8, size_t len)
    uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len)
    int32_t rs_body_crc(const unsigned char *buf, size_t len)


# libc pieces the hot paths use directly (kept here with the rest of the externs)
cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    enum: CLOCK_REALTIME
    enum: CLOCK_MONOTONIC


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *c)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const timespec *abstime)
    int pthread_cond_signal(pthread_cond_t *c)
    int pthread_cond_broadcast(pthread_cond_t *c)
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_trylock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)


cdef extern from "rs_scan.h" nogil:
    enum:
        RS_CQ_SLOT_BITS
        RS_CQ_SLOTS
        RS_CQ_SLOT_SHIFTS
    uint64_t rs_load_u64(const unsigned char *p)
    uint32_t rs_load_u32(const unsigned char *p)
    uint64_t rs_be64_raw(uint64_t v)
    uint32_t rs_be32_raw(uint32_t v)
    int64_t rs_get_be64(const unsigned char *p)
    int32_t rs_get_be32(const unsigned char *p)
    bint rs_cq_size_special(uint32_t raw)
    uint32_t rs_cq_slot(uint64_t raw, uint32_t shift)
    uint32_t rs_cq_slot_shift(uint32_t k)


cdef extern from "rs_atomic.h" nogil:
    void rs_store_release(Py_ssize_t *p, Py_ssize_t v)
    Py_ssize_t rs_load_acquire(const Py_ssize_t *p)
    void rs_prefetch_write(const void *p)


# IPv6 host text for the column decoder (_columns)
cdef extern from "<arpa/inet.h>" nogil:
    const char *inet_ntop(int af, const void *src, char *dst, unsigned int size)
    enum: AF_INET6


cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef extern from "Python.h":
    # not in Cython's cpython/ includes (the completed send futures leave the collector)
    void PyObject_GC_UnTrack(void *op)
