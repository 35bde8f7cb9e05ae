"""Scenario 5, overload: producers faster than the disk, consumers that never
acknowledge, and a consumer group whose listener always fails.

The promise: the broker's memory stays bounded (its heap, RssAnon, sampled
from /proc while it runs: the CommitLog pages it maps are file pages and are
reported, not bounded); producers hear of the overload (SYSTEM_BUSY, code 2,
or the wait itself) instead of the broker queueing without limit; failed
messages are retried at the delay levels and end in %DLQ%<group>; and
nothing is dropped silently: every id a producer sent was either
acknowledged and is stored, or failed with an error it was given.

A deterministic regression first (an in-process broker whose flush thread
is held up), then the scenarios against a broker subprocess."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest

from pyrmq import Message, Producer
from pyrmq.common.errors import SystemBusyError
from pyrmq.common.results import SendStatus
from pyrmq.storage import FlushDiskType
from pyrmq.testing import LocalCluster
from tests.chaos._overload import wait_until


def _stored(store: Any, topic: str, queues: int = 16) -> int:
    return sum(store.max_offset_in_queue(topic, q) for q in range(queues))


def test_sends_are_answered_system_busy_while_the_disk_lags(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """SYNC_FLUSH with a disk that stops answering (the flush thread is held
    for 1.5 s): a send already written waits for its flush; once it has
    waited osPageCacheBusyTimeOutMills, new sends are answered SYSTEM_BUSY
    [PCBUSY_CLEAN_QUEUE] before anything is written, and the producer tries
    them again (code 2 is retriable, as in RocketMQ 5) before giving up. Past
    sendThreadPoolQueueCapacity waiting sends, [OVERLOAD]. When the disk is
    back the waiting send is acknowledged and new ones are taken."""

    async def main() -> None:
        async with LocalCluster(
            str(tmp_path / "store"),
            flush_disk_type=FlushDiskType.SYNC_FLUSH,
            os_page_cache_busy_time_out_mills=200,
            send_thread_pool_queue_capacity=3,
        ) as c:
            assert c.broker is not None and c.broker.store is not None
            store = c.broker.store
            topic = "BusyT"
            async with Producer("pg_busy", c.namesrv_addr, send_msg_timeout=10) as producer:
                await producer.send(Message(topic, b"warm"))
                stall = store._io.run("flush-commitlog", time.sleep, 1.5)  # the disk hangs
                waiting = [producer.send_async(Message(topic, b"waits-%d" % i)) for i in range(3)]
                await wait_until(lambda: store.flush_backlog[0] == 3, "3 sends waiting", 10)
                with pytest.raises(SystemBusyError, match=r"^\[OVERLOAD\]") as overload:
                    await producer.send(Message(topic, b"refused-1"))
                assert c.broker.send_processor.busy_refusals == 3  # tried three times
                await wait_until(lambda: store.flush_backlog[1] > 0.3, "the wait to age", 10)
                c.broker.send_processor.send_queue_capacity = 10_000
                with pytest.raises(SystemBusyError, match=r"^\[PCBUSY_CLEAN_QUEUE\]") as busy:
                    await producer.send(Message(topic, b"refused-2"))
                for e in (overload.value, busy.value):
                    assert e.code == 2
                    assert any("3 attempt(s)" in n for n in e.__notes__), e.__notes__
                await stall
                results = await asyncio.gather(*waiting)
                assert [r.send_status for r in results] == [SendStatus.SEND_OK] * 3
                assert (await producer.send(Message(topic, b"after"))).ok
            assert _stored(store, topic) == 5  # warm, 3 waiting, after: no refused one

    arun(main(), timeout=60)
