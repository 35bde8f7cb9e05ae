#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rmq_errors.h"
#include "rmq_format.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static int64_t g_live;

int64_t rmq_mapped_file_live_count(void) { return __atomic_load_n(&g_live, __ATOMIC_RELAXED); }

/* Every page is written through the mapping, and a store on a full disk
 * (or a size-limited tmpfs) that touches a page with no block behind it gets
 * SIGBUS, not an error. So blocks are reserved before mapping: fallocate
 * extends a new or short file, and fills the holes of an existing sparse one
 * (a copy made by cp --sparse=always, rsync -S or tar -S of a segment whose
 * tail was never written): a full disk fails here, with ENOSPC. Files that
 * are whole (st_blocks covers the size) cost one fstat. Filesystems without
 * fallocate get a sparse extension. */
static int presize(int fd, const struct stat *st, int64_t want) {
    int64_t have = (int64_t)st->st_size;
    int64_t backed = (int64_t)st->st_blocks * 512; /* st_blocks counts 512-byte units */
    if (have >= want && backed >= want) return RMQ_OK;
    int rc = posix_fallocate(fd, 0, want);
    if (rc == 0) return RMQ_OK;
    if (rc != EOPNOTSUPP && rc != EINVAL) return -rc;
    if (have < want && ftruncate(fd, (off_t)want) != 0) return -errno;
    return RMQ_OK;
}

int rmq_mapped_file_open(const char *path, int64_t from_offset, int64_t file_size,
                         int create, rmq_mapped_file_t **out) {
    *out = NULL;
    if (file_size <= 0 || from_offset < 0) return RMQ_EBAD_ARG;
    int created = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        created = 1;
        if (fd < 0 && errno == EEXIST) {
            /* Another thread (the segment allocator) created it just now. */
            fd = open(path, O_RDWR | O_CLOEXEC);
            created = 0;
        }
    }
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if (st.st_size > file_size) {
        close(fd);
        return RMQ_ECORRUPT; /* larger than a segment: not ours */
    }
    int rc = presize(fd, &st, file_size);
    if (rc != RMQ_OK) {
        close(fd);
        if (created) unlink(path);
        return rc;
    }
    void *base = mmap(NULL, (size_t)file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int e = -errno;
        close(fd);
        if (created) unlink(path);
        return e;
    }
    rmq_mapped_file_t *f = calloc(1, sizeof(*f));
    char *p = strdup(path);
    if (!f || !p) {
        free(f);
        free(p);
        munmap(base, (size_t)file_size);
        close(fd);
        return -ENOMEM;
    }
    f->path = p;
    f->fd = fd;
    f->base = base;
    f->file_size = file_size;
    f->from_offset = from_offset;
    f->found_size = created ? 0 : (int64_t)st.st_size;
    f->refs = 1;
    __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);
    *out = f;
    return RMQ_OK;
}

int rmq_mapped_file_create_filled(const char *path, int64_t file_size, int64_t fill,
                                  int *made) {
    static const uint8_t zeros[1 << 16];
    *made = 0;
    if (file_size <= 0) return RMQ_EBAD_ARG;
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof(dir)) return RMQ_EBAD_ARG;
    if (!slash) {
        dir[0] = '.';
        n = 1;
    } else if (n == 0) {
        dir[0] = '/';
        n = 1;
    } else {
        memcpy(dir, path, n);
    }
    dir[n] = '\0';
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) {
        /* kernels and filesystems without O_TMPFILE: the plain way */
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return RMQ_OK;
        return -errno;
    }
    int rc = posix_fallocate(fd, 0, file_size);
    if ((rc == EOPNOTSUPP || rc == EINVAL) && ftruncate(fd, (off_t)file_size) == 0) rc = 0;
    if (rc != 0) {
        close(fd);
        return rc > 0 ? -rc : -errno;
    }
    if (fill > file_size) fill = file_size;
    for (int64_t off = 0; off < fill;) {
        int64_t left = fill - off;
        size_t len = left < (int64_t)sizeof(zeros) ? (size_t)left : sizeof(zeros);
        ssize_t w = pwrite(fd, zeros, len, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? -errno : -EIO;
            close(fd);
            return e;
        }
        off += w;
    }
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) {
        *made = 1;
    } else if (errno == EEXIST) {
        *made = -1;
    } else if (errno != ENOENT) { /* ENOENT: no /proc, the plain way */
        int e = -errno;
        close(fd);
        return e;
    }
    close(fd);
    return RMQ_OK;
}

void rmq_mapped_file_set_warmed(rmq_mapped_file_t *f, int64_t to) {
    if (to > f->file_size) to = f->file_size;
    __atomic_store_n(&f->warmed_to, to, __ATOMIC_RELEASE);
}

void rmq_mapped_file_warm(rmq_mapped_file_t *f, int64_t len) {
    if (len > f->file_size) len = f->file_size;
    if (len > 0) (void)madvise(f->base, (size_t)len, MADV_POPULATE_READ);
}

void rmq_mapped_file_warm_write(rmq_mapped_file_t *f, int64_t from, int64_t len) {
    int64_t page = RMQ_OS_PAGE_SIZE;
    int64_t start = from & ~(page - 1);
    int64_t end = from + len;
    if (end > f->file_size) end = f->file_size;
    end = (end + page - 1) & ~(page - 1);
    if (end > f->file_size) end = f->file_size;
    if (end <= start) return;
    if (madvise(f->base + start, (size_t)(end - start), MADV_POPULATE_WRITE) != 0) return;
    int64_t cur = __atomic_load_n(&f->warmed_to, __ATOMIC_ACQUIRE);
    while (cur < end && !__atomic_compare_exchange_n(&f->warmed_to, &cur, end, 0,
                                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

int rmq_mapped_file_flush(rmq_mapped_file_t *f, int least_pages, int64_t *flushed) {
    int64_t wrote = rmq_mapped_file_wrote(f);
    int64_t done = rmq_mapped_file_flushed(f);
    if (flushed) *flushed = done;
    if (wrote <= done) return RMQ_OK;
    if (least_pages > 0 &&
        wrote / RMQ_OS_PAGE_SIZE - done / RMQ_OS_PAGE_SIZE < least_pages)
        return RMQ_OK;
    int64_t start = done & ~(int64_t)(RMQ_OS_PAGE_SIZE - 1);
    if (msync(f->base + start, (size_t)(wrote - start), MS_SYNC) != 0) return -errno;
    /* Concurrent flushers: only move forward. */
    int64_t cur = done;
    while (cur < wrote &&
           !__atomic_compare_exchange_n(&f->flushed_pos, &cur, wrote, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
    }
    if (flushed) *flushed = rmq_mapped_file_flushed(f);
    return RMQ_OK;
}

void rmq_mapped_file_pin(rmq_mapped_file_t *f) { __atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL); }

static void free_file(rmq_mapped_file_t *f) {
    munmap(f->base, (size_t)f->file_size);
    close(f->fd);
    if (f->unlink_on_free) unlink(f->path);
    free(f->path);
    free(f);
    __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
}

void rmq_mapped_file_unpin(rmq_mapped_file_t *f) {
    if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) == 0) free_file(f);
}

void rmq_mapped_file_destroy(rmq_mapped_file_t *f, int unlink_file) {
    if (!f) return;
    if (__atomic_exchange_n(&f->destroyed, 1, __ATOMIC_ACQ_REL)) return;
    f->unlink_on_free = unlink_file;
    rmq_mapped_file_unpin(f);
}
