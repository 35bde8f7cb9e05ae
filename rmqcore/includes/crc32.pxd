from libc.stdint cimport int32_t, uint32_t

cdef extern from "crc32.h" nogil:
    uint32_t rmq_crc32(const void *buf, size_t len)
    int32_t rmq_body_crc(const void *body, size_t len)
