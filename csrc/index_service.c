/* index_service.c: RocketMQ's IndexService, the directory of IndexFiles
 * (index_file.c) a store's key index lives in: files named by their
 * creation time, the newest written, queries over every file whose time
 * range overlaps, whole files deleted with the CommitLog they index.
 * API: index_service.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "index_service.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "paths.h"
#include "rmq_errors.h"

/* yyyyMMddHHmmssSSS */
#define INDEX_NAME_LEN 17

static int is_index_name(const char *name) {
    size_t i = 0;
    for (; name[i]; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return i == INDEX_NAME_LEN;
}

static int cmp_paths(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void free_paths(char **paths, size_t n) {
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

/* The paths of the IndexFiles in dir, oldest first (names are creation
 * times, and one dir prefixes them all); *paths is NULL when there is none.
 * A missing dir is -ENOENT. */
static int list_paths(const char *dir, char ***paths, size_t *n) {
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -errno;
    char **out = NULL;
    size_t len = 0, cap = 0;
    int rc = RMQ_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_index_name(de->d_name)) continue;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **nn = realloc(out, ncap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            out = nn;
            cap = ncap;
        }
        if (!(out[len] = rmq_path_join(dir, de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        len++;
    }
    closedir(d);
    if (rc != RMQ_OK) {
        free_paths(out, len);
        return rc;
    }
    if (len > 1) qsort(out, len, sizeof(*out), cmp_paths);
    *paths = out;
    *n = len;
    return RMQ_OK;
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

int rmq_index_service_drop_damaged(const char *dir, int32_t hash_slot_num, int32_t index_num,
                                   int64_t distrust_after_ts, int *dropped) {
    *dropped = 0;
    if (!dir || hash_slot_num <= 0 || index_num <= 1) return RMQ_EBAD_ARG;
    char **paths;
    size_t n;
    int rc = list_paths(dir, &paths, &n);
    if (rc != RMQ_OK) return rc == -ENOENT ? RMQ_OK : rc;
    size_t newest = n; /* the newest file with a size, when distrusting */
    for (size_t i = n; distrust_after_ts >= 0 && i-- > 0;) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
            newest = i;
            break;
        }
    }
    int damaged = 0;
    for (size_t i = 0; i < n && rc == RMQ_OK; i++) {
        const char *path = paths[i];
        struct stat st;
        int regular = stat(path, &st) == 0 && S_ISREG(st.st_mode);
        int64_t end_ts;
        /* empty: created but never sized (open removes it, no entries lost) */
        if (regular && st.st_size > 0 && !damaged) {
            if (!rmq_index_file_sane(path, hash_slot_num, index_num, &end_ts))
                damaged = 1;
            else if (distrust_after_ts >= 0 && (i == newest || end_ts > distrust_after_ts))
                damaged = 1;
        }
        if (regular && damaged) {
            if (unlink(path) != 0) rc = -errno;
            else (*dropped)++;
        }
    }
    free_paths(paths, n);
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

    char **paths;
    size_t n;
    rc = list_paths(dir, &paths, &n);
    if (rc != RMQ_OK) {
        free_service(s);
        return rc;
    }
    for (size_t i = 0; i < n && rc == RMQ_OK; i++) {
        const char *path = paths[i];
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
    }
    free_paths(paths, n);
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

/* Under s->lock: one hashed put into the newest file, a new file first
 * when it is full (or there is none). */
static int put_hashed(rmq_index_service_t *s, const rmq_index_put_t *e) {
    int rc = RMQ_EFULL;
    if (s->count > 0)
        rc = rmq_index_file_put_hashed(s->files[s->count - 1], e->hash, e->phy_offset,
                                       e->store_timestamp);
    if (rc == RMQ_EFULL) {
        rmq_index_file_t *f = NULL;
        rc = roll_file(s, &f);
        if (rc == RMQ_OK)
            rc = rmq_index_file_put_hashed(f, e->hash, e->phy_offset, e->store_timestamp);
    }
    return rc;
}

int rmq_index_service_put_many(rmq_index_service_t *s, const rmq_index_put_t *puts, int n,
                               int *done) {
    if (!done) return RMQ_EBAD_ARG;
    *done = 0;
    if (!s || n < 0 || (n > 0 && !puts)) return RMQ_EBAD_ARG;
    pthread_mutex_lock(&s->lock);
    if (s->count > 0)
        for (int i = 0; i < n; i++)
            rmq_index_file_prefetch_slot(s->files[s->count - 1], puts[i].hash);
    int rc = RMQ_OK;
    int i = 0;
    while (i < n && (rc = put_hashed(s, &puts[i])) == RMQ_OK) i++;
    pthread_mutex_unlock(&s->lock);
    *done = i;
    return rc;
}

int rmq_index_service_put(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t phy_offset,
                          int64_t store_timestamp) {
    if (!s || (!topic && topic_len) || (!key && key_len)) return RMQ_EBAD_ARG;
    rmq_index_put_t e = {rmq_index_key_hash(topic, topic_len, key, key_len), phy_offset,
                         store_timestamp};
    int done;
    return rmq_index_service_put_many(s, &e, 1, &done);
}

int rmq_index_service_query(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                            const uint8_t *key, size_t key_len, int64_t begin_ts, int64_t end_ts,
                            int64_t *out, int max, int *n) {
    if (!s || !n || (!topic && topic_len) || (!key && key_len) || (max > 0 && !out))
        return RMQ_EBAD_ARG;
    *n = 0;
    if (max <= 0 || begin_ts > end_ts) return RMQ_OK;
    int32_t hash = rmq_index_key_hash(topic, topic_len, key, key_len);
    rmq_offset_set_t seen = {0};
    int rc = RMQ_OK;
    pthread_mutex_lock(&s->lock);
    for (int i = s->count - 1; i >= 0 && *n < max && rc == RMQ_OK; i--) {
        const rmq_index_file_t *f = s->files[i];
        if (rmq_index_file_may_hold(f, begin_ts, end_ts))
            rc = rmq_index_file_collect(f, hash, begin_ts, end_ts, out, max, n, &seen);
    }
    pthread_mutex_unlock(&s->lock);
    rmq_offset_set_free(&seen);
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
