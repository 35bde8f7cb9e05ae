"""The replication stream between a master's HAService and a slave's
HAClient: its one definition.

A slave connects to the master's haListenPort (listenPort + 1 by default).
Everything is big-endian.

Handshake, once per connection, first the slave then the master:

    magic    4 bytes  b"RMHA"
    version  int32    1
    length   int32    of the JSON document that follows (at most 64 KiB)
    JSON     {"clusterName", "brokerName", "brokerId", "commitLogFileSize",
              "maxOffset", "empty"}               (slave: what it holds)
             {"ok": true, "brokerName", "commitLogFileSize", "minOffset",
              "maxOffset", "startOffset"}          (master: where it starts)
             {"ok": false, "error": "..."}          (master: refused; it closes)

The master refuses a slave of another brokerName, one whose CommitLog
segment size differs, one that is ahead of it (the master lost data the
slave has: copying on would make the two logs differ) and one that is behind
the master's first retained segment (it would have a hole). An empty slave
starts at the master's first retained segment.

Then, as RocketMQ 4.x's HA protocol does, the slave reports the CommitLog
offset it holds (8 bytes: int64) after each append and every
haSendHeartbeatInterval, and the master streams its CommitLog from there in
frames:

    offset   int64    CommitLog offset of the first data byte
    size     int32    data bytes (0: a heartbeat)
    crc      int32    zlib CRC-32 of the data (unsigned, as a 32-bit value)
    data     size bytes, within one CommitLog segment

The data is the CommitLog, byte for byte: the slave writes it at the same
offsets after checking every record in it (rmqcore append_replica). A frame
whose offset is not where the slave's copy continues, whose CRC does not
match, or whose records fail their checks ends the connection (logged);
the slave reconnects and resumes from what it holds."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from typing import Any

MAGIC = b"RMHA"
VERSION = 1
MAX_HELLO = 64 * 1024
#: a frame's data is at most one transfer batch; this bounds what a reader
#: accepts from a broken peer
MAX_FRAME = 64 * 1024 * 1024

_HELLO = struct.Struct(">4sii")
FRAME = struct.Struct(">qiI")
OFFSET = struct.Struct(">q")


class ProtocolError(Exception):
    """The peer broke the replication protocol (the message says how)."""


def encode_hello(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return _HELLO.pack(MAGIC, VERSION, len(body)) + body


async def read_hello(reader: asyncio.StreamReader) -> dict[str, Any]:
    magic, version, length = _HELLO.unpack(await reader.readexactly(_HELLO.size))
    if magic != MAGIC:
        raise ProtocolError(f"not a pyrmq replication peer (first bytes {magic!r})")
    if version != VERSION:
        raise ProtocolError(f"replication protocol version {version}, this broker speaks {VERSION}")
    if not 0 < length <= MAX_HELLO:
        raise ProtocolError(f"handshake of {length} bytes")
    try:
        doc = json.loads(await reader.readexactly(length))
    except ValueError as e:
        raise ProtocolError(f"handshake is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("handshake is not a JSON object")
    return doc


def encode_frame_header(offset: int, data: bytes | memoryview) -> bytes:
    return FRAME.pack(offset, len(data), zlib.crc32(data))


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(offset, data) of the next frame; data is b"" for a heartbeat."""
    offset, size, crc = FRAME.unpack(await reader.readexactly(FRAME.size))
    if not 0 <= size <= MAX_FRAME or offset < 0:
        raise ProtocolError(f"frame header out of range: offset {offset}, size {size}")
    data = await reader.readexactly(size) if size else b""
    if zlib.crc32(data) != crc:
        raise ProtocolError(f"frame at CommitLog offset {offset} ({size} bytes) failed its CRC")
    return offset, data
