"""Scenario 7 of the fault suite: master/slave replication under random faults.

RocketMQ 4.x-style replication, no controller (ProcessCluster): one name
server, broker group broker-a as SYNC_MASTER (SYNC_FLUSH) + SLAVE, and group
broker-b as ASYNC_MASTER (ASYNC_FLUSH) + SLAVE, so producers have somewhere
to send while broker-a's master is down. broker-a's slave reaches its
master's HA port through a FaultProxy (haMasterAddress = the proxy), so the
test can cut replication without touching the clients' connections.

Load: SENDERS loops on a pyrmq Producer and the C++ client (CppLoad, its own
process) send distinct bodies; a pyrmq PushConsumer group and the C++
consumer group consume throughout.

Faults, drawn with a seed (printed in the CHAOS line; PYRMQ_CHAOS_SEED
replays the draw): SIGKILL + restart of broker-a's master (store kept), of
a slave, of the name server; SIGTERM + restart of any broker; replication
of broker-a cut for a few seconds, either as a black hole (bytes dropped,
then the connections reset when it heals, as TCP would give up on them) or
as resets and refused connections. Every kind occurs at least once; CI runs
FAULTS_CI of them, --long FAULTS_LONG. After each fault the test waits,
watching progress, until the pyrmq load acknowledges and delivers again and
both slaves are connected and have caught up with where their masters were.

What is asserted at the end, by comparing sets of bodies:

* every body acknowledged SEND_OK (pyrmq and C++) is stored on a master and
  was delivered to the running pyrmq group, to the C++ group and to a new
  pyrmq group reading from the first offset: nothing acknowledged is lost;
* nothing is stored or delivered that was never sent;
* each slave's CommitLog equals its master's byte for byte up to the end of
  the shorter one, and (the load stopped, replication caught up) both end
  at the same offset; both stores pass `pyrmq store check`.

Counted, not held to: duplicates (deliveries of a body beyond the number of
times it is stored: redeliveries after a crash or a rebalance), and bodies
stored twice (a send whose reply was lost in a fault, retried by the
producer; split by client, as the C++ client was seen to send a body again
to broker-b after broker-a answered it FLUSH_SLAVE_TIMEOUT or
SLAVE_NOT_AVAILABLE, which pyrmq's producer, like Java's with
retryAnotherBrokerWhenNotStoreOK off, does not). Those answers (the
SYNC_MASTER without its slave) mean stored but not acknowledged SEND_OK:
counted by status; such bodies may be delivered."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pyrmq.common.errors import RMQError
from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer
from pyrmq.remoting import RequestCode
from pyrmq.storage.check import check_store
from pyrmq.storage.files import segments
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.proxy import FaultProxy
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin, CppLoad, SendLoops
from tests.chaos.conftest import scale

MASTER_A, SLAVE_A, MASTER_B, SLAVE_B = "broker-a", "broker-a-s", "broker-b", "broker-b-s"
BROKERS = (MASTER_A, SLAVE_A, MASTER_B, SLAVE_B)
#: master -> its slave
PAIRS = {MASTER_A: SLAVE_A, MASTER_B: SLAVE_B}
TOPIC = "HaChaosT"
QUEUES = 4
PY_GROUP = "cg-ha-py"
CPP_GROUP = "cg-ha-cpp"
FRESH_GROUP = "cg-ha-fresh"
#: concurrent send loops on the one pyrmq Producer
SENDERS = 4
#: seconds each send loop rests between sends (sustained load a busy 2-core
#: machine keeps up with next to five server processes)
SEND_PAUSE = 0.01
#: faults per run, and the kinds (each occurs at least once)
FAULTS_CI = 7
FAULTS_LONG = 42
FAULT_KINDS = (
    "kill_master_a",
    "kill_slave",
    "kill_namesrv",
    "term_restart",
    "partition_blackhole",
    "partition_reset",
)
#: seconds of undisturbed load before each fault, drawn uniformly
LOAD_BEFORE_FAULT = (0.5, 3.0)
#: seconds a killed process stays down, drawn uniformly (broker-a's master
#: long enough, now and then, for the producers to move to broker-b)
DOWN_TIME = (0.0, 3.0)
#: seconds replication of broker-a stays cut, drawn uniformly
PARTITION_TIME = (2.0, 6.0)
#: deliveries the pyrmq group must see after each fault
PROGRESS_AFTER_FAULT = 20
#: bytes of the two CommitLogs compared at a time
COMPARE_CHUNK = 1 << 20


def _seed() -> int:
    raw = os.environ.get("PYRMQ_CHAOS_SEED")
    return int(raw) if raw else random.randrange(2**32)


def fault_plan(rng: random.Random, count: int) -> list[str]:
    """`count` fault kinds in a random order, every kind at least once."""
    plan = list(FAULT_KINDS) + [rng.choice(FAULT_KINDS) for _ in range(count - len(FAULT_KINDS))]
    rng.shuffle(plan)
    return plan


@pytest.fixture
def cluster_box(tmp_path: pathlib.Path) -> Iterator[list[ProcessCluster]]:
    """Holds the cluster the test starts (it needs the proxy's port first);
    stops it at the end if the test did not."""
    box: list[ProcessCluster] = []
    yield box
    for c in box:
        c.shutdown()
        print(c.log_tails(40))  # shown when the test failed


def ha_cluster(root: pathlib.Path, proxy_addr: str) -> ProcessCluster:
    return ProcessCluster(
        root,
        BROKERS,
        broker_conf={
            # re-register within a second of a name server restart
            "registerNameServerPeriod": 1000,
            # a silent master noticed in 4 s, a silent slave in 5 s
            "haSendHeartbeatInterval": 1000,
            "haHousekeepingInterval": 5000,
        },
        per_broker_conf={
            MASTER_A: {
                "brokerRole": "SYNC_MASTER",
                "flushDiskType": "SYNC_FLUSH",
                # FLUSH_SLAVE_TIMEOUT answered before the producer's 3-s timeout
                "syncFlushTimeout": 2000,
                # any free port; pinned once known, so the proxy's target holds
                "haListenPort": 0,
            },
            SLAVE_A: {
                "brokerName": MASTER_A,
                "brokerId": 1,
                "brokerRole": "SLAVE",
                "flushDiskType": "SYNC_FLUSH",
                "haMasterAddress": proxy_addr,
            },
            MASTER_B: {"brokerRole": "ASYNC_MASTER"},
            SLAVE_B: {"brokerName": MASTER_B, "brokerId": 1, "brokerRole": "SLAVE"},
        },
    )


async def runtime(admin: Admin, addr: str) -> dict[str, str]:
    resp = await admin.api.broker_request(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=3.0)
    return dict(json.loads(resp.body)["table"])


def first_difference(master: pathlib.Path, slave: pathlib.Path, end: int) -> int | None:
    """The first CommitLog offset below `end` at which the two stores differ
    (a segment missing counts as a difference), or None when they are equal
    byte for byte up to `end`. Segments are files named by their start
    offset, all of one size, so offset `o` is in the same file at the same
    position in both stores."""
    mine = dict(segments(str(master / "commitlog")))
    theirs = dict(segments(str(slave / "commitlog")))
    if end <= 0:
        return None
    if not mine:
        return 0
    seg = os.path.getsize(mine[min(mine)])
    at = 0
    for _ in range(end // COMPARE_CHUNK + end // seg + 2):
        if at >= end:
            return None
        start = at - at % seg
        if start not in mine or start not in theirs:
            return at
        n = min(COMPARE_CHUNK, end - at, start + seg - at)
        blocks = []
        for path in (mine[start], theirs[start]):
            with open(path, "rb") as f:
                f.seek(at - start)
                blocks.append(f.read(n))
        a, b = blocks
        if a != b or len(a) < n:
            same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            return at + (same if same is not None else min(len(a), len(b)))
        at += n
    raise AssertionError("first_difference: the comparison did not end")


class PyLoad:
    """The pyrmq side: SENDERS loops on one Producer, and the running
    PushConsumer group."""

    def __init__(self, namesrv: str) -> None:
        self.received: Counter[str] = Counter()
        self.deliveries = 0
        self.producer = Producer(
            "pg-ha-py",
            namesrv,
            send_msg_timeout=3.0,
            retry_times_when_send_failed=2,
            # off, as in Java: sends keep going to broker-a through its
            # faults (a 2-s FLUSH_SLAVE_TIMEOUT would isolate it for 120 s)
            send_latency_fault_enable=False,
            poll_name_server_interval=1.0,
        )
        self.consumer = group_consumer(namesrv, PY_GROUP, self.received)
        self.sends = SendLoops(self.producer, TOPIC, senders=SENDERS, pause=SEND_PAUSE)

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
        return len(self.sends.acked), sum(self.received.values())


def group_consumer(namesrv: str, group: str, counts: Counter[str]) -> PushConsumer:
    """A PushConsumer of TOPIC from the first offset counting bodies."""

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            counts[m.body.decode()] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=1.0,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        await_termination_seconds=5.0,
    )
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(listener)
    return consumer


#: log lines counted in every broker's log (reported, for the evidence)
LOG_PATTERNS = {
    "ha_refused": "HA: refused slave",
    "ha_stream_broken": "HA: replication from",
    "errors": " ERROR ",
    "tracebacks": "Traceback (most recent call last)",
}


def log_counts(c: ProcessCluster) -> dict[str, int]:
    """LOG_PATTERNS counted over the logs of all brokers."""
    out = dict.fromkeys(LOG_PATTERNS, 0)
    for proc in c.brokers.values():
        text = proc.log_path.read_text(errors="replace")
        for key, pattern in LOG_PATTERNS.items():
            out[key] += text.count(pattern)
    return out


def duplicates(delivered: Counter[str], stored: Counter[str]) -> int:
    """Deliveries of a body beyond the number of times it is stored."""
    return sum(max(0, n - stored.get(body, 0)) for body, n in delivered.items())


@pytest.mark.timeout(3600)
def test_master_slave_replication_under_random_faults_loses_no_acknowledged_message(
    arun, cluster_box, tmp_path, long_mode, report
):
    seed = _seed()
    rng = random.Random(seed)
    plan = fault_plan(rng, scale(long_mode, FAULTS_CI, FAULTS_LONG))
    figures: dict[str, Any] = {
        "seed": seed,
        "faults": len(plan),
        "fault_kinds": dict(Counter(plan)),
    }
    print(f"\n[ha chaos] seed {seed} (PYRMQ_CHAOS_SEED={seed} replays it): {plan}")
    t0 = time.monotonic()

    async def main() -> None:
        proxy = FaultProxy("127.0.0.1", 9)  # the target is set once the master listens
        await proxy.start()
        cluster = ha_cluster(tmp_path / "cluster", proxy.addr)
        cluster_box.append(cluster)
        await asyncio.to_thread(cluster.start)
        cpp = CppLoad(cluster.namesrv_addr, TOPIC, CPP_GROUP, "cpp", tmp_path / "cpp-client.log")
        try:
            async with Admin(cluster.namesrv_addr) as admin:
                ha_port = int((await runtime(admin, cluster.broker_addr(MASTER_A)))["haListenPort"])
                proxy.target_port = ha_port
                cluster.per_broker_conf[MASTER_A]["haListenPort"] = ha_port
                for master in PAIRS:
                    await admin.create_topic(cluster.broker_addr(master), TOPIC, QUEUES)
                await all_registered(admin, cluster)
                await replicated(admin, cluster, "the start")
                await run_load(admin, cluster, proxy, cpp)
        finally:
            cpp.kill()
            await proxy.shutdown()
        statuses = await asyncio.to_thread(cluster.shutdown)
        assert all(rc == 0 for rc in statuses.values()), f"exit statuses on SIGTERM: {statuses}"
        compare_stores(cluster)
        figures["log_lines"] = log_counts(cluster)

    async def run_load(
        admin: Admin, cluster: ProcessCluster, proxy: FaultProxy, cpp: CppLoad
    ) -> None:
        py = PyLoad(cluster.namesrv_addr)
        fresh: Counter[str] = Counter()
        await asyncio.to_thread(cpp.start)
        await py.start()
        try:
            await wait_until(
                lambda: py.counts()[1] > 0 and cpp.counts()[1] > 0,
                "both consumer groups to receive",
                progress=lambda: (py.counts(), cpp.counts()),
            )
            for i, kind in enumerate(plan):
                await asyncio.sleep(rng.uniform(*LOAD_BEFORE_FAULT))
                what = f"fault {i + 1}/{len(plan)} {kind} (seed {seed})"
                print(f"[ha chaos] {time.monotonic() - t0:6.1f} s: {what}")
                a0, r0 = py.counts()
                await inject(kind, cluster, proxy, admin)
                await recovered(admin, cluster, py, a0, r0, what)
            await py.stop_sending()
            await asyncio.to_thread(cpp.stop_sending)
            await replicated(admin, cluster, "the end of the load")
            acked = py.sends.acked | cpp.tally.acked
            drain = await wait_until(
                lambda: acked <= set(py.received),
                "the running pyrmq group: every acknowledged message",
                progress=lambda: py.counts()[1],
            )
            new_group = group_consumer(cluster.namesrv_addr, FRESH_GROUP, fresh)
            await new_group.start()
            try:
                drain += await wait_until(
                    lambda: acked <= set(fresh),
                    "a new pyrmq group: every acknowledged message from the first offset",
                    progress=lambda: sum(fresh.values()),
                )
            finally:
                await new_group.shutdown()
            drain += await wait_until(
                lambda: acked <= cpp.received(),
                "the C++ group: every acknowledged message",
                progress=lambda: len(cpp.received()),
                # the C++ client strands a pull on a dead connection for
                # about 30 s before it pulls again
                stall_after=45.0,
                step=0.2,
            )
            figures["drain_s"] = round(drain, 2)
        finally:
            await py.stop_sending()
            await py.consumer.shutdown()
        figures["cpp_exit"] = await asyncio.to_thread(cpp.close)
        stored: Counter[str] = Counter()
        where: dict[str, list[tuple[str, int, int]]] = {}
        for master in PAIRS:
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, master, q)
                for m in await admin.read_queue(cluster.broker_addr(master), mq):
                    body = m.body.decode()
                    stored[body] += 1
                    where.setdefault(body, []).append((master, q, m.queue_offset))
        twice = sorted((w for w in where.values() if len(w) > 1), key=lambda w: w[0])
        print(f"[ha chaos] stored twice (first 10 of {len(twice)}): {twice[:10]}")
        check(py, cpp, fresh, stored)

    async def inject(kind: str, c: ProcessCluster, proxy: FaultProxy, admin: Admin) -> None:
        if kind == "kill_master_a":
            await asyncio.to_thread(c.kill_broker, MASTER_A)
            await asyncio.sleep(rng.uniform(*DOWN_TIME))
            await c.start_broker_async(MASTER_A)
        elif kind == "kill_slave":
            slave = rng.choice((SLAVE_A, SLAVE_B))
            await asyncio.to_thread(c.kill_broker, slave)
            await asyncio.sleep(rng.uniform(*DOWN_TIME))
            await c.start_broker_async(slave)
        elif kind == "kill_namesrv":
            await asyncio.to_thread(c.kill_namesrv)
            await asyncio.sleep(rng.uniform(*DOWN_TIME))
            await c.start_namesrv_async()
        elif kind == "term_restart":
            name = rng.choice(BROKERS)
            rc = await asyncio.to_thread(c.stop_broker, name)
            assert rc == 0, f"{name} exited {rc} on SIGTERM (seed {seed})"
            await c.start_broker_async(name)
        elif kind == "partition_blackhole":
            proxy.drop = True
            await asyncio.sleep(rng.uniform(*PARTITION_TIME))
            # a black hole ends with the connections given up on: the bytes
            # dropped inside them are never delivered late
            proxy.reset_all()
            proxy.drop = False
        elif kind == "partition_reset":
            proxy.refuse = True
            proxy.reset_all()
            await asyncio.sleep(rng.uniform(*PARTITION_TIME))
            proxy.refuse = False
        else:
            raise AssertionError(f"unknown fault {kind}")

    async def recovered(
        admin: Admin, c: ProcessCluster, py: PyLoad, a0: int, r0: int, what: str
    ) -> None:
        """The load acknowledges and delivers again, every broker is routed,
        both slaves caught up."""
        await all_registered(admin, c)
        await wait_until(
            lambda: py.counts()[0] > a0,
            f"pyrmq sends acknowledged after {what}",
            progress=lambda: py.counts()[0],
        )
        await wait_until(
            lambda: py.counts()[1] >= r0 + PROGRESS_AFTER_FAULT,
            f"pyrmq deliveries after {what}",
            progress=lambda: py.counts()[1],
        )
        await replicated(admin, c, what)

    async def all_registered(admin: Admin, c: ProcessCluster) -> None:
        """The name server routes TOPIC to all four brokers."""

        async def addrs() -> int:
            try:
                route = await admin.api.get_topic_route(TOPIC, timeout=2.0)
            except RMQError:
                return -1
            if route is None:
                return 0
            return sum(len(bd.broker_addrs) for bd in route.broker_datas)

        async def done() -> bool:
            return await addrs() == len(BROKERS)

        await wait_until(done, "every broker routed by the name server", progress=addrs)

    async def replicated(admin: Admin, c: ProcessCluster, what: str) -> None:
        """Each slave connected and holding its master's CommitLog up to
        where the master was when the wait began."""
        targets: dict[str, int] = {}
        for master in PAIRS:
            for _ in range(100):
                try:
                    info = await runtime(admin, c.broker_addr(master))
                    targets[master] = int(info["commitLogMaxOffset"])
                    break
                except RMQError:
                    await asyncio.sleep(0.1)

        async def offsets() -> tuple[tuple[str, str], ...]:
            out = []
            for slave in PAIRS.values():
                try:
                    info = await runtime(admin, c.broker_addr(slave))
                    out.append((info.get("haConnected", ""), info.get("haReplicaOffset", "")))
                except RMQError:
                    out.append(("", ""))
            return tuple(out)

        async def done() -> bool:
            for (connected, offset), master in zip(await offsets(), PAIRS, strict=True):
                if connected != "True" or not offset or int(offset) < targets.get(master, 0):
                    return False
            return True

        await wait_until(
            done, f"both slaves connected and caught up after {what}", progress=offsets
        )

    def compare_stores(c: ProcessCluster) -> None:
        for master, slave in PAIRS.items():
            reports = {n: check_store(str(c.store_dir(n))) for n in (master, slave)}
            for n, rep in reports.items():
                assert rep.ok, f"{n}: store check found {rep.problems[:5]}"
            ends = {n: rep.commit_log_end for n, rep in reports.items()}
            common = min(ends.values())
            differ = first_difference(c.store_dir(master), c.store_dir(slave), common)
            figures[f"commit_log_{master}"] = {
                "master_end": ends[master],
                "slave_end": ends[slave],
                "equal_up_to": common if differ is None else differ,
            }
            assert differ is None, f"{slave}'s CommitLog differs from {master}'s at {differ}"
            assert ends[master] == ends[slave], f"{master} / {slave} CommitLogs end at {ends}"

    def check(py: PyLoad, cpp: CppLoad, fresh: Counter[str], stored: Counter[str]) -> None:
        cpp_received = Counter(d.mid for d in cpp.tally.deliveries)
        acked = py.sends.acked | cpp.tally.acked
        sent = acked | py.sends.failed | cpp.tally.failed
        lost = acked - set(stored)
        lost_groups = {
            "py": acked - set(py.received),
            "cpp": acked - set(cpp_received),
            "fresh": acked - set(fresh),
        }
        phantom = (set(stored) | set(py.received) | set(cpp_received) | set(fresh)) - sent
        figures.update(
            acked=len(acked),
            acked_py=len(py.sends.acked),
            acked_py_by_broker=dict(py.sends.acked_by),
            acked_cpp=len(cpp.tally.acked),
            failed_sends=len(py.sends.failed) + len(cpp.tally.failed),
            not_ok_py=dict(py.sends.not_ok),
            send_errors_py=dict(py.sends.errors),
            stored=sum(stored.values()),
            stored_twice={
                client: sum(n - 1 for b, n in stored.items() if n > 1 and b.startswith(client))
                for client in ("py", "cpp")
            },
            consumed={
                "py": sum(py.received.values()),
                "cpp": sum(cpp_received.values()),
                "fresh": sum(fresh.values()),
            },
            duplicates={
                "py": duplicates(py.received, stored),
                "cpp": duplicates(cpp_received, stored),
                "fresh": duplicates(fresh, stored),
            },
            lost=len(lost),
            lost_groups={k: len(v) for k, v in lost_groups.items()},
            phantom=len(phantom),
        )
        assert not lost, f"acknowledged but not stored: {sorted(lost)[:10]} (seed {seed})"
        for group, missing in lost_groups.items():
            assert not missing, f"never delivered ({group}): {sorted(missing)[:10]} (seed {seed})"
        assert not phantom, f"stored or delivered but never sent: {sorted(phantom)[:10]}"

    try:
        # the waits inside tell a stall from a slow machine; this bound only
        # keeps a hung run from holding CI
        arun(main(), timeout=600 + 60 * len(plan))
    finally:
        figures["wall_s"] = round(time.monotonic() - t0, 1)
        report(**figures)
    print(f"\n[ha chaos] {len(plan)} faults in {figures['wall_s']} s")
