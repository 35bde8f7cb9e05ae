#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/* The store's read path (RocketMQ DefaultMessageStore's getMessage,
 * getMin/MaxOffsetInQueue, getOffsetInQueueByTime, queryMessage): it reads
 * ConsumeQueues, the CommitLog and the IndexFiles; message_store.c writes and
 * dispatches them, store_recovery.c recovers them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endian.h"
#include "message_store.h"
#include "rmq_errors.h"
#include "rmq_format.h"
#include "store_internal.h"

static rmq_consume_queue_t *find_cq(rmq_store_t *s, const uint8_t *topic, int32_t tlen,
                                    int32_t qid) {
    rmq_tq_entry_t *e = rmq_tq_get(&s->table, topic, tlen, qid, 0);
    return e ? e->cq : NULL;
}

static int64_t min_offset_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid) {
    rmq_consume_queue_t *cq = find_cq(s, topic, tlen, qid);
    return cq ? rmq_cq_min_offset(cq) : -1;
}

static int64_t max_offset_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid) {
    rmq_consume_queue_t *cq = find_cq(s, topic, tlen, qid);
    return cq ? rmq_cq_max_offset(cq) : -1;
}

static int64_t store_ts_at(rmq_store_t *s, int64_t phys) {
    rmq_mapped_file_t *f;
    const uint8_t *p;
    int64_t avail;
    if (rmq_commit_log_read_pinned(&s->cl, phys, &f, &p, &avail) != RMQ_OK) return -1;
    rmq_record_view_t v;
    int rc = rmq_record_decode(p, avail, &v);
    rmq_mapped_file_unpin(f);
    return rc == RMQ_OK ? v.store_timestamp : -1;
}

static int64_t offset_by_time_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid,
                                    int64_t ts) {
    rmq_consume_queue_t *cq = find_cq(s, topic, tlen, qid);
    if (!cq) return -1;
    int64_t lo = rmq_cq_min_offset(cq), hi = rmq_cq_max_offset(cq);
    int64_t clog_min = rmq_mfq_min_offset(s->cl.mfq);
    /* Smallest offset in [lo, hi) with store time >= ts; units whose record
     * is gone count as older than anything. */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        rmq_cq_unit_t u;
        int64_t t = -1;
        if (rmq_cq_get(cq, mid, &u) == RMQ_OK && u.size > 0 && u.phys_offset >= clog_min)
            t = store_ts_at(s, u.phys_offset);
        if (t >= ts)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Whether the record a unit names has the header the unit promises: a
 * record of this queue at this offset, of this size, in a ConsumeQueue. It
 * catches units damaged at rest where recovery did not look (before the
 * segment its scan starts in), and units of records that were replaced by
 * the damaged-range filler. Reads 40 bytes that the pull sends next anyway;
 * *pin caches the pinned segment across calls (the caller unpins it).
 * Recovery checks units with it too: the rest of a record was checked by its
 * scan, and reading the topic as well would cost a cache miss a record
 * (+0.1 s on 2M records). */
int rmq_store_unit_names_record(rmq_store_t *s, const rmq_cq_unit_t *u, int64_t qoff, int32_t qid,
                                rmq_mapped_file_t **pin) {
    rmq_mapped_file_t *f = *pin;
    if (!f || u->phys_offset < f->from_offset || u->phys_offset >= f->from_offset + f->file_size) {
        if (f) rmq_mapped_file_unpin(f);
        *pin = NULL;
        if (rmq_mfq_find_pinned(s->cl.mfq, u->phys_offset, &f) != RMQ_OK) return 0;
        *pin = f;
    }
    int64_t rel = u->phys_offset - f->from_offset;
    if (u->size < RMQ_RECORD_FIXED_IPV4 || rel + u->size > rmq_mapped_file_wrote(f)) return 0;
    const uint8_t *p = f->base + rel;
    int32_t magic = rmq_get_be32(p + 4);
    return rmq_get_be32(p) == u->size &&
           (magic == RMQ_MESSAGE_MAGIC_CODE || magic == RMQ_MESSAGE_MAGIC_CODE_V2) &&
           rmq_get_be32(p + 12) == qid && rmq_get_be64(p + 20) == qoff &&
           rmq_get_be64(p + 28) == u->phys_offset &&
           rmq_sysflag_in_consume_queue(rmq_get_be32(p + 36));
}

static int get_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid,
                     int64_t offset, int32_t max_msgs, int64_t max_bytes, const int32_t *tags,
                     int32_t ntags, int64_t max_phys, rmq_cq_unit_t *out, rmq_get_result_t *res) {
    memset(res, 0, sizeof(*res));
    res->next_begin_offset = offset;
    res->status = RMQ_GET_NO_MESSAGE_IN_QUEUE;
    if (max_msgs <= 0) return RMQ_EBAD_ARG;
    rmq_consume_queue_t *cq = find_cq(s, topic, tlen, qid);
    if (!cq) {
        res->status = RMQ_GET_NO_MATCHED_LOGIC_QUEUE;
        res->next_begin_offset = 0;
        return RMQ_OK;
    }
    int64_t mn = rmq_cq_min_offset(cq), mx = rmq_cq_max_offset(cq);
    res->min_offset = mn;
    res->max_offset = mx;
    if (mx == 0) {
        res->status = RMQ_GET_NO_MESSAGE_IN_QUEUE;
        res->next_begin_offset = 0;
        return RMQ_OK;
    }
    if (offset < mn) {
        res->status = RMQ_GET_OFFSET_TOO_SMALL;
        res->next_begin_offset = mn;
        return RMQ_OK;
    }
    if (offset == mx) {
        res->status = RMQ_GET_OFFSET_OVERFLOW_ONE;
        res->next_begin_offset = offset;
        return RMQ_OK;
    }
    if (offset > mx) {
        res->status = RMQ_GET_OFFSET_OVERFLOW_BADLY;
        res->next_begin_offset = mx;
        return RMQ_OK;
    }
    /* Scan at most max(16000 B, max_msgs * 20 B) of units (RocketMQ's
     * maxFilterMessageCount), within one CQ segment. */
    int64_t max_scan = 16000 / RMQ_CQ_STORE_UNIT_SIZE;
    if (max_msgs > max_scan) max_scan = max_msgs;
    int64_t seg_units = s->cfg.cq_units_per_file;
    int64_t to_seg_end = seg_units - offset % seg_units;
    if (max_scan > to_seg_end) max_scan = to_seg_end;
    int64_t clog_min = rmq_mfq_min_offset(s->cl.mfq);
    int64_t clog_max = rmq_mfq_max_offset(s->cl.mfq);
    res->status = RMQ_GET_NO_MATCHED_MESSAGE;
    int64_t scanned_total = 0;
    int32_t kept = 0;
    int64_t bytes = 0;
    int64_t next_phy_file = -1;
    rmq_cq_unit_t batch[64];
    int64_t qoffs[64];
    int64_t next = offset;
    int stop = 0;
    rmq_mapped_file_t *pin = NULL;
    while (!stop && next - offset < max_scan) {
        int n;
        int64_t scanned;
        int64_t want = max_scan - (next - offset);
        /* Without a tag filter every unit is a candidate: read no more
         * units than can still be returned (and one to find the resume
         * point), so small pulls touch only the lines they need. */
        int room = 64;
        if (ntags == 0 && max_msgs - kept + 1 < room) room = max_msgs - kept + 1;
        int rc = rmq_cq_read_filtered(cq, next, want, NULL, 0, batch, qoffs, room, &n, &scanned);
        if (rc == RMQ_ENOT_FOUND && next == offset) {
            res->status = RMQ_GET_OFFSET_FOUND_NULL;
            res->next_begin_offset = offset + to_seg_end;
            return RMQ_OK;
        }
        if (rc != RMQ_OK || scanned == 0) break;
        for (int i = 0; i < n; i++) {
            rmq_cq_unit_t *u = &batch[i];
            if (kept > 0 && (kept >= max_msgs || bytes + u->size > max_bytes)) {
                next = qoffs[i]; /* the batch is full: resume at this unit */
                stop = 1;
                break;
            }
            if (max_phys >= 0 && u->phys_offset + u->size > max_phys) {
                /* not confirmed yet: neither served nor skipped (a failover
                 * may replace it with another record at this queue offset) */
                next = qoffs[i];
                stop = 1;
                if (kept == 0) res->status = RMQ_GET_OFFSET_OVERFLOW_ONE;
                break;
            }
            if (next_phy_file >= 0 && u->phys_offset < next_phy_file) continue;
            int match = ntags == 0;
            for (int t = 0; t < ntags && !match; t++) match = tags[t] == (int32_t)u->tags_code;
            if (!match) continue;
            if (u->phys_offset < clog_min || u->phys_offset + u->size > clog_max) {
                if (kept == 0) res->status = RMQ_GET_MESSAGE_WAS_REMOVING;
                next_phy_file = rmq_commit_log_roll_next(&s->cl, u->phys_offset);
                continue;
            }
            if (!rmq_store_unit_names_record(s, u, qoffs[i], qid, &pin)) continue;
            out[kept++] = *u;
            bytes += u->size;
            res->status = RMQ_GET_FOUND;
            next_phy_file = -1;
        }
        if (!stop) next += scanned;
        if (kept >= max_msgs && !stop) break;
    }
    if (pin) rmq_mapped_file_unpin(pin);
    (void)scanned_total;
    res->count = kept;
    res->total_bytes = bytes;
    res->next_begin_offset = next;
    return RMQ_OK;
}

/* Whether key is one of the record's IndexFile keys (an index hit is
 * only a hash match). */
static int record_has_key(const rmq_record_view_t *v, const uint8_t *key, int32_t klen) {
    rmq_index_keys_t keys;
    rmq_index_keys_init(&keys, v->props, v->props_len);
    const uint8_t *k;
    int32_t kl;
    while (rmq_index_keys_next(&keys, &k, &kl))
        if (kl == klen && memcmp(k, key, (size_t)klen) == 0) return 1;
    return 0;
}

static int query_key_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, const uint8_t *key,
                           int32_t klen, int64_t begin_ts, int64_t end_ts, int64_t *out, int max,
                           int *n) {
    *n = 0;
    if (!s->index || max <= 0) return RMQ_OK;
    for (int64_t built = 1; built > 0;) {
        int brc = rmq_store_build_index(s, INT64_MAX, &built);
        if (brc != RMQ_OK) return brc;
    }
    return rmq_store_find_key(s, topic, tlen, key, klen, begin_ts, end_ts, out, max, n);
}

static int find_key_owned(rmq_store_t *s, const uint8_t *topic, int32_t tlen, const uint8_t *key,
                          int32_t klen, int64_t begin_ts, int64_t end_ts, int64_t *out, int max,
                          int *n) {
    *n = 0;
    if (!s->index || max <= 0) return RMQ_OK;
    int cap = max * 4 + 16;
    int64_t *cand = malloc((size_t)cap * sizeof(*cand));
    if (!cand) return -ENOMEM;
    int nc = 0;
    int rc = rmq_index_service_query(s->index, topic, (size_t)tlen, key, (size_t)klen, begin_ts,
                                     end_ts, cand, cap, &nc);
    int64_t clog_max = rmq_mfq_max_offset(s->cl.mfq);
    for (int i = 0; rc == RMQ_OK && i < nc && *n < max; i++) {
        if (cand[i] >= clog_max) continue;
        rmq_mapped_file_t *f;
        const uint8_t *p;
        int64_t avail;
        if (rmq_commit_log_read_pinned(&s->cl, cand[i], &f, &p, &avail) != RMQ_OK) continue;
        rmq_record_view_t v;
        int ok = rmq_record_decode(p, avail, &v) == RMQ_OK && v.phys_offset == cand[i] &&
                 v.topic_len == tlen && memcmp(v.topic, topic, (size_t)tlen) == 0 &&
                 v.store_timestamp >= begin_ts && v.store_timestamp <= end_ts &&
                 record_has_key(&v, key, klen);
        rmq_mapped_file_unpin(f);
        if (ok) out[(*n)++] = cand[i];
    }
    free(cand);
    return rc;
}

/* The owner calls, each under the owner lock (message_store.h). */
int64_t rmq_store_min_offset(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid) {
    RMQ_STORE_OWNED(int64_t, min_offset_owned(s, topic, tlen, qid));
}

int64_t rmq_store_max_offset(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid) {
    RMQ_STORE_OWNED(int64_t, max_offset_owned(s, topic, tlen, qid));
}

int rmq_store_get(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid, int64_t offset,
                  int32_t max_msgs, int64_t max_bytes, const int32_t *tags, int32_t ntags,
                  int64_t max_phys, rmq_cq_unit_t *out, rmq_get_result_t *res) {
    RMQ_STORE_OWNED(int, get_owned(s, topic, tlen, qid, offset, max_msgs, max_bytes, tags, ntags,
                                   max_phys, out, res));
}

int rmq_store_query_key(rmq_store_t *s, const uint8_t *topic, int32_t tlen, const uint8_t *key,
                        int32_t klen, int64_t begin_ts, int64_t end_ts, int64_t *out, int max,
                        int *n) {
    RMQ_STORE_OWNED(int, query_key_owned(s, topic, tlen, key, klen, begin_ts, end_ts, out, max, n));
}

int rmq_store_find_key(rmq_store_t *s, const uint8_t *topic, int32_t tlen, const uint8_t *key,
                       int32_t klen, int64_t begin_ts, int64_t end_ts, int64_t *out, int max,
                       int *n) {
    RMQ_STORE_OWNED(int, find_key_owned(s, topic, tlen, key, klen, begin_ts, end_ts, out, max, n));
}

int64_t rmq_store_offset_by_time(rmq_store_t *s, const uint8_t *topic, int32_t tlen, int32_t qid,
                                 int64_t ts) {
    RMQ_STORE_OWNED(int64_t, offset_by_time_owned(s, topic, tlen, qid, ts));
}
