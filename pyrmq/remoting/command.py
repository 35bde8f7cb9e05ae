"""RemotingCommand and its frame codec: THE wire spec of pyrmq.

Frame (every request and response, both directions; big-endian):

  off  size  field
    0     4  length          bytes after this field: 4 + header_len + body_len
    4     4  header_word     high byte = serialize type (0 JSON, 1 ROCKETMQ);
                             low 24 bits = header_len
    8     h  header          JSON object or ROCKETMQ binary header (below)
  8+h     b  body            opaque bytes, may be empty

Invariants and limits: 4 <= length <= MAX_FRAME (16 MiB, Java's
com.rocketmq.remoting.frameMaxLength); header_len <= length - 4; a frame
breaking either closes the connection (the stream cannot be resynchronised).
Never write length 0: the C++ client spins on it.

JSON header (parsed and written by rmqcore, csrc/remoting_header.c):
{"code": int, "language": str, "version": int, "opaque": int,
"flag": int, "remark": str|null, "extFields": {str: str}}. Requests from the
C++ client mix JSON numbers, strings and "0"/"1" booleans in extFields, so
decoding turns every value into a string (true/false -> "true"/"false");
headers.py converts to int/bool. Responses always carry string extFields and
integer code/flag/opaque/version, and always type byte 0: the C++ client
reads the whole header word as the length (it never masks the type byte).

ROCKETMQ binary header (type 1; Java clients configured for it):

  code int16 | language int8 (LanguageCode) | version int16 | opaque int32 |
  flag int32 | remark: int32 len + UTF-8 (0 = null) |
  extFields: int32 total len, then repeated (int16 klen, key, int32 vlen, value)

flag: bit0 (1) = response, bit1 (2) = one-way request. The C++ client sends
its one-way requests with flag 0 (it marks them after encoding), so servers
answer every request without bit1; the client drops answers it did not wait
for. opaque: request id chosen by the requester, echoed by the response.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pyrmq.common.errors import RemotingError
from pyrmq.remoting.codes import LanguageCode
from rmqcore import encode_json_frame as _encode_json_frame
from rmqcore import encode_json_header as _encode_json_header
from rmqcore import split_frames as _split_frames

MAX_FRAME = 16 * 1024 * 1024
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
#: The MQVersion ordinal we announce (V4_9_4 = 401): a Java peer then uses
#: standard JSON for us.
VERSION = 401
#: the language this side's commands declare (LanguageCode)
LANGUAGE = "PYTHON"

#: what a connection reads into and a Splitter splits
ReadBytes = bytes | bytearray | memoryview
#: split_frames' signature: (buffer, max_frame) -> (frames, bytes consumed)
Splitter = Callable[[ReadBytes, int], tuple[list[tuple[int, Any, bytes]], int]]

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">II")
_BIN_FIXED = struct.Struct(">hbhii")


class FrameError(RemotingError):
    """A frame that breaks the wire format; its connection must close."""


class RemotingCommand:
    """One request or response (RocketMQ RemotingCommand)."""

    __slots__ = (
        "body",
        "code",
        "ext_fields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        remark: str | None = None,
        opaque: int = 0,
        flag: int = 0,
        language: str = LANGUAGE,
        version: int = VERSION,
        serialize_type: int = SERIALIZE_JSON,
    ) -> None:
        self.code = code
        self.ext_fields = ext_fields if ext_fields is not None else {}
        self.body = body
        self.remark = remark
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        remark: str | None = None,
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type."""
        return RemotingCommand(
            code,
            ext_fields,
            body,
            remark=remark,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            language="JAVA",
            version=self.version,
            serialize_type=self.serialize_type,
        )

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"remark={self.remark!r} ext={self.ext_fields} body={len(self.body)}B)"
        )

    # -- encoding ---------------------------------------------------------

    def encode_header(self) -> bytes:
        if self.serialize_type == SERIALIZE_ROCKETMQ:
            return _encode_binary_header(self)
        return _encode_json_header(
            self.code,
            self.language,
            self.version,
            self.opaque,
            self.flag,
            self.remark,
            self.ext_fields,
        )

    def encode(self) -> bytes:
        """The whole frame."""
        if self.serialize_type != SERIALIZE_ROCKETMQ:
            return _encode_json_frame(
                self.code,
                self.language,
                self.version,
                self.opaque,
                self.flag,
                self.remark,
                self.ext_fields,
                self.body,
            )
        header = self.encode_header()
        body = self.body
        return (
            _PREFIX.pack(4 + len(header) + len(body), (self.serialize_type << 24) | len(header))
            + header
            + body
        )

    def encode_prefix(self, body_len: int) -> bytes:
        """Length fields and header of a frame whose body_len body bytes the
        caller sends itself (sendfile)."""
        header = self.encode_header()
        return (
            _PREFIX.pack(4 + len(header) + body_len, (self.serialize_type << 24) | len(header))
            + header
        )


# -- decoding -------------------------------------------------------------------


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length field (header word,
    header, body). Raises FrameError on anything malformed."""
    prefixed = len(frame).to_bytes(4, "big") + bytes(frame)
    try:
        frames, _ = _split_frames(prefixed, len(prefixed))
    except ValueError as e:
        raise FrameError(str(e)) from None
    if not frames:
        raise FrameError(f"frame of {len(frame)} bytes has no header length")
    return _command(frames[0])


_new = object.__new__


def _command(frame: tuple[int, Any, bytes]) -> RemotingCommand:
    stype, header, body = frame
    if stype == SERIALIZE_JSON:
        # every slot set here, not through __init__'s keywords: a third of
        # the time, for every frame a connection reads
        cmd = _new(RemotingCommand)
        cmd.code, language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields = header
        cmd.language = language or "OTHER"
        cmd.body = body
        cmd.serialize_type = SERIALIZE_JSON
        return cmd
    if stype == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
        cmd.body = body
        return cmd
    raise FrameError(f"unknown serialize type {stype}")


def _decode_binary_header(raw: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
        pos = _BIN_FIXED.size
        (rlen,) = _U32.unpack_from(raw, pos)
        pos += 4
        remark = raw[pos : pos + rlen].decode() if rlen else None
        if pos + rlen > len(raw):
            raise FrameError("remark runs past the header")
        pos += rlen
        (elen,) = _U32.unpack_from(raw, pos)
        pos += 4
        end = pos + elen
        if end > len(raw):
            raise FrameError("extFields run past the header")
        fields: dict[str, str] = {}
        while pos < end:
            klen = int.from_bytes(raw[pos : pos + 2], "big")
            key = raw[pos + 2 : pos + 2 + klen].decode()
            pos += 2 + klen
            (vlen,) = _U32.unpack_from(raw, pos)
            fields[key] = raw[pos + 4 : pos + 4 + vlen].decode()
            pos += 4 + vlen
        if pos != end:
            raise FrameError("extFields length does not match its entries")
    except (struct.error, UnicodeDecodeError) as e:
        raise FrameError(f"bad ROCKETMQ binary header: {e}") from None
    try:
        language = LanguageCode(lang).name
    except ValueError:
        language = "OTHER"
    return RemotingCommand(
        code,
        fields,
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=language,
        version=version,
        serialize_type=SERIALIZE_ROCKETMQ,
    )


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        lang = LanguageCode[cmd.language].value
    except KeyError:
        lang = LanguageCode.OTHER.value
    remark = cmd.remark.encode() if cmd.remark else b""
    ext = bytearray()
    for k, v in cmd.ext_fields.items():
        kb, vb = k.encode(), str(v).encode()
        ext += len(kb).to_bytes(2, "big") + kb + _U32.pack(len(vb)) + vb
    return (
        _BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)
        + _U32.pack(len(remark))
        + remark
        + _U32.pack(len(ext))
        + bytes(ext)
    )


class FrameDecoder:
    """Splits a byte stream into RemotingCommands (frame splitting and the
    JSON header parse run in rmqcore, csrc/remoting_header.c)."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: ReadBytes, split: Splitter = _split_frames) -> list[RemotingCommand]:
        """Append data; return every complete command. Raises FrameError on
        a bad frame (the rest of the stream is then unusable). split: what
        splits the frames (the broker's send path serves some of them on
        the way and returns the others). data is not kept: what is left of
        it is copied, and split must copy what it keeps."""
        buf = self._buf
        if buf:
            buf += data
            src: ReadBytes = buf
        else:
            src = data
        try:
            frames, used = split(src, self.max_frame)
        except ValueError as e:
            raise FrameError(str(e)) from None
        if buf:
            del buf[:used]
        elif used < len(data):
            buf += memoryview(data)[used:]
        return [_command(f) for f in frames]

    @staticmethod
    def commands(frames: list[tuple[int, Any, bytes]]) -> list[RemotingCommand]:
        """The commands of frames a Splitter returned later (the broker's C
        send threads hand back the frames after those they served)."""
        return [_command(f) for f in frames]

    @property
    def buffered(self) -> int:
        return len(self._buf)
