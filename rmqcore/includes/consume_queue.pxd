from libc.stdint cimport int32_t, int64_t

cdef extern from "consume_queue.h" nogil:
    ctypedef struct rmq_cq_unit_t:
        int64_t phys_offset
        int32_t size
        int64_t tags_code
