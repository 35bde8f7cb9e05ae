from libc.stddef cimport ptrdiff_t
from libc.stdint cimport int64_t

cdef extern from "remoting_header.h" nogil:
    enum:
        RMQ_HEADER_MAX_FIELDS
        RMQ_HEADER_MAX_DEPTH

    ctypedef struct rmq_json_span_t:
        const char *p
        size_t n
        char kind
        char escaped

    ctypedef struct rmq_json_header_t:
        int64_t code, opaque, flag, version
        int has_code
        int non_ascii
        rmq_json_span_t language, remark
        size_t nfields
        rmq_json_span_t keys[RMQ_HEADER_MAX_FIELDS]
        rmq_json_span_t values[RMQ_HEADER_MAX_FIELDS]
        size_t error_at
        const char *error

    int rmq_json_header_parse(const char *buf, size_t n, rmq_json_header_t *out)
    ptrdiff_t rmq_json_unescape(const char *inp, size_t n, char *out)
    size_t RMQ_JSON_ESCAPE_MAX(size_t n)
    size_t rmq_json_escape(const char *inp, size_t n, char *out)
    int rmq_json_plain(const char *inp, size_t n)
