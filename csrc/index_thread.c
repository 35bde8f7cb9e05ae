/* The index thread: IndexFile entries built off the put path (RocketMQ's
 * CommitLogDispatcherBuildIndex, which its ReputMessageService runs beside
 * the ConsumeQueue's), woken from C by the puts' dispatch, so a put costs
 * no Python call and no thread hop for the index (message_store.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <time.h>

#include "rmq_errors.h"
#include "store_internal.h"
#include "thread_name.h"

/* A failed build is tried again after this long, woken or not. */
#define RETRY_MS 1000

void rmq_index_thread_init(rmq_index_thread_t *t) {
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &attr);
    pthread_condattr_destroy(&attr);
}

void rmq_index_thread_destroy(rmq_index_thread_t *t) {
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
}

static struct timespec after_ms(int32_t ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Under t->lock: wait until woken for new records, asked to stop, or
 * (after a failed build) RETRY_MS passed. */
static void wait_for_work(rmq_index_thread_t *t, int failed) {
    struct timespec retry = after_ms(RETRY_MS);
    while (!t->stop && !__atomic_load_n(&t->wanted, __ATOMIC_ACQUIRE)) {
        if (!failed)
            pthread_cond_wait(&t->wake, &t->lock);
        else if (pthread_cond_timedwait(&t->wake, &t->lock, &retry) == ETIMEDOUT)
            return;
    }
}

/* Under t->lock: let the puts of the next window_ms gather (one build for
 * all of them), unless asked to stop. */
static void gather(rmq_index_thread_t *t) {
    struct timespec end = after_ms(t->window_ms);
    while (!t->stop && pthread_cond_timedwait(&t->wake, &t->lock, &end) != ETIMEDOUT) {
    }
}

static void *index_thread_main(void *arg) {
    rmq_store_t *s = arg;
    rmq_index_thread_t *t = &s->index_thread;
    int failed = 0;
    /* RocketMQ's dispatcher that does this is CommitLogDispatcherBuildIndex */
    (void)rmq_name_thread("BuildIndex");
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        wait_for_work(t, failed);
        if (t->stop) break;
        gather(t);
        if (t->stop) break; /* close builds what is left */
        /* what is dispatched from here on wakes the next round */
        __atomic_store_n(&t->wanted, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&t->lock);
        int64_t n = 1;
        int rc = RMQ_OK;
        while (rc == RMQ_OK && n > 0) rc = rmq_store_build_index(s, 65536, &n);
        __atomic_store_n(&t->error, rc, __ATOMIC_RELAXED);
        failed = rc != RMQ_OK;
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int rmq_store_index_thread_start(rmq_store_t *s, int32_t window_ms) {
    rmq_index_thread_t *t = &s->index_thread;
    if (!s->index || !s->cfg.index_async || window_ms < 0 ||
        __atomic_load_n(&t->running, __ATOMIC_ACQUIRE))
        return RMQ_EBAD_ARG;
    t->window_ms = window_ms;
    t->stop = 0;
    /* records put before the start are indexed by its first round */
    __atomic_store_n(&t->wanted, 1, __ATOMIC_RELEASE);
    int rc = pthread_create(&t->thread, NULL, index_thread_main, s);
    if (rc != 0) return -rc;
    __atomic_store_n(&t->running, 1, __ATOMIC_RELEASE);
    return RMQ_OK;
}

void rmq_store_index_thread_stop(rmq_store_t *s) {
    rmq_index_thread_t *t = &s->index_thread;
    if (!__atomic_load_n(&t->running, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    __atomic_store_n(&t->running, 0, __ATOMIC_RELEASE);
}

void rmq_store_index_poke(rmq_store_t *s) {
    rmq_index_thread_t *t = &s->index_thread;
    if (!__atomic_load_n(&t->running, __ATOMIC_RELAXED) ||
        __atomic_load_n(&t->wanted, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&t->lock);
    __atomic_store_n(&t->wanted, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
}

int rmq_store_index_error(const rmq_store_t *s) {
    return __atomic_load_n(&s->index_thread.error, __ATOMIC_RELAXED);
}
