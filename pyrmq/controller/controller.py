"""Controller: the request processors and the leader's failover loop
(RocketMQ ControllerManager + ControllerRequestProcessor + DLedgerController).

`async with Controller(cfg) as c:` runs a standalone controller on
cfg.listen_port; `Controller(cfg, server=namesrv.server)` serves the same
request codes on a name server's port (enableControllerInNamesrv). Wire
formats: protocol.py. Replicated state: replicas.py through raft.py.

Loops (tasks of this object, cancelled at shutdown):
* scan (every scanNotActiveBrokerInterval): on the leader, each group whose
  master is not alive while some replica is gets an election (RocketMQ's
  scanInactiveMasterAndTriggerReelect); pyrmq also elects for a group left
  without a master once a SyncStateSet member (or, unclean, any replica) is
  alive again. A new leader waits one heartbeat timeout (the longest any
  broker announced) before judging liveness, so brokers it has not heard
  from yet are not mistaken for dead ones.
* members (every MEMBER_INTERVAL): announces this controller (id, remoting
  address, peer-list fingerprint) through the Raft log and compares every
  controller's fingerprint with its own. A controller whose
  controllerDLegerPeers/controllerDLegerGroup differ from another's is
  reported in an ERROR log line naming both lists, and every controller that
  sees the difference refuses requests (SYSTEM_ERROR naming it) until the
  configs agree. pysyncobj would not notice by itself. Peer lists so
  different that no leader forms cannot be compared this way; that shows as
  a WARNING "no Raft leader for N s" naming our peer list."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.common.errors import BrokerError, ControllerError, RemotingError
from pyrmq.controller.config import ControllerConfig
from pyrmq.controller.heartbeat import BrokerHeartbeatManager, elect
from pyrmq.controller.protocol import (
    NOT_LEADER_REMARK,
    REQUEST_TIMEOUT,
    decode_sync_state_set,
    encode_elect_master_body,
    encode_json,
    encode_sync_state_set,
    ext,
    opt_int,
)
from pyrmq.controller.raft import ControllerRaft, RaftFailure
from pyrmq.controller.replicas import BrokerGroup, Outcome
from pyrmq.remoting import RemotingClient, RemotingCommand, RemotingServer
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.connection import Connection, RequestHandler

log = logging.getLogger("pyrmq.controller")

#: s between two announcements/checks of the controller members
MEMBER_INTERVAL = 1.0
#: s without a Raft leader before a warning (then again at this interval)
NO_LEADER_WARN_AFTER = 10.0

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


class Controller:
    """One controller of a Raft group (see the module docstring)."""

    def __init__(
        self,
        config: ControllerConfig,
        server: RemotingServer | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config.validate()
        self.config = config
        self._own_server = server is None
        self.server = server or RemotingServer(
            config.listen_host, config.listen_port, name="controller"
        )
        self._clock = clock
        self.heartbeats = BrokerHeartbeatManager(clock)
        self.raft: ControllerRaft | None = None
        self._notifier = RemotingClient(name="controller-notify")
        self._tasks: list[asyncio.Task[None]] = []
        self._notifies: set[asyncio.Task[None]] = set()
        self._leader_since: float | None = None
        #: the Raft term whose barrier entry is applied here, and the
        #: barrier being committed (one per term, shared by requests)
        self._ready_term = -1
        self._barrier: tuple[int, asyncio.Future[Outcome]] | None = None
        #: why this controller refuses requests (peer lists differ), or None
        self.refusal: str | None = None
        handlers: dict[int, Handler] = {
            RC.BROKER_HEARTBEAT: self._heartbeat,
            RC.CONTROLLER_GET_METADATA_INFO: self._metadata,
            RC.CONTROLLER_GET_NEXT_BROKER_ID: self._leader_only(self._next_broker_id),
            RC.CONTROLLER_APPLY_BROKER_ID: self._leader_only(self._apply_broker_id),
            RC.CONTROLLER_REGISTER_BROKER: self._leader_only(self._register_broker),
            RC.CONTROLLER_GET_REPLICA_INFO: self._leader_only(self._replica_info),
            RC.CONTROLLER_ALTER_SYNC_STATE_SET: self._leader_only(self._alter_sync_state_set),
            RC.CONTROLLER_ELECT_MASTER: self._leader_only(self._elect_master),
            RC.CONTROLLER_GET_SYNC_STATE_DATA: self._leader_only(self._sync_state_data),
            RC.CLEAN_BROKER_DATA: self._leader_only(self._clean_broker_data),
        }
        for code, handler in handlers.items():
            self.server.register(code, _guarded(handler))

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The remoting address brokers and peers reach this controller at."""
        host = self.config.listen_host
        if host in ("", "0.0.0.0", "::"):
            host = self.config.self_peer.host
        return f"{host}:{self.server.port}"

    async def start(self) -> None:
        if self._own_server:
            await self.server.start()
        # opening the journal reads the disk: off the event loop
        self.raft = await asyncio.to_thread(ControllerRaft, self.config)
        self._tasks = [
            asyncio.create_task(self._scan_loop(), name="pyrmq:controller:scan"),
            asyncio.create_task(self._member_loop(), name="pyrmq:controller:members"),
        ]
        log.info(
            "controller %s: remoting %s, Raft %s, peers %s, store %s",
            self.config.controller_dleger_self_id,
            self.address,
            self.config.self_peer.addr,
            self.config.controller_dleger_peers,
            self.config.store_path,
        )

    async def shutdown(self) -> None:
        if self._barrier is not None:
            self._barrier[1].cancel()
        for t in self._tasks + list(self._notifies):
            t.cancel()
        for t in self._tasks + list(self._notifies):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        await self._notifier.shutdown()
        if self._own_server:
            await self.server.shutdown()
        raft, self.raft = self.raft, None
        if raft is not None:
            # joins pysyncobj's thread and closes the journal
            await asyncio.to_thread(raft.destroy_synchronous)

    async def __aenter__(self) -> Controller:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- leadership -------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.is_leader

    def leader_address(self) -> str:
        """The leader's remoting address as it announced it ('' unknown)."""
        raft = self.raft
        if raft is None:
            return ""
        lid = raft.leader_id
        if lid == self.config.controller_dleger_self_id:
            return self.address
        member = raft.info.members.get(lid) if lid is not None else None
        return member[0] if member is not None else ""

    def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand:
        leader = self.leader_address()
        remark = NOT_LEADER_REMARK + (f" (leader: {leader})" if leader else " (no leader known)")
        return cmd.response(
            R.CONTROLLER_NOT_LEADER, ext(controllerLeaderAddress=leader or None), remark=remark
        )

    def _leader_only(self, handler: Handler) -> Handler:
        async def gated(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            if self.refusal is not None:
                return cmd.response(R.SYSTEM_ERROR, remark=self.refusal)
            if not self.is_leader:
                return self._not_leader(cmd)
            await self._leader_ready()
            return await handler(conn, cmd)

        return gated

    async def _leader_ready(self) -> None:
        """Wait until this leader has applied everything committed before
        its term (see ReplicatedState.barrier): a new leader must not answer
        from state that lags the log (a SyncStateSet one change old)."""
        raft = self.raft
        if raft is None:
            raise _error(R.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
        term = raft.term
        if term == self._ready_term:
            return
        if self._barrier is None or self._barrier[0] != term or self._barrier[1].done():
            barrier = asyncio.ensure_future(self._commit("barrier"))
            # retrieved even when every waiter was cancelled
            barrier.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._barrier = (term, barrier)
        fut = self._barrier[1]
        await asyncio.shield(fut)
        if raft.term == term and raft.is_leader:
            self._ready_term = term
        else:
            raise _error(R.CONTROLLER_NOT_LEADER, f"{NOT_LEADER_REMARK} (leadership changed)")

    async def _commit(self, name: str, *args: Any) -> Outcome:
        """Append an entry through Raft and wait for it to apply here.
        ControllerError (answered with its code) when it did not commit."""
        raft = self.raft
        if raft is None:
            raise _error(R.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                return await raft.propose(name, *args)
        except TimeoutError:
            raise _error(
                R.SYSTEM_ERROR,
                f"the change was not committed by the controllers' Raft log within "
                f"{REQUEST_TIMEOUT:.0f} s (no quorum of {self.config.controller_dleger_peers}?)",
            ) from None
        except RaftFailure as e:
            if not raft.is_leader:
                raise _error(R.CONTROLLER_NOT_LEADER, f"{NOT_LEADER_REMARK} ({e})") from None
            raise _error(R.SYSTEM_ERROR, f"the change was not committed: {e}") from None

    # -- processors -------------------------------------------------------------------------

    async def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        broker_id = opt_int(f, "brokerId")
        if broker_id is None:
            return cmd.response(
                R.CONTROLLER_INVALID_REQUEST, remark="Heart beat with empty brokerId"
            )
        self.heartbeats.on_broker_heartbeat(
            f.get("clusterName", ""),
            f.get("brokerName", ""),
            f.get("brokerAddr", ""),
            broker_id,
            opt_int(f, "heartbeatTimeoutMills"),
            opt_int(f, "epoch"),
            opt_int(f, "maxOffset"),
            opt_int(f, "confirmOffset"),
            opt_int(f, "electionPriority"),
        )
        return cmd.response(R.SUCCESS, remark="Heart beat success")

    async def _metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raft = self.raft
        members = dict(raft.info.members) if raft is not None else {}
        members[self.config.controller_dleger_self_id] = (self.address, "")
        peers = "".join(
            f"{p.id}:{members[p.id][0] if p.id in members else ''};" for p in self.config.peers
        )
        leader_id = raft.leader_id if raft is not None else None
        return cmd.response(
            R.SUCCESS,
            ext(
                group=self.config.controller_dleger_group,
                controllerLeaderId=leader_id,
                controllerLeaderAddress=self.leader_address() or None,
                isLeader=self.is_leader,
                peers=peers,
                raftPeers=self.config.controller_dleger_peers,
            ),
        )

    def _group(self, broker_name: str) -> BrokerGroup | None:
        return self.raft.info.group(broker_name) if self.raft is not None else None

    async def _next_broker_id(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        g = self._group(f.get("brokerName", ""))
        nxt = 1 if g is None else g.next_assign_broker_id
        return cmd.response(
            R.SUCCESS,
            ext(clusterName=f.get("clusterName"), brokerName=f.get("brokerName"), nextBrokerId=nxt),
        )

    async def _apply_broker_id(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        broker_id = opt_int(f, "appliedBrokerId")
        check = f.get("registerCheckCode", "")
        if broker_id is None or not f.get("brokerName") or not check:
            raise _error(
                R.CONTROLLER_INVALID_REQUEST,
                "brokerName, appliedBrokerId and registerCheckCode are required",
            )
        out = await self._commit(
            "apply_broker_id",
            f.get("clusterName", ""),
            f["brokerName"],
            broker_id,
            check.split(";")[0],
            check,
        )
        _raise_unless_ok(out)
        return cmd.response(
            R.SUCCESS, ext(clusterName=f.get("clusterName"), brokerName=f["brokerName"])
        )

    async def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        name, cluster = f.get("brokerName", ""), f.get("clusterName", "")
        broker_id = opt_int(f, "brokerId")
        address = f.get("brokerAddress", "")
        g = self._group(name)
        if g is None:
            raise _error(
                R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"Broker-set: {name} hasn't been registered in controller",
            )
        if broker_id is None or g.replica(broker_id) is None:
            raise _error(
                R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"BrokerId: {broker_id} hasn't been registered in broker-set: {name}",
            )
        if address and address != g.address_of(broker_id):
            _raise_unless_ok(await self._commit("broker_address", name, broker_id, address))
            g = self._group(name) or g
        header = ext(clusterName=cluster, brokerName=name)
        if g.master_broker_id is not None and self._alive(g, g.master_broker_id):
            header.update(
                ext(
                    masterBrokerId=g.master_broker_id,
                    masterAddress=g.master_address,
                    masterEpoch=g.master_epoch,
                    syncStateSetEpoch=g.sync_state_set_epoch,
                )
            )
        body = encode_sync_state_set(g.sync_state_set, g.sync_state_set_epoch)
        return cmd.response(R.SUCCESS, header, body)

    async def _replica_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        g = self._group(cmd.ext_fields.get("brokerName", ""))
        if g is None:
            raise _error(R.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        header = ext(
            masterBrokerId=g.master_broker_id,
            masterAddress=g.master_address,
            masterEpoch=g.master_epoch,
        )
        return cmd.response(
            R.SUCCESS, header, encode_sync_state_set(g.sync_state_set, g.sync_state_set_epoch)
        )

    async def _alter_sync_state_set(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        f = cmd.ext_fields
        name = f.get("brokerName", "")
        master_id, master_epoch = opt_int(f, "masterBrokerId"), opt_int(f, "masterEpoch")
        if master_id is None or master_epoch is None:
            raise _error(
                R.CONTROLLER_INVALID_REQUEST, "masterBrokerId and masterEpoch are required"
            )
        try:
            new_set, sss_epoch = decode_sync_state_set(cmd.body)
        except ValueError as e:
            raise _error(R.CONTROLLER_INVALID_REQUEST, str(e)) from None
        g = self._group(name)
        if g is not None:
            for b in sorted(new_set):
                if g.replica(b) is not None and not self._alive(g, b):
                    raise _error(
                        R.CONTROLLER_BROKER_NOT_ALIVE,
                        f"Rejecting alter syncStateSet request because the replicas {{{b}}} "
                        "don't alive",
                    )
        out = await self._commit(
            "alter_sync_state_set", name, master_id, master_epoch, sss_epoch, sorted(new_set)
        )
        _raise_unless_ok(out)
        epoch = int(out.values["newSyncStateSetEpoch"])
        return cmd.response(
            R.SUCCESS, ext(newSyncStateSetEpoch=epoch), encode_sync_state_set(new_set, epoch)
        )

    async def _elect_master(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        broker_id = opt_int(f, "brokerId")
        designate = f.get("designateElect", "false").lower() in ("true", "1")
        code, remark, header, body = await self.elect_master(
            f.get("brokerName", ""), broker_id, designate
        )
        return cmd.response(code, header, body, remark)

    async def _sync_state_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            names = json.loads(cmd.body) if cmd.body else []
            if not isinstance(names, list):
                raise ValueError("not a list")
        except (ValueError, RecursionError) as e:
            raise _error(R.CONTROLLER_INVALID_REQUEST, f"body must be a JSON list: {e}") from None
        table: dict[str, Any] = {}
        for name in map(str, names):
            g = self._group(name)
            if g is None:
                continue
            ins: list[dict[str, Any]] = []
            outs: list[dict[str, Any]] = []
            for r in sorted(g.replicas, key=lambda r: r.broker_id):
                ident = {
                    "brokerName": name,
                    "brokerId": r.broker_id,
                    "brokerAddress": r.address,
                    "alive": self._alive(g, r.broker_id),
                }
                (ins if r.broker_id in g.sync_state_set else outs).append(ident)
            table[name] = {
                "masterBrokerId": g.master_broker_id,
                "masterAddress": g.master_address,
                "masterEpoch": g.master_epoch,
                "syncStateSetEpoch": g.sync_state_set_epoch,
                "inSyncReplicas": ins,
                "notInSyncReplicas": outs,
            }
        return cmd.response(R.SUCCESS, body=encode_json({"replicasInfoTable": table}))

    async def _clean_broker_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        name = f.get("brokerName", "")
        ids_text = (f.get("brokerControllerIdsToClean") or "").strip()
        living = f.get("isCleanLivingBroker", "false").lower() in ("true", "1")
        ids: frozenset[int] | None = None
        if ids_text:
            try:
                ids = frozenset(int(x) for x in ids_text.split(";") if x.strip())
            except ValueError as e:
                raise _error(
                    R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    "Please set the option <brokerControllerIdsToClean> according to the "
                    f"format, exception: {e}",
                ) from None
        g = self._group(name)
        if not living and g is not None:
            if ids is None and g.master_broker_id is not None:
                raise _error(
                    R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"Broker {name} is still alive, clean up failure",
                )
            for b in sorted(ids or ()):
                if self._alive(g, b):
                    raise _error(
                        R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"Broker [{name},  {b}] is still alive, clean up failure",
                    )
        _raise_unless_ok(
            await self._commit("clean_broker_data", name, sorted(ids) if ids else None)
        )
        return cmd.response(R.SUCCESS)

    # -- elections -------------------------------------------------------------------------

    def _alive(self, g: BrokerGroup, broker_id: int) -> bool:
        return self.heartbeats.is_broker_active(g.cluster_name, g.broker_name, broker_id)

    def _candidate(self, g: BrokerGroup, prefer: int | None) -> int | None:
        """DefaultElectPolicy: the SyncStateSet first; all replicas when
        enableElectUncleanMaster."""

        def alive(b: int) -> bool:
            return self._alive(g, b)

        def info(b: int) -> Any:
            return self.heartbeats.live_info(g.cluster_name, g.broker_name, b)

        new = elect(g.sync_state_set, g.master_broker_id, prefer, alive, info)
        if new is None and self.config.enable_elect_unclean_master:
            new = elect(g.broker_ids, g.master_broker_id, prefer, alive, info)
        return new

    async def elect_master(
        self, broker_name: str, broker_id: int | None, designate: bool = False
    ) -> tuple[int, str | None, dict[str, str], bytes]:
        """ReplicasInfoManager.electMaster on the leader: (code, remark,
        header, body) of the ELECT_MASTER answer. broker_id None or -1 is a
        controller-triggered election."""
        if broker_id == -1:
            broker_id = None
        g = self._group(broker_name)
        if g is None:
            return (
                R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                "Broker hasn't been registered",
                {},
                b"",
            )
        new: int | None = broker_id if g.master_epoch == 0 else None
        if new is None:
            new = self._candidate(g, broker_id if designate else None)
        old = g.master_broker_id
        if new is not None and new == old:
            header = ext(
                masterBrokerId=old,
                masterAddress=g.master_address,
                masterEpoch=g.master_epoch,
                syncStateSetEpoch=g.sync_state_set_epoch,
            )
            remark = (
                f"The old master {old} is still alive, not need to elect new master for "
                f"broker {broker_name}"
            )
            body = encode_elect_master_body(
                g.cluster_name, broker_name, _addrs(g), g.sync_state_set
            )
            return R.CONTROLLER_MASTER_STILL_EXIST, remark, header, body
        if new is None and broker_id is not None:
            return R.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master", {}, b""
        out = await self._commit("elect_master", broker_name, new, g.master_epoch)
        if not out.ok:
            return out.code, out.remark, {}, b""
        g = self._group(broker_name) or g
        if new is None:
            log.warning(
                "%s: master %s is down and no broker can take over (SyncStateSet %s, unclean "
                "election %s): the group has no master, masterEpoch %d",
                broker_name,
                old,
                sorted(g.sync_state_set),
                "enabled" if self.config.enable_elect_unclean_master else "disabled",
                g.master_epoch,
            )
            return (
                R.CONTROLLER_MASTER_NOT_AVAILABLE,
                "Old master has down and failed to elect a new broker master",
                {},
                b"",
            )
        log.info(
            "%s: elected master %d (%s), masterEpoch %d, SyncStateSet %s epoch %d",
            broker_name,
            new,
            g.master_address,
            g.master_epoch,
            sorted(g.sync_state_set),
            g.sync_state_set_epoch,
        )
        header = ext(
            masterBrokerId=new,
            masterAddress=g.master_address,
            masterEpoch=g.master_epoch,
            syncStateSetEpoch=g.sync_state_set_epoch,
        )
        self._notify_role_changed(g)
        return (
            R.SUCCESS,
            None,
            header,
            encode_elect_master_body(g.cluster_name, broker_name, _addrs(g), g.sync_state_set),
        )

    def _notify_role_changed(self, g: BrokerGroup) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED, one-way, to the group's alive brokers.
        Brokers also poll GET_REPLICA_INFO: a lost notice costs nothing."""
        if not self.config.notify_broker_role_changed or g.master_broker_id is None:
            return
        header = ext(
            masterAddress=g.master_address,
            masterEpoch=g.master_epoch,
            syncStateSetEpoch=g.sync_state_set_epoch,
            masterBrokerId=g.master_broker_id,
        )
        body = encode_sync_state_set(g.sync_state_set, g.sync_state_set_epoch)
        for r in g.replicas:
            if not self._alive(g, r.broker_id) or not r.address:
                continue
            cmd = RemotingCommand(RC.NOTIFY_BROKER_ROLE_CHANGED, dict(header), body)
            task = asyncio.create_task(
                self._notify(r.address, cmd), name="pyrmq:controller:notify-role"
            )
            self._notifies.add(task)
            task.add_done_callback(self._notifies.discard)

    async def _notify(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            async with asyncio.timeout(3):
                await self._notifier.invoke_oneway(addr, cmd)
        except (RemotingError, TimeoutError, OSError) as e:
            log.warning("could not notify broker %s of its role change: %s", addr, e)

    # -- loops ------------------------------------------------------------------------------

    def _may_judge_liveness(self) -> bool:
        """Leader for at least one heartbeat timeout (see module docstring)."""
        now = self._clock()
        if not self.is_leader:
            self._leader_since = None
            return False
        if self._leader_since is None:
            self._leader_since = now
            log.info("controller %s is the leader", self.config.controller_dleger_self_id)
        return now - self._leader_since >= self.heartbeats.longest_timeout

    async def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval_ms / 1000
        while True:
            await asyncio.sleep(min(interval, 1.0) if self._leader_since is None else interval)
            try:
                await self.scan_once()
            except Exception:
                log.exception("controller: liveness scan failed")

    async def scan_once(self) -> None:
        """One liveness scan and the elections it calls for."""
        for cluster, name, broker_id in self.heartbeats.scan_not_active():
            log.info("broker %s/%s id %d is not active", cluster, name, broker_id)
        if not self._may_judge_liveness() or self.refusal is not None or self.raft is None:
            return
        try:
            await self._leader_ready()
        except BrokerError:
            return  # not (or no longer) a ready leader: the next scan sees
        for name, g in list(self.raft.info.groups.items()):
            if not any(self._alive(g, b) for b in g.broker_ids):
                continue  # the whole group is silent: nothing to elect from
            master = g.master_broker_id
            if master is not None and self._alive(g, master):
                continue
            if master is None and (g.master_epoch == 0 or self._candidate(g, None) is None):
                continue  # never elected (brokers elect the first), or nobody to elect yet
            await self._trigger_elect(name)

    async def _trigger_elect(self, name: str) -> None:
        for attempt in range(self.config.elect_master_max_retry_count):
            try:
                code, remark, _, _ = await self.elect_master(name, None)
            except BrokerError as e:
                code, remark = e.code, e.remark
            if code in (
                R.SUCCESS,
                R.CONTROLLER_MASTER_STILL_EXIST,
                R.CONTROLLER_MASTER_NOT_AVAILABLE,
            ):
                return
            log.warning("%s: election attempt %d failed: %s %s", name, attempt + 1, code, remark)

    async def _member_loop(self) -> None:
        no_leader_since = self._clock()
        warned_at = 0.0
        while True:
            await asyncio.sleep(MEMBER_INTERVAL)
            raft = self.raft
            if raft is None:
                continue
            now = self._clock()
            if raft.leader_id is None:
                if (
                    now - no_leader_since >= NO_LEADER_WARN_AFTER
                    and now - warned_at >= NO_LEADER_WARN_AFTER
                ):
                    warned_at = now
                    log.warning(
                        "controller %s: no Raft leader for %.0f s: are a majority of the "
                        "controllers in controllerDLegerPeers=%s running, reachable, and "
                        "configured with this same peer list?",
                        self.config.controller_dleger_self_id,
                        now - no_leader_since,
                        self.config.controller_dleger_peers,
                    )
                continue
            no_leader_since = now
            me = self.config.controller_dleger_self_id
            mine = (self.address, self.config.peers_fingerprint())
            if raft.info.members.get(me) != mine:
                with contextlib.suppress(BrokerError):
                    await self._commit("member", me, *mine)
            self._check_members()

    def _check_members(self) -> None:
        assert self.raft is not None
        mine = self.config.peers_fingerprint()
        differ = {cid: fp for cid, (_, fp) in self.raft.info.members.items() if fp != mine}
        if not differ:
            if self.refusal is not None:
                log.info("controller peer lists agree again: serving requests")
            self.refusal = None
            return
        text = "; ".join(f"{cid} has {fp!r}" for cid, fp in sorted(differ.items()))
        refusal = (
            f"controller {self.config.controller_dleger_self_id} refuses to serve: the "
            f"controllers' group/peer lists disagree (ours {mine!r}; {text}). Give every "
            "controller the same controllerDLegerGroup and controllerDLegerPeers"
        )
        if refusal != self.refusal:
            log.error("%s", refusal)
        self.refusal = refusal


def _addrs(g: BrokerGroup) -> dict[int, str]:
    return {r.broker_id: r.address for r in g.replicas}


def _error(code: int, remark: str) -> BrokerError:
    return BrokerError.for_code(code)(remark)


def _raise_unless_ok(out: Outcome) -> None:
    if not out.ok:
        raise _error(out.code, out.remark or f"response code {out.code}")


def _guarded(handler: Handler) -> RequestHandler:
    """ValueError from a malformed header -> CONTROLLER_INVALID_REQUEST."""

    async def run(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return await handler(conn, cmd)
        except ValueError as e:
            return cmd.response(R.CONTROLLER_INVALID_REQUEST, remark=str(e))

    return run


__all__ = ["Controller", "ControllerError"]
