/* deflate_worker.c: see deflate_worker.h. A one-thread lane pool
 * (lane_pool.h) whose serve function compresses a job with the one
 * rmq_deflater kept for the worker's life; one thread, so jobs finish in
 * the order submitted. max_pending is checked against the pool's count of
 * jobs not taken back. */
#include "deflate_worker.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "rmq_errors.h"

struct rmq_deflate_worker {
    rmq_lanes *lanes;
    rmq_deflater d; /* used by the pool's one thread only */
    size_t max_pending;
};

/* Compress one job into a new buffer; the result in job->rc. */
static void compress_job(void *ctx, int lane, rmq_lane_job *lj)
{
    rmq_deflate_worker *w = ctx;
    rmq_deflate_job *job = (rmq_deflate_job *)lj;
    size_t bound = rmq_deflater_bound(&w->d, job->in_len);

    (void)lane;
    if (bound == 0) {
        job->rc = -ENOMEM;
        return;
    }
    job->out = malloc(bound);
    if (job->out == NULL) {
        job->rc = -ENOMEM;
        return;
    }
    job->rc = rmq_deflater_compress(&w->d, job->in, job->in_len, job->out, bound, &job->out_len);
    if (job->rc != RMQ_OK) {
        free(job->out);
        job->out = NULL;
    }
}

int rmq_deflate_worker_open(rmq_deflate_worker **out, int level, size_t max_pending)
{
    rmq_deflate_worker *w;
    int rc;

    *out = NULL;
    if (level < 0 || level > 9 || max_pending < 1)
        return RMQ_EBAD_ARG;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    w->max_pending = max_pending;
    rmq_deflater_init(&w->d, level, 8); /* the level was checked above */
    rc = rmq_lanes_open(&w->lanes, 1, "Deflate", compress_job, w);
    if (rc != RMQ_OK) {
        rmq_deflater_end(&w->d);
        free(w);
        return rc;
    }
    *out = w;
    return RMQ_OK;
}

int rmq_deflate_worker_submit(rmq_deflate_worker *w, const unsigned char *in, size_t in_len,
                              void *token)
{
    rmq_deflate_job *job;

    if (in_len > RMQ_DEFLATE_MAX_INPUT)
        return RMQ_EBAD_ARG;
    /* only the caller submits: the count can only fall meanwhile */
    if (rmq_lanes_pending(w->lanes) >= w->max_pending)
        return RMQ_EFULL;
    job = calloc(1, sizeof *job);
    if (job == NULL)
        return -ENOMEM;
    job->in = in;
    job->in_len = in_len;
    job->rc = -ECANCELED;
    job->token = token;
    rmq_lanes_submit(w->lanes, &job->lane);
    return RMQ_OK;
}

rmq_deflate_job *rmq_deflate_worker_done(rmq_deflate_worker *w)
{
    return (rmq_deflate_job *)rmq_lanes_done(w->lanes);
}

size_t rmq_deflate_worker_pending(rmq_deflate_worker *w) { return rmq_lanes_pending(w->lanes); }

pid_t rmq_deflate_worker_pid(const rmq_deflate_worker *w) { return rmq_lanes_pid(w->lanes); }

rmq_deflate_job *rmq_deflate_worker_close(rmq_deflate_worker *w)
{
    rmq_deflate_job *jobs = (rmq_deflate_job *)rmq_lanes_close(w->lanes);

    rmq_deflater_end(&w->d);
    free(w);
    return jobs;
}

void rmq_deflate_job_free(rmq_deflate_job *job)
{
    free(job->out);
    free(job);
}
