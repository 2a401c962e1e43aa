/*
 * rs_atomic.h -- publication of positions between threads that do not share the GIL.
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

#endif /* RS_ATOMIC_H */
