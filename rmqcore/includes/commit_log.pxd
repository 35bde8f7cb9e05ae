from libc.stdint cimport int32_t, int64_t, uint8_t
from rmqcore.includes.mapped_file cimport rmq_mapped_file_t
from rmqcore.includes.mapped_file_queue cimport rmq_mfq_t

cdef extern from "commit_log.h" nogil:
    int RMQ_APPEND_NEW_SEGMENT
    int RMQ_APPEND_WARM_LOW
    long long RMQ_WARM_AHEAD
    ctypedef struct rmq_msg_in_t:
        const uint8_t *topic
        int32_t topic_len
        int32_t queue_id
        int32_t flag
        const uint8_t *body
        int32_t body_len
        const uint8_t *props
        int32_t props_len
        int32_t sysflag
        int64_t born_timestamp
        const uint8_t *born_host
        int32_t born_host_len
        int32_t reconsume_times
        int64_t prepared_tx_offset

    ctypedef struct rmq_append_result_t:
        int64_t phys_offset
        int64_t queue_offset
        int64_t wrote_bytes
        int32_t count
        int32_t rolled
        int64_t store_timestamp

    ctypedef struct rmq_record_view_t:
        int32_t total_size
        int32_t magic
        int32_t body_crc
        int32_t queue_id
        int32_t flag
        int64_t queue_offset
        int64_t phys_offset
        int32_t sysflag
        int64_t born_timestamp
        const uint8_t *born_host
        int32_t born_host_len
        int64_t store_timestamp
        const uint8_t *store_host
        int32_t store_host_len
        int32_t reconsume_times
        int64_t prepared_tx_offset
        const uint8_t *body
        int32_t body_len
        const uint8_t *topic
        int32_t topic_len
        const uint8_t *props
        int32_t props_len

    ctypedef struct rmq_commit_log_t:
        rmq_mfq_t *mfq

    int rmq_validate_topic(const uint8_t *topic, int32_t len)
    int64_t rmq_record_size(int32_t body_len, int32_t topic_len, int32_t props_len,
                            int32_t born_host_len, int32_t store_host_len)
    int rmq_record_decode(const uint8_t *buf, int64_t avail, rmq_record_view_t *v)
    int rmq_record_crc_ok(const rmq_record_view_t *v)
    int rmq_props_get(const uint8_t *props, int32_t props_len, const char *name,
                      const uint8_t **val, int32_t *val_len)
    int rmq_commit_log_read_pinned(rmq_commit_log_t *cl, int64_t offset, rmq_mapped_file_t **mf,
                                   const uint8_t **rec, int64_t *avail)
    int64_t rmq_now_ms()
