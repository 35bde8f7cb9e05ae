/* deflate_worker.h: zlib compression on a thread of its own, for callers on
 * an event loop that must not spend their time compressing (a traced
 * producer's trace messages). The thread is plain C: it never takes the
 * GIL, so it runs beside the interpreter instead of taking turns with it.
 *
 * Jobs are compressed in the order submitted and come back in that order.
 * A job's input is the caller's: it must stay readable, unchanged, until the
 * job comes back from rmq_deflate_worker_done (a Python bytes object the
 * caller holds a reference to). The worker allocates each job's output
 * (freed by rmq_deflate_job_free). The token is the caller's and is never
 * touched here.
 *
 * The thread and its queue are a one-thread lane pool (lane_pool.h): submit
 * and done take its lock for a few pointer updates, never while a body is
 * compressed; only close waits, for the body being compressed (at most one,
 * a bounded body). A forked child must not use a worker its parent opened
 * (the thread is not there): rmq_deflate_worker_pid says which process it
 * belongs to. */
#ifndef RMQ_DEFLATE_WORKER_H
#define RMQ_DEFLATE_WORKER_H

#include <stddef.h>
#include <sys/types.h>

#include "deflate.h"
#include "lane_pool.h"

typedef struct rmq_deflate_job {
    rmq_lane_job lane;       /* first: the pool's link (rmq_deflate_next) */
    const unsigned char *in; /* the caller's, read by the thread */
    size_t in_len;
    unsigned char *out;      /* a zlib stream, when rc is RMQ_OK */
    size_t out_len;
    int rc;                  /* RMQ_OK, -ENOMEM, or RMQ_ECORRUPT (zlib refused) */
    void *token;             /* the caller's */
} rmq_deflate_job;

typedef struct rmq_deflate_worker rmq_deflate_worker;

/* The job after j in a list done or close returned, or NULL. */
static inline rmq_deflate_job *rmq_deflate_next(const rmq_deflate_job *j)
{
    return (rmq_deflate_job *)j->lane.next;
}

/* A worker compressing at zlib `level` (0..9), holding at most max_pending
 * jobs submitted and not yet taken back (>= 1), its thread started. */
int rmq_deflate_worker_open(rmq_deflate_worker **out, int level, size_t max_pending);

/* A job of in[0..in_len) (in_len <= RMQ_DEFLATE_MAX_INPUT) carrying `token`, queued: RMQ_OK,
 * RMQ_EFULL (max_pending jobs are out), -ENOMEM, or RMQ_EBAD_ARG. */
int rmq_deflate_worker_submit(rmq_deflate_worker *w, const unsigned char *in, size_t in_len,
                              void *token);

/* The jobs compressed so far and not yet taken, in submission order, as a
 * list (rmq_deflate_next, NULL-terminated) the caller now owns; NULL when
 * none. */
rmq_deflate_job *rmq_deflate_worker_done(rmq_deflate_worker *w);

/* Jobs submitted and not yet taken back (compressed or not). */
size_t rmq_deflate_worker_pending(rmq_deflate_worker *w);

/* The process the worker's thread runs in. */
pid_t rmq_deflate_worker_pid(const rmq_deflate_worker *w);

/* Stop the thread (after the job it is compressing, if any), wait for it,
 * and free the worker: every job not yet taken is returned, as done's list,
 * compressed or not (rc then -ECANCELED). */
rmq_deflate_job *rmq_deflate_worker_close(rmq_deflate_worker *w);

/* Free one job and its output (not its input or token). */
void rmq_deflate_job_free(rmq_deflate_job *job);

#endif /* RMQ_DEFLATE_WORKER_H */
