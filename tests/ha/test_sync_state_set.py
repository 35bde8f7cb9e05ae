"""A slave that keeps pace stays in the SyncStateSet under load.

The master drops from the SyncStateSet a slave that has not held
everything it wrote within haMaxTimeSlaveNotCatchup (3 s here). Under a
steady stream of pipelined sends the master's end is always a little
ahead of any acknowledgement, so "caught up" must mean "held everything
the master had a moment ago" (RocketMQ 5's lastCaughtUpTime, taken at a
transfer), not "holds the master's end now": with the latter a randomized
failover run once saw the set shrink to the master alone under load, and
the next master kill found no replica it could elect."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.controllers import ControllerGroup
from tests.chaos._crash_helpers import Admin
from tests.ha.test_failover import roles, wait_settled

TOPIC = "SyncSetT"
#: seconds of load: several times haMaxTimeSlaveNotCatchup
LOAD_S = 12.0


def test_a_slave_keeping_pace_under_pipelined_load_stays_in_the_sync_state_set(
    arun: Any, controller_cluster: tuple[ControllerGroup, ProcessCluster]
) -> None:
    _, c = controller_cluster
    arun(_steady_load(c), timeout=300)


async def _steady_load(c: ProcessCluster) -> None:
    async with Admin(c.namesrv_addr) as admin:
        master = await wait_settled(admin, c)
        await admin.create_topic(c.broker_addr(master), TOPIC, 4)
        sets: list[tuple[int, ...]] = []
        acked = 0
        async with Producer("syncset-pg", c.namesrv_addr, send_msg_timeout=10.0) as p:
            body = b"x" * 1024
            pending: set[asyncio.Future[Any]] = set()
            end = time.monotonic() + LOAD_S
            next_sample = 0.0
            for _ in range(10_000_000):
                now = time.monotonic()
                if now >= end:
                    break
                if now >= next_sample:
                    info = (await roles(admin, c)).get(master, {})
                    sets.append(tuple(json.loads(info.get("syncStateSet", "[]"))))
                    next_sample = now + 0.25
                while len(pending) < 256:
                    pending.add(p.send_async(Message(TOPIC, body)))
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                acked += sum(
                    1
                    for f in done
                    if f.exception() is None and f.result().send_status is SendStatus.SEND_OK
                )
            if pending:
                await asyncio.wait(pending)
    shrunk = [s for s in sets if len(s) < 2]
    print(
        f"\n{acked} pipelined sends acknowledged in {LOAD_S:.0f} s; {len(sets)} samples of the set"
    )
    assert acked > 0
    assert not shrunk, f"the SyncStateSet shrank under load: {shrunk[:3]} of {len(sets)} samples"
