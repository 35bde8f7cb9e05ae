"""pyrmq_replication_slave_behind_bytes with a real master and slave
(ProcessCluster: broker-a ASYNC_MASTER, broker-a-s its SLAVE, metrics on
both): once the slave holds what was sent, the master reports it 0 bytes
behind under its brokerId, the slave reports itself 0 behind, and both
report the same CommitLog size."""

from __future__ import annotations

import asyncio
import pathlib

from pyrmq import Message, Producer, SendStatus
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until

from ._scrape import scrape, series, total

MASTER, SLAVE = "broker-a", "broker-a-s"
SENT = 300
PROM = {
    "metricsExporterType": "PROM",
    "metricsPromExporterHost": "127.0.0.1",
    "metricsPromExporterPort": 0,
}


def test_slave_behind_bytes(tmp_path: pathlib.Path) -> None:
    c = ProcessCluster(
        tmp_path,
        (MASTER, SLAVE),
        broker_conf={"haSendHeartbeatInterval": 500, **PROM},
        per_broker_conf={SLAVE: {"brokerName": MASTER, "brokerId": 1, "brokerRole": "SLAVE"}},
    )
    try:
        c.start()
        on_master = str(c.brokers[MASTER].info["metrics"])
        on_slave = str(c.brokers[SLAVE].info["metrics"])

        async def main() -> None:
            loop = asyncio.get_running_loop()

            async def get(addr: str) -> str:
                return await loop.run_in_executor(None, scrape, addr)

            async with Producer("PID_metrics_ha", namesrv_addr=c.namesrv_addr) as p:
                for i in range(SENT):
                    r = await p.send(Message("MetricsHa", b"%04d" % i * 256))
                    assert r.send_status == SendStatus.SEND_OK
            seen: dict[str, float] = {}

            async def caught_up() -> bool:
                m, s = await get(on_master), await get(on_slave)
                behind = series(m, "pyrmq_replication_slave_behind_bytes")
                mine = series(s, "pyrmq_replication_slave_behind_bytes")
                seen["master"] = total(m, "rocketmq_storage_size")
                seen["slave"] = total(s, "rocketmq_storage_size")
                return (
                    [(ls["slave_id"], v) for ls, v in behind] == [("1", 0.0)]
                    and [(ls["slave_id"], v) for ls, v in mine] == [("1", 0.0)]
                    and seen["master"] == seen["slave"]
                )

            await wait_until(
                caught_up, "the slave caught up", progress=lambda: seen.get("slave"), stall_after=30
            )
            assert seen["master"] > SENT * 1024
            m = await get(on_master)
            assert total(m, "rocketmq_messages_in_total", topic="MetricsHa") == SENT

        asyncio.run(asyncio.wait_for(main(), 180))
    finally:
        c.shutdown()
