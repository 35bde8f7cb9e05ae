"""PullConsumer (lite pull) against a real NameServer + Broker (LocalCluster,
TCP on 127.0.0.1): subscribe and assign, manual and automatic commits across
restarts, seeks, pause/resume and poll timeouts.

Every wait is bounded; the only timing assertions are lower bounds, plus a
generous upper bound on an idle poll."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from pyrmq import (
    ClientError,
    ConsumeFromWhere,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
)
from pyrmq.testing import LocalCluster

from ._push import send_bodies

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


# -- helpers ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def cluster(tmp_path: Any) -> AsyncIterator[tuple[LocalCluster, Producer]]:
    """A LocalCluster and a started Producer on it."""
    c = LocalCluster(str(tmp_path / "store"))
    await c.start()
    producer = Producer("pg", c.namesrv_addr)
    try:
        await producer.start()
        try:
            yield c, producer
        finally:
            await producer.shutdown()
    finally:
        await c.shutdown()


@contextlib.asynccontextmanager
async def started(pc: PullConsumer) -> AsyncIterator[PullConsumer]:
    await pc.start()
    try:
        yield pc
    finally:
        await pc.shutdown()


def q(topic: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic, "broker-a", queue_id)


async def poll_until(pc: PullConsumer, n: int, timeout: float = 10.0) -> list[MessageExt]:
    """Poll until at least n messages came (fails after timeout s)."""
    out: list[MessageExt] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(out) < n:
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"polled {len(out)} of {n} messages in {timeout}s")
        out.extend(await pc.poll(min(left, 0.5)))
    return out


async def poll_for(pc: PullConsumer, seconds: float) -> list[MessageExt]:
    """Everything poll() returns during `seconds`."""
    out: list[MessageExt] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        out.extend(await pc.poll(left))
    return out


async def wait_assigned(pc: PullConsumer, n: int, timeout: float = 10.0) -> None:
    """Wait until the rebalance started pulling n queues (it adds them one by
    one, so poll() may return messages before the last is in)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(pc.assignment()) < n:
        if loop.time() > deadline:
            raise AssertionError(f"{len(pc.assignment())} of {n} queues assigned")
        await asyncio.sleep(0.01)


def bodies_of(msgs: Iterable[MessageExt]) -> list[str]:
    return [m.body.decode() for m in msgs]


def positions_of(msgs: Iterable[MessageExt]) -> list[tuple[int, int]]:
    return [(m.queue_id, m.queue_offset) for m in msgs]


# -- subscribe / assign ----------------------------------------------------------------------


def test_subscribe_and_poll_get_everything(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            before = [f"b{i}" for i in range(30)]
            await send_bodies(producer, "SubT", before)
            pc = PullConsumer("G_sub", c.namesrv_addr, consume_from_where=FIRST)
            pc.subscribe("SubT")
            async with started(pc):
                got = await poll_until(pc, 30)
                after = [f"a{i}" for i in range(10)]
                await send_bodies(producer, "SubT", after)
                got += await poll_until(pc, 10)
                got += await poll_for(pc, 0.3)
                assert pc.assignment() == {q("SubT", i) for i in range(4)}
            assert sorted(bodies_of(got)) == sorted(before + after)

    arun(main(), timeout=30)


def test_assign_fetched_queues_after_start(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            for i in range(4):
                await send_bodies(producer, "AsgT", [f"q{i}-{j}" for j in range(5)], q("AsgT", i))
            pc = PullConsumer("G_asg", c.namesrv_addr, consume_from_where=FIRST)
            async with started(pc):
                mqs = await pc.fetch_message_queues("AsgT")
                assert mqs == [q("AsgT", i) for i in range(4)]
                pc.assign(mqs[:2])
                got = await poll_until(pc, 10)
                got += await poll_for(pc, 0.3)
                assert pc.assignment() == set(mqs[:2])
                with pytest.raises(ClientError):
                    pc.subscribe("AsgT")
            assert sorted(bodies_of(got)) == sorted(f"q{i}-{j}" for i in (0, 1) for j in range(5))

    arun(main(), timeout=30)


# -- commits ---------------------------------------------------------------------------------


def test_manual_commit_then_restart_resumes_after_the_committed_position(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            await send_bodies(producer, "ManT", [f"m{i}" for i in range(40)])
            everything = set()

            def consumer() -> PullConsumer:
                pc = PullConsumer(
                    "G_man",
                    c.namesrv_addr,
                    consume_from_where=FIRST,
                    auto_commit=False,
                    pull_batch_size=4,
                )
                pc.subscribe("ManT")
                return pc

            async with started(consumer()) as pc:
                await wait_assigned(pc, 4)
                first = await poll_until(pc, 12)
                await pc.commit()
                committed = {mq: pc.position(mq) for mq in pc.assignment()}
                assert sum(committed.values()) == len(first)
                # consumed but never committed: these come again after the restart
                uncommitted = await poll_until(pc, 1)
                everything = set(positions_of(first)) | set(positions_of(uncommitted))
            assert len(everything) == len(first) + len(uncommitted)
            async with started(consumer()) as pc:
                for mq, off in committed.items():
                    assert await pc.committed(mq) == off
                want = {(i, off) for i in range(4) for off in range(10)} - set(positions_of(first))
                second = await poll_until(pc, len(want))
                second += await poll_for(pc, 0.3)
            assert sorted(positions_of(second)) == sorted(want)
            assert set(positions_of(uncommitted)) <= want

    arun(main(), timeout=30)


def test_auto_commit(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            await send_bodies(producer, "AutoT", [f"m{i}" for i in range(20)])

            def consumer() -> PullConsumer:
                pc = PullConsumer(
                    "G_auto", c.namesrv_addr, consume_from_where=FIRST, auto_commit_interval=0.2
                )
                pc.subscribe("AutoT")
                return pc

            async with started(consumer()) as pc:
                got = await poll_until(pc, 20)
                assert sorted(bodies_of(got)) == sorted(f"m{i}" for i in range(20))
                ends = {q("AutoT", i): 0 for i in range(4)}
                for m in got:
                    mq = q("AutoT", m.queue_id)
                    ends[mq] = max(ends[mq], m.queue_offset + 1)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while [await pc.committed(mq) for mq in ends] != list(ends.values()):
                    assert loop.time() < deadline, "the auto commit did not happen"
                    await asyncio.sleep(0.05)
            await send_bodies(producer, "AutoT", ["new1", "new2", "new3"])
            async with started(consumer()) as pc:
                again = await poll_until(pc, 3)
                again += await poll_for(pc, 0.3)
            assert sorted(bodies_of(again)) == ["new1", "new2", "new3"]

    arun(main(), timeout=30)


# -- positions -------------------------------------------------------------------------------


def test_seek_family(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            mq = q("SeekT", 0)
            await send_bodies(producer, "SeekT", [f"a{i}" for i in range(5)], mq)
            await asyncio.sleep(0.05)
            ts = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            await send_bodies(producer, "SeekT", [f"b{i}" for i in range(5)], mq)
            pc = PullConsumer("G_seek", c.namesrv_addr, consume_from_where=FIRST)
            async with started(pc):
                pc.assign([mq])
                assert [m.queue_offset for m in await poll_until(pc, 10)] == list(range(10))
                assert pc.position(mq) == 10

                await pc.seek(mq, 3)
                assert pc.position(mq) == 3
                assert [m.queue_offset for m in await poll_until(pc, 7)] == list(range(3, 10))

                await pc.seek_to_begin(mq)
                assert [m.queue_offset for m in await poll_until(pc, 10)] == list(range(10))

                assert await pc.offset_for_timestamp(mq, ts) == 5
                await pc.seek_to_timestamp(mq, ts)
                got = await poll_until(pc, 5)
                assert bodies_of(got) == [f"b{i}" for i in range(5)]

                await pc.seek(mq, 2)
                await pc.seek_to_end(mq)
                assert pc.position(mq) == 10
                assert await poll_for(pc, 0.3) == []
                await send_bodies(producer, "SeekT", ["c0"], mq)
                assert bodies_of(await poll_until(pc, 1)) == ["c0"]

                for bad in (12, -1):  # valid: 0 ..= max offset (11)
                    with pytest.raises(ClientError):
                        await pc.seek(mq, bad)
                with pytest.raises(ClientError):
                    await pc.seek(q("SeekT", 1), 0)  # not assigned
                assert pc.position(mq) == 11

    arun(main(), timeout=30)


def test_pause_and_resume(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            q0, q1 = q("PauseT", 0), q("PauseT", 1)
            await send_bodies(producer, "PauseT", ["x0"], q0)
            pc = PullConsumer("G_pause", c.namesrv_addr, consume_from_where=FIRST)
            async with started(pc):
                pc.assign([q0, q1])
                assert bodies_of(await poll_until(pc, 1)) == ["x0"]
                pc.pause([q0])
                await send_bodies(producer, "PauseT", [f"p{i}" for i in range(5)], q0)
                await send_bodies(producer, "PauseT", [f"r{i}" for i in range(5)], q1)
                got = await poll_until(pc, 5)
                got += await poll_for(pc, 1.0)
                # the paused queue gives nothing; the other one goes on
                assert sorted(bodies_of(got)) == [f"r{i}" for i in range(5)]
                pc.resume([q0])
                got = await poll_until(pc, 5)
                got += await poll_for(pc, 0.3)
                assert bodies_of(got) == [f"p{i}" for i in range(5)]  # in queue order

    arun(main(), timeout=30)


def test_poll_timeout_returns_empty_when_nothing_comes(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, producer):
            await send_bodies(producer, "IdleT", ["old"])
            pc = PullConsumer("G_idle", c.namesrv_addr, consume_from_where=LAST)
            pc.subscribe("IdleT")
            with pytest.raises(ClientError):
                await pc.poll(0.1)  # not started
            async with started(pc):
                for timeout in (0.0, 0.3):
                    t0 = time.monotonic()
                    assert await pc.poll(timeout) == []
                    took = time.monotonic() - t0
                    assert took >= timeout - 0.01
                    assert took < timeout + 3.0  # generous: "quickly", not "exactly"

    arun(main(), timeout=30)
