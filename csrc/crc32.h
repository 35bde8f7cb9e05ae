/* crc32.h: the body CRC as RocketMQ computes it (UtilAll.crc32): the standard
 * CRC-32 (IEEE 802.3, zlib's crc32) masked with 0x7FFFFFFF. Pure, thread-safe. */
#ifndef RMQ_CRC32_H
#define RMQ_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Standard CRC-32 of buf[0..len). */
uint32_t rmq_crc32(const void *buf, size_t len);

/* Copy len bytes from src to dst (not overlapping) and return the standard
 * CRC-32 of them, in one pass over src where the CPU allows. */
uint32_t rmq_crc32_copy(void *dst, const void *src, size_t len);

/* RocketMQ's stored BODYCRC: rmq_crc32(body) & 0x7FFFFFFF. */
static inline int32_t rmq_body_crc(const void *body, size_t len) {
    return (int32_t)(rmq_crc32(body, len) & 0x7FFFFFFFu);
}

#endif /* RMQ_CRC32_H */
