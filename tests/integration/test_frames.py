"""Malformed frames on raw connections while a well-behaved client keeps
working; the ROCKETMQ binary header; a client that never reads."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import struct
import time
from typing import Any

import pytest

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.client import split_addr
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.command import FrameDecoder, decode_frame
from pyrmq.remoting.connection import SOON_FLUSH_BYTES, Connection, next_opaque
from pyrmq.storage.check import check_store

from .helpers import cluster, max_offset, props, pull_all, send_ok


def _frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return (
        struct.pack(">II", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body
    )


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    """One frame from the server: (serialize type, header bytes, body)."""
    (n,) = struct.unpack(">I", await reader.readexactly(4))
    frame = await reader.readexactly(n)
    (word,) = struct.unpack_from(">I", frame)
    hlen = word & 0xFFFFFF
    return word >> 24, frame[4 : 4 + hlen], frame[4 + hlen :]


def _json_answer(stype: int, header: bytes) -> dict[str, Any]:
    assert stype == 0, stype
    h = json.loads(header)
    assert isinstance(h, dict)
    return h


def _json_frame(obj: Any) -> bytes:
    return _frame(json.dumps(obj).encode())


BAD_FRAMES: list[tuple[str, bytes]] = [
    ("negative length", b"\xff\xff\xff\xff" + b"\x00" * 64),
    ("huge length", struct.pack(">I", 16 * 1024 * 1024 + 1) + b"\x00" * 64),
    ("length 0", struct.pack(">I", 0) + b"\x00" * 16),
    ("length 1", struct.pack(">I", 1) + b"\x00"),
    ("length 2", struct.pack(">I", 2) + b"\x00\x00"),
    ("length 3", struct.pack(">I", 3) + b"\x00\x00\x00"),
    ("header past frame", struct.pack(">II", 4 + 2, 100) + b"{}"),
    ("invalid JSON header", _frame(b'{"code":10,"opaque":')),
    ("non-UTF-8 header", _frame(b'{"code":\xff\xfe}')),
    ("header not an object", _frame(b"[1,2,3]")),
    ("header lacks code", _json_frame({"opaque": 1, "flag": 0, "extFields": {}})),
    ("code not an integer", _json_frame({"code": "ten", "opaque": 1})),
    ("extFields not an object", _json_frame({"code": 30, "opaque": 1, "extFields": [1, 2]})),
    ("unknown serialize type", _frame(b'{"code":30}', stype=5)),
    ("bad binary header", _frame(b"\x00\x1e\x01", stype=1)),
]


async def _expect_closed(reader: asyncio.StreamReader, within: float = 2.0) -> bool:
    """True when the server closes: EOF (or a reset) within `within` s."""
    try:
        async with asyncio.timeout(within):
            for _ in range(1000):
                data = await reader.read(65536)
                if not data:
                    return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


class GoodClient:
    """Sends and pulls in a loop on its own connection; every answer must be right."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.client = RemotingClient(name="good")
        self.sent: list[bytes] = []
        self.errors: list[str] = []
        self.pulls = 0
        self._stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        for i in range(100_000):
            if self._stop.is_set():
                return
            body = b"good-%d" % i
            try:
                r = await self.client.invoke(
                    self.addr,
                    RemotingCommand(
                        RC.SEND_MESSAGE,
                        {
                            "producerGroup": "PG",
                            "topic": "GoodT",
                            "queueId": "0",
                            "sysFlag": "0",
                            "bornTimestamp": "0",
                            "flag": "0",
                            "properties": props(TAGS="g"),
                            "reconsumeTimes": "0",
                        },
                        body,
                    ),
                    3,
                )
                if r.code != R.SUCCESS or int(r.ext_fields["queueOffset"]) != len(self.sent):
                    self.errors.append(f"send {i}: {r}")
                    return
                self.sent.append(body)
                r = await self.client.invoke(
                    self.addr,
                    RemotingCommand(
                        RC.PULL_MESSAGE,
                        {
                            "consumerGroup": "GG",
                            "topic": "GoodT",
                            "queueId": "0",
                            "queueOffset": str(len(self.sent) - 1),
                            "maxMsgNums": "1",
                            "sysFlag": "4",
                            "commitOffset": "0",
                            "suspendTimeoutMillis": "0",
                            "subscription": "*",
                        },
                    ),
                    3,
                )
                if r.code != R.SUCCESS or rmqcore.decode_records(r.body, True)[0]["body"] != body:
                    self.errors.append(f"pull {i}: {r}")
                    return
                self.pulls += 1
            except Exception as e:
                self.errors.append(f"{i}: {e!r}")
                return
            await asyncio.sleep(0.002)

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 5)
        await self.client.shutdown()


def _bad_frame_logs(caplog: Any) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pyrmq.remoting" and "bad frame" in r.getMessage()
    ]


def test_malformed_frames_close_only_their_connection(arun, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pyrmq.remoting")

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            host, port = split_addr(c.broker_addr)
            good = GoodClient(c.broker_addr)
            good.start()
            await asyncio.sleep(0.05)
            not_closed = []
            not_logged = []
            for name, data in BAD_FRAMES:
                before = len(_bad_frame_logs(caplog))
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(data)
                    await writer.drain()
                    if not await _expect_closed(reader):
                        not_closed.append(name)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError, TimeoutError):
                        await asyncio.wait_for(writer.wait_closed(), 2)
                if len(_bad_frame_logs(caplog)) <= before:
                    not_logged.append(name)
            # 100 KiB of random garbage
            rng = random.Random(20240501)
            garbage = bytes(rng.getrandbits(8) for _ in range(100 * 1024))
            reader, writer = await asyncio.open_connection(host, port)
            try:
                before = len(_bad_frame_logs(caplog))
                writer.write(garbage)
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    await writer.drain()
                if not await _expect_closed(reader):
                    not_closed.append("garbage")
                if len(_bad_frame_logs(caplog)) <= before:
                    not_logged.append("garbage")
            finally:
                writer.close()
            # a truncated frame, then we close: the server just forgets it
            n_conns = len(c.broker.server.connections)
            reader, writer = await asyncio.open_connection(host, port)
            full = RemotingCommand(RC.GET_MAX_OFFSET, {"topic": "GoodT", "queueId": "0"}).encode()
            writer.write(full[: len(full) // 2])
            await writer.drain()
            await asyncio.sleep(0.05)
            assert len(c.broker.server.connections) == n_conns + 1
            writer.close()
            for _ in range(40):
                if len(c.broker.server.connections) == n_conns:
                    break
                await asyncio.sleep(0.05)
            assert len(c.broker.server.connections) == n_conns
            # keep going a little after the abuse
            await asyncio.sleep(0.1)
            await good.stop()
            assert not good.errors, good.errors
            assert good.pulls >= 5, good.pulls
            assert not not_closed, f"connections not closed by the server: {not_closed}"
            assert not not_logged, f"no 'bad frame' log for: {not_logged}"
            # all stored messages intact
            stored = await pull_all(cl, c.broker_addr, "GoodT", 0)
            assert [m["body"] for m in stored] == good.sent
            assert await max_offset(cl, c.broker_addr, "GoodT", 0) == len(good.sent)
        rep = check_store(str(tmp_path / "store"))
        assert rep.ok, rep.problems
        assert rep.queues.get("GoodT/0") == len(good.sent)

    arun(main(), timeout=60)


def test_frames_split_and_coalesced(arun, tmp_path):
    """Frames cut at every byte, and many frames in one write, decode."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "SplitT", b"x", 0)
            host, port = split_addr(c.broker_addr)
            reader, writer = await asyncio.open_connection(host, port)
            try:
                frames = b"".join(
                    RemotingCommand(
                        RC.GET_MAX_OFFSET, {"topic": "SplitT", "queueId": "0"}, opaque=i + 1
                    ).encode()
                    for i in range(20)
                )
                cut = len(frames) // 3
                for i in range(cut):
                    writer.write(frames[i : i + 1])
                    if i % 50 == 0:
                        await writer.drain()
                writer.write(frames[cut:])
                await writer.drain()
                got = []
                async with asyncio.timeout(5):
                    for _ in range(20):
                        got.append(_json_answer(*(await _read_frame(reader))[:2]))
                assert [g["opaque"] for g in got] == list(range(1, 21))
                assert all(g["code"] == 0 and g["extFields"]["offset"] == "1" for g in got)
            finally:
                writer.close()

    arun(main())


@pytest.mark.parametrize("runner", ["arun", "arun_uvloop"])
def test_partial_frames_of_connections_read_in_turn(request, tmp_path, runner):
    """Every connection of a loop reads into one shared buffer
    (pyrmq.remoting.connection._read_buffer): a frame one connection has
    half received must survive the reads of another in between. Each
    round leaves half a frame on A, has B's whole request answered (B's
    bytes go through the buffer meanwhile), then sends A's other half.
    Also on uvloop, whose transports fill a BufferedProtocol their own
    way (the blocking facade runs the client on it when it is installed)."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "HalfT", b"x", 0)
            host, port = split_addr(c.broker_addr)
            a_r, a_w = await asyncio.open_connection(host, port)
            b_r, b_w = await asyncio.open_connection(host, port)

            def request(opaque: int) -> bytes:
                # a body the request does not use, so the halves are long
                return RemotingCommand(
                    RC.GET_MAX_OFFSET,
                    {"topic": "HalfT", "queueId": "0"},
                    body=bytes([opaque]) * 3000,
                    opaque=opaque,
                ).encode()

            try:
                async with asyncio.timeout(20):
                    for k in range(1, 9):
                        fa = request(k)
                        a_w.write(fa[: len(fa) // 2 + k])
                        await a_w.drain()
                        b_w.write(request(100 + k))
                        hb = _json_answer(*(await _read_frame(b_r))[:2])
                        assert (hb["opaque"], hb["code"]) == (100 + k, 0)
                        a_w.write(fa[len(fa) // 2 + k :])
                        ha = _json_answer(*(await _read_frame(a_r))[:2])
                        assert (ha["opaque"], ha["code"]) == (k, 0)
                        assert ha["extFields"]["offset"] == "1"
            finally:
                a_w.close()
                b_w.close()

    request.getfixturevalue(runner)(main())


def _binary_header(code: int, opaque: int, fields: dict[str, str], remark: str = "") -> bytes:
    ext = b""
    for k, v in fields.items():
        kb, vb = k.encode(), v.encode()
        ext += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
    rb = remark.encode()
    return (
        struct.pack(">hbhii", code, 0, 401, opaque, 0)
        + struct.pack(">i", len(rb))
        + rb
        + struct.pack(">i", len(ext))
        + ext
    )


def _parse_binary_header(raw: bytes) -> tuple[int, int, int, str | None, dict[str, str]]:
    code, _lang, _ver, opaque, flag = struct.unpack_from(">hbhii", raw, 0)
    pos = 13
    (rlen,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    remark = raw[pos : pos + rlen].decode() if rlen else None
    pos += rlen
    (elen,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    end = pos + elen
    fields = {}
    while pos < end:
        (kl,) = struct.unpack_from(">h", raw, pos)
        k = raw[pos + 2 : pos + 2 + kl].decode()
        pos += 2 + kl
        (vl,) = struct.unpack_from(">i", raw, pos)
        fields[k] = raw[pos + 4 : pos + 4 + vl].decode()
        pos += 4 + vl
    assert pos == end == len(raw)
    return code, opaque, flag, remark, fields


def test_rocketmq_binary_header_answered_in_kind(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            host, port = split_addr(c.broker_addr)
            reader, writer = await asyncio.open_connection(host, port)
            try:
                send_fields = {
                    "producerGroup": "PG",
                    "topic": "BinT",
                    "queueId": "0",
                    "sysFlag": "0",
                    "bornTimestamp": "0",
                    "flag": "0",
                    "properties": props(TAGS="b"),
                    "reconsumeTimes": "0",
                }
                writer.write(
                    _frame(_binary_header(RC.SEND_MESSAGE, 7, send_fields), b"binary-body", stype=1)
                )
                writer.write(
                    _frame(
                        _binary_header(RC.GET_MAX_OFFSET, 8, {"topic": "BinT", "queueId": "0"}),
                        stype=1,
                    )
                )
                writer.write(
                    _frame(
                        _binary_header(
                            RC.PULL_MESSAGE,
                            9,
                            {
                                "topic": "NoSuchBin",
                                "queueId": "0",
                                "consumerGroup": "G",
                                "queueOffset": "0",
                                "sysFlag": "4",
                            },
                        ),
                        stype=1,
                    )
                )
                await writer.drain()
                answers = []
                async with asyncio.timeout(5):
                    while len(answers) < 3:
                        (n,) = struct.unpack(">I", await reader.readexactly(4))
                        frame = await reader.readexactly(n)
                        (word,) = struct.unpack_from(">I", frame)
                        assert word >> 24 == 1, "answer not in the ROCKETMQ serialize type"
                        hlen = word & 0xFFFFFF
                        answers.append(
                            (_parse_binary_header(frame[4 : 4 + hlen]), frame[4 + hlen :])
                        )
                (code, opaque, flag, _, fields), body = answers[0]
                assert (code, opaque, flag & 1) == (0, 7, 1)
                assert fields["queueOffset"] == "0" and len(fields["msgId"]) == 32 and body == b""
                (code, opaque, flag, _, fields), _ = answers[1]
                assert (code, opaque) == (0, 8) and fields["offset"] == "1"
                (code, opaque, flag, remark, _), _ = answers[2]
                assert (code, opaque) == (R.TOPIC_NOT_EXIST, 9) and remark
            finally:
                writer.close()
            (m,) = await pull_all(cl, c.broker_addr, "BinT", 0)
            assert m["body"] == b"binary-body"

    arun(main())


def test_client_that_never_reads_does_not_block_others(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "SlowT", b"x", 0)
            host, port = split_addr(c.broker_addr)
            _reader, writer = await asyncio.open_connection(host, port)
            req = RemotingCommand(RC.GET_MAX_OFFSET, {"topic": "SlowT", "queueId": "0"}).encode()
            blob = req * 20_000
            writer.write(blob)  # never read a byte; don't wait for the drain
            server_conns = list(c.broker.server.connections)
            other = RemotingClient(name="other")
            try:
                t0 = time.monotonic()
                for i in range(50):
                    assert await max_offset(other, c.broker_addr, "SlowT", 0) == 1 + i
                    r = await send_ok(other, c.broker_addr, "SlowT", b"y", 0)
                    assert r.ext_fields["queueOffset"] == str(1 + i)
                    await asyncio.sleep(0.005)
                elapsed = time.monotonic() - t0
                assert elapsed < 10, elapsed
                # the server does not buffer without bound for the non-reader
                worst = max(
                    (
                        conn.transport.get_write_buffer_size()
                        for conn in server_conns
                        if conn.transport is not None
                    ),
                    default=0,
                )
                assert worst < 16 * 1024 * 1024, worst
            finally:
                writer.transport.abort()
                await other.shutdown()
            n = len(c.broker.server.connections)
            for _ in range(40):
                if len(c.broker.server.connections) <= 1:
                    break
                await asyncio.sleep(0.05)
            assert len(c.broker.server.connections) <= 1, (n, c.broker.server.connections)
            assert await max_offset(cl, c.broker_addr, "SlowT", 0) == 51

    arun(main(), timeout=60)


def test_cpp_style_request_and_strict_response_shape(arun, tmp_path):
    """A request as the C++ client writes it (sorted keys, trailing
    newline in the header, numeric and "0"/"1" extFields, version 63, flag
    0) and the response shape it needs (type byte 0, integer
    code/flag/opaque/version, string extFields)."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, _cl):
            host, port = split_addr(c.broker_addr)
            reader, writer = await asyncio.open_connection(host, port)
            try:
                ext = {
                    "AccessKey": "",
                    "OnsChannel": "ALIYUN",
                    "Signature": "abc=",
                    "batch": "0",
                    "bornTimestamp": "1795308428738",
                    "defaultTopic": "TBW102",
                    "defaultTopicQueueNums": 4,
                    "flag": 0,
                    "producerGroup": "GID_P",
                    "properties": "TAGS\x01t\x02WAIT\x01true\x02",
                    "queueId": 1,
                    "reconsumeTimes": "0",
                    "sysFlag": 0,
                    "topic": "CppT",
                    "unitMode": "0",
                }
                head = (
                    json.dumps(
                        {
                            "code": 10,
                            "extFields": ext,
                            "flag": 0,
                            "language": "CPP",
                            "opaque": 0,
                            "remark": "",
                            "version": 63,
                        },
                        sort_keys=True,
                        separators=(",", ":"),
                    )
                    + "\n"
                )
                writer.write(_frame(head.encode(), b"x"))
                batch = rmqcore.encode_batch([(b"b1", {"TAGS": "t"}, 0), (b"b2", {"TAGS": "t"}, 0)])
                ext2 = dict(ext, batch="1", properties="WAIT\x01true\x02")
                head2 = (
                    json.dumps(
                        {
                            "code": 10,
                            "extFields": ext2,
                            "flag": 0,
                            "language": "CPP",
                            "opaque": 1,
                            "remark": "",
                            "version": 63,
                        },
                        sort_keys=True,
                        separators=(",", ":"),
                    )
                    + "\n"
                )
                writer.write(_frame(head2.encode(), batch))
                pullx = {
                    "commitOffset": "-1",
                    "consumerGroup": "GID_C",
                    "maxMsgNums": 32,
                    "queueId": 1,
                    "queueOffset": "0",
                    "subVersion": "1795308445968",
                    "subscription": "*",
                    "suspendTimeoutMillis": "15000",
                    "sysFlag": 6,
                    "topic": "CppT",
                }
                head3 = (
                    json.dumps(
                        {
                            "code": 11,
                            "extFields": pullx,
                            "flag": 0,
                            "language": "CPP",
                            "opaque": 2,
                            "remark": "",
                            "version": 63,
                        },
                        sort_keys=True,
                    )
                    + "\n"
                )
                writer.write(_frame(head3.encode()))
                await writer.drain()
                got = {}
                async with asyncio.timeout(5):
                    while len(got) < 3:
                        (n,) = struct.unpack(">I", await reader.readexactly(4))
                        frame = await reader.readexactly(n)
                        (word,) = struct.unpack_from(">I", frame)
                        assert word >> 24 == 0
                        h = json.loads(frame[4 : 4 + word])
                        for k in ("code", "flag", "opaque", "version"):
                            assert type(h[k]) is int, (k, h)
                        assert h["flag"] & 1
                        assert h.get("remark") is None or isinstance(h["remark"], str)
                        assert isinstance(h["extFields"], dict)
                        assert all(isinstance(v, str) for v in h["extFields"].values()), h
                        got[h["opaque"]] = (h, frame[4 + word :])
                assert got[0][0]["code"] == 0 and got[0][0]["extFields"]["queueId"] == "1"
                assert got[0][0]["extFields"]["queueOffset"] == "0"
                assert got[1][0]["code"] == 0 and got[1][0]["extFields"]["queueOffset"] == "1"
                h, body = got[2]
                assert h["code"] == 0 and h["extFields"]["nextBeginOffset"] == "3", h
                assert [m["body"] for m in rmqcore.decode_records(body, True)] == [
                    b"x",
                    b"b1",
                    b"b2",
                ]
            finally:
                writer.close()

    arun(main())


def test_oneway_request_gets_no_answer(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, _cl):
            host, port = split_addr(c.broker_addr)
            reader, writer = await asyncio.open_connection(host, port)
            try:
                ow = RemotingCommand(
                    RC.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": "OG", "topic": "OwT", "queueId": "0", "commitOffset": "9"},
                    opaque=5,
                    flag=2,
                )
                q = RemotingCommand(
                    RC.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": "OG", "topic": "OwT", "queueId": "0"},
                    opaque=6,
                )
                writer.write(ow.encode() + q.encode())
                await writer.drain()
                async with asyncio.timeout(3):
                    resp = _json_answer(*(await _read_frame(reader))[:2])
                assert resp["opaque"] == 6 and resp["extFields"]["offset"] == "9", resp
                try:
                    async with asyncio.timeout(0.3):
                        extra = await reader.read(1)
                except TimeoutError:
                    extra = None
                assert extra is None, "an answer came for a one-way request"
            finally:
                writer.close()

    arun(main())


def test_idle_client_connection_is_closed(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, client_channel_max_idle_time_ms=600) as (c, cl):
            from .helpers import heartbeat_body, simple

            idle = RemotingClient(name="idle")
            try:
                r = await simple(
                    idle,
                    c.broker_addr,
                    RC.HEART_BEAT,
                    body=heartbeat_body("IDLE", "IG", {"T": "*"}),
                )
                assert r.code == R.SUCCESS
                conn = await idle.connection(c.broker_addr)
                t0 = time.monotonic()
                await asyncio.wait_for(conn.closed, 3)
                assert time.monotonic() - t0 >= 0.5
                r = await simple(
                    cl, c.broker_addr, RC.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="IG"
                )
                assert r.code == R.SYSTEM_ERROR, r
            finally:
                await idle.shutdown()

    arun(main())


def test_codec_decodes_real_server_answers(arun, tmp_path):
    """pyrmq's own codec (decode_frame, FrameDecoder) reads what the broker
    writes, in both serialize types."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, _cl):
            host, port = split_addr(c.broker_addr)
            reader, writer = await asyncio.open_connection(host, port)
            try:
                for stype in (0, 1):
                    q = RemotingCommand(
                        RC.GET_MAX_OFFSET,
                        {"topic": "CodecT", "queueId": "0"},
                        opaque=40 + stype,
                        serialize_type=stype,
                    )
                    writer.write(q.encode())
                    await writer.drain()
                    async with asyncio.timeout(3):
                        (n,) = struct.unpack(">I", await reader.readexactly(4))
                        raw = await reader.readexactly(n)
                    dec = FrameDecoder().feed(struct.pack(">I", n) + raw)
                    assert len(dec) == 1
                    cmd = decode_frame(raw)
                    assert cmd.opaque == 40 + stype and cmd.code == 0
                    assert cmd.ext_fields == {"offset": "0"}
            finally:
                writer.close()

    arun(main())


async def _requests_made_in_a_response_callback(
    n: int, size: int, hold_one: bool
) -> tuple[list[list[int]], list[int]]:
    """A peer answers one request (with hold_one, after a first one it
    never answers: a held pull) and records the first body byte of the n
    requests made in that answer's callback, each `size` bytes of its
    number. Returns what the connection wrote after the first requests
    (each write as the first bytes of its frames) and what the peer got."""
    got: list[int] = []
    done = asyncio.Event()

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if hold_one:
            await _read_frame(reader)
        _, header, _ = await _read_frame(reader)
        h = _json_answer(0, header)
        writer.write(_json_frame({"code": 0, "opaque": h["opaque"], "flag": 1}))
        while len(got) < n:
            _, _, body = await _read_frame(reader)
            got.append(body[0])
        done.set()

    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: Connection(None), "127.0.0.1", port)
    writes: list[list[int]] = []
    write = conn._write

    def recorded(data: bytes) -> None:
        writes.append([f.body[0] for f in FrameDecoder().feed(bytes(data))])
        write(data)

    def request(i: int, code: int = 10, on_done: Any = lambda r, e: None) -> None:
        op = next_opaque()
        header = json.dumps({"code": code, "opaque": op, "flag": 0}).encode()
        conn.request_frame(op, code, _frame(header, bytes([i]) * size), 10.0, on_done)

    def answered(resp: Any, exc: BaseException | None) -> None:
        for i in range(n):
            request(i)

    try:
        if hold_one:
            request(100, code=11)
        request(101, on_done=answered)
        conn._write = recorded  # type: ignore[method-assign]
        await asyncio.wait_for(done.wait(), 30)
    finally:
        conn.close()
        server.close()
        await server.wait_closed()
    return writes, got


def test_requests_made_in_a_response_callback_leave_in_order(arun):
    """Requests made while a read is processed (a send callback, a push
    consumer's listener started in its pull's callback) leave in the order
    made, also when they outgrow the per-iteration coalescing buffer: the
    first of them waits in the read's answer buffer, the rest must not
    overtake it."""
    big = SOON_FLUSH_BYTES // 2 + 1  # three of these overflow it
    _, got = arun(_requests_made_in_a_response_callback(5, big, hold_one=False))
    assert got == [0, 1, 2, 3, 4]


def test_requests_made_in_a_response_callback_leave_in_one_write(arun):
    """Requests made while a read is processed leave in one write at its
    end, the first with those after it (Connection.cork holds the first;
    the later ones join it instead of waiting for the loop turn's end):
    a push consumer's next pull, sent from its answer's read callback, and
    a send the same read's ack let go (the auto-batcher) reach the broker
    together, the pull first. Another request is in flight meanwhile (a
    held pull), so none of them leaves alone at once."""
    writes, got = arun(_requests_made_in_a_response_callback(3, 1, hold_one=True))
    assert got == [0, 1, 2]
    assert writes == [[0, 1, 2]]
