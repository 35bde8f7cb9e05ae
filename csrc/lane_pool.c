/* lane_pool.c: see lane_pool.h. Two lists under one lock: the queue
 * (qhead..qtail, submission order) and the done list (dhead..dtail, finish
 * order). A thread takes the queue's head under the lock, serves it without
 * the lock, and appends it to the done list under the lock; the eventfd is
 * written when the done list goes from empty to not. */
#include "lane_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rmq_errors.h"
#include "thread_name.h"

struct rmq_lanes {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a job was queued, or stop was set */
    rmq_lane_serve_fn serve;
    void *ctx;
    int fd;
    int stop;
    int threads;
    pid_t pid;
    char name[RMQ_LANES_NAME_MAX + 1];
    rmq_lane_job *qhead, *qtail, *dhead, *dtail;
    size_t pending;
    pthread_t tids[];
};

struct lane_arg {
    rmq_lanes *p;
    int lane;
};

static void *lane_main(void *arg)
{
    struct lane_arg a = *(struct lane_arg *)arg;
    rmq_lanes *p = a.p;
    rmq_lane_job *job;
    uint64_t one = 1;
    char name[RMQ_THREAD_NAME_MAX + 1];

    free(arg);
    snprintf(name, sizeof name, "%s_%d", p->name, a.lane);
    (void)rmq_name_thread(name);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->qhead == NULL)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        job = p->qhead;
        p->qhead = job->next;
        if (p->qhead == NULL)
            p->qtail = NULL;
        pthread_mutex_unlock(&p->lock);
        p->serve(p->ctx, a.lane, job);
        job->served = 1;
        job->next = NULL;
        pthread_mutex_lock(&p->lock);
        if (p->dtail == NULL) {
            p->dhead = p->dtail = job;
            /* cannot fail but for an overflow of 2^64 - 1 writes */
            if (write(p->fd, &one, sizeof one) < 0) {
            }
        } else {
            p->dtail->next = job;
            p->dtail = job;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int rmq_lanes_open(rmq_lanes **out, int threads, const char *name, rmq_lane_serve_fn serve,
                   void *ctx)
{
    rmq_lanes *p;
    int rc, i;

    *out = NULL;
    if (threads < 1 || threads > 64 || serve == NULL || name == NULL)
        return RMQ_EBAD_ARG;
    p = calloc(1, sizeof *p + (size_t)threads * sizeof(pthread_t));
    if (p == NULL)
        return -ENOMEM;
    p->serve = serve;
    p->ctx = ctx;
    snprintf(p->name, sizeof p->name, "%s", name); /* cut to RMQ_LANES_NAME_MAX */
    p->pid = getpid();
    p->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->fd < 0) {
        rc = -errno;
        free(p);
        return rc;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (i = 0; i < threads; i++) {
        struct lane_arg *a = malloc(sizeof *a);
        rc = a == NULL ? ENOMEM : 0;
        if (a != NULL) {
            a->p = p;
            a->lane = i;
            rc = pthread_create(&p->tids[i], NULL, lane_main, a);
            if (rc != 0)
                free(a);
        }
        if (rc != 0) {
            p->threads = i;
            rmq_lanes_close(p); /* nothing was submitted */
            return -rc;
        }
    }
    p->threads = threads;
    *out = p;
    return RMQ_OK;
}

void rmq_lanes_submit(rmq_lanes *p, rmq_lane_job *job)
{
    job->next = NULL;
    job->served = 0;
    pthread_mutex_lock(&p->lock);
    if (p->qtail == NULL)
        p->qhead = job;
    else
        p->qtail->next = job;
    p->qtail = job;
    p->pending++;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

rmq_lane_job *rmq_lanes_done(rmq_lanes *p)
{
    rmq_lane_job *jobs, *j;

    pthread_mutex_lock(&p->lock);
    jobs = p->dhead;
    p->dhead = p->dtail = NULL;
    for (j = jobs; j != NULL; j = j->next)
        p->pending--;
    pthread_mutex_unlock(&p->lock);
    return jobs;
}

size_t rmq_lanes_pending(rmq_lanes *p)
{
    size_t n;

    pthread_mutex_lock(&p->lock);
    n = p->pending;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int rmq_lanes_fd(const rmq_lanes *p) { return p->fd; }

void rmq_lanes_drain_fd(rmq_lanes *p)
{
    uint64_t n;

    if (read(p->fd, &n, sizeof n) < 0) {
        /* EAGAIN: nothing was signalled */
    }
}

int rmq_lanes_threads(const rmq_lanes *p) { return p->threads; }

pid_t rmq_lanes_pid(const rmq_lanes *p) { return p->pid; }

rmq_lane_job *rmq_lanes_close(rmq_lanes *p)
{
    rmq_lane_job *jobs;
    int i;

    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (i = 0; i < p->threads; i++)
        pthread_join(p->tids[i], NULL);
    /* served first, then the queue: one list */
    if (p->dtail != NULL) {
        p->dtail->next = p->qhead;
        jobs = p->dhead;
    } else {
        jobs = p->qhead;
    }
    close(p->fd);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
    return jobs;
}
