/* java_hash.h: Java's String.hashCode() over UTF-8 input, as RocketMQ uses it
 * for ConsumeQueue tag codes and IndexFile key hashes: h = 31*h + c over the
 * string's UTF-16 code units (code points above U+FFFF become surrogate
 * pairs), wrapped to int32. Invalid UTF-8 bytes count as U+FFFD, as Java's
 * decoder replaces them. Pure, thread-safe. */
#ifndef RMQ_JAVA_HASH_H
#define RMQ_JAVA_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 31^k mod 2^32, for eight ASCII bytes in one step: their products do not
 * wait on each other as the byte-at-a-time chain does. */
#define RMQ_JH_P2 (31u * 31u)
#define RMQ_JH_P4 (RMQ_JH_P2 * RMQ_JH_P2)
#define RMQ_JH_P8 (RMQ_JH_P4 * RMQ_JH_P4)

/* h over s[0..8), all ASCII (each byte is its UTF-16 code unit). */
static inline uint32_t rmq_java_hash_ascii8(uint32_t h, const uint8_t *s) {
    uint32_t a = 31u * s[0] + s[1], b = 31u * s[2] + s[3];
    uint32_t c = 31u * s[4] + s[5], d = 31u * s[6] + s[7];
    return h * RMQ_JH_P8 + (RMQ_JH_P2 * a + b) * RMQ_JH_P4 + RMQ_JH_P2 * c + d;
}

/* Continue hash h over s[0..len). Start with h = 0. */
static inline uint32_t rmq_java_hash_update(uint32_t h, const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint64_t w;
        while (i + 8 <= len) {
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            h = rmq_java_hash_ascii8(h, s + i);
            i += 8;
        }
        if (i >= len) break;
        uint32_t c = s[i];
        if (c < 0x80) {
            h = 31u * h + c;
            i++;
            continue;
        }
        uint32_t cp = 0xFFFD;
        size_t n = 1;
        if ((c & 0xE0) == 0xC0 && i + 1 < len && (s[i + 1] & 0xC0) == 0x80) {
            cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
            n = cp >= 0x80 ? 2 : 1;
            if (n == 1) cp = 0xFFFD;
        } else if ((c & 0xF0) == 0xE0 && i + 2 < len && (s[i + 1] & 0xC0) == 0x80 &&
                   (s[i + 2] & 0xC0) == 0x80) {
            cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
            n = (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) ? 3 : 1;
            if (n == 1) cp = 0xFFFD;
        } else if ((c & 0xF8) == 0xF0 && i + 3 < len && (s[i + 1] & 0xC0) == 0x80 &&
                   (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
            cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                 (s[i + 3] & 0x3Fu);
            n = (cp >= 0x10000 && cp <= 0x10FFFF) ? 4 : 1;
            if (n == 1) cp = 0xFFFD;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31u * h + (0xD800u + (cp >> 10));
            h = 31u * h + (0xDC00u + (cp & 0x3FFu));
        } else {
            h = 31u * h + cp;
        }
        i += n;
    }
    return h;
}

static inline int32_t rmq_java_string_hash(const uint8_t *s, size_t len) {
    return (int32_t)rmq_java_hash_update(0, s, len);
}

#endif /* RMQ_JAVA_HASH_H */
