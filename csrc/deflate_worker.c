/* deflate_worker.c: see deflate_worker.h. One thread, one rmq_deflater kept
 * for the worker's life (deflate.h), one list of jobs: head..tail in
 * submission order, `todo` the first not yet compressed. The thread takes
 * `todo` under the lock, compresses it without the lock, and advances
 * `todo` under the lock; done() detaches head up to `todo`. */
#include "deflate_worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rmq_errors.h"

struct rmq_deflate_worker {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a job was queued, or stop was set */
    pthread_t thread;
    pid_t pid;
    int level;
    int stop;
    rmq_deflate_job *head, *tail, *todo;
    size_t pending;
    size_t max_pending;
};

/* Compress one job into a new buffer; the result in job->rc. */
static void compress_job(rmq_deflater *d, rmq_deflate_job *job)
{
    size_t bound = rmq_deflater_bound(d, job->in_len);

    if (bound == 0) {
        job->rc = -ENOMEM;
        return;
    }
    job->out = malloc(bound);
    if (job->out == NULL) {
        job->rc = -ENOMEM;
        return;
    }
    job->rc = rmq_deflater_compress(d, job->in, job->in_len, job->out, bound, &job->out_len);
    if (job->rc != RMQ_OK) {
        free(job->out);
        job->out = NULL;
    }
}

static void *worker_main(void *arg)
{
    rmq_deflate_worker *w = arg;
    rmq_deflate_job *job;
    rmq_deflater d;

    rmq_deflater_init(&d, w->level, 8); /* the level was checked at open */
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && w->todo == NULL)
            pthread_cond_wait(&w->wake, &w->lock);
        if (w->stop)
            break;
        job = w->todo;
        pthread_mutex_unlock(&w->lock);
        compress_job(&d, job);
        pthread_mutex_lock(&w->lock);
        w->todo = job->next;
    }
    pthread_mutex_unlock(&w->lock);
    rmq_deflater_end(&d);
    return NULL;
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
    w->level = level;
    w->max_pending = max_pending;
    w->pid = getpid();
    rc = pthread_mutex_init(&w->lock, NULL);
    if (rc != 0) {
        free(w);
        return -rc;
    }
    rc = pthread_cond_init(&w->wake, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        free(w);
        return -rc;
    }
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return -rc;
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
    job = calloc(1, sizeof *job);
    if (job == NULL)
        return -ENOMEM;
    job->in = in;
    job->in_len = in_len;
    job->rc = -ECANCELED;
    job->token = token;
    pthread_mutex_lock(&w->lock);
    if (w->pending >= w->max_pending) {
        pthread_mutex_unlock(&w->lock);
        free(job);
        return RMQ_EFULL;
    }
    if (w->tail != NULL)
        w->tail->next = job;
    else
        w->head = job;
    w->tail = job;
    w->pending++;
    if (w->todo == NULL) {
        w->todo = job;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&w->lock);
    return RMQ_OK;
}

rmq_deflate_job *rmq_deflate_worker_done(rmq_deflate_worker *w)
{
    rmq_deflate_job *first, *last = NULL, *j;
    size_t n = 0;

    pthread_mutex_lock(&w->lock);
    first = w->head;
    for (j = w->head; j != NULL && j != w->todo; j = j->next) {
        last = j;
        n++;
    }
    if (last == NULL) {
        pthread_mutex_unlock(&w->lock);
        return NULL;
    }
    w->head = last->next;
    if (w->head == NULL)
        w->tail = NULL;
    w->pending -= n;
    last->next = NULL;
    pthread_mutex_unlock(&w->lock);
    return first;
}

size_t rmq_deflate_worker_pending(rmq_deflate_worker *w)
{
    size_t n;

    pthread_mutex_lock(&w->lock);
    n = w->pending;
    pthread_mutex_unlock(&w->lock);
    return n;
}

pid_t rmq_deflate_worker_pid(const rmq_deflate_worker *w)
{
    return w->pid;
}

rmq_deflate_job *rmq_deflate_worker_close(rmq_deflate_worker *w)
{
    rmq_deflate_job *jobs;

    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    jobs = w->head;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return jobs;
}

void rmq_deflate_job_free(rmq_deflate_job *job)
{
    free(job->out);
    free(job);
}
