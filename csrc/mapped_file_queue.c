#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mapped_file_queue.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "paths.h"
#include "rmq_errors.h"
#include "rmq_format.h"

static int segment_path(const rmq_mfq_t *q, int64_t start, char *buf, size_t len) {
    int n = snprintf(buf, len, "%s/%020" PRId64, q->dir, start);
    return (n < 0 || (size_t)n >= len) ? RMQ_EBAD_ARG : RMQ_OK;
}

static int push_file(rmq_mfq_t *q, rmq_mapped_file_t *f) {
    if (q->count == q->cap) {
        int cap = q->cap ? q->cap * 2 : 8;
        rmq_mapped_file_t **nf = realloc(q->files, (size_t)cap * sizeof(*nf));
        if (!nf) return -ENOMEM;
        q->files = nf;
        q->cap = cap;
    }
    q->files[q->count++] = f;
    __atomic_store_n(&q->last, f, __ATOMIC_RELEASE);
    return RMQ_OK;
}

static void update_last(rmq_mfq_t *q) {
    /* Caller holds the lock. */
    __atomic_store_n(&q->last, q->count ? q->files[q->count - 1] : NULL, __ATOMIC_RELEASE);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int is_segment_name(const char *name, int64_t *start) {
    size_t n = strlen(name);
    if (n != RMQ_SEGMENT_NAME_DIGITS) return 0;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (name[i] < '0' || name[i] > '9') return 0;
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (name[i] - '0');
    }
    *start = v;
    return 1;
}

int rmq_mfq_open(const char *dir, int64_t file_size, int warm, rmq_mfq_t **out) {
    *out = NULL;
    if (file_size <= 0 || (file_size % RMQ_CQ_STORE_UNIT_SIZE != 0 && file_size % 8 != 0))
        return RMQ_EBAD_ARG;
    int rc = rmq_mkdirs(dir);
    if (rc != RMQ_OK) return rc;
    rmq_mfq_t *q = calloc(1, sizeof(*q));
    if (!q) return -ENOMEM;
    q->dir = strdup(dir);
    q->file_size = file_size;
    q->warm = warm;
    q->first_short = -1;
    pthread_mutex_init(&q->lock, NULL);
    if (!q->dir) {
        rmq_mfq_close(q);
        return -ENOMEM;
    }
    DIR *d = opendir(dir);
    if (!d) {
        rc = -errno;
        rmq_mfq_close(q);
        return rc;
    }
    int64_t *starts = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    rc = RMQ_OK;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        int64_t s;
        if (!is_segment_name(e->d_name, &s) || s % file_size != 0) {
            rc = RMQ_ENOT_STORE;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(starts, cap * sizeof(*ns));
            if (!ns) {
                rc = -ENOMEM;
                break;
            }
            starts = ns;
        }
        starts[n++] = s;
    }
    closedir(d);
    if (rc == RMQ_OK && n > 0) {
        qsort(starts, n, sizeof(*starts), cmp_i64);
        for (size_t i = 1; i < n; i++)
            if (starts[i] != starts[i - 1] + file_size) rc = RMQ_ENOT_STORE; /* a hole */
    }
    for (size_t i = 0; rc == RMQ_OK && i < n; i++) {
        char path[PATH_MAX];
        rc = segment_path(q, starts[i], path, sizeof(path));
        if (rc != RMQ_OK) break;
        rmq_mapped_file_t *f;
        rc = rmq_mapped_file_open(path, starts[i], file_size, 0, &f);
        if (rc == RMQ_ECORRUPT) rc = RMQ_ENOT_STORE;
        if (rc != RMQ_OK) break;
        /* A file shorter than a segment was cut (a torn write or damage):
         * its data ends where the file ended, whatever the zeros that now
         * pad it to size might look like. */
        f->wrote_pos = f->found_size < file_size ? f->found_size : file_size;
        f->flushed_pos = f->wrote_pos;
        if (f->found_size < file_size && q->first_short < 0) q->first_short = starts[i];
        rc = push_file(q, f);
        if (rc != RMQ_OK) rmq_mapped_file_destroy(f, 0);
    }
    free(starts);
    if (rc != RMQ_OK) {
        rmq_mfq_close(q);
        return rc;
    }
    q->flushed_where = rmq_mfq_max_offset(q);
    *out = q;
    return RMQ_OK;
}

rmq_mapped_file_t *rmq_mfq_last(rmq_mfq_t *q) { return __atomic_load_n(&q->last, __ATOMIC_ACQUIRE); }

static int create_file(rmq_mfq_t *q, int64_t start, rmq_mapped_file_t **out) {
    char path[PATH_MAX];
    int rc = segment_path(q, start, path, sizeof(path));
    if (rc != RMQ_OK) return rc;
    /* The first window is written (zeros) before the file has its name, with
     * pwrite, not faulted in through the mapping: see
     * rmq_mapped_file_create_filled for why. */
    int made = 0;
    if (q->warm) {
        rc = rmq_mapped_file_create_filled(path, q->file_size, RMQ_MFQ_WARM_WINDOW, &made);
        if (rc != RMQ_OK) return rc;
    }
    rc = rmq_mapped_file_open(path, start, q->file_size, 1, out);
    if (rc != RMQ_OK) return rc;
    if (made == 1)
        rmq_mapped_file_set_warmed(*out, RMQ_MFQ_WARM_WINDOW);
    else if (q->warm && made == 0)
        rmq_mapped_file_warm_write(*out, 0, RMQ_MFQ_WARM_WINDOW);
    return RMQ_OK;
}

int rmq_mfq_prepare_next(rmq_mfq_t *q) {
    pthread_mutex_lock(&q->lock);
    /* An empty queue's first segment is prepared too (it starts at 0). */
    int64_t next = q->count ? q->files[q->count - 1]->from_offset + q->file_size : 0;
    int have = q->prepared != NULL;
    pthread_mutex_unlock(&q->lock);
    if (have) return RMQ_OK;
    rmq_mapped_file_t *f;
    int rc = create_file(q, next, &f);
    if (rc != RMQ_OK) return rc;
    pthread_mutex_lock(&q->lock);
    int64_t now_next = q->count ? q->files[q->count - 1]->from_offset + q->file_size : 0;
    int unused = 0;
    if (q->prepared == NULL && now_next == next) {
        q->prepared = f;
        f = NULL;
    } else {
        /* Lost a race: the file is someone else's (same name) unless the
         * queue started after it (it is below the first file). */
        unused = q->count && next < q->files[0]->from_offset;
    }
    pthread_mutex_unlock(&q->lock);
    if (f) rmq_mapped_file_destroy(f, unused);
    return RMQ_OK;
}

void rmq_mfq_warm_ahead(rmq_mfq_t *q, int64_t window) {
    if (!q->warm) return;
    pthread_mutex_lock(&q->lock);
    rmq_mapped_file_t *f = q->count ? q->files[q->count - 1] : NULL;
    rmq_mapped_file_t *next = q->prepared;
    if (f) rmq_mapped_file_pin(f);
    if (next) rmq_mapped_file_pin(next);
    pthread_mutex_unlock(&q->lock);
    int64_t left = window;
    if (f) {
        int64_t wrote = rmq_mapped_file_wrote(f);
        int64_t from = __atomic_load_n(&f->warmed_to, __ATOMIC_ACQUIRE);
        if (from < wrote) from = wrote;
        int64_t until = wrote + window < f->file_size ? wrote + window : f->file_size;
        if (until > from) rmq_mapped_file_warm_write(f, from, until - from);
        left = wrote + window - f->file_size;
        rmq_mapped_file_unpin(f);
    }
    if (next) {
        if (left > 0) {
            int64_t from = __atomic_load_n(&next->warmed_to, __ATOMIC_ACQUIRE);
            if (from < left) rmq_mapped_file_warm_write(next, from, left - from);
        }
        rmq_mapped_file_unpin(next);
    }
}

int rmq_mfq_has_prepared(rmq_mfq_t *q) {
    return __atomic_load_n(&q->prepared, __ATOMIC_ACQUIRE) != NULL;
}

static int append_file(rmq_mfq_t *q, int64_t start, int empty, int64_t start_offset,
                       rmq_mapped_file_t **out) {
    rmq_mapped_file_t *f = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->prepared && q->prepared->from_offset == start) {
        f = q->prepared;
        q->prepared = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    if (!f) {
        int rc = create_file(q, start, &f);
        if (rc != RMQ_OK) return rc;
    }
    if (empty) {
        /* An empty queue may start mid-file (a ConsumeQueue whose head was
         * removed): everything before start_offset counts as written. */
        int64_t rel = start_offset - start;
        f->wrote_pos = rel;
        f->flushed_pos = rel;
        __atomic_store_n(&q->flushed_where, start_offset, __ATOMIC_RELEASE);
    }
    pthread_mutex_lock(&q->lock);
    int rc = push_file(q, f);
    /* The allocator may have prepared its own mapping of this very file
     * while we created it: drop that mapping, never the file. */
    rmq_mapped_file_t *stale = NULL;
    if (rc == RMQ_OK && q->prepared && q->prepared->from_offset <= f->from_offset) {
        stale = q->prepared;
        q->prepared = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    /* A prepared file below the new one was never used (an empty queue that
     * started further on, as a slave's CommitLog does): its file goes too,
     * or the directory would no longer be contiguous. */
    if (stale) rmq_mapped_file_destroy(stale, stale->from_offset < f->from_offset);
    if (rc != RMQ_OK) {
        rmq_mapped_file_destroy(f, 1);
        return rc;
    }
    *out = f;
    return RMQ_OK;
}

int rmq_mfq_append_next(rmq_mfq_t *q, rmq_mapped_file_t **out) {
    rmq_mapped_file_t *last = rmq_mfq_last(q);
    if (!last) return rmq_mfq_last_for_append(q, 0, out);
    return append_file(q, last->from_offset + q->file_size, 0, 0, out);
}

int rmq_mfq_last_for_append(rmq_mfq_t *q, int64_t start_offset, rmq_mapped_file_t **out) {
    rmq_mapped_file_t *last = rmq_mfq_last(q);
    if (last && rmq_mapped_file_wrote(last) < q->file_size) {
        *out = last;
        return RMQ_OK;
    }
    int64_t start = last ? last->from_offset + q->file_size
                         : start_offset - start_offset % q->file_size;
    return append_file(q, start, last == NULL, start_offset, out);
}

static int find_index(rmq_mfq_t *q, int64_t offset) {
    if (q->count == 0) return -1;
    int64_t first = q->files[0]->from_offset;
    if (offset < first) return -1;
    int64_t i = (offset - first) / q->file_size;
    if (i >= q->count) return -1;
    return (int)i;
}

int rmq_mfq_find_pinned(rmq_mfq_t *q, int64_t offset, rmq_mapped_file_t **out) {
    pthread_mutex_lock(&q->lock);
    int i = find_index(q, offset);
    if (i < 0) {
        pthread_mutex_unlock(&q->lock);
        return RMQ_ENOT_FOUND;
    }
    rmq_mapped_file_t *f = q->files[i];
    rmq_mapped_file_pin(f);
    pthread_mutex_unlock(&q->lock);
    *out = f;
    return RMQ_OK;
}

int64_t rmq_mfq_min_offset(rmq_mfq_t *q) {
    pthread_mutex_lock(&q->lock);
    int64_t v = q->count ? q->files[0]->from_offset : 0;
    pthread_mutex_unlock(&q->lock);
    return v;
}

int64_t rmq_mfq_max_offset(rmq_mfq_t *q) {
    rmq_mapped_file_t *last = rmq_mfq_last(q);
    return last ? last->from_offset + rmq_mapped_file_wrote(last) : 0;
}

int64_t rmq_mfq_flushed_where(rmq_mfq_t *q) {
    return __atomic_load_n(&q->flushed_where, __ATOMIC_ACQUIRE);
}

void rmq_mfq_set_flushed_where(rmq_mfq_t *q, int64_t offset) {
    __atomic_store_n(&q->flushed_where, offset, __ATOMIC_RELEASE);
}

int rmq_mfq_flush(rmq_mfq_t *q, int least_pages, int64_t *flushed_where) {
    int rc = RMQ_OK;
    for (;;) {
        int64_t where = rmq_mfq_flushed_where(q);
        rmq_mapped_file_t *f;
        if (rmq_mfq_find_pinned(q, where, &f) != RMQ_OK) {
            /* where is at the very end of the last (full) file, or below the
             * first file after retention: start from the first file. */
            int64_t mn = rmq_mfq_min_offset(q);
            if (where < mn) {
                rmq_mfq_set_flushed_where(q, mn);
                continue;
            }
            break;
        }
        int64_t flushed;
        rc = rmq_mapped_file_flush(f, least_pages, &flushed);
        int64_t abs_flushed = f->from_offset + flushed;
        int full = flushed >= f->file_size;
        rmq_mapped_file_unpin(f);
        if (rc != RMQ_OK) break;
        int64_t cur = where;
        while (cur < abs_flushed &&
               !__atomic_compare_exchange_n(&q->flushed_where, &cur, abs_flushed, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        if (!full || abs_flushed <= where) break; /* nothing more to do here */
    }
    if (flushed_where) *flushed_where = rmq_mfq_flushed_where(q);
    return rc;
}

static void zero_tail(rmq_mapped_file_t *f, int64_t rel) {
    /* The partial page by hand, whole pages with FALLOC_FL_ZERO_RANGE, which
     * makes them unwritten extents instead of a GiB of dirty zero pages. */
    int64_t page_end = (rel + RMQ_OS_PAGE_SIZE - 1) & ~(int64_t)(RMQ_OS_PAGE_SIZE - 1);
    if (page_end > f->file_size) page_end = f->file_size;
    memset(f->base + rel, 0, (size_t)(page_end - rel));
    if (page_end < f->file_size &&
        fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, page_end,
                  f->file_size - page_end) != 0)
        memset(f->base + page_end, 0, (size_t)(f->file_size - page_end));
}

int rmq_mfq_truncate_dirty(rmq_mfq_t *q, int64_t offset) {
    pthread_mutex_lock(&q->lock);
    rmq_mapped_file_t *prepared = q->prepared;
    q->prepared = NULL;
    while (q->count > 0 && q->files[q->count - 1]->from_offset > offset) {
        rmq_mapped_file_t *f = q->files[--q->count];
        update_last(q);
        rmq_mapped_file_destroy(f, 1);
    }
    if (q->count > 0) {
        rmq_mapped_file_t *f = q->files[q->count - 1];
        int64_t rel = offset - f->from_offset;
        if (rel >= f->file_size) rel = f->file_size;
        if (rel < f->file_size) zero_tail(f, rel);
        __atomic_store_n(&f->wrote_pos, rel, __ATOMIC_RELEASE);
        if (rmq_mapped_file_flushed(f) > rel) __atomic_store_n(&f->flushed_pos, rel, __ATOMIC_RELEASE);
    }
    if (rmq_mfq_flushed_where(q) > offset) rmq_mfq_set_flushed_where(q, offset);
    int stale_path = prepared && prepared->from_offset <= offset;
    pthread_mutex_unlock(&q->lock);
    if (prepared) rmq_mapped_file_destroy(prepared, !stale_path);
    return RMQ_OK;
}

static int delete_head(rmq_mfq_t *q, int k) {
    /* Caller holds the lock. */
    for (int i = 0; i < k; i++) rmq_mapped_file_destroy(q->files[i], 1);
    memmove(q->files, q->files + k, (size_t)(q->count - k) * sizeof(*q->files));
    q->count -= k;
    update_last(q);
    return k;
}

int rmq_mfq_delete_expired_by_time(rmq_mfq_t *q, int64_t expire_ms, int64_t now_ms, int force,
                                   int max_files) {
    pthread_mutex_lock(&q->lock);
    int k = 0;
    while (k < q->count - 1 && k < max_files) {
        struct stat st;
        if (fstat(q->files[k]->fd, &st) != 0) break;
        int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        if (!force && mtime + expire_ms >= now_ms) break;
        k++;
    }
    int n = delete_head(q, k);
    pthread_mutex_unlock(&q->lock);
    return n;
}

int rmq_mfq_delete_before(rmq_mfq_t *q, int64_t offset) {
    pthread_mutex_lock(&q->lock);
    int k = 0;
    while (k < q->count - 1 && q->files[k]->from_offset + q->file_size <= offset) k++;
    int n = delete_head(q, k);
    pthread_mutex_unlock(&q->lock);
    return n;
}

int rmq_mfq_destroy_all(rmq_mfq_t *q) {
    pthread_mutex_lock(&q->lock);
    int n = delete_head(q, q->count);
    if (q->prepared) rmq_mapped_file_destroy(q->prepared, 1);
    q->prepared = NULL;
    q->flushed_where = 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void rmq_mfq_close(rmq_mfq_t *q) {
    if (!q) return;
    for (int i = 0; i < q->count; i++) rmq_mapped_file_destroy(q->files[i], 0);
    /* A prepared file holds no data; it is left on disk (its path may be
     * shared with a live segment after a race with the allocator), and the
     * next open trims it as an empty tail segment. */
    if (q->prepared) rmq_mapped_file_destroy(q->prepared, 0);
    pthread_mutex_destroy(&q->lock);
    free(q->files);
    free(q->dir);
    free(q);
}

int rmq_mfq_file_starts(rmq_mfq_t *q, int64_t *out, int max) {
    pthread_mutex_lock(&q->lock);
    int n = q->count < max ? q->count : max;
    for (int i = 0; i < n; i++) out[i] = q->files[i]->from_offset;
    pthread_mutex_unlock(&q->lock);
    return n;
}
