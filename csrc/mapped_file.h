/* mapped_file.h: one fixed-size, pre-sized, mmap'd file (RocketMQ MappedFile).
 *
 * Threading: one writer (the owner) moves wrote_pos; any thread may flush or
 * pin. wrote_pos/flushed_pos are atomics. The mapping and fd stay valid while
 * a pin is held: destroy() drops the owner's reference and the last unpin
 * unmaps, closes and frees. */
#ifndef RMQ_MAPPED_FILE_H
#define RMQ_MAPPED_FILE_H

#include <stdint.h>

typedef struct rmq_mapped_file {
    char *path;             /* owned */
    int fd;
    uint8_t *base;          /* mmap of file_size bytes */
    int64_t file_size;
    int64_t from_offset;    /* logical offset of byte 0 (the file's name) */
    int64_t found_size;     /* size on disk when opened (< file_size: it was short) */
    int64_t wrote_pos;      /* atomic: bytes written (relative) */
    int64_t flushed_pos;    /* atomic: bytes known durable (relative) */
    int64_t warmed_to;      /* atomic: pages below are write-faulted in (relative) */
    int refs;               /* atomic: pins + 1 for the owner */
    int destroyed;          /* atomic: owner reference dropped */
    int unlink_on_free;
} rmq_mapped_file_t;

/* Open (create=1: create if missing) path as a file of exactly file_size
 * bytes: pre-sized with fallocate, a short file is extended with zeros.
 * Blocking (file creation). *out is owned by the caller (destroy it). */
int rmq_mapped_file_open(const char *path, int64_t from_offset, int64_t file_size,
                         int create, rmq_mapped_file_t **out);

/* Create path as a file of file_size bytes (fallocated) whose first `fill`
 * bytes are zeros written with pwrite, and only then give it its name
 * (O_TMPFILE, then linkat). Why not fault the pages in through the mapping
 * (MADV_POPULATE_WRITE): each such fault does the filesystem's work (block
 * allocation, the journal, dirty throttling) under the process-wide
 * mmap_lock, so on a slow disk one slow fault holds up every mmap/munmap of
 * every thread, the event loop's memory allocator included (a CI run: 20 s).
 * pwrite does that work under the file's own lock. The file is invisible
 * until named, so nothing another thread writes through a mapping of it can
 * be overwritten. *made: 1 created and named; -1 path existed already
 * (someone else named it first; nothing done); 0 not supported here (no
 * O_TMPFILE or /proc: nothing done, create it the plain way). Blocking. */
int rmq_mapped_file_create_filled(const char *path, int64_t file_size, int64_t fill, int *made);

/* warmed_to = to (pages below are in the page cache with their blocks
 * reserved: written by rmq_mapped_file_create_filled). Any thread. */
void rmq_mapped_file_set_warmed(rmq_mapped_file_t *f, int64_t to);

/* Fault the mapping's first len bytes into the page cache read-only
 * (MADV_POPULATE_READ) so the first writes there take cheap write-protect
 * faults. Blocking; best effort. */
void rmq_mapped_file_warm(rmq_mapped_file_t *f, int64_t len);

/* Write-fault [from, from+len) in (MADV_POPULATE_WRITE): later writes there
 * take no page fault. The pages start dirty (zeros), which costs nothing
 * extra when data lands on them before writeback. Moves warmed_to forward.
 * Blocking; any thread; best effort (older kernels: no-op). */
void rmq_mapped_file_warm_write(rmq_mapped_file_t *f, int64_t from, int64_t len);

/* msync [flushed_pos, wrote_pos) when at least least_pages dirty pages are
 * pending (0: any). Writes the new flushed position (relative) to *flushed.
 * Blocking; thread-safe; call without the GIL. */
int rmq_mapped_file_flush(rmq_mapped_file_t *f, int least_pages, int64_t *flushed);

/* Pins: keep mapping and fd alive. Thread-safe. */
void rmq_mapped_file_pin(rmq_mapped_file_t *f);
void rmq_mapped_file_unpin(rmq_mapped_file_t *f);

/* Drop the owner's reference; with unlink_file the file is deleted when the
 * last pin goes. Blocking when it frees (munmap/unlink). */
void rmq_mapped_file_destroy(rmq_mapped_file_t *f, int unlink_file);

static inline int64_t rmq_mapped_file_wrote(const rmq_mapped_file_t *f) {
    return __atomic_load_n(&f->wrote_pos, __ATOMIC_ACQUIRE);
}
static inline void rmq_mapped_file_set_wrote(rmq_mapped_file_t *f, int64_t pos) {
    __atomic_store_n(&f->wrote_pos, pos, __ATOMIC_RELEASE);
}
static inline int64_t rmq_mapped_file_flushed(const rmq_mapped_file_t *f) {
    return __atomic_load_n(&f->flushed_pos, __ATOMIC_ACQUIRE);
}

/* Live mapped files in this process (leak checks in tests). */
int64_t rmq_mapped_file_live_count(void);

#endif /* RMQ_MAPPED_FILE_H */
