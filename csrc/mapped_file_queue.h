/* mapped_file_queue.h: a directory of equal-size MappedFiles named by their
 * start offset (rmq_format.h section 1): RocketMQ's MappedFileQueue.
 * Knows nothing of what the bytes mean.
 *
 * Threading: the owner thread appends (last/roll/truncate); any thread may
 * call find_pinned, flush, prepare_next and delete_*. The files array is
 * guarded by an internal mutex; callers outside the owner thread pin the file
 * they use. */
#ifndef RMQ_MAPPED_FILE_QUEUE_H
#define RMQ_MAPPED_FILE_QUEUE_H

#include <pthread.h>
#include <stdint.h>

#include "mapped_file.h"

/* How far ahead of the write position a warming queue keeps pages
 * write-faulted in (a new file gets its first window when created). */
#define RMQ_MFQ_WARM_WINDOW (32LL << 20)

typedef struct rmq_mfq {
    char *dir;
    int64_t file_size;
    rmq_mapped_file_t **files; /* sorted by from_offset, contiguous */
    int count;
    int cap;
    rmq_mapped_file_t *last;     /* atomic: files[count-1] or NULL, for lock-free readers */
    rmq_mapped_file_t *prepared; /* the next file, created ahead of need */
    int warm;                    /* keep pages write-faulted ahead (RMQ_MFQ_WARM_WINDOW) */
    int64_t first_short;         /* start of the first file found short at open, or -1 */
    int64_t flushed_where;       /* atomic: absolute offset known durable */
    pthread_mutex_t lock;
} rmq_mfq_t;

/* Open dir (created if missing) and map every segment file in it. Files must
 * be named by 20 digits that are a multiple of file_size, contiguous, and of
 * size <= file_size (a short file is extended); anything else is
 * RMQ_ENOT_STORE. wrote/flushed positions are set to the full size of every
 * file, or to the size found for a short file (then extended; first_short
 * names the first such file): callers trim with truncate_dirty after
 * recovery. Blocking. */
int rmq_mfq_open(const char *dir, int64_t file_size, int warm, rmq_mfq_t **out);

/* The file to append to: the last one if it has room, else a new one starting
 * at the next multiple of file_size (or at start_offset when the queue is
 * empty). Owner thread. May block creating a file if none was prepared. */
int rmq_mfq_last_for_append(rmq_mfq_t *q, int64_t start_offset, rmq_mapped_file_t **out);

/* The last file or NULL. No pin: the last file is only removed by
 * truncate_dirty/destroy_all, which the owner thread calls. Any thread. */
rmq_mapped_file_t *rmq_mfq_last(rmq_mfq_t *q);

/* Append a new file after the last one (the prepared one when there is one)
 * even if the last has room left: the CommitLog rolls before it writes the
 * blank record, so a failure leaves the last file as it was. Owner thread. */
int rmq_mfq_append_next(rmq_mfq_t *q, rmq_mapped_file_t **out);

/* Create (and warm) the file that will follow the last one (the file at 0
 * for an empty queue), unless already prepared. Blocking; any thread; call
 * off the hot path. */
int rmq_mfq_prepare_next(rmq_mfq_t *q);

/* Write-fault up to window bytes ahead of the last file's write position
 * (and into the prepared next file when the window reaches past the end).
 * No-op unless the queue warms its files. Blocking; any thread. */
void rmq_mfq_warm_ahead(rmq_mfq_t *q, int64_t window);

/* Whether a next file is already prepared (cheap; owner thread). */
int rmq_mfq_has_prepared(rmq_mfq_t *q);

/* The file containing absolute offset, pinned (unpin when done), or
 * RMQ_ENOT_FOUND. Any thread. */
int rmq_mfq_find_pinned(rmq_mfq_t *q, int64_t offset, rmq_mapped_file_t **out);

/* Min offset (first file's start; 0 when empty) and max offset (last file's
 * start + wrote_pos). */
int64_t rmq_mfq_min_offset(rmq_mfq_t *q);
int64_t rmq_mfq_max_offset(rmq_mfq_t *q);

/* Flush the first not-fully-flushed file (least_pages as in
 * rmq_mapped_file_flush; 0 = everything written). Loops over every file up
 * to the write position. *flushed_where gets the absolute durable offset.
 * Blocking; any thread. */
int rmq_mfq_flush(rmq_mfq_t *q, int least_pages, int64_t *flushed_where);

int64_t rmq_mfq_flushed_where(rmq_mfq_t *q);
void rmq_mfq_set_flushed_where(rmq_mfq_t *q, int64_t offset);

/* Set the write position to offset: files after it are deleted, the file
 * containing it gets wrote=flushed=offset-start and its bytes from there on
 * are zeroed (so a later scan cannot see stale records). Owner thread. */
int rmq_mfq_truncate_dirty(rmq_mfq_t *q, int64_t offset);

/* Delete files, oldest first, while they are not the last file and
 * (file mtime + expire_ms < now_ms, or force) , at most max_files.
 * Returns the number deleted (>= 0) or a negative status. Any thread. */
int rmq_mfq_delete_expired_by_time(rmq_mfq_t *q, int64_t expire_ms, int64_t now_ms, int force,
                                   int max_files);

/* Delete leading files whose whole range is below offset (never the last).
 * Returns the number deleted. Any thread. */
int rmq_mfq_delete_before(rmq_mfq_t *q, int64_t offset);

/* Delete every file and leave the queue empty (topic deletion). */
int rmq_mfq_destroy_all(rmq_mfq_t *q);

/* Unmap everything (no unlink) and free the queue. */
void rmq_mfq_close(rmq_mfq_t *q);

/* Snapshot of file starts for tools: up to max starts, returns count. */
int rmq_mfq_file_starts(rmq_mfq_t *q, int64_t *out, int max);

#endif /* RMQ_MAPPED_FILE_QUEUE_H */
