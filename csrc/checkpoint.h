/* checkpoint.h: StoreCheckpoint, one page (rmq_format.h section 7).
 * Blocking (pwrite + fdatasync); not thread-safe: one writer. */
#ifndef RMQ_CHECKPOINT_H
#define RMQ_CHECKPOINT_H

#include <stdint.h>

typedef struct rmq_checkpoint {
    int64_t physic_msg_timestamp;
    int64_t logics_msg_timestamp;
    int64_t index_msg_timestamp;
    int64_t confirm_phy_offset;
    int64_t dispatched_offset;
} rmq_checkpoint_t;

/* RMQ_OK, -ENOENT when there is no file, RMQ_ECORRUPT on a bad magic/CRC. */
int rmq_checkpoint_load(const char *path, rmq_checkpoint_t *cp);

/* Write the whole page with one pwrite, then fdatasync. fd from
 * rmq_checkpoint_open (created 0644 if missing). */
int rmq_checkpoint_open(const char *path, int *fd);
int rmq_checkpoint_save(int fd, const rmq_checkpoint_t *cp);

#endif /* RMQ_CHECKPOINT_H */
