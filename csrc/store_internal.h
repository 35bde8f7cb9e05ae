/* Shared by message_store.c (writes, dispatch, open and close),
 * store_recovery.c (recovery at open) and store_read.c (the read path;
 * recovery checks units with it too); not part of the store's API. */
#ifndef RMQ_STORE_INTERNAL_H
#define RMQ_STORE_INTERNAL_H

#include "message_store.h"

/* Whether the record a unit names has the header the unit promises (a
 * record of this queue at this offset, of this size, in a ConsumeQueue);
 * *pin caches the pinned CommitLog segment across calls (the caller unpins
 * it). */
int rmq_store_unit_names_record(rmq_store_t *s, const rmq_cq_unit_t *u, int64_t qoff, int32_t qid,
                                rmq_mapped_file_t **pin);

/* Every (topic, queue) entry, copied under the table lock; free *out. */
int rmq_store_snapshot_entries(rmq_store_t *s, rmq_tq_entry_t ***out, int64_t *total);

/* Dispatch the CommitLog from s->dispatched to its end: ConsumeQueue units
 * (checked against the queues first when validate: recovery's
 * re-dispatch), and index keys of records at or after index_from when
 * with_index. *n: records dispatched. */
int rmq_store_dispatch_range(rmq_store_t *s, int64_t index_from, int validate, int with_index,
                             int64_t *n);

/* ---- index_thread.c ---- */

/* Its lock and condition variable, made at open and freed at close (after
 * rmq_store_index_thread_stop). */
void rmq_index_thread_init(rmq_index_thread_t *t);
void rmq_index_thread_destroy(rmq_index_thread_t *t);

/* Wake the index thread, if one runs and it was not woken already since it
 * last looked (one relaxed load then). Called after every dispatch. */
void rmq_store_index_poke(rmq_store_t *s);

/* ---- store_recovery.c ---- */

/* Recovery's check of a record it dispatches again against its queue.
 * RMQ_ECORRUPT: the log ends before it (a torn write in the unflushed
 * tail). *skip: the record was damaged at rest and is now quarantined (no
 * unit for it). Otherwise the queue's units from its offset on were wrong
 * and are cut, to be rebuilt from the log by this dispatch. */
int rmq_store_check_redispatch(rmq_store_t *s, const rmq_record_view_t *v, int *skip);

/* Recovery at open: the CommitLog scanned and repaired from the
 * checkpoint's segment, its end found, the ConsumeQueues and IndexFiles
 * trimmed, checked and dispatched again up to it. rep->checkpoint_valid,
 * rep->abnormal and *cp come from rmq_store_open. */
int rmq_store_recover(rmq_store_t *s, rmq_recovery_report_t *rep, const rmq_checkpoint_t *cp);

/* The abort marker the last run left: rep->abnormal and rep->other_boot. */
int rmq_store_judge_abort_marker(const char *root, rmq_recovery_report_t *rep);

/* The abort marker of this run, holding this boot's id (made durable). */
int rmq_store_write_abort_marker(const char *root);

/* The body of a public owner call: `call` (its *_owned twin) under the
 * owner lock, its value returned (message_store.h, Threading). */
#define RMQ_STORE_OWNED(type, call) \
    do {                            \
        rmq_store_own(s);           \
        type r_ = (call);           \
        rmq_store_disown(s);        \
        return r_;                  \
    } while (0)

#endif
