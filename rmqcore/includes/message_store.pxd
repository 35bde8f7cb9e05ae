from libc.stdint cimport int32_t, int64_t, uint8_t
from rmqcore.includes.commit_log cimport rmq_append_result_t, rmq_commit_log_t, rmq_msg_in_t
from rmqcore.includes.consume_queue cimport rmq_cq_unit_t

cdef extern from "message_store.h" nogil:
    ctypedef struct rmq_store_config_t:
        const char *root
        int64_t commit_log_file_size
        int64_t cq_units_per_file
        int32_t max_message_size
        int32_t max_queue_nums
        int32_t index_hash_slot_num
        int32_t index_num
        int32_t index_enable
        int32_t warm_mapped_files
        int32_t index_async
        const uint8_t *store_host
        int32_t store_host_len

    ctypedef struct rmq_recovery_report_t:
        int32_t abnormal
        int32_t checkpoint_valid
        int64_t scan_from
        int64_t commit_log_end
        int64_t records_scanned
        int64_t bytes_trimmed
        int64_t cq_units_dropped
        int64_t dispatch_from
        int64_t records_dispatched
        int32_t consume_queues
        int32_t commit_log_short_files
        int64_t damaged_ranges
        int64_t bytes_damaged
        int32_t consume_queues_repaired
        int32_t index_files_dropped
        int32_t other_boot

    enum:
        RMQ_GET_FOUND
        RMQ_GET_NO_MATCHED_MESSAGE
        RMQ_GET_MESSAGE_WAS_REMOVING
        RMQ_GET_OFFSET_FOUND_NULL
        RMQ_GET_OFFSET_OVERFLOW_BADLY
        RMQ_GET_OFFSET_OVERFLOW_ONE
        RMQ_GET_OFFSET_TOO_SMALL
        RMQ_GET_NO_MATCHED_LOGIC_QUEUE
        RMQ_GET_NO_MESSAGE_IN_QUEUE

    ctypedef struct rmq_get_result_t:
        int32_t status
        int32_t count
        int64_t next_begin_offset
        int64_t min_offset
        int64_t max_offset
        int64_t total_bytes

    ctypedef struct rmq_store_t:
        rmq_commit_log_t cl
        int64_t dispatched
        int dispatch_error
        int64_t index_dispatched

    int rmq_store_open(const rmq_store_config_t *cfg, rmq_store_t **out, rmq_recovery_report_t *rep)
    int rmq_store_put(rmq_store_t *s, const rmq_msg_in_t *m, rmq_append_result_t *r)
    int rmq_store_put_batch(rmq_store_t *s, const rmq_msg_in_t *proto, const uint8_t *batch,
                            int64_t batch_len, rmq_append_result_t *r)
    int rmq_store_append_replica(rmq_store_t *s, int64_t offset, const uint8_t *data, int64_t len,
                                 int64_t *accepted, int32_t *rolled)
    int rmq_store_truncate(rmq_store_t *s, int64_t offset)
    int rmq_store_dispatch(rmq_store_t *s, int64_t *n)
    int rmq_store_build_index(rmq_store_t *s, int64_t max_records, int64_t *n)
    int rmq_store_index_thread_start(rmq_store_t *s, int32_t window_ms)
    void rmq_store_index_thread_stop(rmq_store_t *s)
    int rmq_store_index_error(const rmq_store_t *s)
    int rmq_store_get(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid,
                      int64_t offset, int32_t max_msgs, int64_t max_bytes, const int32_t *tags,
                      int32_t ntags, int64_t max_phys, rmq_cq_unit_t *out,
                      rmq_get_result_t *res)
    int64_t rmq_store_min_offset(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid)
    int64_t rmq_store_max_offset(rmq_store_t *s, const uint8_t *topic, int32_t topic_len, int32_t qid)
    int64_t rmq_store_offset_by_time(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                                     int32_t qid, int64_t ts)
    int rmq_store_query_key(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                            const uint8_t *key, int32_t key_len, int64_t begin_ts, int64_t end_ts,
                            int64_t *out, int max, int *n)
    int rmq_store_find_key(rmq_store_t *s, const uint8_t *topic, int32_t topic_len,
                           const uint8_t *key, int32_t key_len, int64_t begin_ts, int64_t end_ts,
                           int64_t *out, int max, int *n) nogil
    int rmq_store_flush_commit_log(rmq_store_t *s, int least_pages, int64_t *where)
    int rmq_store_flush_logics(rmq_store_t *s, int least_pages)
    int rmq_store_delete_expired_commit_log(rmq_store_t *s, int64_t expire_ms, int64_t now_ms,
                                            int force, int max_files)
    int rmq_store_delete_expired_logics(rmq_store_t *s)
    int rmq_store_delete_topic(rmq_store_t *s, const uint8_t *topic, int32_t topic_len)
    int rmq_store_close(rmq_store_t *s)
