from libc.stdint cimport int64_t
from rmqcore.includes.mapped_file cimport rmq_mapped_file_t

cdef extern from "mapped_file_queue.h" nogil:
    ctypedef struct rmq_mfq_t:
        int64_t file_size
        int count
    int rmq_mfq_prepare_next(rmq_mfq_t *q)
    int rmq_mfq_has_prepared(rmq_mfq_t *q)
    void rmq_mfq_warm_ahead(rmq_mfq_t *q, int64_t window)
    int rmq_mfq_find_pinned(rmq_mfq_t *q, int64_t offset, rmq_mapped_file_t **out)
    int64_t rmq_mfq_min_offset(rmq_mfq_t *q)
    int64_t rmq_mfq_max_offset(rmq_mfq_t *q)
    int64_t rmq_mfq_flushed_where(rmq_mfq_t *q)
    int rmq_mfq_file_starts(rmq_mfq_t *q, int64_t *out, int max)
