"""The common send's C path (rmqcore.SendPath, send_fast.py) pinned to the
Python path (SendMessageProcessor.process_send): the same request frames,
sent over sockets to a broker with sendFastPathEnable and to one without,
give the same answers and store the same records, byte for byte apart from
what names the broker or the connection (store host, born host's port,
store time)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import rmqcore
from pyrmq.remoting import RemotingClient
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.command import SERIALIZE_ROCKETMQ, FrameDecoder, RemotingCommand
from pyrmq.storage.config import FlushDiskType
from pyrmq.testing import LocalCluster

from .helpers import create_topic, props, pull, pull_cmd, send_fields, v2, wait_for

TOPIC = "FastT"


class Peer:
    """One broker and a raw connection to it."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.decoder = FrameDecoder()
        self.read_to = 0

    async def connect(self, topic_queues: int = 4) -> None:
        """Create TOPIC, then open the raw connection."""
        cl = RemotingClient(name="fast-test")
        try:
            await create_topic(cl, self.c.broker_addr, TOPIC, topic_queues)
        finally:
            await cl.shutdown()
        host, port = self.c.broker_addr.split(":")
        self.reader, self.writer = await asyncio.open_connection(host, int(port))

    async def exchange(self, frame: bytes, oneway: bool) -> RemotingCommand | None:
        assert self.reader is not None and self.writer is not None
        self.writer.write(frame)
        await self.writer.drain()
        if oneway:
            # no answer comes: an answered request behind it on the same
            # connection says the broker has read and served it, so its
            # record (if any) is in the store before new_records() reads
            # (without it the two brokers were read at different moments)
            barrier = RemotingCommand(RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
            barrier.opaque = 2**31 - 1
            answer = await self.exchange(barrier.encode(), False)
            assert answer is not None and answer.opaque == barrier.opaque, answer
            return None
        cmds: list[RemotingCommand] = []
        while not cmds:
            data = await self.reader.read(65536)
            assert data, "the broker closed the connection"
            cmds = self.decoder.feed(data)
        (answer,) = cmds
        return answer

    @property
    def served(self) -> int:
        fast = self.c.broker.server.fast_path
        return fast.served if fast is not None else 0

    def new_records(self) -> list[dict[str, Any]]:
        """The records stored since the last call, without what names the
        broker or the connection."""
        core = self.c.broker.store.core
        end = core.commit_log_max_offset
        data = core.read(self.read_to, end - self.read_to) if end > self.read_to else b""
        self.read_to = end
        out = []
        for m in rmqcore.decode_records(data, True):
            m = dict(m)
            for k in ("store_timestamp", "store_host", "born_host", "msg_id"):
                m.pop(k, None)
            out.append(m)
        return out


@contextlib.asynccontextmanager
async def serving(tmp_path: Any, **settings: Any) -> AsyncIterator[Peer]:
    """A LocalCluster (broker settings as given) with TOPIC, and a raw
    connection to its broker."""
    c = LocalCluster(str(tmp_path / "store"), **settings)
    await c.start()
    p = Peer(c)
    try:
        await p.connect()
        yield p
    finally:
        if p.writer is not None:
            p.writer.close()
        await c.shutdown()


def _answer(cmd: RemotingCommand | None, c: LocalCluster) -> Any:
    if cmd is None:
        return None
    ext = dict(cmd.ext_fields)
    if "msgId" in ext:
        # offsetMsgId: the broker's address (16 hex digits), then the offset
        ext["msgId"] = ",".join(i[16:] for i in ext["msgId"].split(","))
    return (cmd.code, cmd.remark, ext, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.body)


def frame(header: dict[str, Any], body: bytes) -> bytes:
    """A JSON frame written by hand: values as given (str, int or bool)."""
    h = json.dumps(header, ensure_ascii=False).encode()
    return (4 + len(h) + len(body)).to_bytes(4, "big") + len(h).to_bytes(4, "big") + h + body


INTS = st.one_of(
    st.integers(0, 5).map(str),
    st.integers(-(2**63), 2**63).map(str),
    st.integers(0, 5),
    st.sampled_from(["", " 1", "+1", "1_0", "0x1", "\u0661", "-0", "00", "1.0", "9" * 25]),
)
QUEUE_IDS = st.one_of(
    st.integers(0, 5).map(str),
    st.integers(0, 5),
    st.integers(0, 2**70).map(str),
    st.sampled_from([" 1", "+1", "1_0", "0x1", "\u0661", "-0", "00", "1.0", "9" * 25]),
)
PROPS = st.one_of(
    st.just(""),
    st.just(props(UNIQ_KEY="0A0000010000", TAGS="a", KEYS="k1 k2", WAIT="true")),
    st.dictionaries(
        st.sampled_from(
            ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TRAN_MSG", "PGROUP", "WAIT", 'x"y', "é"]
        ),
        st.sampled_from(["", "1", "true", "false", "v\\w", "ü", "3"]),
        max_size=4,
    ).map(lambda d: props(**d)),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, bool]:
    code = draw(st.sampled_from([RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2]))
    fields: dict[str, Any] = send_fields(
        draw(st.sampled_from([TOPIC, TOPIC, "FastAuto", "%RETRY%G1", "TBW102"])),
        0,
        draw(PROPS),
        sysflag=draw(st.sampled_from([0, 0, 0, 0, 1, 2, 4, 8, 12])),
        batch=draw(st.sampled_from(["0", "0", "false", "1", "true", "False", ""])),
        reconsume_times=0,
        born_ts=1_700_000_000_000,
    )
    for k in ("sysFlag", "bornTimestamp", "flag", "reconsumeTimes"):
        if draw(st.integers(0, 3)) == 0:
            fields[k] = draw(INTS)
    # never a queue left to the broker (queueId < 0 or none): both paths
    # would pick a random one, and the stores would part ways
    fields["queueId"] = draw(QUEUE_IDS)
    for k in list(fields):
        if k != "queueId" and draw(st.integers(0, 15)) == 0:
            del fields[k]
    if code == RC.SEND_MESSAGE_V2:
        fields = v2(fields)
    oneway = draw(st.integers(0, 7)) == 0
    header = {
        "code": int(code),
        "language": draw(st.sampled_from(["JAVA", "CPP", "PYTHON"])),
        "version": draw(st.sampled_from([401, 317, 0])),
        "opaque": draw(st.integers(0, 2**31 - 1)),
        "flag": 2 if oneway else 0,
        "extFields": fields,
    }
    body = draw(st.binary(max_size=64))
    return frame(header, body), oneway


@pytest.mark.parametrize("threads", [False, True], ids=["inline", "on-send-threads"])
def test_c_path_matches_python_path(arun, tmp_path, threads):
    """threads: every chunk is served on a C send thread
    (sendMessageThreadPoolNums=2, no minimum chunk size), not inline."""
    # delayed messages stay scheduled for the whole test: one delivered
    # to its topic in one broker and not yet in the other moves the
    # CommitLog offsets (msgId) of every later send apart
    later = " ".join(["1h"] * 18)
    fast = LocalCluster(
        str(tmp_path / "fast"),
        send_message_thread_pool_nums=2 if threads else 1,
        message_delay_level=later,
    )
    slow = LocalCluster(
        str(tmp_path / "slow"), send_fast_path_enable=False, message_delay_level=later
    )
    peers = [Peer(fast), Peer(slow)]
    compared = [0]

    async def start() -> None:
        for p in peers:
            await p.c.start()
            await p.connect()
        if threads:
            fast.broker.server.fast_path.lane_min_bytes = 1

    async def compare(reqs: list[tuple[bytes, bool]]) -> None:
        for f, oneway in reqs:
            a, b = [await p.exchange(f, oneway) for p in peers]
            assert _answer(a, fast) == _answer(b, slow), (f, a, b)
            assert peers[0].new_records() == peers[1].new_records(), f

    async def stop() -> None:
        for p in peers:
            if p.writer is not None:
                p.writer.close()
            await p.c.shutdown()

    arun(start())
    try:

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(st.lists(requests(), min_size=1, max_size=6))
        def check(reqs: list[tuple[bytes, bool]]) -> None:
            arun(compare(reqs))
            compared[0] += len(reqs)

        check()
        # the C path served some: the test compared it, not Python to itself
        assert peers[0].served > 0, compared
        assert peers[1].served == 0
        on_threads = fast.broker.server.fast_path.served_on_lanes
        assert on_threads == (peers[0].served if threads else 0)
        print(f"{compared[0]} requests compared, {peers[0].served} served in C")
    finally:
        arun(stop())


def test_what_the_c_path_serves(arun, tmp_path):
    """Plain V1 and V2 sends are served in C; batches, delayed, timed and
    transactional sends, retry topics, a topic not served before and a
    header with non-ASCII text are the Python path's, and still answered
    right."""

    async def main() -> None:
        async with serving(tmp_path) as p:
            c = p.c

            async def sent(fields: dict[str, Any], code: int = RC.SEND_MESSAGE) -> tuple[int, int]:
                before = p.served
                h = {
                    "code": int(code),
                    "language": "JAVA",
                    "version": 401,
                    "opaque": 1,
                    "flag": 0,
                    "extFields": fields,
                }
                a = await p.exchange(frame(h, b"x"), False)
                assert a is not None
                return a.code, p.served - before

            plain = send_fields(TOPIC, 1, props(TAGS="a"))
            # the first send to a topic teaches the C path the topic
            assert await sent(plain) == (R.SUCCESS, 0)
            assert await sent(plain) == (R.SUCCESS, 1)
            assert await sent(v2(plain), RC.SEND_MESSAGE_V2) == (R.SUCCESS, 1)
            # a header with a string of bytes >= 0x80 (raw UTF-8): the
            # Python path's, which judges the UTF-8
            assert await sent(send_fields(TOPIC, 1, props(TAGS="ü"))) == (R.SUCCESS, 0)
            assert await sent({**plain, "é": "x"}) == (R.SUCCESS, 0)
            assert await sent(send_fields(TOPIC, 1, props(DELAY="2"))) == (R.SUCCESS, 0)
            assert await sent(send_fields(TOPIC, 1, props(TIMER_DELAY_SEC="5"))) == (R.SUCCESS, 0)
            assert await sent(send_fields(TOPIC, 1, props(TRAN_MSG="true", PGROUP="PG"))) == (
                R.SUCCESS,
                0,
            )
            assert (await sent(send_fields(TOPIC, 1, batch=True)))[1] == 0
            assert await sent(send_fields(TOPIC, 9)) == (R.SYSTEM_ERROR, 0)
            assert await sent(send_fields("NewTopicByAutoCreate", 0)) == (R.SUCCESS, 0)
            assert await sent(send_fields("NewTopicByAutoCreate", 0)) == (R.SUCCESS, 1)
            # a topic changed is checked by the Python path again: queue 3
            # of the 4 it had is refused now it has 2
            cl = RemotingClient(name="fast-test")
            await create_topic(cl, c.broker_addr, TOPIC, 2)
            await cl.shutdown()
            assert await sent(send_fields(TOPIC, 3)) == (R.SYSTEM_ERROR, 0)
            assert await sent(send_fields(TOPIC, 1)) == (R.SUCCESS, 1)
            assert await sent(send_fields(TOPIC, 3)) == (R.SYSTEM_ERROR, 0)

    arun(main(), timeout=60)


def test_sync_flush_answers_wait_for_the_disk(arun, tmp_path):
    """SYNC_FLUSH: pipelined plain sends served in C are answered once
    durable, every one SUCCESS, and all are stored."""

    async def main() -> None:
        async with serving(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH) as p:
            c = p.c
            assert p.writer is not None and p.reader is not None
            # the Python path serves the topic's first send, and teaches it
            first = send_fields(TOPIC, 0, props(UNIQ_KEY="first"))
            a = await p.exchange(RemotingCommand(RC.SEND_MESSAGE, first, b"m").encode(), False)
            assert a is not None and a.code == R.SUCCESS, a
            frames = []
            for i in range(200):
                f = send_fields(TOPIC, i % 4, props(UNIQ_KEY=f"K{i}"))
                frames.append(RemotingCommand(RC.SEND_MESSAGE, f, b"m%d" % i, opaque=i).encode())
            p.writer.write(b"".join(frames))
            got: dict[int, RemotingCommand] = {}
            while len(got) < 200:
                data = await p.reader.read(65536)
                assert data, f"closed after {len(got)} answers"
                for a in p.decoder.feed(data):
                    got[a.opaque] = a
            assert {a.code for a in got.values()} == {R.SUCCESS}
            assert p.served == 200
            core = c.broker.store.core
            assert core.flushed_offset >= core.commit_log_max_offset
            assert sum(core.max_offset_in_queue(TOPIC, q) for q in range(4)) == 201

    arun(main(), timeout=60)


def test_sync_master_without_a_slave(arun, tmp_path):
    """A SYNC_MASTER with no slave: sends served in C are stored and
    answered SLAVE_NOT_AVAILABLE with the Python path's remark."""

    async def main() -> None:
        async with serving(tmp_path, broker_role="SYNC_MASTER") as p:
            c = p.c
            answers = []
            for i in range(3):
                f = send_fields(TOPIC, 1, props(UNIQ_KEY=f"K{i}"))
                a = await p.exchange(RemotingCommand(RC.SEND_MESSAGE, f, b"x").encode(), False)
                assert a is not None
                answers.append((a.code, a.remark, a.ext_fields.get("queueOffset")))
            assert answers == [
                (R.SLAVE_NOT_AVAILABLE, "no slave is connected or it is too far behind", str(i))
                for i in range(3)
            ]
            assert p.served == 2  # the first taught the topic
            assert c.broker.store.core.max_offset_in_queue(TOPIC, 1) == 3

    arun(main(), timeout=60)


def test_rpc_metrics_count_sends_served_in_c(arun, tmp_path):
    """rocketmq_rpc_latency counts every send the C path answers, as
    handle() counts the Python path's (one observation a send, sampling 1)."""

    async def main() -> None:
        async with serving(
            tmp_path,
            metrics_exporter_type="PROM",
            metrics_prom_exporter_host="127.0.0.1",
            metrics_prom_exporter_port=0,
            metrics_rpc_latency_sample_every=1,
        ) as p:
            c = p.c
            assert p.writer is not None and p.reader is not None
            frames = [
                RemotingCommand(
                    RC.SEND_MESSAGE if i % 2 else RC.SEND_MESSAGE_V2,
                    send_fields(TOPIC, i % 4) if i % 2 else v2(send_fields(TOPIC, i % 4)),
                    b"m",
                    opaque=i,
                ).encode()
                for i in range(100)
            ]
            a = await p.exchange(frames[0], False)  # teaches the topic
            assert a is not None and a.code == R.SUCCESS
            p.writer.write(b"".join(frames[1:]))
            got = 0
            while got < 99:
                data = await p.reader.read(65536)
                assert data
                got += len(p.decoder.feed(data))
            assert p.served == 99
            counts = {labels: slots[0] for labels, slots in c.broker.metrics.rpc.snapshot()}
            assert counts[("10", "0", "success")] == 50
            assert counts[("310", "0", "success")] == 50

    arun(main(), timeout=60)


async def _pull_held_behind_first_send(
    p: Peer, consumer: RemotingClient
) -> asyncio.Future[RemotingCommand]:
    """Open p's connection to a one-queue TOPIC, send its first message (the
    Python path: it teaches the C path the topic), then hold a pull for the
    next one (15 s suspend); the pull's answer, once it is held."""
    c = p.c
    await p.connect(topic_queues=1)
    first = send_fields(TOPIC, 0, props(UNIQ_KEY="first"))
    a = await p.exchange(RemotingCommand(RC.SEND_MESSAGE, first, b"m0").encode(), False)
    assert a is not None and a.code == R.SUCCESS, a
    held = asyncio.ensure_future(
        pull(consumer, c.broker_addr, TOPIC, 0, 1, sysflag=2 | 4, suspend_ms=15_000, timeout=20)
    )

    async def is_held() -> bool:
        return c.broker.pull_processor.held_count == 1 or held.done()

    assert await wait_for(is_held, 10), "the pull was not held"
    assert not held.done(), held.result()
    return held


def test_pulls_woken_by_sends_served_in_c_are_answered_at_once(arun, tmp_path):
    """A pull held on a queue is answered inside the read callback whose
    send, served in C, woke it (SendFastPath.wake_pulls, the pull
    processor's wake_held), just before that send's answer: not at the
    event loop's next iteration."""

    async def main() -> None:
        c = LocalCluster(str(tmp_path / "store"))
        await c.start()
        consumer = RemotingClient(name="consumer")
        p = Peer(c)
        try:
            fast = c.broker.server.fast_path
            assert fast is not None
            holds = c.broker.pull_processor
            # what each split left: (sends served in C so far, pulls still held)
            after_split: list[tuple[int, int]] = []
            split = fast.split

            def watched(conn: Any, buf: Any, max_frame: int) -> Any:
                out = split(conn, buf, max_frame)
                after_split.append((fast.served, holds.held_count))
                return out

            fast.split = watched  # type: ignore[method-assign]  # before p's connection
            held = await _pull_held_behind_first_send(p, consumer)
            second = send_fields(TOPIC, 0, props(UNIQ_KEY="second"))
            a = await p.exchange(RemotingCommand(RC.SEND_MESSAGE, second, b"m1").encode(), False)
            assert a is not None and a.code == R.SUCCESS, a
            assert fast.served == 1, "the second send was not served in C"
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.SUCCESS, r
            (m,) = rmqcore.decode_records(r.body)
            assert (m["body"], m["queue_offset"]) == (b"m1", 1)
            # the split that served the send in C left no pull held
            assert (1, 0) in after_split, after_split
        finally:
            if p.writer is not None:
                p.writer.close()
            await consumer.shutdown()
            await c.shutdown()

    arun(main(), timeout=60)


@pytest.mark.parametrize("together", [False, True], ids=["pull-then-send", "in-one-write"])
def test_a_pull_woken_on_the_sends_own_connection_leaves_in_one_write_with_the_ack(
    arun, tmp_path, together
):
    """A client that produces and consumes on one connection (as RocketMQ's
    Java and C++ clients do, one connection a broker): the pull held there
    and the send that wakes it are answered in one write, the pull's answer
    first (Connection.cork in SendFastPath._settle), so the client wakes
    and reads once a message instead of twice. Also when the pull and the
    send come in one write (pyrmq's push consumer sends its next pull from
    the read callback, before a send made then): the pull is held first and
    the send behind it is still served in C (SendFastPath.split stops
    before it and splits it again once the pull is served)."""

    async def main() -> None:
        c = LocalCluster(str(tmp_path / "store"))
        await c.start()
        p = Peer(c)
        try:
            fast = c.broker.server.fast_path
            assert fast is not None
            conns: list[Any] = []
            split = fast.split

            def watched(conn: Any, buf: Any, max_frame: int) -> Any:
                if not conns:
                    conns.append(conn)
                return split(conn, buf, max_frame)

            fast.split = watched  # type: ignore[method-assign]  # before p's connection
            await p.connect(topic_queues=1)
            conns.clear()  # the topic's creation came on a connection of its own
            first = send_fields(TOPIC, 0, props(UNIQ_KEY="first"))
            a = await p.exchange(RemotingCommand(RC.SEND_MESSAGE, first, b"m0").encode(), False)
            assert a is not None and a.code == R.SUCCESS, a
            (conn,) = conns
            writes: list[bytes] = []
            write = conn._write

            def recorded(data: bytes) -> None:
                writes.append(bytes(data))
                write(data)

            conn._write = recorded
            assert p.writer is not None and p.reader is not None
            held = pull_cmd(TOPIC, 0, 1, max_nums=1, sysflag=2 | 4, suspend_ms=15_000)
            held.opaque = 1001
            second = RemotingCommand(
                RC.SEND_MESSAGE, send_fields(TOPIC, 0, props(UNIQ_KEY="second")), b"m1"
            )
            second.opaque = 1002
            if together:
                p.writer.write(held.encode() + second.encode())
            else:
                p.writer.write(held.encode())

                async def is_held() -> bool:
                    return c.broker.pull_processor.held_count == 1

                assert await wait_for(is_held, 10), f"the pull was not held; written {writes}"
                assert writes == []
                p.writer.write(second.encode())
            got: list[RemotingCommand] = []
            async with asyncio.timeout(10):
                while len(got) < 2:
                    data = await p.reader.read(65536)
                    assert data, "the broker closed the connection"
                    got += p.decoder.feed(data)
            assert [(r.opaque, r.code) for r in got] == [(1001, R.SUCCESS), (1002, R.SUCCESS)]
            (m,) = rmqcore.decode_records(got[0].body)
            assert (m["body"], m["queue_offset"]) == (b"m1", 1)
            assert fast.served == 1, "the second send was not served in C"
            # one write held both answers
            assert [[f.opaque for f in FrameDecoder().feed(w)] for w in writes] == [[1001, 1002]]
        finally:
            if p.writer is not None:
                p.writer.close()
            await c.shutdown()

    arun(main(), timeout=60)


def test_stored_sends_are_told_even_when_their_answers_fail(arun, tmp_path):
    """The answers of a chunk served in C go first; if writing them fails,
    the sends are stored all the same, so the bookkeeping after them still
    runs: a pull held on the queue is woken by the arrival notice."""

    async def main() -> None:
        c = LocalCluster(str(tmp_path / "store"))
        await c.start()
        consumer = RemotingClient(name="consumer")
        p = Peer(c)
        try:
            fast = c.broker.server.fast_path
            assert fast is not None
            held = await _pull_held_behind_first_send(p, consumer)
            assert p.writer is not None
            failed: list[int] = []

            def answer_fails(conn: Any, chunk: Any, t0: int) -> None:
                failed.append(chunk.handled)
                raise RuntimeError("the answers could not be written")

            fast._answer = answer_fails  # type: ignore[method-assign]
            second = send_fields(TOPIC, 0, props(UNIQ_KEY="second"))
            p.writer.write(RemotingCommand(RC.SEND_MESSAGE, second, b"m1").encode())
            # well inside the pull's 15 s suspend time: woken, not expired
            r = await asyncio.wait_for(held, 10)
            assert failed == [1], failed
            assert r.code == R.SUCCESS, r
            (m,) = rmqcore.decode_records(r.body)
            assert (m["body"], m["queue_offset"]) == (b"m1", 1)
        finally:
            if p.writer is not None:
                p.writer.close()
            await consumer.shutdown()
            await c.shutdown()

    arun(main(), timeout=60)


@pytest.mark.parametrize("queues", [4, 20])
def test_a_chunk_tells_each_queue_it_reached_once(tmp_path, queues):
    """Sends spread round robin over a topic's queues, served in one chunk:
    its touched list (the arrival notices the loop then gives long-polling
    pulls) names each queue with its new end, once a queue rather than once
    a send while the chunk touches up to 16 queues; past that a queue may
    be named again, the last naming its end."""
    sends = 5 * queues
    core = rmqcore.MessageStoreCore(str(tmp_path / "s"), commit_log_file_size=1 << 20,
                                    warm_mapped_files=False)  # fmt: skip
    try:
        sp = rmqcore.SendPath(core, 4 * 1024 * 1024)
        sp.learn(TOPIC, queues)
        sp.want_touched = True
        frames = b"".join(
            RemotingCommand(
                RC.SEND_MESSAGE,
                send_fields(TOPIC, i % queues, props(KEYS=f"k{i}")),
                b"body %d" % i,
                opaque=i,
            ).encode()
            for i in range(sends)
        )
        chunk = sp.split(frames, 1 << 26, bytes([127, 0, 0, 1, 0, 0, 0x30, 0x39]))
        assert chunk.handled == sends and chunk.used == len(frames)
        ends: dict[tuple[str, int], int] = {}
        for topic, q, end in chunk.touched:
            ends[(topic, q)] = end
        assert ends == {(TOPIC, q): 5 for q in range(queues)}
        if queues <= 16:
            assert len(chunk.touched) == queues
    finally:
        core.close()


def test_split_stops_before_a_send_behind_other_frames(tmp_path):
    """SendPath.split hands back the frames up to the next send it may
    take (a JSON SEND_MESSAGE / V2 request) and says one was left
    (split_again); split again, it takes that send. A leading send it did
    not take (its topic not learned) stops nothing, nor does a send in the
    binary serialization, which the C path never takes."""
    core = rmqcore.MessageStoreCore(str(tmp_path / "s"), commit_log_file_size=1 << 20,
                                    warm_mapped_files=False)  # fmt: skip
    born = bytes([127, 0, 0, 1, 0, 0, 0x30, 0x39])

    def send_frame(opaque: int, topic: str = TOPIC, binary: bool = False) -> bytes:
        cmd = RemotingCommand(
            RC.SEND_MESSAGE, send_fields(topic, 0, props(KEYS=f"k{opaque}")), b"b", opaque=opaque
        )
        if binary:
            cmd.serialize_type = SERIALIZE_ROCKETMQ
        return cmd.encode()

    def pull_frame(opaque: int) -> bytes:
        cmd = pull_cmd(TOPIC, 0, 0)
        cmd.opaque = opaque
        return cmd.encode()

    def opaques(chunk: Any) -> list[int]:
        return [c.opaque for c in FrameDecoder.commands(chunk.frames)]

    try:
        sp = rmqcore.SendPath(core, 4 * 1024 * 1024)
        sp.learn(TOPIC, 4)
        parts = [
            send_frame(1),
            pull_frame(2),
            send_frame(3),
            pull_frame(4),
            send_frame(5, binary=True),
            send_frame(6),
        ]
        buf = b"".join(parts)
        first = sp.split(buf, 1 << 26, born)
        assert (first.handled, opaques(first), first.split_again) == (1, [2], True)
        assert first.used == len(parts[0]) + len(parts[1])
        second = sp.split(buf[first.used :], 1 << 26, born)
        # the binary send is handed back and the JSON one behind it with it:
        # the split stops only before a send it takes
        assert (second.handled, opaques(second), second.split_again) == (1, [4, 5], True)
        third = sp.split(buf[first.used + second.used :], 1 << 26, born)
        assert (third.handled, opaques(third), third.split_again) == (1, [], False)
        assert first.used + second.used + third.used == len(buf)

        unlearned = send_frame(7, topic="NotLearnedT") + pull_frame(8) + send_frame(9)
        rest = sp.split(unlearned, 1 << 26, born)
        assert (rest.handled, opaques(rest), rest.split_again) == (0, [7, 8, 9], False)
        assert rest.used == len(unlearned)
    finally:
        core.close()
