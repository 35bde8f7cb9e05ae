from libc.stdint cimport int64_t

cdef extern from "sched_slice.h" nogil:
    int64_t rmq_sched_slice(int64_t slice_ns)
