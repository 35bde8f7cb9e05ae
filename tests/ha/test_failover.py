"""Controller mode (RocketMQ 5): three controller processes (pysyncobj Raft)
and a broker group of two brokers with enableControllerMode=true. The
master is SIGKILLed under load, again and again (every second time with one
of the three controllers, restarted afterwards): a new master is elected
from the SyncStateSet, sends succeed again, the old master returns as a
slave and cuts any tail the new master never had (a kill right after the
master shrank its SyncStateSet to itself elects nobody: the controllers must
say so, and the old master takes over again), and in the end every
acknowledged message is consumed and the replicas' CommitLogs are
identical up to their common end.

tests/ha/test_mixed_faults.py runs the same loop with b0 in its own network
namespace, adding partitions (b0 cut off from everything, as master or as
slave) to the faults between kills.

Counts, not timings: the outage of each kill (first failed send to the
first successful one after it) is measured and printed, never asserted."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import statistics
import time
from collections import Counter
from typing import Any

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.controller.client import ControllerClient
from pyrmq.producer import Producer
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.controllers import ControllerGroup
from pyrmq.testing.ha import replica_tables, settled_master, stored_messages
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin, CppLoad
from tests.chaos._net_ns import NetNs
from tests.ha.conftest import GROUP, NAMES, controller_addr
from tests.ha.test_replication import consumed_by_new_group, consumer

TOPIC = "FailoverT"
QUEUES = 4


async def roles(admin: Admin, c: ProcessCluster) -> dict[str, dict[str, str]]:
    return await replica_tables(admin.api, c, NAMES)


async def settled(admin: Admin, c: ProcessCluster) -> str | None:
    """The master's name once one is master and every running broker is in
    its SyncStateSet, else None."""
    return settled_master(await roles(admin, c), c, NAMES)


def commit_log_bytes(root: pathlib.Path) -> tuple[int, int, bytes]:
    """(first offset, end of the written data, bytes) of a stopped broker's
    CommitLog (the end: after the last non-zero byte; both replicas are
    compared up to the shorter one's)."""
    files = sorted(f for f in (root / "commitlog").iterdir() if f.name.isdigit())
    data = b"".join(f.read_bytes() for f in files)
    first = int(files[0].name)
    return first, first + len(data.rstrip(b"\0")), data


def stop_and_compare_replicas(c: ProcessCluster) -> int:
    """Stop both brokers; assert their CommitLogs are equal up to the
    shorter one's end; the bytes compared."""
    for name in NAMES:
        c.stop_broker(name)
    (a0, e0, d0), (a1, e1, d1) = (commit_log_bytes(c.store_dir(n)) for n in NAMES)
    lo, common = max(a0, a1), min(e0, e1)
    assert d0[lo - a0 : common - a0] == d1[lo - a1 : common - a1], "replica logs differ"
    return common - lo


def test_controller_failover_under_load_loses_nothing_and_replicas_agree(
    arun: Any, controller_cluster: tuple[ControllerGroup, ProcessCluster], long_mode: bool
) -> None:
    ctl, c = controller_cluster
    kills = 20 if long_mode else 3
    arun(failover_loop(ctl, c, kills), timeout=300 + 60 * kills)


#: what may also happen between two master kills (None: nothing)
EXTRA_FAULTS = (None, None, "slave", "controller", "namesrv")
#: the same when b0 runs in a network namespace: partitions too
EXTRA_FAULTS_NS = (None, "slave", "controller", "namesrv", "partition", "partition")


async def _extra_fault(
    kind: str,
    ctl: ControllerGroup,
    c: ProcessCluster,
    master: str,
    rnd: random.Random,
    ns: NetNs | None,
) -> str:
    """SIGKILL one more process and start it again after a moment, or cut
    b0 off for a few seconds (ns); the fault's name for the tally."""
    if kind == "partition":
        assert ns is not None
        ns.partition()  # b0's packets vanish: controllers, name server, slave, clients
        # long enough, as often as not, for the controllers to give up on b0
        await asyncio.sleep(rnd.uniform(1.0, 6.0))
        ns.heal()
        return f"partition of b0 as {'master' if master == 'b0' else 'slave'}"
    if kind == "slave":
        slave = next(n for n in NAMES if n != master)
        c.kill_broker(slave)
        await asyncio.sleep(rnd.uniform(0.5, 3.0))
        await c.start_broker_async(slave)
    elif kind == "controller":
        i = rnd.randrange(3)
        ctl.kill(i)
        await asyncio.sleep(rnd.uniform(0.5, 3.0))
        await ctl.start([i])
    else:
        c.kill_namesrv()
        await asyncio.sleep(rnd.uniform(0.5, 3.0))
        await c.start_namesrv_async()
    return kind


async def failover_loop(
    ctl: ControllerGroup, c: ProcessCluster, kills: int, ns: NetNs | None = None
) -> None:
    seed = int(os.environ.get("PYRMQ_CHAOS_SEED") or random.randrange(2**32))
    print(f"[failover] seed {seed} (PYRMQ_CHAOS_SEED={seed} replays the plan)")
    rnd = random.Random(seed)
    faults: Counter[str] = Counter()
    async with Admin(c.namesrv_addr) as admin:
        master = await wait_settled(admin, c)
        await admin.create_topic(c.broker_addr(master), TOPIC, QUEUES)
        acked: set[str] = set()
        other: Counter[str] = Counter()
        failed_at: list[float] = []
        ok_at: list[float] = []
        stop = asyncio.Event()

        async def sender(k: int) -> None:
            async with Producer(
                f"fo-pg-{k}", c.namesrv_addr, send_msg_timeout=2.0, poll_name_server_interval=0.5
            ) as p:
                for i in range(1_000_000):
                    if stop.is_set():
                        return
                    body = f"fo-{k}-{i}"
                    try:
                        r = await p.send(Message(TOPIC, body.encode()))
                    except RMQError:
                        failed_at.append(time.monotonic())
                        await asyncio.sleep(0.05)
                        continue
                    if r.send_status is SendStatus.SEND_OK:
                        acked.add(body)
                        ok_at.append(time.monotonic())
                    else:
                        other[r.send_status.name] += 1
                        failed_at.append(time.monotonic())

        senders = [asyncio.create_task(sender(k)) for k in range(4)]
        outages: list[float] = []
        moves = 0  # elections beyond the kills (late heartbeats)
        unelectable = 0  # kills after which only the killed master could take over
        cc = ControllerClient(controller_addr(ctl, ns), timeout=2.0, retry_timeout=3.0)
        controller_kills = 0  # a controller SIGKILLed with every second master
        # the RocketMQ C++ client, unchanged, as a second producer and consumer
        cpp = CppLoad(c.namesrv_addr, TOPIC, "fo-cpp", "cpp", c.root / "cpp.log")
        cpp.start()
        # a pyrmq group consuming throughout: a consumer must never skip an
        # acknowledged message because it read, on the old master, a record
        # that the failover then cut (RocketMQ 5's confirmOffset)
        running: Counter[str] = Counter()
        live = consumer(c, "fo-running", TOPIC, running)
        await live.start()

        async def more_acks(n: int, what: str) -> None:
            before = len(acked)
            await wait_until(lambda: len(acked) >= before + n, what, progress=lambda: len(acked))

        try:
            for n in range(kills):
                await more_acks(100, "100 more acknowledged sends before the next kill")
                extra = rnd.choice(EXTRA_FAULTS if ns is None else EXTRA_FAULTS_NS)
                if extra is not None:
                    faults[await _extra_fault(extra, ctl, c, master, rnd, ns)] += 1
                    master = await wait_settled(admin, c)
                    await more_acks(50, f"50 acknowledged sends after the {extra} fault")
                # the group as it is now: the set may have shrunk since
                master = await wait_settled(admin, c)
                down = None
                if n % 2 == 1:  # one of the three controllers dies too
                    down = n % 3
                    ctl.kill(down)
                    controller_kills += 1
                master_id = int((await roles(admin, c))[master]["controllerBrokerId"])
                killed_at = time.monotonic()
                c.kill_broker(master)
                new = await _wait_new_master(admin, c, master, master_id, cc)
                if new is None:
                    # the master shrank its SyncStateSet to itself just
                    # before it died (a slave fell behind or reconnected;
                    # the change was still in flight when the group looked
                    # settled): only the master itself may take over, so the
                    # group waits for it. It returns and must be master again.
                    unelectable += 1
                    if down is not None:
                        await ctl.start([down])
                    await c.start_broker_async(master)
                    master = await wait_settled(admin, c)
                    continue

                def first_fail(killed_at: float = killed_at) -> float:
                    return min((t for t in failed_at if t >= killed_at), default=killed_at)

                await wait_until(
                    lambda: bool(ok_at) and ok_at[-1] > first_fail(),
                    f"a successful send after the failures of kill {n + 1}",
                    progress=lambda: (len(failed_at), len(ok_at)),
                )
                t_fail = first_fail()
                outages.append(min(t for t in ok_at if t > t_fail) - t_fail)
                if down is not None:
                    await ctl.start([down])  # back on its controllerStorePath
                await c.start_broker_async(master)  # the old master, same store
                # usually `new`; on a slow machine a late heartbeat may move
                # the master again, which is the controller doing its job
                master = await wait_settled(admin, c)
                moves += master != new
            # two of three controllers down: failover stops, nothing else does
            ctl.kill(0)
            ctl.kill(1)
            await more_acks(200, "200 acknowledged sends with two of three controllers down")
            await ctl.start([0, 1])
            stop.set()
            await asyncio.gather(*senders)
            cpp.stop_sending()
            cpp_acked = set(cpp.tally.acked)
            await wait_until(
                lambda: cpp_acked <= cpp.received(),
                "the C++ consumer receiving every C++ acknowledged message",
                progress=lambda: len(cpp.received()),
            )
            acked |= cpp_acked
            await wait_until(
                lambda: acked <= set(running),
                "the running pyrmq group receiving every acknowledged message",
                progress=lambda: len(running),
            )
            received = await consumed_by_new_group(c, "fo-reader", TOPIC, acked)
            master = await wait_settled(admin, c)
            stored = await stored_messages(admin.api, c.broker_addr(master), TOPIC, QUEUES)
        finally:
            stop.set()
            for t in senders:
                t.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
            await live.shutdown()
            await cc.shutdown()
            cpp_exit = cpp.close()
    compared = stop_and_compare_replicas(c)
    assert outages, f"none of the {kills} kills left an electable replica: nothing failed over"
    print(
        f"\ncontroller failover (seed {seed}): {kills} master kills ({controller_kills} of "
        f"them with a controller SIGKILLed too), other faults {dict(faults)}, then 2 of 3 "
        f"controllers down while sending; acknowledged {len(acked)} "
        f"({len(cpp_acked)} by the C++ client, whose consumer got all of them; exit "
        f"{cpp_exit}), {stored} stored, all consumed by a new group ({len(received)} "
        f"distinct bodies, {sum(received.values()) - len(received)} deliveries beyond a "
        f"body's first; the running group {sum(running.values()) - len(running)}; the C++ "
        f"consumer {cpp.tally.duplicates()} redeliveries of a stored record); "
        f"other answers {dict(other)}; outage s (first failed to first good send): "
        f"min {min(outages):.2f} median {statistics.median(outages):.2f} "
        f"max {max(outages):.2f}; extra master moves {moves}; kills with no electable "
        f"replica (SyncStateSet shrunk to the master) {unelectable}; replica logs identical over "
        f"{compared} bytes"
    )


async def wait_settled(admin: Admin, c: ProcessCluster) -> str:
    found: list[str] = []

    async def check() -> bool:
        m = await settled(admin, c)
        if m:
            found.append(m)
        return m is not None

    async def progress() -> Any:
        info = await roles(admin, c)
        return tuple(
            sorted((n, t.get("controllerRole"), t.get("syncStateSet")) for n, t in info.items())
        )

    await wait_until(check, "one master with every replica in its SyncStateSet", progress=progress)
    return found[-1]


async def _wait_new_master(
    admin: Admin,
    c: ProcessCluster,
    old: str,
    old_id: int | None = None,
    cc: ControllerClient | None = None,
) -> str | None:
    """The broker elected after `old` (controller brokerId old_id) was
    killed. Given the controllers (cc), None when they say nobody can be: no
    master and a SyncStateSet of old_id alone (unclean election is off, as
    it must be)."""
    found: list[str | None] = []

    async def check() -> bool:
        info = await roles(admin, c)
        for n, t in info.items():
            if n != old and t.get("controllerRole") == "MASTER":
                found.append(n)
                return True
        if cc is None:
            return False
        try:
            group = await cc.get_replica_info(GROUP)
        except RMQError:
            return False
        if group.master_broker_id is None and group.sync_state_set == {old_id}:
            found.append(None)
            return True
        return False

    await wait_until(check, f"a master other than {old}", stall_after=30)
    return found[-1]
