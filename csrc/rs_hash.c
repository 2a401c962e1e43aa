/* rs_hash.c -- see rs_hash.h. */
#include "rs_hash.h"

#include <limits.h>
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

static uint32_t crc32_zlib(uint32_t crc, const unsigned char *buf, size_t len)
{
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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/*
 * CRC-32 by carry-less multiplication (Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", Intel, 2009): the message is folded 64 and then 16 bytes at a
 * time into one 16-byte block with the same CRC; a slicing-by-4 table loop finishes that block
 * and the tail.
 * zlib's table CRC costs ~3 cycles a byte on a 100-byte body -- the largest single cost of a
 * put -- folding about a fifth of that.
 *
 * Folding: for blocks A, B, ... (A first), A*x^d mod P == A.lo*K(d+32) ^ A.hi*K(d-32) in the
 * bit-reflected domain, where K(n) = reflect32(x^n mod P) << 1; xor-ing that into the block
 * d bits later leaves the CRC of the (shorter) message unchanged. zlib's pre-inversion of the
 * CRC register becomes an xor of ~crc into the first four bytes; the post-inversion cancels
 * against finishing the last block from a zero register and inverting (~raw(0, X) is zlib's
 * crc32(~0, X)).
 */
#define K_512_P32 0x154442bd4ULL    /* x^(512+32): fold by 64 bytes */
#define K_512_M32 0x1c6e41596ULL    /* x^(512-32) */
#define K_128_P32 0x1751997d0ULL    /* x^(128+32): fold by 16 bytes */
#define K_128_M32 0x0ccaa009eULL    /* x^(128-32) */

/* Slicing-by-4 tables of the reflected polynomial 0xEDB88320: T[0] is the byte-wise table,
 * T[k][i] the CRC of byte i followed by k zero bytes. Built once, on the first folded CRC. */
static uint32_t T[4][256];

static void build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        T[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 4; k++)
            T[k][i] = (T[k - 1][i] >> 8) ^ T[0][T[k - 1][i] & 0xFF];
}

/* the raw CRC register (no inversions) carried over `len` bytes */
static inline uint32_t slice4(uint32_t c, const unsigned char *p, size_t len)
{
    while (len >= 4) {
        c ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        c = T[3][c & 0xFF] ^ T[2][(c >> 8) & 0xFF] ^ T[1][(c >> 16) & 0xFF] ^ T[0][c >> 24];
        p += 4;
        len -= 4;
    }
    while (len--)
        c = T[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

__attribute__((target("pclmul,sse4.1")))
static inline __m128i fold16(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t crc, const unsigned char *p, size_t len)
{
    /* len >= 64 */
    const __m128i k64 = _mm_set_epi64x((long long)K_512_M32, (long long)K_512_P32);
    const __m128i k16 = _mm_set_epi64x((long long)K_128_M32, (long long)K_128_P32);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)~crc));
    p += 64;
    len -= 64;
    while (len >= 64) {
        x0 = _mm_xor_si128(fold16(x0, k64), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(fold16(x1, k64), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(fold16(x2, k64), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(fold16(x3, k64), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    x0 = _mm_xor_si128(fold16(x0, k16), x1);
    x0 = _mm_xor_si128(fold16(x0, k16), x2);
    x0 = _mm_xor_si128(fold16(x0, k16), x3);
    while (len >= 16) {
        x0 = _mm_xor_si128(fold16(x0, k16), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    unsigned char last[16];
    _mm_storeu_si128((__m128i *)last, x0);
    /* the folded block and the tail (< 16 bytes) from a zero register, four bytes a step;
     * ~0 of it is zlib's crc32(~0, last || tail), the message's CRC */
    uint32_t c = slice4(0, last, 16);
    return ~slice4(c, p, len);
}

static int have_clmul = -1;

uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    int clmul = __atomic_load_n(&have_clmul, __ATOMIC_ACQUIRE);
    if (clmul < 0) {        /* a benign race: every thread builds the same tables */
        build_tables();
        clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        __atomic_store_n(&have_clmul, clmul, __ATOMIC_RELEASE);     /* after the tables */
    }
    if (len < 64)           /* too short to fold: four bytes a step (zlib goes byte by byte) */
        return ~slice4(~crc, buf, len);
    return clmul ? crc32_clmul(crc, buf, len) : crc32_zlib(crc, buf, len);
}
#else
uint32_t rs_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    return crc32_zlib(crc, buf, len);
}
#endif

int32_t rs_body_crc(const unsigned char *buf, size_t len)
{
    return (int32_t)(rs_crc32(0, buf, len) & 0x7FFFFFFFu);
}
