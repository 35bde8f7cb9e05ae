"""Replication and failover: real broker and controller processes on
127.0.0.1. `--long` (or PYRMQ_CHAOS_LONG=1) runs the full counts."""

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.controllers import ControllerGroup
from tests.chaos._net_ns import NetNs
from tests.chaos.conftest import long_mode, report  # noqa: F401
from tests.integration.conftest import arun  # noqa: F401

#: the controller-mode broker group: its brokerName and its brokers' names
GROUP = "broker-a"
NAMES = ("b0", "b1")


#: the brokers' settings: SYNC_MASTER acknowledging only what every replica
#: of the SyncStateSet has, liveness in seconds rather than RocketMQ's tens
BROKER_CONF: dict[str, object] = {
    "brokerName": GROUP,
    "enableControllerMode": "true",
    "brokerRole": "SYNC_MASTER",
    "allAckInSyncStateSet": "true",
    "flushDiskType": "SYNC_FLUSH",
    "brokerHeartbeatInterval": 300,
    "controllerHeartBeatTimeoutMills": 2000,
    "syncBrokerMetadataPeriod": 500,
    "checkSyncStateSetPeriod": 500,
    "haMaxTimeSlaveNotCatchup": 3000,
    "haSendHeartbeatInterval": 500,
}


def controller_mode_cluster(
    root: pathlib.Path, ns: NetNs | None = None
) -> tuple[ControllerGroup, ProcessCluster]:
    """Three controllers and the broker group, not started. With ns: b0
    runs inside the namespace (its inner address), the controllers, the
    name server and b1 on its outer address, so ns.partition() cuts b0 off
    from all of them and from the test's clients."""
    ctl_root = root / "controllers"
    ctl_root.mkdir()
    if ns is None:
        return ControllerGroup(ctl_root, 3), ProcessCluster(
            root / "cluster", NAMES, broker_conf=dict(BROKER_CONF)
        )
    ctl = ControllerGroup(ctl_root, 3, extra={"bindAddress": ns.outer_ip})
    c = ProcessCluster(
        root / "cluster",
        NAMES,
        namesrv_host=ns.outer_ip,
        broker_conf=dict(BROKER_CONF),
        per_broker_conf={"b0": {"listenHost": ns.inner_ip}, "b1": {"listenHost": ns.outer_ip}},
    )
    c.brokers["b0"].exec_prefix = ns.argv([])
    return ctl, c


def controller_addr(ctl: ControllerGroup, ns: NetNs | None) -> str:
    if ns is None:
        return ctl.controller_addr
    return ";".join(f"{ns.outer_ip}:{p}" for p in ctl.listen_ports)


def start_controller_mode(ctl: ControllerGroup, c: ProcessCluster, ns: NetNs | None) -> None:
    asyncio.run(ctl.start())
    c.broker_conf["controllerAddr"] = controller_addr(ctl, ns)
    c.start()


def stop_controller_mode(ctl: ControllerGroup, c: ProcessCluster) -> None:
    c.shutdown()
    for p in ctl.procs:
        p.stop()
    print(c.log_tails(30))  # shown when the test failed


@pytest.fixture
def controller_cluster(tmp_path: pathlib.Path) -> Iterator[tuple[ControllerGroup, ProcessCluster]]:
    ctl, c = controller_mode_cluster(tmp_path)
    try:
        start_controller_mode(ctl, c, None)
        yield ctl, c
    finally:
        stop_controller_mode(ctl, c)


#: the 4.x master/slave pair: broker-a and its SLAVE (brokerId 1)
MASTER, SLAVE = "broker-a", "broker-a-s"


def ha_cluster(root: pathlib.Path, role: str, flush: str = "SYNC_FLUSH") -> ProcessCluster:
    return ProcessCluster(
        root,
        (MASTER, SLAVE),
        broker_conf={"haSendHeartbeatInterval": 1000, "flushDiskType": flush},
        per_broker_conf={
            MASTER: {"brokerRole": role},
            SLAVE: {"brokerName": MASTER, "brokerId": 1, "brokerRole": "SLAVE"},
        },
    )


def running(c: ProcessCluster) -> Iterator[ProcessCluster]:
    """Start c; shut it down after the test, its logs' tails printed (shown
    when the test failed)."""
    try:
        c.start()
        yield c
    finally:
        c.shutdown()
        print(c.log_tails(40))


@pytest.fixture
def sync_cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    yield from running(ha_cluster(tmp_path / "cluster", "SYNC_MASTER"))


@pytest.fixture
def async_cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    yield from running(ha_cluster(tmp_path / "cluster", "ASYNC_MASTER", flush="ASYNC_FLUSH"))
