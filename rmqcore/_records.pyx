# Record, batch and property codecs: thin wrappers over csrc/commit_log.c.
from libc.string cimport memchr, memcpy, memset
from libc.stdint cimport uint32_t
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_AsUTF8AndSize


cdef inline bytes _as_bytes(object s):
    if isinstance(s, bytes):
        return <bytes>s
    if isinstance(s, str):
        return (<str>s).encode()
    return bytes(s)


def java_hash(s) -> int:
    """Java String.hashCode() of s (str, or UTF-8 bytes) as a signed int32."""
    cdef bytes b = _as_bytes(s)
    return rmq_java_string_hash(<const uint8_t *>b, len(b))


def tag_code(tag) -> int:
    """The ConsumeQueue tag code of a TAGS value (0 for none)."""
    if not tag:
        return 0
    return java_hash(tag)


def body_crc(body) -> int:
    """BODYCRC as stored: crc32(body) & 0x7FFFFFFF."""
    cdef const unsigned char[::1] mv = body
    cdef size_t n = mv.shape[0]
    if n == 0:
        return rmq_body_crc(NULL, 0)
    return rmq_body_crc(&mv[0], n)


def encode_properties(props) -> bytes:
    """Encode a mapping as the properties string: name 0x01 value 0x02 ..."""
    if not props:
        return b""
    return _encode_props(props, -1)


cdef inline bytes _prop_text(object x):
    if isinstance(x, str):
        return (<str>x).encode()
    return str(x).encode()


cdef inline bint _has_separator(const char *p, Py_ssize_t n):
    return n > 0 and (memchr(p, 1, <size_t>n) != NULL or memchr(p, 2, <size_t>n) != NULL)


cdef _separator_error(object k, Py_ssize_t batch_index):
    where = f"message {batch_index} of the batch: " if batch_index >= 0 else ""
    return ValueError(
        f"{where}property {str(k)!r} contains a reserved separator byte (0x01 or 0x02)")


cdef bytes _encode_props(object props, Py_ssize_t batch_index):
    # the properties string of a mapping (section 3); a name or value holding
    # a separator byte is refused, naming the batch message when index >= 0.
    # A dict of str (every Message's) is measured, then written into one
    # bytes: no bytes per name and value, no concatenations (a third of the
    # batch encoder's instructions a message went there)
    cdef Py_ssize_t total = 0, pos = 0, kn, vn
    cdef const char *kp
    cdef const char *vp
    cdef char *o
    if type(props) is not dict:
        return _encode_props_general(props, batch_index)
    for k, v in (<dict>props).items():
        if type(k) is not str or type(v) is not str:
            return _encode_props_general(props, batch_index)
        kp = PyUnicode_AsUTF8AndSize(k, &kn)
        vp = PyUnicode_AsUTF8AndSize(v, &vn)
        if _has_separator(kp, kn) or _has_separator(vp, vn):
            raise _separator_error(k, batch_index)
        total += kn + vn + 2
    out = PyBytes_FromStringAndSize(NULL, total)
    o = PyBytes_AS_STRING(out)
    # the same items in the same order: nothing between the loops runs
    # Python code, and the UTF-8 of every name and value is cached now
    for k, v in (<dict>props).items():
        kp = PyUnicode_AsUTF8AndSize(k, &kn)
        vp = PyUnicode_AsUTF8AndSize(v, &vn)
        memcpy(o + pos, kp, kn)
        o[pos + kn] = 1
        pos += kn + 1
        memcpy(o + pos, vp, vn)
        o[pos + vn] = 2
        pos += vn + 1
    return out


cdef bytes _encode_props_general(object props, Py_ssize_t batch_index):
    # any mapping, names and values made text by str()
    cdef list parts = []
    cdef bytes kb, vb
    for k, v in props.items():
        kb = _prop_text(k)
        vb = _prop_text(v)
        if _has_separator(kb, len(kb)) or _has_separator(vb, len(vb)):
            raise _separator_error(k, batch_index)
        parts.append(kb + b"\x01" + vb + b"\x02")
    return b"".join(parts)


def decode_properties(data) -> dict:
    """Decode a properties string leniently, as Java does: items that do
    not split into exactly two parts on 0x01 are dropped; a repeated name
    keeps its last value (the C core reads properties the same way)."""
    cdef bytes b = _as_bytes(data)
    out = {}
    for item in b.decode("utf-8", "replace").split("\x02"):
        kv = item.split("\x01")
        if len(kv) == 2:
            out[kv[0]] = kv[1]
    return out


def encode_batch(messages) -> bytes:
    """Encode (body, properties, flag) triples as a batch body (rmq_format.h
    section 4). properties: bytes, or a mapping (encoded here)."""
    cdef list bodies = [], props = [], flags = []
    cdef Py_ssize_t total = 0
    for body, p, flag in messages:
        pb = p if isinstance(p, bytes) else (bytes(p) if isinstance(p, bytearray) else encode_properties(p))
        bb = body if isinstance(body, bytes) else bytes(body)
        if len(pb) > RMQ_MAX_PROPERTIES_LENGTH:
            raise ValueError(f"properties are {len(pb)} bytes; the limit is {RMQ_MAX_PROPERTIES_LENGTH}")
        bodies.append(bb)
        props.append(pb)
        flags.append(flag)
        total += RMQ_BATCH_ENTRY_FIXED + len(bb) + len(pb)
    return _write_batch(bodies, props, flags, total)


cdef bytes _write_batch(list bodies, list props, list flags, Py_ssize_t total):
    # entries back to back: TOTALSIZE, 8 zero bytes (MAGICCODE and BODYCRC,
    # filled by the broker), FLAG, BODYLEN, BODY, PROPSLEN, PROPS
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char *o = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t i, pos = 0, blen, plen
    cdef bytes bb, pb
    for i in range(len(bodies)):
        bb = <bytes>bodies[i]
        pb = <bytes>props[i]
        blen = len(bb)
        plen = len(pb)
        _put_be32(o + pos, <uint32_t>(RMQ_BATCH_ENTRY_FIXED + blen + plen))
        memset(o + pos + 4, 0, 8)
        _put_be32(o + pos + 12, <uint32_t>(<int64_t>flags[i] & 0xFFFFFFFF))
        _put_be32(o + pos + 16, <uint32_t>blen)
        if blen:
            memcpy(o + pos + 20, <const char *>bb, blen)
        pos += 20 + blen
        o[pos] = (plen >> 8) & 0xFF
        o[pos + 1] = plen & 0xFF
        if plen:
            memcpy(o + pos + 2, <const char *>pb, plen)
        pos += 2 + plen
    return out


cdef inline void _put_be32(unsigned char *p, uint32_t v):
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


def encode_message_batch(list msgs, str topic, str id_head, uint32_t seq,
                         Py_ssize_t max_size, object message_cls):
    """The batch body (rmq_format.h section 4) and comma-joined unique ids
    of Messages (objects with topic, body, properties, flag) of one topic,
    in one pass in C, for Producer.send_batch / send_async of a list.

    A message whose properties have no UNIQ_KEY gets id_head followed by
    four hex digits of seq, seq+1, ... (wrapping at 16 bits, as the
    single-message generator's counter does), set in its properties as
    Java's client sets it. Raises TypeError for an item that is not a
    message_cls, ValueError naming the message for: another topic, an empty
    body, a body or batch over max_size bytes, a DELAY property, a property
    with a separator byte, properties over MAX_PROPERTIES_LENGTH."""
    cdef Py_ssize_t n = len(msgs), i, total = 0, pos = 0, blen, plen
    cdef list bodies = [None] * n, props = [None] * n, ids = [None] * n
    cdef list flags = [0] * n
    cdef dict pd
    cdef bytes bb, pb, head = id_head.encode("ascii")
    cdef char idbuf[64]
    cdef Py_ssize_t hl = len(head)
    cdef uint32_t s
    cdef const char *hexd = b"0123456789ABCDEF"
    if hl > 60:
        raise ValueError("id_head is too long")
    memcpy(idbuf, <const char *>head, hl)
    for i in range(n):
        m = msgs[i]
        if not isinstance(m, message_cls):
            raise TypeError(f"expected a pyrmq.Message, got {type(m).__name__} (message {i} of the batch)")
        if m.topic != topic:
            raise ValueError(
                f"every message of a batch must have one topic: {topic!r} and {m.topic!r} "
                f"(message {i})")
        body = m.body
        bb = body if isinstance(body, bytes) else bytes(body)
        blen = len(bb)
        if blen == 0:
            raise ValueError(f"message {i} of the batch: the message body is empty")
        if blen > max_size:
            raise ValueError(
                f"message {i} of the batch: the message body is {blen} bytes; "
                f"max_message_size is {max_size}")
        pd = m.properties
        if "DELAY" in pd:
            raise ValueError("a batch cannot carry delayed messages (delay_level)")
        uniq = pd.get("UNIQ_KEY")
        if not uniq:
            s = (seq + <uint32_t>i) & 0xFFFF
            idbuf[hl] = hexd[(s >> 12) & 0xF]
            idbuf[hl + 1] = hexd[(s >> 8) & 0xF]
            idbuf[hl + 2] = hexd[(s >> 4) & 0xF]
            idbuf[hl + 3] = hexd[s & 0xF]
            uniq = idbuf[:hl + 4].decode("ascii")
            pd["UNIQ_KEY"] = uniq
        ids[i] = uniq
        pb = _encode_props(pd, i)
        plen = len(pb)
        if plen > RMQ_MAX_PROPERTIES_LENGTH:
            raise ValueError(
                f"message {i} of the batch: properties are {plen} bytes; the limit is "
                f"{RMQ_MAX_PROPERTIES_LENGTH}")
        bodies[i] = bb
        props[i] = pb
        flags[i] = m.flag
        total += RMQ_BATCH_ENTRY_FIXED + blen + plen
    if n == 0:
        raise ValueError("the batch is empty")
    if total > max_size:
        raise ValueError(
            f"the batch is {total} bytes; max_message_size is {max_size}: "
            "split it into smaller batches")
    return _write_batch(bodies, props, flags, total), ",".join(ids)


cdef dict _view_to_dict(rmq_record_view_t *v):
    return {
        "store_size": v.total_size,
        "magic_code": v.magic,
        "body_crc": v.body_crc,
        "queue_id": v.queue_id,
        "flag": v.flag,
        "queue_offset": v.queue_offset,
        "commit_log_offset": v.phys_offset,
        "sys_flag": v.sysflag,
        "born_timestamp": v.born_timestamp,
        "born_host": (<const char *>v.born_host)[:v.born_host_len],
        "store_timestamp": v.store_timestamp,
        "store_host": (<const char *>v.store_host)[:v.store_host_len],
        "reconsume_times": v.reconsume_times,
        "prepared_transaction_offset": v.prepared_tx_offset,
        "body": (<const char *>v.body)[:v.body_len],
        "topic": (<const char *>v.topic)[:v.topic_len].decode("utf-8", "replace"),
        "properties": (<const char *>v.props)[:v.props_len],
    }


def decode_records(data, bint check_crc=True, list corrupt=None) -> list:
    """Decode back-to-back records (a pull body, or a CommitLog range) into
    dicts with every stored field. Raises CorruptStoreError on a malformed
    record or a CRC mismatch; stops at a blank or never-written record.
    With a `corrupt` list, a record whose body fails its CRC is left out and
    appended there as (position, record dict) instead of raising."""
    return [rec for _, rec in iter_records(data, 0, check_crc, corrupt)]


def iter_cq_units(data, long long first_index=0):
    """Yield (queue offset, commit-log offset, size, tags code) for every
    written ConsumeQueue unit in data (a segment's bytes; its first unit has
    queue offset first_index). Units never written (all zero) are skipped."""
    cdef const unsigned char[::1] mv = data
    cdef Py_ssize_t n = mv.shape[0], pos = 0
    cdef rmq_cq_unit_t u
    while pos + RMQ_CQ_STORE_UNIT_SIZE <= n:
        rmq_cq_unit_decode(&mv[pos], &u)
        if u.size != 0 or u.phys_offset != 0:
            yield first_index + pos // RMQ_CQ_STORE_UNIT_SIZE, u.phys_offset, u.size, u.tags_code
        pos += RMQ_CQ_STORE_UNIT_SIZE


def record_with_topic(record, topic, int queue_id, extra_properties=b"") -> bytes:
    """A copy of one stored record (as VIEW_MESSAGE_BY_ID returns it) under
    another topic and queue id: TOTALSIZE, QUEUEID and the topic field
    rewritten, every other byte as stored. A transaction check-back shows
    the producer its half message under the real topic this way (Java's
    MessageDecoder.encode of the message with topic and queue set back).

    extra_properties (an encoded properties string, encode_properties)
    is appended to the record's PROPERTIES (a name given again there wins,
    as readers keep a repeated name's last value): a POP answer adds
    POP_CK so. The copy keeps the record's magic (a MAGIC_CODE_V2 record's
    TOPICLENGTH stays 2 bytes). ValueError when the properties outgrow
    their int16 length field."""
    cdef const unsigned char[::1] mv = record
    cdef rmq_record_view_t v
    cdef bytes t = _as_bytes(topic)
    cdef bytes extra = _as_bytes(extra_properties)
    if mv.shape[0] == 0:
        raise CorruptStoreError("record_with_topic: empty record", RMQ_ECORRUPT)
    _raise_for(rmq_record_decode(&mv[0], mv.shape[0], &v), "record_with_topic")
    _raise_for(rmq_validate_topic(<const uint8_t *>t, len(t)), f"topic {topic!r}")
    cdef Py_ssize_t tlen_size = 2 if v.magic == RMQ_MESSAGE_MAGIC_CODE_V2 else 1
    cdef Py_ssize_t topic_at = <Py_ssize_t>(v.topic - &mv[0])
    cdef Py_ssize_t head = topic_at - tlen_size  # up to TOPICLENGTH
    cdef Py_ssize_t nt = len(t)
    cdef Py_ssize_t old_plen = v.props_len if v.props_len > 0 else 0
    # a properties string that does not end with its separator gets one
    # before what is appended (RocketMQ 5 may store it without the last)
    cdef Py_ssize_t sep = 1 if (len(extra) and old_plen
                                and v.props[old_plen - 1] != 0x02) else 0
    cdef Py_ssize_t plen = old_plen + sep + len(extra)
    if plen > 32767:
        raise ValueError(f"properties would be {plen} bytes; the limit is 32767")
    cdef Py_ssize_t size = head + tlen_size + nt + 2 + plen
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char *o = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t pos = head
    memcpy(o, &mv[0], head)
    if tlen_size == 2:
        o[pos] = (nt >> 8) & 0xFF
        pos += 1
    o[pos] = nt & 0xFF
    pos += 1
    memcpy(o + pos, <const char *>t, nt)
    pos += nt
    o[pos] = (plen >> 8) & 0xFF
    o[pos + 1] = plen & 0xFF
    pos += 2
    if old_plen:
        memcpy(o + pos, v.props, old_plen)
        pos += old_plen
    if sep:
        o[pos] = 0x02
        pos += 1
    if len(extra):
        memcpy(o + pos, <const char *>extra, len(extra))
    _put_be32(o, <uint32_t>size)
    _put_be32(o + 12, <uint32_t>queue_id)
    return out


def record_size(int body_len, int topic_len, int props_len, int born_host_len=8,
                int store_host_len=8) -> int:
    return rmq_record_size(body_len, topic_len, props_len, born_host_len, store_host_len)


def validate_topic(topic) -> None:
    """Raise IllegalMessageError unless topic follows RocketMQ's rules."""
    cdef bytes b = _as_bytes(topic)
    _raise_for(rmq_validate_topic(<const uint8_t *>b, len(b)), f"topic {topic!r}")


def live_mapped_files() -> int:
    """Mapped files currently open in this process (for leak checks)."""
    return rmq_mapped_file_live_count()


def iter_records(data, Py_ssize_t start=0, bint check_crc=True, list corrupt=None):
    """Yield (position, record dict) for back-to-back records in data from
    start, stopping quietly at a blank or never-written record; a malformed
    record or CRC mismatch raises CorruptStoreError naming its position (a
    CRC mismatch goes to `corrupt` as (position, record dict) instead, and
    the record is skipped, when that list is given)."""
    cdef const unsigned char[::1] mv = data
    cdef Py_ssize_t n = mv.shape[0], pos = start
    cdef rmq_record_view_t v
    cdef int rc
    while pos < n:
        rc = rmq_record_decode(&mv[pos], n - pos, &v)
        if rc == RMQ_ENOT_FOUND:
            return
        _raise_for(rc, f"record at byte {pos}")
        if check_crc and not rmq_record_crc_ok(&v):
            if corrupt is None:
                raise CorruptStoreError(f"record at byte {pos}: body CRC mismatch", RMQ_ECORRUPT)
            corrupt.append((pos, _view_to_dict(&v)))
            pos += v.total_size
            continue
        yield pos, _view_to_dict(&v)
        pos += v.total_size


cdef inline object _prop_str(const uint8_t *props, int32_t n, const char *name):
    cdef const uint8_t *val
    cdef int32_t vlen
    if n > 0 and rmq_props_get(props, n, name, &val, &vlen):
        return (<const char *>val)[:vlen].decode("utf-8", "replace")
    return None


def decode_columns(data, bint include_properties=False, bint check_crc=True) -> dict:
    """Decode back-to-back records (a pull body) column by column, for
    columnar consumers (the Spark data source builds Arrow arrays from
    these without a Python object per message):

    n; int64 arrays ('q') queue_offset, commit_log_offset, born_timestamp,
    store_timestamp; int32 arrays ('i') queue_id, reconsume_times, sys_flag;
    lists body (bytes, inflated when sysFlag says compressed), uniq_key,
    keys, tags (str or None: the UNIQ_KEY, KEYS and TAGS properties),
    born_host, store_host (raw host fields, bytes), topic (str); and with
    include_properties, prop_offsets ('i', n + 1 entries) with the flat
    prop_names / prop_values lists (parsed as decode_properties does, a
    repeated name listed once with its last value).

    Raises CorruptStoreError on a malformed record or a CRC mismatch; stops
    at a blank or never-written record."""
    import zlib
    from array import array

    cdef const unsigned char[::1] mv = data
    cdef Py_ssize_t n = mv.shape[0], pos = 0, count = 0
    cdef rmq_record_view_t v
    cdef int rc
    cdef const uint8_t *p
    cdef int32_t plen, i, j, start, sep
    q_off = array("q"); phys = array("q"); born_ts = array("q"); store_ts = array("q")
    qid = array("i"); recon = array("i"); sysf = array("i")
    bodies = []; uniq = []; keys = []; tags = []; born_h = []; store_h = []; topics = []
    prop_offsets = array("i", [0]) if include_properties else None
    prop_names = [] if include_properties else None
    prop_values = [] if include_properties else None
    last_topic = None
    cdef bytes topic_raw
    while pos < n:
        rc = rmq_record_decode(&mv[pos], n - pos, &v)
        if rc == RMQ_ENOT_FOUND:
            break
        _raise_for(rc, f"record at byte {pos}")
        if check_crc and not rmq_record_crc_ok(&v):
            raise CorruptStoreError(f"record at byte {pos}: body CRC mismatch", RMQ_ECORRUPT)
        q_off.append(v.queue_offset); phys.append(v.phys_offset)
        born_ts.append(v.born_timestamp); store_ts.append(v.store_timestamp)
        qid.append(v.queue_id); recon.append(v.reconsume_times); sysf.append(v.sysflag)
        body = (<const char *>v.body)[:v.body_len]
        if v.sysflag & RMQ_SYSFLAG_COMPRESSED:
            body = zlib.decompress(body)
        bodies.append(body)
        born_h.append((<const char *>v.born_host)[:v.born_host_len])
        store_h.append((<const char *>v.store_host)[:v.store_host_len])
        topic_raw = (<const char *>v.topic)[:v.topic_len]
        if last_topic is None or topic_raw != last_topic[0]:
            last_topic = (topic_raw, topic_raw.decode("utf-8", "replace"))
        topics.append(last_topic[1])
        p = v.props
        plen = v.props_len
        uniq.append(_prop_str(p, plen, b"UNIQ_KEY"))
        keys.append(_prop_str(p, plen, b"KEYS"))
        tags.append(_prop_str(p, plen, b"TAGS"))
        if include_properties:
            item = {}
            start = 0
            for i in range(plen + 1):
                if i == plen or p[i] == 2:
                    sep = -1
                    for j in range(start, i):
                        if p[j] == 1:
                            if sep >= 0:
                                sep = -2
                                break
                            sep = j
                    if sep >= 0:
                        item[(<const char *>p + start)[:sep - start].decode("utf-8", "replace")] = (
                            (<const char *>p + sep + 1)[:i - sep - 1].decode("utf-8", "replace"))
                    start = i + 1
            prop_names.extend(item.keys())
            prop_values.extend(item.values())
            prop_offsets.append(len(prop_names))
        pos += v.total_size
        count += 1
    return {
        "n": count, "queue_offset": q_off, "commit_log_offset": phys,
        "born_timestamp": born_ts, "store_timestamp": store_ts, "queue_id": qid,
        "reconsume_times": recon, "sys_flag": sysf, "body": bodies, "uniq_key": uniq,
        "keys": keys, "tags": tags, "born_host": born_h, "store_host": store_h,
        "topic": topics, "prop_offsets": prop_offsets, "prop_names": prop_names,
        "prop_values": prop_values,
    }
