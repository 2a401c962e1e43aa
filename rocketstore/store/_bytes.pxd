# Big-endian loads and stores of the on-disk integers (RocketMQ writes Java's byte order).
# Inline, shared by every compiled module that touches records, units or index entries;
# gcc folds the shifts into bswap/movbe.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uint8_t


cdef inline void put_u16(char *p, uint32_t v) noexcept nogil:
    p[0] = <char>(v >> 8)
    p[1] = <char>v


cdef inline void put_u32(char *p, uint32_t v) noexcept nogil:
    p[0] = <char>(v >> 24)
    p[1] = <char>(v >> 16)
    p[2] = <char>(v >> 8)
    p[3] = <char>v


cdef inline void put_u64(char *p, uint64_t v) noexcept nogil:
    put_u32(p, <uint32_t>(v >> 32))
    put_u32(p + 4, <uint32_t>v)


cdef inline uint32_t get_u16(const char *p) noexcept nogil:
    cdef const uint8_t *u = <const uint8_t *>p
    return (<uint32_t>u[0] << 8) | u[1]


cdef inline uint32_t get_u32(const char *p) noexcept nogil:
    cdef const uint8_t *u = <const uint8_t *>p
    return (<uint32_t>u[0] << 24) | (<uint32_t>u[1] << 16) | (<uint32_t>u[2] << 8) | u[3]


cdef inline uint64_t get_u64(const char *p) noexcept nogil:
    return (<uint64_t>get_u32(p) << 32) | get_u32(p + 4)


cdef inline int32_t get_i32(const char *p) noexcept nogil:
    return <int32_t>get_u32(p)


cdef inline int64_t get_i64(const char *p) noexcept nogil:
    return <int64_t>get_u64(p)
