from libc.stdint cimport int64_t

cdef extern from "sched_slice.h" nogil:
    enum:
        RMQ_SCHED_SLICE_MIN_NS
        RMQ_SCHED_SLICE_MAX_NS
    int64_t rmq_sched_slice(int64_t slice_ns)
