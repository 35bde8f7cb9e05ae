"""HAService: the master's side of replication (RocketMQ HAService,
HAConnection and GroupTransferService).

Each connected slave gets its own HAConnection, which streams the
CommitLog from the offset the slave holds (protocol.py) and reads the
offsets it acknowledges. A SYNC_MASTER send waits in wait_replicated()
until a slave acknowledged its bytes; one timer sweeps every waiter, as the
group commit does."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import logging
import time
from collections.abc import Callable
from typing import Any

from pyrmq.broker.ha import protocol
from pyrmq.broker.ha.epoch import EpochFileCache, consistent_offset
from pyrmq.common import aio
from pyrmq.common.listen import AcceptingServer, start_stream_server
from pyrmq.common.threads import single_thread_executor
from pyrmq.storage import MessageStore
from pyrmq.storage.waiters import OffsetWaiters

log = logging.getLogger("pyrmq.broker.ha")

#: bytes behind the write position from which a transfer reads on the HA
#: thread: such data may have left the page cache, and a page fault must not
#: stall the event loop
COLD_READ_BYTES = 4 * 1024 * 1024
#: (master's end, time) marks a connection keeps for its slave's catch-up
#: time; when more are outstanding the oldest go (the estimate errs late)
MAX_MARKS = 4096


class HAService:
    """The master's replication service. start() listens on (host, port);
    port 0 takes a free one (see `port`)."""

    def __init__(
        self,
        store: MessageStore,
        *,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        host: str,
        port: int,
        transfer_batch_size: int = 32 * 1024,
        heartbeat_interval: float = 5.0,
        housekeeping_interval: float = 20.0,
        max_gap_not_in_sync: int = 256 * 1024 * 1024,
        sync_timeout: float = 5.0,
        epochs: EpochFileCache | None = None,
        on_slave: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.host = host
        self.port = port
        self.transfer_batch_size = max(4096, transfer_batch_size)
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.max_gap_not_in_sync = max_gap_not_in_sync
        self.sync_timeout = sync_timeout
        #: controller mode: this master's epochs (slaves cut their logs to
        #: where they agree with it)
        self.epochs = epochs
        #: slaves that must hold a message before a SYNC_MASTER answers
        #: (controller mode sets it from the SyncStateSet; 0: none)
        self.required_acks = 1
        #: called with a slave's remoting address once it is accepted
        self._on_slave = on_slave
        #: called when confirm_offset may have moved (wake held pulls)
        self.on_confirm: Callable[[], None] | None = None
        self._clock = clock
        self.connections: set[HAConnection] = set()
        #: the largest offset any slave acknowledged (push2SlaveMaxOffset)
        self.slave_ack_offset = 0
        self._server: asyncio.Server | AcceptingServer | None = None
        self._waiters = OffsetWaiters(sync_timeout, clock)
        self._reader = single_thread_executor("pyrmq-ha")
        self.refused = 0

    async def start(self) -> None:
        self._server = await start_stream_server(
            self._accept, self.host, self.port, name="HAService", limit=protocol.MAX_HELLO
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("HAService of %s listening on %s:%d", self.broker_name, self.host, self.port)

    async def shutdown(self) -> None:
        self.store.remove_arrival_listener(self._arrived)
        if self._server is not None:
            self._server.close()
            self._server = None
        for c in list(self.connections):
            await c.close()
        self._waiters.cancel_all()
        self._reader.shutdown(wait=False, cancel_futures=True)

    # -- new data, acknowledgements --------------------------------------------------

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener while a slave is connected (none costs the
        puts nothing)."""
        for c in self.connections:
            c.wakeup.set()

    def acknowledged(self, offset: int) -> None:
        """A slave acknowledged offset (its connection's ack_offset is set)."""
        self.slave_ack_offset = max(self.slave_ack_offset, offset)
        self._waiters.reached(self.replicated_offset)
        if self.on_confirm is not None:
            self.on_confirm()

    @property
    def confirm_offset(self) -> int:
        """What the replicas a send waits for all hold (everything when it
        waits for none): RocketMQ 5's confirmOffset."""
        if self.required_acks <= 0:
            return self.store.commit_log_max_offset
        return max(self.replicated_offset, 0)

    @property
    def replicated_offset(self) -> int:
        """What required_acks slaves (at least one) all hold: the
        required_acks-th largest acknowledged offset; -1 with fewer slaves."""
        k = max(1, self.required_acks)
        if k == 1:  # every SYNC send and every ack asks: no list, no sort
            return max((c.ack_offset for c in self.connections if c.streaming), default=-1)
        acks = heapq.nlargest(k, (c.ack_offset for c in self.connections if c.streaming))
        return acks[-1] if len(acks) == k else -1

    def set_required_acks(self, n: int) -> None:
        """How many slaves must hold a message before a SYNC answer (0:
        none); waiters the new number already satisfies are answered."""
        self.required_acks = n
        self._waiters.reached(self.replicated_offset)
        if self.on_confirm is not None:
            self.on_confirm()

    def is_slave_ok(self, offset: int) -> bool:
        """Enough slaves are connected and near enough to wait for
        (RocketMQ's isSlaveOK: within haMaxGapNotInSync of offset)."""
        held = self.replicated_offset
        return held >= 0 and offset - held < self.max_gap_not_in_sync

    def wait_replicated(self, offset: int) -> asyncio.Future[bool]:
        """A future: True once required_acks slaves hold the CommitLog below
        offset, False when syncFlushTimeout passes first
        (FLUSH_SLAVE_TIMEOUT)."""
        loop = asyncio.get_running_loop()
        if offset <= self.replicated_offset:
            fut: asyncio.Future[bool] = loop.create_future()
            fut.set_result(True)
            return fut
        return self._waiters.add(loop, offset)

    # -- status --------------------------------------------------------------------------

    async def close_connections(self) -> None:
        """Make every slave handshake again (this master's epoch changed)."""
        for c in list(self.connections):
            await c.close()

    def in_sync_slaves(self, now: float, max_lag_s: float) -> set[int]:
        """Broker ids of the slaves that held everything written at most
        max_lag_s ago (haMaxTimeSlaveNotCatchup): candidates for the
        SyncStateSet."""
        return {
            c.broker_id
            for c in self.connections
            if c.streaming and now - c.caught_up_at <= max_lag_s
        }

    def status(self) -> dict[str, Any]:
        top = self.store.commit_log_max_offset
        slaves = [c.status(top) for c in self.connections if c.streaming]
        return {
            "haListenPort": self.port,
            "haConnections": len(slaves),
            "slaveAckOffset": self.slave_ack_offset,
            "slaveFallBehindBytes": max(0, top - self.slave_ack_offset) if slaves else -1,
            "haSlaves": slaves,
            "haRefusedSlaves": self.refused,
        }

    # -- connections ---------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        if not self.connections:
            self.store.add_arrival_listener(self._arrived)
        self.connections.add(conn)
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)
            if not self.connections:
                self.store.remove_arrival_listener(self._arrived)
            await conn.close()

    def handshake_answer(self, hello: dict[str, Any], peer: str) -> dict[str, Any]:
        """Where a slave that says hello starts, or why it is refused."""
        store = self.store
        lo, hi = store.commit_log_min_offset, store.commit_log_max_offset
        size = store.config.mapped_file_size_commit_log
        name = hello.get("brokerName")
        if name != self.broker_name:
            return _refuse(
                f"slave {peer} has brokerName={name!r} but this master is "
                f"{self.broker_name!r}: a slave replicates only its own broker's master"
            )
        if hello.get("clusterName") not in (None, self.cluster):
            return _refuse(
                f"slave {peer} is in cluster {hello.get('clusterName')!r}, this master in "
                f"{self.cluster!r}"
            )
        if hello.get("commitLogFileSize") != size:
            return _refuse(
                f"slave {peer} has mappedFileSizeCommitLog={hello.get('commitLogFileSize')} "
                f"but this master {size}: the copy is byte for byte, so they must be equal"
            )
        at = hello.get("maxOffset")
        if not isinstance(at, int) or at < 0:
            return _refuse(f"slave {peer} sent maxOffset={at!r}")
        truncate_to = None
        if hello.get("empty"):
            start = lo
        elif self.epochs is not None:
            theirs = [(int(e), int(o)) for e, o in hello.get("epochs") or []]
            point = consistent_offset(theirs, at, self.epochs.entries, hi)
            if point is None and theirs:
                return _refuse(
                    f"slave {peer} shares no master epoch with this master (its epochs "
                    f"{theirs}, mine {self.epochs.entries}): empty its store to copy from scratch"
                )
            if point is None:
                point = min(at, hi)  # a store from before controller mode
            if point < at:
                truncate_to = point
            start = point
            if start < lo:
                return _refuse(
                    f"slave {peer} agrees with this master only up to {start}, but the "
                    f"master keeps its CommitLog from {lo}: empty the slave's store"
                )
        elif at > hi:
            return _refuse(
                f"slave {peer} holds the CommitLog up to {at} but this master only up to {hi}: "
                "the master lost data its slave has; copying on would make the logs differ. "
                "Restore the master from the slave (copy the slave's store, or start this "
                "broker as its SLAVE) before starting it as master"
            )
        elif at < lo:
            return _refuse(
                f"slave {peer} holds the CommitLog up to {at} but this master keeps it only from "
                f"{lo} (retention deleted the rest): the slave would have a hole; empty its "
                "store directory to copy from scratch"
            )
        else:
            start = at
        return {
            "ok": True,
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "commitLogFileSize": size,
            "minOffset": lo,
            "maxOffset": hi,
            "startOffset": start,
            "truncateTo": truncate_to,
            "epochs": [list(e) for e in self.epochs.entries] if self.epochs is not None else [],
        }


def _refuse(why: str) -> dict[str, Any]:
    return {"ok": False, "error": why}


class HAConnection:
    """One slave: handshake, then the transfer (the stream of CommitLog
    frames) and the reader of its acknowledgements."""

    def __init__(
        self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.wakeup = asyncio.Event()
        self.streaming = False
        self.broker_id = -1
        self.ack_offset = -1
        self.next_offset = 0
        self._last_heard = service._clock()
        #: when this slave last held everything the master had written: the
        #: time of the newest mark (the master's end, when) its ack passed
        #: (RocketMQ 5's lastCaughtUpTime). Under steady load a slave never
        #: holds the master's current end, only what it was a moment ago.
        self.caught_up_at = service._clock()
        self._marks: collections.deque[tuple[int, float]] = collections.deque(maxlen=MAX_MARKS)
        self._closed = False

    def status(self, top: int) -> dict[str, Any]:
        return {
            "addr": self.peer,
            "brokerId": self.broker_id,
            "ackOffset": self.ack_offset,
            "fallBehindBytes": max(0, top - self.ack_offset),
        }

    async def serve(self) -> None:
        svc = self.service
        try:
            hello = await asyncio.wait_for(protocol.read_hello(self.reader), 10.0)
        except (protocol.ProtocolError, asyncio.IncompleteReadError, TimeoutError, OSError) as e:
            log.warning("HA: connection from %s is not a slave's handshake: %s", self.peer, e)
            return
        answer = svc.handshake_answer(hello, self.peer)
        try:
            aio.write(self.writer, protocol.encode_hello(answer))
        except ConnectionError as e:
            log.warning("HA: %s closed before the handshake's answer: %s", self.peer, e)
            return
        if not answer["ok"]:
            svc.refused += 1
            log.error("HA: refused slave: %s", answer["error"])
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.drain()
            return
        self.broker_id = int(hello.get("brokerId", -1))
        self.next_offset = answer["startOffset"]
        self.streaming = True
        if svc._on_slave is not None and hello.get("brokerAddr"):
            svc._on_slave(str(hello["brokerAddr"]))
        log.info(
            "HA: slave %s (brokerId %d) copies the CommitLog from %d (master at %d)",
            self.peer,
            self.broker_id,
            self.next_offset,
            answer["maxOffset"],
        )
        acks = asyncio.create_task(self._read_acks(), name="pyrmq:ha:acks")
        push = asyncio.create_task(self._transfer(), name="pyrmq:ha:transfer")
        try:
            done, _ = await asyncio.wait({acks, push}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                why = None if t.cancelled() else t.exception()
                if why is None:
                    continue
                if isinstance(why, asyncio.IncompleteReadError | ConnectionError | OSError):
                    log.warning("HA: slave %s disconnected: %s", self.peer, why or "closed")
                else:
                    log.error("HA: slave %s dropped: %s", self.peer, why)
        finally:
            for t in (acks, push):
                t.cancel()
            for t in (acks, push):
                with contextlib.suppress(BaseException):
                    await t

    async def _read_acks(self) -> None:
        svc = self.service
        while True:
            (offset,) = protocol.OFFSET.unpack(await self.reader.readexactly(8))
            if offset < 0 or offset > svc.store.commit_log_max_offset:
                raise protocol.ProtocolError(
                    f"acknowledged offset {offset} is outside this master's CommitLog"
                )
            self._last_heard = svc._clock()
            self.ack_offset = offset
            marks = self._marks
            while marks and offset >= marks[0][0]:
                self.caught_up_at = max(self.caught_up_at, marks.popleft()[1])
            if offset >= svc.store.commit_log_max_offset:
                self.caught_up_at = self._last_heard
            svc.acknowledged(offset)

    async def _transfer(self) -> None:
        svc = self.service
        store = svc.store
        seg = store.config.mapped_file_size_commit_log
        loop = asyncio.get_running_loop()
        last_sent = svc._clock()
        while True:
            self.wakeup.clear()
            top = store.commit_log_max_offset
            at = self.next_offset
            if at < top:
                n = min(top - at, svc.transfer_batch_size, seg - at % seg)
                if top - at > COLD_READ_BYTES:
                    data = await loop.run_in_executor(svc._reader, store.core.read, at, n)
                else:
                    data = store.core.read(at, n)
                aio.write(self.writer, protocol.encode_frame_header(at, data))
                aio.write(self.writer, data)
                self.next_offset = at + n
                last_sent = svc._clock()
                if not self._marks or self._marks[-1][0] < top:
                    self._marks.append((top, last_sent))
                await self.writer.drain()
                continue
            now = svc._clock()
            if now - self._last_heard > svc.housekeeping_interval:
                raise protocol.ProtocolError(
                    f"no acknowledgement for {now - self._last_heard:.0f}s "
                    f"(haHousekeepingInterval={svc.housekeeping_interval:.0f}s)"
                )
            if now - last_sent >= svc.heartbeat_interval:
                # a heartbeat carries the master's write position
                aio.write(self.writer, protocol.FRAME.pack(top, 0, 0))
                last_sent = now
                await self.writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(svc.heartbeat_interval):
                    await self.wakeup.wait()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.streaming = False
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)
