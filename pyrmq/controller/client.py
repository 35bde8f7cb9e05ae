"""ControllerClient: what a broker (or an admin tool) calls the controllers
with (RocketMQ's BrokerOuterAPI controller methods).

    async with ControllerClient("127.0.0.1:19876;127.0.0.1:19877") as cc:
        broker_id, reg = await cc.register("DefaultCluster", "broker-a", "10.0.0.1:10911")
        await cc.heartbeat("DefaultCluster", "broker-a", "10.0.0.1:10911", broker_id,
                           epoch=reg.master_epoch, max_offset=0)
        info = await cc.get_replica_info("broker-a")

Requests that only the leader serves go to the last known leader first; on
CONTROLLER_NOT_LEADER (its controllerLeaderAddress, when given, is tried
next), a connection error, a timeout or a retriable error (SYSTEM_ERROR:
not committed) the client tries the other controllers, pausing between
rounds, until `retry_timeout` seconds have passed. Then it raises the last
error: ControllerNotLeaderError ("no controller leader among ..."),
RemotingError (none reachable) or the BrokerError of the answer. Any other
answer raises its BrokerError subclass (pyrmq.common.errors, codes
2000-2016) at once. Wire formats: protocol.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

from pyrmq.common.errors import (
    BrokerError,
    ClientError,
    ControllerNotLeaderError,
    RemotingError,
)
from pyrmq.controller.protocol import (
    decode_sync_state_set,
    encode_json,
    encode_sync_state_set,
    ext,
    opt_int,
)
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

#: s between two rounds over all controllers while looking for the leader
RETRY_PAUSE = 0.2


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerMetadata:
    """GET_METADATA_INFO of one controller."""

    group: str
    leader_id: str | None
    leader_address: str | None
    is_leader: bool
    peers: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A group's master and SyncStateSet (GET_REPLICA_INFO,
    REGISTER_BROKER, ELECT_MASTER). master_broker_id None / master_address
    "" when the group has no master (or, from REGISTER_BROKER, no alive
    one)."""

    master_broker_id: int | None
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    #: ELECT_MASTER only: brokerId -> address of the group's replicas
    broker_addrs: dict[int, str] = dataclasses.field(default_factory=dict)


def split_controller_addrs(addrs: str | list[str] | tuple[str, ...]) -> list[str]:
    items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ClientError("no controller address (controllerAddr is host:port;host:port;...)")
    return out


class ControllerClient:
    """Requests to a group of controllers (see the module docstring)."""

    def __init__(
        self,
        addrs: str | list[str] | tuple[str, ...],
        *,
        timeout: float = 3.0,
        retry_timeout: float = 15.0,
    ) -> None:
        self.addrs = split_controller_addrs(addrs)
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self.leader: str | None = None
        self._remoting = RemotingClient(name="controller-client")

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        await self._remoting.shutdown()

    # -- transport ------------------------------------------------------------------------

    async def _ask(
        self, addr: str, code: int, fields: dict[str, str], body: bytes
    ) -> RemotingCommand:
        cmd = RemotingCommand(code, dict(fields), body)
        return await self._remoting.invoke(addr, cmd, self.timeout)

    async def _leader_request(
        self, code: int, fields: dict[str, str], body: bytes = b""
    ) -> RemotingCommand:
        """The leader's SUCCESS answer, or the error described above."""
        deadline = time.monotonic() + self.retry_timeout
        last: Exception | None = None
        not_leader: BrokerError | None = None  # some controller answered, none leads
        rounds = int(self.retry_timeout / RETRY_PAUSE) + 2
        for _ in range(rounds):
            order = [self.leader] if self.leader else []
            order += [a for a in self.addrs if a != self.leader]
            tried: set[str] = set()
            while order:
                addr = order.pop(0)
                if addr is None or addr in tried:
                    continue
                tried.add(addr)
                try:
                    resp = await self._ask(addr, code, fields, body)
                except (RemotingError, TimeoutError) as e:
                    last = RemotingError(f"controller {addr}: {e or 'timed out'}")
                    if self.leader == addr:
                        self.leader = None
                    continue
                if resp.code == R.SUCCESS:
                    self.leader = addr
                    return resp
                err = BrokerError.from_response(resp.code, resp.remark, addr)
                if resp.code == R.CONTROLLER_NOT_LEADER:
                    hint = resp.ext_fields.get("controllerLeaderAddress")
                    if hint and hint not in tried:
                        order.insert(0, hint)
                    if self.leader == addr:
                        self.leader = None
                    last = not_leader = err
                    continue
                if err.retriable:
                    last = err
                    continue
                self.leader = addr
                raise err
            if time.monotonic() + RETRY_PAUSE >= deadline:
                break
            await asyncio.sleep(RETRY_PAUSE)
        where = ";".join(self.addrs)
        # a controller answered but none leads (a NOT_LEADER hint to a dead
        # leader may have been the last try): that is the error to report
        if not_leader is not None and not (
            isinstance(last, BrokerError) and not isinstance(last, ControllerNotLeaderError)
        ):
            raise ControllerNotLeaderError(
                f"no controller leader among {where} within {self.retry_timeout:.0f} s "
                f"(last: {last})"
            )
        if isinstance(last, BrokerError):
            raise last
        raise RemotingError(
            f"no controller among {where} answered within {self.retry_timeout:.0f} s ({last})"
        )

    # -- any controller --------------------------------------------------------------------

    async def get_metadata(self, addr: str) -> ControllerMetadata:
        """GET_METADATA_INFO of the controller at addr."""
        resp = await self._ask(addr, RC.CONTROLLER_GET_METADATA_INFO, {}, b"")
        if resp.code != R.SUCCESS:
            raise BrokerError.from_response(resp.code, resp.remark, addr)
        f = resp.ext_fields
        return ControllerMetadata(
            f.get("group", ""),
            f.get("controllerLeaderId") or None,
            f.get("controllerLeaderAddress") or None,
            f.get("isLeader", "false") == "true",
            f.get("peers", ""),
        )

    async def find_leader(self) -> str:
        """The leader's address, asking GET_METADATA_INFO round the group
        until one controller says it leads (bounded by retry_timeout)."""
        deadline = time.monotonic() + self.retry_timeout
        last: Exception | None = None
        while True:
            for addr in self.addrs:
                try:
                    md = await self.get_metadata(addr)
                except (RemotingError, BrokerError, TimeoutError) as e:
                    last = e
                    continue
                if md.is_leader:
                    self.leader = addr
                    return addr
            if time.monotonic() + RETRY_PAUSE >= deadline:
                raise ControllerNotLeaderError(
                    f"no controller leader among {';'.join(self.addrs)} within "
                    f"{self.retry_timeout:.0f} s (last error: {last})"
                )
            await asyncio.sleep(RETRY_PAUSE)

    async def heartbeat(
        self,
        cluster_name: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        *,
        epoch: int | None = None,
        max_offset: int | None = None,
        confirm_offset: int | None = None,
        heartbeat_timeout_ms: int | None = None,
        election_priority: int | None = None,
    ) -> int:
        """BROKER_HEARTBEAT to every controller (each keeps its own liveness
        table, so a new leader knows who is alive); how many accepted it."""
        fields = ext(
            clusterName=cluster_name,
            brokerName=broker_name,
            brokerAddr=broker_addr,
            brokerId=broker_id,
            epoch=epoch,
            maxOffset=max_offset,
            confirmOffset=confirm_offset,
            heartbeatTimeoutMills=heartbeat_timeout_ms,
            electionPriority=election_priority,
        )

        async def one(addr: str) -> bool:
            try:
                resp = await self._ask(addr, RC.BROKER_HEARTBEAT, fields, b"")
            except (RemotingError, TimeoutError):
                return False
            return resp.code == R.SUCCESS

        return sum(await asyncio.gather(*(one(a) for a in self.addrs)))

    # -- the leader ------------------------------------------------------------------------

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        resp = await self._leader_request(
            RC.CONTROLLER_GET_NEXT_BROKER_ID, ext(clusterName=cluster_name, brokerName=broker_name)
        )
        return int(resp.ext_fields["nextBrokerId"])

    async def apply_broker_id(
        self, cluster_name: str, broker_name: str, broker_id: int, register_check_code: str
    ) -> None:
        """Take broker_id; ControllerBrokerIdInvalidError when another broker has it."""
        await self._leader_request(
            RC.CONTROLLER_APPLY_BROKER_ID,
            ext(
                clusterName=cluster_name,
                brokerName=broker_name,
                appliedBrokerId=broker_id,
                registerCheckCode=register_check_code,
            ),
        )

    async def register_broker(
        self, cluster_name: str, broker_name: str, broker_id: int, broker_address: str
    ) -> ReplicaInfo:
        """REGISTER_BROKER: the group's alive master (if any) and SyncStateSet."""
        resp = await self._leader_request(
            RC.CONTROLLER_REGISTER_BROKER,
            ext(
                clusterName=cluster_name,
                brokerName=broker_name,
                brokerId=broker_id,
                brokerAddress=broker_address,
            ),
        )
        return _replica_info(resp)

    async def register(
        self,
        cluster_name: str,
        broker_name: str,
        broker_address: str,
        broker_id: int | None = None,
        register_check_code: str | None = None,
    ) -> tuple[int, ReplicaInfo]:
        """The 5.1+ registration flow: without a broker_id (a new broker),
        GET_NEXT_BROKER_ID then APPLY_BROKER_ID (retried once if another
        broker took the id first); then REGISTER_BROKER. The broker keeps
        (broker_id, register_check_code) on disk to register again later."""
        if broker_id is None:
            for _ in range(3):
                candidate = await self.get_next_broker_id(cluster_name, broker_name)
                code = register_check_code or f"{broker_address};{int(time.time() * 1000)}"
                try:
                    await self.apply_broker_id(cluster_name, broker_name, candidate, code)
                except BrokerError as e:
                    if e.code == R.CONTROLLER_BROKER_ID_INVALID:
                        continue
                    raise
                broker_id = candidate
                break
            else:
                raise ClientError(f"could not get a broker id for {broker_name}: ids taken")
        return broker_id, await self.register_broker(
            cluster_name, broker_name, broker_id, broker_address
        )

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        resp = await self._leader_request(
            RC.CONTROLLER_GET_REPLICA_INFO, ext(brokerName=broker_name)
        )
        return _replica_info(resp)

    async def alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        new_sync_state_set: set[int] | frozenset[int],
        sync_state_set_epoch: int,
    ) -> int:
        """The master asks for a new SyncStateSet; the new syncStateSetEpoch.
        Fenced: ControllerFencedMasterEpochError / ...SyncStateSetEpochError."""
        resp = await self._leader_request(
            RC.CONTROLLER_ALTER_SYNC_STATE_SET,
            ext(brokerName=broker_name, masterBrokerId=master_broker_id, masterEpoch=master_epoch),
            encode_sync_state_set(new_sync_state_set, sync_state_set_epoch),
        )
        return int(resp.ext_fields["newSyncStateSetEpoch"])

    async def elect_master(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int | None = None,
        designate: bool = False,
    ) -> ReplicaInfo:
        """ELECT_MASTER: broker_id asks for itself (a broker), with
        designate=True it is the admin's choice, None lets the controller
        pick. ControllerMasterStillExistError when the master stays."""
        resp = await self._leader_request(
            RC.CONTROLLER_ELECT_MASTER,
            ext(
                clusterName=cluster_name,
                brokerName=broker_name,
                brokerId=-1 if broker_id is None else broker_id,
                designateElect=designate,
                invokeTime=int(time.time() * 1000),
            ),
        )
        info = _replica_info(resp, sync_state_body=False)
        body = json.loads(resp.body) if resp.body else {}
        group = body.get("brokerMemberGroup") or {}
        return dataclasses.replace(
            info,
            sync_state_set=frozenset(int(x) for x in body.get("syncStateSet") or ()),
            broker_addrs={int(k): v for k, v in (group.get("brokerAddrs") or {}).items()},
        )

    async def get_sync_state_data(self, broker_names: list[str]) -> dict[str, Any]:
        """GET_SYNC_STATE_DATA: brokerName -> ReplicasInfo JSON (see protocol.py)."""
        resp = await self._leader_request(
            RC.CONTROLLER_GET_SYNC_STATE_DATA, {}, encode_json(list(broker_names))
        )
        table: dict[str, Any] = json.loads(resp.body).get("replicasInfoTable") or {}
        return table

    async def clean_broker_data(
        self,
        cluster_name: str,
        broker_name: str,
        broker_ids: list[int] | None = None,
        clean_living_broker: bool = False,
    ) -> None:
        await self._leader_request(
            RC.CLEAN_BROKER_DATA,
            ext(
                clusterName=cluster_name,
                brokerName=broker_name,
                brokerControllerIdsToClean=";".join(map(str, broker_ids)) if broker_ids else None,
                isCleanLivingBroker=clean_living_broker,
                invokeTime=int(time.time() * 1000),
            ),
        )


def _replica_info(resp: RemotingCommand, sync_state_body: bool = True) -> ReplicaInfo:
    f = resp.ext_fields
    ids: frozenset[int] = frozenset()
    epoch = opt_int(f, "syncStateSetEpoch") or 0
    if sync_state_body and resp.body:
        ids, epoch = decode_sync_state_set(resp.body)
    return ReplicaInfo(
        opt_int(f, "masterBrokerId"),
        f.get("masterAddress", "") or "",
        opt_int(f, "masterEpoch") or 0,
        ids,
        epoch,
    )
