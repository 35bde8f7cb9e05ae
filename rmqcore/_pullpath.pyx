# The common pull's answer in one call: a PULL_MESSAGE that finds messages
# (JSON header, no property filter, a body copied rather than sent by
# sendfile) is answered with one frame built here from the request's
# opaque and version, the store's get result and the records themselves.
# The header is written by the one JSON header codec (_remoting.pyx), so
# the frame is byte for byte the RemotingCommand.response(...).encode() of
# pyrmq/broker/processor/pull.py's Python path; a test pins the two
# (tests/integration/test_pull_fast.py).

cdef long long _FLAG_RESPONSE = 1


def pull_answer(MessageStoreCore core, topic, int queue_id, long long offset, int max_msgs,
                long long max_bytes, tags_codes, long long max_phys, long long opaque,
                long long version, long long body_max, long long slow_below=-1):
    """get_message, and when it is FOUND with at most body_max bytes of
    records, the whole SUCCESS answer of a PULL_MESSAGE request with this
    opaque and version: its extFields nextBeginOffset, minOffset, maxOffset
    and suggestWhichBrokerId (1 when the first record lies below
    slow_below: the consumer reads further behind than the master keeps in
    memory), its body the records. Returns (frame or None, GetResult)."""
    cdef GetResult r = core.get_message(topic, queue_id, offset, max_msgs, max_bytes,
                                        tags_codes, max_phys)
    cdef Py_ssize_t hlen, pos
    cdef long long phys, size
    cdef bytes frame
    cdef char *f
    cdef rmq_mapped_file_t *mf
    cdef const uint8_t *p
    cdef int64_t avail
    if r.status != "FOUND" or r.total_bytes > body_max or not r.ranges:
        return None, r
    first = r.ranges[0]
    ext = {
        "nextBeginOffset": r.next_begin_offset,
        "minOffset": r.min_offset,
        "maxOffset": r.max_offset,
        "suggestWhichBrokerId": 1 if <long long>first[0] < slow_below else 0,
    }
    hlen = _header_into_scratch(0, "JAVA", version, opaque, _FLAG_RESPONSE, None, ext)
    frame = PyBytes_FromStringAndSize(NULL, 8 + hlen + r.total_bytes)
    f = PyBytes_AS_STRING(frame)
    _put_be32(<unsigned char *>f, <uint32_t>(4 + hlen + r.total_bytes))
    _put_be32(<unsigned char *>f + 4, <uint32_t>hlen)
    memcpy(f + 8, _scratch.buf, <size_t>hlen)
    pos = 8 + hlen
    for phys, size in r.ranges:
        _raise_for(rmq_commit_log_read_pinned(&core._s.cl, phys, &mf, &p, &avail),
                   f"read at {phys}")
        if size > avail:
            rmq_mapped_file_unpin(mf)
            raise ValueError(f"{size} bytes at {phys} run past the written data")
        memcpy(f + pos, p, <size_t>size)
        rmq_mapped_file_unpin(mf)
        pos += size
    if pos != 8 + hlen + r.total_bytes:
        raise SystemError(f"pull answer of {pos} bytes, {8 + hlen + r.total_bytes} expected")
    return frame, r
