"""Scenario 1 of the fault suite: crash under load.

One broker process (ProcessCluster) takes sustained load from pyrmq's client
and from the C++ client (rocketmq==0.4.4, in a process of its own, see
_crash_cpp.py): a pyrmq Producer and a C++ producer send without pause, a
pyrmq PushConsumer and a C++ push consumer (one group each) consume
everything. At random moments the broker is SIGKILLed and started again on
its store and port: 3 cycles per flush mode, 20 with --long (the C++ load
runs in the ASYNC_FLUSH half of the CI subset, in both with --long). Some
restarts are killed again while the broker recovers its store; in about
half the cycles the pyrmq consumer is replaced while the broker is down, so
the new one starts from the offsets the broker committed. After 1 of the
cycles (4 with --long) the name server is SIGKILLed, left down while the
clients go on with their cached routes, and started again on its port.

A third run is SYNC_FLUSH with duplicateDetection=true keyed by KEYS (the
C++ client makes a new UNIQ_KEY for every attempt; both loads send each
message with its id as KEYS), with the C++ load: there, nothing may be
stored twice either, though the kills cut answers the clients then retry.

What is asserted, by comparing sets of message ids (the bodies):

* every send a broker acknowledged (SEND_OK) is stored afterwards, and was
  delivered to both consumer groups: nothing acknowledged is lost, with
  SYNC_FLUSH (on disk when acknowledged) and with ASYNC_FLUSH (in the page
  cache, which a process crash does not lose);
* nothing is delivered or stored that was never sent;
* the pyrmq group resumes from its committed offsets: a record delivered a
  second time has a queue offset at or above the offset the broker had
  persisted for that queue when it was last killed (the uncommitted window,
  consumerOffset.json being saved every 5 s); duplicates are counted;
* while the name server is down, pyrmq's producer and consumer keep going:
  acknowledged sends and deliveries during the outage.

The C++ group's duplicates are counted and reported, not held to the window
(its listener's lines are stamped with the restart count only when the
parent reads them). The seed of the random moments is in the CHAOS line;
PYRMQ_CHAOS_SEED replays it."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until
from tests.chaos._crash_helpers import (
    Admin,
    CppLoad,
    Delivery,
    SendLoops,
    Tally,
    persisted_offsets,
)
from tests.chaos.conftest import scale

BROKER = "broker-a"
TOPIC = "CrashLoopT"
QUEUES = 4
PY_GROUP = "cg-crash-py"
CPP_GROUP = "cg-crash-cpp"
#: concurrent loops of awaited sends on the one pyrmq Producer
SENDERS = 4
#: seconds each send loop rests between sends: sustained load that both
#: consumers keep up with on a 2-core machine (about 400 sends/s from pyrmq)
SEND_PAUSE = 0.01
#: seconds of load before each kill: drawn uniformly from this range (the
#: long mode's wider range lets some cycles outlive the broker's 5-s save
#: of consumer offsets, so restarted consumers resume from recent ones)
LOAD_BEFORE_KILL = (0.3, 1.5)
LOAD_BEFORE_KILL_LONG = (0.3, 7.0)
#: share of the restarts that are SIGKILLed again while the broker starts
#: (recovering its store), up to RECOVERY_KILL_AFTER seconds after launch
RECOVERY_KILLS = 0.3
RECOVERY_KILL_AFTER = 0.5
#: seconds a killed broker stays down: drawn uniformly from this range
DOWN_TIME = (0.0, 0.5)
#: sends (by count) the pyrmq producer must have acknowledged, and
#: deliveries its consumer must have seen, while the name server is down
OUTAGE_PROGRESS = 20


def _seed() -> int:
    raw = os.environ.get("PYRMQ_CHAOS_SEED")
    return int(raw) if raw else random.randrange(2**32)


@pytest.fixture
def cluster_factory(tmp_path: pathlib.Path) -> Iterator[Any]:
    made: list[ProcessCluster] = []

    def make(flush: str, dedup: bool = False) -> ProcessCluster:
        c = ProcessCluster(
            tmp_path / "cluster",
            [BROKER],
            broker_conf={
                "flushDiskType": flush,
                "duplicateDetection": "true" if dedup else "false",
                # the C++ client makes a new UNIQ_KEY per attempt: both loads set KEYS
                "duplicateDetectionKey": "KEYS",
                # re-register within a second of a name server restart
                "registerNameServerPeriod": 1000,
            },
        )
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        statuses = c.shutdown()
        print(c.log_tails(30))  # shown when the test failed
        assert all(rc == 0 for rc in statuses.values()), f"exit statuses on SIGTERM: {statuses}"


class PyLoad:
    """The pyrmq side of the load: SENDERS loops on one Producer and one
    PushConsumer recording every delivery with the current epoch."""

    def __init__(self, namesrv: str) -> None:
        self.tally = Tally()
        self.epoch = 0
        self.producer = Producer(
            "pg-crash-py",
            namesrv,
            send_msg_timeout=3.0,
            retry_times_when_send_failed=2,
            poll_name_server_interval=1.0,
        )
        self.namesrv = namesrv
        self.consumer = self._new_consumer()
        self.consumer_restarts = 0
        self.sends = SendLoops(
            self.producer,
            TOPIC,
            senders=SENDERS,
            pause=SEND_PAUSE,
            acked=self.tally.acked,
            failed=self.tally.failed,
        )

    def _new_consumer(self) -> PushConsumer:
        consumer = PushConsumer(
            PY_GROUP,
            self.namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=1.0,
            poll_name_server_interval=1.0,
            heartbeat_broker_interval=1.0,
            await_termination_seconds=5.0,
        )
        consumer.subscribe(TOPIC)
        consumer.register_message_listener(self._listener)
        return consumer

    async def stop_consumer(self) -> None:
        """Shut the consumer down (while the broker is down, its last offset
        commit fails)."""
        await self.consumer.shutdown()

    async def start_new_consumer(self) -> None:
        """Another consumer of the group: it starts from the offsets the
        broker has committed."""
        self.consumer = self._new_consumer()
        self.consumer_restarts += 1
        await self.consumer.start()

    async def _listener(self, msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            self.tally.deliveries.append(
                Delivery(m.body.decode(), m.queue_id, m.queue_offset, self.epoch)
            )
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def start(self) -> None:
        await self.consumer.start()
        await self.producer.start()
        self.sends.start()

    async def stop_sending(self) -> None:
        """Stop the send loops and the producer (idempotent)."""
        if self.sends.stopped:
            return
        await self.sends.stop()
        await self.producer.shutdown()

    def counts(self) -> tuple[int, int]:
        return len(self.tally.acked), len(self.tally.deliveries)

    def owned(self) -> int:
        """Queues of TOPIC the consumer pulls now."""
        return sum(mq.topic == TOPIC for mq in self.consumer.rebalance.process_queue_table)


def window_violations(tally: Tally, committed: list[dict[int, int]]) -> list[Delivery]:
    """Repeated deliveries of a record below the offset the broker had
    persisted for its queue when it was killed for the delivery's epoch
    (committed[e - 1]); in epoch 0, before any kill, every repeat."""
    seen: set[tuple[int, int]] = set()
    bad = []
    for d in tally.deliveries:
        key = (d.queue_id, d.queue_offset)
        if key in seen:
            floor = committed[d.epoch - 1].get(d.queue_id, 0) if d.epoch > 0 else None
            if floor is None or d.queue_offset < floor:
                bad.append(d)
        seen.add(key)
    return bad


@pytest.mark.parametrize(
    ("flush", "dedup"),
    [("SYNC_FLUSH", False), ("ASYNC_FLUSH", False), ("SYNC_FLUSH", True)],
    ids=["SYNC_FLUSH", "ASYNC_FLUSH", "SYNC_FLUSH-duplicateDetection"],
)
def test_broker_sigkill_under_load_loses_no_acknowledged_message(
    arun, cluster_factory, tmp_path, long_mode, report, flush, dedup
):
    cycles = scale(long_mode, 3, 20)
    outages = scale(long_mode, 1, 4)
    seed = _seed()
    rng = random.Random(seed)
    # the cycles in which the name server goes down too (after the restart)
    outage_cycles = set(rng.sample(range(cycles), outages))
    cluster = cluster_factory(flush, dedup)
    # The C++ client strands a pull on a dead connection until the pull's
    # own timeout (about 30 s), which is most of a run's time: the CI subset
    # drives it in one flush mode, the long mode in both.
    cpp = (
        CppLoad(cluster.namesrv_addr, TOPIC, CPP_GROUP, "cpp", tmp_path / "cpp-client.log")
        if long_mode or flush == "ASYNC_FLUSH" or dedup
        else None
    )
    figures: dict[str, Any] = {
        "flush": flush,
        "duplicate_detection": dedup,
        "seed": seed,
        "cycles": cycles,
        "cpp_acked_during_outages": 0,
        "cpp_delivered_during_outages": 0,
    }

    async def main() -> None:
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(cluster.broker_addr(BROKER), TOPIC, QUEUES)
            py = PyLoad(cluster.namesrv_addr)
            if cpp is not None:
                await asyncio.to_thread(cpp.start)
            await py.start()
            try:
                await wait_until(
                    lambda: py.counts()[1] > 0 and (cpp is None or cpp.counts()[1] > 0),
                    "the consumers to receive",
                    progress=lambda: (py.counts(), cpp.counts() if cpp else None),
                )
                committed_at_kill = await crash_cycles(admin, py)
                await py.stop_sending()
                if cpp is not None:
                    await asyncio.to_thread(cpp.stop_sending)
                acked = py.tally.acked | (cpp.tally.acked if cpp else set())
                t_drain = await wait_until(
                    lambda: acked <= py.tally.received,
                    "pyrmq group: every acked message",
                    progress=lambda: len(py.tally.received),
                )
                figures["drain_py_s"] = round(t_drain, 2)
                if cpp is not None:
                    t_drain += await wait_until(
                        lambda: acked <= cpp.received(),
                        "C++ group: every acknowledged message",
                        progress=lambda: len(cpp.received()),
                        # the C++ client strands a pull on a dead connection
                        # for about 30 s before it pulls again
                        stall_after=45.0,
                        step=0.2,
                    )
            finally:
                await py.stop_sending()
                await py.consumer.shutdown()
            figures["consumer_restarts"] = py.consumer_restarts
            if cpp is not None:
                figures["cpp_exit"] = await asyncio.to_thread(cpp.close)
            stored = []
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, BROKER, q)
                stored += await admin.read_queue(cluster.broker_addr(BROKER), mq)
        check(py, committed_at_kill, stored, t_drain)

    async def crash_cycles(admin: Admin, py: PyLoad) -> list[dict[int, int]]:
        committed_at_kill: list[dict[int, int]] = []
        store = cluster.store_dir(BROKER)
        ns_acks = ns_recv = 0
        recovery_kills = 0
        load = LOAD_BEFORE_KILL_LONG if long_mode else LOAD_BEFORE_KILL
        for cycle in range(cycles):
            await asyncio.sleep(rng.uniform(*load))
            acks_before, seen_before = py.counts()
            await asyncio.to_thread(cluster.kill_broker, BROKER)
            committed_at_kill.append(persisted_offsets(store, TOPIC, PY_GROUP))
            py.epoch = cycle + 1
            if cpp is not None:
                cpp.epoch = cycle + 1
            new_consumer = rng.random() < 0.5
            if new_consumer:
                await py.stop_consumer()
            await asyncio.sleep(rng.uniform(*DOWN_TIME))
            if rng.random() < RECOVERY_KILLS:
                # killed again while it opens (recovers) the store
                cluster.launch_broker(BROKER)
                await asyncio.sleep(rng.uniform(0.0, RECOVERY_KILL_AFTER))
                await asyncio.to_thread(cluster.kill_broker, BROKER)
                recovery_kills += 1
            await cluster.start_broker_async(BROKER)
            if new_consumer:
                await py.start_new_consumer()
            # the load resumed: the broker acknowledges sends again, and the
            # consumer (a new one, maybe) has its queues back (the name server
            # dropped the dead broker's routes; a name server outage now tests
            # routes cached from after the restart) and delivers
            await wait_until(
                lambda n=acks_before, m=seen_before: (
                    py.counts()[0] > n and py.counts()[1] > m and py.owned() == QUEUES
                ),
                f"sends and deliveries after restart {cycle + 1} (seed {seed})",
                progress=lambda: (py.counts(), py.owned()),
            )
            if cycle in outage_cycles:
                a, r = await name_server_outage(admin, py)
                ns_acks += a
                ns_recv += r
        figures.update(namesrv_outages=outages, acked_during_outages=ns_acks,
                       delivered_during_outages=ns_recv, recovery_kills=recovery_kills)  # fmt: skip
        return committed_at_kill

    async def name_server_outage(admin: Admin, py: PyLoad) -> tuple[int, int]:
        """Kill the name server, see both pyrmq clients go on, restart it."""
        await asyncio.to_thread(cluster.kill_namesrv)
        a0, r0 = py.counts()
        c0 = cpp.counts() if cpp is not None else (0, 0)
        # sends and deliveries are waited for apart, each with its own
        # progress measure: a producer that stops while the consumer still
        # delivers the C++ client's messages is a stall, not a slow machine
        await wait_until(
            lambda: py.counts()[0] >= a0 + OUTAGE_PROGRESS,
            f"pyrmq sends with the name server down (seed {seed})",
            progress=lambda: py.counts()[0],
        )
        await wait_until(
            lambda: py.counts()[1] >= r0 + OUTAGE_PROGRESS,
            f"pyrmq deliveries with the name server down (seed {seed})",
            progress=lambda: py.counts()[1],
        )
        a1, r1 = py.counts()
        if cpp is not None:  # reported, not held to: the C++ client's own business
            c1 = cpp.counts()
            figures["cpp_acked_during_outages"] += c1[0] - c0[0]
            figures["cpp_delivered_during_outages"] += c1[1] - c0[1]
        await cluster.start_namesrv_async()
        await admin.wait_route(TOPIC, 30.0)  # the broker registered again
        return a1 - a0, r1 - r0

    def check(
        py: PyLoad,
        committed_at_kill: list[dict[int, int]],
        stored: list[MessageExt],
        t_drain: float,
    ) -> None:
        stored_ids = [m.body.decode() for m in stored]
        stored_set = set(stored_ids)
        cpp_tally = cpp.tally if cpp is not None else Tally()
        sent = py.tally.acked | py.tally.failed | cpp_tally.acked | cpp_tally.failed
        acked = py.tally.acked | cpp_tally.acked
        lost = acked - stored_set
        lost_py_group = acked - py.tally.received
        lost_cpp_group = acked - cpp_tally.received if cpp is not None else set()
        phantom = (stored_set | py.tally.received | cpp_tally.received) - sent
        violations = window_violations(py.tally, committed_at_kill)
        verified = acked & stored_set & py.tally.received
        if cpp is not None:
            verified &= cpp_tally.received
        figures.update(
            cpp_client=cpp is not None,
            acked=len(acked),
            acked_py=len(py.tally.acked),
            acked_cpp=len(cpp_tally.acked),
            failed_sends=len(py.tally.failed) + len(cpp_tally.failed),
            stored=len(stored_ids),
            verified=len(verified),
            lost=len(lost),
            lost_py_group=len(lost_py_group),
            lost_cpp_group=len(lost_cpp_group),
            stored_twice=len(stored_ids) - len(stored_set),  # a retried send stored twice
            duplicates_py=py.tally.duplicates(),
            duplicates_cpp=cpp_tally.duplicates(),
            window_violations=len(violations),
            drain_s=round(t_drain, 2),
        )
        report(**figures)
        assert not lost, f"acknowledged but not stored: {sorted(lost)[:10]}"
        assert not lost_py_group, f"never delivered (pyrmq): {sorted(lost_py_group)[:10]}"
        assert not lost_cpp_group, f"never delivered (C++): {sorted(lost_cpp_group)[:10]}"
        assert not phantom, f"stored or delivered but never sent: {sorted(phantom)[:10]}"
        assert not violations, f"redelivered below the committed offset: {violations[:10]}"
        if dedup:
            twice = {i for i, n in Counter(stored_ids).items() if n > 1}
            copies = [
                (m.body.decode(), m.queue_id, m.queue_offset, m.unique_key, m.store_timestamp)
                for m in stored
                if m.body.decode() in twice
            ]
            assert not twice, f"stored twice with duplicateDetection: {copies[:20]}"

    t0 = time.monotonic()
    try:
        # the waits inside tell a stall from a slow machine; this bound only
        # keeps a hung run under CI's per-test timeout (600 s)
        arun(main(), timeout=540 if not long_mode else 300 + 60 * cycles)
    finally:
        if cpp is not None:
            cpp.kill()
    print(f"\n[crash loop {flush}] {cycles} cycles in {time.monotonic() - t0:.1f} s")
