# MessageStoreCore: the Cython face of csrc/message_store.c.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdlib cimport free, malloc

import os as _os

# GetMessageStatus names, indexed by the C enum value.
GET_MESSAGE_STATUS = (
    "FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL",
    "OFFSET_OVERFLOW_BADLY", "OFFSET_OVERFLOW_ONE", "OFFSET_TOO_SMALL",
    "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE",
)

cdef bytes _DEFAULT_HOST = bytes([127, 0, 0, 1, 0, 0, 0, 0])
# Above this many bytes a put releases the GIL around the copy and CRC.
cdef Py_ssize_t _NOGIL_BYTES = 256 * 1024


cdef inline const uint8_t *_text(object s, Py_ssize_t *n) except NULL:
    if type(s) is str:
        return <const uint8_t *>PyUnicode_AsUTF8AndSize(s, n)
    if type(s) is bytes:
        n[0] = PyBytes_GET_SIZE(s)
        return <const uint8_t *>PyBytes_AS_STRING(s)
    raise TypeError(f"expected str or bytes, got {type(s).__name__}")


cdef inline Py_ssize_t _put_offset_msg_id(char *buf, const uint8_t *host, Py_ssize_t hl,
                                          long long off) noexcept nogil:
    # RocketMQ's offsetMsgId: upper-case hex of the store host's bytes (ip,
    # port) then of the CommitLog offset as 8 big-endian bytes; returns the
    # characters written (2 * (hl + 8))
    cdef const char *hexd = b"0123456789ABCDEF"
    cdef Py_ssize_t k, w = 0
    cdef unsigned long long u = <unsigned long long>off
    for k in range(hl):
        buf[w] = hexd[host[k] >> 4]
        buf[w + 1] = hexd[host[k] & 0xF]
        w += 2
    for k in range(7, -1, -1):
        buf[w] = hexd[(u >> (8 * k + 4)) & 0xF]
        buf[w + 1] = hexd[(u >> (8 * k)) & 0xF]
        w += 2
    return w


def offset_msg_id(bytes store_host, long long phys_offset) -> str:
    """RocketMQ's offsetMsgId: hex of store host (ip + port) and offset."""
    cdef char buf[160]
    cdef Py_ssize_t hl = PyBytes_GET_SIZE(store_host)
    if hl > 64:
        raise ValueError("store_host is longer than 64 bytes")
    n = _put_offset_msg_id(buf, <const uint8_t *>PyBytes_AS_STRING(store_host), hl, phys_offset)
    return buf[:n].decode("ascii")


cdef class AppendResult:
    """Where an append put its record(s) (RocketMQ AppendMessageResult)."""
    cdef readonly long long phys_offset
    cdef readonly long long queue_offset
    cdef readonly long long wrote_bytes
    cdef readonly int count
    cdef readonly bint rolled
    cdef readonly bint needs_allocate
    cdef readonly long long store_timestamp
    cdef readonly bytes store_host

    @property
    def next_phys_offset(self) -> int:
        return self.phys_offset + self.wrote_bytes

    @property
    def msg_id(self) -> str:
        """offsetMsgId of the first record."""
        return offset_msg_id(self.store_host, self.phys_offset)

    def __repr__(self):
        return (f"AppendResult(phys_offset={self.phys_offset}, queue_offset={self.queue_offset}, "
                f"wrote_bytes={self.wrote_bytes}, count={self.count})")


cdef AppendResult _append_result(rmq_append_result_t *r, bytes store_host):
    cdef AppendResult res = AppendResult.__new__(AppendResult)
    res.phys_offset = r.phys_offset
    res.queue_offset = r.queue_offset
    res.wrote_bytes = r.wrote_bytes
    res.count = r.count
    res.rolled = (r.rolled & RMQ_APPEND_NEW_SEGMENT) != 0
    res.needs_allocate = r.rolled != 0
    res.store_timestamp = r.store_timestamp
    res.store_host = store_host
    return res


cdef class GetResult:
    """Result of get_message: status name, offsets and the byte ranges of the
    found records in the CommitLog as (phys_offset, size) pairs."""
    cdef readonly str status
    cdef readonly long long next_begin_offset
    cdef readonly long long min_offset
    cdef readonly long long max_offset
    cdef readonly long long total_bytes
    cdef readonly list ranges
    cdef readonly list tags_codes

    @property
    def message_count(self) -> int:
        return len(self.ranges)

    def __repr__(self):
        return (f"GetResult({self.status}, n={len(self.ranges)}, next={self.next_begin_offset}, "
                f"min={self.min_offset}, max={self.max_offset})")


cdef class SegmentPin:
    """A CommitLog segment kept open (mapping and fd) while in use, e.g. by a
    sendfile that waits for the socket. Use as a context manager."""
    cdef rmq_mapped_file_t *_mf
    cdef readonly long long start_offset
    cdef readonly long long end_offset

    @property
    def fd(self) -> int:
        if self._mf == NULL:
            raise ValueError("segment pin is released")
        return self._mf.fd

    def sendfile(self, int sock_fd, long long phys_offset, long long count) -> int:
        """Send [phys_offset, phys_offset+count) to sock_fd; returns the bytes
        sent, fewer than count when a non-blocking socket is full."""
        cdef int64_t sent = 0
        cdef int rc
        cdef int fd
        cdef int64_t rel
        if self._mf == NULL:
            raise ValueError("segment pin is released")
        if phys_offset < self.start_offset or phys_offset + count > self.end_offset or count < 0:
            raise ValueError(f"range [{phys_offset}, {phys_offset + count}) is outside segment "
                             f"[{self.start_offset}, {self.end_offset})")
        fd = self._mf.fd
        rel = phys_offset - self.start_offset
        with nogil:
            rc = rmq_sendfile(sock_fd, fd, rel, count, &sent)
        _raise_for(rc, "sendfile")
        return sent

    def read(self, long long phys_offset, long long count) -> bytes:
        if self._mf == NULL:
            raise ValueError("segment pin is released")
        if phys_offset < self.start_offset or phys_offset + count > self.end_offset or count < 0:
            raise ValueError("range outside segment")
        return (<const char *>self._mf.base + (phys_offset - self.start_offset))[:count]

    def release(self) -> None:
        if self._mf != NULL:
            rmq_mapped_file_unpin(self._mf)
            self._mf = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __dealloc__(self):
        if self._mf != NULL:
            rmq_mapped_file_unpin(self._mf)


cdef class MessageStoreCore:
    """CommitLog + ConsumeQueues + IndexFiles + recovery (csrc/message_store.h).

    Not thread-safe except for the flush_*, prepare_next_segment and
    delete_expired_* methods, which release the GIL and may run on the
    store's I/O threads while the owner thread appends."""
    cdef rmq_store_t *_s
    cdef readonly bytes store_host
    cdef readonly dict recovery
    cdef readonly str root
    cdef int32_t _max_msgs_cap

    def __cinit__(self, str root, *, long long commit_log_file_size=RMQ_DEFAULT_COMMIT_LOG_FILE_SIZE,
                  long long cq_units_per_file=RMQ_DEFAULT_CQ_UNITS_PER_FILE,
                  int max_message_size=RMQ_DEFAULT_MAX_MESSAGE_SIZE, int max_queue_nums=1024,
                  int index_hash_slot_num=RMQ_DEFAULT_INDEX_HASH_SLOT_NUM,
                  int index_num=RMQ_DEFAULT_INDEX_NUM, bint index_enable=True,
                  bint warm_mapped_files=True, bint index_async=False,
                  bytes store_host=None):
        cdef rmq_store_config_t cfg
        cdef rmq_recovery_report_t rep
        cdef rmq_store_t *s = NULL
        cdef int rc
        if store_host is None:
            store_host = _DEFAULT_HOST
        if len(store_host) not in (8, 20):
            raise ValueError("store_host must be 8 bytes (IPv4 + port) or 20 (IPv6 + port)")
        self.store_host = store_host
        self.root = root
        broot = _os.fsencode(root)
        cfg.root = broot
        cfg.commit_log_file_size = commit_log_file_size
        cfg.cq_units_per_file = cq_units_per_file
        cfg.max_message_size = max_message_size
        cfg.max_queue_nums = max_queue_nums
        cfg.index_hash_slot_num = index_hash_slot_num
        cfg.index_num = index_num
        cfg.index_enable = index_enable
        cfg.warm_mapped_files = warm_mapped_files
        cfg.index_async = index_async
        cfg.store_host = <const uint8_t *>PyBytes_AS_STRING(store_host)
        cfg.store_host_len = <int32_t>len(store_host)
        with nogil:
            rc = rmq_store_open(&cfg, &s, &rep)
        _raise_for(rc, f"opening store {root!r}")
        self._s = s
        self._max_msgs_cap = 1024
        self.recovery = {
            "abnormal": bool(rep.abnormal), "checkpoint_valid": bool(rep.checkpoint_valid),
            "scan_from": rep.scan_from, "commit_log_end": rep.commit_log_end,
            "records_scanned": rep.records_scanned, "bytes_trimmed": rep.bytes_trimmed,
            "dispatch_from": rep.dispatch_from, "records_dispatched": rep.records_dispatched,
            "consume_queues": rep.consume_queues,
            "commit_log_short_files": rep.commit_log_short_files,
            "damaged_ranges": rep.damaged_ranges, "bytes_damaged": rep.bytes_damaged,
            "consume_queues_repaired": rep.consume_queues_repaired,
            "index_files_dropped": rep.index_files_dropped,
            "other_boot": bool(rep.other_boot),
        }

    def __dealloc__(self):
        if self._s != NULL:
            rmq_store_close(self._s)
            self._s = NULL

    cdef inline int _check(self) except -1:
        if self._s == NULL:
            raise ValueError("the store is closed")
        return 0

    @property
    def closed(self) -> bool:
        return self._s == NULL

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker."""
        cdef int rc
        cdef rmq_store_t *s = self._s
        if s == NULL:
            return
        self._s = NULL
        with nogil:
            rc = rmq_store_close(s)
        _raise_for(rc, "closing store")

    def put(self, topic, int queue_id, body, properties=b"", *, int flag=0, int sysflag=0,
            long long born_timestamp=0, bytes born_host=None, int reconsume_times=0,
            long long prepared_tx_offset=0):
        """Append one message and dispatch it. Returns an AppendResult."""
        cdef rmq_msg_in_t m
        cdef rmq_append_result_t r
        cdef Py_ssize_t n
        cdef const unsigned char[::1] mv
        cdef int rc
        self._check()
        m.topic = _text(topic, &n)
        m.topic_len = <int32_t>n if n <= 0x7fffffff else -1
        m.queue_id = queue_id
        m.flag = flag
        if type(body) is bytes:
            m.body = <const uint8_t *>PyBytes_AS_STRING(body)
            n = PyBytes_GET_SIZE(body)
        else:
            mv = body
            n = mv.shape[0]
            m.body = &mv[0] if n > 0 else NULL
        if n > 0x7fffffff:
            _raise_for(RMQ_EMSG_TOO_LARGE, "put")
        m.body_len = <int32_t>n
        m.props = _text(properties, &n)
        if n > 0x7fffffff:
            _raise_for(RMQ_EPROPS_TOO_LARGE, "put")
        m.props_len = <int32_t>n
        m.sysflag = sysflag
        m.born_timestamp = born_timestamp
        if born_host is None:
            born_host = _DEFAULT_HOST
        m.born_host = <const uint8_t *>PyBytes_AS_STRING(born_host)
        m.born_host_len = <int32_t>PyBytes_GET_SIZE(born_host)
        m.reconsume_times = reconsume_times
        m.prepared_tx_offset = prepared_tx_offset
        if m.body_len >= _NOGIL_BYTES:
            with nogil:
                rc = rmq_store_put(self._s, &m, &r)
        else:
            rc = rmq_store_put(self._s, &m, &r)
        if rc != 0:
            _raise_for(rc, f"put to {topic}:{queue_id}")
        return _append_result(&r, self.store_host)

    def put_batch(self, topic, int queue_id, batch, *, int sysflag=0, long long born_timestamp=0,
                  bytes born_host=None, int reconsume_times=0):
        """Append every message of a batch body (see encode_batch) with
        consecutive queue offsets. Returns one AppendResult for the batch."""
        cdef rmq_msg_in_t m
        cdef rmq_append_result_t r
        cdef Py_ssize_t n
        cdef const unsigned char[::1] mv = batch
        cdef int rc
        self._check()
        m.topic = _text(topic, &n)
        m.topic_len = <int32_t>n if n <= 0x7fffffff else -1
        m.queue_id = queue_id
        m.flag = 0
        m.body = NULL
        m.body_len = 0
        m.props = NULL
        m.props_len = 0
        m.sysflag = sysflag
        m.born_timestamp = born_timestamp
        if born_host is None:
            born_host = _DEFAULT_HOST
        m.born_host = <const uint8_t *>PyBytes_AS_STRING(born_host)
        m.born_host_len = <int32_t>PyBytes_GET_SIZE(born_host)
        m.reconsume_times = reconsume_times
        m.prepared_tx_offset = 0
        n = mv.shape[0]
        if n == 0:
            _raise_for(RMQ_EBAD_BATCH, "put_batch: empty batch")
        with nogil:
            rc = rmq_store_put_batch(self._s, &m, &mv[0], n, &r)
        if rc != 0:
            _raise_for(rc, f"put_batch to {topic}:{queue_id}")
        return _append_result(&r, self.store_host)

    def get_message(self, topic, int queue_id, long long offset, int max_msgs=32,
                    long long max_bytes=256 * 1024, tags_codes=None,
                    long long max_phys=-1) -> GetResult:
        """RocketMQ getMessage: up to max_msgs records of (topic, queue_id)
        from offset (the first always fits max_bytes), filtered by tag codes;
        max_phys >= 0: none whose record ends beyond it, nor any after such
        a record (OFFSET_OVERFLOW_ONE when the first is one)."""
        cdef Py_ssize_t n
        cdef const uint8_t *t
        cdef rmq_get_result_t res
        cdef int32_t *tags = NULL
        cdef int32_t ntags = 0
        cdef rmq_cq_unit_t *units
        cdef int rc, i
        cdef GetResult out
        self._check()
        if max_msgs <= 0 or max_msgs > 65536:
            raise ValueError(f"max_msgs must be in 1..65536, got {max_msgs}")
        t = _text(topic, &n)
        units = <rmq_cq_unit_t *>malloc(max_msgs * sizeof(rmq_cq_unit_t))
        if units == NULL:
            raise MemoryError()
        try:
            if tags_codes:
                codes = list(tags_codes)
                tags = <int32_t *>malloc(len(codes) * sizeof(int32_t))
                if tags == NULL:
                    raise MemoryError()
                for i in range(len(codes)):
                    tags[i] = <int32_t>codes[i]
                ntags = <int32_t>len(codes)
            rc = rmq_store_get(self._s, t, <int32_t>n, queue_id, offset, max_msgs, max_bytes,
                               tags, ntags, max_phys, units, &res)
            _raise_for(rc, "get_message")
            out = GetResult.__new__(GetResult)
            out.status = GET_MESSAGE_STATUS[res.status]
            out.next_begin_offset = res.next_begin_offset
            out.min_offset = res.min_offset
            out.max_offset = res.max_offset
            out.total_bytes = res.total_bytes
            out.ranges = [(units[i].phys_offset, units[i].size) for i in range(res.count)]
            out.tags_codes = [units[i].tags_code for i in range(res.count)]
            return out
        finally:
            free(units)
            free(tags)

    def read(self, long long phys_offset, long long size) -> bytes:
        """Copy size bytes of the CommitLog from phys_offset (within one
        segment and below the write position)."""
        cdef rmq_mapped_file_t *mf
        cdef const uint8_t *p
        cdef int64_t avail
        self._check()
        if size < 0:
            raise ValueError("size must be >= 0")
        _raise_for(rmq_commit_log_read_pinned(&self._s.cl, phys_offset, &mf, &p, &avail),
                   f"read at {phys_offset}")
        try:
            if size > avail:
                raise ValueError(f"{size} bytes at {phys_offset} run past the written data")
            return (<const char *>p)[:size]
        finally:
            rmq_mapped_file_unpin(mf)

    def read_ranges(self, ranges) -> bytes:
        """Concatenate CommitLog byte ranges (a pull body, copied)."""
        return b"".join([self.read(o, s) for o, s in ranges])

    cdef rmq_mapped_file_t *_view_at(self, long long phys_offset,
                                     rmq_record_view_t *v) except NULL:
        """Decode the record at phys_offset in place; the segment stays
        pinned (the view points into it) until the caller unpins it."""
        cdef rmq_mapped_file_t *mf
        cdef const uint8_t *p
        cdef int64_t avail
        self._check()
        _raise_for(rmq_commit_log_read_pinned(&self._s.cl, phys_offset, &mf, &p, &avail),
                   f"no message at offset {phys_offset}")
        try:
            _raise_for(rmq_record_decode(p, avail, v), f"record at {phys_offset}")
        except BaseException:
            rmq_mapped_file_unpin(mf)
            raise
        return mf

    def look_message_by_offset(self, long long phys_offset) -> dict:
        """Decode the record at phys_offset (CRC checked)."""
        cdef rmq_record_view_t v
        cdef rmq_mapped_file_t *mf = self._view_at(phys_offset, &v)
        try:
            if v.phys_offset != phys_offset:
                raise CorruptStoreError(f"no record starts at offset {phys_offset}", RMQ_ECORRUPT)
            if not rmq_record_crc_ok(&v):
                raise CorruptStoreError(f"record at {phys_offset}: body CRC mismatch", RMQ_ECORRUPT)
            return _view_to_dict(&v)
        finally:
            rmq_mapped_file_unpin(mf)

    def properties_at(self, long long phys_offset) -> dict:
        """The properties of the record at phys_offset, decoded (what a
        property filter reads: no CRC check, nothing else copied)."""
        cdef rmq_record_view_t v
        cdef rmq_mapped_file_t *mf = self._view_at(phys_offset, &v)
        try:
            return decode_properties((<const char *>v.props)[:v.props_len])
        finally:
            rmq_mapped_file_unpin(mf)

    def offset_msg_ids(self, bytes store_host, long long phys_offset, long long length) -> str:
        """The offsetMsgIds (offset_msg_id) of the records in [phys_offset,
        phys_offset + length), comma-joined: the msgId a batch put answers
        with. Read in place (the records of one batch put: one segment)."""
        cdef rmq_mapped_file_t *mf
        cdef const uint8_t *p
        cdef int64_t avail
        cdef rmq_record_view_t v
        cdef long long pos = 0
        cdef Py_ssize_t hl = PyBytes_GET_SIZE(store_host), idlen, n = 0, cap, w = 0
        cdef const uint8_t *h = <const uint8_t *>PyBytes_AS_STRING(store_host)
        cdef char *buf
        if hl > 64:
            raise ValueError("store_host is longer than 64 bytes")
        idlen = 2 * (hl + 8)
        self._check()
        _raise_for(rmq_commit_log_read_pinned(&self._s.cl, phys_offset, &mf, &p, &avail),
                   f"no message at offset {phys_offset}")
        buf = NULL
        try:
            if length > avail:
                raise ValueError(f"range [{phys_offset}, {phys_offset + length}) crosses a segment")
            # the smallest record is RECORD_FIXED_IPV4 bytes: room for every id
            cap = (length // RMQ_RECORD_FIXED_IPV4 + 1) * (idlen + 1)
            buf = <char *>malloc(cap)
            if buf == NULL:
                raise MemoryError()
            while pos < length:
                _raise_for(rmq_record_decode(p + pos, length - pos, &v),
                           f"record at {phys_offset + pos}")
                if n:
                    buf[w] = 44  # ','
                    w += 1
                w += _put_offset_msg_id(buf + w, h, hl, phys_offset + pos)
                n += 1
                pos += v.total_size
            return buf[:w].decode("ascii")
        finally:
            free(buf)
            rmq_mapped_file_unpin(mf)

    def pin(self, long long phys_offset) -> SegmentPin:
        """Pin the CommitLog segment holding phys_offset (for sendfile)."""
        cdef rmq_mapped_file_t *mf
        self._check()
        _raise_for(rmq_mfq_find_pinned(self._s.cl.mfq, phys_offset, &mf),
                   f"no CommitLog segment holds offset {phys_offset}")
        pin = SegmentPin.__new__(SegmentPin)
        (<SegmentPin>pin)._mf = mf
        (<SegmentPin>pin).start_offset = mf.from_offset
        (<SegmentPin>pin).end_offset = mf.from_offset + rmq_mapped_file_wrote(mf)
        return pin

    def min_offset_in_queue(self, topic, int queue_id) -> int:
        cdef Py_ssize_t n
        cdef const uint8_t *t = _text(topic, &n)
        self._check()
        return max(0, rmq_store_min_offset(self._s, t, <int32_t>n, queue_id))

    def max_offset_in_queue(self, topic, int queue_id) -> int:
        cdef Py_ssize_t n
        cdef const uint8_t *t = _text(topic, &n)
        self._check()
        return max(0, rmq_store_max_offset(self._s, t, <int32_t>n, queue_id))

    def offset_in_queue_by_time(self, topic, int queue_id, long long timestamp_ms) -> int:
        cdef Py_ssize_t n
        cdef const uint8_t *t = _text(topic, &n)
        self._check()
        return max(0, rmq_store_offset_by_time(self._s, t, <int32_t>n, queue_id, timestamp_ms))

    def query_message_offsets(self, topic, key, int max_num=32, long long begin_ts=0,
                              long long end_ts=2**62) -> list:
        """CommitLog offsets of topic's records with KEYS item or UNIQ_KEY equal
        to key, stored within [begin_ts, end_ts]; newest first."""
        cdef Py_ssize_t tn, kn
        cdef const uint8_t *t = _text(topic, &tn)
        cdef const uint8_t *k = _text(key, &kn)
        cdef int64_t *out
        cdef int n = 0, rc, i
        self._check()
        if max_num <= 0:
            return []
        out = <int64_t *>malloc(max_num * sizeof(int64_t))
        if out == NULL:
            raise MemoryError()
        try:
            rc = rmq_store_query_key(self._s, t, <int32_t>tn, k, <int32_t>kn, begin_ts, end_ts,
                                     out, max_num, &n)
            _raise_for(rc, "query_message")
            return [out[i] for i in range(n)]
        finally:
            free(out)

    def find_key_offsets(self, topic, key, long long begin_ts=0) -> list:
        """query_message_offsets over what the IndexFiles hold now (at most
        4, stored since begin_ts), without indexing what lags first; the GIL
        is released while the index is read."""
        cdef Py_ssize_t tn, kn
        cdef const uint8_t *t = _text(topic, &tn)
        cdef const uint8_t *k = _text(key, &kn)
        cdef int64_t out[4]
        cdef int n = 0, rc, i
        cdef int64_t end_ts = 2**62
        self._check()
        with nogil:
            rc = rmq_store_find_key(self._s, t, <int32_t>tn, k, <int32_t>kn, begin_ts, end_ts,
                                    out, 4, &n)
        _raise_for(rc, "find_key")
        return [out[i] for i in range(n)]

    @property
    def index_dispatched(self) -> int:
        """The CommitLog offset up to which the IndexFiles hold every record."""
        self._check()
        return self._s.index_dispatched

    @property
    def commit_log_min_offset(self) -> int:
        self._check()
        return rmq_mfq_min_offset(self._s.cl.mfq)

    @property
    def commit_log_max_offset(self) -> int:
        self._check()
        return rmq_mfq_max_offset(self._s.cl.mfq)

    @property
    def flushed_offset(self) -> int:
        self._check()
        return rmq_mfq_flushed_where(self._s.cl.mfq)

    def append_replica(self, long long offset, data) -> tuple:
        """A slave's append: data is the master's CommitLog from offset on.
        Writes the whole records (and end-of-segment blanks) that pass their
        checks, unchanged, and dispatches them. Returns (bytes accepted,
        needs_allocate); the rest is an incomplete record to send again with
        the bytes that follow it. Raises ValueError when offset is not where
        this CommitLog ends, and CorruptStoreError (after writing what came
        before it) when a record fails its checks."""
        cdef const unsigned char[::1] mv = data
        cdef int64_t accepted = 0
        cdef int32_t rolled = 0
        cdef Py_ssize_t n = mv.shape[0]
        cdef int rc
        self._check()
        if n == 0:
            return 0, False
        with nogil:
            rc = rmq_store_append_replica(self._s, offset, &mv[0], n, &accepted, &rolled)
        if rc == RMQ_EBAD_ARG:
            raise ValueError(
                f"replica data at {offset} does not continue this CommitLog, which ends at "
                f"{rmq_mfq_max_offset(self._s.cl.mfq)}")
        if rc != 0:
            _raise_for(rc, f"replica data at {offset + accepted}")
        return accepted, rolled != 0

    def truncate(self, long long offset) -> None:
        """Cut the CommitLog at offset, a record boundary (a slave dropping a
        tail its new master never had), with the ConsumeQueue units of the
        records removed. Nothing may append meanwhile."""
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_truncate(self._s, offset)
        if rc == RMQ_EBAD_ARG:
            raise ValueError(
                f"cannot truncate the CommitLog at {offset}: it holds "
                f"[{rmq_mfq_min_offset(self._s.cl.mfq)}, {rmq_mfq_max_offset(self._s.cl.mfq)})")
        _raise_for(rc, f"truncating the CommitLog at {offset}")

    def dispatch(self) -> int:
        """Dispatch records not yet in ConsumeQueues/IndexFiles (after a
        failed dispatch); returns how many were dispatched."""
        cdef int64_t n = 0
        self._check()
        rc = rmq_store_dispatch(self._s, &n)
        self._s.dispatch_error = rc
        _raise_for(rc, "dispatching to ConsumeQueues")
        return n

    def build_index(self, long long max_records=65536) -> int:
        """Index records the CommitLog has dispatched but the IndexFiles do
        not have yet (with index_async); returns how many. Releases the GIL:
        meant for the store's index thread."""
        cdef int64_t n = 0
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_build_index(self._s, max_records, &n)
        _raise_for(rc, "building the index")
        return n

    def start_index_thread(self, int window_ms=20) -> None:
        """Start the index thread (index_async): the puts' dispatch wakes it
        from C, at most once per window_ms, and it builds what lags
        (message_store.h). close() stops it."""
        cdef int rc
        self._check()
        if window_ms < 0:
            raise ValueError(f"window_ms must be >= 0, not {window_ms}")
        rc = rmq_store_index_thread_start(self._s, window_ms)
        if rc == RMQ_EBAD_ARG:
            raise ValueError("the index thread needs index_async and runs once per store")
        _raise_for(rc, "starting the index thread")

    def stop_index_thread(self) -> None:
        """Stop the index thread after its current build (none: nothing)."""
        self._check()
        with nogil:
            rmq_store_index_thread_stop(self._s)

    @property
    def index_error(self) -> str | None:
        """Why the index thread's last build failed (None: it did not)."""
        self._check()
        rc = rmq_store_index_error(self._s)
        return None if rc == 0 else rmq_strerror(rc).decode()

    @property
    def index_lag(self) -> int:
        """CommitLog bytes dispatched but not yet indexed."""
        self._check()
        return self._s.dispatched - self._s.index_dispatched

    @property
    def dispatch_error(self) -> str | None:
        """Why the last dispatch after a put failed (None when it did not)."""
        self._check()
        rc = self._s.dispatch_error
        return None if rc == 0 else rmq_strerror(rc).decode()

    @property
    def dispatched_offset(self) -> int:
        self._check()
        return self._s.dispatched

    @property
    def commit_log_file_size(self) -> int:
        self._check()
        return self._s.cl.mfq.file_size

    def commit_log_files(self) -> list:
        cdef int64_t starts[4096]
        cdef int n, i
        self._check()
        n = rmq_mfq_file_starts(self._s.cl.mfq, starts, 4096)
        return [starts[i] for i in range(n)]

    def flush_commit_log(self, int least_pages=0) -> int:
        """msync the CommitLog; returns the durable offset. Releases the GIL."""
        cdef int64_t where = 0
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_flush_commit_log(self._s, least_pages, &where)
        _raise_for(rc, "flushing the CommitLog")
        return where

    def flush_logics(self, int least_pages=0) -> None:
        """Flush ConsumeQueues (least_pages: each only with at least that
        many dirty pages), IndexFiles when least_pages is 0, then write the
        checkpoint."""
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_flush_logics(self._s, least_pages)
        _raise_for(rc, "flushing ConsumeQueues and the checkpoint")

    def prepare_next_segment(self) -> None:
        """Create the next CommitLog segment ahead of need, and write-fault
        the pages ahead of the write position (AllocateMappedFileService).
        Releases the GIL."""
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_mfq_prepare_next(self._s.cl.mfq)
            if rc == 0:
                rmq_mfq_warm_ahead(self._s.cl.mfq, RMQ_WARM_AHEAD)
        _raise_for(rc, "creating the next CommitLog segment")

    @property
    def has_prepared_segment(self) -> bool:
        self._check()
        return bool(rmq_mfq_has_prepared(self._s.cl.mfq))

    def delete_expired_commit_log(self, long long expire_ms, long long now_ms, bint force=False,
                                  int max_files=10) -> int:
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_delete_expired_commit_log(self._s, expire_ms, now_ms, force, max_files)
        _raise_for(rc, "deleting expired CommitLog segments")
        return rc

    def delete_expired_logics(self) -> int:
        cdef int rc
        self._check()
        with nogil:
            rc = rmq_store_delete_expired_logics(self._s)
        _raise_for(rc, "deleting expired ConsumeQueue and index files")
        return rc

    def delete_topic(self, topic) -> int:
        cdef Py_ssize_t n
        cdef const uint8_t *t = _text(topic, &n)
        cdef int rc
        self._check()
        rc = rmq_store_delete_topic(self._s, t, <int32_t>n)
        _raise_for(rc, f"deleting topic {topic!r}")
        return rc
