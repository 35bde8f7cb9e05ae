/* commit_log.h: the CommitLog: encode and append records (rmq_format.h
 * section 2) to a MappedFileQueue, batch append, decode, verify and scan.
 *
 * Threading: append/scan on the owner thread (the event loop holds the "put
 * lock"); decode and the record helpers are pure. */
#ifndef RMQ_COMMIT_LOG_H
#define RMQ_COMMIT_LOG_H

#include <stdint.h>

#include "mapped_file_queue.h"
#include "topic_queue_table.h"

/* One message to append. Pointers are borrowed for the call. */
typedef struct rmq_msg_in {
    const uint8_t *topic;
    int32_t topic_len;
    int32_t queue_id;
    int32_t flag;
    const uint8_t *body;
    int32_t body_len;
    const uint8_t *props;
    int32_t props_len;
    int32_t sysflag;
    int64_t born_timestamp;
    const uint8_t *born_host; /* 8 bytes (IPv4 + port) or 20 (IPv6 + port) */
    int32_t born_host_len;
    int32_t reconsume_times;
    int64_t prepared_tx_offset;
} rmq_msg_in_t;

#define RMQ_APPEND_NEW_SEGMENT 1 /* the append opened a new segment */
#define RMQ_APPEND_WARM_LOW 2    /* the write position nears the warmed-in pages */
/* The allocator keeps RMQ_WARM_AHEAD bytes write-faulted ahead of the write
 * position; an append that finds fewer than half of them left asks for more,
 * and one that finds none faults RMQ_WARM_INLINE bytes in itself (in bulk,
 * which costs a fraction of taking one fault per page). */
#define RMQ_WARM_AHEAD RMQ_MFQ_WARM_WINDOW
#define RMQ_WARM_INLINE (4LL << 20)

typedef struct rmq_append_result {
    int64_t phys_offset;     /* first record */
    int64_t queue_offset;    /* first record */
    int64_t wrote_bytes;     /* all records */
    int32_t count;           /* records written */
    int32_t rolled;          /* RMQ_APPEND_NEW_SEGMENT | RMQ_APPEND_WARM_LOW: time for
                                the allocator (prepare the next segment, warm ahead) */
    int64_t store_timestamp; /* ms */
} rmq_append_result_t;

/* A decoded record: pointers into the buffer it was decoded from. */
typedef struct rmq_record_view {
    int32_t total_size;
    int32_t magic;
    int32_t body_crc;
    int32_t queue_id;
    int32_t flag;
    int64_t queue_offset;
    int64_t phys_offset;
    int32_t sysflag;
    int64_t born_timestamp;
    const uint8_t *born_host;
    int32_t born_host_len;
    int64_t store_timestamp;
    const uint8_t *store_host;
    int32_t store_host_len;
    int32_t reconsume_times;
    int64_t prepared_tx_offset;
    const uint8_t *body;
    int32_t body_len;
    const uint8_t *topic;
    int32_t topic_len;
    const uint8_t *props;
    int32_t props_len;
} rmq_record_view_t;

typedef struct rmq_commit_log {
    rmq_mfq_t *mfq;
    rmq_tq_table_t *table;    /* next queue offsets; borrowed */
    int32_t max_message_size; /* limit on a body (and on a batch body) */
    int32_t max_queue_nums;   /* queue ids are 0 .. max_queue_nums-1 */
    uint8_t store_host[20];
    int32_t store_host_len;
} rmq_commit_log_t;

/* RocketMQ's topic rule: 1..127 bytes of [%|a-zA-Z0-9_-]. */
int rmq_validate_topic(const uint8_t *topic, int32_t len);

/* Whole record size for these field sizes. */
int64_t rmq_record_size(int32_t body_len, int32_t topic_len, int32_t props_len,
                        int32_t born_host_len, int32_t store_host_len);

/* Append one record: validates first (nothing is written on error), assigns
 * physical offset, queue offset and store time. Owner thread. May block
 * creating a segment when none was prepared. */
int rmq_commit_log_append(rmq_commit_log_t *cl, const rmq_msg_in_t *m, rmq_append_result_t *r);

/* Append every entry of a batch body (rmq_format.h section 4) as its own
 * record with consecutive queue offsets, all in one segment. proto gives
 * topic, queue id, sysflag, born time/host and reconsume times; its body,
 * props and flag are ignored. Validates the whole batch first. */
int rmq_commit_log_append_batch(rmq_commit_log_t *cl, const rmq_msg_in_t *proto,
                                const uint8_t *batch, int64_t batch_len, rmq_append_result_t *r);

/* Decode the record at buf (avail bytes readable). RMQ_ECORRUPT if the
 * structure is inconsistent; RMQ_ENOT_FOUND for a blank (end-of-file) record
 * or zero bytes (never written). Does not check the CRC. Pure. */
int rmq_record_decode(const uint8_t *buf, int64_t avail, rmq_record_view_t *v);

/* 1 when the stored BODYCRC matches the body. Pure. */
int rmq_record_crc_ok(const rmq_record_view_t *v);

/* Find property name in a properties string; *val and *val_len point into props.
 * When a name repeats, the last one wins (as Java's parser). Returns 1 when
 * found. Pure. */
int rmq_props_get(const uint8_t *props, int32_t props_len, const char *name, const uint8_t **val,
                  int32_t *val_len);

/* rmq_props_get for up to RMQ_PROPS_FIND_MAX names in one pass (names past
 * it are not looked for): vals[i] and lens[i] receive names[i]'s value (the
 * last one wins); returns a bit mask of the names found (bit i for
 * names[i]). Pure. */
#define RMQ_PROPS_FIND_MAX 8
unsigned rmq_props_find(const uint8_t *props, int32_t props_len, const char *const *names,
                        int n, const uint8_t **vals, int32_t *lens);

/* A record's IndexFile keys, as RocketMQ's IndexService.buildIndex takes
 * them from its properties: the UNIQ_KEY (when not empty), then each
 * non-empty space-separated item of KEYS. rmq_index_keys_init, then
 * rmq_index_keys_next until it returns 0; the keys point into props.
 * Pure. */
typedef struct rmq_index_keys {
    const uint8_t *uniq; /* NULL once taken, or when there is none */
    int32_t uniq_len;
    const uint8_t *next; /* what is left of KEYS: [next, end) */
    const uint8_t *end;
} rmq_index_keys_t;

void rmq_index_keys_init(rmq_index_keys_t *it, const uint8_t *props, int32_t props_len);
int rmq_index_keys_next(rmq_index_keys_t *it, const uint8_t **key, int32_t *key_len);

/* Scan from offset (a record boundary) to the end of written data, checking
 * each record's structure, position and (check_crc) CRC. *end receives the
 * offset after the last good record, *count the number of good records and
 * *last_store_ts the store time of the last one. Owner thread. */
int rmq_commit_log_scan(rmq_commit_log_t *cl, int64_t offset, int check_crc, int64_t *end,
                        int64_t *count, int64_t *last_store_ts);

/* Recovery: overwrite [from, to) of one segment, bytes that failed their
 * checks with intact records after them, with the damaged-range filler of
 * rmq_format.h (a blank record when `to` is the segment's end). RMQ_EBAD_ARG
 * when the range spans segments or is too short for the filler. Owner
 * thread, before anything else reads the log. */
int rmq_commit_log_fill_damaged(rmq_commit_log_t *cl, int64_t from, int64_t to);

/* Pin the segment holding offset and point *rec at it; *avail is what is
 * readable there up to the write position. Any thread; unpin *mf. */
int rmq_commit_log_read_pinned(rmq_commit_log_t *cl, int64_t offset, rmq_mapped_file_t **mf,
                               const uint8_t **rec, int64_t *avail);

/* The next record boundary after a blank record at offset: the next segment. */
int64_t rmq_commit_log_roll_next(const rmq_commit_log_t *cl, int64_t offset);

/* Whether a record with this SYSFLAG gets a ConsumeQueue unit and a queue
 * offset: not a prepared or rolled-back transaction message. */
static inline int rmq_sysflag_in_consume_queue(int32_t sysflag) {
    int32_t tx = sysflag & 0xC;
    return tx == 0 || tx == 0x8;
}

/* Wall clock in ms. */
int64_t rmq_now_ms(void);

#endif /* RMQ_COMMIT_LOG_H */
