/* commit_log_replica.h: appending bytes copied from a master's CommitLog
 * (HA replication). The copy is the CommitLog itself, byte for byte: records
 * keep the offsets, queue offsets and store times the master gave them.
 *
 * Threading: owner thread, like every append. */
#ifndef RMQ_COMMIT_LOG_REPLICA_H
#define RMQ_COMMIT_LOG_REPLICA_H

#include <stdint.h>

#include "commit_log.h"

/* Append data, the master's CommitLog from offset on, to cl. offset must be
 * the end of cl (or, for an empty cl, a segment boundary: the master's first
 * retained segment). Writes whole units only: every record that passes the
 * checks recovery makes (magic, structure, its own offset, queue id, topic,
 * and with check_crc the body CRC) and end-of-segment blanks that end
 * exactly where this log's segment ends (a master with another segment size
 * is refused here). Stops before a unit that has not fully arrived.
 * *accepted: bytes written (a prefix of data); *rolled: RMQ_APPEND_* flags
 * for the allocator. Returns RMQ_OK, RMQ_EBAD_ARG (offset is not where this
 * log ends) or RMQ_ECORRUPT (the unit at offset + *accepted failed a check:
 * nothing of it was written), or an error creating a segment. */
int rmq_commit_log_append_replica(rmq_commit_log_t *cl, int64_t offset, const uint8_t *data,
                                  int64_t len, int check_crc, int64_t *accepted, int32_t *rolled);

#endif /* RMQ_COMMIT_LOG_REPLICA_H */
