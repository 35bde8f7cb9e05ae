/* index_file.c: one of RocketMQ's hash IndexFiles (IndexFile.java).
 * Layout: rmq_format.h section 6; API: index_file.h. The directory of them
 * is index_service.c's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "index_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "endian.h"
#include "java_hash.h"
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

int32_t rmq_index_key_hash(const uint8_t *topic, size_t topic_len, const uint8_t *key,
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
        /* Hash slots are written at random: fault them in now, off the
         * per-key path (a first touch of a page costs a fault and a zero-fill).
         * Entries are appended in order, one first touch per 204 of them:
         * faulting in those too (400 MB at the defaults) cost a second of a
         * core whenever a file was made, and its page cache before use. */
        if (is_new) rmq_mapped_file_warm(mf, (int64_t)RMQ_INDEX_HEADER_SIZE +
                                                 (int64_t)hash_slot_num * RMQ_INDEX_HASH_SLOT_SIZE);
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
    return rmq_index_file_put_hashed(f, rmq_index_key_hash(topic, topic_len, key, key_len),
                                     phy_offset, store_timestamp);
}

void rmq_index_file_prefetch_slot(const rmq_index_file_t *f, int32_t hash) {
    if (hash >= 0) __builtin_prefetch(slot_ptr(f, hash % f->hash_slot_num), 1);
}

int rmq_index_file_put_hashed(rmq_index_file_t *f, int32_t hash, int64_t phy_offset,
                              int64_t store_timestamp) {
    if (!f || hash < 0) return RMQ_EBAD_ARG;
    uint8_t *base = f->mf->base;
    int32_t count = rmq_index_file_index_count(f);
    if (count <= 0) count = 1;
    if (count >= f->index_num) return RMQ_EFULL;

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

static size_t set_index(int64_t v, size_t mask) {
    uint64_t x = (uint64_t)v * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & mask;
}

static int set_grow(rmq_offset_set_t *s) {
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
static int set_add(rmq_offset_set_t *s, int64_t v) {
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

void rmq_offset_set_free(rmq_offset_set_t *s) {
    free(s->keys);
    free(s->used);
}

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

int rmq_index_file_collect(const rmq_index_file_t *f, int32_t hash, int64_t begin_ts,
                           int64_t end_ts, int64_t *out, int max, int *n, rmq_offset_set_t *seen) {
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
    int32_t hash = rmq_index_key_hash(topic, topic_len, key, key_len);
    return rmq_index_file_collect(f, hash, begin_ts, end_ts, out, max, n, NULL);
}

int rmq_index_file_may_hold(const rmq_index_file_t *f, int64_t begin_ts, int64_t end_ts) {
    /* Entry times are whole seconds after the file's begin: widen the
     * file's end by the dropped milliseconds. */
    return readable_count(f) > 1 && rmq_index_file_begin_timestamp(f) <= end_ts &&
           sat_add(rmq_index_file_end_timestamp(f), 999) >= begin_ts;
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

int rmq_index_file_sane(const char *path, int32_t hash_slot_num, int32_t index_num,
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
