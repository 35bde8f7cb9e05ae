"""Three controller processes: one Raft leader; registration, heartbeats and
epoch-fenced ALTER_SYNC_STATE_SET; failover of a silent master; SIGKILL of
the Raft leader; two of three down; restart from controllerStorePath."""

from __future__ import annotations

from typing import Any

import pytest

from pyrmq.common.errors import (
    ControllerFencedMasterEpochError,
    ControllerFencedSyncStateSetEpochError,
    ControllerNotLeaderError,
)
from pyrmq.controller import ControllerClient
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests._waiting import wait_until
from tests.controller.conftest import CLUSTER, BrokerPump

GROUP = "broker-a"


async def leaders(client: ControllerClient, addrs: list[str]) -> list[str]:
    out = []
    for a in addrs:
        try:
            if (await client.get_metadata(a)).is_leader:
                out.append(a)
        except Exception:
            pass
    return out


async def one_leader(client: ControllerClient, addrs: list[str]) -> str:
    found: list[str] = []

    async def exactly_one() -> bool:
        found[:] = await leaders(client, addrs)
        return len(found) == 1

    await wait_until(exactly_one, "exactly one Raft leader among the controllers", stall_after=30)
    return found[0]


async def master_and_sync_set(client: ControllerClient, pump: BrokerPump) -> Any:
    """Two replicas registered (5.1 flow), broker 1 elected, SSS {1, 2}."""
    for _ in (1, 2):
        bid, _ = await client.register(CLUSTER, GROUP, "pending")
        pump.alive[bid] = pump.addr(bid)
        await client.register_broker(CLUSTER, GROUP, bid, pump.addr(bid))
    await pump.beat_once()
    pump.start()
    elected = await client.elect_master(CLUSTER, GROUP, 1)
    assert (elected.master_broker_id, elected.master_epoch) == (1, 1)
    assert elected.sync_state_set == {1}
    assert elected.broker_addrs == {1: pump.addr(1), 2: pump.addr(2)}
    info = await client.get_replica_info(GROUP)
    epoch = await client.alter_sync_state_set(
        GROUP, 1, info.master_epoch, {1, 2}, info.sync_state_set_epoch
    )
    info = await client.get_replica_info(GROUP)
    assert info.sync_state_set == {1, 2} and info.sync_state_set_epoch == epoch == 2
    return info


def test_three_controllers_fail_over_a_silent_master_and_survive_a_leader_kill(
    group_factory: Any, arun: Any
) -> None:
    g = group_factory(3)

    async def main() -> None:
        await g.start()
        async with ControllerClient(g.controller_addr, retry_timeout=30) as client:
            leader = await one_leader(client, g.addrs)
            pump = BrokerPump(client, GROUP)
            try:
                info = await master_and_sync_set(client, pump)
                # a stale syncStateSetEpoch, and a stale masterEpoch, are fenced
                with pytest.raises(ControllerFencedSyncStateSetEpochError):
                    await client.alter_sync_state_set(GROUP, 1, info.master_epoch, {1}, 1)
                with pytest.raises(ControllerFencedMasterEpochError):
                    await client.alter_sync_state_set(GROUP, 1, 0, {1}, info.sync_state_set_epoch)

                # the master stops heartbeating: broker 2 (in the SSS) takes over
                del pump.alive[1]

                async def failed_over() -> bool:
                    i = await client.get_replica_info(GROUP)
                    return i.master_broker_id == 2

                await wait_until(
                    failed_over,
                    "broker 2 elected after broker 1 went silent",
                    progress=lambda: pump.sent,
                    stall_after=30,
                )
                after = await client.get_replica_info(GROUP)
                assert after.master_epoch == info.master_epoch + 1
                assert after.sync_state_set == {2}
                assert after.sync_state_set_epoch == info.sync_state_set_epoch + 1
                assert after.master_address == pump.addr(2)

                # SIGKILL the Raft leader: another leads, with the same state
                g.kill(g.index_of(leader))
                rest = [a for a in g.addrs if a != leader]
                new_leader = await one_leader(client, rest)
                assert new_leader != leader
                assert await client.get_replica_info(GROUP) == after
                sync = await client.get_sync_state_data([GROUP])
                assert sync[GROUP]["masterBrokerId"] == 2
                assert [r["brokerId"] for r in sync[GROUP]["inSyncReplicas"]] == [2]
                assert [r["brokerId"] for r in sync[GROUP]["notInSyncReplicas"]] == [1]
            finally:
                await pump.stop()

    arun(main(), timeout=240)


def test_two_of_three_down_refuses_changes_and_a_restart_recovers_the_state(
    group_factory: Any, arun: Any
) -> None:
    """RocketMQ's controller answers every request but heartbeats and
    GET_METADATA_INFO only on the leader (reads too), and a lone survivor
    is no leader: changes fail with a clear error and GET_REPLICA_INFO is
    answered CONTROLLER_NOT_LEADER. Restarting the killed controllers on
    their controllerStorePath brings the state back."""
    g = group_factory(3)

    async def main() -> None:
        await g.start()
        async with ControllerClient(g.controller_addr, retry_timeout=30) as client:
            await one_leader(client, g.addrs)
            pump = BrokerPump(client, GROUP)
            try:
                before = await master_and_sync_set(client, pump)
            finally:
                await pump.stop()
            survivor = 2
            g.kill(0)
            g.kill(1)
            short = ControllerClient(g.addrs[survivor], retry_timeout=8)
            remoting = RemotingClient(name="test")
            try:
                with pytest.raises(ControllerNotLeaderError, match="no controller leader among"):
                    await short.apply_broker_id(CLUSTER, "broker-z", 1, "127.0.0.1:1;1")

                async def survivor_not_leader() -> bool:
                    cmd = RemotingCommand(
                        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP}
                    )
                    resp = await remoting.invoke(g.addrs[survivor], cmd, 3)
                    return resp.code == ResponseCode.CONTROLLER_NOT_LEADER

                await wait_until(
                    survivor_not_leader, "the lone survivor to step down", stall_after=30
                )
            finally:
                await short.shutdown()
                await remoting.shutdown()

            # the killed two come back on their stores: the state is intact
            await g.start([0, 1])
            await one_leader(client, g.addrs)
            assert await client.get_replica_info(GROUP) == before

            # all three stopped (SIGTERM: exit 0) and started: replayed from disk
            assert g.stop_all() == [0, 0, 0]
            await g.start()
            await one_leader(client, g.addrs)
            assert await client.get_replica_info(GROUP) == before

    arun(main(), timeout=300)
