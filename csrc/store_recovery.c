/* Recovery at open (RocketMQ's DefaultMessageStore.recover and
 * CommitLog.recoverNormally/recoverAbnormally, with the repairs of damage at
 * rest that RocketMQ does not make): the CommitLog scanned from the
 * checkpoint's segment, every record checked (structure, position, topic,
 * queue id, body CRC); a damaged range with intact records after it in the
 * flushed part quarantined with the filler, anywhere else the end of the
 * log; the ConsumeQueues trimmed and checked against the records; the
 * records past the dispatched offset dispatched again, each checked against
 * its queue. And the abort marker that tells a clean stop from a dead
 * process and from a machine gone down (rmq_format.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "endian.h"
#include "paths.h"
#include "rmq_errors.h"
#include "rmq_format.h"
#include "store_internal.h"

/* A record at off that passes every check recovery makes: structure,
 * position, topic, queue id and body CRC. *v points into the mapping, which
 * nothing unmaps during recovery. */
static int record_ok_at(rmq_store_t *s, int64_t off, rmq_record_view_t *v) {
    rmq_mapped_file_t *f;
    const uint8_t *p;
    int64_t avail;
    if (rmq_commit_log_read_pinned(&s->cl, off, &f, &p, &avail) != RMQ_OK) return 0;
    int ok = rmq_record_decode(p, avail, v) == RMQ_OK && v->phys_offset == off &&
             rmq_validate_topic(v->topic, v->topic_len) == RMQ_OK && v->queue_id >= 0 &&
             v->queue_id < s->cfg.max_queue_nums && v->queue_offset >= 0 && rmq_record_crc_ok(v);
    rmq_mapped_file_unpin(f);
    return ok;
}

/* An end-of-file blank record at off that runs exactly to its segment's end. */
static int blank_at(rmq_store_t *s, int64_t off) {
    rmq_mapped_file_t *f;
    const uint8_t *p;
    int64_t avail;
    if (rmq_commit_log_read_pinned(&s->cl, off, &f, &p, &avail) != RMQ_OK) return 0;
    int blank = avail >= 8 && rmq_get_be32(p + 4) == RMQ_BLANK_MAGIC_CODE &&
                rmq_get_be32(p) == avail && off - f->from_offset + avail == f->file_size;
    rmq_mapped_file_unpin(f);
    return blank;
}

/* The smallest record position a ConsumeQueue unit names in (after, limit). */
static int64_t next_unit_position(rmq_store_t *s, int64_t after, int64_t limit) {
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -1;
    int64_t best = -1;
    for (int64_t i = 0; i < total; i++) {
        rmq_consume_queue_t *cq = snap[i]->cq;
        if (!cq) continue;
        /* units increase: the first one past `after` (damaged units aside;
         * the never-written zero units that end a file count as past it) */
        int64_t lo = rmq_cq_min_offset(cq), hi = rmq_cq_max_offset(cq);
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            rmq_cq_unit_t u;
            if (rmq_cq_get(cq, mid, &u) == RMQ_OK && u.phys_offset <= after &&
                !(u.size == 0 && u.phys_offset == 0))
                lo = mid + 1;
            else
                hi = mid;
        }
        rmq_cq_unit_t u;
        if (rmq_cq_get(cq, lo, &u) == RMQ_OK && u.size > 0 && u.phys_offset > after &&
            u.phys_offset < limit && (best < 0 || u.phys_offset < best))
            best = u.phys_offset;
    }
    free(snap);
    return best;
}

/* Where intact records resume after a damaged one at off, within its
 * segment (seg_end when they resume in the next one), or -1 when nothing
 * intact follows (a torn tail). Tried in turn: the damaged record's own
 * length when its framing holds; the next record a ConsumeQueue knows of;
 * the next segment. */
static int64_t find_resume(rmq_store_t *s, int64_t off, int64_t seg_end) {
    rmq_record_view_t v;
    rmq_mapped_file_t *f;
    const uint8_t *p;
    int64_t avail;
    int next_segment_ok = record_ok_at(s, seg_end, &v);
    if (rmq_commit_log_read_pinned(&s->cl, off, &f, &p, &avail) == RMQ_OK) {
        int64_t cand = -1;
        if (rmq_record_decode(p, avail, &v) == RMQ_OK && v.phys_offset == off)
            cand = off + v.total_size;
        rmq_mapped_file_unpin(f);
        if (cand > off && cand < seg_end &&
            (record_ok_at(s, cand, &v) || (blank_at(s, cand) && next_segment_ok)))
            return cand;
        if (cand == seg_end && next_segment_ok) return cand;
    }
    int64_t after = off;
    for (int tries = 0; tries < 64; tries++) {
        int64_t cand = next_unit_position(s, after, seg_end);
        if (cand < 0) break;
        if (cand - off > RMQ_RECORD_FIXED_IPV4 && record_ok_at(s, cand, &v)) return cand;
        after = cand;
    }
    return next_segment_ok ? seg_end : -1;
}

/* Overwrite [from, to) with the damaged-range filler, make it durable, and
 * count it. */
static int quarantine(rmq_store_t *s, int64_t from, int64_t to) {
    int rc = rmq_commit_log_fill_damaged(&s->cl, from, to);
    rmq_mapped_file_t *f;
    if (rc == RMQ_OK && rmq_mfq_find_pinned(s->cl.mfq, from, &f) == RMQ_OK) {
        if (fdatasync(f->fd) != 0) rc = -errno;
        rmq_mapped_file_unpin(f);
    }
    if (rc == RMQ_OK && s->rep) {
        s->rep->damaged_ranges++;
        s->rep->bytes_damaged += to - from;
    }
    return rc;
}

/* Recovery's scan of the CommitLog from offset (a record boundary) to the end
 * of written data, checking every record as record_ok_at does. A record that
 * fails below s->durable_end, with intact records after it, is damage at
 * rest: the damaged range is overwritten with the filler and the scan goes
 * on. Anywhere else the log ends there (a torn write). Stops at limit. */
static int scan_repairing(rmq_store_t *s, int64_t offset, int64_t limit, int64_t *end,
                          int64_t *count, int64_t *last_store_ts) {
    int64_t n = 0;
    int64_t max = rmq_mfq_max_offset(s->cl.mfq);
    if (limit < max) max = limit;
    while (offset < max) {
        int64_t seg_end = rmq_commit_log_roll_next(&s->cl, offset);
        rmq_record_view_t v;
        if (record_ok_at(s, offset, &v)) {
            n++;
            if (last_store_ts) *last_store_ts = v.store_timestamp;
            offset += v.total_size;
            continue;
        }
        if (blank_at(s, offset)) {
            offset = seg_end;
            continue;
        }
        if (offset >= s->durable_end) break;
        int64_t resume = find_resume(s, offset, seg_end);
        if (resume < 0 || quarantine(s, offset, resume) != RMQ_OK) break;
        offset = resume;
    }
    *end = offset;
    if (count) *count = n;
    return RMQ_OK;
}

/* Recovery's check that a re-dispatched record agrees with its queue: its
 * queue offset is the queue's next one, or an existing unit that points at
 * this very record. A flipped byte in QUEUEID/QUEUEOFFSET/TOPIC of an
 * unflushed record (the body CRC does not cover them) fails here. */
static int record_fits_queue(rmq_store_t *s, const rmq_record_view_t *v) {
    rmq_tq_entry_t *e = rmq_tq_get(&s->table, v->topic, v->topic_len, v->queue_id, 0);
    rmq_consume_queue_t *cq = e ? e->cq : NULL;
    if (!cq || rmq_mfq_last(cq->mfq) == NULL) return v->queue_offset == 0;
    int64_t max = rmq_cq_max_offset(cq);
    if (v->queue_offset > max) return 0;
    /* units are put in CommitLog order: the next one is after the last */
    if (v->queue_offset == max) return v->phys_offset >= cq->max_phy_end;
    rmq_cq_unit_t u;
    if (rmq_cq_get(cq, v->queue_offset, &u) != RMQ_OK) return 1; /* expired head */
    return u.phys_offset == v->phys_offset && u.size == v->total_size;
}

enum { FIT_OK, FIT_RECORD_DAMAGED, FIT_QUEUE_DAMAGED };

/* For a durable record that does not fit its queue: which of the two is
 * wrong. The record, when the unit at its queue offset names another intact
 * record with the same topic, queue and offset, when it would be appended
 * before the queue's last unit (units follow the log), or when its offset
 * leaves a gap larger than damage explains (units lost with the records
 * quarantined in this recovery, at most one ConsumeQueue file); else the
 * queue (always, when the queue has no unit left: a record is never
 * overwritten for want of a queue to compare it with). */
static int judge_misfit(rmq_store_t *s, const rmq_record_view_t *v) {
    rmq_tq_entry_t *e = rmq_tq_get(&s->table, v->topic, v->topic_len, v->queue_id, 0);
    rmq_consume_queue_t *cq = e ? e->cq : NULL;
    /* A queue with no unit at all lost its files (they are derived data):
     * it starts again at this record, in one file whatever the offset. */
    if (!cq || rmq_mfq_last(cq->mfq) == NULL) return FIT_QUEUE_DAMAGED;
    int64_t max = rmq_cq_max_offset(cq);
    if (v->queue_offset >= max) {
        if (v->phys_offset < cq->max_phy_end) return FIT_RECORD_DAMAGED; /* not an append */
        int64_t gap = v->queue_offset - max;
        int64_t lost = s->rep ? s->rep->bytes_damaged / RMQ_RECORD_FIXED_IPV4 : 0;
        int64_t allowed = cq->damaged ? s->cfg.cq_units_per_file : lost;
        if (allowed > s->cfg.cq_units_per_file) allowed = s->cfg.cq_units_per_file;
        return gap <= allowed ? FIT_QUEUE_DAMAGED : FIT_RECORD_DAMAGED;
    }
    rmq_cq_unit_t u;
    rmq_record_view_t w;
    if (rmq_cq_get(cq, v->queue_offset, &u) == RMQ_OK && u.phys_offset != v->phys_offset &&
        record_ok_at(s, u.phys_offset, &w) && w.total_size == u.size &&
        w.queue_id == v->queue_id && w.queue_offset == v->queue_offset &&
        w.topic_len == v->topic_len && memcmp(w.topic, v->topic, (size_t)v->topic_len) == 0)
        return FIT_RECORD_DAMAGED;
    return FIT_QUEUE_DAMAGED;
}

int rmq_store_check_redispatch(rmq_store_t *s, const rmq_record_view_t *v, int *skip) {
    *skip = 0;
    if (record_fits_queue(s, v)) return RMQ_OK;
    /* In the unflushed tail the log ends before it (a torn write); in the
     * durable part, one of the two was damaged at rest. */
    if (v->phys_offset >= s->durable_end) return RMQ_ECORRUPT;
    if (judge_misfit(s, v) == FIT_RECORD_DAMAGED) {
        *skip = 1;
        return quarantine(s, v->phys_offset, v->phys_offset + v->total_size);
    }
    rmq_tq_entry_t *e = rmq_tq_get(&s->table, v->topic, v->topic_len, v->queue_id, 0);
    if (e && e->cq && v->queue_offset < rmq_cq_max_offset(e->cq)) {
        /* units from here on are wrong: rebuild them from the log */
        int rc = rmq_cq_truncate(e->cq, v->queue_offset);
        if (rc != RMQ_OK) return rc;
        if (!e->cq->damaged && s->rep) s->rep->consume_queues_repaired++;
        e->cq->damaged = 1;
    }
    return RMQ_OK;
}

/* 1 when the record a unit names (rmq_store_unit_names_record passed, in
 * the pinned file f) carries the queue's topic. Reads check only the fixed
 * header; recovery checks the TOPIC too: after a crash, a byte of it may
 * have changed in the unflushed tail while the ConsumeQueue unit made at the
 * put survived in the page cache, and the record then belongs to another
 * queue (the body CRC does not cover the topic). */
static int unit_record_has_topic(const rmq_mapped_file_t *f, const rmq_cq_unit_t *u,
                                 const rmq_tq_entry_t *e) {
    int64_t rel = u->phys_offset - f->from_offset;
    rmq_record_view_t v;
    return rmq_record_decode(f->base + rel, rmq_mapped_file_wrote(f) - rel, &v) == RMQ_OK &&
           v.topic_len == e->topic_len && memcmp(v.topic, e->topic, (size_t)e->topic_len) == 0;
}

/* Check the units of one queue that name records at or after verify_from
 * (the part of the log recovery just verified) against the records there
 * (header and topic); cut the queue at the first that disagrees (its records
 * are then dispatched again; units of records quarantined as damaged come
 * back as empty units, which reads skip). Units are read 64 at a time, one
 * pin of their file each. */
static int verify_units(rmq_store_t *s, rmq_tq_entry_t *e, int64_t verify_from) {
    rmq_consume_queue_t *cq = e->cq;
    int64_t lo = rmq_cq_min_offset(cq), hi = rmq_cq_max_offset(cq);
    int64_t a = lo, b = hi;
    while (a < b) { /* the first unit naming a record at or after verify_from */
        int64_t mid = a + (b - a) / 2;
        rmq_cq_unit_t u;
        if (rmq_cq_get(cq, mid, &u) == RMQ_OK && u.size > 0 && u.phys_offset < verify_from)
            a = mid + 1;
        else
            b = mid;
    }
    rmq_mapped_file_t *pin = NULL;
    int64_t bad = -1;
    rmq_cq_unit_t batch[64];
    int64_t qoffs[64];
    for (int64_t k = a; k < hi && bad < 0;) {
        int n;
        int64_t scanned;
        /* units of size 0 (gaps left by damage) are skipped by the read */
        if (rmq_cq_read_filtered(cq, k, hi - k, NULL, 0, batch, qoffs, 64, &n, &scanned) != RMQ_OK ||
            scanned == 0)
            break;
        for (int i = 0; i < n && bad < 0; i++)
            if (!rmq_store_unit_names_record(s, &batch[i], qoffs[i], e->queue_id, &pin) ||
                !unit_record_has_topic(pin, &batch[i], e))
                bad = qoffs[i];
        k += scanned;
    }
    if (pin) rmq_mapped_file_unpin(pin);
    if (bad < 0) return RMQ_OK;
    cq->damaged = 1;
    return rmq_cq_truncate(cq, bad);
}

/* ConsumeQueues after the CommitLog was cut at end: drop units past it, fix
 * min offsets, check the units naming records at or after verify_from, and
 * reset every queue's next offset from its ConsumeQueue. *rewind is lowered
 * to where dispatch must start again so that every queue cut short by damage
 * gets back the units of the records that are still there. */
static int trim_logics(rmq_store_t *s, int64_t end, int64_t verify_from, int64_t *rewind) {
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -ENOMEM;
    int64_t clog_min = rmq_mfq_min_offset(s->cl.mfq);
    int rc = RMQ_OK;
    for (int64_t i = 0; i < total && rc == RMQ_OK; i++) {
        rmq_consume_queue_t *cq = snap[i]->cq;
        if (!cq) continue;
        rc = rmq_cq_recover(cq, end);
        if (rc == RMQ_OK && clog_min > 0) rmq_cq_delete_expired(cq, clog_min);
        if (rc == RMQ_OK) rc = verify_units(s, snap[i], verify_from);
        if (rc == RMQ_OK && cq->damaged) {
            /* its records resume after the last unit kept */
            int64_t at = clog_min;
            int64_t max = rmq_cq_max_offset(cq);
            rmq_cq_unit_t u;
            if (max > rmq_cq_min_offset(cq) && rmq_cq_get(cq, max - 1, &u) == RMQ_OK &&
                u.size > 0 && u.phys_offset + u.size > at)
                at = u.phys_offset + u.size;
            if (at < *rewind) *rewind = at;
            if (s->rep) s->rep->consume_queues_repaired++;
        }
        snap[i]->next_queue_offset = rmq_cq_max_offset(cq);
    }
    free(snap);
    return rc;
}

/* Each queue's next offset from its ConsumeQueue, after recovery's dispatch
 * (which may have cut and rebuilt queues). */
static int sync_next_offsets(rmq_store_t *s) {
    rmq_tq_entry_t **snap;
    int64_t total;
    if (rmq_store_snapshot_entries(s, &snap, &total) != RMQ_OK) return -ENOMEM;
    for (int64_t i = 0; i < total; i++)
        if (snap[i]->cq) snap[i]->next_queue_offset = rmq_cq_max_offset(snap[i]->cq);
    free(snap);
    return RMQ_OK;
}

int rmq_store_recover(rmq_store_t *s, rmq_recovery_report_t *rep, const rmq_checkpoint_t *cpp) {
    rmq_mfq_t *q = s->cl.mfq;
    const rmq_checkpoint_t cp = *cpp;
    char *ckpath = rmq_path_join(s->root, "checkpoint");
    if (!ckpath) return -ENOMEM;
    int rc = rmq_checkpoint_open(ckpath, &s->checkpoint_fd);
    free(ckpath);
    if (rc != RMQ_OK) return rc;
    s->rep = rep;
    /* Below the checkpoint's confirmed offset the log was flushed before
     * the stop: a record there that fails a check was damaged at rest. */
    s->durable_end = rep->checkpoint_valid ? cp.confirm_phy_offset : 0;
    for (int i = 0; i < q->count; i++)
        if (q->files[i]->found_size < q->file_size) rep->commit_log_short_files++;

    int64_t clog_min = rmq_mfq_min_offset(q);
    int64_t clog_max = rmq_mfq_max_offset(q);
    int64_t start = clog_min;
    if (rep->checkpoint_valid && cp.confirm_phy_offset >= clog_min && cp.confirm_phy_offset <= clog_max)
        /* From the start of the checkpoint's segment, after a crash and after
         * a clean shutdown alike: the cost is one segment plus the tail. */
        start = cp.confirm_phy_offset - cp.confirm_phy_offset % q->file_size;
    if (q->first_short >= 0 && q->first_short < start) start = q->first_short;
    if (start < clog_min) start = clog_min;
    rep->scan_from = start;
    int64_t end, count, last_ts = 0;
    rc = scan_repairing(s, start, INT64_MAX, &end, &count, &last_ts);
    if (rc != RMQ_OK) return rc;
    if (rep->checkpoint_valid && end < cp.confirm_phy_offset && start > clog_min) {
        /* Data below the checkpoint is damaged: rescan everything. */
        start = clog_min;
        rep->scan_from = start;
        rc = scan_repairing(s, start, INT64_MAX, &end, &count, &last_ts);
        if (rc != RMQ_OK) return rc;
    }
    rep->records_scanned = count;
    rep->commit_log_end = end;
    /* bytes past end that were not zero: measured as the last segment's
     * non-empty extent is costly; report the distance to the old max only
     * when a record header was found there. */
    {
        rmq_mapped_file_t *f;
        const uint8_t *p;
        int64_t avail;
        if (rmq_commit_log_read_pinned(&s->cl, end, &f, &p, &avail) == RMQ_OK) {
            int64_t torn = 0;
            for (int64_t i = 0; i < avail && i < (int64_t)RMQ_DEFAULT_MAX_MESSAGE_SIZE * 2; i++)
                if (p[i]) torn = i + 1;
            rep->bytes_trimmed = torn;
            rmq_mapped_file_unpin(f);
        }
    }
    rc = rmq_mfq_truncate_dirty(q, end);
    if (rc != RMQ_OK) return rc;
    /* Make the recovered tail (and any repair in it) durable before trusting
     * it further. */
    for (int i = 0; i < q->count; i++) {
        rmq_mapped_file_t *f = q->files[i];
        if (f->from_offset + f->file_size <= start) continue;
        if (fdatasync(f->fd) != 0) return -errno;
        f->flushed_pos = rmq_mapped_file_wrote(f);
    }
    rmq_mfq_set_flushed_where(q, end);

    int64_t from = rep->checkpoint_valid ? cp.dispatched_offset : rmq_mfq_min_offset(q);
    int64_t verified_from = start; /* records from here on passed scan_repairing */
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        int64_t rewind = INT64_MAX;
        rc = trim_logics(s, end, verified_from, &rewind);
        if (rc != RMQ_OK) return rc;
        if (rewind < from) from = rewind;
        int64_t index_from = 0;
        if (from > end) from = end;
        if (from < rmq_mfq_min_offset(q)) from = rmq_mfq_min_offset(q);
        if (s->index) {
            rmq_index_service_truncate(s->index, end);
            int64_t iend = rmq_index_service_end_phy_offset(s->index);
            /* The last indexed record may have only some of its keys in the
             * index: a crash between them, or the rest in a later IndexFile
             * dropped as damaged. Then it is indexed again (a query answers
             * an offset once, so a key indexed twice is harmless); after a
             * clean shutdown with every IndexFile intact it is complete. */
            int again = rep->abnormal || rep->index_files_dropped > 0;
            index_from = iend < 0 ? 0 : (again ? iend : iend + 1);
            /* The index is built behind the ConsumeQueues (messageIndexAsync):
             * re-dispatch from the record after the last complete one, so
             * records the crash caught between the two get their keys too.
             * ConsumeQueue units that exist are only checked. */
            int64_t index_next = rmq_mfq_min_offset(q);
            rmq_mapped_file_t *f;
            const uint8_t *p;
            int64_t avail;
            if (iend >= 0 &&
                rmq_commit_log_read_pinned(&s->cl, iend, &f, &p, &avail) == RMQ_OK) {
                rmq_record_view_t v;
                if (rmq_record_decode(p, avail, &v) == RMQ_OK && v.phys_offset == iend)
                    index_next = again ? iend : iend + v.total_size;
                rmq_mapped_file_unpin(f);
            }
            if (index_next < from && index_next >= rmq_mfq_min_offset(q)) from = index_next;
        }
        if (from < verified_from) {
            /* Dispatch will read records recovery has not checked yet: check
             * (and repair) them first, so damage there is not taken for the
             * end of the log. They are all below the scan's start: durable. */
            int64_t upto, more;
            rc = scan_repairing(s, from, verified_from, &upto, &more, NULL);
            if (rc != RMQ_OK) return rc;
            if (upto < verified_from) { /* nothing intact after: cannot happen below a scan */
                from = verified_from;
            } else {
                verified_from = from;
            }
        }
        rep->dispatch_from = from;
        __atomic_store_n(&s->dispatched, from, __ATOMIC_RELEASE);
        __atomic_store_n(&s->index_dispatched, from, __ATOMIC_RELEASE);
        rc = rmq_store_dispatch_range(s, index_from, 1, 1, &n);
        rep->records_dispatched += n;
        if (rc != RMQ_ECORRUPT) break;
        /* A record contradicts its queue: the log ends before it. */
        int64_t bad = __atomic_load_n(&s->dispatched, __ATOMIC_ACQUIRE);
        rep->bytes_trimmed += end - bad;
        end = bad;
        rep->commit_log_end = end;
        rc = rmq_mfq_truncate_dirty(q, end);
        if (rc != RMQ_OK) return rc;
    }
    if (rc != RMQ_OK) return rc;
    rc = sync_next_offsets(s);
    if (rc != RMQ_OK) return rc;
    s->last_dispatched_ts = last_ts;
    s->durable_end = 0;
    s->rep = NULL;
    return RMQ_OK;
}

/* This boot of the machine (Linux's boot_id), "" when unknown. */
static void read_boot_id(char out[64]) {
    out[0] = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, 63);
    close(fd);
    if (n <= 0) n = 0;
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
}

/* The abort marker as the last run left it: rep->abnormal when there is
 * one (the store was not closed); rep->other_boot when it was left by an
 * earlier boot, or does not say (pyrmq wrote it empty before): the machine
 * went down with the store open, and what was not flushed may be lost. */
int rmq_store_judge_abort_marker(const char *root, rmq_recovery_report_t *rep) {
    char *abpath = rmq_path_join(root, "abort");
    if (!abpath) return -ENOMEM;
    int fd = open(abpath, O_RDONLY | O_CLOEXEC);
    free(abpath);
    rep->abnormal = fd >= 0 || errno != ENOENT;
    rep->other_boot = rep->abnormal;
    if (fd < 0) return RMQ_OK;
    char was[64], now[64];
    ssize_t n = read(fd, was, sizeof(was) - 1);
    close(fd);
    was[n > 0 ? n : 0] = 0;
    read_boot_id(now);
    rep->other_boot = !now[0] || strcmp(was, now) != 0;
    return RMQ_OK;
}

/* The abort marker, present while the store is open: it holds this boot's
 * id, so that the next open can tell a process that died (the page cache
 * kept every write) from a machine that went down. */
int rmq_store_write_abort_marker(const char *root) {
    char *abpath = rmq_path_join(root, "abort");
    if (!abpath) return -ENOMEM;
    int fd = open(abpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    free(abpath);
    if (fd < 0) return -errno;
    char id[64];
    read_boot_id(id);
    size_t len = strlen(id);
    ssize_t wrote = write(fd, id, len);
    int rc = wrote < 0 ? -errno : (size_t)wrote != len ? -EIO : RMQ_OK;
    if (rc == RMQ_OK && fdatasync(fd) != 0) rc = -errno;
    close(fd);
    return rc;
}
