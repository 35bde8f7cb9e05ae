"""A partitioned master in controller mode: the master (b0) runs in its own
network namespace (tests/chaos/_net_ns.py); the controllers, the name
server, its slave (b1) and one producer are outside, a second producer is
inside with it. The namespace's link goes down: b0 is cut off from its
slave and from the controllers while the inner producer still reaches it.

What must hold: the controllers elect b1; the outer producer's sends
succeed on b1; b0 acknowledges nothing once it is cut off (it needs its
slave for every SEND_OK, allAckInSyncStateSet, and cannot shrink its
SyncStateSet without the controllers), so two masters never both
acknowledge; after the heal b0 rejoins as a slave, cuts the tail it stored
but never acknowledged, and every acknowledged message is consumed.
Measured (printed): b0's last SEND_OK, the partition, b1's first SEND_OK."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, split_offset_msg_id
from pyrmq.common.results import SendStatus
from pyrmq.controller.client import ControllerClient
from pyrmq.producer import Producer
from pyrmq.storage.message_store import encode_host
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.chaos._net_ns import NetNs
from tests.ha.conftest import (
    GROUP,
    controller_addr,
    controller_mode_cluster,
    start_controller_mode,
    stop_controller_mode,
)
from tests.ha.test_failover import roles, stop_and_compare_replicas, wait_settled
from tests.ha.test_replication import consumed_by_new_group

REPO = pathlib.Path(__file__).resolve().parents[2]
TOPIC = "PartitionT"


@pytest.mark.timeout(600)
def test_a_partitioned_master_acknowledges_nothing_once_cut_off(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    reason = NetNs.unavailable()
    if reason is not None:
        pytest.skip(reason)
    ns = NetNs.create("ha")
    ctl, c = controller_mode_cluster(tmp_path, ns)
    ctl_addr = controller_addr(ctl, ns)
    inner: subprocess.Popen[bytes] | None = None
    try:
        start_controller_mode(ctl, c, ns)
        inner = subprocess.Popen(
            ns.argv([sys.executable, "-m", "tests.ha._ns_sender", c.namesrv_addr, TOPIC, "120"]),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        arun(_partition(c, ns, ctl_addr, inner), timeout=400)
    finally:
        if inner is not None and inner.poll() is None:
            inner.kill()
            inner.wait(10)
        with contextlib.suppress(Exception):
            ns.heal()
        stop_controller_mode(ctl, c)
        ns.delete()


async def _partition(
    c: ProcessCluster, ns: NetNs, ctl_addr: str, inner: subprocess.Popen[bytes]
) -> None:
    lines: list[str] = []

    async def read_inner() -> None:
        assert inner.stdout is not None
        loop = asyncio.get_running_loop()
        for _ in range(10_000_000):
            raw = await loop.run_in_executor(None, inner.stdout.readline)
            if not raw:
                return
            lines.append(raw.decode().strip())

    b0_ip, b0_port = c.broker_addr("b0").rsplit(":", 1)
    b0_host = encode_host(b0_ip, int(b0_port))

    def inner_ok(only_b0: bool = True) -> list[tuple[float, str]]:
        """The inner producer's SEND_OKs (stored by b0, unless only_b0 is
        False: its route may have moved to b1 before the cut)."""
        out = []
        for k, w, b, *rest in (x.split() for x in lines):
            if k == "OK" and (not only_b0 or split_offset_msg_id(rest[0])[0] == b0_host):
                out.append((float(w), b))
        return out

    async with Admin(c.namesrv_addr) as admin:
        master = await wait_settled(admin, c)
        if master != "b0":  # the partitioned one must be the master
            master = await _make_master(admin, c, ctl_addr, "b0")
        assert master == "b0"
        await admin.create_topic(c.broker_addr("b0"), TOPIC, 4)
        restarts = 0
        reader = asyncio.create_task(read_inner())
        outer_ok: list[tuple[float, str, str]] = []
        stop = asyncio.Event()

        async def outer_sender() -> None:
            async with Producer(
                "ha-outer", c.namesrv_addr, send_msg_timeout=2.0, poll_name_server_interval=0.5
            ) as p:
                for n in range(10_000_000):
                    if stop.is_set():
                        return
                    body = f"out-{n}"
                    try:
                        r = await p.send(Message(TOPIC, body.encode()))
                    except RMQError:
                        await asyncio.sleep(0.05)
                        continue
                    if r.send_status is SendStatus.SEND_OK:
                        outer_ok.append((time.time(), body, r.message_queue.broker_name))
                    await asyncio.sleep(0.01)

        outer = asyncio.create_task(outer_sender())
        try:
            for _ in range(5):
                await wait_until(
                    lambda: len(inner_ok()) >= 50 and len(outer_ok) >= 50,
                    "both producers acknowledged by b0 before the cut",
                    progress=lambda: (len(lines), len(outer_ok)),
                )
                if await _is_master(admin, c, "b0"):
                    break
                # a late heartbeat on a loaded machine moved the master before
                # the cut: put b0 back and start over
                restarts += 1
                await _make_master(admin, c, ctl_addr, "b0")
            cut_at = time.time()
            ns.partition()
            await wait_until(
                lambda: _is_master(admin, c, "b1"),
                "b1 elected while b0 is cut off",
                stall_after=60,
            )
            elected_at = time.time()
            outer_before = len(outer_ok)
            await wait_until(
                lambda: len(outer_ok) >= outer_before + 30,
                "the outer producer acknowledged by b1",
                progress=lambda: len(outer_ok),
            )
            first_b1_ok = outer_ok[outer_before][0]
            # the inner producer keeps sending to b0 for a while
            inner_lines = len(lines)
            await wait_until(
                lambda: len(lines) >= inner_lines + 20,
                "the inner producer still answered by b0",
                progress=lambda: len(lines),
            )
            ns.heal()
            await wait_until(
                lambda: _slave(admin, c, "b0"), "b0 back as b1's slave", stall_after=60
            )
            await wait_settled(admin, c)
        finally:
            stop.set()
            await asyncio.gather(outer, return_exceptions=True)
            inner.kill()
            await asyncio.gather(reader, return_exceptions=True)
        ok_inner = inner_ok()
        late = [b for w, b in ok_inner if w > cut_at]
        overlap = [b for w, b in ok_inner if w >= first_b1_ok]
        last_b0 = max((w for w, _ in ok_inner), default=cut_at)
        kinds = Counter(x.split()[0] for x in lines)
        acked = {b for _, b in inner_ok(only_b0=False)} | {b for _, b, _ in outer_ok}
        await consumed_by_new_group(c, "ha-partition-reader", TOPIC, acked)
    assert not overlap, f"b0 acknowledged {len(overlap)} sends after b1 acknowledged its first"
    compared = stop_and_compare_replicas(c)
    print(
        f"\npartitioned master: b0's last SEND_OK {last_b0 - cut_at:+.2f} s from the cut, "
        f"b1 elected {elected_at - cut_at:+.2f} s, b1's first SEND_OK "
        f"{first_b1_ok - cut_at:+.2f} s; b0 acknowledged {len(late)} after the cut, "
        f"{len(overlap)} while b1 was master; inner producer answers {dict(kinds)}; "
        f"acknowledged {len(acked)}, all consumed; logs identical over {compared} bytes; "
        f"{restarts} restart(s) after a master move before the cut"
    )


async def _make_master(admin: Admin, c: ProcessCluster, ctl_addr: str, name: str) -> str:
    info = await roles(admin, c)
    async with ControllerClient(ctl_addr) as cc:
        broker_id = int(info[name]["controllerBrokerId"])
        with contextlib.suppress(RMQError):  # already master again
            await cc.elect_master(c.cluster_name, GROUP, broker_id, designate=True)
    await wait_until(
        lambda: _is_master(admin, c, name), f"{name} elected by the admin", stall_after=30
    )
    return await wait_settled(admin, c)


async def _is_master(admin: Admin, c: ProcessCluster, name: str) -> bool:
    info = await roles(admin, c)
    return info.get(name, {}).get("controllerRole") == "MASTER"


async def _slave(admin: Admin, c: ProcessCluster, name: str) -> bool:
    info = await roles(admin, c)
    return info.get(name, {}).get("controllerRole") == "SLAVE"
