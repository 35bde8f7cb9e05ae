# The remoting hot path: splitting frames and the JSON header codec
# (csrc/remoting_header.c). The frame layout is specified in the docstring
# of pyrmq/remoting/command.py, which is the only caller of the codec; the
# producer's send request header is laid out here too (send_request_fields).
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef class _Scratch:
    cdef char *buf
    cdef size_t cap

    cdef char *get(self, size_t n) except NULL:
        cdef char *p
        if n > self.cap:
            p = <char *>malloc(n if n > 4096 else 4096)
            if p == NULL:
                raise MemoryError()
            free(self.buf)
            self.buf = p
            self.cap = n if n > 4096 else 4096
        return self.buf

    def __dealloc__(self):
        free(self.buf)

cdef _Scratch _scratch = _Scratch()


cdef str _span_text(rmq_json_span_t *s):
    cdef ptrdiff_t n
    cdef char *out
    if s.kind == b's':
        if not s.escaped:
            return s.p[:s.n].decode("utf-8")
        out = _scratch.get(s.n + 1)
        n = rmq_json_unescape(s.p, s.n, out)
        if n < 0:
            raise ValueError("bad escape in a string")
        return out[:n].decode("utf-8")
    if s.kind == b'z':
        return ""
    return s.p[:s.n].decode("utf-8")


cdef tuple _parse_header(const char *p, size_t n):
    cdef rmq_json_header_t h
    cdef size_t i
    if rmq_json_header_parse(p, n, &h) != 0:
        raise ValueError(f"{h.error.decode()} at byte {h.error_at}")
    ext = {}
    for i in range(h.nfields):
        ext[_span_text(&h.keys[i])] = _span_text(&h.values[i])
    language = _span_text(&h.language) if h.language.kind == b's' else None
    remark = _span_text(&h.remark) if h.remark.kind == b's' else None
    return (h.code, language, h.version, h.opaque, h.flag, remark, ext)


def decode_json_header(data) -> tuple:
    """(code, language, version, opaque, flag, remark, extFields) of a JSON
    RemotingCommand header. extFields values are all str (non-string JSON
    values as their text). Raises ValueError naming the byte at fault."""
    cdef const unsigned char[::1] mv = data
    if mv.shape[0] == 0:
        raise ValueError("empty header")
    return _parse_header(<const char *>&mv[0], <size_t>mv.shape[0])


# What _frame_at finds at a position of a stream of frames.
cdef enum:
    FRAME_WHOLE = 0         # a whole frame with sound lengths
    FRAME_SHORT             # not all of it has arrived yet
    FRAME_BAD_LENGTH        # its length is outside 4..max_frame
    FRAME_BAD_HEADER_LENGTH  # its header length runs past the frame


cdef inline int _frame_at(const unsigned char *q, Py_ssize_t avail, Py_ssize_t max_frame,
                          Py_ssize_t *flen, unsigned int *stype,
                          Py_ssize_t *hlen) noexcept nogil:
    """The frame at q, of which avail bytes are there: its total length
    field (flen), serialize type and header length, and what it is."""
    if avail < 4:
        return FRAME_SHORT
    flen[0] = (<Py_ssize_t>q[0] << 24) | (<Py_ssize_t>q[1] << 16) | (<Py_ssize_t>q[2] << 8) | q[3]
    if flen[0] < 4 or flen[0] > max_frame:
        return FRAME_BAD_LENGTH
    if avail - 4 < flen[0]:
        return FRAME_SHORT
    stype[0] = q[4]
    hlen[0] = (<Py_ssize_t>q[5] << 16) | (<Py_ssize_t>q[6] << 8) | q[7]
    if hlen[0] > flen[0] - 4:
        return FRAME_BAD_HEADER_LENGTH
    return FRAME_WHOLE


cdef inline bint _json_plain_send(unsigned int stype, object header):
    """A JSON-headed SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310) request: a
    frame the C send path may take (_sendpath.pyx serves no other)."""
    return stype == 0 and (header[0] == 10 or header[0] == 310) and not header[4] & 1


cdef tuple _split_from(const unsigned char *buf, Py_ssize_t n, Py_ssize_t pos,
                       Py_ssize_t max_frame, bint *stopped=NULL):
    """The frames of buf[pos:n] as split_frames gives them: (frames, bytes
    consumed up to, the fault that broke the stream there or None). With
    stopped, the walk stops before a plain send (_json_plain_send) that
    follows frames that do not begin with one, and sets stopped[0]: the
    caller serves those frames, then splits again from the send, which
    the C send path may then take (SendPath.split)."""
    cdef Py_ssize_t flen = 0, hlen = 0
    cdef unsigned int stype = 0
    cdef int what
    cdef const unsigned char *q
    cdef bint lead_send = False
    frames = []
    while True:
        q = buf + pos
        what = _frame_at(q, n - pos, max_frame, &flen, &stype, &hlen)
        if what == FRAME_SHORT:
            return frames, pos, None
        if what == FRAME_BAD_LENGTH:
            return frames, pos, f"frame length {flen} outside 4..{max_frame}"
        if what == FRAME_BAD_HEADER_LENGTH:
            return frames, pos, f"header length {hlen} runs past the frame ({flen - 4} bytes)"
        if stype == 0:
            if hlen == 0:
                return frames, pos, "empty header"
            try:
                header = _parse_header(<const char *>q + 8, <size_t>hlen)
            except ValueError as e:
                return frames, pos, str(e)
        else:
            header = PyBytes_FromStringAndSize(<const char *>q + 8, hlen)
        if stopped != NULL:
            # a leading send the C path did not take, it would not take again
            if not frames:
                lead_send = _json_plain_send(stype, header)
            elif not lead_send and _json_plain_send(stype, header):
                stopped[0] = True
                return frames, pos, None
        body = PyBytes_FromStringAndSize(<const char *>q + 8 + hlen, flen - 4 - hlen)
        frames.append((stype, header, body))
        pos += 4 + flen


def split_frames(buf, Py_ssize_t max_frame):
    """Split back-to-back frames at the start of buf. Returns (frames,
    consumed): each frame is (serialize_type, header, body), header being the
    parsed JSON tuple of decode_json_header for type 0 and the raw bytes
    otherwise. Raises ValueError on a bad length or header (the stream is
    then unusable)."""
    cdef const unsigned char[::1] mv = buf
    cdef Py_ssize_t n = mv.shape[0]
    frames, pos, bad = _split_from(&mv[0] if n else NULL, n, 0, max_frame)
    if bad is not None:
        raise ValueError(bad)
    return frames, pos


def whole_frames_end(buf, Py_ssize_t max_frame) -> int:
    """The bytes of buf's leading whole frames whose lengths are sound:
    what may be handed to a C send thread as it is."""
    cdef const unsigned char[::1] mv = buf
    cdef Py_ssize_t n = mv.shape[0], pos = 0, flen = 0, hlen = 0
    cdef unsigned int stype = 0
    while n and _frame_at(&mv[pos], n - pos, max_frame, &flen, &stype, &hlen) == FRAME_WHOLE:
        pos += 4 + flen
        if pos == n:
            break
    return pos


cdef inline char *_put(char *o, const char *s, size_t n):
    memcpy(o, s, n)
    return o + n


cdef inline char *_put_str(char *o, str s) except NULL:
    cdef Py_ssize_t n
    cdef const char *u = PyUnicode_AsUTF8AndSize(s, &n)
    o[0] = b'"'
    o += 1
    if rmq_json_plain(u, <size_t>n):
        o = _put(o, u, <size_t>n)
    else:
        o += rmq_json_escape(u, <size_t>n, o)
    o[0] = b'"'
    return o + 1


cdef inline char *_put_ll(char *o, long long v):
    cdef char tmp[24]
    cdef int i = 24
    cdef unsigned long long u = <unsigned long long>v
    if v < 0:
        u = <unsigned long long>0 - u
    while True:
        i -= 1
        tmp[i] = <char>(48 + <int>(u % 10))
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        tmp[i] = b'-'
    return _put(o, &tmp[i], <size_t>(24 - i))


cdef inline Py_ssize_t _utf8_len(str s) except -1:
    cdef Py_ssize_t n
    PyUnicode_AsUTF8AndSize(s, &n)
    return n


cdef dict _stringly(dict ext):
    """ext with every key and value a str (str() of what is not)."""
    return {k if type(k) is str else str(k): v if type(v) is str else str(v)
            for k, v in ext.items()}


#: what every header has besides its strings: 108 bytes of fixed text,
#: code/flag/opaque/version as up to 20 characters each, the language's
#: quotes and a null remark (194), rounded up
cdef Py_ssize_t _HEADER_FIXED = 256


cdef Py_ssize_t _header_bound(str language, remark, dict ext) except -1:
    """An upper bound of the header's size; every key is a str and every
    value a str or an exact int (see _stringly). Each character of a string
    may take 6 bytes escaped (\\u00XX)."""
    cdef Py_ssize_t size = _HEADER_FIXED + 6 * _utf8_len(language)
    for k, v in ext.items():
        size += 6 * _utf8_len(k) + 4
        size += 6 * _utf8_len(v) + 4 if type(v) is str else 24
    if remark is not None:
        size += 6 * _utf8_len(remark) + 4
    return size


cdef char *_write_header(char *o, long long code, str language, long long version,
                         long long opaque, long long flag, remark, dict ext) except NULL:
    cdef bint first = True
    o = _put(o, b'{"code":', 8)
    o = _put_ll(o, code)
    o = _put(o, b',"extFields":{', 14)
    for k, v in ext.items():
        if not first:
            o[0] = b','
            o += 1
        first = False
        o = _put_str(o, k)
        o[0] = b':'
        o += 1
        if type(v) is str:
            o = _put_str(o, v)
        else:
            o[0] = b'"'
            o = _put_ll(o + 1, v)
            o[0] = b'"'
            o += 1
    o = _put(o, b'},"flag":', 9)
    o = _put_ll(o, flag)
    o = _put(o, b',"language":', 12)
    o = _put_str(o, language)
    o = _put(o, b',"opaque":', 10)
    o = _put_ll(o, opaque)
    o = _put(o, b',"remark":', 10)
    if remark is None:
        o = _put(o, b'null', 4)
    else:
        o = _put_str(o, remark)
    o = _put(o, b',"serializeTypeCurrentRPC":"JSON","version":', 44)
    o = _put_ll(o, version)
    o[0] = b'}'
    return o + 1


cdef inline bint _plain_ext(dict ext):
    for k, v in ext.items():
        if type(k) is not str or (type(v) is not str and type(v) is not int):
            return False
    return True


cdef Py_ssize_t _header_into_scratch(long long code, str language, long long version,
                                     long long opaque, long long flag, remark,
                                     dict ext) except -1:
    """Write the JSON header into _scratch; its length. Values that are not
    a str are written as str() writes them: an exact int by _put_ll, the
    rest (bools, floats, enums, ints past 64 bits) through str()."""
    cdef char *buf
    cdef Py_ssize_t bound, n
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    if not _plain_ext(ext):
        ext = _stringly(ext)
    bound = _header_bound(language, remark, ext)
    buf = _scratch.get(<size_t>bound)
    try:
        n = _write_header(buf, code, language, version, opaque, flag, remark, ext) - buf
    except OverflowError:
        ext = _stringly(ext)
        bound = _header_bound(language, remark, ext)
        buf = _scratch.get(<size_t>bound)
        n = _write_header(buf, code, language, version, opaque, flag, remark, ext) - buf
    if n > bound:
        # the scratch buffer's 4 KiB floor hides a short bound from ASan:
        # tests meet it here instead
        raise SystemError(f"JSON header of {n} bytes past its bound of {bound}")
    return n


def encode_json_header(long long code, str language, long long version, long long opaque,
                       long long flag, remark, dict ext) -> bytes:
    """The JSON header of a RemotingCommand: integer code/flag/opaque/version,
    every extFields value as a JSON string (str() of non-str values), remark
    a string or null."""
    cdef Py_ssize_t hlen = _header_into_scratch(code, language, version, opaque, flag,
                                                remark, ext)
    return PyBytes_FromStringAndSize(_scratch.buf, hlen)


def encode_json_frame(long long code, str language, long long version, long long opaque,
                      long long flag, remark, dict ext, body) -> bytes:
    """A whole frame with a JSON header (the layout in
    pyrmq/remoting/command.py): the length fields, encode_json_header's
    header, then body, in one bytes."""
    cdef Py_ssize_t hlen, blen
    cdef bytes frame
    cdef char *f
    if type(body) is not bytes:
        body = bytes(body)
    hlen = _header_into_scratch(code, language, version, opaque, flag, remark, ext)
    blen = len(<bytes>body)
    frame = PyBytes_FromStringAndSize(NULL, 8 + hlen + blen)
    f = PyBytes_AS_STRING(frame)
    _put_be32(<unsigned char *>f, <uint32_t>(4 + hlen + blen))
    _put_be32(<unsigned char *>f + 4, <uint32_t>hlen)
    memcpy(f + 8, _scratch.buf, <size_t>hlen)
    if blen:
        memcpy(f + 8 + hlen, PyBytes_AS_STRING(<bytes>body), <size_t>blen)
    return frame


def send_request_fields(str producer_group, str topic, str default_topic,
                        long long default_topic_queue_nums, long long queue_id,
                        long long sys_flag, long long born_timestamp, long long flag,
                        str properties, bint batch, str broker_name) -> dict:
    """The extFields of a producer's SEND_MESSAGE_V2 (one message) or
    SEND_BATCH_MESSAGE (a batch body): SendMessageRequestHeaderV2's one-letter
    keys, in the order the Java client writes them. What each letter names
    is V2_FIELDS in pyrmq/broker/processor/send.py, which reads them:
    a producerGroup, b topic, c defaultTopic, d defaultTopicQueueNums,
    e queueId, f sysFlag, g bornTimestamp, h flag, i properties (the
    encoded string), j reconsumeTimes ("0": a producer's first send),
    k unitMode ("false"), m batch, n brokerName. Every value is a str, as
    an RPC hook signing the request reads them. One dict built in C: the
    producer's awaited single send builds it once a message."""
    return {
        "a": producer_group,
        "b": topic,
        "c": default_topic,
        "d": f"{default_topic_queue_nums}",
        "e": f"{queue_id}",
        "f": f"{sys_flag}",
        "g": f"{born_timestamp}",
        "h": f"{flag}",
        "i": properties,
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
        "n": broker_name,
    }
