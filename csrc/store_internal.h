/* Shared by message_store.c (writes, dispatch, recovery) and store_read.c
 * (the read path; recovery checks units with it too); not part of the
 * store's API. */
#ifndef RMQ_STORE_INTERNAL_H
#define RMQ_STORE_INTERNAL_H

#include "message_store.h"

/* Whether the record a unit names has the header the unit promises (a
 * record of this queue at this offset, of this size, in a ConsumeQueue);
 * *pin caches the pinned CommitLog segment across calls (the caller unpins
 * it). */
int rmq_store_unit_names_record(rmq_store_t *s, const rmq_cq_unit_t *u, int64_t qoff, int32_t qid,
                                rmq_mapped_file_t **pin);

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
