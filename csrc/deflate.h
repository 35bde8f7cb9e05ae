/* deflate.h: one body at a time into a zlib stream (what a message's sysFlag
 * COMPRESSED says its body is), from one z_stream kept for the deflater's
 * life: zlib's deflateInit sets up and frees 150 KB or more of state, which
 * for bodies of a few KB costs more than compressing them. The state is set
 * up at the first body (most producers never compress one) and reset per
 * body, so each body's stream is what a fresh zlib.compress at the same
 * level writes. Used by rmqcore.Deflater (on the caller's thread) and by
 * the DeflateWorker's thread (deflate_worker.h). Not thread-safe: one
 * deflater, one thread at a time. */
#ifndef RMQ_DEFLATE_H
#define RMQ_DEFLATE_H

#include <stddef.h>
#include <zlib.h>

/* the largest body a deflater takes (zlib counts a buffer in 32 bits) */
#define RMQ_DEFLATE_MAX_INPUT ((size_t)1 << 30)

typedef struct rmq_deflater {
    z_stream zs;
    int ready; /* zs is set up */
    int level;
    int mem_level;
} rmq_deflater;

/* A deflater at zlib `level` (0..9) and `mem_level` (1..9; zlib's default
 * is 8): RMQ_OK or RMQ_EBAD_ARG. Allocates nothing yet. */
int rmq_deflater_init(rmq_deflater *d, int level, int mem_level);

/* Output room that always holds the stream of an in_len-byte body, zlib
 * set up if it was not; 0 when it cannot be (no memory, or in_len over
 * RMQ_DEFLATE_MAX_INPUT). */
size_t rmq_deflater_bound(rmq_deflater *d, size_t in_len);

/* in[0..in_len) as a zlib stream into out[0..*out_len), out_cap bytes
 * being at least rmq_deflater_bound(d, in_len): RMQ_OK, RMQ_EBAD_ARG (no
 * room, or too large) or RMQ_ECORRUPT (zlib refused). */
int rmq_deflater_compress(rmq_deflater *d, const unsigned char *in, size_t in_len,
                          unsigned char *out, size_t out_cap, size_t *out_len);

/* Free zlib's state (the deflater can be used again: set up anew). */
void rmq_deflater_end(rmq_deflater *d);

#endif /* RMQ_DEFLATE_H */
