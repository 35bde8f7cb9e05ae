from posix.types cimport pid_t


cdef extern from "deflate_worker.h" nogil:
    ctypedef struct rmq_deflate_job:
        const unsigned char *input "in"
        size_t in_len
        unsigned char *out
        size_t out_len
        int rc
        void *token
    ctypedef struct rmq_deflate_worker:
        pass
    rmq_deflate_job *rmq_deflate_next(const rmq_deflate_job *j)
    int rmq_deflate_worker_open(rmq_deflate_worker **out, int level, size_t max_pending)
    int rmq_deflate_worker_submit(rmq_deflate_worker *w, const unsigned char *input,
                                  size_t in_len, void *token)
    rmq_deflate_job *rmq_deflate_worker_done(rmq_deflate_worker *w)
    size_t rmq_deflate_worker_pending(rmq_deflate_worker *w)
    pid_t rmq_deflate_worker_pid(const rmq_deflate_worker *w)
    rmq_deflate_job *rmq_deflate_worker_close(rmq_deflate_worker *w)
    void rmq_deflate_job_free(rmq_deflate_job *job)
