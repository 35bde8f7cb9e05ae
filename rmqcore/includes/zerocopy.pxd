from libc.stdint cimport int64_t

cdef extern from "zerocopy.h" nogil:
    int rmq_sendfile(int sock_fd, int file_fd, int64_t offset, int64_t count, int64_t *sent)
