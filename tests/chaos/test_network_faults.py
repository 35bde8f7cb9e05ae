"""Scenario 6 of the fault suite: network faults between hosts.

Two brokers (processes), one of them, broker-b, cut off from the clients
while it stays alive, then healed:

* through a FaultProxy in black-hole mode (`drop`: connections accepted and
  kept, every byte discarded; no RST), broker-b advertised at the proxy's
  address while its name-server registration goes direct, so the name
  server keeps routing clients to it;
* where the kernel allows (root, `ip netns`), broker-b runs in its own
  network namespace and the veth link to it is taken down: packets are
  dropped both ways, a new connection's SYN vanishes, TCP retransmits into
  the void, and established connections resume when the link comes back.
  Skipped with the reason where namespaces cannot be made.

Load: one producer (latency fault tolerance on, RocketMQ's way of leaving a
broker that stopped answering; 1 s send timeout) sending numbered messages
from four loops, and a push-consumer group of two members that grows to
three during the partition (a rebalance across it) and shrinks to two after
the heal. The promises, compared as sets of message ids:

* the producer fails over within a few sends: after the first send that
  times out on broker-b, every send goes to broker-a and is acknowledged;
* no acknowledged message is lost: after the heal, every acked id is
  consumed (acked ⊆ consumed), including those broker-b held, unconsumed,
  when it was cut off; anything consumed but not acked was a send that
  failed on broker-b (the request reached it, the answer did not);
* the group converges: after each membership change its members own
  disjoint queue sets covering all 8 queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.consumer.allocate import AllocateMessageQueueAveragely
from pyrmq.producer import Producer
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.proxy import FaultProxy
from tests._waiting import wait_until
from tests.chaos._net_ns import NetNs
from tests.chaos.conftest import scale
from tests.client.test_cluster import (
    BROKERS,
    QUEUES_PER_BROKER,
    AdminClient,
    owned,
)

TOPIC = "PartT"
GROUP = "cg-part"
#: broker-b's advertised address when a proxy stands in front of it
PROXY_IP = "127.0.0.2"
#: the producer's send deadline: a send to the cut-off broker costs this
SEND_TIMEOUT = 1.0
SENDERS = 4


def _can_bind(ip: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


# -- the two ways of cutting broker-b off ---------------------------------------------------


@dataclass
class Cut:
    """A started cluster and how to partition broker-b from the clients."""

    cluster: ProcessCluster
    kind: str
    partition: Callable[[], None]
    heal: Callable[[], None]
    proxy: FaultProxy | None = None


def _check_exits(statuses: dict[str, int | None]) -> None:
    assert all(rc == 0 for rc in statuses.values()), f"exit statuses on SIGTERM: {statuses}"


@contextlib.contextmanager
def netns_cluster(root: pathlib.Path) -> Iterator[tuple[ProcessCluster, NetNs]]:
    """broker-b in its own network namespace; the name server listens on
    the root side of the veth (reachable from both), broker-a on 127.0.0.1."""
    ns = NetNs.create("part")
    c = ProcessCluster(
        root,
        BROKERS,
        cluster_name="PartCluster",
        namesrv_host=ns.outer_ip,
        per_broker_conf={"broker-b": {"listenHost": ns.inner_ip}},
    )
    c.brokers["broker-b"].exec_prefix = ns.argv([])
    ok = False
    try:
        c.start()
        yield c, ns
        ok = True
    finally:
        with contextlib.suppress(Exception):
            ns.heal()  # so broker-b can unregister and stop cleanly
        try:
            statuses = c.shutdown()
        finally:
            ns.delete()
    if ok:
        _check_exits(statuses)


@contextlib.contextmanager
def proxied_cluster(root: pathlib.Path) -> Iterator[ProcessCluster]:
    """broker-b advertised as PROXY_IP:port (a FaultProxy listens there),
    registered with the name server directly."""
    c = ProcessCluster(
        root,
        BROKERS,
        cluster_name="PartCluster",
        per_broker_conf={"broker-b": {"brokerIP1": PROXY_IP}},
    )
    ok = False
    try:
        c.start()
        yield c
        ok = True
    finally:
        statuses = c.shutdown()
    if ok:
        _check_exits(statuses)


# -- load -----------------------------------------------------------------------------------


@dataclass
class Outcomes:
    """Every send: (id, start time, broker name or the error)."""

    sends: list[tuple[str, float, str | BaseException]] = field(default_factory=list)

    @property
    def acked(self) -> set[str]:
        return {i for i, _, r in self.sends if isinstance(r, str)}

    @property
    def failed(self) -> set[str]:
        return {i for i, _, r in self.sends if not isinstance(r, str)}


async def _sender(p: Producer, out: Outcomes, first: int, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for i in range(first, 1_000_000, SENDERS):
        if stop.is_set():
            return
        mid = f"m-{i:07d}"
        t = loop.time()
        try:
            r: SendResult = await p.send(Message(TOPIC, mid.encode()))
            assert r.send_status is SendStatus.SEND_OK, r
            out.sends.append((mid, t, r.message_queue.broker_name))
        except RMQError as e:
            out.sends.append((mid, t, e))
        await asyncio.sleep(0.01)  # a few hundred sends/s from the four loops


def _collector(counts: Counter[str]) -> Any:
    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            counts[m.body.decode()] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    return listener


def _member(namesrv: str, counts: Counter[str]) -> PushConsumer:
    c = PushConsumer(
        GROUP,
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=1.0,
        poll_name_server_interval=1.0,
        heartbeat_broker_interval=1.0,
        persist_consumer_offset_interval=1.0,
        consume_thread_max=4,
        pull_batch_size=8,
    )
    c.subscribe(TOPIC)
    c.register_message_listener(_collector(counts))
    return c


def _converged(members: list[PushConsumer], reachable: tuple[str, ...] = BROKERS) -> bool:
    """Every member owns what the allocation among exactly these members
    gives it: all of it when both brokers are reachable; of a cut-off
    broker's queues possibly less (a new owner cannot take one up: its
    committed offset is on that broker, as with Java's computePullFromWhere),
    but never a queue allocated to another member."""
    cids = sorted(m.client_id for m in members)
    every = sorted(_queues(BROKERS))
    strategy = AllocateMessageQueueAveragely()
    for m in members:
        mine = set(strategy.allocate(GROUP, m.client_id, every, cids))
        have = owned(m, TOPIC)
        if not have <= mine:
            return False
        if {q for q in mine if q.broker_name in reachable} - have:
            return False
    return True


def _ownership(members: list[PushConsumer]) -> Callable[[], tuple[frozenset[MessageQueue], ...]]:
    """The progress measure of a rebalance: which queues each member owns
    and how many member lookups its rebalances made (no rebalance for long,
    or rebalances that move nothing for long past the limit, is a stall)."""
    return lambda: tuple(
        (frozenset(owned(m, TOPIC)), m.rebalance.member_lookups if m.rebalance else 0)
        for m in members
    )


def _queues(brokers: tuple[str, ...]) -> set[MessageQueue]:
    return {MessageQueue(TOPIC, b, q) for b in brokers for q in range(QUEUES_PER_BROKER)}


async def _scenario(cut: Cut, long_mode: bool, report: Any) -> None:
    c = cut.cluster
    loop = asyncio.get_running_loop()
    before_s = scale(long_mode, 2, 10)
    partition_s = scale(long_mode, 6, 30)
    after_s = scale(long_mode, 3, 10)
    async with AdminClient(c) as admin:
        await admin.create_topic(TOPIC)
    counts: Counter[str] = Counter()
    out = Outcomes()
    stop = asyncio.Event()
    members = [_member(c.namesrv_addr, counts) for _ in range(3)]
    p = Producer(
        "pg-part",
        c.namesrv_addr,
        send_msg_timeout=SEND_TIMEOUT,
        retry_times_when_send_failed=2,
        send_latency_fault_enable=True,
        poll_name_server_interval=1.0,
    )
    await p.start()
    senders: list[asyncio.Task[None]] = []
    started: list[PushConsumer] = []
    try:
        for m in members[:2]:
            await m.start()
            started.append(m)
        t_two = await wait_until(
            lambda: _converged(members[:2]), "2 members own 4/4", progress=_ownership(members[:2])
        )
        senders = [
            asyncio.create_task(_sender(p, out, n, stop), name=f"test:sender{n}")
            for n in range(SENDERS)
        ]
        await asyncio.sleep(before_s)
        # the members stop pulling for a moment, so each broker holds
        # acknowledged messages nobody has consumed yet when the cut comes
        for m in started:
            m.suspend()
        await asyncio.sleep(0.5)
        # -- partition ------------------------------------------------------------
        t_cut = loop.time()
        cut.partition()
        on_b_at_cut = {i for i, _, r in out.sends if r == "broker-b"}
        backlog_b = len(on_b_at_cut - counts.keys())
        for m in started:
            m.resume()
        await members[2].start()  # a member joins while broker-b is unreachable
        started.append(members[2])
        t_three = await wait_until(
            lambda: _converged(members, ("broker-a",)),
            "3 members share broker-a, cut off",
            progress=_ownership(members),
        )
        left = partition_s - (loop.time() - t_cut)
        if left > 0:
            await asyncio.sleep(left)
        during = [(i, t, r) for i, t, r in out.sends if t >= t_cut]
        # -- heal -----------------------------------------------------------------
        assert c.brokers["broker-b"].running, "broker-b died during the partition"
        t_heal = loop.time()
        cut.heal()
        await asyncio.sleep(after_s)
        stop.set()
        await asyncio.gather(*senders)
        acked = out.acked
        t_three_healed = await wait_until(
            lambda: _converged(members),
            "3 members own all 8 queues after the heal",
            progress=_ownership(members),
        )
        # every acknowledged message is consumed, broker-b's backlog included
        t_drain = await wait_until(
            lambda: acked <= counts.keys(),
            "every acked message consumed after the heal",
            progress=lambda: len(counts),
        )
        await members[0].shutdown()  # a member leaves after the heal
        started.remove(members[0])
        t_leave = await wait_until(
            lambda: _converged(members[1:]),
            "2 members after leave",
            progress=_ownership(members[1:]),
        )
    finally:
        stop.set()
        await asyncio.gather(*senders, return_exceptions=True)
        for m in started:
            await m.shutdown()
        await p.shutdown()

    # the sends that failed: those caught by the cut (started at most one
    # send timeout before it, or after it until the first timeout isolated
    # broker-b); every other send went to broker-a and was acknowledged
    failures = sorted(t for _, t, r in out.sends if not isinstance(r, str))
    on_b_after_cut = [i for i, t, r in out.sends if r == "broker-b" and t >= t_cut]
    first_fail = failures[0] if failures else t_cut
    last_fail = failures[-1] if failures else t_cut
    # sends started from the first failed one to the last (the other loops
    # went on meanwhile): how many sends the producer took to leave broker-b
    failover_sends = sum(first_fail <= t <= last_fail for _, t, _ in out.sends)
    in_partition = [r for _, t, r in during if t < t_heal]
    lost = acked - counts.keys()
    extra = counts.keys() - acked
    dups = sum(n - 1 for n in counts.values())
    where = {i: r for i, _, r in out.sends if isinstance(r, str)}
    dups_by_broker = Counter(where.get(i, "?") for i, n in counts.items() for _ in range(n - 1))
    report(
        fault=cut.kind,
        sends=len(out.sends),
        acked=len(acked),
        failed_sends=len(out.failed),
        sends_during_partition=len(in_partition),
        failover_sends=failover_sends,
        last_failed_send_started_after_cut_s=round(last_fail - t_cut, 3),
        broker_b_backlog_at_cut=backlog_b,
        consumed_distinct=len(counts),
        duplicates=dups,
        duplicates_by_broker=dict(dups_by_broker),
        lost=len(lost),
        consumed_not_acked=len(extra),
        seconds_to_converge={
            "two": round(t_two, 2),
            "three_cut_off": round(t_three, 2),
            "three_healed": round(t_three_healed, 2),
            "after_leave": round(t_leave, 2),
        },
        seconds_to_drain_after_heal=round(t_drain + after_s, 2),
    )
    assert not lost, f"{len(lost)} acknowledged messages never consumed: {sorted(lost)[:10]}"
    assert extra <= out.failed, f"consumed but never sent: {sorted(extra - out.failed)[:10]}"
    assert backlog_b > 0, "broker-b held no unconsumed message when cut off: nothing tested"
    # the producer left broker-b within a few sends: at most one timed-out
    # send per concurrent loop (each may have picked broker-b before the
    # first timeout isolated it), all started within a send timeout of the cut
    assert on_b_after_cut == [], on_b_after_cut
    assert len(failures) <= SENDERS, len(failures)
    assert all(abs(t - t_cut) < SEND_TIMEOUT + 0.5 for t in failures), (failures, t_cut)
    # during the partition the producer kept working on broker-a
    assert sum(r == "broker-a" for r in in_partition) >= 10


@pytest.mark.timeout(600)
@pytest.mark.skipif(not _can_bind(PROXY_IP), reason=f"{PROXY_IP} is not a local address here")
def test_partition_through_black_hole_proxy(arun, tmp_path, long_mode, report, caplog):
    caplog.set_level(logging.WARNING)
    with proxied_cluster(tmp_path / "cluster") as c:
        port = int(c.broker_addr("broker-b").rpartition(":")[2])

        async def main() -> None:
            async with FaultProxy("127.0.0.1", port, listen_host=PROXY_IP, listen_port=port) as px:

                def partition() -> None:
                    px.drop = True

                def heal() -> None:
                    # the dropped bytes cut frames in half: the streams are
                    # unusable, as after a long outage; reset them, and
                    # accept again
                    px.drop = False
                    px.reset_all()

                await _scenario(Cut(c, "black-hole proxy", partition, heal, px), long_mode, report)

        arun(main(), timeout=scale(long_mode, 150, 400))


@pytest.mark.timeout(600)
def test_partition_by_network_namespace(arun, tmp_path, long_mode, report):
    reason = NetNs.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with netns_cluster(tmp_path / "cluster") as (c, ns):

        async def main() -> None:
            await _scenario(Cut(c, "netns link down", ns.partition, ns.heal), long_mode, report)

        arun(main(), timeout=scale(long_mode, 150, 400))
