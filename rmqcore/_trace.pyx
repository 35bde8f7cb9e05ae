# TraceBuffer: a traced client's trace records, in C until the dispatcher
# takes them as trace message bodies. Pub records (RocketMQ's
# TraceDataEncoder) are written here because a traced producer writes one
# per send: the format is documented in pyrmq/common/trace.py, and this is
# its only writer of Pub records.
from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    str PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)


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


cdef inline const char *_utf8(object v, Py_ssize_t *n) except NULL:
    """A text field's UTF-8 bytes (the str's own cache: no copy), or the
    text "null" when None or empty; TypeError for what is not a str."""
    if v is None or not v:
        n[0] = 4
        return b"null"
    if not isinstance(v, str):
        raise TypeError(f"a trace field must be text, not {type(v).__name__}")
    return PyUnicode_AsUTF8AndSize(v, n)


cdef inline char *_text_at(char *o, const char *u, Py_ssize_t n, char end):
    memcpy(o, u, <size_t>n)
    o[n] = end
    return o + n + 1


cdef inline char *_number_at(char *o, long long v, char end):
    """v in decimal (as Java's Long.toString), then `end`."""
    cdef char tmp[24]
    cdef int i = 24
    cdef unsigned long long u = (0ULL - <unsigned long long>v) if v < 0 else <unsigned long long>v
    while True:
        i -= 1
        tmp[i] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        tmp[i] = 45  # '-'
    memcpy(o, &tmp[i], <size_t>(24 - i))
    o[24 - i] = end
    return o + 24 - i + 1


cdef int _tb_text(_TraceBuf *b, object v, char end) except -1:
    """A text field, "null" when None or empty, then `end`."""
    cdef Py_ssize_t n
    cdef const char *u = _utf8(v, &n)
    _tb_reserve(b, n + 1)
    b.n = _text_at(b.p + b.n, u, n, end) - b.p
    return 0


cdef int _write_pub(
    _TraceBuf *b, long long timestamp, object region_id, object group, object topic,
    object msg_id, object tags, object keys, object store_host, long long body_length,
    long long cost_ms, long long msg_type, object offset_msg_id, bint success,
) except -1:
    # every text field's bytes first, then one reserve and straight copies
    cdef const char *t[8]
    cdef Py_ssize_t n[8]
    cdef Py_ssize_t i, total = 4 + 6 + 4 * 21
    cdef char *o
    t[0] = _utf8(region_id, &n[0])
    t[1] = _utf8(group, &n[1])
    t[2] = _utf8(topic, &n[2])
    t[3] = _utf8(msg_id, &n[3])
    t[4] = _utf8(tags, &n[4])
    t[5] = _utf8(keys, &n[5])
    t[6] = _utf8(store_host, &n[6])
    t[7] = _utf8(offset_msg_id, &n[7])
    for i in range(8):
        total += n[i] + 1
    _tb_reserve(b, total)
    o = b.p + b.n
    memcpy(o, b"Pub\x01", 4)
    o += 4
    o = _number_at(o, timestamp, 1)
    for i in range(7):
        o = _text_at(o, t[i], n[i], 1)
    o = _number_at(o, body_length, 1)
    o = _number_at(o, cost_ms, 1)
    o = _number_at(o, msg_type, 1)
    o = _text_at(o, t[7], n[7], 1)
    if success:
        memcpy(o, b"true\x02", 5)
        o += 5
    else:
        memcpy(o, b"false\x02", 6)
        o += 6
    b.n = o - b.p
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


cdef inline uint64_t _fnv1a(const char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <unsigned char>p[i]) * 1099511628211ULL
    return h


cdef str _unique_keys(const char *p, Py_ssize_t n):
    """The space-separated keys in p[0..n) (UTF-8), each once, in the order
    first seen, space-separated, empty ones dropped: a trace message's KEYS
    (the message ids and keys of its records; a consumer's SubBefore and
    SubAfter records repeat theirs). A hash set over the buffer: no Python
    object per key."""
    cdef Py_ssize_t i, start = 0, tokens = 1, cap = 16, w = 0, ln
    cdef uint64_t h
    cdef Py_ssize_t *table  # per slot: the key's start + 1 (0: empty), its length
    cdef char *out
    for i in range(n):
        if p[i] == 32:
            tokens += 1
    while cap < 2 * tokens:
        cap *= 2
    table = <Py_ssize_t *>calloc(<size_t>(2 * cap), sizeof(Py_ssize_t))
    out = <char *>malloc(<size_t>(n + 1))
    try:
        if table == NULL or out == NULL:
            raise MemoryError()
        for i in range(n + 1):
            if i < n and p[i] != 32:
                continue
            ln = i - start
            if ln > 0:
                h = _fnv1a(p + start, ln) & <uint64_t>(cap - 1)
                while True:
                    if table[2 * h] == 0:
                        table[2 * h] = start + 1
                        table[2 * h + 1] = ln
                        if w > 0:
                            out[w] = 32
                            w += 1
                        memcpy(out + w, p + start, <size_t>ln)
                        w += ln
                        break
                    if table[2 * h + 1] == ln and memcmp(p + table[2 * h] - 1, p + start,
                                                         <size_t>ln) == 0:
                        break
                    h = (h + 1) & <uint64_t>(cap - 1)
            start = i + 1
        return PyUnicode_DecodeUTF8(out, w, NULL)
    finally:
        free(table)
        free(out)


cdef class TraceBuffer:
    """A traced client's records: the Pub records of its sends, written as
    each send is answered (append: no Python object is kept per send, so a
    busy producer's garbage collector has nothing more to walk), and its
    other records encoded (append_encoded), taken in trace message bodies
    when the dispatcher flushes.

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
        if self._full():
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
            self._end_record()
        except Exception as e:
            self._dropped(body_n, keys_n, ends_n, kends_n, e)
            return
        self._appended()

    def append_encoded(self, data, keys):
        """A record already encoded (a SubBefore, SubAfter or EndTransaction
        record's TraceRecord.encode()) with its trace keys (a list of str),
        taken in the same bodies as the Pub records; the same limits, the
        same never-raise rule as append."""
        cdef Py_ssize_t body_n = self.body.n, keys_n = self.keys.n
        cdef Py_ssize_t ends_n = self.body_ends.n, kends_n = self.key_ends.n
        cdef Py_ssize_t n
        cdef const char *u
        if self._full():
            return
        try:
            u = _utf8(data, &n)
            _tb_put(&self.body, u, n)
            for k in keys:
                _tb_text(&self.keys, k, 32)
            self._end_record()
        except Exception as e:
            self._dropped(body_n, keys_n, ends_n, kends_n, e)
            return
        self._appended()

    cdef bint _full(self):
        """No room for one more record: counted as dropped."""
        if self.count >= self.max_records:
            self.dropped += 1
            return True
        return False

    cdef int _end_record(self) except -1:
        """Where the record just written ends, in the body and the keys."""
        _tb_end(&self.body_ends, self.body.n)
        _tb_end(&self.key_ends, self.keys.n)
        return 0

    cdef void _dropped(self, Py_ssize_t body_n, Py_ssize_t keys_n, Py_ssize_t ends_n,
                       Py_ssize_t kends_n, object error):
        """A record that could not be written: back to where it began (no
        half record), counted."""
        self.body.n, self.keys.n = body_n, keys_n
        self.body_ends.n, self.key_ends.n = ends_n, kends_n
        self.dropped += 1
        self.last_error = error

    cdef void _appended(self):
        self.count += 1
        if self.batch_records > 0 and self.count % self.batch_records == 0 and self.on_batch is not None:
            try:
                self.on_batch()
            except Exception as e:
                self.dropped += 1
                self.last_error = e

    def take(self, Py_ssize_t max_body, Py_ssize_t max_records=0, Py_ssize_t max_keys=0,
             bint whole=False):
        """The records appended, in bodies of at most `max_body` bytes (a
        longer record alone in its own), when `max_records` > 0 at most
        that many records, and when `max_keys` > 0 at most that many bytes
        of keys (what goes in the trace message's KEYS property, which a
        CommitLog record caps at 32767 bytes of properties): a list of
        (body, keys), keys space-separated, each once. Every record is
        taken, or with `whole` (and max_records > 0) only whole bodies: the
        records after the last body that one of the limits closed stay for
        the next take."""
        cdef list out = []
        cdef Py_ssize_t i, start = 0, kstart = 0, end, kend, prev = 0, kprev = 0, n = 0
        cdef Py_ssize_t first = 0
        cdef Py_ssize_t *ends = <Py_ssize_t *>self.body_ends.p
        cdef Py_ssize_t *kends = <Py_ssize_t *>self.key_ends.p
        for i in range(self.count):
            end, kend = ends[i], kends[i]
            if prev > start and (
                end - start > max_body
                or n == max_records
                or (max_keys > 0 and kend - kstart > max_keys)
            ):
                out.append(self._piece(start, prev, kstart, kprev))
                start, kstart, n, first = prev, kprev, 0, i
            prev, kprev = end, kend
            n += 1
        if whole and max_records > 0 and n < max_records:
            self._keep(first, start, kstart)
            return out
        if prev > start:
            out.append(self._piece(start, prev, kstart, kprev))
        self.body.n = self.keys.n = self.body_ends.n = self.key_ends.n = 0
        self.count = 0
        return out

    cdef void _keep(self, Py_ssize_t first, Py_ssize_t start, Py_ssize_t kstart):
        """Keep the records from `first` on (whose body begins at `start` and
        keys at `kstart`), moved to the buffers' beginning."""
        cdef Py_ssize_t i, left = self.count - first
        cdef Py_ssize_t *ends = <Py_ssize_t *>self.body_ends.p
        cdef Py_ssize_t *kends = <Py_ssize_t *>self.key_ends.p
        if first == 0:
            return
        memmove(self.body.p, self.body.p + start, <size_t>(self.body.n - start))
        memmove(self.keys.p, self.keys.p + kstart, <size_t>(self.keys.n - kstart))
        self.body.n -= start
        self.keys.n -= kstart
        for i in range(left):
            ends[i] = ends[first + i] - start
            kends[i] = kends[first + i] - kstart
        self.body_ends.n = self.key_ends.n = left * sizeof(Py_ssize_t)
        self.count = left

    cdef tuple _piece(self, Py_ssize_t start, Py_ssize_t end, Py_ssize_t kstart,
                      Py_ssize_t kend):
        if kend == kstart:
            return (self.body.p[start:end], "")
        # the keys were written each followed by a space: drop the last
        return (self.body.p[start:end],
                _unique_keys(self.keys.p + kstart, kend - 1 - kstart))
