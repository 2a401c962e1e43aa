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

/* CRC-32 (reflected polynomial 0xEDB88320) without zlib's per-call cost: zlib's braided
 * crc32 steps one byte at a time below a few hundred bytes, and records (a header, a
 * 100-byte body, properties) are that short. Carry-less multiplication folding where the
 * CPU has it (x86-64 PCLMULQDQ), else slice-by-8 tables below RS_CRC_SHORT bytes and zlib
 * above. Eight tables of 256 entries, built once; table k maps a byte to its CRC
 * contribution k bytes further on. */
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

/* table steps over the CRC register (pre- and post-inversion are the caller's) */
static uint32_t crc_reg_tables(uint32_t c, const unsigned char *p, size_t len)
{
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
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RS_HAVE_CLMUL 1
static int crc_clmul_ok;

/* Carry-less multiplication folding (Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", Intel 2009) for the reflected IEEE polynomial: four 128-bit
 * lanes folded 64 bytes at a time, then to one lane, then a Barrett reduction to 32 bits.
 * The constants are x^(k) mod P(x) for the fold distances, P(x) and floor(x^64 / P(x)).
 * Takes and returns the CRC register; consumes len & ~15 bytes (len >= 64); *used says how
 * many. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_reg_clmul(uint32_t c, const unsigned char *buf, size_t len, size_t *used)
{
    const __m128i k1k2 = _mm_set_epi32(0x00000001, 0xc6e41596, 0x00000001, 0x54442bd4);
    const __m128i k3k4 = _mm_set_epi32(0x00000000, 0xccaa009e, 0x00000001, 0x751997d0);
    const __m128i k5k0 = _mm_set_epi32(0x00000000, 0x00000000, 0x00000001, 0x63cd6124);
    const __m128i poly = _mm_set_epi32(0x00000001, 0xf7011641, 0x00000001, 0xdb710641);
    const unsigned char *start = buf;
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 16));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 32));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 48)));
        buf += 64;
        len -= 64;
    }
    /* four lanes into one */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    *used = (size_t)(buf - start);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static void crc_init(void)
{
    crc_tables();
#ifdef RS_HAVE_CLMUL
    __builtin_cpu_init();
    crc_clmul_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

static uint32_t crc32_short(uint32_t crc, const unsigned char *p, size_t len)
{
    uint32_t c = ~crc;
#ifdef RS_HAVE_CLMUL
    if (len >= 64 && crc_clmul_ok) {
        size_t used;
        c = crc_reg_clmul(c, p, len, &used);
        p += used;
        len -= used;
    }
#endif
    return ~crc_reg_tables(c, p, len);
}

uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
#ifdef RS_HAVE_CLMUL
    if (crc_clmul_ok)
        return crc32_short(crc, buf, len);
#endif
    if (len < RS_CRC_SHORT)
        return crc32_short(crc, buf, len);
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
