from libc.stdint cimport int32_t, int64_t, uint8_t

cdef extern from "consume_queue.h" nogil:
    ctypedef struct rmq_cq_unit_t:
        int64_t phys_offset
        int32_t size
        int64_t tags_code
    void rmq_cq_unit_decode(const uint8_t *p, rmq_cq_unit_t *u)
