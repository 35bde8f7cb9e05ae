# Record, batch and property codecs: thin wrappers over csrc/commit_log.c.
from libc.string cimport memcpy


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
    parts = []
    for k, v in props.items():
        ks = str(k)
        vs = str(v)
        if "\x01" in ks or "\x02" in ks or "\x01" in vs or "\x02" in vs:
            raise ValueError(f"property {ks!r} contains a reserved separator byte (0x01 or 0x02)")
        parts.append(f"{ks}\x01{vs}\x02")
    return "".join(parts).encode()


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
    out = bytearray()
    for body, props, flag in messages:
        pb = props if isinstance(props, (bytes, bytearray)) else encode_properties(props)
        bb = bytes(body)
        if len(pb) > RMQ_MAX_PROPERTIES_LENGTH:
            raise ValueError(f"properties are {len(pb)} bytes; the limit is {RMQ_MAX_PROPERTIES_LENGTH}")
        total = RMQ_BATCH_ENTRY_FIXED + len(bb) + len(pb)
        out += total.to_bytes(4, "big") + bytes(8) + (flag & 0xFFFFFFFF).to_bytes(4, "big")
        out += len(bb).to_bytes(4, "big") + bb + len(pb).to_bytes(2, "big") + pb
    return bytes(out)


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
