#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "crc32.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>

/* zlib's table-driven crc32: the reference and the fallback. */
static uint32_t crc32_zlib(uint32_t crc, const uint8_t *p, size_t len) {
    uLong c = crc;
    while (len > 0) {
        uInt n = len > (size_t)UINT_MAX ? UINT_MAX : (uInt)len;
        c = crc32(c, p, n);
        p += n;
        len -= n;
    }
    return (uint32_t)c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* CRC-32 (reflected polynomial 0xEDB88320) by carry-less multiplication:
 * fold 64 bytes at a time into four 128-bit lanes, fold the lanes into one,
 * reduce 128 -> 64 -> 32 bits, finish with a Barrett reduction. The
 * constants are x^k mod P(x) for the fold distances (bit-reflected, as in
 * Intel's paper "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ"): k1 = x^(4*128+32), k2 = x^(4*128-32), k3 = x^(128+32),
 * k4 = x^(128-32), k5 = x^64, and P' and mu for Barrett.
 * Operates on the raw register (pre-inverted crc); len >= 64, len % 16 == 0. */
__attribute__((target("pclmul,sse4.1"))) static inline uint32_t crc32_clmul_impl(
    uint32_t crc, const uint8_t *buf, size_t len, uint8_t *dst) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 0));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 48));
    if (dst) {
        _mm_storeu_si128((__m128i *)(void *)(dst + 0), x1);
        _mm_storeu_si128((__m128i *)(void *)(dst + 16), x2);
        _mm_storeu_si128((__m128i *)(void *)(dst + 32), x3);
        _mm_storeu_si128((__m128i *)(void *)(dst + 48), x4);
        dst += 64;
    }
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    buf += 64;
    len -= 64;
    while (len >= 64) {
        __m128i y1 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 0));
        __m128i y2 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 16));
        __m128i y3 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 32));
        __m128i y4 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 48));
        if (dst) {
            _mm_storeu_si128((__m128i *)(void *)(dst + 0), y1);
            _mm_storeu_si128((__m128i *)(void *)(dst + 16), y2);
            _mm_storeu_si128((__m128i *)(void *)(dst + 32), y3);
            _mm_storeu_si128((__m128i *)(void *)(dst + 48), y4);
            dst += 64;
        }
        __m128i t1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i t2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i t3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i t4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, t1), y1);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, t2), y2);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, t3), y3);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, t4), y4);
        buf += 64;
        len -= 64;
    }
    /* Four lanes into one. */
    __m128i t = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), t), x2);
    t = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), t), x3);
    t = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), t), x4);
    while (len >= 16) {
        __m128i y = _mm_loadu_si128((const __m128i *)(const void *)buf);
        if (dst) {
            _mm_storeu_si128((__m128i *)(void *)dst, y);
            dst += 16;
        }
        t = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), t), y);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits. */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    /* 64 -> 32 bits. */
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k5k0, 0x00), x2);
    /* Barrett reduction. */
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t crc,
                                                                     const uint8_t *buf,
                                                                     size_t len) {
    return crc32_clmul_impl(crc, buf, len, NULL);
}

__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul_copy(uint32_t crc,
                                                                          const uint8_t *buf,
                                                                          size_t len,
                                                                          uint8_t *dst) {
    return crc32_clmul_impl(crc, buf, len, dst);
}

static int have_clmul(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

uint32_t rmq_crc32(const void *buf, size_t len) {
    const uint8_t *p = (const uint8_t *)buf;
    if (len >= 64 && have_clmul()) {
        size_t n = len & ~(size_t)15;
        uint32_t c = ~crc32_clmul(0xFFFFFFFFu, p, n);
        return crc32_zlib(c, p + n, len - n);
    }
    return crc32_zlib(0, p, len);
}

uint32_t rmq_crc32_copy(void *dst, const void *src, size_t len) {
    const uint8_t *p = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    if (len >= 64 && have_clmul()) {
        size_t n = len & ~(size_t)15;
        uint32_t c = ~crc32_clmul_copy(0xFFFFFFFFu, p, n, d);
        if (len > n) memcpy(d + n, p + n, len - n);
        return crc32_zlib(c, p + n, len - n);
    }
    if (len) memcpy(d, p, len);
    return crc32_zlib(0, p, len);
}

#else

uint32_t rmq_crc32(const void *buf, size_t len) {
    return crc32_zlib(0, (const uint8_t *)buf, len);
}

uint32_t rmq_crc32_copy(void *dst, const void *src, size_t len) {
    if (len) memcpy(dst, src, len);
    return crc32_zlib(0, (const uint8_t *)src, len);
}

#endif
