/* consume_queue.h: one ConsumeQueue (topic, queue id): fixed 20-byte units
 * (rmq_format.h section 5) on a MappedFileQueue, addressed by queue offset.
 *
 * Threading: put/truncate on the owner thread; reads pin their segment and
 * may run on any thread; flush and delete_* from any thread. */
#ifndef RMQ_CONSUME_QUEUE_H
#define RMQ_CONSUME_QUEUE_H

#include <stdint.h>

#include "mapped_file_queue.h"

typedef struct rmq_cq_unit {
    int64_t phys_offset;
    int32_t size;
    int64_t tags_code;
} rmq_cq_unit_t;

typedef struct rmq_consume_queue {
    rmq_mfq_t *mfq;
    int32_t queue_id;
    int64_t min_logic_offset;  /* atomic: bytes; units below it are expired */
    int64_t max_phy_end;       /* phys offset + size of the last unit put */
    int32_t damaged;           /* rmq_cq_recover cut it short of units that were
                                  not past the CommitLog's end (damage) */
} rmq_consume_queue_t;

/* Decode the unit at p (20 bytes). Pure. */
void rmq_cq_unit_decode(const uint8_t *p, rmq_cq_unit_t *u);

/* Open dir/<20-digit files> with units_per_file units per segment. */
int rmq_cq_open(const char *dir, int32_t queue_id, int64_t units_per_file, rmq_consume_queue_t **out);
void rmq_cq_close(rmq_consume_queue_t *cq);
/* Delete every file (topic deletion) and close. */
void rmq_cq_destroy(rmq_consume_queue_t *cq);

/* Min and max queue offsets (max = next offset to be written). */
int64_t rmq_cq_min_offset(rmq_consume_queue_t *cq);
int64_t rmq_cq_max_offset(rmq_consume_queue_t *cq);

/* Put the unit for queue offset qoff. Idempotent: a unit below the max
 * offset is left as it is (recovery re-dispatch). A qoff above the max
 * leaves a gap of empty units (size 0). Owner thread. */
int rmq_cq_put(rmq_consume_queue_t *cq, int64_t qoff, int64_t phys_offset, int32_t size,
               int64_t tags_code);

/* The unit at qoff; RMQ_ENOT_FOUND outside [min, max). Any thread. */
int rmq_cq_get(rmq_consume_queue_t *cq, int64_t qoff, rmq_cq_unit_t *u);

/* Scan up to max_scan units from qoff, keeping up to max_out units whose
 * tags_code (as int32) is in tags[0..ntags) (ntags == 0: all) and whose size
 * is > 0. *out_qoffs receives each kept unit's queue offset; *scanned the
 * number of units scanned (the next offset is qoff + *scanned). Stops at the
 * end of a segment when stop_at_file_end is set. Any thread. */
int rmq_cq_read_filtered(rmq_consume_queue_t *cq, int64_t qoff, int64_t max_scan,
                         const int32_t *tags, int ntags, rmq_cq_unit_t *out, int64_t *out_qoffs,
                         int max_out, int *n_out, int64_t *scanned);

/* Recovery: drop trailing units that are empty, malformed, not increasing,
 * or point at or past phy_end (the CommitLog's end), and every unit from the
 * point where a file was found cut short. Sets cq->damaged when units were
 * dropped for any reason other than pointing past phy_end (they were lost
 * to damage: the caller rebuilds them from the CommitLog). Owner thread. */
int rmq_cq_recover(rmq_consume_queue_t *cq, int64_t phy_end);

/* Recovery: drop the units from queue offset qoff on (their records are
 * dispatched again), keeping max_phy_end right. Owner thread. */
int rmq_cq_truncate(rmq_consume_queue_t *cq, int64_t qoff);

/* Set min_logic_offset to the first unit whose phys offset >= clog_min, and
 * delete whole segments below it. Returns segments deleted. Any thread. */
int rmq_cq_delete_expired(rmq_consume_queue_t *cq, int64_t clog_min);

int rmq_cq_flush(rmq_consume_queue_t *cq, int least_pages);

#endif /* RMQ_CONSUME_QUEUE_H */
