"""BrokerRoles: a broker's place in its replica group, and the switch
between master and slave (RocketMQ: BrokerController's HA wiring and
ReplicasManager.changeToMaster / changeToSlave).

- A master runs the HAService (its slaves connect to it and copy the
  CommitLog) and delivers delayed messages; it takes the consumer offsets a
  reconnecting slave got while the master was away.
- A slave runs an HAClient (copies its master's CommitLog) and
  SlaveSynchronize (its metadata), refuses sends and never moves a
  consumer's offset. Without controller mode its master comes from
  haMasterAddress or the name servers' answer to its registration.
- In controller mode (ReplicasManager) the controllers say which it is, and
  become_master / become_slave switch a running broker: the epoch is
  recorded, the processors learn their role, the name servers the new
  broker id."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from pyrmq.broker.ha.client import HAClient
from pyrmq.broker.ha.epoch import EpochFileCache
from pyrmq.broker.ha.replicas import ReplicasManager
from pyrmq.broker.ha.service import HAService
from pyrmq.broker.ha.slave_sync import SlaveSynchronize
from pyrmq.common.errors import ClientError
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore
from pyrmq.storage.files import stored_topics

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker

log = logging.getLogger("pyrmq.broker.ha")


class BrokerRoles:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        #: controller mode: the controllers choose the role (until they have,
        #: the broker takes no sends)
        self.controller_mode = cfg.enable_controller_mode
        self.slave = cfg.broker_role == "SLAVE" or self.controller_mode
        self.replicas: ReplicasManager | None = None
        self.epochs: EpochFileCache | None = None
        #: a master's replication service / a slave's replication client and
        #: metadata sync
        self.ha: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        #: a slave's master (remoting address), as the name server or the
        #: replication handshake told
        self.master_addr = ""
        self._tasks: set[asyncio.Task[None]] = set()

    # -- start / stop ---------------------------------------------------------------------

    async def open(self, store: MessageStore) -> None:
        """Before the processors exist: a configured master's HAService
        (its port goes into the registration), controller mode's epochs."""
        if self.controller_mode:
            self.epochs = EpochFileCache(self.broker.store_config.store_path_root_dir)
        elif not self.slave:
            self.ha = await self._start_ha_service(store)

    async def start(self, store: MessageStore) -> None:
        """Once the broker serves: a configured slave replicates; in
        controller mode the broker registers with the controllers and
        waits for its role."""
        if self.controller_mode:
            self.replicas = ReplicasManager(self.broker)
            self.broker.outer.set_broker_id(-1)  # not registered until the controllers say
            await self.replicas.start()
        elif self.slave:
            self._start_replication(store)

    async def shutdown(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.replicas is not None:
            await self.replicas.shutdown()
        await self._stop_replication()

    async def close_ha_service(self) -> None:
        if self.ha is not None:
            await self.ha.shutdown()

    def status(self) -> dict[str, Any]:
        return {
            **(self.ha.status() if self.ha is not None else {}),
            **(self.replicas.status() if self.replicas is not None else {}),
            **(self.ha_client.status() if self.ha_client is not None else {}),
        }

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_ha_service(self, store: MessageStore) -> HAService:
        b = self.broker
        cfg = b.config
        port = cfg.ha_port

        def make(p: int) -> HAService:
            return HAService(
                store,
                cluster=cfg.broker_cluster_name,
                broker_name=cfg.broker_name,
                broker_addr=b.addr,
                host=cfg.listen_host,
                port=p,
                transfer_batch_size=cfg.ha_transfer_batch_size,
                heartbeat_interval=cfg.ha_send_heartbeat_interval / 1000,
                housekeeping_interval=cfg.ha_housekeeping_interval / 1000,
                max_gap_not_in_sync=cfg.ha_max_gap_not_in_sync,
                sync_timeout=b.store_config.sync_flush_timeout_ms / 1000,
                on_slave=self._slave_connected,
            )

        ha = make(port)
        try:
            await ha.start()
        except OSError as e:
            if cfg.ha_listen_port >= 0:
                raise ClientError(f"haListenPort {port}: {e.strerror or e}") from None
            # the default (listenPort + 1) is taken: slaves learn the port
            # from the name servers, so any free one serves
            log.warning("HA port %d is in use (%s): listening on a free port", port, e)
            ha = make(0)
            await ha.start()
        return ha

    # -- controller mode: role changes ---------------------------------------------------

    async def become_master(self, epoch: int) -> None:
        """The controllers made this broker master of `epoch`."""
        b = self.broker
        store = b.store
        assert store is not None and self.epochs is not None
        await self._stop_replication()
        await self.epochs.append(epoch, store.commit_log_max_offset)
        if self.ha is None:
            self.ha = await self._start_ha_service(store)
        else:
            await self.ha.close_connections()  # slaves learn the new epoch
        ha = self.ha
        ha.epochs = self.epochs
        b.outer.set_ha_server_addr(f"{b.ip}:{ha.port}")
        if b.dedup is not None:
            # what the old master stored is found before the first send here
            await b.dedup.start()
        self.slave = False
        b.send_processor.set_role(b.config.broker_role, ha)
        b.pull_processor.slave = False
        # consumers read what the SyncStateSet holds, never a tail a
        # failover could cut
        b.pull_processor.confirm_limit = lambda: ha.confirm_offset
        ha.on_confirm = b.pull_processor.wake_all
        if not b.schedule.running:
            await b.schedule.start()
        if not b.transactions.started:
            await b.start_transactions()
        if not b.pop.running:
            await b.pop.start()
        if not b.timer.running:
            await b.timer.start()
        # topics the old master created too shortly before it died for the
        # metadata sync to bring them: routed again, with their messages
        root = b.store_config.store_path_root_dir
        b.topics.adopt_stored(await asyncio.to_thread(stored_topics, root))
        b.outer.set_broker_id(0, epoch)
        if b.config.namesrv_addrs:
            await b.outer.register_all()

    async def become_slave(self, master_addr: str, epoch: int) -> None:
        """Another broker is master (master_addr; "" when the group has
        none): take no sends, replicate from it."""
        b = self.broker
        store = b.store
        assert store is not None and self.replicas is not None
        self.slave = True
        b.send_processor.set_role("SLAVE", None)
        b.pull_processor.slave = True
        b.pull_processor.confirm_limit = None
        if b.schedule.running:
            await b.schedule.shutdown()
        await b.stop_transactions()
        # POP checkpoints and timed messages are the master's to write
        await b.pop.shutdown()
        await b.timer.shutdown()
        if self.ha is not None:
            await self.ha.shutdown()
            self.ha = None
        await self._stop_replication()
        b.outer.set_broker_id(self.replicas.broker_id)
        if b.config.namesrv_addrs:
            await b.outer.register_all()
        if master_addr:
            self.master_addr = master_addr
            self._start_replication(store)
            assert self.ha_client is not None
            self.ha_client.epochs = self.epochs
            self._spawn(self._resolve_master_ha(master_addr), "pyrmq:ha:resolve-master")

    def role_changed(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED (1008, one-way from a controller). Sent
        as a two-way request it is answered SUCCESS, so its sender does not
        wait for an answer that never comes (a one-way request gets none)."""
        if self.replicas is not None:
            self.replicas.notified()
        return cmd.response(ResponseCode.SUCCESS)

    async def _resolve_master_ha(self, master_addr: str) -> None:
        """The master's HA port, from its runtime info (bounded retries)."""
        host = master_addr.rpartition(":")[0]
        for _ in range(600):
            if self.ha_client is None or self.master_addr != master_addr:
                return
            try:
                resp = await self.broker.client.invoke(
                    master_addr, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 3.0
                )
                port = json.loads(resp.body)["table"]["haListenPort"]
                self.ha_client.set_master_ha_addr(f"{host}:{port}")
                return
            except Exception:  # the master is still starting, or gone
                await asyncio.sleep(1.0)

    # -- a slave's replication -----------------------------------------------------------

    def _start_replication(self, store: MessageStore) -> None:
        b = self.broker
        cfg = b.config
        self.ha_client = HAClient(
            store,
            cluster=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=self.replicas.broker_id if self.replicas is not None else cfg.broker_id,
            master_ha_addr=cfg.ha_master_address,
            heartbeat_interval=cfg.ha_send_heartbeat_interval / 1000,
            on_appended=b.pull_processor.wake_all,
            on_master=self._master_remoting_addr,
            broker_addr=b.addr,
        )
        self.slave_sync = SlaveSynchronize(
            b.client, lambda: self.master_addr, b.topics, b.offsets, b.schedule, store
        )
        self.ha_client.start()
        self.slave_sync.start()
        if cfg.namesrv_addrs and not cfg.ha_master_address and not self.controller_mode:
            self._spawn(self._find_master(), "pyrmq:broker:find-master")

    async def _stop_replication(self) -> None:
        if self.ha_client is not None:
            await self.ha_client.shutdown()
            self.ha_client = None
        if self.slave_sync is not None:
            await self.slave_sync.shutdown()
            self.slave_sync = None

    async def _find_master(self) -> None:
        """While replication is down, ask the name servers for the master
        every second (a registration's answer names it), not only every
        registerNameServerPeriod: a slave started before its master, or a
        master back on another address, is found at once."""
        while True:
            await asyncio.sleep(1.0)
            if self.ha_client is not None and not self.ha_client.connected:
                with contextlib.suppress(Exception):
                    await self.broker.outer.register_all()

    def master_learned(self, master_addr: str, ha_addr: str) -> None:
        """The name server's answer to a slave's registration (not in
        controller mode: there the controllers name the master)."""
        if self.controller_mode:
            return
        self._master_remoting_addr(master_addr)
        if self.ha_client is not None and not self.broker.config.ha_master_address:
            self.ha_client.set_master_ha_addr(ha_addr)

    def _master_remoting_addr(self, addr: str) -> None:
        if addr and addr != self.master_addr:
            self.master_addr = addr
            if self.slave_sync is not None:
                self.slave_sync.sync_soon()

    # -- a master's slaves ---------------------------------------------------------------

    def _slave_connected(self, slave_addr: str) -> None:
        self._spawn(self._merge_slave_offsets(slave_addr), "pyrmq:ha:slave-offsets")

    async def _merge_slave_offsets(self, slave_addr: str) -> None:
        """A slave (re)connected: take the consumer offsets it holds beyond
        this master's, queue by queue. Consumers commit to the slave while
        the master is away; without this a master back from a crash would
        hand a restarted consumer its old offsets."""
        try:
            resp = await self.broker.client.invoke(
                slave_addr, RemotingCommand(RequestCode.GET_ALL_CONSUMER_OFFSET, {}), 5.0
            )
            table = json.loads(resp.body or b"{}").get("offsetTable") or {}
        except Exception as e:  # the slave is gone again, or not a pyrmq slave
            log.info("HA: consumer offsets of slave %s not read: %s", slave_addr, e)
            return
        taken = self.broker.offsets.take_larger(table)
        if taken:
            log.info(
                "HA: took %d consumer offset(s) slave %s got while this master was away",
                taken,
                slave_addr,
            )
