"""The common pull's answer built in C (rmqcore.pull_answer, pull.py's
pullFastPathEnable) pinned to the Python path: the same PULL_MESSAGE
frames, sent over a socket to one broker with the C answer on and then
off, get the same answer frames, byte for byte; over plain TCP and over
TLS (where no body goes by sendfile, so the C answer copies them all),
with and without a controller-mode master's confirm limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from pyrmq.remoting import RemotingClient, TlsConfig, client_ssl_context
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.command import FrameDecoder
from pyrmq.testing import LocalCluster

from .helpers import create_topic, props, send_ok

TOPIC = "PullFastT"
QUEUES = 3
#: messages stored in each queue before the pulls
PER_QUEUE = 24
#: transferBySendfileMinBytes of the broker: a few of the bodies below
#: make pulls whose answers go by sendfile, which the C path leaves alone
SENDFILE_MIN = 4096


class Raw:
    """A raw connection to the broker: frames in, whole frames out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, frame: bytes) -> bytes:
        self.writer.write(frame)
        await self.writer.drain()
        length = await asyncio.wait_for(self.reader.readexactly(4), 10)
        rest = await asyncio.wait_for(self.reader.readexactly(int.from_bytes(length, "big")), 10)
        return length + rest


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Any, tls: TlsConfig | None = None, ctx: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[LocalCluster, Raw]]:
    """A broker whose TOPIC holds PER_QUEUE messages a queue (tags a, b, c
    and none; bodies of 0 B to 6 KiB), and a raw connection to it (over
    TLS with ctx when the broker has tls)."""
    c = LocalCluster(
        str(tmp_path / "store"),
        tls=tls,
        transfer_by_sendfile_min_bytes=SENDFILE_MIN,
        enable_property_filter=True,
    )
    await c.start()
    cl = RemotingClient(name="pull-fast-test", ssl_context=ctx)
    writer = None
    try:
        await create_topic(cl, c.broker_addr, TOPIC, QUEUES)
        for q in range(QUEUES):
            for i in range(PER_QUEUE):
                tag = ("a", "b", "c", "")[(i + q) % 4]
                p = props(TAGS=tag, KEYS=f"k{i}", extra="é✓") if tag else props(KEYS=f"k{i}")
                body = bytes([i]) * (6000 if i % 11 == 5 else i * 37)
                await send_ok(cl, c.broker_addr, TOPIC, body, q, p, flag=i)
        host, port = c.broker_addr.split(":")
        reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
        yield c, Raw(reader, writer)
    finally:
        if writer is not None:
            writer.close()
        await cl.shutdown()
        await c.shutdown()


def pull_frame(
    queue_id: int,
    offset: int,
    max_nums: int,
    sub: str,
    opaque: int,
    version: int,
    language: str,
    expression_type: str | None,
) -> bytes:
    fields = {
        "consumerGroup": "CG",
        "topic": TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": sub,
        "subVersion": "0",
    }
    if expression_type is not None:
        fields["expressionType"] = expression_type
    header = {
        "code": int(RC.PULL_MESSAGE),
        "language": language,
        "version": version,
        "opaque": opaque,
        "flag": 0,
        "extFields": fields,
    }
    h = json.dumps(header).encode()
    return (4 + len(h)).to_bytes(4, "big") + len(h).to_bytes(4, "big") + h


@st.composite
def pulls(draw: st.DrawFn) -> bytes:
    sql = draw(st.integers(0, 7)) == 0
    return pull_frame(
        draw(st.integers(0, QUEUES - 1)),
        draw(st.one_of(st.integers(0, PER_QUEUE + 2), st.sampled_from([-1, 10**6]))),
        draw(st.sampled_from([1, 2, 3, 8, 32, 64])),
        "TAGS = 'a'" if sql else draw(st.sampled_from(["*", "a", "a || b", "c", "zz"])),
        draw(st.integers(0, 2**31 - 1)),
        draw(st.sampled_from([401, 317, 0])),
        draw(st.sampled_from(["JAVA", "CPP", "PYTHON"])),
        "SQL92" if sql else draw(st.sampled_from([None, "TAG"])),
    )


def test_c_answer_matches_python_answer(arun, tmp_path):
    compare_c_and_python(arun, tmp_path)


def test_c_answer_matches_python_answer_over_tls(arun, tmp_path, certs):
    compare_c_and_python(
        arun, tmp_path, certs.server_tls("enforcing"), client_ssl_context(str(certs.ca))
    )


def compare_c_and_python(
    arun: Any, tmp_path: Any, tls: TlsConfig | None = None, ctx: ssl.SSLContext | None = None
) -> None:
    async def start() -> tuple[LocalCluster, Raw, contextlib.AsyncExitStack]:
        stack = contextlib.AsyncExitStack()
        c, raw = await stack.enter_async_context(serving(tmp_path, tls, ctx))
        return c, raw, stack

    c, raw, stack = arun(start())
    proc = c.broker.pull_processor
    end = c.broker.store.commit_log_max_offset
    counts = {"compared": 0, "found": 0, "in_c": 0, "limited": 0}

    async def compare(
        frames: list[bytes], slow_below_memory: int | None, confirmed: int | None
    ) -> None:
        # slaveReadEnable: a first record further than memory_limit_bytes
        # behind the CommitLog's end makes the answer suggest the slave
        proc.slave_read_enable = slow_below_memory is not None
        proc.memory_limit_bytes = slow_below_memory or 0
        # a controller-mode master serves only up to its confirm offset
        proc.confirm_limit = None if confirmed is None else (lambda: confirmed)
        for f in frames:
            before = proc.answered_in_c
            proc.answer_in_c = True
            a = await raw.exchange(f)
            in_c = proc.answered_in_c - before
            proc.answer_in_c = False
            b = await raw.exchange(f)
            assert proc.answered_in_c - before == in_c
            assert a == b, (f, a[:300], b[:300])
            (answer,) = FrameDecoder().feed(a)
            counts["compared"] += 1
            counts["found"] += answer.code == R.SUCCESS
            counts["in_c"] += in_c
            counts["limited"] += in_c and confirmed is not None and confirmed < end
            # only a found answer is built in C, and not one sent by
            # sendfile (never over TLS)
            assert not in_c or (
                answer.code == R.SUCCESS and (tls is not None or len(answer.body) < SENDFILE_MIN)
            )

    try:

        @settings(
            max_examples=120,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            st.lists(pulls(), min_size=1, max_size=5),
            st.one_of(st.none(), st.integers(0, 200_000)),
            st.one_of(st.none(), st.integers(0, end)),
        )
        # queue 0's first records (bodies of 0-111 B) open the CommitLog:
        # these limits cut found answers, copied ones, short
        @example([pull_frame(0, 0, 3, "*", 1, 401, "JAVA", None)], None, 400)
        @example([pull_frame(0, 0, 4, "*", 2, 317, "CPP", "TAG")], None, 700)
        def check(
            frames: list[bytes], slow_below_memory: int | None, confirmed: int | None
        ) -> None:
            arun(compare(frames, slow_below_memory, confirmed))

        check()
        # the C answer was compared, not Python to itself, under a confirm
        # limit too; and answers other than a found copy were compared
        assert counts["in_c"] > 0 and counts["limited"] > 0, counts
        assert counts["compared"] > counts["in_c"], counts
        print(counts)
    finally:
        arun(stack.aclose())
