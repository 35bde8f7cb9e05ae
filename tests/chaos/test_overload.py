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
import itertools
import pathlib
import sys
import time
from collections import Counter
from typing import Any

import pytest

from pyrmq import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
)
from pyrmq.common.errors import SystemBusyError
from pyrmq.common.results import SendStatus
from pyrmq.remoting import RequestCode
from pyrmq.storage import FlushDiskType
from pyrmq.testing import LocalCluster
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.chaos._overload import (
    Collector,
    Ledger,
    MemorySampler,
    body,
    body_id,
    intact,
    pump,
    slow_disk,
)
from tests.chaos.conftest import scale


def _stored(store: Any, topic: str, queues: int = 16) -> int:
    return sum(store.max_offset_in_queue(topic, q) for q in range(queues))


def test_sends_are_answered_system_busy_while_the_disk_lags(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """SYNC_FLUSH with a disk that stops answering (the flush thread is held
    for 3 s): a send already written waits for its flush; once it has
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
            # one request a send: what the broker does with each is the subject
            async with Producer(
                "pg_busy", c.namesrv_addr, send_msg_timeout=10, auto_batch=False
            ) as producer:
                await producer.send(Message(topic, b"warm"))
                stall = store._io.run("flush-commitlog", time.sleep, 3.0)  # the disk hangs
                waiting = [producer.send_async(Message(topic, b"waits-%d" % i)) for i in range(3)]
                await wait_until(
                    lambda: store.flush_backlog[0] == 3,
                    "3 sends waiting",
                    progress=lambda: store.flush_backlog[0],
                )
                with pytest.raises(SystemBusyError, match=r"^\[OVERLOAD\]") as overload:
                    await producer.send(Message(topic, b"refused-1"))
                assert c.broker.send_processor.busy_refusals == 3  # tried three times
                await wait_until(
                    lambda: store.flush_backlog[1] > 0.3, "the wait to age", stall_after=10
                )
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


def test_oneway_sends_while_the_disk_lags_are_held_back_not_lost(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """A oneway send cannot be answered SYSTEM_BUSY: its sender reads no
    answer, so a refusal would lose it. With the disk hung (flush thread
    held for 2 s) and the broker past sendThreadPoolQueueCapacity, oneway
    sends are stored and their connection is read no further until they are
    durable (TCP slows the sender); acked sends on another producer are
    still refused [OVERLOAD]. Every oneway message is stored once, none was
    answered, and the connection goes on when the disk is back."""

    async def main() -> None:
        async with LocalCluster(
            str(tmp_path / "store"),
            flush_disk_type=FlushDiskType.SYNC_FLUSH,
            send_thread_pool_queue_capacity=3,
        ) as c:
            assert c.broker is not None and c.broker.store is not None
            store = c.broker.store
            sp = c.broker.send_processor
            topic = "OnewayBusyT"
            async with (
                Producer("pg_ow", c.namesrv_addr) as ow,
                Producer("pg_ack", c.namesrv_addr, retry_times_when_send_failed=0) as acked,
            ):
                await ow.send(Message(topic, b"warm"))
                await acked.send(Message(topic, b"warm-2"))
                stall = store._io.run("flush-commitlog", time.sleep, 2.0)  # the disk hangs
                n = 3000
                for i in range(n):
                    await ow.send_oneway(Message(topic, b"ow-%d" % i))
                await wait_until(
                    lambda: sp.oneway_holds > 0,
                    "a held connection",
                    progress=lambda: _stored(store, topic),
                )
                with pytest.raises(SystemBusyError, match=r"^\[OVERLOAD\]"):
                    await acked.send(Message(topic, b"refused"))
                refused = sp.busy_refusals
                await stall
                await wait_until(
                    lambda: _stored(store, topic) == n + 2,
                    "every oneway stored",
                    progress=lambda: _stored(store, topic),
                )
                assert sp.busy_refusals == refused == 1  # the acked send only
                # the held connection reads again: a oneway after the stall arrives
                await ow.send_oneway(Message(topic, b"after"))
                await wait_until(
                    lambda: _stored(store, topic) == n + 3,
                    "the last one",
                    progress=lambda: _stored(store, topic),
                )
            bodies = []
            async with Admin(c.namesrv_addr) as admin:
                for q in range(16):
                    mq = MessageQueue(topic, c.broker.config.broker_name, q)
                    bodies += [m.body for m in await admin.read_queue(c.broker_addr, mq)]
            assert sorted(bodies) == sorted(
                [b"warm", b"warm-2", b"after"] + [b"ow-%d" % i for i in range(n)]
            )

    arun(main(), timeout=90)


def test_a_cold_producers_concurrent_sends_share_one_route_lookup(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """A producer that starts with thousands of sends outstanding (the
    overload tests' pipelines): each first send needs the topic's route.
    They must share one name-server lookup, not make one each (6,000 lookups
    in a burst, which under load took past the send deadline)."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            assert c.namesrv is not None
            lookups = Counter[str]()

            def count(conn: Any, cmd: Any) -> None:
                if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                    lookups[cmd.ext_fields.get("topic", "")] += 1

            c.namesrv.server.add_rpc_hook(count)
            async with Producer("pg_cold_0", c.namesrv_addr) as p:
                await p.send(Message("ColdT", b"creates the topic"))
            lookups.clear()
            async with Producer("pg_cold", c.namesrv_addr, send_msg_timeout=30) as p:
                sends = [p.send_async(Message("ColdT", b"%d" % i)) for i in range(2000)]
                results = await asyncio.gather(*sends)
            assert all(r.ok for r in results)
            # one shared lookup (+1 if the periodic refresh, 3 s after start, ran)
            assert lookups["ColdT"] <= 2, lookups

    arun(main(), timeout=60)


# -- scenarios against a broker process ------------------------------------------------------

#: bytes of each body (under the producer's 4 KiB compression threshold)
BODY = 2000
#: RssAnon growth (MiB) a bounded broker stays under here; an unbounded one
#: holding what the producers offer would pass it (see each test)
HEAP_BOUND_MIB = 24


def _heap_growth_mib(mem: MemorySampler) -> float:
    return round((mem.peak["RssAnon"] - mem.first["RssAnon"]) / 1024, 1)


def _memory_figures(mem: MemorySampler) -> dict[str, Any]:
    return {
        "broker_rss_anon_first_mib": mem.mib("RssAnon", "first"),
        "broker_rss_anon_peak_mib": mem.mib("RssAnon"),
        "broker_vm_hwm_mib": mem.mib("VmHWM"),
        "broker_rss_file_peak_mib": mem.mib("RssFile"),
        "memory_samples": mem.samples,
    }


def _read_all(c: ProcessCluster, group: str, topic: str) -> tuple[Collector, PushConsumer]:
    """A consumer of topic from its first offset (not started yet), and
    what it collects."""
    got = Collector()
    consumer = PushConsumer(
        group,
        c.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=1.0,
        pull_batch_size=32,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(got.listen)
    return got, consumer


def test_producers_faster_than_the_disk(
    tmp_path: pathlib.Path, arun: Any, long_mode: bool, report: Any
) -> None:
    """A SYNC_FLUSH broker whose disk writes are throttled to 1 MB/s (a blkio
    cgroup around its process) and producers offering far more, pipelined.
    Producers must hear SYSTEM_BUSY ([OVERLOAD] past
    sendThreadPoolQueueCapacity waiting sends, [PCBUSY_CLEAN_QUEUE] once the
    disk lags a second); the broker's heap must not grow with what they
    offer (a broker holding each waiting send's 8 KB request, as before the
    fix, grows by more than HEAP_BOUND_MIB: 24 MB offered in CI, 64 MB with
    --long); and once the disk is fast again, every acknowledged id is
    stored and no refused one is (a send that timed out at the producer, if
    any, is an error too, and may be stored)."""
    producers = 2
    inflight = scale(long_mode, 1500, 4000)
    seconds = scale(long_mode, 12, 60)
    size = 8000
    topic = "OverloadDiskT"
    conf = {"flushDiskType": "SYNC_FLUSH", "sendThreadPoolQueueCapacity": 2000}

    async def main(c: ProcessCluster, pid: int) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        ids = itertools.count()
        clients = [
            # bodies as they are: random bytes do not compress
            Producer(
                f"pg_overload_{n}",
                c.namesrv_addr,
                send_msg_timeout=10,
                compress_msg_body_over_howmuch=1 << 20,
            )
            for n in range(producers)
        ]
        for p in clients:
            await p.start()
        try:
            first = next(ids)
            ledger.sent.add(first)
            ledger.settle(first, await clients[0].send(Message(topic, body(first, size))), None)
            with slow_disk(pid, c.store_dir("broker-a"), 1 << 20):
                async with MemorySampler(pid) as mem:
                    deadline = loop.time() + seconds
                    await asyncio.gather(
                        *(
                            pump(
                                p,
                                ledger,
                                topic,
                                ids,
                                size=size,
                                inflight=inflight,
                                stop=lambda: False,
                                deadline=deadline,
                            )
                            for p in clients
                        )
                    )
        finally:
            for p in clients:
                await p.shutdown()
        busy = ledger.failed_with("code 2")
        assert busy, f"no SYSTEM_BUSY reached the producers: {ledger.failures()}"
        kinds = Counter(str(e).split("]")[0] + "]" for e in busy.values())
        assert set(kinds) <= {"[OVERLOAD]", "[PCBUSY_CLEAN_QUEUE]"}, kinds
        assert _heap_growth_mib(mem) < HEAP_BOUND_MIB, _memory_figures(mem)
        got, consumer = _read_all(c, "cg_overload_check", topic)
        await consumer.start()
        try:
            acked = set(ledger.acked)
            await wait_until(
                lambda: got.ids >= acked,
                "every acknowledged message",
                progress=lambda: len(got.seen),
            )
            await asyncio.sleep(1.0)  # anything stored beyond them arrives too
        finally:
            await consumer.shutdown()
        assert not got.damaged
        ledger.check_against_stored(got.ids)
        return {
            "sent": len(ledger.sent),
            "acked": len(ledger.acked),
            "acked_by_status": dict(ledger.statuses()),
            "failed_by_kind": dict(ledger.failures()),
            "system_busy_by_kind": dict(kinds),
            "stored": len(got.ids),
            "lost": len(ledger.acked.keys() - got.ids),
            **_memory_figures(mem),
        }

    with ProcessCluster(tmp_path, ["broker-a"], broker_conf=conf) as c:
        proc = c.brokers["broker-a"].proc
        assert proc is not None
        try:
            figures = arun(main(c, proc.pid), timeout=seconds + scale(long_mode, 200, 400))
        except BaseException:
            print(c.log_tails(40), file=sys.stderr)
            raise
    report(
        scenario="overload: producers faster than the disk",
        disk_write_bytes_per_s=1 << 20,
        producers=producers,
        inflight_per_producer=inflight,
        seconds=seconds,
        **figures,
    )


#: messageDelayLevel for the retry storm: a retry of reconsume k goes at
#: level 3 + k (RocketMQ's rule), so 1 s, 2 s, 3 s here
STORM_LEVELS = "1s 1s 1s 2s 3s"


def _level_delay(level: int) -> float:
    items = STORM_LEVELS.split()
    return float(items[min(level, len(items)) - 1][:-1])


def test_never_acking_consumers_and_a_retry_storm(
    tmp_path: pathlib.Path, arun: Any, long_mode: bool, report: Any
) -> None:
    """One topic, four groups: one whose listener never returns (never
    acknowledges), one whose listener always fails (every message goes
    through %RETRY% at the delay levels, max_reconsume_times times, then to
    %DLQ%<group>), one that reads normally, and, at the end, one reading the
    dead-letter queue. Promised: the hung group is held by flow control
    (pull_threshold_for_queue) and does not grow the broker; every message is
    delivered to the failing group exactly at reconsume times 0..max, each
    retry no sooner than its level's delay, and lands in the DLQ; the normal
    group gets every acknowledged id; the broker's heap stays bounded."""
    n = scale(long_mode, 300, 3000)
    max_reconsume = scale(long_mode, 2, 3)
    threshold = 64
    topic = "StormT"
    conf = {"messageDelayLevel": STORM_LEVELS, "flushDiskType": "ASYNC_FLUSH"}

    async def main(c: ProcessCluster, pid: int) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        release = asyncio.Event()
        deliveries: dict[int, list[tuple[int, float]]] = {}
        damaged: list[MessageExt] = []
        hung_peak = 0

        async def fail(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                if not intact(m.body):
                    damaged.append(m)
                    continue
                deliveries.setdefault(body_id(m.body), []).append((m.reconsume_times, loop.time()))
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        async def hang(msgs: list[MessageExt], ctx: Any) -> None:
            await release.wait()  # never acknowledges while the test runs

        first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        failing = PushConsumer(
            "cg_storm_fail",
            c.namesrv_addr,
            consume_from_where=first,
            max_reconsume_times=max_reconsume,
            rebalance_interval=1.0,
        )
        failing.subscribe(topic, "*")
        failing.register_message_listener(fail)
        hung = PushConsumer(
            "cg_storm_hang",
            c.namesrv_addr,
            consume_from_where=first,
            pull_threshold_for_queue=threshold,
            await_termination_seconds=1.0,
            rebalance_interval=1.0,
        )
        hung.subscribe(topic, "*")
        hung.register_message_listener(hang)
        normal, reader = _read_all(c, "cg_storm_ok", topic)
        producer = Producer("pg_storm", c.namesrv_addr, send_msg_timeout=10)
        await producer.start()
        dead, dlq_reader = Collector(), None
        try:
            ids = itertools.count()
            created = next(ids)
            ledger.sent.add(created)
            ledger.settle(created, await producer.send(Message(topic, body(created, BODY))), None)
            async with MemorySampler(pid) as mem:
                for consumer in (failing, hung, reader):
                    await consumer.start()

                def all_held() -> int:
                    pqs = hung.rebalance.process_queue_table.values()
                    return max((pq.msg_count for pq in pqs), default=0)

                await pump(
                    producer,
                    ledger,
                    topic,
                    itertools.islice(ids, n - 1),
                    size=BODY,
                    inflight=32,
                    stop=lambda: False,
                    deadline=loop.time() + 120,
                )
                acked = set(ledger.acked)

                def storm_done() -> bool:
                    nonlocal hung_peak
                    hung_peak = max(hung_peak, all_held())
                    return all(len(deliveries.get(i, ())) > max_reconsume for i in acked)

                await wait_until(
                    storm_done,
                    "every retry of every message",
                    progress=lambda: sum(len(d) for d in deliveries.values()),
                )
                await wait_until(
                    lambda: normal.ids >= acked,
                    "the normal group",
                    progress=lambda: len(normal.seen),
                )
                dead, dlq_reader = _read_all(c, "cg_storm_dlq", "%DLQ%cg_storm_fail")
                await dlq_reader.start()
                await wait_until(
                    lambda: dead.ids >= acked,
                    "every message in the DLQ",
                    progress=lambda: len(dead.seen),
                )
                await asyncio.sleep(1.0)  # late duplicates, if any, arrive too
        finally:
            release.set()
            for consumer in (failing, hung, reader, dlq_reader):
                if consumer is not None:
                    await consumer.shutdown()
            await producer.shutdown()
        ledger.check_against_stored(normal.ids)
        assert not damaged and not normal.damaged and not dead.damaged
        assert hung_peak <= threshold + 32, hung_peak  # pull_batch_size past the threshold
        early = []
        for i in acked:
            seen = sorted(deliveries[i], key=lambda d: d[1])
            assert [r for r, _ in seen] == list(range(max_reconsume + 1)), (i, seen)
            for k in range(max_reconsume):
                gap = seen[k + 1][1] - seen[k][1]
                if gap < _level_delay(3 + k) - 0.05:
                    early.append((i, k, round(gap, 3)))
        assert not early, f"retries sooner than their delay level: {early[:10]}"
        assert dead.ids == acked, (len(dead.ids), len(acked))
        assert set(dead.topics) == {"%DLQ%cg_storm_fail"}
        assert _heap_growth_mib(mem) < HEAP_BOUND_MIB, _memory_figures(mem)
        return {
            "sent": len(ledger.sent),
            "acked": len(ledger.acked),
            "failed": len(ledger.failed),
            "deliveries_to_failing_group": sum(len(d) for d in deliveries.values()),
            "retries": sum(len(d) - 1 for d in deliveries.values()),
            "dlq": len(dead.ids),
            "dlq_duplicates": sum(dead.seen.values()) - len(dead.seen),
            "normal_group_received": len(normal.ids),
            "hung_group_peak_cached": hung_peak,
            "lost": len(ledger.acked.keys() - normal.ids) + len(ledger.acked.keys() - dead.ids),
            **_memory_figures(mem),
        }

    with ProcessCluster(tmp_path, ["broker-a"], broker_conf=conf) as c:
        proc = c.brokers["broker-a"].proc
        assert proc is not None
        try:
            figures = arun(main(c, proc.pid), timeout=scale(long_mode, 200, 900))
        except BaseException:
            print(c.log_tails(40), file=sys.stderr)
            raise
    report(
        scenario="overload: never-acking and always-failing consumers",
        messages=n,
        max_reconsume_times=max_reconsume,
        delay_levels=STORM_LEVELS,
        **figures,
    )
