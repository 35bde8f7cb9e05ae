# Pub trace records (RocketMQ's TraceDataEncoder), written here because a
# traced producer writes one per send: the format is documented in
# pyrmq/common/trace.py, and this is its only writer of Pub records.
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memmove
from libc.stdio cimport snprintf

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef struct _TraceBuf:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _tb_reserve(_TraceBuf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap
    cdef char *grown
    if b.n + extra <= b.cap:
        return 0
    cap = b.cap * 2
    if cap < b.n + extra:
        cap = b.n + extra
    if cap < 4096:
        cap = 4096
    grown = <char *>realloc(b.p, <size_t>cap)
    if grown == NULL:
        raise MemoryError()
    b.p = grown
    b.cap = cap
    return 0


cdef inline int _tb_put(_TraceBuf *b, const char *s, Py_ssize_t n) except -1:
    _tb_reserve(b, n + 1)
    memcpy(b.p + b.n, s, <size_t>n)
    b.n += n
    return 0


cdef int _tb_text(_TraceBuf *b, object v, char end) except -1:
    """A text field, "null" when None or empty, then `end`."""
    cdef const char *u
    cdef Py_ssize_t n
    if v is None or not v:
        _tb_put(b, b"null", 4)
    else:
        if not isinstance(v, str):
            v = str(v)
        u = PyUnicode_AsUTF8AndSize(v, &n)
        _tb_put(b, u, n)
    b.p[b.n] = end
    b.n += 1
    return 0


cdef int _tb_number(_TraceBuf *b, long long v, char end) except -1:
    cdef char tmp[24]
    cdef int n = snprintf(tmp, sizeof(tmp), b"%lld", v)
    _tb_put(b, tmp, n)
    b.p[b.n] = end
    b.n += 1
    return 0


cdef int _write_pub(
    _TraceBuf *b, long long timestamp, object region_id, object group, object topic,
    object msg_id, object tags, object keys, object store_host, long long body_length,
    long long cost_ms, long long msg_type, object offset_msg_id, bint success,
) except -1:
    _tb_put(b, b"Pub\x01", 4)
    _tb_number(b, timestamp, 1)
    _tb_text(b, region_id, 1)
    _tb_text(b, group, 1)
    _tb_text(b, topic, 1)
    _tb_text(b, msg_id, 1)
    _tb_text(b, tags, 1)
    _tb_text(b, keys, 1)
    _tb_text(b, store_host, 1)
    _tb_number(b, body_length, 1)
    _tb_number(b, cost_ms, 1)
    _tb_number(b, msg_type, 1)
    _tb_text(b, offset_msg_id, 1)
    if success:
        _tb_put(b, b"true\x02", 5)
    else:
        _tb_put(b, b"false\x02", 6)
    return 0


def encode_pub(
    long long timestamp, region_id, group, topic, msg_id, tags, keys, store_host,
    long long body_length, long long cost_ms, long long msg_type, offset_msg_id, bint success,
) -> str:
    """One Pub record as text, FIELD_SPLITOR included."""
    cdef _TraceBuf b
    b.p = NULL
    b.n = b.cap = 0
    try:
        _write_pub(&b, timestamp, region_id, group, topic, msg_id, tags, keys, store_host,
                   body_length, cost_ms, msg_type, offset_msg_id, success)
        return b.p[:b.n].decode("utf-8")
    finally:
        free(b.p)


cdef int _tb_end(_TraceBuf *ends, Py_ssize_t at) except -1:
    """Append an offset to a buffer used as an array of Py_ssize_t."""
    _tb_reserve(ends, sizeof(Py_ssize_t))
    (<Py_ssize_t *>(ends.p + ends.n))[0] = at
    ends.n += sizeof(Py_ssize_t)
    return 0


cdef class PubBuffer:
    """The Pub records of a traced producer's sends, written as each send
    is answered (append: no Python object is kept per send, so a busy
    producer's garbage collector has nothing more to walk) and taken in
    trace message bodies when the dispatcher flushes.

    append(message, send result, store host, began ms, cost ms): the
    message's type is transactional half with TRAN_MSG, delayed with DELAY,
    else normal; the send succeeded when the result's status is `send_ok`;
    a result without a region is in `default_region`. It never raises (it
    runs where a send is answered): a record beyond `max_records`, or one
    whose fields cannot be read, is counted in `dropped` and the last such
    error kept in `last_error`. Every `batch_records`-th record appended
    calls `on_batch()` (the dispatcher's wake-up: trace messages then go
    out a batch at a time, not in one burst per flush interval); what it
    raises is counted like an unreadable record."""

    cdef _TraceBuf body
    cdef _TraceBuf keys
    cdef _TraceBuf body_ends
    cdef _TraceBuf key_ends
    cdef Py_ssize_t count
    cdef object group
    cdef object send_ok
    cdef object default_region
    cdef Py_ssize_t max_records
    cdef Py_ssize_t batch_records
    cdef object on_batch
    cdef public Py_ssize_t dropped
    cdef public object last_error

    def __cinit__(self, group, send_ok, default_region, Py_ssize_t max_records,
                  Py_ssize_t batch_records=0, on_batch=None):
        self.body.p = self.keys.p = self.body_ends.p = self.key_ends.p = NULL
        self.body.n = self.keys.n = self.body_ends.n = self.key_ends.n = 0
        self.body.cap = self.keys.cap = self.body_ends.cap = self.key_ends.cap = 0
        self.count = 0
        self.group = group
        self.send_ok = send_ok
        self.default_region = default_region
        self.max_records = max_records
        self.batch_records = batch_records
        self.on_batch = on_batch
        self.dropped = 0
        self.last_error = None

    def __dealloc__(self):
        free(self.body.p)
        free(self.keys.p)
        free(self.body_ends.p)
        free(self.key_ends.p)

    def __len__(self):
        return self.count

    def append(self, msg, r, store_host, began, cost):
        cdef dict props
        cdef long long msg_type
        cdef Py_ssize_t body_n = self.body.n, keys_n = self.keys.n
        cdef Py_ssize_t ends_n = self.body_ends.n, kends_n = self.key_ends.n
        if self.count >= self.max_records:
            self.dropped += 1
            return
        try:
            props = msg.properties
            if "TRAN_MSG" in props:
                msg_type = 1  # TRANS_MSG_HALF
            elif "DELAY" in props:
                msg_type = 3  # DELAY_MSG
            else:
                msg_type = 0  # NORMAL_MSG
            keys = props.get("KEYS")
            msg_id = r.msg_id
            _write_pub(&self.body, began, r.region_id or self.default_region, self.group,
                       msg.topic, msg_id, props.get("TAGS"), keys, store_host, len(msg.body),
                       cost, msg_type, r.offset_msg_id, r.send_status is self.send_ok)
            # the trace message's KEYS: each record's message id and keys
            if msg_id:
                _tb_text(&self.keys, msg_id, 32)
            if keys:
                _tb_text(&self.keys, keys, 32)
            _tb_end(&self.body_ends, self.body.n)
            _tb_end(&self.key_ends, self.keys.n)
        except Exception as e:
            # no half record
            self.body.n, self.keys.n = body_n, keys_n
            self.body_ends.n, self.key_ends.n = ends_n, kends_n
            self.dropped += 1
            self.last_error = e
            return
        self.count += 1
        if self.batch_records > 0 and self.count % self.batch_records == 0 and self.on_batch is not None:
            try:
                self.on_batch()
            except Exception as e:
                self.dropped += 1
                self.last_error = e

    def take(self, Py_ssize_t max_body, Py_ssize_t max_records=0):
        """Every record appended, in bodies of at most `max_body` bytes (a
        longer record alone in its own) and, when `max_records` > 0, at
        most that many records, emptied: a list of (body, keys), keys
        space-separated, each once."""
        cdef list out = []
        cdef Py_ssize_t i, start = 0, kstart = 0, end, prev = 0, kprev = 0, n = 0
        cdef Py_ssize_t *ends = <Py_ssize_t *>self.body_ends.p
        cdef Py_ssize_t *kends = <Py_ssize_t *>self.key_ends.p
        for i in range(self.count):
            end = ends[i]
            if prev > start and (end - start > max_body or n == max_records):
                out.append(self._piece(start, prev, kstart, kprev))
                start, kstart, n = prev, kprev, 0
            prev, kprev = end, kends[i]
            n += 1
        if prev > start:
            out.append(self._piece(start, prev, kstart, kprev))
        self.body.n = self.keys.n = self.body_ends.n = self.key_ends.n = 0
        self.count = 0
        return out

    cdef tuple _piece(self, Py_ssize_t start, Py_ssize_t end, Py_ssize_t kstart,
                      Py_ssize_t kend):
        # the keys were written each followed by a space: drop the last
        keys = self.keys.p[kstart:kend - 1].decode("utf-8")
        return (self.body.p[start:end], " ".join(dict.fromkeys(keys.split(" "))))
