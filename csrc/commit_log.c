#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "commit_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32.h"
#include "endian.h"
#include "rmq_errors.h"
#include "rmq_format.h"

int64_t rmq_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const uint8_t *topic_chars(void) {
    static uint8_t ok[256];
    static int init;
    if (!__atomic_load_n(&init, __ATOMIC_ACQUIRE)) {
        for (int c = 'a'; c <= 'z'; c++) ok[c] = 1;
        for (int c = 'A'; c <= 'Z'; c++) ok[c] = 1;
        for (int c = '0'; c <= '9'; c++) ok[c] = 1;
        ok['%'] = ok['|'] = ok['_'] = ok['-'] = 1;
        __atomic_store_n(&init, 1, __ATOMIC_RELEASE);
    }
    return ok;
}

int rmq_validate_topic(const uint8_t *topic, int32_t len) {
    if (len <= 0 || len > RMQ_MAX_TOPIC_LENGTH) return RMQ_EINVAL_TOPIC;
    const uint8_t *ok = topic_chars();
    for (int32_t i = 0; i < len; i++)
        if (!ok[topic[i]]) return RMQ_EINVAL_TOPIC;
    return RMQ_OK;
}

int64_t rmq_record_size(int32_t body_len, int32_t topic_len, int32_t props_len,
                        int32_t born_host_len, int32_t store_host_len) {
    return (int64_t)RMQ_RECORD_FIXED_IPV4 - 16 + born_host_len + store_host_len + body_len +
           topic_len + props_len;
}

static int check_common(const rmq_commit_log_t *cl, const rmq_msg_in_t *m) {
    int rc = rmq_validate_topic(m->topic, m->topic_len);
    if (rc != RMQ_OK) return rc;
    if (m->queue_id < 0 || m->queue_id >= cl->max_queue_nums) return RMQ_EQUEUE_ID;
    if (m->born_host_len != 8 && m->born_host_len != 20) return RMQ_EBAD_HOST;
    return RMQ_OK;
}

/* Encode one record at p. */
static void encode(uint8_t *p, int64_t size, const rmq_commit_log_t *cl, const rmq_msg_in_t *m,
                   int32_t flag, const uint8_t *body, int32_t body_len, const uint8_t *props,
                   int32_t props_len, int64_t queue_offset, int64_t phys, int64_t store_ts) {
    int32_t sysflag = m->sysflag & ~(RMQ_SYSFLAG_BORNHOST_V6 | RMQ_SYSFLAG_STOREHOST_V6);
    if (m->born_host_len == 20) sysflag |= RMQ_SYSFLAG_BORNHOST_V6;
    if (cl->store_host_len == 20) sysflag |= RMQ_SYSFLAG_STOREHOST_V6;
    rmq_put_be32(p + 0, (int32_t)size);
    rmq_put_be32(p + 4, RMQ_MESSAGE_MAGIC_CODE);
    uint8_t *crc_at = p + 8; /* filled in when the body is copied */
    rmq_put_be32(p + 12, m->queue_id);
    rmq_put_be32(p + 16, flag);
    rmq_put_be64(p + 20, queue_offset);
    rmq_put_be64(p + 28, phys);
    rmq_put_be32(p + 36, sysflag);
    rmq_put_be64(p + 40, m->born_timestamp);
    uint8_t *q = p + 48;
    memcpy(q, m->born_host, (size_t)m->born_host_len);
    q += m->born_host_len;
    rmq_put_be64(q, store_ts);
    q += 8;
    memcpy(q, cl->store_host, (size_t)cl->store_host_len);
    q += cl->store_host_len;
    rmq_put_be32(q, m->reconsume_times);
    q += 4;
    rmq_put_be64(q, m->prepared_tx_offset);
    q += 8;
    rmq_put_be32(q, body_len);
    q += 4;
    rmq_put_be32(crc_at, (int32_t)(rmq_crc32_copy(q, body, (size_t)body_len) & 0x7FFFFFFFu));
    q += body_len;
    *q++ = (uint8_t)m->topic_len;
    memcpy(q, m->topic, (size_t)m->topic_len);
    q += m->topic_len;
    rmq_put_be16(q, (int16_t)props_len);
    q += 2;
    if (props_len) memcpy(q, props, (size_t)props_len);
}

/* Get a segment with room for need bytes (blank-filling the rest of the
 * current one when it is too small). need already excludes the blank. */
static int reserve(rmq_commit_log_t *cl, int64_t need, rmq_mapped_file_t **out, int32_t *rolled) {
    rmq_mfq_t *q = cl->mfq;
    if (need + RMQ_END_FILE_MIN_BLANK_LENGTH > q->file_size) return RMQ_EMSG_TOO_LARGE;
    rmq_mapped_file_t *f, *prev = rmq_mfq_last(q);
    int rc = rmq_mfq_last_for_append(q, rmq_mfq_max_offset(q), &f);
    if (rc != RMQ_OK) return rc;
    if (f != prev) *rolled |= RMQ_APPEND_NEW_SEGMENT; /* the first one too */
    int64_t wrote = rmq_mapped_file_wrote(f);
    if (wrote + need + RMQ_END_FILE_MIN_BLANK_LENGTH > f->file_size) {
        rmq_mapped_file_t *next;
        /* Create the next segment before blank-filling, so a full disk
         * leaves the current segment untouched (and its write position,
         * which a concurrent flush reads, never moves back). */
        rc = rmq_mfq_append_next(q, &next);
        if (rc != RMQ_OK) return rc;
        int64_t left = f->file_size - wrote;
        rmq_put_be32(f->base + wrote, (int32_t)left);
        rmq_put_be32(f->base + wrote + 4, RMQ_BLANK_MAGIC_CODE);
        rmq_mapped_file_set_wrote(f, f->file_size);
        f = next;
        *rolled |= RMQ_APPEND_NEW_SEGMENT;
    }
    if (q->warm) {
        int64_t at = rmq_mapped_file_wrote(f) + need;
        int64_t warmed = __atomic_load_n(&f->warmed_to, __ATOMIC_ACQUIRE);
        if (at > warmed) rmq_mapped_file_warm_write(f, rmq_mapped_file_wrote(f), need + RMQ_WARM_INLINE);
        if (at + RMQ_WARM_AHEAD / 2 > warmed && warmed < f->file_size) *rolled |= RMQ_APPEND_WARM_LOW;
    }
    *out = f;
    return RMQ_OK;
}

int rmq_commit_log_append(rmq_commit_log_t *cl, const rmq_msg_in_t *m, rmq_append_result_t *r) {
    memset(r, 0, sizeof(*r));
    int rc = check_common(cl, m);
    if (rc != RMQ_OK) return rc;
    if (m->body_len < 0 || m->body_len > cl->max_message_size) return RMQ_EMSG_TOO_LARGE;
    if (m->props_len < 0 || m->props_len > RMQ_MAX_PROPERTIES_LENGTH) return RMQ_EPROPS_TOO_LARGE;
    int64_t size = rmq_record_size(m->body_len, m->topic_len, m->props_len, m->born_host_len,
                                   cl->store_host_len);
    rmq_tq_entry_t *e = rmq_tq_get(cl->table, m->topic, m->topic_len, m->queue_id, 1);
    if (!e) return -12; /* -ENOMEM */
    rmq_mapped_file_t *f;
    rc = reserve(cl, size, &f, &r->rolled);
    if (rc != RMQ_OK) return rc;
    int64_t wrote = rmq_mapped_file_wrote(f);
    int64_t phys = f->from_offset + wrote;
    int64_t now = rmq_now_ms();
    /* Prepared and rolled-back transaction records never reach a
     * ConsumeQueue, so they take no queue offset (RocketMQ stores 0). */
    int counted = rmq_sysflag_in_consume_queue(m->sysflag);
    int64_t qoff = counted ? e->next_queue_offset : 0;
    encode(f->base + wrote, size, cl, m, m->flag, m->body, m->body_len, m->props, m->props_len,
           qoff, phys, now);
    rmq_mapped_file_set_wrote(f, wrote + size);
    r->phys_offset = phys;
    r->queue_offset = qoff;
    r->wrote_bytes = size;
    r->count = 1;
    r->store_timestamp = now;
    if (counted) e->next_queue_offset++;
    return RMQ_OK;
}

/* Walk a batch body; calls back nothing, just validates and sizes it. */
static int batch_measure(const rmq_commit_log_t *cl, const rmq_msg_in_t *proto,
                         const uint8_t *b, int64_t len, int64_t *total, int32_t *count) {
    int64_t pos = 0, sum = 0;
    int32_t n = 0;
    while (pos < len) {
        if (len - pos < RMQ_BATCH_ENTRY_FIXED) return RMQ_EBAD_BATCH;
        int32_t entry = rmq_get_be32(b + pos);
        int32_t body_len = rmq_get_be32(b + pos + 16);
        if (body_len < 0 || entry < RMQ_BATCH_ENTRY_FIXED ||
            (int64_t)entry > len - pos || (int64_t)body_len > entry - RMQ_BATCH_ENTRY_FIXED)
            return RMQ_EBAD_BATCH;
        int16_t props_len = rmq_get_be16(b + pos + 20 + body_len);
        if (props_len < 0 || (int64_t)RMQ_BATCH_ENTRY_FIXED + body_len + props_len != entry)
            return RMQ_EBAD_BATCH;
        if (body_len > cl->max_message_size) return RMQ_EMSG_TOO_LARGE;
        sum += rmq_record_size(body_len, proto->topic_len, props_len, proto->born_host_len,
                               cl->store_host_len);
        n++;
        pos += entry;
    }
    if (n == 0) return RMQ_EBAD_BATCH;
    *total = sum;
    *count = n;
    return RMQ_OK;
}

int rmq_commit_log_append_batch(rmq_commit_log_t *cl, const rmq_msg_in_t *proto,
                                const uint8_t *batch, int64_t batch_len, rmq_append_result_t *r) {
    memset(r, 0, sizeof(*r));
    int rc = check_common(cl, proto);
    if (rc != RMQ_OK) return rc;
    if (batch_len > cl->max_message_size) return RMQ_EMSG_TOO_LARGE;
    int64_t total;
    int32_t count;
    rc = batch_measure(cl, proto, batch, batch_len, &total, &count);
    if (rc != RMQ_OK) return rc;
    rmq_tq_entry_t *e = rmq_tq_get(cl->table, proto->topic, proto->topic_len, proto->queue_id, 1);
    if (!e) return -12;
    rmq_mapped_file_t *f;
    rc = reserve(cl, total, &f, &r->rolled);
    if (rc != RMQ_OK) return rc;
    int64_t wrote = rmq_mapped_file_wrote(f);
    int64_t start = wrote;
    int64_t now = rmq_now_ms();
    int counted = rmq_sysflag_in_consume_queue(proto->sysflag);
    int64_t qoff = counted ? e->next_queue_offset : 0;
    int64_t pos = 0;
    r->phys_offset = f->from_offset + wrote;
    r->queue_offset = qoff;
    for (int32_t i = 0; i < count; i++) {
        const uint8_t *p = batch + pos;
        int32_t entry = rmq_get_be32(p);
        int32_t flag = rmq_get_be32(p + 12);
        int32_t body_len = rmq_get_be32(p + 16);
        int32_t props_len = rmq_get_be16(p + 20 + body_len);
        int64_t size = rmq_record_size(body_len, proto->topic_len, props_len, proto->born_host_len,
                                       cl->store_host_len);
        encode(f->base + wrote, size, cl, proto, flag, p + 20, body_len, p + 22 + body_len,
               props_len, qoff, f->from_offset + wrote, now);
        if (counted) qoff++;
        wrote += size;
        pos += entry;
    }
    rmq_mapped_file_set_wrote(f, wrote);
    if (counted) e->next_queue_offset = qoff;
    r->wrote_bytes = wrote - start;
    r->count = count;
    r->store_timestamp = now;
    return RMQ_OK;
}

int rmq_record_decode(const uint8_t *buf, int64_t avail, rmq_record_view_t *v) {
    if (avail < 8) return avail <= 0 ? RMQ_ENOT_FOUND : RMQ_ECORRUPT;
    int32_t total = rmq_get_be32(buf);
    int32_t magic = rmq_get_be32(buf + 4);
    if (total == 0 && magic == 0) return RMQ_ENOT_FOUND;
    if (magic == RMQ_BLANK_MAGIC_CODE) return RMQ_ENOT_FOUND;
    if (magic != RMQ_MESSAGE_MAGIC_CODE && magic != RMQ_MESSAGE_MAGIC_CODE_V2) return RMQ_ECORRUPT;
    if (total < RMQ_RECORD_FIXED_IPV4 || (int64_t)total > avail) return RMQ_ECORRUPT;
    const uint8_t *end = buf + total;
    v->total_size = total;
    v->magic = magic;
    v->body_crc = rmq_get_be32(buf + 8);
    v->queue_id = rmq_get_be32(buf + 12);
    v->flag = rmq_get_be32(buf + 16);
    v->queue_offset = rmq_get_be64(buf + 20);
    v->phys_offset = rmq_get_be64(buf + 28);
    v->sysflag = rmq_get_be32(buf + 36);
    v->born_timestamp = rmq_get_be64(buf + 40);
    const uint8_t *q = buf + 48;
    v->born_host_len = (v->sysflag & RMQ_SYSFLAG_BORNHOST_V6) ? 20 : 8;
    v->store_host_len = (v->sysflag & RMQ_SYSFLAG_STOREHOST_V6) ? 20 : 8;
    if (48 + v->born_host_len + 8 + v->store_host_len + 4 + 8 + 4 > total) return RMQ_ECORRUPT;
    v->born_host = q;
    q += v->born_host_len;
    v->store_timestamp = rmq_get_be64(q);
    q += 8;
    v->store_host = q;
    q += v->store_host_len;
    v->reconsume_times = rmq_get_be32(q);
    q += 4;
    v->prepared_tx_offset = rmq_get_be64(q);
    q += 8;
    v->body_len = rmq_get_be32(q);
    q += 4;
    if (v->body_len < 0 || v->body_len > end - q) return RMQ_ECORRUPT;
    v->body = q;
    q += v->body_len;
    int tl_size = magic == RMQ_MESSAGE_MAGIC_CODE_V2 ? 2 : 1;
    if (end - q < tl_size) return RMQ_ECORRUPT;
    v->topic_len = tl_size == 2 ? rmq_get_be16(q) : (int8_t)q[0];
    q += tl_size;
    if (v->topic_len <= 0 || v->topic_len > end - q) return RMQ_ECORRUPT;
    v->topic = q;
    q += v->topic_len;
    if (end - q < 2) return RMQ_ECORRUPT;
    v->props_len = rmq_get_be16(q);
    q += 2;
    if (v->props_len < 0 || v->props_len != end - q) return RMQ_ECORRUPT;
    v->props = q;
    return RMQ_OK;
}

int rmq_record_crc_ok(const rmq_record_view_t *v) {
    return rmq_body_crc(v->body, (size_t)v->body_len) == v->body_crc;
}

unsigned rmq_props_find(const uint8_t *props, int32_t props_len, const char *const *names,
                        int n, const uint8_t **vals, int32_t *lens) {
    size_t nl[RMQ_PROPS_FIND_MAX];
    if (n > RMQ_PROPS_FIND_MAX) n = RMQ_PROPS_FIND_MAX;
    for (int i = 0; i < n; i++) nl[i] = strlen(names[i]);
    unsigned found = 0;
    const uint8_t *p = props, *end = props + props_len;
    while (p < end) {
        const uint8_t *item_end = memchr(p, RMQ_PROPERTY_SEPARATOR, (size_t)(end - p));
        if (!item_end) item_end = end;
        const uint8_t *sep = memchr(p, RMQ_NAME_VALUE_SEPARATOR, (size_t)(item_end - p));
        if (sep) {
            size_t len = (size_t)(sep - p);
            for (int i = 0; i < n; i++) {
                if (len != nl[i] || memcmp(p, names[i], len) != 0) continue;
                if (!memchr(sep + 1, RMQ_NAME_VALUE_SEPARATOR, (size_t)(item_end - sep - 1))) {
                    vals[i] = sep + 1;
                    lens[i] = (int32_t)(item_end - sep - 1);
                    found |= 1u << i;
                }
                break;
            }
        }
        p = item_end + 1;
    }
    return found;
}

int rmq_props_get(const uint8_t *props, int32_t props_len, const char *name, const uint8_t **val,
                  int32_t *val_len) {
    return rmq_props_find(props, props_len, &name, 1, val, val_len) != 0;
}

static const char *const INDEX_KEY_PROPS[2] = {"UNIQ_KEY", "KEYS"};

void rmq_index_keys_init(rmq_index_keys_t *it, const uint8_t *props, int32_t props_len) {
    const uint8_t *val[2];
    int32_t len[2];
    unsigned found = rmq_props_find(props, props_len, INDEX_KEY_PROPS, 2, val, len);
    it->uniq = (found & 1u) && len[0] > 0 ? val[0] : NULL;
    it->uniq_len = it->uniq ? len[0] : 0;
    it->next = (found & 2u) ? val[1] : NULL;
    it->end = it->next ? val[1] + len[1] : NULL;
}

int rmq_index_keys_next(rmq_index_keys_t *it, const uint8_t **key, int32_t *key_len) {
    if (it->uniq) {
        *key = it->uniq;
        *key_len = it->uniq_len;
        it->uniq = NULL;
        return 1;
    }
    while (it->next && it->next < it->end) {
        const uint8_t *k = it->next;
        const uint8_t *sp = memchr(k, ' ', (size_t)(it->end - k));
        if (!sp) sp = it->end;
        it->next = sp < it->end ? sp + 1 : it->end;
        if (sp > k) {
            *key = k;
            *key_len = (int32_t)(sp - k);
            return 1;
        }
    }
    return 0;
}

int64_t rmq_commit_log_roll_next(const rmq_commit_log_t *cl, int64_t offset) {
    int64_t fs = cl->mfq->file_size;
    return offset + fs - offset % fs;
}

int rmq_commit_log_read_pinned(rmq_commit_log_t *cl, int64_t offset, rmq_mapped_file_t **mf,
                               const uint8_t **rec, int64_t *avail) {
    rmq_mapped_file_t *f;
    int rc = rmq_mfq_find_pinned(cl->mfq, offset, &f);
    if (rc != RMQ_OK) return rc;
    int64_t rel = offset - f->from_offset;
    int64_t wrote = rmq_mapped_file_wrote(f);
    if (rel >= wrote) {
        rmq_mapped_file_unpin(f);
        return RMQ_ENOT_FOUND;
    }
    *mf = f;
    *rec = f->base + rel;
    *avail = wrote - rel;
    return RMQ_OK;
}

/* The filler is written data: a segment that was cut short (its write
 * position at the cut) now holds bytes up to `to`. */
static void filled(rmq_mapped_file_t *f, int64_t to) {
    if (rmq_mapped_file_wrote(f) < to - f->from_offset) rmq_mapped_file_set_wrote(f, to - f->from_offset);
}

int rmq_commit_log_fill_damaged(rmq_commit_log_t *cl, int64_t from, int64_t to) {
    int64_t seg_end = rmq_commit_log_roll_next(cl, from);
    if (from < 0 || to <= from || to > seg_end) return RMQ_EBAD_ARG;
    rmq_mapped_file_t *f;
    int rc = rmq_mfq_find_pinned(cl->mfq, from, &f);
    if (rc != RMQ_OK) return rc;
    uint8_t *p = f->base + (from - f->from_offset);
    int64_t size = to - from;
    if (to == seg_end) {
        if (size < RMQ_END_FILE_MIN_BLANK_LENGTH) {
            rmq_mapped_file_unpin(f);
            return RMQ_EBAD_ARG;
        }
        memset(p, 0, (size_t)size);
        rmq_put_be32(p, (int32_t)size);
        rmq_put_be32(p + 4, RMQ_BLANK_MAGIC_CODE);
        filled(f, to);
        rmq_mapped_file_unpin(f);
        return RMQ_OK;
    }
    int64_t room = size - RMQ_RECORD_FIXED_IPV4; /* for topic + body */
    if (room < 1) {
        rmq_mapped_file_unpin(f);
        return RMQ_EBAD_ARG;
    }
    static const uint8_t topic[] = RMQ_DAMAGED_TOPIC;
    int32_t topic_len = (int32_t)(sizeof(topic) - 1);
    if (topic_len > room) topic_len = (int32_t)room;
    uint8_t host[8] = {0};
    rmq_msg_in_t m;
    memset(&m, 0, sizeof(m));
    m.topic = topic;
    m.topic_len = topic_len;
    m.sysflag = RMQ_SYSFLAG_TRANSACTION_ROLLBACK;
    m.born_host = host;
    m.born_host_len = 8;
    rmq_commit_log_t filler_log = *cl; /* the filler's STOREHOST is zero too */
    memset(filler_log.store_host, 0, sizeof(filler_log.store_host));
    filler_log.store_host_len = 8;
    int32_t body_len = (int32_t)(room - topic_len);
    uint8_t *zeros = calloc((size_t)body_len + 1, 1);
    if (!zeros) {
        rmq_mapped_file_unpin(f);
        return -ENOMEM;
    }
    memset(p, 0, (size_t)size);
    encode(p, size, &filler_log, &m, 0, zeros, body_len, NULL, 0, 0, from, rmq_now_ms());
    free(zeros);
    filled(f, to);
    rmq_mapped_file_unpin(f);
    return RMQ_OK;
}

int rmq_commit_log_scan(rmq_commit_log_t *cl, int64_t offset, int check_crc, int64_t *end,
                        int64_t *count, int64_t *last_store_ts) {
    int64_t n = 0;
    int64_t max = rmq_mfq_max_offset(cl->mfq);
    while (offset < max) {
        rmq_mapped_file_t *f;
        const uint8_t *p;
        int64_t avail;
        if (rmq_commit_log_read_pinned(cl, offset, &f, &p, &avail) != RMQ_OK) break;
        rmq_record_view_t v;
        int rc = rmq_record_decode(p, avail, &v);
        int blank = avail >= 8 && rmq_get_be32(p + 4) == RMQ_BLANK_MAGIC_CODE &&
                    rmq_get_be32(p) == avail && offset - f->from_offset + avail == f->file_size;
        rmq_mapped_file_unpin(f);
        if (blank) {
            offset = rmq_commit_log_roll_next(cl, offset);
            continue;
        }
        if (rc != RMQ_OK || v.phys_offset != offset) break;
        if (rmq_validate_topic(v.topic, v.topic_len) != RMQ_OK) break;
        if (v.queue_id < 0 || v.queue_id >= cl->max_queue_nums || v.queue_offset < 0) break;
        if (check_crc && !rmq_record_crc_ok(&v)) break;
        n++;
        if (last_store_ts) *last_store_ts = v.store_timestamp;
        offset += v.total_size;
    }
    *end = offset;
    if (count) *count = n;
    return RMQ_OK;
}
