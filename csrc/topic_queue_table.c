#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "topic_queue_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rmq_errors.h"

static uint64_t hash_key(const uint8_t *topic, int32_t len, int32_t qid) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (int32_t i = 0; i < len; i++) {
        h ^= topic[i];
        h *= 1099511628211ULL;
    }
    h ^= (uint64_t)(uint32_t)qid;
    h *= 1099511628211ULL;
    return h ^ (h >> 29);
}

int rmq_tq_init(rmq_tq_table_t *t) {
    memset(t, 0, sizeof(*t));
    t->cap = 64;
    t->slots = calloc((size_t)t->cap, sizeof(*t->slots));
    if (!t->slots) return -ENOMEM;
    pthread_mutex_init(&t->lock, NULL);
    return RMQ_OK;
}

void rmq_tq_free(rmq_tq_table_t *t) {
    if (!t->slots) return;
    for (int64_t i = 0; i < t->cap; i++) free(t->slots[i]);
    free(t->slots);
    t->slots = NULL;
    pthread_mutex_destroy(&t->lock);
}

static int64_t probe(const rmq_tq_table_t *t, const uint8_t *topic, int32_t len, int32_t qid,
                     uint64_t h) {
    int64_t mask = t->cap - 1;
    int64_t i = (int64_t)(h & (uint64_t)mask);
    for (;;) {
        rmq_tq_entry_t *e = t->slots[i];
        if (!e) return i;
        if (e->hash == h && e->queue_id == qid && e->topic_len == len &&
            memcmp(e->topic, topic, (size_t)len) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

static int grow(rmq_tq_table_t *t) {
    int64_t ncap = t->cap * 2;
    rmq_tq_entry_t **ns = calloc((size_t)ncap, sizeof(*ns));
    if (!ns) return -ENOMEM;
    for (int64_t i = 0; i < t->cap; i++) {
        rmq_tq_entry_t *e = t->slots[i];
        if (!e) continue;
        int64_t j = (int64_t)(e->hash & (uint64_t)(ncap - 1));
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = e;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return RMQ_OK;
}

rmq_tq_entry_t *rmq_tq_get(rmq_tq_table_t *t, const uint8_t *topic, int32_t topic_len,
                           int32_t queue_id, int create) {
    if (topic_len < 0 || topic_len > RMQ_MAX_TOPIC_LENGTH) return NULL;
    uint64_t h = hash_key(topic, topic_len, queue_id);
    int64_t i = probe(t, topic, topic_len, queue_id, h);
    if (t->slots[i] || !create) return t->slots[i];
    rmq_tq_entry_t *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    memcpy(e->topic, topic, (size_t)topic_len);
    e->topic_len = topic_len;
    e->queue_id = queue_id;
    e->hash = h;
    pthread_mutex_lock(&t->lock);
    if ((t->count + 1) * 4 > t->cap * 3) {
        if (grow(t) != RMQ_OK) {
            pthread_mutex_unlock(&t->lock);
            free(e);
            return NULL;
        }
        i = probe(t, topic, topic_len, queue_id, h);
    }
    t->slots[i] = e;
    t->count++;
    pthread_mutex_unlock(&t->lock);
    return e;
}

rmq_tq_entry_t *rmq_tq_remove(rmq_tq_table_t *t, const uint8_t *topic, int32_t topic_len,
                              int32_t queue_id) {
    if (topic_len < 0 || topic_len > RMQ_MAX_TOPIC_LENGTH) return NULL;
    uint64_t h = hash_key(topic, topic_len, queue_id);
    pthread_mutex_lock(&t->lock);
    int64_t i = probe(t, topic, topic_len, queue_id, h);
    rmq_tq_entry_t *e = t->slots[i];
    if (e) {
        /* Backward-shift deletion keeps probe chains intact. */
        int64_t mask = t->cap - 1;
        t->slots[i] = NULL;
        int64_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            rmq_tq_entry_t *x = t->slots[j];
            if (!x) break;
            int64_t home = (int64_t)(x->hash & (uint64_t)mask);
            int between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
            if (!between) {
                t->slots[i] = x;
                t->slots[j] = NULL;
                i = j;
            }
        }
        t->count--;
    }
    pthread_mutex_unlock(&t->lock);
    return e;
}

int64_t rmq_tq_snapshot(rmq_tq_table_t *t, rmq_tq_entry_t **out, int64_t max) {
    pthread_mutex_lock(&t->lock);
    int64_t n = 0;
    for (int64_t i = 0; i < t->cap; i++) {
        if (!t->slots[i]) continue;
        if (n < max) out[n] = t->slots[i];
        n++;
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}
