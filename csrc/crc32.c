#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "crc32.h"

#include <limits.h>
#include <zlib.h>

uint32_t rmq_crc32(const void *buf, size_t len) {
    uLong crc = crc32(0L, Z_NULL, 0);
    const Bytef *p = (const Bytef *)buf;
    while (len > 0) {
        uInt n = len > (size_t)UINT_MAX ? UINT_MAX : (uInt)len;
        crc = crc32(crc, p, n);
        p += n;
        len -= n;
    }
    return (uint32_t)crc;
}
