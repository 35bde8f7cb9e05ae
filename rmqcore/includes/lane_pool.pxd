from posix.types cimport pid_t


cdef extern from "lane_pool.h" nogil:
    ctypedef struct rmq_lane_job:
        rmq_lane_job *next
        int served
    ctypedef struct rmq_lanes:
        pass
    ctypedef void (*rmq_lane_serve_fn)(void *ctx, int lane, rmq_lane_job *job) noexcept nogil
    int rmq_lanes_open(rmq_lanes **out, int threads, const char *name, rmq_lane_serve_fn serve,
                       void *ctx)
    void rmq_lanes_submit(rmq_lanes *p, rmq_lane_job *job)
    rmq_lane_job *rmq_lanes_done(rmq_lanes *p)
    size_t rmq_lanes_pending(rmq_lanes *p)
    int rmq_lanes_fd(const rmq_lanes *p)
    void rmq_lanes_drain_fd(rmq_lanes *p)
    int rmq_lanes_threads(const rmq_lanes *p)
    pid_t rmq_lanes_pid(const rmq_lanes *p)
    rmq_lane_job *rmq_lanes_close(rmq_lanes *p)
