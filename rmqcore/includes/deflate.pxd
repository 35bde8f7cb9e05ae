cdef extern from "deflate.h" nogil:
    ctypedef struct rmq_deflater:
        pass
    size_t RMQ_DEFLATE_MAX_INPUT
    int rmq_deflater_init(rmq_deflater *d, int level, int mem_level)
    size_t rmq_deflater_bound(rmq_deflater *d, size_t in_len)
    int rmq_deflater_compress(rmq_deflater *d, const unsigned char *input, size_t in_len,
                              unsigned char *out, size_t out_cap, size_t *out_len)
    void rmq_deflater_end(rmq_deflater *d)
