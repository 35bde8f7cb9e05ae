"""pytest-benchmark suite for the remoting codec (pyrmq.remoting.command).

Run: ``python -m pytest bench/bench_remoting.py --benchmark-only``

Group ``remoting.codec``. The request is the C++ client's SEND_MESSAGE frame
as captured in docs §15 of rocketmq-remoting-protocol.md (jsoncpp's sorted
keys, JSON numbers for queueId/sysFlag/flag/defaultTopicQueueNums, the
trailing newline counted in the header length), with a body of 1 B (the
capture's ``x``), 128 B, 1 KiB or 16 KiB. The response is the broker's
SEND_MESSAGE SUCCESS: string extFields msgId, queueId, queueOffset,
MSG_REGION and TRACE_ON.

Each test makes one measured call (``benchmark(fn)``); a call handles one
frame, so ``extra_info`` has that frame's ``bytes`` and the fastest call's
``frames_per_s_best``. Decoding goes two ways: ``decode_frame`` (one frame
without its length field) and ``FrameDecoder.feed`` (the servers' path: a
whole frame as it arrives from the socket).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.command import FrameDecoder, decode_frame

#: docs §15, SEND_MESSAGE (code 10) header as the wheel sends it; the
#: capture elides the signature, a 28-character base64 HMAC-SHA1.
CAPTURED_SEND_HEADER = (
    b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"N/YT7X6tIcbS2dPZJLA4aoMqYSk=","batch":"0",'
    b'"bornTimestamp":"1795308428738","defaultTopic":"TBW102","defaultTopicQueueNums":4,'
    b'"flag":0,"producerGroup":"GID_P","properties":"KEYS\\u0001k\\u0002TAGS\\u0001t\\u0002'
    b'UNIQ_KEY\\u00010100007F000014A300004200AE710100\\u0002WAIT\\u0001true\\u0002",'
    b'"queueId":0,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},'
    b'"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}\n'
)

BODY_SIZES = [1, 128, 1024, 16 * 1024]


def cpp_send_frame(body: bytes) -> bytes:
    """A whole frame: length, header word (type 0), header, body."""
    h = CAPTURED_SEND_HEADER
    return struct.pack(">II", 4 + len(h) + len(body), len(h)) + h + body


def _body(size: int) -> bytes:
    return b"x" if size == 1 else bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)


def _record(benchmark: Any, nbytes: int) -> None:
    benchmark.extra_info["bytes"] = nbytes
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    best = getattr(stats, "min", 0) or 0
    if best > 0:
        benchmark.extra_info["frames_per_s_best"] = round(1 / best)
        benchmark.extra_info["MBps_best"] = round(nbytes / best / 1e6, 1)


def _check_send(cmd: RemotingCommand, body: bytes) -> None:
    assert cmd.code == 10 and cmd.opaque == 1 and cmd.version == 63 and cmd.flag == 0
    f = cmd.ext_fields
    assert f["queueId"] == "0" and f["defaultTopicQueueNums"] == "4"
    assert f["topic"] == "TopicTest" and f["properties"].startswith("KEYS\x01k\x02")
    assert bytes(cmd.body) == body


@pytest.mark.benchmark(group="remoting.codec")
@pytest.mark.parametrize("size", BODY_SIZES, ids=lambda s: f"body{s}")
def test_decode_frame_cpp_send(benchmark: Any, size: int) -> None:
    """decode_frame of the C++ client's SEND_MESSAGE (without the length field)."""
    body = _body(size)
    frame = cpp_send_frame(body)[4:]
    _check_send(decode_frame(frame), body)
    benchmark(decode_frame, frame)
    _record(benchmark, len(frame) + 4)


@pytest.mark.benchmark(group="remoting.codec")
@pytest.mark.parametrize("size", BODY_SIZES, ids=lambda s: f"body{s}")
def test_frame_decoder_feed_cpp_send(benchmark: Any, size: int) -> None:
    """FrameDecoder.feed of one whole SEND_MESSAGE frame, then the command
    (the broker's path from data_received to a RemotingCommand)."""
    body = _body(size)
    frame = cpp_send_frame(body)

    def feed_one() -> RemotingCommand:
        (item,) = FrameDecoder().feed(frame)
        return item if isinstance(item, RemotingCommand) else decode_frame(item)

    _check_send(feed_one(), body)
    benchmark(feed_one)
    _record(benchmark, len(frame))


@pytest.mark.benchmark(group="remoting.codec")
def test_encode_send_response(benchmark: Any) -> None:
    """The broker's SEND_MESSAGE SUCCESS answer: response() + encode()."""
    req = RemotingCommand(10, {"topic": "TopicTest"}, opaque=123456, language="CPP", version=63)
    ext = {"msgId": "7F00000100002A9F0000000012345678", "queueId": "3",
           "queueOffset": "987654", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}

    def encode() -> bytes:
        return req.response(ResponseCode.SUCCESS, dict(ext)).encode()

    out = encode()
    assert out[8:18] == b'{"code":0,' and b'"queueOffset":"987654"' in out
    benchmark(encode)
    _record(benchmark, len(out))


@pytest.mark.benchmark(group="remoting.codec")
def test_encode_cpp_send_request(benchmark: Any) -> None:
    """A SEND_MESSAGE request with the C++ client's extFields, 128 B body
    (what a Python producer would pay per message)."""
    from bench.broker_load import send_fields

    fields = send_fields("TopicTest", 0, "KEYS\x01k\x02TAGS\x01t\x02UNIQ_KEY\x01"
                         "0100007F000014A300004200AE710100\x02WAIT\x01true\x02",
                         1795308428738)
    body = _body(128)

    def encode() -> bytes:
        return RemotingCommand(10, fields, body, opaque=1, language="CPP", version=63).encode()

    out = encode()
    benchmark(encode)
    _record(benchmark, len(out))
