cdef extern from "rmq_errors.h":
    int RMQ_OK
    int RMQ_EINVAL_TOPIC
    int RMQ_EMSG_TOO_LARGE
    int RMQ_EPROPS_TOO_LARGE
    int RMQ_EQUEUE_ID
    int RMQ_EBAD_BATCH
    int RMQ_ECORRUPT
    int RMQ_ENOT_FOUND
    int RMQ_ECLOSED
    int RMQ_ENOT_STORE
    int RMQ_EBAD_ARG
    int RMQ_EBAD_HOST
    int RMQ_ELOCKED
    int RMQ_EFULL
    const char *rmq_strerror(int rc)
