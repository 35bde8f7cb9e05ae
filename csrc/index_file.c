/* index_file.c: RocketMQ's hash IndexFile and the IndexService over a
 * directory of them. Layout: rmq_format.h section 6; API: index_file.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "index_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "endian.h"
#include "java_hash.h"
#include "paths.h"
#include "rmq_errors.h"
#include "rmq_format.h"

/* Header field offsets. */
#define HDR_BEGIN_TS 0
#define HDR_END_TS 8
#define HDR_BEGIN_PHY 16
#define HDR_END_PHY 24
#define HDR_SLOT_COUNT 32
#define HDR_INDEX_COUNT 36

/* Entry field offsets. */
#define ENT_HASH 0
#define ENT_PHY 4
#define ENT_TIME_DIFF 12
#define ENT_PREV 16

#define INDEX_NAME_LEN 17

/* ------------------------------------------------------------------------
 * One IndexFile
 * ------------------------------------------------------------------------ */

static int64_t index_file_size(int32_t slots, int32_t num) {
    return (int64_t)RMQ_INDEX_HEADER_SIZE + (int64_t)slots * RMQ_INDEX_HASH_SLOT_SIZE +
           (int64_t)num * RMQ_INDEX_ENTRY_SIZE;
}

static uint8_t *slot_ptr(const rmq_index_file_t *f, int32_t slot) {
    return f->mf->base + RMQ_INDEX_HEADER_SIZE + (int64_t)slot * RMQ_INDEX_HASH_SLOT_SIZE;
}

static uint8_t *entry_ptr(const rmq_index_file_t *f, int32_t n) {
    return f->mf->base + RMQ_INDEX_HEADER_SIZE +
           (int64_t)f->hash_slot_num * RMQ_INDEX_HASH_SLOT_SIZE + (int64_t)n * RMQ_INDEX_ENTRY_SIZE;
}

/* abs(Java hashCode(topic + "#" + key)), 0 for Integer.MIN_VALUE. */
static int32_t key_hash(const uint8_t *topic, size_t topic_len, const uint8_t *key,
                        size_t key_len) {
    static const uint8_t sep = (uint8_t)RMQ_INDEX_KEY_SEPARATOR;
    uint32_t h = rmq_java_hash_update(0, topic, topic_len);
    h = rmq_java_hash_update(h, &sep, 1);
    h = rmq_java_hash_update(h, key, key_len);
    int32_t s = (int32_t)h;
    if (s == INT32_MIN) return 0;
    return s < 0 ? -s : s;
}

/* The count of entries that may be read: index_count clamped to the file. */
static int32_t readable_count(const rmq_index_file_t *f) {
    int32_t c = rmq_index_file_index_count(f);
    if (c > f->index_num) c = f->index_num;
    return c;
}

/* A put writes its entry at position count, then the slot's head, then the
 * header's count. A process killed between the last two leaves a slot whose
 * head is the uncounted entry: the next put would write over that entry
 * (another key's, in another chain) and the slot's older entries would be
 * out of reach. Point the slot back at the entry's predecessor; the record
 * is indexed again by recovery (the header's end offset is still the
 * previous put's). */
static void undo_torn_put(rmq_index_file_t *f, int32_t count) {
    if (count >= f->index_num) return;
    const uint8_t *ep = entry_ptr(f, count);
    int32_t hash = rmq_get_be32(ep + ENT_HASH);
    if (hash < 0) return; /* never a key's hash: not a written entry */
    uint8_t *sp = slot_ptr(f, hash % f->hash_slot_num);
    if (rmq_get_be32(sp) != count) return;
    int32_t prev = rmq_get_be32(ep + ENT_PREV);
    rmq_put_be32(sp, prev > 0 && prev < count ? prev : 0);
    __atomic_store_n(&f->mf->flushed_pos, 0, __ATOMIC_RELEASE); /* dirty */
}

int rmq_index_file_open(const char *path, int32_t hash_slot_num, int32_t index_num, int create,
                        rmq_index_file_t **out) {
    if (!out) return RMQ_EBAD_ARG;
    *out = NULL;
    if (!path || hash_slot_num <= 0 || index_num <= 0) return RMQ_EBAD_ARG;
    int64_t size = index_file_size(hash_slot_num, index_num);
    if ((uint64_t)size > (uint64_t)SIZE_MAX) return RMQ_EBAD_ARG;

    /* rmq_mapped_file_open would extend a short file; an IndexFile of the
     * wrong size was made with other parameters (or is damaged). */
    int is_new = 0;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode) || (int64_t)st.st_size != size) return RMQ_ECORRUPT;
    } else if (errno == ENOENT) {
        if (!create) return -ENOENT;
        is_new = 1;
    } else {
        return -errno;
    }

    rmq_mapped_file_t *mf = NULL;
    int rc = rmq_mapped_file_open(path, 0, size, create, &mf);
    if (rc != RMQ_OK) return rc;

    rmq_index_file_t *f = calloc(1, sizeof(*f));
    if (!f) {
        rmq_mapped_file_destroy(mf, is_new);
        return -ENOMEM;
    }
    f->mf = mf;
    f->hash_slot_num = hash_slot_num;
    f->index_num = index_num;

    int32_t count = rmq_get_be32(mf->base + HDR_INDEX_COUNT);
    if (count > index_num) {
        free(f);
        rmq_mapped_file_destroy(mf, 0);
        return RMQ_ECORRUPT;
    }
    /* Flush covers the whole mapping (msync of clean pages is cheap); puts
     * mark the file dirty by resetting flushed_pos. */
    rmq_mapped_file_set_wrote(mf, size);
    if (is_new || count <= 0) {
        /* Hash slots are written at random: fault the file in now, off the
         * per-key path (a first touch of a page costs a fault and a zero-fill). */
        if (is_new) rmq_mapped_file_warm(mf);
        rmq_put_be32(mf->base + HDR_INDEX_COUNT, 1); /* entry 0 is never used */
        __atomic_store_n(&mf->flushed_pos, 0, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&mf->flushed_pos, size, __ATOMIC_RELEASE);
        undo_torn_put(f, count);
    }
    *out = f;
    return RMQ_OK;
}

int rmq_index_file_put_key(rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                           const uint8_t *key, size_t key_len, int64_t phy_offset,
                           int64_t store_timestamp) {
    if (!f || (!topic && topic_len) || (!key && key_len)) return RMQ_EBAD_ARG;
    uint8_t *base = f->mf->base;
    int32_t count = rmq_index_file_index_count(f);
    if (count <= 0) count = 1;
    if (count >= f->index_num) return RMQ_EFULL;

    int32_t hash = key_hash(topic, topic_len, key, key_len);
    int32_t slot = hash % f->hash_slot_num;
    uint8_t *sp = slot_ptr(f, slot);
    int32_t prev = rmq_get_be32(sp);
    /* Only an already written entry can be a chain head. */
    if (prev <= 0 || prev >= count) prev = 0;

    int first = count <= 1;
    int64_t diff = 0;
    if (!first) {
        int64_t begin = rmq_get_be64(base + HDR_BEGIN_TS);
        int64_t ms;
        if (__builtin_sub_overflow(store_timestamp, begin, &ms))
            ms = store_timestamp > begin ? INT64_MAX : INT64_MIN;
        diff = ms / 1000;
        if (diff < 0) diff = 0;
        if (diff > INT32_MAX) diff = INT32_MAX;
    }

    /* Entry first, then the slot, then the header: a torn write leaves at
     * worst an unreachable entry. */
    uint8_t *ep = entry_ptr(f, count);
    rmq_put_be32(ep + ENT_HASH, hash);
    rmq_put_be64(ep + ENT_PHY, phy_offset);
    rmq_put_be32(ep + ENT_TIME_DIFF, (int32_t)diff);
    rmq_put_be32(ep + ENT_PREV, prev);
    rmq_put_be32(sp, count);

    if (first) {
        rmq_put_be64(base + HDR_BEGIN_TS, store_timestamp);
        rmq_put_be64(base + HDR_BEGIN_PHY, phy_offset);
    }
    if (prev == 0) {
        int32_t used = rmq_get_be32(base + HDR_SLOT_COUNT);
        if (used < INT32_MAX) rmq_put_be32(base + HDR_SLOT_COUNT, used + 1);
    }
    rmq_put_be32(base + HDR_INDEX_COUNT, count + 1);
    rmq_put_be64(base + HDR_END_TS, store_timestamp);
    rmq_put_be64(base + HDR_END_PHY, phy_offset);
    __atomic_store_n(&f->mf->flushed_pos, 0, __ATOMIC_RELEASE); /* dirty */
    return RMQ_OK;
}

/* Tiny open-addressing set of int64 (the service's duplicate filter). */
typedef struct {
    int64_t *keys;
    uint8_t *used;
    size_t cap; /* power of two */
    size_t len;
} offset_set_t;

static size_t set_index(int64_t v, size_t mask) {
    uint64_t x = (uint64_t)v * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & mask;
}

static int set_grow(offset_set_t *s) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    int64_t *keys = calloc(cap, sizeof(*keys));
    uint8_t *used = calloc(cap, 1);
    if (!keys || !used) {
        free(keys);
        free(used);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->used[i]) continue;
        size_t j = set_index(s->keys[i], cap - 1);
        while (used[j]) j = (j + 1) & (cap - 1);
        used[j] = 1;
        keys[j] = s->keys[i];
    }
    free(s->keys);
    free(s->used);
    s->keys = keys;
    s->used = used;
    s->cap = cap;
    return RMQ_OK;
}

/* 1 if v was added, 0 if already present, negative on allocation failure. */
static int set_add(offset_set_t *s, int64_t v) {
    if ((s->len + 1) * 2 > s->cap) {
        int rc = set_grow(s);
        if (rc != RMQ_OK) return rc;
    }
    size_t j = set_index(v, s->cap - 1);
    while (s->used[j]) {
        if (s->keys[j] == v) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->used[j] = 1;
    s->keys[j] = v;
    s->len++;
    return 1;
}

static void set_free(offset_set_t *s) {
    free(s->keys);
    free(s->used);
}

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Walk hash's chain newest first, appending to out[*n..max) the offsets of
 * entries with that hash whose time lies in [begin_ts, end_ts] at second
 * granularity. With a set, offsets already in it are skipped. */
static int select_hash(const rmq_index_file_t *f, int32_t hash, int64_t begin_ts, int64_t end_ts,
                       int64_t *out, int max, int *n, offset_set_t *seen) {
    int32_t count = readable_count(f);
    if (count <= 1 || *n >= max) return RMQ_OK;
    int64_t file_begin = rmq_index_file_begin_timestamp(f);
    int32_t cur = rmq_get_be32(slot_ptr(f, hash % f->hash_slot_num));
    /* Each step visits a distinct entry unless the chain is corrupt: bound
     * the walk so a cycle cannot spin forever. */
    for (int32_t steps = 0; steps < count && *n < max; steps++) {
        if (cur <= 0 || cur >= count) break;
        const uint8_t *ep = entry_ptr(f, cur);
        int32_t diff = rmq_get_be32(ep + ENT_TIME_DIFF);
        if (diff < 0) break; /* corrupt */
        int64_t t = sat_add(file_begin, (int64_t)diff * 1000);
        /* time_diff drops the milliseconds, so t <= the real store time
         * < t + 1000: compare the second the entry fell in. */
        int64_t t_last = sat_add(t, 999);
        if (rmq_get_be32(ep + ENT_HASH) == hash && t_last >= begin_ts && t <= end_ts) {
            int64_t off = rmq_get_be64(ep + ENT_PHY);
            int add = 1;
            if (seen) {
                add = set_add(seen, off);
                if (add < 0) return add;
            }
            if (add) out[(*n)++] = off;
        }
        int32_t prev = rmq_get_be32(ep + ENT_PREV);
        /* Chains run newest to oldest: once an entry is before the range
         * so are the rest (as RocketMQ stops). */
        if (prev == cur || t_last < begin_ts) break;
        cur = prev;
    }
    return RMQ_OK;
}

int rmq_index_file_select(const rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t begin_ts, int64_t end_ts,
                          int64_t *out, int max, int *n) {
    if (!f || !n || (!topic && topic_len) || (!key && key_len) || (max > 0 && !out))
        return RMQ_EBAD_ARG;
    *n = 0;
    if (max <= 0) return RMQ_OK;
    int32_t hash = key_hash(topic, topic_len, key, key_len);
    return select_hash(f, hash, begin_ts, end_ts, out, max, n, NULL);
}

int64_t rmq_index_file_begin_timestamp(const rmq_index_file_t *f) {
    return rmq_get_be64(f->mf->base + HDR_BEGIN_TS);
}
int64_t rmq_index_file_end_timestamp(const rmq_index_file_t *f) {
    return rmq_get_be64(f->mf->base + HDR_END_TS);
}
int64_t rmq_index_file_begin_phy_offset(const rmq_index_file_t *f) {
    return rmq_get_be64(f->mf->base + HDR_BEGIN_PHY);
}
int64_t rmq_index_file_end_phy_offset(const rmq_index_file_t *f) {
    return rmq_get_be64(f->mf->base + HDR_END_PHY);
}
int32_t rmq_index_file_index_count(const rmq_index_file_t *f) {
    return rmq_get_be32(f->mf->base + HDR_INDEX_COUNT);
}

int rmq_index_file_flush(rmq_index_file_t *f) {
    if (!f) return RMQ_EBAD_ARG;
    return rmq_mapped_file_flush(f->mf, 0, NULL);
}

void rmq_index_file_close(rmq_index_file_t *f, int unlink_file) {
    if (!f) return;
    rmq_mapped_file_destroy(f->mf, unlink_file);
    free(f);
}

/* ------------------------------------------------------------------------
 * IndexService
 * ------------------------------------------------------------------------ */

static int is_index_name(const char *name) {
    size_t i = 0;
    for (; name[i]; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return i == INDEX_NAME_LEN;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *base_name(const rmq_index_file_t *f) {
    const char *p = strrchr(f->mf->path, '/');
    return p ? p + 1 : f->mf->path;
}

static int push_file(rmq_index_service_t *s, rmq_index_file_t *f) {
    if (s->count == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        rmq_index_file_t **files = realloc(s->files, (size_t)cap * sizeof(*files));
        if (!files) return -ENOMEM;
        s->files = files;
        s->cap = cap;
    }
    s->files[s->count++] = f;
    return RMQ_OK;
}

static void free_service(rmq_index_service_t *s) {
    for (int i = 0; i < s->count; i++) rmq_index_file_close(s->files[i], 0);
    free(s->files);
    free(s->dir);
    free(s);
}

/* 1 when the IndexFile at path has the size and a header an IndexFile made
 * with these parameters can have; *end_ts receives its header's
 * end_timestamp (-1 with no entry). */
static int index_file_sane(const char *path, int32_t hash_slot_num, int32_t index_num,
                           int64_t *end_ts) {
    *end_ts = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    uint8_t h[RMQ_INDEX_HEADER_SIZE];
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             (int64_t)st.st_size == index_file_size(hash_slot_num, index_num) &&
             pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h);
    close(fd);
    if (!ok) return 0;
    int32_t count = rmq_get_be32(h + HDR_INDEX_COUNT);
    int32_t slots = rmq_get_be32(h + HDR_SLOT_COUNT);
    if (count < 0 || count > index_num || slots < 0 || slots > hash_slot_num) return 0;
    if (count <= 1) return 1; /* no entry yet: the rest of the header is unused */
    /* (times are not checked: a wall clock may step back between puts) */
    *end_ts = rmq_get_be64(h + HDR_END_TS);
    int64_t begin_phy = rmq_get_be64(h + HDR_BEGIN_PHY), end_phy = rmq_get_be64(h + HDR_END_PHY);
    return begin_phy >= 0 && end_phy >= begin_phy;
}

int rmq_index_service_drop_damaged(const char *dir, int32_t hash_slot_num, int32_t index_num,
                                   int64_t distrust_after_ts, int *dropped) {
    *dropped = 0;
    if (!dir || hash_slot_num <= 0 || index_num <= 1) return RMQ_EBAD_ARG;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? RMQ_OK : -errno;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = RMQ_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_index_name(de->d_name)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == RMQ_OK && n > 1) qsort(names, n, sizeof(*names), cmp_names);
    size_t newest = n; /* the newest file with a size, when distrusting */
    for (size_t i = n; distrust_after_ts >= 0 && rc == RMQ_OK && i-- > 0;) {
        char *path = rmq_path_join(dir, names[i]);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        struct stat st;
        int sized = stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
        free(path);
        if (sized) {
            newest = i;
            break;
        }
    }
    int damaged = 0;
    for (size_t i = 0; i < n && rc == RMQ_OK; i++) {
        char *path = rmq_path_join(dir, names[i]);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        struct stat st;
        int regular = stat(path, &st) == 0 && S_ISREG(st.st_mode);
        int64_t end_ts;
        /* empty: created but never sized (open removes it, no entries lost) */
        if (regular && st.st_size > 0 && !damaged) {
            if (!index_file_sane(path, hash_slot_num, index_num, &end_ts))
                damaged = 1;
            else if (distrust_after_ts >= 0 && (i == newest || end_ts > distrust_after_ts))
                damaged = 1;
        }
        if (regular && damaged) {
            if (unlink(path) != 0) rc = -errno;
            else (*dropped)++;
        }
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int rmq_index_service_open(const char *dir, int32_t hash_slot_num, int32_t index_num,
                           rmq_index_service_t **out) {
    if (!out) return RMQ_EBAD_ARG;
    *out = NULL;
    if (!dir || !*dir || hash_slot_num <= 0 || index_num <= 1) return RMQ_EBAD_ARG;
    int rc = rmq_mkdirs(dir);
    if (rc != RMQ_OK) return rc;

    rmq_index_service_t *s = calloc(1, sizeof(*s));
    if (!s) return -ENOMEM;
    s->dir = strdup(dir);
    if (!s->dir) {
        free(s);
        return -ENOMEM;
    }
    s->hash_slot_num = hash_slot_num;
    s->index_num = index_num;

    DIR *d = opendir(dir);
    if (!d) {
        rc = -errno;
        free_service(s);
        return rc;
    }
    char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    struct dirent *de;
    rc = RMQ_OK;
    while ((de = readdir(d)) != NULL) {
        if (!is_index_name(de->d_name)) continue;
        if (n_names == cap_names) {
            size_t cap = cap_names ? cap_names * 2 : 16;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            names = nn;
            cap_names = cap;
        }
        names[n_names] = strdup(de->d_name);
        if (!names[n_names]) {
            rc = -ENOMEM;
            break;
        }
        n_names++;
    }
    closedir(d);
    if (rc == RMQ_OK && n_names > 1) qsort(names, n_names, sizeof(*names), cmp_names);

    for (size_t i = 0; i < n_names && rc == RMQ_OK; i++) {
        char *path = rmq_path_join(dir, names[i]);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = -errno;
        } else if (!S_ISREG(st.st_mode)) {
            /* a directory named like an index file: not ours, leave it */
        } else if (st.st_size == 0) {
            /* Created but never sized: a crash between creat and fallocate.
             * It holds no entries. */
            if (unlink(path) != 0) rc = -errno;
        } else {
            rmq_index_file_t *f = NULL;
            rc = rmq_index_file_open(path, hash_slot_num, index_num, 0, &f);
            if (rc == RMQ_OK) {
                rc = push_file(s, f);
                if (rc != RMQ_OK) rmq_index_file_close(f, 0);
            }
        }
        free(path);
    }
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    if (rc != RMQ_OK) {
        free_service(s);
        return rc;
    }
    rc = pthread_mutex_init(&s->lock, NULL);
    if (rc != 0) {
        free_service(s);
        return -rc;
    }
    *out = s;
    return RMQ_OK;
}

static void put_digits(char *p, int v, int n) {
    unsigned u = v < 0 ? 0u : (unsigned)v;
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + u % 10u);
        u /= 10u;
    }
}

static void format_name(char out[INDEX_NAME_LEN + 1], const struct tm *tm, int ms) {
    put_digits(out, tm->tm_year + 1900, 4);
    put_digits(out + 4, tm->tm_mon + 1, 2);
    put_digits(out + 6, tm->tm_mday, 2);
    put_digits(out + 8, tm->tm_hour, 2);
    put_digits(out + 10, tm->tm_min, 2);
    put_digits(out + 12, tm->tm_sec, 2);
    put_digits(out + 14, ms, 3);
    out[INDEX_NAME_LEN] = '\0';
}

/* yyyyMMddHHmmssSSS of now, local time (UtilAll.timeMillisToHumanString). */
static void name_now(char out[INDEX_NAME_LEN + 1]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    format_name(out, &tm, (int)(ts.tv_nsec / 1000000));
}

static int digits(const char *p, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

/* The name 1 ms after name. The fields are stepped as a calendar time with
 * no time zone, so the result stays a valid name and sorts after name. */
static void name_bump(char name[INDEX_NAME_LEN + 1]) {
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = digits(name, 4) - 1900;
    tm.tm_mon = digits(name + 4, 2) - 1;
    tm.tm_mday = digits(name + 6, 2);
    tm.tm_hour = digits(name + 8, 2);
    tm.tm_min = digits(name + 10, 2);
    tm.tm_sec = digits(name + 12, 2);
    int ms = digits(name + 14, 3) + 1;
    if (ms >= 1000) {
        ms -= 1000;
        tm.tm_sec++;
    }
    time_t t = timegm(&tm); /* normalises the carry */
    struct tm norm;
    gmtime_r(&t, &norm);
    char next[INDEX_NAME_LEN + 1];
    format_name(next, &norm, ms);
    if (strcmp(next, name) > 0) {
        memcpy(name, next, sizeof(next));
        return;
    }
    /* Year 9999 overflow or a nonsense name: step the 17-digit number. */
    for (int i = INDEX_NAME_LEN - 1; i >= 0; i--) {
        if (name[i] < '9') {
            name[i]++;
            return;
        }
        name[i] = '0';
    }
}

/* Create the next IndexFile: named by now, but after the newest file (the
 * clock may have stepped back) and not over an existing file. Lock held. */
static int roll_file(rmq_index_service_t *s, rmq_index_file_t **out) {
    char name[INDEX_NAME_LEN + 1] = {0};
    name_now(name);
    if (s->count > 0) {
        const char *last = base_name(s->files[s->count - 1]);
        if (strcmp(name, last) <= 0) {
            memcpy(name, last, INDEX_NAME_LEN);
            name[INDEX_NAME_LEN] = '\0';
            name_bump(name);
        }
    }
    for (int tries = 0; tries < 100000; tries++) {
        char *path = rmq_path_join(s->dir, name);
        if (!path) return -ENOMEM;
        struct stat st;
        if (lstat(path, &st) == 0) {
            free(path);
            name_bump(name);
            continue;
        }
        if (errno != ENOENT) {
            int e = -errno;
            free(path);
            return e;
        }
        rmq_index_file_t *f = NULL;
        int rc = rmq_index_file_open(path, s->hash_slot_num, s->index_num, 1, &f);
        free(path);
        if (rc != RMQ_OK) return rc;
        rc = push_file(s, f);
        if (rc != RMQ_OK) {
            rmq_index_file_close(f, 1);
            return rc;
        }
        *out = f;
        return RMQ_OK;
    }
    return -EEXIST;
}

int rmq_index_service_put(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t phy_offset,
                          int64_t store_timestamp) {
    if (!s || (!topic && topic_len) || (!key && key_len)) return RMQ_EBAD_ARG;
    pthread_mutex_lock(&s->lock);
    int rc = RMQ_EFULL;
    if (s->count > 0)
        rc = rmq_index_file_put_key(s->files[s->count - 1], topic, topic_len, key, key_len,
                                    phy_offset, store_timestamp);
    if (rc == RMQ_EFULL) {
        rmq_index_file_t *f = NULL;
        rc = roll_file(s, &f);
        if (rc == RMQ_OK)
            rc = rmq_index_file_put_key(f, topic, topic_len, key, key_len, phy_offset,
                                        store_timestamp);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int rmq_index_service_query(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                            const uint8_t *key, size_t key_len, int64_t begin_ts, int64_t end_ts,
                            int64_t *out, int max, int *n) {
    if (!s || !n || (!topic && topic_len) || (!key && key_len) || (max > 0 && !out))
        return RMQ_EBAD_ARG;
    *n = 0;
    if (max <= 0 || begin_ts > end_ts) return RMQ_OK;
    int32_t hash = key_hash(topic, topic_len, key, key_len);
    offset_set_t seen = {0};
    int rc = RMQ_OK;
    pthread_mutex_lock(&s->lock);
    for (int i = s->count - 1; i >= 0 && *n < max && rc == RMQ_OK; i--) {
        const rmq_index_file_t *f = s->files[i];
        if (readable_count(f) <= 1) continue;
        /* Entry times are whole seconds after the file's begin: widen the
         * file's end by the dropped milliseconds. */
        if (rmq_index_file_begin_timestamp(f) > end_ts ||
            sat_add(rmq_index_file_end_timestamp(f), 999) < begin_ts)
            continue;
        rc = select_hash(f, hash, begin_ts, end_ts, out, max, n, &seen);
    }
    pthread_mutex_unlock(&s->lock);
    set_free(&seen);
    return rc;
}

int64_t rmq_index_service_end_phy_offset(rmq_index_service_t *s) {
    if (!s) return -1;
    int64_t r = -1;
    pthread_mutex_lock(&s->lock);
    for (int i = s->count - 1; i >= 0; i--) {
        if (rmq_index_file_index_count(s->files[i]) > 1) {
            r = rmq_index_file_end_phy_offset(s->files[i]);
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

int rmq_index_service_flush(rmq_index_service_t *s, int64_t *durable_ts) {
    if (!s) return RMQ_EBAD_ARG;
    int rc = RMQ_OK;
    pthread_mutex_lock(&s->lock);
    int64_t ts = -1;
    for (int i = s->count - 1; i >= 0 && ts < 0; i--)
        if (rmq_index_file_index_count(s->files[i]) > 1) ts = rmq_index_file_end_timestamp(s->files[i]);
    for (int i = 0; i < s->count; i++) {
        int r = rmq_index_file_flush(s->files[i]);
        if (r != RMQ_OK && rc == RMQ_OK) rc = r;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == RMQ_OK && durable_ts) *durable_ts = ts;
    return rc;
}

int rmq_index_service_delete_before(rmq_index_service_t *s, int64_t min_phy_offset) {
    if (!s) return RMQ_EBAD_ARG;
    pthread_mutex_lock(&s->lock);
    /* Oldest first, stopping at the first file still needed (RocketMQ's
     * deleteExpiredFile); the newest file is the one being written. */
    int k = 0;
    while (k < s->count - 1 && rmq_index_file_end_phy_offset(s->files[k]) < min_phy_offset) k++;
    for (int i = 0; i < k; i++) rmq_index_file_close(s->files[i], 1);
    if (k > 0) {
        memmove(s->files, s->files + k, (size_t)(s->count - k) * sizeof(*s->files));
        s->count -= k;
    }
    pthread_mutex_unlock(&s->lock);
    return k;
}

int rmq_index_service_truncate(rmq_index_service_t *s, int64_t phy_offset) {
    if (!s) return RMQ_EBAD_ARG;
    pthread_mutex_lock(&s->lock);
    int kept = 0, deleted = 0;
    for (int i = 0; i < s->count; i++) {
        rmq_index_file_t *f = s->files[i];
        if (rmq_index_file_begin_phy_offset(f) >= phy_offset) {
            rmq_index_file_close(f, 1);
            deleted++;
        } else {
            s->files[kept++] = f;
        }
    }
    s->count = kept;
    pthread_mutex_unlock(&s->lock);
    return deleted;
}

void rmq_index_service_close(rmq_index_service_t *s) {
    if (!s) return;
    (void)rmq_index_service_flush(s, NULL);
    pthread_mutex_destroy(&s->lock);
    free_service(s);
}
