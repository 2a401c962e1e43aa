/* rs_hash.c -- see rs_hash.h. */
#include "rs_hash.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <zlib.h>

int32_t rs_java_hash_update(int32_t h0, const char *utf8, size_t len)
{
    /* unsigned arithmetic: Java int overflow wraps, C signed overflow is undefined */
    uint32_t h = (uint32_t)h0;
    const unsigned char *s = (const unsigned char *)utf8;
    size_t i = 0;
    while (i < len) {
        /* four ASCII bytes at a time: h*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3 breaks the
         * one-multiply-per-char dependency chain (keys and tags are mostly ASCII) */
        while (i + 4 <= len && ((s[i] | s[i + 1] | s[i + 2] | s[i + 3]) & 0x80) == 0) {
            h = h * 923521u + (uint32_t)s[i] * 29791u + (uint32_t)s[i + 1] * 961u
                + (uint32_t)s[i + 2] * 31u + (uint32_t)s[i + 3];
            i += 4;
        }
        if (i >= len) break;
        uint32_t c = s[i];
        if (c < 0x80) {                         /* ASCII: the common case */
            h = 31u * h + c;
            i += 1;
            continue;
        }
        uint32_t cp;
        size_t need;
        if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; need = 1; }
        else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; need = 2; }
        else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; need = 3; }
        else { h = 31u * h + 0xFFFDu; i += 1; continue; }
        if (i + need >= len) {                  /* truncated sequence */
            h = 31u * h + 0xFFFDu; i += 1; continue;
        }
        int bad = 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) { bad = 1; break; }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (bad) { h = 31u * h + 0xFFFDu; i += 1; continue; }
        i += need + 1;
        if (cp >= 0x10000) {                    /* surrogate pair, high unit first */
            cp -= 0x10000;
            h = 31u * h + (0xD800u + (cp >> 10));
            h = 31u * h + (0xDC00u + (cp & 0x3FF));
        } else {
            h = 31u * h + cp;
        }
    }
    return (int32_t)h;
}

int32_t rs_java_hash(const char *utf8, size_t len)
{
    return rs_java_hash_update(0, utf8, len);
}

/* Slice-by-8 CRC-32 (reflected polynomial 0xEDB88320) for short inputs: zlib's braided
 * crc32 handles buffers below a few hundred bytes one byte per table step, and records
 * (a header, a 100-byte body, properties) are that short. Eight tables of 256 entries,
 * built once; table k maps a byte to its CRC contribution k bytes further on. */
#define RS_CRC_SHORT 512

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_tab[k][n] = crc_tab[0][crc_tab[k - 1][n] & 0xFF] ^ (crc_tab[k - 1][n] >> 8);
}

static uint32_t crc32_short(uint32_t crc, const unsigned char *p, size_t len)
{
    uint32_t c = ~crc;
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);                      /* little-endian loads (x86, arm64) */
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc_tab[7][lo & 0xFF] ^ crc_tab[6][(lo >> 8) & 0xFF]
          ^ crc_tab[5][(lo >> 16) & 0xFF] ^ crc_tab[4][lo >> 24]
          ^ crc_tab[3][hi & 0xFF] ^ crc_tab[2][(hi >> 8) & 0xFF]
          ^ crc_tab[1][(hi >> 16) & 0xFF] ^ crc_tab[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    if (len < RS_CRC_SHORT) {
        pthread_once(&crc_once, crc_tables);
        return crc32_short(crc, buf, len);
    }
    /* zlib takes uInt lengths: feed in chunks so bodies over 4 GiB stay correct */
    uLong c = (uLong)crc;
    while (len > 0) {
        uInt n = len > (size_t)UINT_MAX ? UINT_MAX : (uInt)len;
        c = crc32(c, buf, n);
        buf += n;
        len -= n;
    }
    return (uint32_t)c;
}

int32_t rs_body_crc(const unsigned char *buf, size_t len)
{
    return (int32_t)(rs_crc32(0, buf, len) & 0x7FFFFFFFu);
}
