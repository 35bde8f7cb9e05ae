"""The controller's replicated state: per broker group (brokerName) its
replicas and its SyncStateInfo (RocketMQ ReplicasInfoManager,
BrokerReplicaInfo, SyncStateInfo).

Every change is a Raft log entry (pyrmq/controller/raft.py) applied here, in
log order, on every controller. The apply methods are deterministic, never
raise, and validate again against the state they are applied to (a leader
decided from the state it saw; an entry applied after another one changed
the epochs must not apply blindly): they return an Outcome, a response code
with a remark and values for the response header.

Thread boundary: apply methods run on pysyncobj's thread; the event loop only
reads. Records are frozen and replaced whole, and readers take `groups`
snapshots (one dict copy, atomic under the GIL), so no lock is needed."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyrmq.remoting.codes import ResponseCode

#: MixAll.FIRST_BROKER_CONTROLLER_ID: the id of a group's first broker
FIRST_BROKER_CONTROLLER_ID = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str
    register_check_code: str


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerGroup:
    """One broker group (RocketMQ's BrokerReplicaInfo + SyncStateInfo).

    master_epoch counts master changes, including an election that found no
    master (then master_broker_id is None); sync_state_set_epoch counts
    SyncStateSet changes. Both start at 0: master_epoch 0 means "never
    elected" (the first ELECT_MASTER takes the asking broker)."""

    cluster_name: str
    broker_name: str
    replicas: tuple[Replica, ...] = ()
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def replica(self, broker_id: int | None) -> Replica | None:
        return next((r for r in self.replicas if r.broker_id == broker_id), None)

    def address_of(self, broker_id: int | None) -> str:
        r = self.replica(broker_id)
        return r.address if r is not None else ""

    @property
    def broker_ids(self) -> set[int]:
        return {r.broker_id for r in self.replicas}

    @property
    def next_assign_broker_id(self) -> int:
        return max(self.broker_ids, default=FIRST_BROKER_CONTROLLER_ID - 1) + 1

    @property
    def master_address(self) -> str:
        return self.address_of(self.master_broker_id)


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What applying an entry did: code SUCCESS, or why it did nothing."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    values: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS


def _fail(code: int, remark: str) -> Outcome:
    return Outcome(code, remark)


class ReplicasInfo:
    """The broker groups and the controllers' self-descriptions. Only the
    apply_* methods change anything."""

    def __init__(self) -> None:
        self.groups: dict[str, BrokerGroup] = {}
        #: controller id -> (remoting address, peers fingerprint), as each
        #: controller announced itself through the log
        self.members: dict[str, tuple[str, str]] = {}

    def group(self, broker_name: str) -> BrokerGroup | None:
        return self.groups.get(broker_name)

    # -- apply (Raft thread) ------------------------------------------------------------

    def apply_member(self, controller_id: str, address: str, fingerprint: str) -> Outcome:
        members = dict(self.members)
        members[controller_id] = (address, fingerprint)
        self.members = members
        return Outcome()

    def apply_broker_id(
        self, cluster_name: str, broker_name: str, broker_id: int, address: str, check_code: str
    ) -> Outcome:
        """APPLY_BROKER_ID: take broker_id for the broker whose
        registerCheckCode is check_code ("address;timestamp")."""
        g = self.groups.get(broker_name)
        if g is None:
            if broker_id != FIRST_BROKER_CONTROLLER_ID:
                return _fail(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"Broker-set: {broker_name} hasn't been registered in controller, but "
                    f"broker try to apply brokerId: {broker_id}",
                )
            g = BrokerGroup(cluster_name, broker_name)
        existing = g.replica(broker_id)
        if existing is not None:
            if existing.register_check_code != check_code:
                return _fail(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}",
                )
            return Outcome()
        g = dataclasses.replace(g, replicas=(*g.replicas, Replica(broker_id, address, check_code)))
        self.groups = {**self.groups, broker_name: g}
        return Outcome()

    def apply_broker_address(self, broker_name: str, broker_id: int, address: str) -> Outcome:
        """REGISTER_BROKER from a new address (UpdateBrokerAddressEvent)."""
        g = self.groups.get(broker_name)
        r = g.replica(broker_id) if g is not None else None
        if g is None or r is None:
            return _fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}",
            )
        replicas = tuple(
            dataclasses.replace(x, address=address) if x.broker_id == broker_id else x
            for x in g.replicas
        )
        self.groups = {**self.groups, broker_name: dataclasses.replace(g, replicas=replicas)}
        return Outcome()

    def apply_alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        sync_state_set_epoch: int,
        new_set: frozenset[int],
    ) -> Outcome:
        """ALTER_SYNC_STATE_SET, fenced by both epochs (the checks and codes
        of ReplicasInfoManager.alterSyncStateSet, liveness excepted: the
        leader checks that before proposing)."""
        g = self.groups.get(broker_name)
        if g is None:
            return _fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "Broker metadata is not existed",
            )
        if new_set == g.sync_state_set:
            return _fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "The newSyncStateSet is equal with oldSyncStateSet, no needed to update "
                "syncStateSet",
            )
        if g.master_broker_id is None or g.master_broker_id != master_broker_id:
            return _fail(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"Rejecting alter syncStateSet request because the current leader is:"
                f"{{{g.master_broker_id}}}, not {{{master_broker_id}}}",
            )
        if master_epoch != g.master_epoch:
            return _fail(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"Rejecting alter syncStateSet request because the current master epoch is:"
                f"{{{g.master_epoch}}}, not {{{master_epoch}}}",
            )
        if sync_state_set_epoch != g.sync_state_set_epoch:
            return _fail(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"Rejecting alter syncStateSet request because the current syncStateSet epoch "
                f"is:{{{g.sync_state_set_epoch}}}, not {{{sync_state_set_epoch}}}",
            )
        unknown = sorted(new_set - g.broker_ids)
        if unknown:
            return _fail(
                ResponseCode.CONTROLLER_INVALID_REPLICAS,
                f"Rejecting alter syncStateSet request because the replicas {unknown} don't exist",
            )
        if g.master_broker_id not in new_set:
            return _fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "Rejecting alter syncStateSet request because the newSyncStateSet don't "
                f"contains origin leader {{{g.master_broker_id}}}",
            )
        g = dataclasses.replace(
            g, sync_state_set=frozenset(new_set), sync_state_set_epoch=g.sync_state_set_epoch + 1
        )
        self.groups = {**self.groups, broker_name: g}
        return Outcome(values={"newSyncStateSetEpoch": g.sync_state_set_epoch})

    def apply_elect_master(
        self, broker_name: str, new_master: int | None, expected_master_epoch: int
    ) -> Outcome:
        """ElectMasterEvent: new_master becomes master with SyncStateSet
        {new_master}; None records that no master could be elected (the
        SyncStateSet is kept). Both bump masterEpoch (SyncStateInfo
        .updateMasterInfo); only a new master bumps syncStateSetEpoch. Applied
        only if masterEpoch is still the one the leader decided on."""
        g = self.groups.get(broker_name)
        if g is None:
            return _fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                "Broker hasn't been registered",
            )
        if g.master_epoch != expected_master_epoch:
            return _fail(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"another election changed masterEpoch to {g.master_epoch} "
                f"(this one was decided at {expected_master_epoch})",
            )
        if new_master is not None and g.replica(new_master) is None:
            return _fail(
                ResponseCode.CONTROLLER_INVALID_REPLICAS,
                f"brokerId {new_master} is not a replica of {broker_name}",
            )
        if new_master is None:
            g = dataclasses.replace(g, master_broker_id=None, master_epoch=g.master_epoch + 1)
        else:
            g = dataclasses.replace(
                g,
                master_broker_id=new_master,
                master_epoch=g.master_epoch + 1,
                sync_state_set=frozenset({new_master}),
                sync_state_set_epoch=g.sync_state_set_epoch + 1,
            )
        self.groups = {**self.groups, broker_name: g}
        return Outcome(
            values={
                "masterBrokerId": g.master_broker_id,
                "masterAddress": g.master_address,
                "masterEpoch": g.master_epoch,
                "syncStateSetEpoch": g.sync_state_set_epoch,
            }
        )

    def apply_clean_broker_data(
        self, broker_name: str, broker_ids: frozenset[int] | None
    ) -> Outcome:
        """CleanBrokerDataEvent: drop the group, or only the given ids."""
        g = self.groups.get(broker_name)
        if g is None:
            return _fail(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"Broker {broker_name} is not existed,clean broker data failure.",
            )
        groups = dict(self.groups)
        if not broker_ids:
            del groups[broker_name]
        else:
            g = dataclasses.replace(
                g,
                replicas=tuple(r for r in g.replicas if r.broker_id not in broker_ids),
                sync_state_set=g.sync_state_set - broker_ids,
                master_broker_id=None if g.master_broker_id in broker_ids else g.master_broker_id,
            )
            if not g.replicas:
                del groups[broker_name]
            else:
                groups[broker_name] = g
        self.groups = groups
        return Outcome()
