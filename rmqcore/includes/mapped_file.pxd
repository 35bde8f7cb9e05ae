from libc.stdint cimport int64_t, uint8_t

cdef extern from "mapped_file.h" nogil:
    ctypedef struct rmq_mapped_file_t:
        int fd
        uint8_t *base
        int64_t file_size
        int64_t from_offset
    void rmq_mapped_file_pin(rmq_mapped_file_t *f)
    void rmq_mapped_file_unpin(rmq_mapped_file_t *f)
    int64_t rmq_mapped_file_wrote(const rmq_mapped_file_t *f)
    int64_t rmq_mapped_file_live_count()
