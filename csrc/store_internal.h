/* Shared by message_store.c (writes, dispatch, recovery) and store_read.c
 * (the read path); not part of the store's API. */
#ifndef RMQ_STORE_INTERNAL_H
#define RMQ_STORE_INTERNAL_H

#include "message_store.h"

/* The ConsumeQueue of (topic, qid), NULL when it has none. */
rmq_consume_queue_t *rmq_store_find_cq(rmq_store_t *s, const uint8_t *topic, int32_t tlen,
                                        int32_t qid);

/* Whether the record a unit names has the header the unit promises (a
 * record of this queue at this offset, of this size, in a ConsumeQueue);
 * *pin caches the pinned CommitLog segment across calls (the caller unpins
 * it). */
int rmq_store_unit_names_record(rmq_store_t *s, const rmq_cq_unit_t *u, int64_t qoff, int32_t qid,
                                rmq_mapped_file_t **pin);

#endif
