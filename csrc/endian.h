/* endian.h: the only byte-order helpers of the C core. Every on-disk and wire
 * integer is big-endian (Java's ByteBuffer default). Unaligned access is safe. */
#ifndef RMQ_ENDIAN_H
#define RMQ_ENDIAN_H

#include <stdint.h>
#include <string.h>

static inline void rmq_put_be16(uint8_t *p, int16_t v) {
    uint16_t u = __builtin_bswap16((uint16_t)v);
    memcpy(p, &u, 2);
}
static inline void rmq_put_be32(uint8_t *p, int32_t v) {
    uint32_t u = __builtin_bswap32((uint32_t)v);
    memcpy(p, &u, 4);
}
static inline void rmq_put_be64(uint8_t *p, int64_t v) {
    uint64_t u = __builtin_bswap64((uint64_t)v);
    memcpy(p, &u, 8);
}
static inline int16_t rmq_get_be16(const uint8_t *p) {
    uint16_t u;
    memcpy(&u, p, 2);
    return (int16_t)__builtin_bswap16(u);
}
static inline int32_t rmq_get_be32(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return (int32_t)__builtin_bswap32(u);
}
static inline int64_t rmq_get_be64(const uint8_t *p) {
    uint64_t u;
    memcpy(&u, p, 8);
    return (int64_t)__builtin_bswap64(u);
}

#endif /* RMQ_ENDIAN_H */
