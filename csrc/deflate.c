/* deflate.c: see deflate.h. */
#include "deflate.h"

#include <stdint.h>
#include <string.h>

#include "rmq_errors.h"

int rmq_deflater_init(rmq_deflater *d, int level, int mem_level)
{
    memset(d, 0, sizeof *d);
    if (level < 0 || level > 9 || mem_level < 1 || mem_level > 9)
        return RMQ_EBAD_ARG;
    d->level = level;
    d->mem_level = mem_level;
    return RMQ_OK;
}

size_t rmq_deflater_bound(rmq_deflater *d, size_t in_len)
{
    if (in_len > RMQ_DEFLATE_MAX_INPUT)
        return 0;
    if (!d->ready) {
        memset(&d->zs, 0, sizeof d->zs);
        if (deflateInit2(&d->zs, d->level, Z_DEFLATED, MAX_WBITS, d->mem_level,
                         Z_DEFAULT_STRATEGY) != Z_OK)
            return 0;
        d->ready = 1;
    }
    return (size_t)deflateBound(&d->zs, (uLong)in_len);
}

int rmq_deflater_compress(rmq_deflater *d, const unsigned char *in, size_t in_len,
                          unsigned char *out, size_t out_cap, size_t *out_len)
{
    size_t bound = rmq_deflater_bound(d, in_len);
    int rc;

    *out_len = 0;
    if (bound == 0 || out_cap < bound)
        return RMQ_EBAD_ARG;
    deflateReset(&d->zs);
    /* zlib reads next_in and never writes it (z_const without ZLIB_CONST) */
    d->zs.next_in = (Bytef *)(uintptr_t)in;
    d->zs.avail_in = (uInt)in_len;
    d->zs.next_out = out;
    d->zs.avail_out = (uInt)bound;
    rc = deflate(&d->zs, Z_FINISH);
    if (rc != Z_STREAM_END) {
        deflateReset(&d->zs);
        return RMQ_ECORRUPT;
    }
    *out_len = bound - d->zs.avail_out;
    return RMQ_OK;
}

void rmq_deflater_end(rmq_deflater *d)
{
    if (d->ready)
        deflateEnd(&d->zs);
    d->ready = 0;
}
