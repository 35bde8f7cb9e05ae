"""Master/slave replication with real processes (ProcessCluster): broker-a
as master and broker-a-s as its SLAVE (brokerName broker-a, brokerId 1),
one name server, the pyrmq client and the RocketMQ C++ client as load.

Counts, not timings: every message a SYNC_MASTER answered SEND_OK must be
readable from the slave after the master's process and its disk are gone."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
from collections import Counter
from typing import Any

import pytest

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import SendStatus
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer
from pyrmq.remoting import RequestCode
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin, CppLoad
from tests.ha.conftest import MASTER, SLAVE

QUEUES = 4


async def runtime(admin: Admin, addr: str) -> dict[str, str]:
    resp = await admin.api.broker_request(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=3.0)
    return dict(json.loads(resp.body)["table"])


async def slave_topics(admin: Admin, addr: str) -> set[str]:
    resp = await admin.api.broker_request(addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout=3.0)
    return set(json.loads(resp.body)["topicConfigTable"])


async def replicated(admin: Admin, c: ProcessCluster, topic: str) -> None:
    """Wait until the slave is connected and knows the topic."""

    async def ready() -> bool:
        try:
            info = await runtime(admin, c.broker_addr(MASTER))
            return int(info["haConnections"]) >= 1 and topic in await slave_topics(
                admin, c.broker_addr(SLAVE)
            )
        except RMQError:
            return False

    await wait_until(ready, f"slave connected and holding {topic}", stall_after=30)


def counting(counts: Counter[str]) -> Any:
    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            counts[m.body.decode()] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    return listener


def consumer(c: ProcessCluster, group: str, topic: str, counts: Counter[str]) -> PushConsumer:
    pc = PushConsumer(
        group,
        c.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=1.0,
        poll_name_server_interval=1.0,
    )
    pc.subscribe(topic)
    pc.register_message_listener(counting(counts))
    return pc


async def consumed_by_new_group(
    c: ProcessCluster,
    group: str,
    topic: str,
    acked: set[str],
    what: str = "a new group receiving every acknowledged message",
) -> Counter[str]:
    """Start a group reading topic from its first offset and wait until it
    received every body in acked; its deliveries by body."""
    got: Counter[str] = Counter()
    reader = consumer(c, group, topic, got)
    await reader.start()
    try:
        await wait_until(lambda: acked <= set(got), what, progress=lambda: len(got))
    finally:
        await reader.shutdown()
    return got


def test_sync_master_loses_nothing_acknowledged_when_master_and_its_disk_die(
    arun: Any, sync_cluster: ProcessCluster, tmp_path: pathlib.Path
) -> None:
    arun(_sync_master_survives(sync_cluster, tmp_path), timeout=400)


async def _sync_master_survives(c: ProcessCluster, tmp_path: pathlib.Path) -> None:
    topic = "HaSyncT"
    async with Admin(c.namesrv_addr) as admin:
        await admin.create_topic(c.broker_addr(MASTER), topic, QUEUES)
        await replicated(admin, c, topic)
        # the slave refuses sends (SERVICE_NOT_AVAILABLE, saying why)
        fields = {
            "producerGroup": "ha-probe",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "0",
            "flag": "0",
            "properties": "",
            "reconsumeTimes": "0",
        }
        with pytest.raises(RMQError, match="slave"):
            await admin.api.broker_request(
                c.broker_addr(SLAVE), RequestCode.SEND_MESSAGE, fields, b"x"
            )

        cpp = CppLoad(c.namesrv_addr, topic, "ha-cpp", "cpp", tmp_path / "cpp.log")
        cpp.start()
        running: Counter[str] = Counter()
        live = consumer(c, "ha-running", topic, running)
        await live.start()
        acked: set[str] = set()
        other: Counter[str] = Counter()
        failed = 0
        stop = asyncio.Event()

        async def sender(k: int) -> None:
            nonlocal failed
            async with Producer(f"ha-pg-{k}", c.namesrv_addr, send_msg_timeout=3.0) as p:
                for i in range(100_000):
                    if stop.is_set():
                        return
                    body = f"py-{k}-{i}"
                    try:
                        r = await p.send(Message(topic, body.encode()))
                    except RMQError:
                        failed += 1
                        await asyncio.sleep(0.05)
                        continue
                    if r.send_status is SendStatus.SEND_OK:
                        acked.add(body)
                    else:
                        other[r.send_status.name] += 1

        senders = [asyncio.create_task(sender(k)) for k in range(8)]
        try:
            await wait_until(
                lambda: len(acked) >= 400 and cpp.counts()[0] >= 50,
                "400 pyrmq and 50 C++ acknowledged sends before the kill",
                progress=lambda: (len(acked), cpp.counts()[0]),
            )
            c.kill_broker(MASTER)
            shutil.rmtree(c.store_dir(MASTER))
            killed_at = (len(acked), cpp.counts()[0])
            # sends go on failing (the only master is gone) for a moment
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.gather(*senders)
            cpp.stop_sending()
            cpp_acked = set(cpp.tally.acked)
            everything = acked | cpp_acked

            fresh: Counter[str] = Counter()
            late = consumer(c, "ha-fresh", topic, fresh)
            await late.start()
            try:
                for what, counts in (("a new group", fresh), ("the running group", running)):
                    await wait_until(
                        lambda counts=counts: everything <= set(counts),
                        f"{what} receiving every acknowledged message from the slave",
                        progress=lambda counts=counts: len(counts),
                    )
                await wait_until(
                    lambda: cpp_acked <= cpp.received(),
                    "the C++ consumer receiving every C++ acknowledged message",
                    progress=lambda: len(cpp.received()),
                )
            finally:
                await late.shutdown()
        finally:
            stop.set()
            for t in senders:
                t.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
            await live.shutdown()
            cpp.close()
    print(
        f"\nSYNC_MASTER+SYNC_FLUSH, master SIGKILLed and its store deleted: acknowledged "
        f"pyrmq {len(acked)} (at the kill {killed_at[0]}), C++ {len(cpp_acked)} "
        f"(at the kill {killed_at[1]}); failed sends {failed}; other answers {dict(other)}; "
        f"read from the slave by a new group {len(everything & set(fresh))} of "
        f"{len(everything)}, by the running group {len(everything & set(running))}: 0 lost"
    )


def test_sync_master_answers_slave_not_available_without_a_slave(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    arun(_no_slave(tmp_path), timeout=120)


async def _no_slave(tmp_path: pathlib.Path) -> None:
    c = ProcessCluster(
        tmp_path / "solo",
        (MASTER,),
        broker_conf={"flushDiskType": "ASYNC_FLUSH"},
        per_broker_conf={MASTER: {"brokerRole": "SYNC_MASTER"}},
    )
    try:
        c.start()
        async with Admin(c.namesrv_addr) as admin:
            await admin.create_topic(c.broker_addr(MASTER), "HaSoloT", QUEUES)
            async with Producer("ha-solo", c.namesrv_addr) as p:
                r = await p.send(Message("HaSoloT", b"only on the master"))
            assert r.send_status is SendStatus.SLAVE_NOT_AVAILABLE
            # stored on the master all the same
            mq = MessageQueue("HaSoloT", MASTER, r.message_queue.queue_id)
            got = await admin.read_queue(c.broker_addr(MASTER), mq)
            assert [m.body for m in got] == [b"only on the master"]
    finally:
        c.shutdown()


def test_offsets_committed_while_the_master_is_away_survive_its_return(
    arun: Any, async_cluster: ProcessCluster
) -> None:
    arun(_offsets_survive(async_cluster), timeout=300)


async def _offsets_survive(c: ProcessCluster) -> None:
    topic, group = "HaOffsetsT", "ha-offsets"
    mqs = [MessageQueue(topic, MASTER, q) for q in range(QUEUES)]
    async with Admin(c.namesrv_addr) as admin:

        async def committed(addr: str) -> int:
            total = 0
            for mq in mqs:
                try:
                    off = await admin.api.query_consumer_offset(addr, group, mq)
                except RMQError:
                    off = None
                total += off or 0
            return total

        await admin.create_topic(c.broker_addr(MASTER), topic, QUEUES)
        await replicated(admin, c, topic)
        async with Producer("ha-offsets-pg", c.namesrv_addr) as p:
            for i in range(200):
                assert (await p.send(Message(topic, f"old-{i}".encode()))).send_status is (
                    SendStatus.SEND_OK
                )
        top = int((await runtime(admin, c.broker_addr(MASTER)))["commitLogMaxOffset"])
        await wait_until(
            lambda: _slave_at(admin, c, top), "the slave holding every message", stall_after=30
        )
        c.kill_broker(MASTER)  # its store stays
        got: Counter[str] = Counter()
        first = consumer(c, group, topic, got)
        await first.start()
        await wait_until(
            lambda: len(got) >= 200, "200 read from the slave", progress=lambda: len(got)
        )
        await first.shutdown()  # commits its offsets, to the slave
        slave_view = await committed(c.broker_addr(SLAVE))
        assert slave_view == 200, slave_view
        await c.start_broker_async(MASTER)
        await wait_until(
            lambda: _eq(committed(c.broker_addr(MASTER)), 200),
            "the returning master taking the offsets its slave got",
            stall_after=30,
        )
        later: Counter[str] = Counter()
        second = consumer(c, group, topic, later)
        await second.start()
        try:
            async with Producer("ha-offsets-pg2", c.namesrv_addr) as p:
                for i in range(10):
                    await p.send(Message(topic, f"new-{i}".encode()))
            await wait_until(
                lambda: len(later) >= 10, "the 10 new messages", progress=lambda: len(later)
            )
            # a queue is read in offset order: had the group started from old
            # offsets, the old messages would have come before the new ones
            assert set(later) == {f"new-{i}" for i in range(10)}, sorted(later)[:5]
        finally:
            await second.shutdown()


async def _slave_at(admin: Admin, c: ProcessCluster, top: int) -> bool:
    return int((await runtime(admin, c.broker_addr(SLAVE)))["commitLogMaxOffset"]) >= top


async def _eq(value: Any, want: int) -> bool:
    return await value == want
