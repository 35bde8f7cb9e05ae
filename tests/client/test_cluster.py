"""The client against a real two-broker cluster: one NameServer and brokers
broker-a and broker-b, each a `python -m pyrmq` process (ProcessCluster), so
a broker can be SIGKILLed mid-stream and started again on its store.

Every topic gets 4 queues on each broker (8 in all). Brokers use 1 s for every
delay level so retries reach the dead-letter queue in seconds. Messages are
told apart by body; each test compares the set of bodies the brokers
acknowledged with the set (or multiset) consumers received. Measured figures
(failed sends, duplicates, convergence times) are printed: `pytest -s` shows
them."""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    MessageModel,
    PushConsumer,
)
from pyrmq.producer import Producer, SelectMessageQueueByHash
from pyrmq.remoting import RemotingClient, RequestCode
from pyrmq.testing.cluster import ProcessCluster
from tests._reading import read_queue

BROKERS = ("broker-a", "broker-b")
CLUSTER_NAME = "PyrmqTestCluster"
QUEUES_PER_BROKER = 4
ALL_QUEUES = QUEUES_PER_BROKER * len(BROKERS)
SHORT_DELAY_LEVELS = " ".join(["1s"] * 18)
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    c = ProcessCluster(
        tmp_path / "cluster",
        BROKERS,
        cluster_name=CLUSTER_NAME,
        broker_conf={"messageDelayLevel": SHORT_DELAY_LEVELS},
    )
    try:
        c.start()
        yield c
    finally:
        statuses = c.shutdown()
        print(c.log_tails(40))  # shown when the test failed
    assert all(rc == 0 for rc in statuses.values()), f"exit statuses on SIGTERM: {statuses}"


# -- helpers -----------------------------------------------------------------------------------


class AdminClient:
    """Bare MQClientAPI requests the tests need (topic creation, DLQ reads)."""

    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster
        self.remoting = RemotingClient(name="test-admin")
        self.api = MQClientAPI(self.remoting, [cluster.namesrv_addr])

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.remoting.shutdown()

    async def create_topic(self, topic: str) -> None:
        """UPDATE_AND_CREATE_TOPIC on every broker, then wait for the route."""
        fields = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(QUEUES_PER_BROKER),
            "writeQueueNums": str(QUEUES_PER_BROKER),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        for name in BROKERS:
            await self.api.broker_request(
                self.cluster.broker_addr(name), RequestCode.UPDATE_AND_CREATE_TOPIC, fields
            )
        await wait_until(
            lambda: self._route_has_all_brokers(topic), 10.0, f"route of {topic} on both brokers"
        )

    async def _route_has_all_brokers(self, topic: str) -> bool:
        route = await self.api.get_topic_route(topic)
        return route is not None and {q.broker_name for q in route.queue_datas} == set(BROKERS)

    async def read_queue(self, broker: str, mq: MessageQueue) -> list[MessageExt]:
        """Every message of one queue (no consumer group state involved); []
        when the broker does not have the topic."""
        return await read_queue(self.api, self.cluster.broker_addr(broker), mq, timeout=5.0)


async def wait_until(
    cond: Callable[[], bool | Awaitable[bool]], timeout: float, what: str, step: float = 0.05
) -> float:
    """Poll cond until true (at most timeout s); the seconds it took."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for _ in range(int(timeout / step) + 1):
        ok = cond()
        if not isinstance(ok, bool):
            ok = await ok
        if ok:
            return loop.time() - t0
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def owned(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.rebalance.process_queue_table if mq.topic == topic}


def push_consumer(
    cluster: ProcessCluster, group: str, topic: str, listener: Any, **kw: Any
) -> PushConsumer:
    orderly = kw.pop("orderly", False)
    kw.setdefault("consume_from_where", FIRST)
    kw.setdefault("rebalance_interval", 1.0)
    kw.setdefault("poll_name_server_interval", 1.0)
    c = PushConsumer(group, cluster.namesrv_addr, **kw)
    c.subscribe(topic)
    c.register_message_listener(listener, orderly=orderly)
    return c


def collector(
    counts: Counter[str], delay: float = 0.0
) -> Callable[..., Awaitable[ConsumeConcurrentlyStatus]]:
    """A listener counting deliveries by body; `delay` s per batch."""

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        if delay:
            await asyncio.sleep(delay)
        for m in msgs:
            counts[m.body.decode()] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    return listener


# -- 1. spreading --------------------------------------------------------------------------


def test_producer_spreads_sends_over_both_brokers(arun, cluster):
    topic = "SpreadT"

    async def main() -> None:
        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)
            async with Producer("pg-spread", cluster.namesrv_addr) as p:
                results = [await p.send(Message(topic, f"spread-{i}")) for i in range(40)]
            assert all(r.send_status is SendStatus.SEND_OK for r in results)
            per_broker = Counter(r.message_queue.broker_name for r in results)
            per_queue = Counter(r.message_queue for r in results)
            # round robin over the 8 queues of both brokers
            assert per_broker == {"broker-a": 20, "broker-b": 20}, per_broker
            assert len(per_queue) == ALL_QUEUES and set(per_queue.values()) == {5}, per_queue
            # and each is where the SendResult says
            stored = set()
            for mq in per_queue:
                stored |= {
                    (mq, m.queue_offset, m.body.decode())
                    for m in await admin.read_queue(mq.broker_name, mq)
                }
            sent = {(r.message_queue, r.queue_offset, f"spread-{i}") for i, r in enumerate(results)}
            assert stored == sent

    arun(main(), timeout=60)


# -- 2. a broker crash ---------------------------------------------------------------------


@pytest.mark.parametrize("fault", [True, False], ids=["latency-fault-on", "latency-fault-off"])
def test_broker_crash_failover_loses_no_acknowledged_message(arun, cluster, caplog, fault):
    """SIGKILL broker-a while one producer sends continuously (4 loops of
    awaited sends, 2 retries): only a few sends may fail, everything after goes to
    broker-b; after broker-a restarts, every acknowledged message is there
    (ASYNC_FLUSH: written to the mapped CommitLog, in the page cache, when
    acknowledged, so a process kill loses nothing)."""
    topic = "CrashT"
    before_kill = 0.7  # seconds of sending to both brokers
    after_kill = 2.0  # seconds of sending after the kill
    max_sends = 100_000
    senders = 4  # concurrent loops of awaited sends, on one producer
    caplog.set_level(logging.INFO, logger="pyrmq.producer")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)
        # (send index, start time, SendResult or the error)
        outcomes: list[tuple[int, float, SendResult | BaseException]] = []
        killed = asyncio.Event()
        t_kill = 0.0

        async def sender(p: Producer, first: int) -> None:
            t_end = loop.time() + 60.0
            for i in range(first, max_sends, senders):
                now = loop.time()
                if now > t_end or (killed.is_set() and now - t_kill > after_kill):
                    return
                try:
                    r: SendResult | BaseException = await p.send(Message(topic, f"crash-{i:05d}"))
                except RMQError as e:
                    r = e
                outcomes.append((i, now, r))

        async with Producer(
            f"pg-crash-{fault}",
            cluster.namesrv_addr,
            retry_times_when_send_failed=2,
            send_latency_fault_enable=fault,
        ) as p:
            tasks = [
                asyncio.create_task(sender(p, n), name=f"test:sender{n}") for n in range(senders)
            ]
            await asyncio.sleep(before_kill)
            # from another thread, so the event loop keeps sending meanwhile
            # and the kill lands while broker-a has requests in hand
            t_kill = loop.time()
            killed.set()
            await asyncio.to_thread(cluster.kill_broker, "broker-a")
            await asyncio.gather(*tasks)
        outcomes.sort(key=lambda o: o[1])

        pre = [(i, r) for i, t, r in outcomes if t < t_kill]
        post = [(i, t, r) for i, t, r in outcomes if t >= t_kill]
        assert pre and post
        pre_brokers = Counter(
            r.message_queue.broker_name for _, r in pre if isinstance(r, SendResult)
        )
        assert set(pre_brokers) == set(BROKERS), pre_brokers
        failures = [(i, t, r) for i, t, r in outcomes if not isinstance(r, SendResult)]
        assert all(t >= t_kill - 0.5 for _, t, _ in failures), failures[:5]
        not_b = [
            (i, t)
            for i, t, r in post
            if not (isinstance(r, SendResult) and r.message_queue.broker_name == "broker-b")
        ]
        switch = (not_b[-1][1] - t_kill) if not_b else 0.0
        first_b = next(
            t - t_kill
            for _, t, r in post
            if isinstance(r, SendResult) and r.message_queue.broker_name == "broker-b"
        )
        attempts_failed = sum("failed (attempt" in rec.getMessage() for rec in caplog.records)
        print(
            f"\n[crash fault={fault}] sends {len(outcomes)} ({len(pre)} before the kill), "
            f"failed sends {len(failures)}, failed attempts (retried) {attempts_failed}, "
            f"sends after the kill not on broker-b {len(not_b)}, last of them "
            f"{switch:.3f}s after the kill, first broker-b send {first_b:.3f}s after it"
        )
        assert len(failures) <= 5, failures
        assert switch < 3.0 and first_b < 3.0
        # the last second of sending went to broker-b only, every send acknowledged
        tail = [r for _, t, r in post if t > t_kill + after_kill - 1.0]
        assert tail and all(
            isinstance(r, SendResult) and r.message_queue.broker_name == "broker-b" for r in tail
        )

        acked = {
            f"crash-{i:05d}"
            for i, _, r in outcomes
            if isinstance(r, SendResult) and r.send_status is SendStatus.SEND_OK
        }
        await cluster.start_broker_async("broker-a")
        restart_log = cluster.brokers["broker-a"].log_path.read_text().split("=== start #2")[1]
        assert "opened (abnormal shutdown)" in restart_log  # it was a crash
        got: Counter[str] = Counter()
        consumer = push_consumer(cluster, f"cg-crash-{fault}", topic, collector(got))
        await consumer.start()
        try:
            took = await wait_until(lambda: acked <= got.keys(), 40.0, "every acked message")
        finally:
            await consumer.shutdown()
        extra = got.keys() - acked
        dups = sum(n - 1 for n in got.values())
        print(
            f"[crash fault={fault}] restart + consume: {len(acked)} acknowledged all consumed "
            f"in {took:.2f}s; {len(extra)} unacknowledged also stored, {dups} duplicates"
        )
        assert not (acked - got.keys())
        # nothing consumed that was never sent
        assert extra <= {f"crash-{i:05d}" for i, _, _ in failures} | {
            f"crash-{i:05d}" for i, _ in not_b
        }

    arun(main(), timeout=90)


# -- 3. a consumer group -----------------------------------------------------------------


def test_consumer_group_join_and_leave(arun, cluster):
    """Three PushConsumers of one group (one, then two more, then one
    leaves) while a producer sends: every message consumed at least once,
    few duplicates, and the queues shared 3/3/2 then 4/4."""
    topic, group = "GroupT", "cg-group"

    async def main() -> None:
        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)
        got: Counter[str] = Counter()
        acked: set[str] = set()
        stop = asyncio.Event()

        async def sender(p: Producer) -> None:
            for i in range(20_000):
                if stop.is_set():
                    return
                r = await p.send(Message(topic, f"group-{i:05d}"))
                assert r.send_status is SendStatus.SEND_OK
                acked.add(f"group-{i:05d}")
                await asyncio.sleep(0.001)

        # a slow listener: messages are in flight (pulled, not yet committed)
        # whenever a queue changes hands
        members = [
            push_consumer(cluster, group, topic, collector(got, 0.005), consume_thread_max=4)
            for _ in range(3)
        ]

        def converged(cs: list[PushConsumer], sizes: list[int]) -> bool:
            shares = [owned(c, topic) for c in cs]
            union = set().union(*shares)
            return (
                sorted(len(s) for s in shares) == sizes
                and len(union) == ALL_QUEUES
                and sum(len(s) for s in shares) == ALL_QUEUES
            )

        async with Producer("pg-group", cluster.namesrv_addr) as p:
            task = asyncio.create_task(sender(p), name="test:sender")
            try:
                await members[0].start()
                t_one = await wait_until(lambda: converged(members[:1], [8]), 15.0, "1 member")
                await wait_until(lambda: len(got) >= 100, 15.0, "100 messages consumed")
                await members[1].start()
                await members[2].start()
                t_three = await wait_until(
                    lambda: converged(members, [2, 3, 3]), 15.0, "3 members own 2/3/3"
                )
                await asyncio.sleep(1.0)
                await members[1].shutdown()
                t_two = await wait_until(
                    lambda: converged([members[0], members[2]], [4, 4]), 15.0, "2 members own 4/4"
                )
                await asyncio.sleep(1.0)
                stop.set()
                await task
                took = await wait_until(lambda: acked <= got.keys(), 30.0, "every message")
                await asyncio.sleep(0.5)  # late duplicates, if any
            finally:
                stop.set()
                await asyncio.gather(task, return_exceptions=True)
                for m in members:
                    await m.shutdown()
        dups = sum(n - 1 for n in got.values())
        print(
            f"\n[group] {len(acked)} sent, {len(got)} distinct consumed, {dups} duplicates; "
            f"converged in {t_one:.2f}s (1), {t_three:.2f}s (3 members), {t_two:.2f}s "
            f"(after the leave); drained in {took:.2f}s"
        )
        assert got.keys() == acked
        assert dups <= max(20, len(acked) // 10), dups

    arun(main(), timeout=120)


# -- 4. orderly ----------------------------------------------------------------------------


def test_orderly_consumers_keep_per_key_order(arun, cluster):
    """Per-key sequences sent with SelectMessageQueueByHash; two orderly
    consumers, the second joining mid-stream: after dropping redelivered
    duplicates, every key's messages arrive complete and in order."""
    topic, group = "OrderT", "cg-order"
    keys = [f"key-{k:02d}" for k in range(16)]
    per_key = 50

    async def main() -> None:
        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)
        # (key, seq, consumer index) in the order the listeners saw them
        seen: list[tuple[str, int, int]] = []

        def listener_of(n: int) -> Callable[..., Awaitable[ConsumeOrderlyStatus]]:
            async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    seen.append((key, int(seq), n))
                await asyncio.sleep(0.001)
                return ConsumeOrderlyStatus.SUCCESS

            return listener

        # RocketMQ's 20 s rebalance interval: a queue moves from one orderly
        # consumer to the other as soon as it is unlocked, not a period later
        consumers = [
            push_consumer(
                cluster, group, topic, listener_of(n), orderly=True, rebalance_interval=20.0
            )
            for n in range(2)
        ]

        def shared_4_4() -> bool:
            a, b = owned(consumers[0], topic), owned(consumers[1], topic)
            return len(a) == len(b) == 4 and len(a | b) == ALL_QUEUES

        selector = SelectMessageQueueByHash()
        queue_of: dict[str, MessageQueue] = {}
        handover: asyncio.Task[float] | None = None
        async with Producer("pg-order", cluster.namesrv_addr) as p:
            try:
                await consumers[0].start()
                for seq in range(per_key):
                    if seq == per_key // 3:
                        await consumers[1].start()
                        handover = asyncio.create_task(
                            wait_until(shared_4_4, 15.0, "4 queues each"), name="test:handover"
                        )
                    for key in keys:
                        r = await p.send(
                            Message(topic, f"{key}:{seq}", keys=key), selector=selector, arg=key
                        )
                        assert r.send_status is SendStatus.SEND_OK
                        assert queue_of.setdefault(key, r.message_queue) == r.message_queue
                    await asyncio.sleep(0.02)
                total = len(keys) * per_key
                took = await wait_until(
                    lambda: len({(k, s) for k, s, _ in seen}) == total, 40.0, "every message"
                )
                assert handover is not None
                moved = await handover
                assert shared_4_4()
            finally:
                if handover is not None:
                    handover.cancel()
                for c in consumers:
                    await c.shutdown()
        first_seen: dict[str, list[int]] = {k: [] for k in keys}
        done: set[tuple[str, int]] = set()
        for key, seq, _ in seen:
            if (key, seq) not in done:
                done.add((key, seq))
                first_seen[key].append(seq)
        dups = len(seen) - len(done)
        by_consumer = Counter(n for _, _, n in seen)
        print(
            f"\n[orderly] {total} sent over {len(set(queue_of.values()))} queues, "
            f"{len(seen)} deliveries ({dups} redelivered), per consumer {dict(by_consumer)}, "
            f"queues shared 4/4 {moved:.2f}s after the join, all consumed {took:.2f}s "
            "after the last send"
        )
        for key in keys:
            assert first_seen[key] == list(range(per_key)), (key, first_seen[key])
        assert by_consumer[1] > 0, "the second consumer never consumed"
        assert moved < 2.0 and took < 3.0, "queues sat unconsumed while changing hands"

    arun(main(), timeout=90)


# -- 5. retries and the dead-letter queue ---------------------------------------------------


def test_retries_end_in_the_dead_letter_queue(arun, cluster):
    """A listener that always asks for a retry, max_reconsume_times=2: each
    message is delivered 3 times (reconsume times 0, 1, 2), then lands in
    %DLQ%<group> on the broker that stored it, body intact."""
    topic, group = "RetryT", "cg-dlq"
    dlq = f"%DLQ%{group}"
    n_msgs = 10

    async def main() -> None:
        deliveries: dict[str, list[int]] = {}

        async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                deliveries.setdefault(m.body.decode(), []).append(m.reconsume_times)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)
            async with Producer("pg-dlq", cluster.namesrv_addr) as p:
                sent = {}
                for i in range(n_msgs):
                    body = f"dlq-{i:03d}"
                    r = await p.send(Message(topic, body))
                    sent[body] = r
            consumer = push_consumer(cluster, group, topic, listener, max_reconsume_times=2)
            in_dlq: dict[str, list[MessageExt]] = {}

            async def dlq_complete() -> bool:
                in_dlq.clear()
                for b in BROKERS:
                    for m in await admin.read_queue(b, MessageQueue(dlq, b, 0)):
                        in_dlq.setdefault(m.body.decode(), []).append(m)
                return in_dlq.keys() >= sent.keys()

            await consumer.start()
            try:
                took = await wait_until(dlq_complete, 40.0, "every message in the DLQ", 0.5)
                await asyncio.sleep(2.5)  # time for more deliveries, if any were coming
                await dlq_complete()
            finally:
                await consumer.shutdown()
        print(
            f"\n[dlq] {n_msgs} messages in {dlq} after {took:.2f}s; deliveries per message "
            f"{sorted(Counter(len(v) for v in deliveries.values()).items())}"
        )
        assert in_dlq.keys() == sent.keys()
        for body, r in sent.items():
            copies = in_dlq[body]
            assert len(copies) == 1, (body, len(copies))
            m = copies[0]
            assert m.body.decode() == body
            assert m.broker_name == r.message_queue.broker_name
            assert m.msg_id == r.msg_id  # the UNIQ_KEY travels along
            assert m.properties.get("RETRY_TOPIC") == topic
            assert m.reconsume_times == 3
            assert sorted(set(deliveries[body])) == [0, 1, 2], deliveries[body]
            assert len(deliveries[body]) == 3, deliveries[body]

    arun(main(), timeout=90)


# -- 6. broadcasting offsets -------------------------------------------------------------


def test_broadcasting_offsets_survive_a_consumer_restart(arun, cluster, tmp_path):
    """A broadcasting consumer consumes and shuts down; a new one with the
    same offset file gets only what was sent in between."""
    topic, group = "BcastT", "cg-bcast"
    path = tmp_path / "offsets" / "bcast.json"
    n = 40

    async def main() -> None:
        async with AdminClient(cluster) as admin:
            await admin.create_topic(topic)

        def consumer(counts: Counter[str]) -> PushConsumer:
            return push_consumer(
                cluster,
                group,
                topic,
                collector(counts),
                message_model=MessageModel.BROADCASTING,
                offset_store_path=str(path),
            )

        first: Counter[str] = Counter()
        second: Counter[str] = Counter()
        async with Producer("pg-bcast", cluster.namesrv_addr) as p:
            batch1 = {f"bcast1-{i:03d}" for i in range(n)}
            for body in sorted(batch1):
                await p.send(Message(topic, body))
            c1 = consumer(first)
            await c1.start()
            try:
                await wait_until(lambda: first.keys() >= batch1, 20.0, "the first batch")
            finally:
                await c1.shutdown()
            table = json.loads(path.read_text())["offsetTable"]
            assert len(table) == ALL_QUEUES and sum(table.values()) == n, table

            batch2 = {f"bcast2-{i:03d}" for i in range(n)}
            for body in sorted(batch2):
                await p.send(Message(topic, body))
        c2 = consumer(second)
        await c2.start()
        try:
            await wait_until(lambda: second.keys() >= batch2, 20.0, "the second batch")
            await asyncio.sleep(1.0)  # anything of batch 1 would come with it
        finally:
            await c2.shutdown()
        print(f"\n[broadcast] first consumer {sum(first.values())}, second {sum(second.values())}")
        assert first.keys() == batch1
        assert second.keys() == batch2, sorted(second.keys() - batch2)[:5]
        table = json.loads(path.read_text())["offsetTable"]
        assert sum(table.values()) == 2 * n, table

    arun(main(), timeout=60)
