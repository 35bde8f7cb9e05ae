cdef extern from "thread_name.h" nogil:
    enum:
        RMQ_THREAD_NAME_MAX
    int rmq_name_thread(const char *name)
