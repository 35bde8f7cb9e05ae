/* message_store.h: the C side of the MessageStore: a CommitLog, the
 * ConsumeQueues and IndexFiles dispatched from it (ReputMessageService),
 * recovery, the checkpoint, lookups and reads. The Python MessageStore
 * (pyrmq/store) adds the flush services and lifecycle around it.
 *
 * Threading: the owner calls (put, put_batch, append_replica, truncate,
 * dispatch, delete_topic, get, min/max_offset, offset_by_time, query_key,
 * find_key) each take the store's owner lock, so they may come from more
 * than one thread: the event loop, and the broker's C send threads
 * (rmqcore/_sendlanes.pyx), which put while the loop serves pulls. The lock
 * is recursive (put dispatches, query_key finds). flush_*, build_index and
 * delete_expired_* run on other threads beside them without it (segments are
 * pinned while used). open and close: one thread, nothing else running. */
#ifndef RMQ_MESSAGE_STORE_H
#define RMQ_MESSAGE_STORE_H

#include <pthread.h>
#include <stdint.h>

#include "checkpoint.h"
#include "commit_log.h"
#include "consume_queue.h"
#include "index_service.h"
#include "topic_queue_table.h"

typedef struct rmq_store_config {
    const char *root;
    int64_t commit_log_file_size;
    int64_t cq_units_per_file;
    int32_t max_message_size;
    int32_t max_queue_nums;
    int32_t index_hash_slot_num;
    int32_t index_num;
    int32_t index_enable;
    int32_t warm_mapped_files;
    int32_t index_async;       /* build IndexFile entries in rmq_store_build_index,
                                  on another thread, instead of in every put */
    const uint8_t *store_host; /* 8 or 20 bytes */
    int32_t store_host_len;
} rmq_store_config_t;

typedef struct rmq_recovery_report {
    int32_t abnormal;            /* the abort marker was present */
    int32_t checkpoint_valid;
    int64_t scan_from;           /* CommitLog offset the scan started at */
    int64_t commit_log_end;      /* recovered end */
    int64_t records_scanned;
    int64_t bytes_trimmed;       /* torn or corrupt tail removed */
    int64_t cq_units_dropped;
    int64_t dispatch_from;
    int64_t records_dispatched;
    int32_t consume_queues;
    /* Repairs (zero on a healthy store): */
    int32_t commit_log_short_files;  /* CommitLog segments found cut short */
    int64_t damaged_ranges;          /* durable ranges that failed their checks and were
                                        overwritten with the damaged-range filler */
    int64_t bytes_damaged;           /* their bytes */
    int32_t consume_queues_repaired; /* cut short or with units that disagreed with the
                                        CommitLog: cut there and rebuilt from it */
    int32_t index_files_dropped;     /* damaged IndexFiles deleted (rebuilt from the log) */
    int32_t other_boot;              /* the abort marker was left by an earlier boot of
                                        the machine: what was not flushed may be lost */
} rmq_recovery_report_t;

/* RocketMQ's GetMessageStatus. */
enum {
    RMQ_GET_FOUND = 0,
    RMQ_GET_NO_MATCHED_MESSAGE = 1,
    RMQ_GET_MESSAGE_WAS_REMOVING = 2,
    RMQ_GET_OFFSET_FOUND_NULL = 3,
    RMQ_GET_OFFSET_OVERFLOW_BADLY = 4,
    RMQ_GET_OFFSET_OVERFLOW_ONE = 5,
    RMQ_GET_OFFSET_TOO_SMALL = 6,
    RMQ_GET_NO_MATCHED_LOGIC_QUEUE = 7,
    RMQ_GET_NO_MESSAGE_IN_QUEUE = 8,
};

typedef struct rmq_get_result {
    int32_t status;
    int32_t count;            /* units written to out */
    int64_t next_begin_offset;
    int64_t min_offset;
    int64_t max_offset;
    int64_t total_bytes;
} rmq_get_result_t;

/* The index thread (index_thread.c), woken by the puts' dispatch. */
typedef struct rmq_index_thread {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    int running;         /* atomic: started, not stopped */
    int wanted;          /* atomic: records dispatched since the thread last looked */
    int stop;            /* under lock */
    int error;           /* atomic: status of the thread's last build */
    int32_t window_ms;
} rmq_index_thread_t;

typedef struct rmq_store {
    char *root;
    char *cq_root;
    rmq_store_config_t cfg;
    uint8_t store_host[20];
    rmq_commit_log_t cl;
    rmq_tq_table_t table;
    rmq_index_service_t *index; /* NULL when index_enable is 0 */
    int64_t dispatched;         /* atomic: CommitLog offset dispatched up to */
    int64_t last_dispatched_ts; /* store time of the last dispatched record */
    int dispatch_error;         /* status of the last dispatch after a put */
    int64_t index_dispatched;   /* atomic: CommitLog offset indexed up to */
    int64_t index_flushed_ts;   /* end_timestamp of the IndexFiles at their last flush */
    pthread_mutex_t index_build_lock;
    rmq_index_thread_t index_thread;
    pthread_mutex_t owner_lock; /* recursive: the owner calls, see above */
    int checkpoint_fd;
    int lock_fd;
    rmq_consume_queue_t **graveyard; /* CQs of deleted topics, freed at close */
    int graveyard_count;
    /* During recovery only: the CommitLog below durable_end was flushed
     * before the crash (the checkpoint says so), so a record there that fails
     * a check is damage at rest, not a torn write; repairs count into *rep. */
    int64_t durable_end;
    rmq_recovery_report_t *rep;
} rmq_store_t;

static inline void rmq_store_own(rmq_store_t *s) { pthread_mutex_lock(&s->owner_lock); }
static inline void rmq_store_disown(rmq_store_t *s) { pthread_mutex_unlock(&s->owner_lock); }

/* Open (creating if needed) and recover the store in cfg->root. On success
 * the abort marker exists until rmq_store_close. Blocking. */
int rmq_store_open(const rmq_store_config_t *cfg, rmq_store_t **out, rmq_recovery_report_t *rep);

/* Append then dispatch. A dispatch failure does not fail the put (the record
 * is stored); it is kept in dispatch_error and retried first by the next put,
 * which fails with that error (nothing written) while it persists. Owner
 * thread. */
int rmq_store_put(rmq_store_t *s, const rmq_msg_in_t *m, rmq_append_result_t *r);
int rmq_store_put_batch(rmq_store_t *s, const rmq_msg_in_t *proto, const uint8_t *batch,
                        int64_t batch_len, rmq_append_result_t *r);

/* A slave's append: bytes of the master's CommitLog from offset on, written
 * unchanged after their checks (rmq_commit_log_append_replica), then
 * dispatched like a put's. *accepted: the prefix written. Owner thread. */
int rmq_store_append_replica(rmq_store_t *s, int64_t offset, const uint8_t *data, int64_t len,
                             int64_t *accepted, int32_t *rolled);

/* Cut the CommitLog at offset (a record boundary: a slave whose tail its new
 * master never had): records from there on are gone, with their
 * ConsumeQueue units; queues' next offsets follow. IndexFile entries of the
 * removed records stay but lookups verify every hit against the record.
 * RMQ_EBAD_ARG outside [min, max]. Owner thread, nothing appending. */
int rmq_store_truncate(rmq_store_t *s, int64_t offset);

/* Build ConsumeQueue/IndexFile entries for records in [dispatched, end of
 * CommitLog). *n gets the number of records dispatched. Owner thread. */
int rmq_store_dispatch(rmq_store_t *s, int64_t *n);

/* Build IndexFile entries for records in [index_dispatched, dispatched), at
 * most max_records; *n gets how many were indexed. With index_async this is
 * the index's only builder: it may run on any thread (one at a time, by its
 * own lock) while the owner appends. */
int rmq_store_build_index(rmq_store_t *s, int64_t max_records, int64_t *n);

/* The index thread (index_async; RocketMQ's CommitLogDispatcherBuildIndex
 * off the put path): puts wake it, no more than once per window_ms (the
 * first put after it looked); it then waits window_ms for more, and builds
 * until nothing lags. A failed build is kept in index_error (see
 * rmq_store_index_error) and tried again a second later. Start: after
 * open, before the puts it should index; RMQ_EBAD_ARG without an async
 * index or when it runs already. Stop: it finishes its build and ends
 * (close stops it too). */
int rmq_store_index_thread_start(rmq_store_t *s, int32_t window_ms);
void rmq_store_index_thread_stop(rmq_store_t *s);

/* Status of the index thread's last build (RMQ_OK, or why it failed). */
int rmq_store_index_error(const rmq_store_t *s);

/* RocketMQ getMessage: units of (topic, qid) from offset, at most max_msgs
 * messages and max_bytes bytes (the first message always fits), matching the
 * tag codes (ntags == 0: all). Fills out[0..max_msgs). With max_phys >= 0
 * the read ends before the first unit (matching or not) whose record ends
 * beyond max_phys (RocketMQ 5's confirmOffset: a controller-mode master
 * serves only what its SyncStateSet holds); when that is the first unit,
 * the status is OFFSET_OVERFLOW_ONE (nothing readable yet) and
 * next_begin_offset that unit's offset. Owner thread. */
int rmq_store_get(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid,
                  int64_t offset, int32_t max_msgs, int64_t max_bytes, const int32_t *tags,
                  int32_t ntags, int64_t max_phys, rmq_cq_unit_t *out, rmq_get_result_t *res);

/* Min/max queue offset of (topic, qid); -1 when the queue does not exist. */
int64_t rmq_store_min_offset(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid);
int64_t rmq_store_max_offset(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid);

/* First queue offset whose store time >= ts (max offset when none). */
int64_t rmq_store_offset_by_time(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                                 int32_t qid, int64_t ts);

/* Physical offsets of records of topic whose KEYS contain key or whose
 * UNIQ_KEY equals key, stored in [begin_ts, end_ts]; verified against the
 * records. Newest first. */
int rmq_store_query_key(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                        const uint8_t *key, int32_t key_len, int64_t begin_ts, int64_t end_ts,
                        int64_t *out, int max, int *n);

/* The same over what the IndexFiles hold now, without indexing what lags
 * first (a caller that covers the unindexed tail itself). Safe beside the
 * index thread: the index service locks per put and per query. */
int rmq_store_find_key(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                       const uint8_t *key, int32_t key_len, int64_t begin_ts, int64_t end_ts,
                       int64_t *out, int max, int *n);

/* Flush the CommitLog (least_pages 0: all written). *where: durable offset. */
int rmq_store_flush_commit_log(rmq_store_t *s, int least_pages, int64_t *where);

/* Flush every ConsumeQueue with at least least_pages dirty pages, the
 * IndexFiles when least_pages is 0 (the thorough pass), then write the
 * checkpoint. */
int rmq_store_flush_logics(rmq_store_t *s, int least_pages);

/* Retention. Returns files deleted. */
int rmq_store_delete_expired_commit_log(rmq_store_t *s, int64_t expire_ms, int64_t now_ms,
                                        int force, int max_files);
int rmq_store_delete_expired_logics(rmq_store_t *s);

/* Delete every queue of a topic (files and state). */
int rmq_store_delete_topic(rmq_store_t *s, const uint8_t *topic, int32_t topic_len);

/* Flush everything, write the checkpoint, remove the abort marker, unlock
 * and free. Blocking. */
int rmq_store_close(rmq_store_t *s);

#endif /* RMQ_MESSAGE_STORE_H */
