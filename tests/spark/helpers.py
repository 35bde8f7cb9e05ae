"""Helpers of the Spark tests: create topics, and read a topic back with
the plain pyrmq client (independent of the data source under test)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pyrmq import sync
from pyrmq.admin import AdminClient
from pyrmq.client.instance import ClientInstance
from pyrmq.common.message import MessageExt
from tests._reading import read_queue


def create_topic(ns: str, topic: str, queues: int = 4) -> None:
    async def go() -> None:
        async with AdminClient(ns) as admin:
            await admin.create_topic(topic, queues, queues)
            # the name server learns the topic with the broker's registration
            for _ in range(100):
                if await admin.client.update_topic_route(topic) is not None:
                    return
                await asyncio.sleep(0.1)
            raise AssertionError(f"topic {topic} never reached the name server")

    sync.run(go(), 30)


def read_topic(ns: str, topic: str) -> list[MessageExt]:
    """Every message stored in `topic`, queue by queue, by plain pulls;
    safe to call while a writer is still sending to it."""

    async def go() -> list[MessageExt]:
        client = ClientInstance(ns)
        try:
            route = await client.update_topic_route(topic)
            assert route is not None, f"no route for {topic}"
            out: list[MessageExt] = []
            for mq in route.subscribe_queues(topic):
                bd = route.broker_data(mq.broker_name)
                assert bd is not None
                addr = bd.select_broker_addr()
                assert addr is not None
                lo = await client.api.get_min_offset(addr, mq)
                # a writer may still be sending (the streaming tests poll
                # this): everything below the max offset taken before the
                # read must come back, gap-free, and nothing past the one
                # taken after it
                hi = await client.api.get_max_offset(addr, mq)
                got = await read_queue(client.api, addr, mq, start=lo, group="spark-test-verify")
                hi_after = await client.api.get_max_offset(addr, mq)
                offsets = [m.queue_offset for m in got]
                assert offsets == list(range(lo, lo + len(got))), f"{mq}: gaps in {offsets}"
                assert hi - lo <= len(got) <= hi_after - lo, (mq, lo, hi, len(got), hi_after)
                out.extend(got)
            return out
        finally:
            await client.shutdown()

    return sync.run(go(), 300)


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
