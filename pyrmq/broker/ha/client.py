"""HAClient: the slave's side of replication (RocketMQ HAClient).

Connects to the master's HA port, says what it holds (protocol.py), writes
the CommitLog frames it receives at the same offsets (MessageStore
append_replica, which checks every record) and reports its offset after each
append and every haSendHeartbeatInterval. Any break (the master gone, a
refused handshake, a damaged frame) ends the connection; it connects again
after a pause and resumes from what it holds, so nothing is written twice
and nothing is skipped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from pyrmq.broker.ha import protocol
from pyrmq.broker.ha.epoch import EpochFileCache
from pyrmq.common import aio
from pyrmq.common.errors import CorruptStoreError, StoreError
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker.ha")

#: seconds between connection attempts to the master
RECONNECT_DELAY = 1.0


class HAClient:
    def __init__(
        self,
        store: MessageStore,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        master_ha_addr: str = "",
        heartbeat_interval: float = 5.0,
        on_appended: Callable[[], None] | None = None,
        on_master: Callable[[str], None] | None = None,
        epochs: EpochFileCache | None = None,
        broker_addr: str = "",
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.master_ha_addr = master_ha_addr
        self.heartbeat_interval = heartbeat_interval
        self._on_appended = on_appended
        self._on_master = on_master
        #: controller mode: the epochs of what this replica holds
        self.epochs = epochs
        self.truncations = 0
        #: this slave's remoting address (the master reads its consumer
        #: offsets from there: commits made while the master was away)
        self.broker_addr = broker_addr
        #: the master's remoting address, as its handshake told
        self.master_addr = ""
        self.connected = False
        #: the master's write position as last heard (its heartbeats carry it)
        self.master_max_offset = -1
        self.last_refusal = ""
        self.frames = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pyrmq:ha:client")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def set_master_ha_addr(self, addr: str) -> None:
        """The master's HA address changed (the name server told): connect
        there."""
        if addr and addr != self.master_ha_addr:
            log.info("HA: master of %s is now at %s", self.broker_name, addr)
            self.master_ha_addr = addr
            self._changed.set()

    def status(self) -> dict[str, Any]:
        mine = self.store.commit_log_max_offset
        return {
            "haMasterAddress": self.master_ha_addr,
            "masterAddr": self.master_addr,
            "haConnected": self.connected,
            "haReplicaOffset": mine,
            "masterMaxOffset": self.master_max_offset,
            "slaveFallBehindBytes": (
                max(0, self.master_max_offset - mine) if self.master_max_offset >= 0 else -1
            ),
            "haLastRefusal": self.last_refusal,
        }

    async def _run(self) -> None:
        failures = 0
        while True:
            self._changed.clear()
            addr = self.master_ha_addr
            if not addr:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), RECONNECT_DELAY)
                continue
            try:
                await self._session(addr)
                failures = 0
            except asyncio.CancelledError:
                raise
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                if failures == 0:
                    log.warning(
                        "HA: connection to master %s lost or refused: %s", addr, e or "closed"
                    )
                failures += 1
            except (protocol.ProtocolError, StoreError, ValueError) as e:
                log.error("HA: replication from %s stopped: %s; reconnecting", addr, e)
                failures += 1
            finally:
                self.connected = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RECONNECT_DELAY)

    def _hello(self) -> dict[str, Any]:
        store = self.store
        return {
            "clusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "brokerAddr": self.broker_addr,
            "commitLogFileSize": store.config.mapped_file_size_commit_log,
            "maxOffset": store.commit_log_max_offset,
            "empty": not store.core.commit_log_files(),
            "epochs": [list(e) for e in self.epochs.entries] if self.epochs is not None else [],
        }

    async def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5.0)
        try:
            aio.write(writer, protocol.encode_hello(self._hello()))
            answer = await asyncio.wait_for(protocol.read_hello(reader), 10.0)
            if not answer.get("ok"):
                self.last_refusal = str(answer.get("error"))
                raise protocol.ProtocolError(f"the master refused this slave: {self.last_refusal}")
            self.last_refusal = ""
            self.master_addr = str(answer.get("brokerAddr", ""))
            self.master_max_offset = int(answer.get("maxOffset", -1))
            if self.master_addr and self._on_master is not None:
                self._on_master(self.master_addr)
            start = int(answer["startOffset"])
            cut = answer.get("truncateTo")
            if cut is not None and int(cut) < self.store.commit_log_max_offset:
                log.warning(
                    "HA: this replica's CommitLog goes on past where it agrees with master %s "
                    "(%d): cutting it there, %d bytes the master never had are dropped",
                    addr,
                    int(cut),
                    self.store.commit_log_max_offset - int(cut),
                )
                self.store.truncate(int(cut))
                self.truncations += 1
            if self.epochs is not None:
                await self.epochs.replace(answer.get("epochs") or [], start)
            self.connected = True
            log.info(
                "HA: replicating %s from master %s (%s) at CommitLog offset %d; master at %d",
                self.broker_name,
                addr,
                self.master_addr,
                start,
                self.master_max_offset,
            )
            await self._replicate(reader, writer, start)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def _replicate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, start: int
    ) -> None:
        store = self.store
        pending = bytearray()
        at = start  # where `pending` begins: the end of what is written
        self._report(writer, store.commit_log_max_offset)
        while True:
            try:
                async with asyncio.timeout(self.heartbeat_interval * 4):
                    offset, data = await protocol.read_frame(reader)
            except TimeoutError:
                raise protocol.ProtocolError(
                    f"nothing from the master for {self.heartbeat_interval * 4:.0f}s"
                ) from None
            self.frames += 1
            if not data:
                self.master_max_offset = offset
                self._report(writer, at)
                continue
            if offset != at + len(pending):
                raise protocol.ProtocolError(
                    f"frame at CommitLog offset {offset}, expected {at + len(pending)}"
                )
            pending += data
            self.master_max_offset = max(self.master_max_offset, offset + len(data))
            try:
                accepted = store.append_replica(at, pending)
            except CorruptStoreError as e:
                raise protocol.ProtocolError(
                    f"the stream failed a record check at or after offset {at}: {e}; "
                    "nothing of the damaged record was written"
                ) from None
            if accepted:
                del pending[:accepted]
                at += accepted
                if self._on_appended is not None:
                    self._on_appended()
            self._report(writer, at)
            await writer.drain()

    def _report(self, writer: asyncio.StreamWriter, offset: int) -> None:
        aio.write(writer, protocol.OFFSET.pack(offset))
