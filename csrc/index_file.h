/* index_file.h: one of RocketMQ's hash IndexFiles (layout: rmq_format.h
 * section 6); index_service.h keeps a directory of them.
 *
 * Keys are hashed as Java String.hashCode(topic + "#" + key) (computed without
 * building the string), made non-negative as RocketMQ does (abs, 0 if still
 * negative). Lookups return candidate physical offsets: distinct keys can
 * share a hash, so callers re-check the key against the record.
 *
 * Threading: none of its own; the IndexService serialises its files' calls.
 * Open, flush and close may block (file creation, msync, unlink). */
#ifndef RMQ_INDEX_FILE_H
#define RMQ_INDEX_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "mapped_file.h"

typedef struct rmq_index_file {
    rmq_mapped_file_t *mf;
    int32_t hash_slot_num;
    int32_t index_num;
} rmq_index_file_t;

/* Open or create (create=1) one IndexFile of 40 + slots*4 + num*20 bytes.
 * A new file gets index_count = 1. An existing file whose size does not
 * match is RMQ_ECORRUPT. A put cut short between its slot and its count (a
 * killed process) is undone: the slot points at its older entries again. */
int rmq_index_file_open(const char *path, int32_t hash_slot_num, int32_t index_num, int create,
                        rmq_index_file_t **out);

/* Add one entry for topic#key. RMQ_EFULL when index_count == index_num.
 * Updates the header (timestamps, phy offsets, counts). */
int rmq_index_file_put_key(rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                           const uint8_t *key, size_t key_len, int64_t phy_offset,
                           int64_t store_timestamp);

/* rmq_index_file_put_key by the key's hash (rmq_index_key_hash). */
int rmq_index_file_put_hashed(rmq_index_file_t *f, int32_t hash, int64_t phy_offset,
                              int64_t store_timestamp);

/* Bring the hash slot a put of this hash reads and writes into the cache:
 * the slot table (20 MB at RocketMQ's default) misses it on nearly every
 * put. A hint only. */
void rmq_index_file_prefetch_slot(const rmq_index_file_t *f, int32_t hash);

/* Newest first: up to max offsets of entries for topic#key whose store time is
 * within [begin_ts, end_ts] (ms). *n receives the count. */
int rmq_index_file_select(const rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t begin_ts, int64_t end_ts,
                          int64_t *out, int max, int *n);

/* abs(Java hashCode(topic + "#" + key)), 0 for Integer.MIN_VALUE: the hash
 * a key's entries carry. */
int32_t rmq_index_key_hash(const uint8_t *topic, size_t topic_len, const uint8_t *key,
                           size_t key_len);

/* A set of CommitLog offsets, for a query over several files to report each
 * offset once. Zero-initialise; free with rmq_offset_set_free. */
typedef struct rmq_offset_set {
    int64_t *keys;
    uint8_t *used;
    size_t cap; /* a power of two */
    size_t len;
} rmq_offset_set_t;

void rmq_offset_set_free(rmq_offset_set_t *s);

/* rmq_index_file_select by the key's hash, appending to out[*n..max) (newest
 * first): offsets of entries whose store time lies in [begin_ts, end_ts] at
 * the second's granularity an entry keeps. With seen, an offset already in
 * it is skipped and every one appended is added. */
int rmq_index_file_collect(const rmq_index_file_t *f, int32_t hash, int64_t begin_ts,
                           int64_t end_ts, int64_t *out, int max, int *n, rmq_offset_set_t *seen);

/* 1 when f has entries and its time range, widened by the milliseconds its
 * entries drop, overlaps [begin_ts, end_ts]. */
int rmq_index_file_may_hold(const rmq_index_file_t *f, int64_t begin_ts, int64_t end_ts);

/* 1 when the file at path, not opened, has the size and a header an
 * IndexFile made with these parameters can have (recovery's check before
 * opening); *end_ts receives its header's end_timestamp (-1 with no entry). */
int rmq_index_file_sane(const char *path, int32_t hash_slot_num, int32_t index_num,
                        int64_t *end_ts);

/* Header accessors (read from the mapping). */
int64_t rmq_index_file_begin_timestamp(const rmq_index_file_t *f);
int64_t rmq_index_file_end_timestamp(const rmq_index_file_t *f);
int64_t rmq_index_file_begin_phy_offset(const rmq_index_file_t *f);
int64_t rmq_index_file_end_phy_offset(const rmq_index_file_t *f);
int32_t rmq_index_file_index_count(const rmq_index_file_t *f);

int rmq_index_file_flush(rmq_index_file_t *f);
void rmq_index_file_close(rmq_index_file_t *f, int unlink_file);

#endif /* RMQ_INDEX_FILE_H */
