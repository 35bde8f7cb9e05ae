#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "message_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commit_log_replica.h"
#include "paths.h"
#include "store_internal.h"
#include "java_hash.h"
#include "rmq_errors.h"
#include "rmq_format.h"

/* IndexFile keys of consecutive records, put by one call
 * (rmq_index_service_put_many) so that their hash slots' cache misses
 * overlap. */
#define INDEX_BATCH 64
typedef struct index_batch {
    rmq_index_put_t puts[INDEX_BATCH];
    int n;
} index_batch_t;

/* Put what b holds. On failure *redo_from receives the offset of the
 * record whose key failed: it and every later record are to be indexed
 * again. */
static int index_batch_flush(rmq_store_t *s, index_batch_t *b, int64_t *redo_from) {
    int done = 0;
    int rc = b->n ? rmq_index_service_put_many(s->index, b->puts, b->n, &done) : RMQ_OK;
    if (rc != RMQ_OK) *redo_from = b->puts[done].phy_offset;
    b->n = 0;
    return rc;
}

static int index_batch_add(rmq_store_t *s, index_batch_t *b, const rmq_record_view_t *v,
                           const uint8_t *key, int32_t key_len, int64_t *redo_from) {
    if (b->n == INDEX_BATCH) {
        int rc = index_batch_flush(s, b, redo_from);
        if (rc != RMQ_OK) return rc;
    }
    rmq_index_put_t *e = &b->puts[b->n++];
    e->hash = rmq_index_key_hash(v->topic, (size_t)v->topic_len, key, (size_t)key_len);
    e->phy_offset = v->phys_offset;
    e->store_timestamp = v->store_timestamp;
    return RMQ_OK;
}

/* The IndexFile keys of one record (rmq_index_keys_next), added to b
 * (which is put when full: a failure there is returned, with
 * *redo_from). A rolled-back transaction's half message is not indexed. */
static int index_record(rmq_store_t *s, const rmq_record_view_t *v, index_batch_t *b,
                        int64_t *redo_from) {
    int tx = v->sysflag & RMQ_SYSFLAG_TRANSACTION_MASK;
    if (tx == RMQ_SYSFLAG_TRANSACTION_ROLLBACK) return RMQ_OK;
    rmq_index_keys_t keys;
    rmq_index_keys_init(&keys, v->props, v->props_len);
    const uint8_t *key;
    int32_t key_len;
    while (rmq_index_keys_next(&keys, &key, &key_len)) {
        int rc = index_batch_add(s, b, v, key, key_len, redo_from);
        if (rc != RMQ_OK) return rc;
    }
    return RMQ_OK;
}

/* index_record, its keys put before it returns. */
static int index_one_record(rmq_store_t *s, const rmq_record_view_t *v) {
    index_batch_t b;
    b.n = 0;
    int64_t redo_from;
    int rc = index_record(s, v, &b, &redo_from);
    if (rc == RMQ_OK) rc = index_batch_flush(s, &b, &redo_from);
    return rc;
}

static int cq_dir(const rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid,
                  char *buf, size_t n) {
    int k = snprintf(buf, n, "%s/%.*s/%d", s->cq_root, (int)tlen, (const char *)topic, qid);
    return (k < 0 || (size_t)k >= n) ? RMQ_EBAD_ARG : RMQ_OK;
}

static int entry_cq(rmq_store_t *s, rmq_tq_entry_t *e, rmq_consume_queue_t **out) {
    if (!e->cq) {
        char dir[PATH_MAX];
        int rc = cq_dir(s, e->topic, e->topic_len, e->queue_id, dir, sizeof(dir));
        if (rc != RMQ_OK) return rc;
        rc = rmq_cq_open(dir, e->queue_id, s->cfg.cq_units_per_file, &e->cq);
        if (rc != RMQ_OK) return rc;
    }
    *out = e->cq;
    return RMQ_OK;
}

/* Dispatch one record (CommitLogDispatcherBuildConsumeQueue + BuildIndex). */
static int dispatch_record(rmq_store_t *s, const rmq_record_view_t *v, int64_t index_from,
                           int validate, int with_index) {
    if (rmq_sysflag_in_consume_queue(v->sysflag)) {
        if (validate) {
            int skip = 0;
            int rc = rmq_store_check_redispatch(s, v, &skip);
            if (rc != RMQ_OK || skip) return rc;
        }
        rmq_tq_entry_t *e = rmq_tq_get(&s->table, v->topic, v->topic_len, v->queue_id, 1);
        if (!e) return -ENOMEM;
        rmq_consume_queue_t *cq;
        int rc = entry_cq(s, e, &cq);
        if (rc != RMQ_OK) return rc;
        int64_t tags_code = 0;
        const uint8_t *tag;
        int32_t tag_len;
        if (rmq_props_get(v->props, v->props_len, "TAGS", &tag, &tag_len))
            tags_code = rmq_java_string_hash(tag, (size_t)tag_len);
        rc = rmq_cq_put(cq, v->queue_offset, v->phys_offset, v->total_size, tags_code);
        if (rc != RMQ_OK) return rc;
        if (e->next_queue_offset <= v->queue_offset) e->next_queue_offset = v->queue_offset + 1;
    }
    if (with_index && s->index && v->phys_offset >= index_from) return index_one_record(s, v);
    return RMQ_OK;
}

int rmq_store_dispatch_range(rmq_store_t *s, int64_t index_from, int validate, int with_index,
                             int64_t *n) {
    int64_t count = 0;
    int64_t off = __atomic_load_n(&s->dispatched, __ATOMIC_ACQUIRE);
    int64_t max = rmq_mfq_max_offset(s->cl.mfq);
    int rc = RMQ_OK;
    while (off < max) {
        rmq_mapped_file_t *f;
        const uint8_t *p;
        int64_t avail;
        rc = rmq_commit_log_read_pinned(&s->cl, off, &f, &p, &avail);
        if (rc != RMQ_OK) {
            /* off is at a segment end with nothing after it yet. */
            rc = RMQ_OK;
            break;
        }
        while (avail > 0) {
            rmq_record_view_t v;
            int drc = rmq_record_decode(p, avail, &v);
            if (drc == RMQ_ENOT_FOUND) { /* blank: the rest of the segment */
                off = rmq_commit_log_roll_next(&s->cl, off);
                break;
            }
            if (drc != RMQ_OK) {
                rc = drc;
                break;
            }
            rc = dispatch_record(s, &v, index_from, validate, with_index);
            if (rc != RMQ_OK) break;
            s->last_dispatched_ts = v.store_timestamp;
            off += v.total_size;
            p += v.total_size;
            avail -= v.total_size;
            count++;
        }
        rmq_mapped_file_unpin(f);
        __atomic_store_n(&s->dispatched, off, __ATOMIC_RELEASE);
        if (with_index) __atomic_store_n(&s->index_dispatched, off, __ATOMIC_RELEASE);
        if (rc != RMQ_OK) break;
    }
    if (n) *n = count;
    return rc;
}

static int dispatch_owned(rmq_store_t *s, int64_t *n) {
    int rc = rmq_store_dispatch_range(s, 0, 0, !s->cfg.index_async, n);
    rmq_store_index_poke(s);
    return rc;
}

int rmq_store_build_index(rmq_store_t *s, int64_t max_records, int64_t *n) {
    *n = 0;
    if (!s->index) return RMQ_OK;
    pthread_mutex_lock(&s->index_build_lock);
    int64_t off = __atomic_load_n(&s->index_dispatched, __ATOMIC_ACQUIRE);
    int64_t limit = __atomic_load_n(&s->dispatched, __ATOMIC_ACQUIRE);
    int64_t clog_min = rmq_mfq_min_offset(s->cl.mfq);
    if (off < clog_min) off = clog_min; /* retention overtook a lagging index */
    int rc = RMQ_OK;
    int64_t count = 0;
    index_batch_t b;
    b.n = 0;
    int64_t redo_from = off;
    while (off < limit && count < max_records && rc == RMQ_OK) {
        rmq_mapped_file_t *f;
        const uint8_t *p;
        int64_t avail;
        if (rmq_commit_log_read_pinned(&s->cl, off, &f, &p, &avail) != RMQ_OK) {
            off = rmq_commit_log_roll_next(&s->cl, off); /* segment end or gone */
            continue;
        }
        int64_t in_file = f->from_offset + f->file_size;
        if (avail > limit - off) avail = limit - off;
        while (avail > 0 && count < max_records) {
            rmq_record_view_t v;
            int drc = rmq_record_decode(p, avail, &v);
            if (drc != RMQ_OK) { /* blank: the rest of the segment */
                off = in_file;
                break;
            }
            rc = index_record(s, &v, &b, &redo_from);
            if (rc != RMQ_OK) break;
            off += v.total_size;
            p += v.total_size;
            avail -= v.total_size;
            count++;
        }
        /* the offset moves past records whose keys are all put */
        if (rc == RMQ_OK) rc = index_batch_flush(s, &b, &redo_from);
        if (rc != RMQ_OK) off = redo_from;
        rmq_mapped_file_unpin(f);
        __atomic_store_n(&s->index_dispatched, off, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->index_build_lock);
    *n = count;
    return rc;
}

/* A stored record must not be reported as failed because building its
 * ConsumeQueue unit or index entry failed (a full disk while creating a CQ
 * or index file): the client would send it again. The error is kept and the
 * dispatch is retried by the next put or by rmq_store_dispatch. */
static void dispatch_after_put(rmq_store_t *s) {
    int rc = rmq_store_dispatch(s, NULL);
    __atomic_store_n(&s->dispatch_error, rc, __ATOMIC_RELAXED);
}

/* Before an append, while an earlier dispatch failed: dispatch again, and
 * refuse the put (nothing written) with that error while it still fails.
 * Dispatch is in CommitLog order, so one record that cannot reach its queue
 * holds back every record after it, of every topic: accepting more would
 * acknowledge messages no consumer can see until the cause is gone
 * (RocketMQ stops writes on a logics-queue error the same way). One relaxed
 * load when nothing failed. */
static int catch_up_dispatch(rmq_store_t *s) {
    if (__atomic_load_n(&s->dispatch_error, __ATOMIC_RELAXED) == RMQ_OK) return RMQ_OK;
    dispatch_after_put(s);
    return __atomic_load_n(&s->dispatch_error, __ATOMIC_RELAXED);
}

static int put_owned(rmq_store_t *s, const rmq_msg_in_t *m, rmq_append_result_t *r) {
    int rc = catch_up_dispatch(s);
    if (rc != RMQ_OK) return rc;
    rc = rmq_commit_log_append(&s->cl, m, r);
    if (rc != RMQ_OK) return rc;
    dispatch_after_put(s);
    return RMQ_OK;
}

static int put_batch_owned(rmq_store_t *s, const rmq_msg_in_t *proto, const uint8_t *batch,
                           int64_t batch_len, rmq_append_result_t *r) {
    int rc = catch_up_dispatch(s);
    if (rc != RMQ_OK) return rc;
    rc = rmq_commit_log_append_batch(&s->cl, proto, batch, batch_len, r);
    if (rc != RMQ_OK) return rc;
    dispatch_after_put(s);
    return RMQ_OK;
}

static int append_replica_owned(rmq_store_t *s, int64_t offset, const uint8_t *data, int64_t len,
                                int64_t *accepted, int32_t *rolled) {
    int empty = rmq_mfq_last(s->cl.mfq) == NULL;
    int rc = rmq_commit_log_append_replica(&s->cl, offset, data, len, 1, accepted, rolled);
    if (*accepted > 0) {
        if (empty) {
            /* the copy starts at the master's first segment, maybe past 0 */
            __atomic_store_n(&s->dispatched, offset, __ATOMIC_RELEASE);
            __atomic_store_n(&s->index_dispatched, offset, __ATOMIC_RELEASE);
        }
        dispatch_after_put(s);
    }
    return rc;
}

static int truncate_owned(rmq_store_t *s, int64_t offset) {
    rmq_mfq_t *q = s->cl.mfq;
    if (offset < rmq_mfq_min_offset(q) || offset > rmq_mfq_max_offset(q)) return RMQ_EBAD_ARG;
    if (offset == rmq_mfq_max_offset(q)) return RMQ_OK;
    int rc = rmq_mfq_truncate_dirty(q, offset);
    if (rc != RMQ_OK) return rc;
    if (rmq_mfq_flushed_where(q) > offset) rmq_mfq_set_flushed_where(q, offset);
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -ENOMEM;
    for (int64_t i = 0; i < total && rc == RMQ_OK; i++) {
        rmq_consume_queue_t *cq = snap[i]->cq;
        if (!cq) continue;
        rc = rmq_cq_recover(cq, offset); /* drops the units of records past it */
        cq->damaged = 0;
        snap[i]->next_queue_offset = rmq_cq_max_offset(cq);
    }
    free(snap);
    if (__atomic_load_n(&s->dispatched, __ATOMIC_ACQUIRE) > offset)
        __atomic_store_n(&s->dispatched, offset, __ATOMIC_RELEASE);
    pthread_mutex_lock(&s->index_build_lock);
    if (__atomic_load_n(&s->index_dispatched, __ATOMIC_ACQUIRE) > offset)
        __atomic_store_n(&s->index_dispatched, offset, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->index_build_lock);
    return rc;
}

int rmq_store_snapshot_entries(rmq_store_t *s, rmq_tq_entry_t ***out, int64_t *total) {
    int64_t cap = 256;
    rmq_tq_entry_t **snap = NULL;
    for (;;) {
        rmq_tq_entry_t **ns = realloc(snap, (size_t)cap * sizeof(*ns));
        if (!ns) {
            free(snap);
            return -ENOMEM;
        }
        snap = ns;
        *total = rmq_tq_snapshot(&s->table, snap, cap);
        if (*total <= cap) break;
        cap = *total * 2;
    }
    *out = snap;
    return RMQ_OK;
}

int rmq_store_flush_commit_log(rmq_store_t *s, int least_pages, int64_t *where) {
    return rmq_mfq_flush(s->cl.mfq, least_pages, where);
}

static int save_checkpoint(rmq_store_t *s, int64_t dispatched, int64_t dispatched_ts) {
    rmq_checkpoint_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.confirm_phy_offset = rmq_mfq_flushed_where(s->cl.mfq);
    if (dispatched > cp.confirm_phy_offset) dispatched = cp.confirm_phy_offset;
    cp.dispatched_offset = dispatched;
    cp.physic_msg_timestamp = dispatched_ts;
    cp.logics_msg_timestamp = dispatched_ts;
    cp.index_msg_timestamp =
        s->index ? __atomic_load_n(&s->index_flushed_ts, __ATOMIC_RELAXED) : dispatched_ts;
    return rmq_checkpoint_save(s->checkpoint_fd, &cp);
}

int rmq_store_flush_logics(rmq_store_t *s, int least_pages) {
    int64_t dispatched = __atomic_load_n(&s->dispatched, __ATOMIC_ACQUIRE);
    int64_t ts = __atomic_load_n(&s->last_dispatched_ts, __ATOMIC_RELAXED);
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -ENOMEM;
    int rc = RMQ_OK;
    for (int64_t i = 0; i < total && rc == RMQ_OK; i++) {
        rmq_consume_queue_t *cq = __atomic_load_n(&snap[i]->cq, __ATOMIC_ACQUIRE);
        if (cq) rc = rmq_cq_flush(cq, least_pages);
    }
    free(snap);
    /* IndexFiles only on the thorough pass (least_pages 0: every
     * flushConsumeQueueThoroughInterval, and at close). Their hash slots are
     * written at random, so a flush a second wrote back most of the slot
     * table's 20 MB each time (21 MB/s of disk writes at 10k sends/s against
     * 4 MB/s without). A process crash loses nothing the page cache holds;
     * after the machine itself went down, recovery rebuilds what was not
     * flushed (index_msg_timestamp in the checkpoint, other_boot). */
    if (rc == RMQ_OK && s->index && least_pages == 0) {
        int64_t flushed_ts = -1;
        rc = rmq_index_service_flush(s->index, &flushed_ts);
        if (rc == RMQ_OK && flushed_ts >= 0)
            __atomic_store_n(&s->index_flushed_ts, flushed_ts, __ATOMIC_RELAXED);
    }
    if (rc == RMQ_OK) rc = save_checkpoint(s, dispatched, ts);
    return rc;
}

int rmq_store_delete_expired_commit_log(rmq_store_t *s, int64_t expire_ms, int64_t now_ms,
                                        int force, int max_files) {
    return rmq_mfq_delete_expired_by_time(s->cl.mfq, expire_ms, now_ms, force, max_files);
}

int rmq_store_delete_expired_logics(rmq_store_t *s) {
    int64_t clog_min = rmq_mfq_min_offset(s->cl.mfq);
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -ENOMEM;
    int deleted = 0;
    for (int64_t i = 0; i < total; i++) {
        rmq_consume_queue_t *cq = __atomic_load_n(&snap[i]->cq, __ATOMIC_ACQUIRE);
        if (!cq) continue;
        int k = rmq_cq_delete_expired(cq, clog_min);
        if (k > 0) deleted += k;
    }
    free(snap);
    if (s->index) {
        int k = rmq_index_service_delete_before(s->index, clog_min);
        if (k > 0) deleted += k;
    }
    return deleted;
}

static int delete_topic_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen) {
    int rc = rmq_validate_topic(topic, tlen);
    if (rc != RMQ_OK) return rc;
    int deleted = 0;
    for (int32_t qid = 0; qid < s->cfg.max_queue_nums; qid++) {
        rmq_tq_entry_t *e = rmq_tq_remove(&s->table, topic, tlen, qid);
        if (!e) continue;
        if (e->cq) {
            rmq_consume_queue_t **g = realloc(s->graveyard, (size_t)(s->graveyard_count + 1) * sizeof(*g));
            if (!g) {
                free(e);
                return -ENOMEM;
            }
            s->graveyard = g;
            rmq_mfq_destroy_all(e->cq->mfq);
            s->graveyard[s->graveyard_count++] = e->cq;
        }
        free(e);
        deleted++;
    }
    /* Make the deletion stick across a crash: with the checkpoint past every
     * record of the topic, recovery will not rebuild its queues. */
    rc = rmq_store_flush_commit_log(s, 0, NULL);
    if (rc == RMQ_OK) rc = rmq_store_flush_logics(s, 0);
    if (rc != RMQ_OK) return rc;
    char dir[PATH_MAX];
    int k = snprintf(dir, sizeof(dir), "%s/%.*s", s->cq_root, (int)tlen, (const char *)topic);
    if (k > 0 && (size_t)k < sizeof(dir)) {
        DIR *d = opendir(dir);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.') continue;
                char sub[PATH_MAX];
                if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) < (int)sizeof(sub))
                    rmdir(sub);
            }
            closedir(d);
            rmdir(dir);
        }
    }
    return deleted;
}

/* ---- open / close (recovery: store_recovery.c) ------------------------- */

static int is_known_entry(const char *name) {
    /* timerwheel: the broker's timer (pyrmq/broker/timer.py) */
    static const char *known[] = {"commitlog", "consumequeue", "index",      "checkpoint",
                                  "abort",     "lock",         "config",     "timerwheel",
                                  NULL};
    for (int i = 0; known[i]; i++)
        if (strcmp(name, known[i]) == 0) return 1;
    return 0;
}

static int check_root(const char *root) {
    int rc = rmq_mkdirs(root);
    if (rc != RMQ_OK) return rc;
    DIR *d = opendir(root);
    if (!d) return -errno;
    struct dirent *e;
    rc = RMQ_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!is_known_entry(e->d_name)) {
            rc = RMQ_ENOT_STORE;
            break;
        }
    }
    closedir(d);
    return rc;
}

static int parse_qid(const char *name, int32_t *qid) {
    if (!*name || strlen(name) > 9) return 0;
    int32_t v = 0;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    *qid = v;
    return 1;
}

static int load_consume_queues(rmq_store_t *s, int *count) {
    int rc = rmq_mkdirs(s->cq_root);
    if (rc != RMQ_OK) return rc;
    DIR *d = opendir(s->cq_root);
    if (!d) return -errno;
    struct dirent *te;
    rc = RMQ_OK;
    while (rc == RMQ_OK && (te = readdir(d)) != NULL) {
        if (te->d_name[0] == '.') continue;
        int32_t tlen = (int32_t)strlen(te->d_name);
        if (rmq_validate_topic((const uint8_t *)te->d_name, tlen) != RMQ_OK) {
            rc = RMQ_ENOT_STORE;
            break;
        }
        char tdir[PATH_MAX];
        if (snprintf(tdir, sizeof(tdir), "%s/%s", s->cq_root, te->d_name) >= (int)sizeof(tdir)) {
            rc = RMQ_EBAD_ARG;
            break;
        }
        DIR *qd = opendir(tdir);
        if (!qd) {
            rc = RMQ_ENOT_STORE;
            break;
        }
        struct dirent *qe;
        while (rc == RMQ_OK && (qe = readdir(qd)) != NULL) {
            if (qe->d_name[0] == '.') continue;
            int32_t qid;
            if (!parse_qid(qe->d_name, &qid) || qid >= s->cfg.max_queue_nums) {
                rc = RMQ_ENOT_STORE;
                break;
            }
            rmq_tq_entry_t *e = rmq_tq_get(&s->table, (const uint8_t *)te->d_name, tlen, qid, 1);
            if (!e) {
                rc = -ENOMEM;
                break;
            }
            rc = entry_cq(s, e, &e->cq);
            if (rc == RMQ_OK) (*count)++;
        }
        closedir(qd);
    }
    closedir(d);
    return rc;
}


int rmq_store_open(const rmq_store_config_t *cfg, rmq_store_t **out, rmq_recovery_report_t *rep) {
    *out = NULL;
    memset(rep, 0, sizeof(*rep));
    if (!cfg->root || cfg->commit_log_file_size <= 0 || cfg->cq_units_per_file <= 0 ||
        cfg->max_message_size <= 0 || cfg->max_queue_nums <= 0 ||
        (cfg->store_host_len != 8 && cfg->store_host_len != 20))
        return RMQ_EBAD_ARG;
    int rc = check_root(cfg->root);
    if (rc != RMQ_OK) return rc;
    rmq_store_t *s = calloc(1, sizeof(*s));
    if (!s) return -ENOMEM;
    s->checkpoint_fd = -1;
    s->lock_fd = -1;
    pthread_mutex_init(&s->index_build_lock, NULL);
    rmq_index_thread_init(&s->index_thread);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->owner_lock, &attr);
    pthread_mutexattr_destroy(&attr);
    s->cfg = *cfg;
    memcpy(s->store_host, cfg->store_host, (size_t)cfg->store_host_len);
    s->root = strdup(cfg->root);
    s->cq_root = rmq_path_join(cfg->root, "consumequeue");
    s->cfg.root = s->root;
    s->cfg.store_host = s->store_host;
    if (!s->root || !s->cq_root || rmq_tq_init(&s->table) != RMQ_OK) {
        rmq_store_close(s);
        return -ENOMEM;
    }
    char *lockpath = rmq_path_join(s->root, "lock");
    s->lock_fd = lockpath ? open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    free(lockpath);
    if (s->lock_fd < 0) {
        rc = -errno;
        rmq_store_close(s);
        return rc;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        close(s->lock_fd);
        s->lock_fd = -1;
        rmq_store_close(s);
        return RMQ_ELOCKED;
    }
    char *cldir = rmq_path_join(s->root, "commitlog");
    rc = cldir ? rmq_mfq_open(cldir, cfg->commit_log_file_size, cfg->warm_mapped_files, &s->cl.mfq)
               : -ENOMEM;
    free(cldir);
    if (rc == RMQ_OK) {
        s->cl.table = &s->table;
        s->cl.max_message_size = cfg->max_message_size;
        s->cl.max_queue_nums = cfg->max_queue_nums;
        memcpy(s->cl.store_host, cfg->store_host, (size_t)cfg->store_host_len);
        s->cl.store_host_len = cfg->store_host_len;
        rc = load_consume_queues(s, &rep->consume_queues);
    }
    rmq_checkpoint_t cp;
    memset(&cp, 0, sizeof(cp));
    if (rc == RMQ_OK) {
        char *ckpath = rmq_path_join(s->root, "checkpoint");
        rep->checkpoint_valid = ckpath && rmq_checkpoint_load(ckpath, &cp) == RMQ_OK;
        free(ckpath);
        rc = rmq_store_judge_abort_marker(s->root, rep);
    }
    if (rc == RMQ_OK && cfg->index_enable) {
        char *idir = rmq_path_join(s->root, "index");
        /* after the machine went down: trust IndexFiles only as far as their
         * last flush (0: no checkpoint says how far, rebuild them all) */
        if (rep->checkpoint_valid && cp.index_msg_timestamp > 0)
            s->index_flushed_ts = cp.index_msg_timestamp; /* until the next flush says more */
        int64_t distrust = rep->other_boot ? s->index_flushed_ts : -1;
        int dropped = 0;
        rc = idir ? rmq_index_service_drop_damaged(idir, cfg->index_hash_slot_num, cfg->index_num,
                                                   distrust, &dropped)
                  : -ENOMEM;
        rep->index_files_dropped = dropped;
        if (rc == RMQ_OK)
            rc = rmq_index_service_open(idir, cfg->index_hash_slot_num, cfg->index_num, &s->index);
        free(idir);
    }
    if (rc == RMQ_OK) rc = rmq_store_recover(s, rep, &cp);
    if (rc == RMQ_OK) rc = rmq_store_write_abort_marker(s->root);
    if (rc != RMQ_OK) {
        /* Leave the abort marker as it was: nothing was changed for a clean
         * store, and an unclean one stays unclean. */
        s->checkpoint_fd = s->checkpoint_fd >= 0 ? (close(s->checkpoint_fd), -1) : -1;
        rmq_store_close(s);
        return rc;
    }
    *out = s;
    return RMQ_OK;
}

int rmq_store_close(rmq_store_t *s) {
    if (!s) return RMQ_OK;
    int rc = RMQ_OK;
    rmq_store_index_thread_stop(s);
    if (s->cl.mfq && s->checkpoint_fd >= 0) {
        int64_t n = 1;
        while (rc == RMQ_OK && n > 0) rc = rmq_store_build_index(s, INT64_MAX, &n);
        if (rc == RMQ_OK) rc = rmq_store_flush_commit_log(s, 0, NULL);
        if (rc == RMQ_OK) rc = rmq_store_flush_logics(s, 0);
        if (rc == RMQ_OK && s->root) {
            char *abpath = rmq_path_join(s->root, "abort");
            if (abpath) unlink(abpath);
            free(abpath);
        }
    }
    if (s->table.slots) {
        int64_t n = rmq_tq_snapshot(&s->table, NULL, 0);
        rmq_tq_entry_t **snap = calloc((size_t)(n ? n : 1), sizeof(*snap));
        if (snap) {
            rmq_tq_snapshot(&s->table, snap, n);
            for (int64_t i = 0; i < n; i++) rmq_cq_close(snap[i]->cq);
            free(snap);
        }
        rmq_tq_free(&s->table);
    }
    for (int i = 0; i < s->graveyard_count; i++) rmq_cq_close(s->graveyard[i]);
    free(s->graveyard);
    if (s->index) rmq_index_service_close(s->index);
    if (s->cl.mfq) rmq_mfq_close(s->cl.mfq);
    if (s->checkpoint_fd >= 0) close(s->checkpoint_fd);
    if (s->lock_fd >= 0) close(s->lock_fd);
    pthread_mutex_destroy(&s->index_build_lock);
    rmq_index_thread_destroy(&s->index_thread);
    pthread_mutex_destroy(&s->owner_lock);
    free(s->root);
    free(s->cq_root);
    free(s);
    return rc;
}

/* The owner calls, each under the owner lock (message_store.h). */
int rmq_store_dispatch(rmq_store_t *s, int64_t *n) {
    RMQ_STORE_OWNED(int, dispatch_owned(s, n));
}

int rmq_store_put(rmq_store_t *s, const rmq_msg_in_t *m, rmq_append_result_t *r) {
    RMQ_STORE_OWNED(int, put_owned(s, m, r));
}

int rmq_store_put_batch(rmq_store_t *s, const rmq_msg_in_t *proto, const uint8_t *batch,
                        int64_t batch_len, rmq_append_result_t *r) {
    RMQ_STORE_OWNED(int, put_batch_owned(s, proto, batch, batch_len, r));
}

int rmq_store_append_replica(rmq_store_t *s, int64_t offset, const uint8_t *data, int64_t len,
                             int64_t *accepted, int32_t *rolled) {
    RMQ_STORE_OWNED(int, append_replica_owned(s, offset, data, len, accepted, rolled));
}

int rmq_store_truncate(rmq_store_t *s, int64_t offset) {
    RMQ_STORE_OWNED(int, truncate_owned(s, offset));
}

int rmq_store_delete_topic(rmq_store_t *s, const uint8_t *topic, int32_t tlen) {
    RMQ_STORE_OWNED(int, delete_topic_owned(s, topic, tlen));
}
