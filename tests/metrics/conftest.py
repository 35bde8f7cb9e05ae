"""The real run the metrics tests read: a standalone server (NameServer +
Broker as a subprocess, metricsExporterType=PROM on an ephemeral port),
pyrmq's producer and pull consumers over real sockets, the endpoint scraped
over HTTP after the consumers committed, and again after more sends."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import pathlib
from collections.abc import Iterator

import pytest

from pyrmq import ConsumeFromWhere, Message, Producer, PullConsumer, SendStatus
from pyrmq.storage.clean import disk_used_ratio
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests._waiting import wait_until

from ._scrape import scrape, total

PROM = {
    "metricsExporterType": "PROM",
    "metricsPromExporterHost": "127.0.0.1",
    "metricsPromExporterPort": 0,
    # time every request: the test counts them exactly (the default samples)
    "metricsRpcLatencySampleEvery": 1,
}
SENT_A, SENT_B, MORE_B = 200, 120, 30
BODY_A, BODY_B = b"a" * 100, b"b" * 2000
GROUP_A, GROUP_B = "GID_metrics_caught_up", "GID_metrics_lagging"


@dataclasses.dataclass
class RealRun:
    pid: int
    metrics: str
    ok_a: int
    ok_b: int
    consumed_a: int
    committed_b: int
    #: scrapes: after the commits, then after MORE_B more sends to topic B
    first: str
    second: str


def _warning_above_disk_use(path: pathlib.Path) -> int:
    """A diskSpaceWarningLevelRatio (percent) well above how full the disk
    under path is now (by the broker's own measure), so that the run does
    not depend on what else fills the machine's disk; at least RocketMQ's
    default, 90."""
    return min(100, max(90, math.ceil(disk_used_ratio(str(path)) * 100) + 5))


@pytest.fixture(scope="module")
def disk_warning_level(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The server's diskSpaceWarningLevelRatio, percent."""
    return _warning_above_disk_use(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, disk_warning_level: int
) -> Iterator[StandaloneProcess]:
    disk = {"diskSpaceWarningLevelRatio": disk_warning_level}
    srv = StandaloneProcess(tmp_path_factory.mktemp("metrics"), {**SMALL_STORE, **PROM, **disk})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _poll_until(consumer: PullConsumer, want: int, what: str) -> int:
    got = [0]

    async def enough() -> bool:
        got[0] += len(await consumer.poll(0.5))
        return got[0] >= want

    await wait_until(enough, what, progress=lambda: got[0], stall_after=30, step=0.01)
    return got[0]


async def _run(srv: StandaloneProcess) -> RealRun:
    ns, maddr = srv.namesrv, str(srv.info["metrics"])
    loop = asyncio.get_running_loop()

    async def get() -> str:
        return await loop.run_in_executor(None, scrape, maddr)

    async with Producer("PID_metrics", namesrv_addr=ns) as producer:
        ok_a = ok_b = 0
        for _ in range(SENT_A):
            r = await producer.send(Message("MetricsA", BODY_A))
            ok_a += r.send_status == SendStatus.SEND_OK
        for _ in range(SENT_B):
            r = await producer.send(Message("MetricsB", BODY_B))
            ok_b += r.send_status == SendStatus.SEND_OK
        first_from = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        a = PullConsumer(GROUP_A, ns, consume_from_where=first_from, auto_commit=False)
        b = PullConsumer(
            GROUP_B, ns, consume_from_where=first_from, auto_commit=False, pull_batch_size=8
        )
        a.subscribe("MetricsA")
        b.subscribe("MetricsB")
        async with a, b:
            consumed_a = await _poll_until(a, ok_a, "group A consumed everything")
            await a.commit()
            await _poll_until(b, 40, "group B consumed some")
            await b.commit()
            committed_b = 0
            for mq in b.assignment():
                committed_b += max(0, await b.committed(mq))
            assert 0 < committed_b < ok_b

            async def lag_seen() -> bool:
                text = await get()
                lag_a = total(text, "rocketmq_consumer_lag_messages", consumer_group=GROUP_A)
                lag_b = total(text, "rocketmq_consumer_lag_messages", consumer_group=GROUP_B)
                conns = total(text, "rocketmq_consumer_connections")
                return lag_a == 0 and lag_b == ok_b - committed_b and conns >= 2

            await wait_until(lag_seen, "the committed offsets in the lag", stall_after=30)
            first = await get()
            for _ in range(MORE_B):
                r = await producer.send(Message("MetricsB", BODY_B))
                ok_b += r.send_status == SendStatus.SEND_OK
            second = await get()
    return RealRun(srv.proc.pid if srv.proc else 0, maddr, ok_a, ok_b, consumed_a, committed_b,
                   first, second)  # fmt: skip


@pytest.fixture(scope="module")
def real_run(server: StandaloneProcess) -> RealRun:
    async def bounded() -> RealRun:
        async with asyncio.timeout(240):
            return await _run(server)

    return asyncio.run(bounded())
