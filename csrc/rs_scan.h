/*
 * rs_scan.h -- byte-order helpers for the consume-queue scans (rocketstore/store/_scan.pyx).
 *
 * A consume-queue unit is 20 big-endian bytes (docs/format.md §5.1, rs_layout.h):
 *   phy offset int64 @0 | size int32 @8 | tags code int64 @RS_CQ_TAGS_POS (12)
 * Units sit at 20-byte strides, so every field load is unaligned: the loads below go through
 * memcpy, which gcc and clang turn into one plain mov (x86-64 and arm64 allow unaligned loads).
 *
 * The scans never swap a unit. A wanted tags code is converted once to its "raw" form -- the
 * native-endian value of its 8 stored bytes -- and compared with raw loads of each unit.
 * The same holds for the size: 0 (end of data) is 0 in either order, and the filler size is
 * compared against RS_CQ_FILLER_SIZE converted once. A set of codes lives in a table of
 * RS_CQ_SLOTS raw words indexed by RS_CQ_SLOT_BITS bits of the raw code (rs_cq_slot), the
 * window chosen per set so that no two of its codes share a slot.
 *
 * Header-only (static inline), no state, no Python.h.
 */
#ifndef RS_SCAN_H
#define RS_SCAN_H

#include <stdint.h>
#include <string.h>

#include "rs_layout.h"

/* Slot table of the set scans: 2^9 uint64 slots (4 KiB, stays in L1 beside the stream). */
#define RS_CQ_SLOT_BITS         9
#define RS_CQ_SLOTS             (1u << RS_CQ_SLOT_BITS)
#define RS_CQ_SLOT_SHIFTS       56            /* window positions tried: 64 - RS_CQ_SLOT_BITS + 1 */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define RS_SCAN_BIG_ENDIAN 1
#else
#define RS_SCAN_BIG_ENDIAN 0
#endif

static inline uint64_t rs_load_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t rs_load_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Raw (stored-order, natively loaded) form of a big-endian 64/32-bit value, and back: the
 * same swap both ways; gcc emits bswap (or movbe when the load is folded in). */
static inline uint64_t rs_be64_raw(uint64_t v)
{
#if RS_SCAN_BIG_ENDIAN
    return v;
#else
    return __builtin_bswap64(v);
#endif
}

static inline uint32_t rs_be32_raw(uint32_t v)
{
#if RS_SCAN_BIG_ENDIAN
    return v;
#else
    return __builtin_bswap32(v);
#endif
}

/* Decoded big-endian fields at p. */
static inline int64_t rs_get_be64(const unsigned char *p)
{
    return (int64_t)rs_be64_raw(rs_load_u64(p));
}

static inline int32_t rs_get_be32(const unsigned char *p)
{
    return (int32_t)rs_be32_raw(rs_load_u32(p));
}

/* Nonzero when a raw size is 0 (end of data) or RS_CQ_FILLER_SIZE, and also for the raw
 * values above the filler's (negative sizes: corrupt units), in one add and one compare:
 * raw + (2^32 - filler_raw) wraps below 2^32 - filler_raw exactly when raw >= filler_raw,
 * and raw 0 lands on it. Callers treat a unit so flagged exactly, one field at a time.
 * (Little-endian: filler_raw = 0xFFFFFF7F, the constant is 0x81.) */
static inline int rs_cq_size_special(uint32_t raw)
{
    const uint32_t neg = (uint32_t)0 - rs_be32_raw(RS_CQ_FILLER_SIZE);
    return (uint32_t)(raw + neg) <= neg;
}

/* Slot of a raw tags code: RS_CQ_SLOT_BITS bits of it from bit `shift` on. */
static inline uint32_t rs_cq_slot(uint64_t raw, uint32_t shift)
{
    return (uint32_t)(raw >> shift) & (RS_CQ_SLOTS - 1);
}

/* The k-th window (0 <= k < RS_CQ_SLOT_SHIFTS) a matcher tries, best spread first: a Java
 * hashCode's low bits mix best and its high 32 bits are only the sign extension. On a
 * little-endian host the value's low byte is the raw word's top byte, so k = 0 takes the
 * value's bits 0-7 and 15; later windows walk towards its high bits. */
static inline uint32_t rs_cq_slot_shift(uint32_t k)
{
#if RS_SCAN_BIG_ENDIAN
    return k;
#else
    return 64 - RS_CQ_SLOT_BITS - k;
#endif
}

#endif /* RS_SCAN_H */
