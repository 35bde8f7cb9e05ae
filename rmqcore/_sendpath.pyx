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
#
# Serving a chunk of frames (_serve) is plain C that never needs the GIL: the
# event loop runs it inline (SendPath.split), and the broker's C send threads
# run it for chunks handed to them (_sendlanes.pyx). What it leaves is an
# sp_out_t, turned into a SendChunk for the driver on the loop's thread.
from cpython.ref cimport PyObject
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint32_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memchr, memcmp, memcpy


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



cdef extern from *:
    """
    /* The answer's header around its values (the order encode_json_header
     * writes), and a literal's copy. */
    #define SP_A_HEAD "{\\"code\\":0,\\"extFields\\":{\\"msgId\\":\\""
    #define SP_A_QUEUE_ID "\\",\\"queueId\\":\\""
    #define SP_A_QUEUE_OFFSET "\\",\\"queueOffset\\":\\""
    #define SP_A_OPAQUE "\\",\\"MSG_REGION\\":\\"DefaultRegion\\",\\"TRACE_ON\\":\\"true\\"},\\"flag\\":1," \\
        "\\"language\\":\\"JAVA\\",\\"opaque\\":"
    #define SP_A_VERSION ",\\"remark\\":null,\\"serializeTypeCurrentRPC\\":\\"JSON\\",\\"version\\":"
    #define SP_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)
    """
    const char *SP_A_HEAD
    const char *SP_A_QUEUE_ID
    const char *SP_A_QUEUE_OFFSET
    const char *SP_A_OPAQUE
    const char *SP_A_VERSION
    char *SP_LIT(char *o, const char *lit) nogil


cdef inline void _put_u32(char *o, uint32_t v) noexcept nogil:
    o[0] = <char>(v >> 24)
    o[1] = <char>(v >> 16)
    o[2] = <char>(v >> 8)
    o[3] = <char>v


# A chunk's touched queues: how many of the latest entries a put looks
# through for its queue's (sends spread over a topic's queues round robin
# would otherwise make one entry, and one arrival notice, a send).
cdef enum:
    TOUCH_SCAN = 16


cdef inline void _touch(sp_out_t *R, sp_tally_t *t, int qid, long long end) noexcept nogil:
    """Record that the chunk's puts reached `end` in (t's topic, qid); the
    room for a new entry is there (_tally made it)."""
    cdef int i
    cdef int lo = R.ntouched - TOUCH_SCAN if R.ntouched > TOUCH_SCAN else 0
    cdef sp_touch_t *tt
    for i in range(R.ntouched - 1, lo - 1, -1):
        tt = &R.touched[i]
        if tt.qid == qid and tt.name_off == t.name_off:
            tt.end = end
            return
    tt = &R.touched[R.ntouched]
    R.ntouched += 1
    tt.name_off = t.name_off
    tt.name_len = t.name_len
    tt.qid = qid
    tt.end = end


cdef int _take(sp_shared_t *S, sp_scratch_t *T, sp_out_t *R, const char *hp, size_t hn,
               const uint8_t *body, Py_ssize_t blen, const uint8_t *born_host,
               Py_ssize_t bhl) noexcept nogil:
    """1: the frame is stored and answered; 0: the Python path's."""
    cdef rmq_json_header_t h
    cdef rmq_json_span_t *f[F_COUNT]
    cdef rmq_json_span_t *k
    cdef size_t i
    cdef int slot, queue_nums
    cdef long long qid, sysflag, born_ts, uflag, reconsume
    cdef const char *props
    cdef ptrdiff_t plen
    cdef bint oneway
    cdef rmq_msg_in_t m
    cdef rmq_append_result_t r
    cdef sp_tally_t *t
    cdef sp_touch_t *tt
    cdef char *o
    cdef char *start
    cdef size_t hl
    cdef char *p
    # a string with bytes >= 0x80: the Python path's (it judges the UTF-8)
    if S.store == NULL or rmq_json_header_parse(hp, hn, &h) != 0 or h.non_ascii:
        return 0
    if (h.code != 10 and h.code != 310) or h.flag & 1:
        return 0
    oneway = (h.flag & 2) != 0
    if oneway and not S.oneway_ok:
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
    if k == NULL or k.kind != c's' or k.escaped or k.n == 0 or k.n > 127:
        return 0
    if not (_parse_int(f[F_QUEUE_ID], -1, 0, 0x7fffffff, &qid)
            and _parse_int(f[F_SYSFLAG], 0, -2147483648, 2147483647, &sysflag)
            and _parse_int(f[F_BORN_TS], 0, LLONG_MIN, LLONG_MAX, &born_ts)
            and _parse_int(f[F_RECONSUME], 0, 0, 2147483647, &reconsume)
            and _parse_int(f[F_FLAG], 0, -2147483648, 2147483647, &uflag)):
        return 0
    if sysflag & 0xC or blen > S.max_message_size or blen >= _NOGIL_BYTES:
        return 0
    queue_nums = _queue_nums(S, T, k.p, k.n)
    if qid >= queue_nums:  # also a topic not learnt (-1)
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
            if k.n > T.props_cap:
                p = <char *>realloc(T.props, k.n)
                if p == NULL:
                    R.nomem = True
                    return 0
                T.props = p
                T.props_cap = k.n
            plen = rmq_json_unescape(k.p, k.n, T.props)
            if plen < 0:
                return 0
            props = T.props
        else:
            props = k.p
            plen = <ptrdiff_t>k.n
        if (rmq_find(props, plen, b"DELAY\x01", 6) != NULL
                or rmq_find(props, plen, b"TIMER_DELIVER_MS\x01", 17) != NULL
                or rmq_find(props, plen, b"TIMER_DELAY_SEC\x01", 16) != NULL
                or rmq_find(props, plen, b"TRAN_MSG", 8) != NULL
                or rmq_find(props, plen, b"WAIT\x01false", 10) != NULL):
            return 0
    # room for the results before the put: a stored send is always answered
    k = f[F_TOPIC]
    if not (_tally(R, k.p, k.n)
            and (oneway or _grow(<void **>&R.out, &R.out_cap,
                                 R.out_len + 400 + 2 * <size_t>S.store_host_len, 1))):
        R.nomem = True
        return 0
    m.topic = <const uint8_t *>k.p
    m.topic_len = <int32_t>k.n
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
    if rmq_store_put(S.store, &m, &r) != 0:
        return 0  # nothing was written: the Python path raises the error
    R.handled += 1
    if h.code == 310:
        R.handled_v2 += 1
    t = &R.tallies[R.ntallies - 1]
    t.n += 1
    t.wrote += r.wrote_bytes
    t.body += blen
    if r.rolled:
        R.needs_allocate = True
    if r.phys_offset + r.wrote_bytes > R.end_offset:
        R.end_offset = r.phys_offset + r.wrote_bytes
    if R.want_touched:
        _touch(R, t, <int>qid, r.queue_offset + r.count)
    if oneway:
        return 1
    # the answer: RemotingCommand.response(SUCCESS, {msgId, queueId,
    # queueOffset, MSG_REGION, TRACE_ON}).encode() of send.py's _answer
    start = R.out + R.out_len
    o = start + 8
    o = SP_LIT(o, SP_A_HEAD)
    o += _put_offset_msg_id(o, S.store_host, S.store_host_len, r.phys_offset)
    o = SP_LIT(o, SP_A_QUEUE_ID)
    o = _put_dec(o, qid)
    o = SP_LIT(o, SP_A_QUEUE_OFFSET)
    o = _put_dec(o, r.queue_offset)
    o = SP_LIT(o, SP_A_OPAQUE)
    o = _put_dec(o, h.opaque)
    o = SP_LIT(o, SP_A_VERSION)
    o = _put_dec(o, h.version)
    o[0] = c'}'
    o += 1
    hl = <size_t>(o - start - 8)
    _put_u32(start, <uint32_t>(4 + hl))
    _put_u32(start + 4, <uint32_t>hl)
    R.out_len += <size_t>(o - start)
    return 1


cdef void _serve(sp_shared_t *S, sp_scratch_t *T, sp_out_t *R, const uint8_t *buf, Py_ssize_t n,
                 Py_ssize_t max_frame, const uint8_t *born_host, Py_ssize_t bhl) noexcept nogil:
    """Serve buf's leading frames while each can be (R.pos: the bytes they
    take); the first one that cannot, an incomplete one, or one that breaks
    the stream ends it (the Python path's split then reads on from there)."""
    cdef Py_ssize_t pos = 0, flen = 0, hlen = 0
    cdef unsigned int stype = 0
    cdef const uint8_t *q
    while True:
        q = buf + pos
        if (_frame_at(q, n - pos, max_frame, &flen, &stype, &hlen) != FRAME_WHOLE
                or stype != 0 or hlen == 0):
            break
        if not _take(S, T, R, <const char *>q + 8, <size_t>hlen, q + 8 + hlen, flen - 4 - hlen,
                     born_host, bhl):
            break
        pos += 4 + flen
    R.pos = pos


cdef class SendChunk:
    """What serving one chunk of a connection's frames left: how many sends
    were stored and answered here, their answers (one bytes, in order), and
    the per-chunk results the driver's bookkeeping needs."""
    cdef readonly int handled
    #: of which SEND_MESSAGE_V2 (310); the others are SEND_MESSAGE (10)
    cdef readonly int handled_v2
    cdef readonly bint needs_allocate
    #: the CommitLog offset after the last record stored
    cdef readonly long long end_offset
    #: [(topic, messages, stored bytes, body bytes)] in the order met
    cdef readonly list stats
    #: [(topic, queue id, queue's max offset)] of the queues appended to
    cdef readonly list touched
    #: the answers of the sends taken (none for oneway ones)
    cdef readonly bytes answers
    #: the frames after those taken, for the Python path (split's frames)
    cdef readonly list frames
    #: bytes of the chunk consumed (taken frames and frames)
    cdef readonly Py_ssize_t used
    #: frames were left after `frames`, from a send this path may take:
    #: split again once those are served (SendPath.split)
    cdef readonly bint split_again
    #: the stream broke after frames were taken here (SendPath.split)
    cdef readonly str error
    #: a chunk served on a C send thread: the token it was submitted with
    cdef readonly object token


cdef SendChunk _chunk_of(sp_out_t *R):
    cdef SendChunk c = SendChunk.__new__(SendChunk)
    cdef dict names = {}
    cdef int i
    cdef sp_tally_t *t
    cdef sp_touch_t *tt
    c.handled = R.handled
    c.handled_v2 = R.handled_v2
    c.needs_allocate = R.needs_allocate
    c.end_offset = R.end_offset
    c.answers = PyBytes_FromStringAndSize(R.out, <Py_ssize_t>R.out_len) if R.out_len else b""
    c.stats = []
    c.touched = []
    for i in range(R.ntallies):
        t = &R.tallies[i]
        if t.n:
            # a learnt topic's name (UTF-8 of a str): "replace" never raises
            # here, after the puts, where a raise would lose their answers
            name = PyUnicode_DecodeUTF8(R.names + t.name_off, t.name_len, "replace")
            names[t.name_off] = name
            c.stats.append((name, t.n, t.wrote, t.body))
    for i in range(R.ntouched):
        tt = &R.touched[i]
        c.touched.append((names[tt.name_off], tt.qid, tt.end))
    return c


cdef class SendLanes  # _sendlanes.pyx


cdef class SendPath:
    """The common send's C path over one store (see the module comment).

    It serves chunks inline (split) and, once start_lanes(n) has started
    C send threads, on those threads (submit / collect, _sendlanes.pyx).
    The topics it serves are those the Python path has served a plain send
    to, with their queue count (learn / forget_all); a topic not among them
    goes to the Python path."""
    cdef MessageStoreCore core
    cdef sp_shared_t S
    cdef sp_scratch_t inline_scratch
    cdef sp_out_t inline_out
    cdef SendLanes lanes
    #: tell touched queues (a long-polling listener is registered)
    cdef public bint want_touched

    def __cinit__(self, MessageStoreCore core, long long max_message_size, bint oneway_ok=True):
        """oneway_ok: oneway sends are taken here too (False in SYNC_FLUSH,
        where the Python path holds a oneway sender's reading)."""
        cdef Py_ssize_t hl = len(core.store_host)
        if hl > 20:
            raise ValueError("store_host is longer than 20 bytes")
        self.core = core
        self.S.store = core._s
        memcpy(self.S.store_host, PyBytes_AS_STRING(core.store_host), hl)
        self.S.store_host_len = hl
        self.S.max_message_size = max_message_size
        self.S.oneway_ok = oneway_ok
        pthread_mutex_init(&self.S.topics.lock, NULL)

    def __dealloc__(self):
        if self.lanes is not None:
            self.lanes.close()
        free(self.S.topics.slots)
        pthread_mutex_destroy(&self.S.topics.lock)
        free(self.inline_scratch.props)
        _out_free(&self.inline_out)

    def learn(self, str topic, int queue_nums) -> None:
        """topic passed the Python path's checks for a plain send."""
        cdef bytes b = topic.encode()
        if 0 < len(b) <= 127 and not _topic_learn(&self.S.topics, b, len(b), queue_nums):
            raise MemoryError()

    def forget_all(self) -> None:
        """The topic table changed: every topic is checked again."""
        _topic_forget_all(&self.S.topics)

    def split(self, buf, Py_ssize_t max_frame, bytes born_host):
        """split_frames(buf, max_frame), taking here each leading frame the
        C path can serve: a SendChunk whose frames are the others and used
        the bytes consumed. The requests of a connection are served in
        order: the frames handed back end before the next send this path
        may take, and split_again says such a send was left for the next
        split, once they are served (a pull and a send in one write: the
        pull is held before the send comes). A frame that breaks the
        stream raises ValueError as split_frames does, unless frames were
        taken here before it: they are stored, so split returns and names
        the fault in error (the caller answers them, then closes)."""
        cdef const unsigned char[::1] mv = buf
        cdef Py_ssize_t n = mv.shape[0]
        cdef sp_out_t *R = &self.inline_out
        cdef bint stopped = False
        _out_reset(R, self.want_touched)
        if self.core._s != self.S.store:
            self.S.store = NULL  # the core was closed: nothing is taken here
        if n:
            _serve(&self.S, &self.inline_scratch, R, &mv[0], n, max_frame,
                   <const uint8_t *>PyBytes_AS_STRING(born_host), PyBytes_GET_SIZE(born_host))
        c = _chunk_of(R)
        if R.nomem and not R.handled:
            raise MemoryError()
        c.frames, c.used, bad = _split_from(&mv[0] if n else NULL, n, R.pos, max_frame,
                                            &stopped)
        c.split_again = stopped
        if bad is not None and not R.handled:
            raise ValueError(bad)
        # frames taken here are stored: their answers go out before the
        # connection is closed for the bad frame
        c.error = bad
        return c

    # -- the C send threads (_sendlanes.pyx) ---------------------------------

    def start_lanes(self, int threads) -> None:
        """Start `threads` C send threads (1..64) serving submitted chunks."""
        if self.lanes is not None:
            raise ValueError("the C send threads are already started")
        if not 1 <= threads <= 64:
            raise ValueError(f"threads must be 1..64, got {threads}")
        lanes = SendLanes()
        lanes.open(self, threads)
        self.lanes = lanes

    @property
    def lanes_fd(self) -> int:
        """The eventfd readable while served chunks wait for collect()."""
        return rmq_lanes_fd(self.lanes.pool) if self.lanes is not None and self.lanes.mine() else -1

    @property
    def lanes_pending(self) -> int:
        """Chunks submitted and not yet collected."""
        return rmq_lanes_pending(self.lanes.pool) if self.lanes is not None and self.lanes.mine() else 0

    def submit(self, bytes data, Py_ssize_t max_frame, bytes born_host, token) -> bool:
        """Hand the chunk data (whole frames) to a C send thread: True, or
        False without threads or an open store (split it inline). data is
        kept, unchanged, until collect() gives back its SendChunk, which
        carries token."""
        cdef sp_job_t *j
        if self.lanes is None or not self.lanes.mine() or self.core._s != self.S.store:
            return False
        j = <sp_job_t *>calloc(1, sizeof(sp_job_t))
        if j == NULL:
            raise MemoryError()
        keep = (data, born_host, token)
        Py_INCREF(keep)  # the job's reference, dropped when it comes back
        j.keep = <PyObject *>keep
        j.buf = <const uint8_t *>PyBytes_AS_STRING(data)
        j.n = PyBytes_GET_SIZE(data)
        j.max_frame = max_frame
        j.born_host = <const uint8_t *>PyBytes_AS_STRING(born_host)
        j.bhl = PyBytes_GET_SIZE(born_host)
        _out_reset(&j.out, self.want_touched)
        rmq_lanes_submit(self.lanes.pool, &j.base)
        return True

    def collect(self) -> list:
        """The SendChunks of the chunks served since the last call, in the
        order they finished."""
        if self.lanes is None or not self.lanes.mine():
            return []
        rmq_lanes_drain_fd(self.lanes.pool)
        return self.lanes.take(rmq_lanes_done(self.lanes.pool))

    def close_lanes(self) -> list:
        """Stop the C send threads, each after the chunk it serves: the
        SendChunks not yet collected (those never served took nothing)."""
        if self.lanes is None:
            return []
        lanes, self.lanes = self.lanes, None
        return lanes.close()
