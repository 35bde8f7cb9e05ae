/* commit_log_replica.c: a slave's CommitLog append (HAService): bytes copied
 * from the master's CommitLog are written at the same offsets, unchanged,
 * after each record in them passed the checks recovery makes (structure,
 * position, queue id, CRC). See commit_log_replica.h. */
#include <string.h>

#include "commit_log_replica.h"
#include "endian.h"
#include "rmq_errors.h"
#include "rmq_format.h"

/* What the next unit of data at offset is: a record (its size) or the
 * end-of-segment blank (the rest of the segment), RMQ_EAGAIN-like 0 when
 * fewer bytes than the unit are there yet, or a negative status. */
static int64_t next_unit(const rmq_commit_log_t *cl, int64_t offset, const uint8_t *p,
                         int64_t avail, int check_crc) {
    int64_t fs = cl->mfq->file_size;
    int64_t room = fs - offset % fs;
    if (avail < 8) return 0;
    int32_t total = rmq_get_be32(p);
    int32_t magic = rmq_get_be32(p + 4);
    if (magic == RMQ_BLANK_MAGIC_CODE) {
        /* The master's segment ends here: same geometry, or nothing fits. */
        if (total != room) return RMQ_ECORRUPT;
        return avail >= total ? total : 0;
    }
    if (magic != RMQ_MESSAGE_MAGIC_CODE && magic != RMQ_MESSAGE_MAGIC_CODE_V2) return RMQ_ECORRUPT;
    /* A record leaves room for at least the blank after it (reserve() in
     * commit_log.c), and is bounded by the largest body plus its headers. */
    if (total < RMQ_RECORD_FIXED_IPV4 || total + RMQ_END_FILE_MIN_BLANK_LENGTH > room)
        return RMQ_ECORRUPT;
    if ((int64_t)total > (int64_t)cl->max_message_size + RMQ_MAX_PROPERTIES_LENGTH + 512)
        return RMQ_ECORRUPT;
    if (avail < total) return 0;
    rmq_record_view_t v;
    if (rmq_record_decode(p, total, &v) != RMQ_OK) return RMQ_ECORRUPT;
    if (v.phys_offset != offset || v.queue_id < 0 || v.queue_id >= cl->max_queue_nums ||
        v.queue_offset < 0 || rmq_validate_topic(v.topic, v.topic_len) != RMQ_OK)
        return RMQ_ECORRUPT;
    if (check_crc && !rmq_record_crc_ok(&v)) return RMQ_ECORRUPT;
    return total;
}

int rmq_commit_log_append_replica(rmq_commit_log_t *cl, int64_t offset, const uint8_t *data,
                                  int64_t len, int check_crc, int64_t *accepted, int32_t *rolled) {
    rmq_mfq_t *q = cl->mfq;
    *accepted = 0;
    *rolled = 0;
    if (len < 0) return RMQ_EBAD_ARG;
    int64_t max = rmq_mfq_max_offset(q);
    int empty = rmq_mfq_last(q) == NULL;
    /* An empty log starts where the master's data starts, at a segment
     * boundary; otherwise the copy continues exactly at the end. */
    if (empty ? offset % q->file_size != 0 : offset != max) return RMQ_EBAD_ARG;
    int64_t done = 0;
    int rc = RMQ_OK;
    while (done < len) {
        int64_t at = offset + done;
        int64_t n = next_unit(cl, at, data + done, len - done, check_crc);
        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0) break; /* the rest of this unit has not arrived yet */
        rmq_mapped_file_t *f, *prev = rmq_mfq_last(q);
        rc = rmq_mfq_last_for_append(q, at, &f);
        if (rc != RMQ_OK) break;
        if (f != prev) *rolled |= RMQ_APPEND_NEW_SEGMENT;
        int64_t rel = at - f->from_offset;
        if (rel != rmq_mapped_file_wrote(f) || rel + n > f->file_size) {
            rc = RMQ_ECORRUPT; /* cannot happen with matching geometry */
            break;
        }
        if (q->warm) {
            int64_t warmed = __atomic_load_n(&f->warmed_to, __ATOMIC_ACQUIRE);
            if (rel + n > warmed) rmq_mapped_file_warm_write(f, rel, n + RMQ_WARM_INLINE);
            if (rel + n + RMQ_WARM_AHEAD / 2 > warmed && warmed < f->file_size)
                *rolled |= RMQ_APPEND_WARM_LOW;
        }
        memcpy(f->base + rel, data + done, (size_t)n);
        rmq_mapped_file_set_wrote(f, rel + n);
        done += n;
    }
    *accepted = done;
    return rc;
}
