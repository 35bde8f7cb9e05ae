#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "consume_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endian.h"
#include "rmq_errors.h"
#include "rmq_format.h"

#define UNIT RMQ_CQ_STORE_UNIT_SIZE

int rmq_cq_open(const char *dir, int32_t queue_id, int64_t units_per_file, rmq_consume_queue_t **out) {
    *out = NULL;
    if (units_per_file <= 0) return RMQ_EBAD_ARG;
    rmq_consume_queue_t *cq = calloc(1, sizeof(*cq));
    if (!cq) return -ENOMEM;
    int rc = rmq_mfq_open(dir, units_per_file * UNIT, 0, &cq->mfq);
    if (rc != RMQ_OK) {
        free(cq);
        return rc;
    }
    cq->queue_id = queue_id;
    cq->min_logic_offset = rmq_mfq_min_offset(cq->mfq);
    *out = cq;
    return RMQ_OK;
}

void rmq_cq_close(rmq_consume_queue_t *cq) {
    if (!cq) return;
    rmq_mfq_close(cq->mfq);
    free(cq);
}

void rmq_cq_destroy(rmq_consume_queue_t *cq) {
    if (!cq) return;
    rmq_mfq_destroy_all(cq->mfq);
    rmq_cq_close(cq);
}

int64_t rmq_cq_min_offset(rmq_consume_queue_t *cq) {
    return __atomic_load_n(&cq->min_logic_offset, __ATOMIC_ACQUIRE) / UNIT;
}

int64_t rmq_cq_max_offset(rmq_consume_queue_t *cq) { return rmq_mfq_max_offset(cq->mfq) / UNIT; }

static void write_unit(uint8_t *p, int64_t phys, int32_t size, int64_t tags) {
    rmq_put_be64(p, phys);
    rmq_put_be32(p + 8, size);
    rmq_put_be64(p + 12, tags);
}

void rmq_cq_unit_decode(const uint8_t *p, rmq_cq_unit_t *u) {
    u->phys_offset = rmq_get_be64(p);
    u->size = rmq_get_be32(p + 8);
    u->tags_code = rmq_get_be64(p + 12);
}


int rmq_cq_put(rmq_consume_queue_t *cq, int64_t qoff, int64_t phys_offset, int32_t size,
               int64_t tags_code) {
    if (qoff < 0) return RMQ_EBAD_ARG;
    int64_t pos = qoff * UNIT;
    int empty = rmq_mfq_last(cq->mfq) == NULL;
    int64_t max = rmq_mfq_max_offset(cq->mfq);
    if (!empty && pos < max) return RMQ_OK; /* already there */
    for (;;) {
        rmq_mapped_file_t *f;
        int rc = rmq_mfq_last_for_append(cq->mfq, pos, &f);
        if (rc != RMQ_OK) return rc;
        if (empty) {
            __atomic_store_n(&cq->min_logic_offset, pos, __ATOMIC_RELEASE);
            empty = 0;
        }
        int64_t wrote = rmq_mapped_file_wrote(f);
        int64_t rel = pos - f->from_offset;
        if (rel >= f->file_size) {
            /* Gap across a segment: mark this one full and continue. */
            rmq_mapped_file_set_wrote(f, f->file_size);
            continue;
        }
        if (rel < wrote) return RMQ_OK;
        /* Units between wrote and rel stay zero: empty. */
        write_unit(f->base + rel, phys_offset, size, tags_code);
        rmq_mapped_file_set_wrote(f, rel + UNIT);
        if (phys_offset + size > cq->max_phy_end) cq->max_phy_end = phys_offset + size;
        return RMQ_OK;
    }
}

int rmq_cq_get(rmq_consume_queue_t *cq, int64_t qoff, rmq_cq_unit_t *u) {
    if (qoff < rmq_cq_min_offset(cq) || qoff >= rmq_cq_max_offset(cq)) return RMQ_ENOT_FOUND;
    rmq_mapped_file_t *f;
    int64_t pos = qoff * UNIT;
    int rc = rmq_mfq_find_pinned(cq->mfq, pos, &f);
    if (rc != RMQ_OK) return rc;
    rmq_cq_unit_decode(f->base + (pos - f->from_offset), u);
    rmq_mapped_file_unpin(f);
    return RMQ_OK;
}

int rmq_cq_read_filtered(rmq_consume_queue_t *cq, int64_t qoff, int64_t max_scan,
                         const int32_t *tags, int ntags, rmq_cq_unit_t *out, int64_t *out_qoffs,
                         int max_out, int *n_out, int64_t *scanned) {
    *n_out = 0;
    *scanned = 0;
    int64_t max = rmq_cq_max_offset(cq);
    if (qoff < rmq_cq_min_offset(cq)) return RMQ_ENOT_FOUND;
    int64_t n = 0;
    int kept = 0;
    while (n < max_scan && qoff + n < max && kept < max_out) {
        int64_t pos = (qoff + n) * UNIT;
        rmq_mapped_file_t *f;
        int rc = rmq_mfq_find_pinned(cq->mfq, pos, &f);
        if (rc != RMQ_OK) break;
        int64_t file_end = f->from_offset + rmq_mapped_file_wrote(f);
        const uint8_t *p = f->base + (pos - f->from_offset);
        while (n < max_scan && pos < file_end && kept < max_out) {
            rmq_cq_unit_t u;
            rmq_cq_unit_decode(p, &u);
            int keep = u.size > 0;
            if (keep && ntags > 0) {
                keep = 0;
                int32_t code = (int32_t)u.tags_code;
                for (int i = 0; i < ntags; i++)
                    if (tags[i] == code) {
                        keep = 1;
                        break;
                    }
            }
            if (keep) {
                out[kept] = u;
                if (out_qoffs) out_qoffs[kept] = qoff + n;
                kept++;
            }
            n++;
            pos += UNIT;
            p += UNIT;
        }
        rmq_mapped_file_unpin(f);
    }
    *n_out = kept;
    *scanned = n;
    return RMQ_OK;
}

/* Unit at absolute index idx during recovery (owner thread, no pin needed:
 * nothing else runs yet). 0 when there is no file for it. */
static int unit_at(rmq_mfq_t *q, int64_t idx, rmq_cq_unit_t *u) {
    rmq_mapped_file_t *f;
    if (rmq_mfq_find_pinned(q, idx * UNIT, &f) != RMQ_OK) return 0;
    rmq_cq_unit_decode(f->base + (idx * UNIT - f->from_offset), u);
    rmq_mapped_file_unpin(f);
    return 1;
}

static int unit_is_empty(const rmq_cq_unit_t *u) { return u->size == 0 && u->phys_offset == 0; }

int rmq_cq_recover(rmq_consume_queue_t *cq, int64_t phy_end) {
    rmq_mfq_t *q = cq->mfq;
    if (q->count == 0) return RMQ_OK;
    int64_t lo = rmq_mfq_min_offset(q) / UNIT;
    rmq_cq_unit_t u;
    /* 1. The written end: after the last non-empty unit (trailing units of
     *    the last files were never written). */
    int64_t hi = rmq_mfq_max_offset(q) / UNIT;
    while (hi > lo && unit_at(q, hi - 1, &u) && unit_is_empty(&u)) hi--;
    int64_t written = hi;
    cq->damaged = 0;
    if (q->first_short >= 0) {
        /* A file was cut: its units end where it ended (the zeros that pad it
         * back to size were never units), and so does the queue. */
        rmq_mapped_file_t *f;
        if (rmq_mfq_find_pinned(q, q->first_short, &f) == RMQ_OK) {
            int64_t cut = (f->from_offset + rmq_mapped_file_wrote(f)) / UNIT;
            rmq_mapped_file_unpin(f);
            if (cut < hi) hi = cut < lo ? lo : cut;
        }
        cq->damaged = 1;
        q->first_short = -1; /* handled: what is rebuilt past it is whole */
    }
    /* 2. Units point at increasing CommitLog offsets, so the ones that point
     *    past phy_end (the recovered CommitLog end) form a suffix: binary
     *    search for it over the whole queue, not just its last files. */
    int64_t a = lo, b = hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        int bad = unit_at(q, mid, &u) && !unit_is_empty(&u) &&
                  (u.size <= 0 || u.phys_offset < 0 || u.phys_offset + u.size > phy_end);
        if (bad)
            b = mid;
        else
            a = mid + 1;
    }
    int64_t end = a;
    /* 3. Check the recent units (the last 3 files, as RocketMQ) for damage:
     *    stop at the first that is malformed or not increasing. */
    int first = q->count > 3 ? q->count - 3 : 0;
    int64_t from = q->files[first]->from_offset / UNIT;
    if (from < lo) from = lo;
    int64_t last_phys = -1;
    for (int64_t k = from; k < end; k++) {
        if (!unit_at(q, k, &u)) {
            end = k;
            break;
        }
        if (unit_is_empty(&u)) continue;
        if (u.size <= 0 || u.phys_offset < 0 || u.phys_offset <= last_phys) {
            end = k;
            break;
        }
        last_phys = u.phys_offset;
    }
    /* 4. Drop empty units at the new end. */
    while (end > lo && unit_at(q, end - 1, &u) && unit_is_empty(&u)) end--;
    /* Units were dropped to damage unless every one of them pointed past
     * phy_end (a CommitLog cut back): the first or the last dropped one
     * pointing inside the log means they were lost, not obsolete. */
    if (end < written) {
        rmq_cq_unit_t first, last;
        int in_log = 0;
        if (unit_at(q, end, &first) && !unit_is_empty(&first))
            in_log |= first.size <= 0 || first.phys_offset < 0 ||
                      first.phys_offset + first.size <= phy_end;
        if (unit_at(q, written - 1, &last) && !unit_is_empty(&last))
            in_log |= last.size > 0 && last.phys_offset >= 0 &&
                      last.phys_offset + last.size <= phy_end;
        if (in_log) cq->damaged = 1;
    }
    cq->max_phy_end = 0;
    if (end > lo && unit_at(q, end - 1, &u)) cq->max_phy_end = u.phys_offset + u.size;
    int rc = rmq_mfq_truncate_dirty(q, end * UNIT);
    if (cq->min_logic_offset > end * UNIT) cq->min_logic_offset = end * UNIT;
    return rc;
}

int rmq_cq_truncate(rmq_consume_queue_t *cq, int64_t qoff) {
    rmq_mfq_t *q = cq->mfq;
    int64_t lo = rmq_mfq_min_offset(q) / UNIT;
    if (qoff < lo) qoff = lo;
    int rc = rmq_mfq_truncate_dirty(q, qoff * UNIT);
    if (cq->min_logic_offset > qoff * UNIT) cq->min_logic_offset = qoff * UNIT;
    rmq_cq_unit_t u;
    cq->max_phy_end = 0;
    for (int64_t k = qoff - 1; k >= lo; k--) { /* the last unit left (gaps are empty) */
        if (!unit_at(q, k, &u)) break;
        if (unit_is_empty(&u)) continue;
        cq->max_phy_end = u.phys_offset + u.size;
        break;
    }
    return rc;
}

int rmq_cq_delete_expired(rmq_consume_queue_t *cq, int64_t clog_min) {
    /* Move min_logic_offset to the first unit that still points into the
     * CommitLog (units' offsets increase: binary search; an empty unit
     * counts as expired), then drop whole segments below it. */
    int64_t lo = rmq_cq_min_offset(cq), hi = rmq_cq_max_offset(cq);
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        rmq_cq_unit_t u;
        int live = rmq_cq_get(cq, mid, &u) == RMQ_OK && u.size > 0 && u.phys_offset >= clog_min;
        if (live)
            hi = mid;
        else
            lo = mid + 1;
    }
    int64_t q = lo;
    __atomic_store_n(&cq->min_logic_offset, q * UNIT, __ATOMIC_RELEASE);
    return rmq_mfq_delete_before(cq->mfq, q * UNIT);
}

int rmq_cq_flush(rmq_consume_queue_t *cq, int least_pages) {
    return rmq_mfq_flush(cq->mfq, least_pages, NULL);
}
