/* lane_pool.h: a few plain C threads serving jobs for an event loop, for
 * work the loop must not do itself: the broker's C send path on its other
 * cores (rmqcore/_sendlanes.pyx) and, with one thread, compression
 * (deflate_worker.h). The threads never take the GIL.
 *
 * A job is the caller's struct with an rmq_lane_job as its first member;
 * the pool never allocates or frees one. Jobs are taken in the order
 * submitted, by whichever thread is free, and served by the pool's serve
 * function with the number of the thread serving it (0..threads-1, for
 * per-thread scratch). Served jobs come back in the order they finished
 * from rmq_lanes_done. The pool's eventfd (rmq_lanes_fd) is readable while
 * served jobs wait there: the caller reads it (rmq_lanes_drain_fd) BEFORE
 * taking them, so that a job finishing between the two is signalled again.
 *
 * submit, done and pending take the pool's lock for a few pointer updates,
 * never while a job is served. close stops the threads after the jobs being
 * served (at most one each) and returns the others unserved (served = 0).
 * A forked child must not use its parent's pool (rmq_lanes_pid). */
#ifndef RMQ_LANE_POOL_H
#define RMQ_LANE_POOL_H

#include <stddef.h>
#include <sys/types.h>

typedef struct rmq_lane_job {
    struct rmq_lane_job *next;
    int served; /* 1 once served; 0 for a job close returned unserved */
} rmq_lane_job;

typedef struct rmq_lanes rmq_lanes;

/* The most of a pool's name its threads show: with "_63" it fills the 15
 * bytes Linux keeps of a thread's name. */
#define RMQ_LANES_NAME_MAX 12

/* serve(ctx, lane, job): runs on thread `lane`, without the GIL. */
typedef void (*rmq_lane_serve_fn)(void *ctx, int lane, rmq_lane_job *job);

/* A pool of `threads` (1..64) threads started, named "<name>_<lane>" as
 * the OS shows them (thread_name.h; name cut to RMQ_LANES_NAME_MAX bytes):
 * RMQ_OK, RMQ_EBAD_ARG, or a negative errno (eventfd, pthread_create,
 * memory). */
int rmq_lanes_open(rmq_lanes **out, int threads, const char *name, rmq_lane_serve_fn serve,
                   void *ctx);

/* Queue a job (never fails). */
void rmq_lanes_submit(rmq_lanes *p, rmq_lane_job *job);

/* The served jobs not taken yet, in the order they finished (next,
 * NULL-terminated); NULL when none. */
rmq_lane_job *rmq_lanes_done(rmq_lanes *p);

/* Jobs submitted and not yet taken back by done. */
size_t rmq_lanes_pending(rmq_lanes *p);

/* The eventfd, readable while served jobs wait (non-blocking). */
int rmq_lanes_fd(const rmq_lanes *p);

/* Reset the eventfd's count (before rmq_lanes_done). */
void rmq_lanes_drain_fd(rmq_lanes *p);

int rmq_lanes_threads(const rmq_lanes *p);
pid_t rmq_lanes_pid(const rmq_lanes *p);

/* Stop and join the threads (each finishes the job it serves), free the
 * pool, and return every job not yet taken: served ones first (as done
 * would), then the unserved in submission order. */
rmq_lane_job *rmq_lanes_close(rmq_lanes *p);

#endif /* RMQ_LANE_POOL_H */
