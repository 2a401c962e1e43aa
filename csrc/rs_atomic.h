/*
 * rs_atomic.h -- publication of positions between threads that do not share the GIL, and a
 * prefetch hint for the dispatcher's random index-slot writes.
 *
 * A writer fills bytes, then publishes their end with a release store; a reader loads the
 * position with an acquire load and may then read every byte below it. On x86 both are plain
 * moves; the point is to stop the compiler (and weaker CPUs) from reordering them.
 */
#ifndef RS_ATOMIC_H
#define RS_ATOMIC_H

#include <sys/types.h>

static inline void rs_store_release(ssize_t *p, ssize_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline ssize_t rs_load_acquire(const ssize_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Ask for the cache line at p ahead of a write (index slots are random in a 20 MB table). */
static inline void rs_prefetch_write(const void *p)
{
    __builtin_prefetch(p, 1, 3);
}

#endif /* RS_ATOMIC_H */
