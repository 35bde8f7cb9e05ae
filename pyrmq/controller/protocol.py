"""The controller's wire formats (RocketMQ 5.x controller mode): THE spec of
the headers and bodies pyrmq's controller serves and ControllerClient sends.
Frames and extFields are remoting/command.py's; extField values are strings
(integers in decimal, booleans "true"/"false", an absent Java Long is an
absent key). Bodies are JSON (RemotingSerializable). Read from apache/rocketmq
(remoting/.../protocol/RequestCode.java, ResponseCode.java,
header/controller/**, header/namesrv/BrokerHeartbeatRequestHeader.java,
body/{SyncStateSet,ElectMasterResponseBody,BrokerMemberGroup,
BrokerReplicasInfo}.java; controller/.../ReplicasInfoManager.java,
ControllerRequestProcessor.java, DLedgerController.java).

Request code -> request extFields / body -> response extFields / body:

  904  BROKER_HEARTBEAT        clusterName brokerName brokerAddr brokerId
                               epoch maxOffset confirmOffset
                               heartbeatTimeoutMills electionPriority
                               -> SUCCESS (any controller, leader or not: a
                               broker heartbeats to all of them)
  1012 CONTROLLER_GET_NEXT_BROKER_ID  clusterName brokerName
                               -> clusterName brokerName nextBrokerId (1 for
                               a new group, else max id + 1)
  1013 CONTROLLER_APPLY_BROKER_ID     clusterName brokerName appliedBrokerId
                               registerCheckCode ("brokerAddr;timestampMs")
                               -> clusterName brokerName; 2014 BROKER_ID_INVALID
                               when the id is taken by another check code
  1003 CONTROLLER_REGISTER_BROKER     clusterName brokerName brokerId
                               brokerAddress -> clusterName brokerName and, when
                               the group has an alive master, masterBrokerId
                               masterAddress masterEpoch syncStateSetEpoch;
                               body SyncStateSet; 2010 when not applied
  1004 CONTROLLER_GET_REPLICA_INFO    brokerName -> masterBrokerId masterAddress
                               masterEpoch; body SyncStateSet; 2008 unknown group
  1001 CONTROLLER_ALTER_SYNC_STATE_SET brokerName masterBrokerId masterEpoch,
                               body SyncStateSet (the new set and the epoch
                               the master last saw) -> newSyncStateSetEpoch;
                               body SyncStateSet. Checks in this order: 2013
                               unknown group / set unchanged, 2002 not the
                               master, 2000 masterEpoch fenced, 2001
                               syncStateSetEpoch fenced, 2003 unknown replica,
                               2006 replica not alive, 2013 master not in set
  1002 CONTROLLER_ELECT_MASTER clusterName brokerName brokerId designateElect
                               -> masterBrokerId masterAddress masterEpoch
                               syncStateSetEpoch; body ElectMasterResponseBody.
                               brokerId -1/absent: controller-triggered;
                               designateElect=true: admin picks brokerId. 2011
                               MASTER_STILL_EXIST (header filled), 2004 no
                               candidate (controller trigger: recorded, master
                               cleared), 2012 no candidate (broker/admin)
  1005 CONTROLLER_GET_METADATA_INFO   -> group controllerLeaderId
                               controllerLeaderAddress isLeader peers
                               (+ pyrmq: raftPeers); any controller answers
  1006 CONTROLLER_GET_SYNC_STATE_DATA body JSON list of brokerNames ->
                               body BrokerReplicasInfo
  1011 CLEAN_BROKER_DATA       clusterName brokerName brokerControllerIdsToClean
                               ("1;2", empty = the group) isCleanLivingBroker
                               -> SUCCESS; 2009 alive broker / unknown group
  1008 NOTIFY_BROKER_ROLE_CHANGED (controller -> broker, one-way)
                               masterAddress masterEpoch syncStateSetEpoch
                               masterBrokerId; body SyncStateSet

Bodies:
  SyncStateSet            {"syncStateSet": [ids], "syncStateSetEpoch": int}
  ElectMasterResponseBody {"brokerMemberGroup": {"cluster": s, "brokerName":
                          s, "brokerAddrs": {"<id>": addr}}, "syncStateSet":
                          [ids]}
  BrokerReplicasInfo      {"replicasInfoTable": {brokerName: {"masterBrokerId",
                          "masterAddress", "masterEpoch", "syncStateSetEpoch",
                          "inSyncReplicas": [ReplicaIdentity],
                          "notInSyncReplicas": [ReplicaIdentity]}}};
                          ReplicaIdentity {"brokerName", "brokerId",
                          "brokerAddress", "alive"}

Leadership: every request but BROKER_HEARTBEAT and GET_METADATA_INFO is
served by the Raft leader only, reads included (DLedgerController's
EventScheduler answers CONTROLLER_NOT_LEADER (2007) "The controller is not in
leader state" on a follower: RocketMQ serves no stale reads, and neither do
we). pyrmq adds the leader's address, when known, as the extField
controllerLeaderAddress of that answer. A change the Raft log did not commit
within REQUEST_TIMEOUT (no quorum) is answered SYSTEM_ERROR, as the Java
controller's cancelled future is."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

#: s the leader waits for a change to commit (ControllerRequestProcessor's
#: WAIT_TIMEOUT_OUT, 5 s)
REQUEST_TIMEOUT = 5.0
#: the remark of CONTROLLER_NOT_LEADER, as DLedgerController words it
NOT_LEADER_REMARK = "The controller is not in leader state"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_sync_state_set(ids: Iterable[int], epoch: int) -> bytes:
    return _json({"syncStateSet": sorted(ids), "syncStateSetEpoch": epoch})


def decode_sync_state_set(body: bytes) -> tuple[frozenset[int], int]:
    """SyncStateSet body -> (ids, epoch); ValueError when malformed."""
    try:
        data = json.loads(body)
        ids = frozenset(int(x) for x in data.get("syncStateSet") or ())
        return ids, int(data.get("syncStateSetEpoch", 0))
    except (TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"bad SyncStateSet body: {e}") from None


def encode_elect_master_body(
    cluster: str, broker_name: str, addrs: dict[int, str], sync_state_set: Iterable[int]
) -> bytes:
    return _json(
        {
            "brokerMemberGroup": {
                "cluster": cluster,
                "brokerName": broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(addrs.items())},
            },
            "syncStateSet": sorted(sync_state_set),
        }
    )


def encode_json(obj: Any) -> bytes:
    """Any other JSON body (BrokerReplicasInfo, the brokerName list)."""
    return _json(obj)


def ext(**fields: Any) -> dict[str, str]:
    """extFields from keyword values: None dropped, bools as true/false."""
    out: dict[str, str] = {}
    for k, v in fields.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def opt_int(fields: dict[str, str], key: str) -> int | None:
    """An optional integer extField (ValueError when not an integer)."""
    raw = fields.get(key)
    if raw is None or raw == "" or raw == "null":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not an integer") from None
