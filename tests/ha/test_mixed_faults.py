"""The randomized controller-mode run of test_failover.py with partitions
among its faults: b0 runs in its own network namespace, and between two
master kills the plan may cut it off from everything (controllers, name
server, its peer, the clients) for one to six seconds, whatever its role
is then, as well as SIGKILL a slave, a controller or the name server.
What must hold is the same: every acknowledged message consumed by a new
group, by the group that ran throughout and by the C++ consumer, and the
replicas' CommitLogs identical. `--long` runs 20 master kills."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.chaos._net_ns import NetNs
from tests.ha.conftest import controller_mode_cluster, start_controller_mode, stop_controller_mode
from tests.ha.test_failover import failover_loop


@pytest.mark.timeout(2400)
def test_kills_and_partitions_lose_nothing_and_replicas_agree(
    arun: Any, tmp_path: pathlib.Path, long_mode: bool
) -> None:
    reason = NetNs.unavailable()
    if reason is not None:
        pytest.skip(reason)
    ns = NetNs.create("mix")
    try:
        ctl, c = controller_mode_cluster(tmp_path, ns)
        try:
            start_controller_mode(ctl, c, ns)
            kills = 20 if long_mode else 4
            arun(failover_loop(ctl, c, kills, ns), timeout=300 + 90 * kills)
        finally:
            ns.heal()
            stop_controller_mode(ctl, c)
    finally:
        ns.delete()
