from libc.stdint cimport int32_t, uint8_t

cdef extern from "java_hash.h" nogil:
    int32_t rmq_java_string_hash(const uint8_t *s, size_t len)
