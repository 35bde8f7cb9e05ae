"""ReplicasManager: a broker in controller mode (RocketMQ 5's
enableControllerMode=true): the controllers, not broker.conf, say who is
master.

At start the broker registers with the controllers (the 5.1 flow: a new
broker applies for the next broker id and keeps it with its check code in
<storePathRootDir>/config/controllerBrokerId.json), then follows the
group's replica info (GET_REPLICA_INFO every syncBrokerMetadataPeriod, and
at once when a controller sends NOTIFY_BROKER_ROLE_CHANGED):

- named master (masterBrokerId is this broker): it records the new epoch
  (EpochFileCache), serves sends, replicates to its slaves and, every
  checkSyncStateSetPeriod, asks the controller to set the SyncStateSet to
  itself and the slaves that held everything within
  haMaxTimeSlaveNotCatchup;
- another broker is master: it becomes (or stays) its slave: it refuses
  sends, replicates from that master (cutting any tail the master never
  had, by epochs) and keeps its metadata;
- no master: it refuses sends and waits.

Heartbeats (BROKER_HEARTBEAT, every brokerHeartbeatInterval, to every
controller) carry its epoch and CommitLog end, which the controller uses to
pick the freshest candidate."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from pyrmq.common.config_file import write_json_atomic
from pyrmq.common.errors import RMQError
from pyrmq.controller.client import ControllerClient, ReplicaInfo

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker

log = logging.getLogger("pyrmq.broker.ha")


class ReplicasManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.client = ControllerClient(cfg.controller_addr, retry_timeout=5.0)
        self.broker_id = -1
        self.role = "UNKNOWN"
        self.master_epoch = 0
        self.master_addr = ""
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        #: a SyncStateSet asked for whose answer did not arrive: the
        #: controllers may have applied it, so until their replica info says
        #: which set holds, sends wait as for the larger of the two
        self._asked: frozenset[int] = frozenset()
        self._altering = False
        self.role_changes = 0
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._id_path = os.path.join(
            broker.store_config.store_path_root_dir, "config", "controllerBrokerId.json"
        )

    # -- start / stop ---------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.broker.config
        saved = self._load_identity()
        broker_id, code = saved if saved else (None, None)
        for attempt in range(1_000_000):
            try:
                self.broker_id, info = await self.client.register(
                    cfg.broker_cluster_name, cfg.broker_name, self.broker.addr, broker_id, code
                )
                break
            except RMQError as e:
                if attempt == 0:
                    log.warning(
                        "controller mode: registering with %s failed: %s; retrying",
                        cfg.controller_addr,
                        e,
                    )
                await asyncio.sleep(1.0)
        if saved is None:
            code = code or f"{self.broker.addr};{int(time.time() * 1000)}"
            await asyncio.get_running_loop().run_in_executor(
                None,
                write_json_atomic,
                self._id_path,
                {"brokerId": self.broker_id, "registerCheckCode": code},
            )
        log.info(
            "controller mode: %s is replica %d of %s",
            self.broker.addr,
            self.broker_id,
            cfg.broker_name,
        )
        await self._heartbeat_once()
        if info.master_broker_id is None:
            info = await self._elect() or info
        await self.apply(info)
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="pyrmq:ha:controller-heartbeat"),
            asyncio.create_task(self._sync_loop(), name="pyrmq:ha:replica-info"),
            asyncio.create_task(self._sync_state_set_loop(), name="pyrmq:ha:sync-state-set"),
        ]

    async def shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.client.shutdown()

    def _load_identity(self) -> tuple[int, str] | None:
        try:
            with open(self._id_path, "rb") as f:
                doc = json.load(f)
            return int(doc["brokerId"]), str(doc["registerCheckCode"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{self._id_path} is damaged: {e}") from e

    def notified(self) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED arrived: look at the replica info now."""
        self._kick.set()

    # -- loops ------------------------------------------------------------------------

    async def _heartbeat_once(self) -> None:
        cfg = self.broker.config
        store = self.broker.store
        assert store is not None
        epochs = self.broker.roles.epochs
        await self.client.heartbeat(
            cfg.broker_cluster_name,
            cfg.broker_name,
            self.broker.addr,
            self.broker_id,
            epoch=epochs.last_epoch if epochs is not None else 0,
            max_offset=store.commit_log_max_offset,
            confirm_offset=store.commit_log_max_offset,
            heartbeat_timeout_ms=cfg.controller_heart_beat_timeout_mills,
        )

    async def _heartbeat_loop(self) -> None:
        interval = self.broker.config.broker_heartbeat_interval / 1000
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(RMQError, OSError):
                await self._heartbeat_once()

    async def _sync_loop(self) -> None:
        period = self.broker.config.sync_broker_metadata_period / 1000
        failing = False
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._kick.wait()
            self._kick.clear()
            try:
                info = await self.client.get_replica_info(self.broker.config.broker_name)
                if info.master_broker_id is None:
                    info = await self._elect() or info
                await self.apply(info)
                failing = False
            except asyncio.CancelledError:
                raise
            except (RMQError, OSError) as e:
                if not failing:
                    log.warning("controller mode: no replica info from the controllers: %s", e)
                failing = True

    async def _elect(self) -> ReplicaInfo | None:
        cfg = self.broker.config
        try:
            return await self.client.elect_master(
                cfg.broker_cluster_name, cfg.broker_name, self.broker_id
            )
        except RMQError as e:
            log.info("controller mode: election for %s not possible now: %s", cfg.broker_name, e)
            return None

    async def _sync_state_set_loop(self) -> None:
        cfg = self.broker.config
        period = cfg.check_sync_state_set_period / 1000
        max_lag = cfg.ha_max_time_slave_not_catchup / 1000
        while True:
            await asyncio.sleep(period)
            ha = self.broker.roles.ha
            if self.role != "MASTER" or ha is None:
                continue
            wanted = frozenset({self.broker_id} | ha.in_sync_slaves(time.monotonic(), max_lag))
            if wanted == self.sync_state_set:
                continue
            self._asked = wanted
            self._set_required_acks()
            self._altering = True
            try:
                self.sync_state_set_epoch = await self.client.alter_sync_state_set(
                    cfg.broker_name,
                    self.broker_id,
                    self.master_epoch,
                    wanted,
                    self.sync_state_set_epoch,
                )
                log.info(
                    "controller mode: SyncStateSet of %s is now %s (epoch %d)",
                    cfg.broker_name,
                    sorted(wanted),
                    self.sync_state_set_epoch,
                )
                self.sync_state_set = wanted
                self._asked = frozenset()
                self._set_required_acks()
            except RMQError as e:
                log.warning("controller mode: SyncStateSet change refused: %s", e)
                self._kick.set()
            finally:
                self._altering = False

    def _set_required_acks(self) -> None:
        """RocketMQ 5's rule: a send waits for every SyncStateSet member
        (allAckInSyncStateSet) or for inSyncReplicas replicas, the master
        included; with the set down to the master alone it waits for none
        (only a SyncStateSet member can be elected, so nothing acknowledged
        is lost)."""
        ha = self.broker.roles.ha
        if ha is None:
            return
        cfg = self.broker.config
        members = self.sync_state_set | self._asked
        need = len(members) if cfg.all_ack_in_sync_state_set else cfg.in_sync_replicas
        ha.set_required_acks(max(0, min(need, len(members)) - 1))

    # -- roles ------------------------------------------------------------------------

    async def apply(self, info: ReplicaInfo) -> None:
        """Follow the controller's view of the group."""
        if info.master_broker_id == self.broker_id:
            self.sync_state_set = info.sync_state_set
            self.sync_state_set_epoch = info.sync_state_set_epoch
            if not self._altering:  # the controllers' word settles it
                self._asked = frozenset()
            if self.role != "MASTER" or info.master_epoch != self.master_epoch:
                self.master_epoch = info.master_epoch
                await self.broker.roles.become_master(info.master_epoch)
                self._changed("MASTER", self.broker.addr)
            self._set_required_acks()
            return
        if info.master_broker_id is None or not info.master_address:
            if self.role == "MASTER":
                await self.broker.roles.become_slave("", info.master_epoch)
                self._changed("SLAVE", "")
            return
        if self.role != "SLAVE" or info.master_address != self.master_addr:
            self.master_epoch = info.master_epoch
            await self.broker.roles.become_slave(info.master_address, info.master_epoch)
            self._changed("SLAVE", info.master_address)

    def _changed(self, role: str, master: str) -> None:
        self.role = role
        self.master_addr = master
        self.role_changes += 1
        log.warning(
            "controller mode: %s (replica %d of %s) is now %s%s, master epoch %d",
            self.broker.addr,
            self.broker_id,
            self.broker.config.broker_name,
            role,
            f" of {master}" if role == "SLAVE" and master else "",
            self.master_epoch,
        )

    def status(self) -> dict[str, Any]:
        return {
            "controllerMode": True,
            "controllerBrokerId": self.broker_id,
            "controllerRole": self.role,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "roleChanges": self.role_changes,
        }
