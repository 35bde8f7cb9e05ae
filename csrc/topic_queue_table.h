/* topic_queue_table.h: the map (topic, queue id) -> per-queue state that the
 * store keeps in memory: the next queue offset to assign (RocketMQ's
 * CommitLog.topicQueueTable) and the queue's ConsumeQueue (consumeQueueTable).
 * Entries have stable addresses until the table is freed.
 *
 * Threading: lookups and inserts on the owner thread; rmq_tq_snapshot may be
 * called from any thread (inserts and snapshots take the table mutex). */
#ifndef RMQ_TOPIC_QUEUE_TABLE_H
#define RMQ_TOPIC_QUEUE_TABLE_H

#include <pthread.h>
#include <stdint.h>

#include "rmq_format.h"

struct rmq_consume_queue;

typedef struct rmq_tq_entry {
    uint8_t topic[RMQ_MAX_TOPIC_LENGTH + 1]; /* NUL-terminated copy */
    int32_t topic_len;
    int32_t queue_id;
    uint64_t hash;
    int64_t next_queue_offset;      /* assigned by append */
    struct rmq_consume_queue *cq;   /* opened by dispatch (NULL until then) */
} rmq_tq_entry_t;

typedef struct rmq_tq_table {
    rmq_tq_entry_t **slots; /* open addressing, power-of-two capacity */
    int64_t cap;
    int64_t count;
    pthread_mutex_t lock;
} rmq_tq_table_t;

int rmq_tq_init(rmq_tq_table_t *t);
/* Frees entries (not their ConsumeQueues: the owner closes those first). */
void rmq_tq_free(rmq_tq_table_t *t);

/* Find (topic, queue_id); with create, insert a zeroed entry when missing.
 * NULL when missing (or out of memory). topic_len <= 127. Owner thread. */
rmq_tq_entry_t *rmq_tq_get(rmq_tq_table_t *t, const uint8_t *topic, int32_t topic_len,
                           int32_t queue_id, int create);

/* Remove an entry (topic deletion); the caller owns it afterwards. */
rmq_tq_entry_t *rmq_tq_remove(rmq_tq_table_t *t, const uint8_t *topic, int32_t topic_len,
                              int32_t queue_id);

/* Copy up to max entry pointers into out; returns the total entry count.
 * Any thread. */
int64_t rmq_tq_snapshot(rmq_tq_table_t *t, rmq_tq_entry_t **out, int64_t max);

#endif /* RMQ_TOPIC_QUEUE_TABLE_H */
