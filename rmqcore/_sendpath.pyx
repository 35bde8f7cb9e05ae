# The broker's per-message send path in C (issue 18): the common
# SEND_MESSAGE / SEND_MESSAGE_V2 request goes from its frame to the stored
# record and its encoded answer without a Python object per message.
#
# What is common, and what answers, is decided by the Python path, which
# stays the reference (pyrmq/broker/processor/send.py, process_send): a
# frame is taken here only when the Python path would store it unchanged
# with a SUCCESS answer, and every doubt hands the frame back to it. The
# driver (pyrmq/broker/processor/send_fast.py) says when the path may run at
# all (no ACL hook, no dedup, a master that takes writes, ...) and does the
# per-chunk bookkeeping (stats, arrival notices, the SYNC_FLUSH wait).
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp


cdef extern from *:
    """
    /* First occurrence of needle in hay (n bytes), or NULL. */
    static const char *rmq_find(const char *hay, size_t n, const char *needle, size_t m) {
        if (m == 0 || n < m) return NULL;
        const char *end = hay + n - m + 1;
        const char *p = hay;
        while (p < end) {
            p = (const char *)memchr(p, needle[0], (size_t)(end - p));
            if (p == NULL) return NULL;
            if (memcmp(p, needle, m) == 0) return p;
            p++;
        }
        return NULL;
    }
    """
    const char *rmq_find(const char *hay, size_t n, const char *needle, size_t m) nogil


# SEND_MESSAGE's field names, and SEND_MESSAGE_V2's one-letter names for them
# (V2_FIELDS in send.py); slots in _SendFields
cdef enum:
    F_TOPIC = 0
    F_QUEUE_ID
    F_SYSFLAG
    F_BORN_TS
    F_FLAG
    F_PROPS
    F_RECONSUME
    F_BATCH
    F_COUNT

cdef int _slot_v1(const char *k, size_t n) noexcept nogil:
    if n == 5 and memcmp(k, b"topic", 5) == 0:
        return F_TOPIC
    if n == 7 and memcmp(k, b"queueId", 7) == 0:
        return F_QUEUE_ID
    if n == 7 and memcmp(k, b"sysFlag", 7) == 0:
        return F_SYSFLAG
    if n == 13 and memcmp(k, b"bornTimestamp", 13) == 0:
        return F_BORN_TS
    if n == 4 and memcmp(k, b"flag", 4) == 0:
        return F_FLAG
    if n == 10 and memcmp(k, b"properties", 10) == 0:
        return F_PROPS
    if n == 14 and memcmp(k, b"reconsumeTimes", 14) == 0:
        return F_RECONSUME
    if n == 5 and memcmp(k, b"batch", 5) == 0:
        return F_BATCH
    return -1

cdef int _slot_v2(const char *k, size_t n) noexcept nogil:
    if n != 1:
        # a long name in a V2 header is taken as it is (send.py's mapping
        # keeps unknown keys)
        return _slot_v1(k, n)
    if k[0] == c'b':
        return F_TOPIC
    if k[0] == c'e':
        return F_QUEUE_ID
    if k[0] == c'f':
        return F_SYSFLAG
    if k[0] == c'g':
        return F_BORN_TS
    if k[0] == c'h':
        return F_FLAG
    if k[0] == c'i':
        return F_PROPS
    if k[0] == c'j':
        return F_RECONSUME
    if k[0] == c'm':
        return F_BATCH
    return -1


cdef bint _parse_int(rmq_json_span_t *s, long long dflt, long long lo, long long hi,
                     long long *out) noexcept nogil:
    # A plain decimal integer (optional '-'), as a JSON string or number; an
    # absent or empty value is dflt. Anything int() would read differently
    # ('+', spaces, '_') is refused: the Python path then decides.
    cdef size_t i = 0
    cdef bint neg = False
    cdef unsigned long long v = 0
    if s == NULL or (s.kind == c's' and s.n == 0) or s.kind == c'z':
        out[0] = dflt
        return True
    if (s.kind != c's' and s.kind != c'n') or s.escaped:
        return False
    if s.p[0] == c'-':
        neg = True
        i = 1
    if i >= s.n or s.n - i > 19:
        return False
    while i < s.n:
        if s.p[i] < c'0' or s.p[i] > c'9':
            return False
        v = v * 10 + <unsigned long long>(s.p[i] - c'0')
        i += 1
    if neg:
        if v > 9223372036854775808ULL:
            return False
        out[0] = <long long>(0 - v)
    else:
        if v > 9223372036854775807ULL:
            return False
        out[0] = <long long>v
    return lo <= out[0] <= hi


cdef bint _ascii(const char *p, size_t n) noexcept nogil:
    cdef size_t i
    for i in range(n):
        if <unsigned char>p[i] >= 0x80:
            return False
    return True


cdef inline char *_put_dec(char *o, long long v) noexcept nogil:
    cdef char tmp[24]
    cdef int k = 0
    cdef unsigned long long u
    if v < 0:
        o[0] = c'-'
        o += 1
        u = <unsigned long long>(0 - v)
    else:
        u = <unsigned long long>v
    while True:
        tmp[k] = <char>(c'0' + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    while k > 0:
        k -= 1
        o[0] = tmp[k]
        o += 1
    return o


# the answer's header around its values (the order encode_json_header writes)
cdef bytes _A_HEAD = b'{"code":0,"extFields":{"msgId":"'
cdef bytes _A_QUEUE_ID = b'","queueId":"'
cdef bytes _A_QUEUE_OFFSET = b'","queueOffset":"'
cdef bytes _A_OPAQUE = (b'","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,'
                        b'"language":"JAVA","opaque":')
cdef bytes _A_VERSION = b',"remark":null,"serializeTypeCurrentRPC":"JSON","version":'


cdef inline char *_lit(char *o, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(o, PyBytes_AS_STRING(b), <size_t>n)
    return o + n


cdef inline void _put_u32(char *o, uint32_t v) noexcept nogil:
    o[0] = <char>(v >> 24)
    o[1] = <char>(v >> 16)
    o[2] = <char>(v >> 8)
    o[3] = <char>v


cdef class SendPath:
    """The common send's C path over one store (see the module comment).

    topics: the topics the Python path has served a plain send to, with
    their queue count (learn/forget_all keep it; a topic not in it goes to
    the Python path). After each split(), handled says how many frames were
    taken here and the per-chunk results are in stats, touched,
    needs_allocate and end_offset."""
    cdef MessageStoreCore core
    cdef dict topics
    cdef long long max_message_size
    cdef bint oneway_ok
    # the topic of the last frame taken, and its queue count
    cdef bytes _topic
    cdef int _queue_nums
    # scratch for unescaped properties, and the answers being written
    cdef char *_props
    cdef size_t _props_cap
    cdef char *_out
    cdef size_t _out_cap
    cdef size_t _out_len
    # the running per-topic tally of this chunk
    cdef long long _n, _wrote, _body
    cdef readonly int handled
    #: of which SEND_MESSAGE_V2 (310); the others are SEND_MESSAGE (10)
    cdef readonly int handled_v2
    cdef readonly bint needs_allocate
    cdef readonly long long end_offset
    #: [(topic, messages, stored bytes, body bytes)] in the order met
    cdef readonly list stats
    #: [(topic, queue id, queue's max offset)] of the queues appended to
    cdef readonly list touched
    #: the stream broke after frames were taken here (split's docstring)
    cdef readonly str error
    #: tell touched queues (a long-polling listener is registered)
    cdef public bint want_touched

    def __cinit__(self, MessageStoreCore core, long long max_message_size, bint oneway_ok=True):
        """oneway_ok: oneway sends are taken here too (False in SYNC_FLUSH,
        where the Python path holds a oneway sender's reading)."""
        self.core = core
        self.topics = {}
        self.max_message_size = max_message_size
        self.oneway_ok = oneway_ok
        self._topic = None
        self.stats = []
        self.touched = []

    def __dealloc__(self):
        free(self._props)
        free(self._out)

    def learn(self, str topic, int queue_nums) -> None:
        """topic passed the Python path's checks for a plain send."""
        self.topics[topic.encode()] = queue_nums

    def forget_all(self) -> None:
        """The topic table changed: every topic is checked again."""
        self.topics.clear()
        self._topic = None

    cdef char *_room(self, size_t need) except NULL:
        cdef char *p
        cdef size_t cap
        if self._out_len + need <= self._out_cap:
            return self._out + self._out_len
        cap = max(2 * self._out_cap, self._out_len + need, <size_t>4096)
        p = <char *>realloc(self._out, cap)
        if p == NULL:
            raise MemoryError()
        self._out = p
        self._out_cap = cap
        return self._out + self._out_len

    cdef int _close_tally(self) except -1:
        if self._n:
            self.stats.append((self._topic, self._n, self._wrote, self._body))
            self._n = self._wrote = self._body = 0
        return 0

    cdef int _tell(self, bytes topic, int qid, long long end) except -1:
        cdef tuple last
        cdef Py_ssize_t n = len(self.touched)
        if n:
            last = self.touched[n - 1]
            if last[1] == qid and last[0] is topic:
                self.touched[n - 1] = (topic, qid, end)
                return 0
        self.touched.append((topic, qid, end))
        return 0

    cdef int _take(self, const char *hp, size_t hn, const uint8_t *body, Py_ssize_t blen,
                   const uint8_t *born_host, Py_ssize_t bhl) except -1:
        """1: the frame is stored and answered; 0: the Python path's."""
        cdef rmq_json_header_t h
        cdef rmq_json_span_t *f[F_COUNT]
        cdef rmq_json_span_t *k
        cdef size_t i
        cdef int slot
        cdef long long qid, sysflag, born_ts, uflag, reconsume
        cdef const char *props
        cdef ptrdiff_t plen
        cdef bint oneway
        cdef rmq_msg_in_t m
        cdef rmq_append_result_t r
        cdef rmq_store_t *s = self.core._s
        cdef object qn
        cdef bytes topic
        cdef char *o
        cdef char *start
        cdef size_t hl
        cdef char *p
        if s == NULL or not _ascii(hp, hn) or rmq_json_header_parse(hp, hn, &h) != 0:
            return 0
        if (h.code != 10 and h.code != 310) or h.flag & 1:
            return 0
        oneway = (h.flag & 2) != 0
        if oneway and not self.oneway_ok:
            return 0
        for i in range(F_COUNT):
            f[i] = NULL
        for i in range(h.nfields):
            k = &h.keys[i]
            if k.escaped:
                return 0
            slot = _slot_v1(k.p, k.n) if h.code == 10 else _slot_v2(k.p, k.n)
            if slot < 0:
                continue
            if f[slot] != NULL:
                return 0  # a field twice: the Python path's dict decides
            f[slot] = &h.values[i]
        # batch: the Python path's; only an explicit "not a batch" stays here
        if f[F_BATCH] != NULL:
            k = f[F_BATCH]
            if not ((k.kind == c'f')
                    or (k.kind == c's' and k.n == 5 and memcmp(k.p, b"false", 5) == 0)
                    or (k.kind == c's' and k.n == 1 and k.p[0] == c'0')
                    or (k.kind == c'n' and k.n == 1 and k.p[0] == c'0')):
                return 0
        k = f[F_TOPIC]
        if k == NULL or k.kind != c's' or k.escaped or k.n == 0:
            return 0
        if not (_parse_int(f[F_QUEUE_ID], -1, 0, 0x7fffffff, &qid)
                and _parse_int(f[F_SYSFLAG], 0, -2147483648, 2147483647, &sysflag)
                and _parse_int(f[F_BORN_TS], 0, LLONG_MIN, LLONG_MAX, &born_ts)
                and _parse_int(f[F_RECONSUME], 0, 0, 2147483647, &reconsume)
                and _parse_int(f[F_FLAG], 0, -2147483648, 2147483647, &uflag)):
            return 0
        if sysflag & 0xC or blen > self.max_message_size or blen >= _NOGIL_BYTES:
            return 0
        # the topic: the last one's, or the table's
        if (self._topic is not None and <size_t>PyBytes_GET_SIZE(self._topic) == k.n
                and memcmp(PyBytes_AS_STRING(self._topic), k.p, k.n) == 0):
            topic = self._topic
        else:
            topic = PyBytes_FromStringAndSize(k.p, <Py_ssize_t>k.n)
            qn = self.topics.get(topic)
            if qn is None:
                return 0
            self._close_tally()
            self._topic = topic
            self._queue_nums = qn
        if qid >= self._queue_nums:
            return 0
        # properties: unescaped; delayed, timed, transactional or WAIT=false
        # messages are the Python path's
        props = b""
        plen = 0
        k = f[F_PROPS]
        if k != NULL and k.kind != c'z':
            if k.kind != c's':
                return 0
            if k.escaped:
                if k.n > self._props_cap:
                    p = <char *>realloc(self._props, k.n)
                    if p == NULL:
                        raise MemoryError()
                    self._props = p
                    self._props_cap = k.n
                plen = rmq_json_unescape(k.p, k.n, self._props)
                if plen < 0:
                    return 0
                props = self._props
            else:
                props = k.p
                plen = <ptrdiff_t>k.n
            if (rmq_find(props, plen, b"DELAY\x01", 6) != NULL
                    or rmq_find(props, plen, b"TIMER_DELIVER_MS\x01", 17) != NULL
                    or rmq_find(props, plen, b"TIMER_DELAY_SEC\x01", 16) != NULL
                    or rmq_find(props, plen, b"TRAN_MSG", 8) != NULL
                    or rmq_find(props, plen, b"WAIT\x01false", 10) != NULL):
                return 0
        m.topic = <const uint8_t *>PyBytes_AS_STRING(topic)
        m.topic_len = <int32_t>PyBytes_GET_SIZE(topic)
        m.queue_id = <int32_t>qid
        m.flag = <int32_t>uflag
        m.body = body
        m.body_len = <int32_t>blen
        m.props = <const uint8_t *>props
        m.props_len = <int32_t>plen
        m.sysflag = <int32_t>sysflag
        m.born_timestamp = born_ts
        m.born_host = born_host
        m.born_host_len = <int32_t>bhl
        m.reconsume_times = <int32_t>reconsume
        m.prepared_tx_offset = 0
        if rmq_store_put(s, &m, &r) != 0:
            return 0  # nothing was written: the Python path raises the error
        self.handled += 1
        if h.code == 310:
            self.handled_v2 += 1
        self._n += 1
        self._wrote += r.wrote_bytes
        self._body += blen
        if r.rolled:
            self.needs_allocate = True
        if r.phys_offset + r.wrote_bytes > self.end_offset:
            self.end_offset = r.phys_offset + r.wrote_bytes
        if self.want_touched:
            self._tell(topic, <int>qid, r.queue_offset + r.count)
        if oneway:
            return 1
        # the answer: RemotingCommand.response(SUCCESS, {msgId, queueId,
        # queueOffset, MSG_REGION, TRACE_ON}).encode() of send.py's _answer
        start = self._room(400 + 2 * PyBytes_GET_SIZE(self.core.store_host))
        o = start + 8
        o = _lit(o, _A_HEAD)
        o += _put_offset_msg_id(o, <const uint8_t *>PyBytes_AS_STRING(self.core.store_host),
                                PyBytes_GET_SIZE(self.core.store_host), r.phys_offset)
        o = _lit(o, _A_QUEUE_ID)
        o = _put_dec(o, qid)
        o = _lit(o, _A_QUEUE_OFFSET)
        o = _put_dec(o, r.queue_offset)
        o = _lit(o, _A_OPAQUE)
        o = _put_dec(o, h.opaque)
        o = _lit(o, _A_VERSION)
        o = _put_dec(o, h.version)
        o[0] = c'}'
        o += 1
        hl = <size_t>(o - start - 8)
        _put_u32(start, <uint32_t>(4 + hl))
        _put_u32(start + 4, <uint32_t>hl)
        self._out_len += <size_t>(o - start)
        return 1

    def split(self, buf, Py_ssize_t max_frame, bytes born_host):
        """split_frames(buf, max_frame), taking here each leading frame the
        C path can serve. Returns (frames for the Python path, bytes
        consumed, the answers of the frames taken as one bytes). After the
        first frame handed back, every later one is handed back too: the
        requests of a connection are served in order. A frame that breaks
        the stream raises ValueError as split_frames does, unless frames
        were taken here before it: they are stored, so split returns and
        names the fault in error (the caller answers them, then closes)."""
        cdef const unsigned char[::1] mv = buf
        cdef Py_ssize_t n = mv.shape[0], pos = 0, flen, hlen
        cdef unsigned int word, stype
        cdef const unsigned char *q
        cdef bint fast = True
        bad = None
        frames = []
        self.handled = 0
        self.handled_v2 = 0
        self.error = None
        self.needs_allocate = False
        self.end_offset = 0
        self.stats = []
        self.touched = []
        self._out_len = 0
        self._n = self._wrote = self._body = 0
        try:
            while n - pos >= 4:
                q = &mv[pos]
                flen = ((<Py_ssize_t>q[0] << 24) | (<Py_ssize_t>q[1] << 16)
                        | (<Py_ssize_t>q[2] << 8) | q[3])
                if flen < 4 or flen > max_frame:
                    bad = f"frame length {flen} outside 4..{max_frame}"
                    break
                if n - pos - 4 < flen:
                    break
                word = ((<unsigned int>q[4] << 24) | (<unsigned int>q[5] << 16)
                        | (<unsigned int>q[6] << 8) | q[7])
                stype = word >> 24
                hlen = word & 0xFFFFFF
                if hlen > flen - 4:
                    bad = f"header length {hlen} runs past the frame ({flen - 4} bytes)"
                    break
                if fast and stype == 0 and hlen > 0:
                    if self._take(<const char *>q + 8, <size_t>hlen, q + 8 + hlen, flen - 4 - hlen,
                                  <const uint8_t *>PyBytes_AS_STRING(born_host),
                                  PyBytes_GET_SIZE(born_host)):
                        pos += 4 + flen
                        continue
                    fast = False
                body = PyBytes_FromStringAndSize(<const char *>q + 8 + hlen, flen - 4 - hlen)
                if stype == 0:
                    if hlen == 0:
                        bad = "empty header"
                        break
                    try:
                        header = _parse_header(<const char *>q + 8, <size_t>hlen)
                    except ValueError as e:
                        bad = str(e)
                        break
                else:
                    header = PyBytes_FromStringAndSize(<const char *>q + 8, hlen)
                frames.append((stype, header, body))
                pos += 4 + flen
        finally:
            self._close_tally()
        answers = PyBytes_FromStringAndSize(self._out, <Py_ssize_t>self._out_len) if self._out_len else b""
        if bad is not None and not self.handled:
            raise ValueError(bad)
        # frames taken here are stored: their answers go out before the
        # connection is closed for the bad frame
        self.error = bad
        return frames, pos, answers

