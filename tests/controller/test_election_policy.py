"""Elections on one controller (a one-node Raft group: its own majority):
out-of-SyncStateSet replicas are elected only with enableElectUncleanMaster;
without a candidate the group has no master until one returns; the
candidate with the highest epoch, then max offset, wins."""

from __future__ import annotations

from typing import Any

import pytest

from pyrmq.controller import ControllerClient
from tests._waiting import wait_until
from tests.controller.conftest import CLUSTER, BrokerPump

GROUP = "broker-b"


async def setup_group(client: ControllerClient, pump: BrokerPump, n: int) -> None:
    for _ in range(n):
        bid, _ = await client.register(CLUSTER, GROUP, "pending")
        pump.alive[bid] = pump.addr(bid)
        await client.register_broker(CLUSTER, GROUP, bid, pump.addr(bid))
    await pump.beat_once()
    pump.start()
    await client.elect_master(CLUSTER, GROUP, 1)


@pytest.mark.parametrize("unclean", [False, True])
def test_out_of_sync_replica_is_elected_only_when_unclean(
    group_factory: Any, arun: Any, unclean: bool
) -> None:
    g = group_factory(1, extra={"enableElectUncleanMaster": str(unclean).lower()})

    async def main() -> None:
        await g.start()
        async with ControllerClient(g.controller_addr, retry_timeout=30) as client:
            pump = BrokerPump(client, GROUP)
            try:
                await setup_group(client, pump, 2)  # SSS stays {1}: 2 is out of sync
                del pump.alive[1]

                async def master_changed() -> bool:
                    return (await client.get_replica_info(GROUP)).master_epoch == 2

                await wait_until(
                    master_changed,
                    "an election after the master went silent",
                    progress=lambda: pump.sent,
                    stall_after=30,
                )
                info = await client.get_replica_info(GROUP)
                if unclean:
                    assert (info.master_broker_id, info.sync_state_set) == (2, {2})
                else:
                    assert info.master_broker_id is None and info.master_address == ""
                    assert info.sync_state_set == {1}
                    # the old master returns: it is in the SSS, so it leads again
                    pump.alive[1] = pump.addr(1)

                    async def back() -> bool:
                        return (await client.get_replica_info(GROUP)).master_broker_id == 1

                    await wait_until(
                        back,
                        "broker 1 re-elected on its return",
                        progress=lambda: pump.sent,
                        stall_after=30,
                    )
                    assert (await client.get_replica_info(GROUP)).master_epoch == 3
            finally:
                await pump.stop()

    arun(main(), timeout=120)


def test_the_freshest_in_sync_replica_is_elected(group_factory: Any, arun: Any) -> None:
    g = group_factory(1)

    async def main() -> None:
        await g.start()
        async with ControllerClient(g.controller_addr, retry_timeout=30) as client:
            pump = BrokerPump(client, GROUP)
            try:
                await setup_group(client, pump, 3)
                info = await client.get_replica_info(GROUP)
                await client.alter_sync_state_set(
                    GROUP, 1, info.master_epoch, {1, 2, 3}, info.sync_state_set_epoch
                )
                pump.offsets = {2: (1, 500), 3: (1, 900)}  # 3 has more of epoch 1
                await pump.beat_once()
                del pump.alive[1]

                async def elected() -> bool:
                    return (await client.get_replica_info(GROUP)).master_epoch == 2

                await wait_until(elected, "an election", progress=lambda: pump.sent, stall_after=30)
                assert (await client.get_replica_info(GROUP)).master_broker_id == 3
            finally:
                await pump.stop()

    arun(main(), timeout=120)
