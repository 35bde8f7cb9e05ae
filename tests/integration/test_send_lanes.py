"""The C send threads (sendMessageThreadPoolNums > 1, rmqcore/_sendlanes.pyx):
chunks of pipelined sends served off the event loop keep each
connection's order, lose nothing across a shutdown, and leave the loop's
own store calls (reads, Python-path puts) working beside them. The
records and answers themselves are pinned to the Python path by
test_send_fast.py::test_c_path_matches_python_path[on-send-threads]."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import rmqcore
from pyrmq.broker.config import BrokerConfig
from pyrmq.common.errors import ClientError
from pyrmq.remoting import RemotingClient
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.command import FrameDecoder, RemotingCommand
from pyrmq.testing import LocalCluster

from .helpers import create_topic, props, send_fields

TOPIC = "LaneT"
QUEUES = 4


def _send(conn: int, n: int, queue: int, opaque: int, delay: bool = False) -> bytes:
    key = f"{'d' if delay else 'c'}{conn}-{n}"
    p = {"UNIQ_KEY": key, "KEYS": key}
    if delay:
        p["DELAY"] = "1"
    fields = send_fields(TOPIC, queue, props(**p))
    return RemotingCommand(RC.SEND_MESSAGE, fields, b"%064d" % n, opaque=opaque).encode()


async def _connect(addr: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = addr.split(":")
    return await asyncio.open_connection(host, int(port))


async def _teach(addr: str) -> None:
    """Create TOPIC and send it one message: the Python path teaches the
    C path the topic."""
    cl = RemotingClient(name="lanes-test")
    try:
        await create_topic(cl, addr, TOPIC, QUEUES)
    finally:
        await cl.shutdown()
    r, w = await _connect(addr)
    w.write(_send(99, 0, 0, 1))
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    while not got:
        data = await asyncio.wait_for(r.read(65536), 30)
        assert data
        got = dec.feed(data)
    assert got[0].code == R.SUCCESS
    w.close()


def _keys(core: Any, queue: int) -> list[str]:
    """The UNIQ_KEYs of TOPIC's queue, in queue order."""
    keys: list[str] = []
    offset = 0
    end = core.max_offset_in_queue(TOPIC, queue)
    while offset < end:
        res = core.get_message(TOPIC, queue, offset, 32)
        for m in rmqcore.decode_records(core.read_ranges(res.ranges), True):
            keys.append(rmqcore.decode_properties(m["properties"]).get("UNIQ_KEY", ""))
        assert res.next_begin_offset > offset
        offset = res.next_begin_offset
    return keys


@pytest.mark.parametrize("hold", ["kept", "held"])
def test_connections_keep_their_order_on_send_threads(arun, tmp_path, hold):
    """Six connections pipeline bursts of 300 sends (chunks well past the
    threads' 16 KiB minimum). In each burst, after 200 sends, a delayed
    send (the Python path's) and a GET_MAX_OFFSET of the connection's
    queue: that answer counts every send before it, so the frames after a
    chunk a thread served ran after its puts. Meanwhile the loop reads the
    queues. Every send is answered SUCCESS with its own queue offset, each
    connection's messages are stored in the order sent, and the threads
    served most of them. What a connection reads while its chunk is on a
    thread is kept ("kept"), or, past lane_hold_bytes (here at once:
    "held"), waits in the socket until the chunk is back."""
    conns, bursts, per_burst = 6, 5, 300

    async def one_conn(c: LocalCluster, k: int) -> list[str]:
        queue = k % QUEUES
        r, w = await _connect(c.broker_addr)
        dec = FrameDecoder()
        sent = 0
        keys: list[str] = []
        try:
            for b in range(bursts):
                frames = []
                asked = {}
                for i in range(per_burst):
                    opaque = b * (per_burst + 2) + i
                    frames.append(_send(k, sent, queue, opaque))
                    keys.append(f"c{k}-{sent}")
                    sent += 1
                    if i == 199:
                        frames.append(_send(k, b, queue, 10_000_000 + b, delay=True))
                        ask = RemotingCommand(
                            RC.GET_MAX_OFFSET,
                            {"topic": TOPIC, "queueId": str(queue)},
                            opaque=20_000_000 + b,
                        )
                        frames.append(ask.encode())
                        asked[ask.opaque] = sent
                w.write(b"".join(frames))
                want = len(frames)
                got = 0
                while got < want:
                    data = await asyncio.wait_for(r.read(1 << 20), 60)
                    assert data, f"connection {k} closed after {got} answers of burst {b}"
                    for a in dec.feed(data):
                        got += 1
                        assert a.code == R.SUCCESS, (k, a.opaque, a.code, a.remark)
                        if a.opaque in asked:
                            # this connection's sends before it are stored
                            assert int(a.ext_fields["offset"]) >= asked[a.opaque], a
        finally:
            w.close()
        return keys

    async def read_meanwhile(c: LocalCluster, stop: asyncio.Event) -> int:
        core = c.broker.store.core
        reads = 0
        while not stop.is_set():
            for q in range(QUEUES):
                core.get_message(TOPIC, q, 0, 32)
                core.max_offset_in_queue(TOPIC, q)
                reads += 1
            await asyncio.sleep(0.001)
        return reads

    async def main() -> None:
        c = LocalCluster(str(tmp_path / "s"), send_message_thread_pool_nums=2)
        await c.start()
        try:
            if hold == "held":
                c.broker.server.fast_path.lane_hold_bytes = 1
            await _teach(c.broker_addr)
            stop = asyncio.Event()
            reader = asyncio.ensure_future(read_meanwhile(c, stop))
            sent = await asyncio.gather(*(one_conn(c, k) for k in range(conns)))
            stop.set()
            assert await reader > 0
            fast = c.broker.server.fast_path
            total = conns * bursts * per_burst
            assert fast.served_on_lanes > total // 2, (fast.served, fast.served_on_lanes)
            print(f"{total} sends, {fast.served} in C, {fast.served_on_lanes} on the threads,"
                  f" {fast.lane_holds} holds on reading")
            if hold == "held":
                assert fast.lane_holds > 0
            # each connection's messages, in its queue, in the order sent
            core = c.broker.store.core
            for k, keys in enumerate(sent):
                q = k % QUEUES
                stored = [key for key in _keys(core, q) if key.startswith(f"c{k}-")]
                assert stored == keys, f"connection {k}: {len(stored)} of {len(keys)} in order"
        finally:
            await c.shutdown()

    arun(main(), timeout=240)


def test_shutdown_with_chunks_on_the_threads(arun, tmp_path):
    """The broker shuts down while four connections keep chunks on the C
    send threads: it stops within bounds, and after a restart every send
    it answered SUCCESS is in the store at the queue offset it gave."""

    async def blast(
        addr: str, k: int, acked: list[tuple[int, int, str]], stop: asyncio.Event
    ) -> None:
        r, w = await _connect(addr)
        dec = FrameDecoder()
        keyed: dict[int, str] = {}
        n = 0
        try:
            while not stop.is_set() and n < 200_000:
                frames = []
                for _ in range(200):
                    keyed[n] = f"c{k}-{n}"
                    frames.append(_send(k, n, k % QUEUES, n))
                    n += 1
                w.write(b"".join(frames))
                with contextlib.suppress(asyncio.TimeoutError):
                    data = await asyncio.wait_for(r.read(1 << 20), 0.5)
                    if not data:
                        return
                    for a in dec.feed(data):
                        if a.code == R.SUCCESS:
                            acked.append(
                                (k % QUEUES, int(a.ext_fields["queueOffset"]), keyed[a.opaque])
                            )
                await asyncio.sleep(0)
        except (ConnectionError, OSError):
            return
        finally:
            w.close()

    async def main() -> None:
        root = str(tmp_path / "s")
        c = LocalCluster(root, send_message_thread_pool_nums=2)
        await c.start()
        acked: list[tuple[int, int, str]] = []
        stop = asyncio.Event()
        tasks: list[asyncio.Future[None]] = []
        try:
            await _teach(c.broker_addr)
            tasks = [asyncio.ensure_future(blast(c.broker_addr, k, acked, stop)) for k in range(4)]
            deadline = asyncio.get_running_loop().time() + 60
            while c.broker.server.fast_path.served_on_lanes < 5_000:
                assert asyncio.get_running_loop().time() < deadline, "no chunk reached a thread"
                await asyncio.sleep(0.05)
        finally:
            await asyncio.wait_for(c.shutdown(), 60)
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert acked
        print(f"{len(acked)} sends answered before the shutdown, checked after it")
        again = LocalCluster(root)
        await again.start()
        try:
            core = again.broker.store.core
            stored = {q: _keys(core, q) for q in range(QUEUES)}
            for q, offset, key in acked:
                assert offset < len(stored[q]) and stored[q][offset] == key, (q, offset, key)
        finally:
            await again.shutdown()

    arun(main(), timeout=240)


@pytest.mark.parametrize("value", [0, 66, -1])
def test_thread_count_is_checked(value: int) -> None:
    with pytest.raises(ClientError, match=f"sendMessageThreadPoolNums={value}: expected 1..65"):
        BrokerConfig(send_message_thread_pool_nums=value)


def test_default_is_the_event_loop_alone() -> None:
    # RocketMQ 4.x's default; on 2 vCPUs the threads did not pay
    # (bench/README.md, "More than one core")
    assert BrokerConfig().send_message_thread_pool_nums == 1
