/* index_service.h: RocketMQ's IndexService, a directory of IndexFiles
 * (index_file.h), named by creation time (yyyyMMddHHmmssSSS), the newest
 * one written.
 *
 * Threading: put/flush/query/delete on one IndexService may come from
 * different threads; the service serialises them with its own mutex. All
 * functions may block (file creation, msync, unlink). */
#ifndef RMQ_INDEX_SERVICE_H
#define RMQ_INDEX_SERVICE_H

#include <pthread.h>
#include <stdint.h>

#include "index_file.h"

typedef struct rmq_index_service {
    char *dir;
    int32_t hash_slot_num;
    int32_t index_num;
    rmq_index_file_t **files; /* oldest first */
    int count;
    int cap;
    pthread_mutex_t lock;
} rmq_index_service_t;

/* Open dir (created if missing), loading every IndexFile in it (names are
 * yyyyMMddHHmmssSSS of creation time; files that are not 17 digits are left
 * alone). */
int rmq_index_service_open(const char *dir, int32_t hash_slot_num, int32_t index_num,
                           rmq_index_service_t **out);

/* Recovery, before rmq_index_service_open: find the oldest IndexFile in dir
 * that is damaged (wrong size, or a header that cannot be: entry count out
 * of range, offsets decreasing) and delete it and every newer one,
 * so that the store indexes their records again from the CommitLog.
 * distrust_after_ts >= 0 (the machine went down with the store open, so
 * what was not flushed may be lost or half written): the newest file, and
 * any whose end_timestamp is past distrust_after_ts, count as damaged too.
 * *dropped receives the number deleted. A missing dir is not an error.
 * Blocking. */
int rmq_index_service_drop_damaged(const char *dir, int32_t hash_slot_num, int32_t index_num,
                                   int64_t distrust_after_ts, int *dropped);

/* Index topic#key -> phy_offset; opens a new file when the last is full
 * (named by the current wall-clock time, bumped by 1 ms on a name clash). */
int rmq_index_service_put(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t phy_offset,
                          int64_t store_timestamp);

/* One entry for rmq_index_service_put_many: the key's hash
 * (rmq_index_key_hash) and its record's offset and store time. */
typedef struct rmq_index_put {
    int32_t hash;
    int64_t phy_offset;
    int64_t store_timestamp;
} rmq_index_put_t;

/* rmq_index_service_put for n keys already hashed, in order, under one
 * lock, every entry's hash slot prefetched before the first put (so their
 * cache misses overlap). *done receives how many were put, also when one
 * fails (its status is returned; the rest are not put). */
int rmq_index_service_put_many(rmq_index_service_t *s, const rmq_index_put_t *puts, int n,
                               int *done);

/* Query every file whose [begin,end] timestamps overlap [begin_ts,end_ts],
 * newest file first; at most max offsets, duplicates removed. */
int rmq_index_service_query(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                            const uint8_t *key, size_t key_len, int64_t begin_ts, int64_t end_ts,
                            int64_t *out, int max, int *n);

/* end_phy_offset of the newest file (-1 when there is none). */
int64_t rmq_index_service_end_phy_offset(rmq_index_service_t *s);

/* Flush every IndexFile; *durable_ts (may be NULL) receives the newest
 * file's end_timestamp as it was before the flush: every entry up to it is
 * durable once this returns RMQ_OK (-1 when there is no entry). */
int rmq_index_service_flush(rmq_index_service_t *s, int64_t *durable_ts);

/* Delete whole files whose end_phy_offset < min_phy_offset (never the newest).
 * Returns the number deleted, or a negative status. */
int rmq_index_service_delete_before(rmq_index_service_t *s, int64_t min_phy_offset);

/* Delete files whose begin_phy_offset >= phy_offset (recovery after the
 * CommitLog was truncated below them). Returns the number deleted. */
int rmq_index_service_truncate(rmq_index_service_t *s, int64_t phy_offset);

void rmq_index_service_close(rmq_index_service_t *s);

#endif /* RMQ_INDEX_SERVICE_H */
