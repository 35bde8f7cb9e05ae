"""A second reader of the pyrmq on-disk formats, written from csrc/rmq_format.h
only (pure Python, struct). The format tests compare rmqcore against it; it
must never import rmqcore. Numbers are big-endian."""

from __future__ import annotations

import os
import struct
import zlib

MAGIC_V1 = struct.unpack(">i", bytes.fromhex("DAA320A7"))[0]  # -626843481
MAGIC_V2 = struct.unpack(">i", bytes.fromhex("DAA320AB"))[0]  # -626843477
BLANK_MAGIC = struct.unpack(">i", bytes.fromhex("CBD43194"))[0]  # -875286124
END_FILE_MIN_BLANK = 8
FIXED_IPV4 = 91
CQ_UNIT = 20
BORNHOST_V6, STOREHOST_V6 = 0x10, 0x20
MAX_TOPIC, MAX_PROPS, BATCH_FIXED = 127, 32767, 22
_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 48 bytes


class FormatError(ValueError):
    """The bytes are not a well-formed record."""


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def java_hash(s: str | bytes) -> int:
    """Java String.hashCode: h = 31*h + c over UTF-16 code units, int32."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def record_size(body_len: int, topic_len: int, props_len: int, born_v6: bool = False,
                store_v6: bool = False, magic: int = MAGIC_V1) -> int:
    return (FIXED_IPV4 + 12 * born_v6 + 12 * store_v6 + body_len + topic_len + props_len
            + (magic == MAGIC_V2))


def decode_properties(data: bytes) -> dict[str, str]:
    """name 0x01 value 0x02 ...; items without exactly one 0x01 are dropped.
    The first item of a name wins."""
    out: dict[str, str] = {}
    for item in data.split(b"\x02"):
        kv = item.split(b"\x01")
        if len(kv) == 2:
            out.setdefault(kv[0].decode("utf-8", "replace"), kv[1].decode("utf-8", "replace"))
    return out


def decode_record(buf: bytes, pos: int = 0) -> dict | None:
    """The record at buf[pos:]. None for a blank (end-of-file) record or a
    never-written one (TOTALSIZE and MAGICCODE both 0)."""
    if len(buf) - pos < 8:
        raise FormatError("fewer than 8 bytes")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC or (total == 0 and magic == 0):
        return None
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise FormatError(f"bad magic {magic:#x}")
    if total < FIXED_IPV4 or pos + total > len(buf):
        raise FormatError(f"bad TOTALSIZE {total}")
    rec = memoryview(buf)[pos:pos + total].tobytes()
    (_, _, crc, qid, flag, qoff, phys, sysflag, born_ts) = _HEAD.unpack_from(rec, 0)
    born_len = 20 if sysflag & BORNHOST_V6 else 8
    store_len = 20 if sysflag & STOREHOST_V6 else 8
    try:
        born_host, p = rec[48:48 + born_len], 48 + born_len
        (store_ts,) = struct.unpack_from(">q", rec, p)
        store_host, p = rec[p + 8:p + 8 + store_len], p + 8 + store_len
        reconsume, prepared_tx, body_len = struct.unpack_from(">iqi", rec, p)
        p += 16
        if body_len < 0 or p + body_len > total:
            raise FormatError("BODYLENGTH runs past the record")
        body, p = rec[p:p + body_len], p + body_len
        fmt = ">b" if magic == MAGIC_V1 else ">h"
        (topic_len,) = struct.unpack_from(fmt, rec, p)
        p += struct.calcsize(fmt)
        if topic_len <= 0 or p + topic_len > total:
            raise FormatError("bad TOPICLENGTH")
        topic, p = rec[p:p + topic_len], p + topic_len
        (props_len,) = struct.unpack_from(">h", rec, p)
        p += 2
    except struct.error as e:
        raise FormatError(f"record truncated: {e}") from None
    if props_len < 0 or p + props_len != total:
        raise FormatError("PROPERTIESLENGTH does not end the record")
    return dict(total_size=total, magic=magic, body_crc=crc, queue_id=qid, flag=flag,
                queue_offset=qoff, phys_offset=phys, sysflag=sysflag, born_timestamp=born_ts,
                born_host=born_host, store_timestamp=store_ts, store_host=store_host,
                reconsume_times=reconsume, prepared_tx_offset=prepared_tx, body=body,
                topic=topic, properties=rec[p:])


def encode_record(f: dict, magic: int = MAGIC_V1) -> bytes:
    """Inverse of decode_record (fields as it returns them; total_size and
    body_crc are computed, sysflag host bits follow the host lengths)."""
    v6 = BORNHOST_V6 * (len(f["born_host"]) == 20) | STOREHOST_V6 * (len(f["store_host"]) == 20)
    sysflag = f["sysflag"] & ~(BORNHOST_V6 | STOREHOST_V6) | v6
    tl = struct.pack(">b" if magic == MAGIC_V1 else ">h", len(f["topic"]))
    tail = (f["born_host"] + struct.pack(">q", f["store_timestamp"]) + f["store_host"]
            + struct.pack(">iqi", f["reconsume_times"], f["prepared_tx_offset"], len(f["body"]))
            + f["body"] + tl + f["topic"] + struct.pack(">h", len(f["properties"]))
            + f["properties"])
    total = 48 + len(tail)
    return _HEAD.pack(total, magic, body_crc(f["body"]), f["queue_id"], f["flag"],
                      f["queue_offset"], f["phys_offset"], sysflag, f["born_timestamp"]) + tail


def decode_cq_unit(buf: bytes, pos: int = 0) -> tuple[int, int, int]:
    """(commit_log_offset, size, tags_code); (0, 0, 0) was never written."""
    return struct.unpack_from(">qiq", buf, pos)


def read_queue_units(queue_dir: str | os.PathLike) -> dict[int, tuple[int, int, int]]:
    """Every written unit of one ConsumeQueue directory, by queue offset:
    segments are named by the logical byte offset of their first unit."""
    units = {}
    for name in sorted(os.listdir(queue_dir)):
        if len(name) != 20 or not name.isdigit():
            raise FormatError(f"not a segment name: {name!r}")
        with open(os.path.join(queue_dir, name), "rb") as fh:
            data = fh.read()
        for rel in range(0, len(data) - CQ_UNIT + 1, CQ_UNIT):
            unit = decode_cq_unit(data, rel)
            if unit[1] != 0 or unit[0] != 0:
                units[(int(name) + rel) // CQ_UNIT] = unit
    return units


def decode_batch(data: bytes) -> list[tuple[bytes, bytes, int]]:
    """Batch body entries as (body, properties, flag)."""
    out, pos = [], 0
    while pos < len(data):
        total, _, _, flag, body_len = struct.unpack_from(">iiiii", data, pos)
        (props_len,) = struct.unpack_from(">h", data, pos + 20 + body_len)
        if total != BATCH_FIXED + body_len + props_len:
            raise FormatError("batch TOTALSIZE mismatch")
        end = pos + 22 + body_len
        out.append((data[pos + 20:end - 2], data[end:end + props_len], flag))
        pos += total
    return out
