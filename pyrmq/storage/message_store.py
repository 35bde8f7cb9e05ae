"""MessageStore: the broker's store facade (RocketMQ DefaultMessageStore).

Appends, dispatch to ConsumeQueues and IndexFiles, reads and lookups happen
in rmqcore's C store, synchronously on the event loop: the loop is the put
lock, and no put awaits between taking an offset and writing the record.
Everything that blocks (flush, creating the next segment, deleting files,
recovery at start) runs on the store's IOExecutor threads with the GIL
released."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import ipaddress
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import rmqcore
from pyrmq.common.errors import DiskFullError, StoreError
from pyrmq.common.message import split_offset_msg_id
from pyrmq.storage.clean import CleanResult, CleanService, disk_used_ratio
from pyrmq.storage.config import FlushDiskType, MessageStoreConfig
from pyrmq.storage.flush import GroupCommitService, PeriodicFlushService
from pyrmq.storage.io_executor import IOExecutor, cancel_and_wait

log = logging.getLogger("pyrmq.storage")

#: Callback for new messages: (topic, queue_id, max_offset_after).
ArrivalListener = Callable[[str, int, int], None]
#: seconds: while the disk is marked full, a refused put measures it again
#: at most this often, so puts resume soon after space is freed (not only
#: at the next retention pass)
DISK_RECHECK_INTERVAL = 0.1
#: ms the index thread lets puts gather before a build (one build for all
#: of them: a 2 ms window cost 9% of the broker's loop under the C++ client
#: when each build was a hop from the loop to a Python thread)
INDEX_WINDOW_MS = 20


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclasses.dataclass(frozen=True, slots=True)
class PutMessageResult:
    """Outcome of a durable put (RocketMQ PutMessageResult)."""

    status: PutMessageStatus
    append: rmqcore.AppendResult

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


def recovery_repairs(rec: dict[str, Any]) -> list[str]:
    """What recovery repaired, one sentence each (none on a healthy store),
    from MessageStoreCore.recovery."""
    out = []
    if not rec["checkpoint_valid"] and rec["commit_log_end"] > 0:
        out.append(f"checkpoint missing or damaged: scanned the CommitLog from {rec['scan_from']}")
    if rec["commit_log_short_files"]:
        out.append(
            f"{rec['commit_log_short_files']} CommitLog segment(s) found cut short: "
            "what followed the cut is gone"
        )
    if rec["damaged_ranges"]:
        out.append(
            f"{rec['damaged_ranges']} damaged CommitLog range(s), {rec['bytes_damaged']} bytes, "
            "failed their checks (CRC, structure): overwritten so that they are never served; "
            "the records around them are kept"
        )
    if rec["bytes_trimmed"]:
        out.append(
            f"CommitLog trimmed after its last intact record: {rec['bytes_trimmed']} bytes "
            "(a torn write, or damage with nothing intact after it)"
        )
    if rec["consume_queues_repaired"]:
        out.append(
            f"{rec['consume_queues_repaired']} ConsumeQueue(s) cut short or disagreeing with "
            "the CommitLog: rebuilt from it"
        )
    if rec["index_files_dropped"]:
        why = (
            "damaged or not flushed before the machine went down"
            if rec["other_boot"]
            else "damaged"
        )
        out.append(
            f"{rec['index_files_dropped']} IndexFile(s) {why} deleted: keys indexed again "
            "from the CommitLog"
        )
    return out


def _flush_logged(f: asyncio.Future[bool]) -> None:
    if not f.cancelled() and f.exception() is None and not f.result():
        log.warning("the CommitLog flush took longer than syncFlushTimeout")


def encode_host(host: str, port: int) -> bytes:
    """Socket address as stored: IPv4 (4 bytes) or IPv6 (16) + int32 port."""
    ip = ipaddress.ip_address(host)
    return ip.packed + port.to_bytes(4, "big")


class MessageStore:
    """The store. `async with MessageStore(config) as store:` or
    start()/shutdown(). Put, get and lookups are plain methods that do not
    block; `put_message`/`put_messages` are coroutines that also wait for
    durability in SYNC_FLUSH mode."""

    def __init__(
        self,
        config: MessageStoreConfig | None = None,
        *,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        disk_ratio: Callable[[str], float] | None = None,
    ) -> None:
        self.config = config or MessageStoreConfig()
        self._store_host = encode_host(*store_host)
        #: used-space ratio of the store's disk (injectable for tests)
        self._disk_ratio = disk_ratio
        self._core: rmqcore.MessageStoreCore | None = None
        self._io: IOExecutor | None = None
        self._group_commit: GroupCommitService | None = None
        self._services: list[Any] = []
        self._clean: CleanService | None = None
        #: RunningFlags DISK_FULL (set by the retention pass): puts are refused
        self._disk_full = False
        self._disk_checked_at = 0.0
        self._listeners: list[ArrivalListener] = []
        #: listeners of one topic each (the schedule and timer services)
        self._topic_listeners: dict[str, list[ArrivalListener]] = {}
        self._allocating = False
        self._index_error: str | None = None  # the index thread's, as last logged
        self._redispatch_task: asyncio.Task[None] | None = None
        self._sync = self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout = self.config.sync_flush_timeout_ms / 1000

    # -- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        """Open and recover the store (on an I/O thread), start the services."""
        if self._core is not None:
            raise StoreError("the store is already started")
        cfg = self.config
        self._io = IOExecutor()
        try:
            self._core = await self._io.run("open", self._open_core)
        except BaseException:
            self._io.shutdown()
            self._io = None
            raise
        rec = self._core.recovery
        log.info(
            "store %s opened (%s shutdown): CommitLog end %d, scanned %d records from %d, "
            "trimmed %d bytes, re-dispatched %d records",
            cfg.store_path_root_dir,
            "abnormal" if rec["abnormal"] else "clean",
            rec["commit_log_end"],
            rec["records_scanned"],
            rec["scan_from"],
            rec["bytes_trimmed"],
            rec["records_dispatched"],
        )
        for repair in recovery_repairs(rec):
            log.warning("store %s recovery repaired: %s", cfg.store_path_root_dir, repair)
        if cfg.message_index_enable and cfg.message_index_async:
            self._core.start_index_thread(INDEX_WINDOW_MS)
        if self._sync:
            self._group_commit = GroupCommitService(self._core, self._io, self._sync_timeout)
        else:
            self._services.append(
                PeriodicFlushService(
                    "FlushRealTimeService",
                    self._core.flush_commit_log,
                    self._io,
                    "flush-commitlog",
                    cfg.flush_interval_commit_log_ms / 1000,
                    cfg.flush_commit_log_least_pages,
                    cfg.flush_commit_log_thorough_interval_ms / 1000,
                )
            )
        self._services.append(
            PeriodicFlushService(
                "FlushConsumeQueueService",
                self._core.flush_logics,
                self._io,
                "flush-logics",
                cfg.flush_interval_consume_queue_ms / 1000,
                cfg.flush_consume_queue_least_pages,
                cfg.flush_consume_queue_thorough_interval_ms / 1000,
            )
        )
        self._clean = CleanService(
            self._core,
            cfg,
            self._io,
            disk_ratio=self._disk_ratio or disk_used_ratio,
            on_disk_full=self._set_disk_full,
        )
        self._clean.check_disk()
        self._redispatch_task = asyncio.create_task(
            self._redispatch_loop(), name="pyrmq:store:reput"
        )
        for svc in self._services:
            svc.start()
        self._clean.start()
        self._schedule_allocate()

    def _open_core(self) -> rmqcore.MessageStoreCore:
        cfg = self.config
        return rmqcore.MessageStoreCore(
            cfg.store_path_root_dir,
            commit_log_file_size=cfg.mapped_file_size_commit_log,
            cq_units_per_file=cfg.cq_units_per_file,
            max_message_size=cfg.max_message_size,
            max_queue_nums=cfg.max_queue_nums,
            index_hash_slot_num=cfg.max_hash_slot_num,
            index_num=cfg.max_index_num,
            index_enable=cfg.message_index_enable,
            warm_mapped_files=cfg.warm_mapped_file_enable,
            index_async=cfg.message_index_async,
            store_host=self._store_host,
        )

    async def shutdown(self) -> None:
        """Stop the services, flush everything, write the checkpoint and mark
        the shutdown clean."""
        if self._core is None or self._io is None:
            return
        for svc in self._services:
            await svc.shutdown()
        await cancel_and_wait(self._redispatch_task)
        self._redispatch_task = None
        if self._clean is not None:
            await self._clean.shutdown()
        if self._group_commit is not None:
            await self._group_commit.drain()
        io, core = self._io, self._core
        self._core = None
        self._services.clear()
        await asyncio.get_running_loop().run_in_executor(None, io.shutdown)
        await asyncio.get_running_loop().run_in_executor(None, core.close)
        self._io = None

    async def __aenter__(self) -> MessageStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def core(self) -> rmqcore.MessageStoreCore:
        if self._core is None:
            raise StoreError("the store is not started")
        return self._core

    @property
    def recovery(self) -> dict[str, Any]:
        """What the last open found and repaired."""
        return self.core.recovery

    # -- put -----------------------------------------------------------------

    def add_arrival_listener(self, listener: ArrivalListener, topic: str | None = None) -> None:
        """Call listener(topic, queue_id, max_offset) after each dispatched
        put (long polling's NotifyMessageArrivingListener); with topic, only
        after puts to that topic."""
        listeners = (
            self._listeners if topic is None else self._topic_listeners.setdefault(topic, [])
        )
        if listener not in listeners:
            listeners.append(listener)

    def remove_arrival_listener(self, listener: ArrivalListener, topic: str | None = None) -> None:
        listeners = self._listeners if topic is None else self._topic_listeners.get(topic, [])
        if listener in listeners:
            listeners.remove(listener)
        if topic is not None and not listeners:
            self._topic_listeners.pop(topic, None)

    def put_message_nowait(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: bytes | str = b"",
        *,
        flag: int = 0,
        sysflag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        reconsume_times: int = 0,
    ) -> rmqcore.AppendResult:
        """Append and dispatch one message; returns before it is durable.
        Raises IllegalMessageError (nothing written) for bad input."""
        core = self._core
        if core is None:
            raise StoreError("the store is not started")
        if self._disk_full:
            self._refuse_while_disk_full()
        r = core.put(
            topic,
            queue_id,
            body,
            properties,
            flag=flag,
            sysflag=sysflag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
        )
        if r.needs_allocate:
            self._schedule_allocate()
        if self._listeners or self._topic_listeners:
            self._notify(topic, queue_id, r.queue_offset + r.count)
        return r

    def writable_core(self) -> rmqcore.MessageStoreCore | None:
        """The core while puts may go to it directly (started, disk not
        full): the broker's C send path (rmqcore.SendPath) puts there and
        calls appended() after each chunk."""
        if self._core is None or self._disk_full:
            return None
        return self._core

    @property
    def has_arrival_listeners(self) -> bool:
        return bool(self._listeners or self._topic_listeners)

    def appended(self, needs_allocate: bool, queues: list[tuple[str, int, int]]) -> None:
        """After puts made on writable_core() itself: what put_message_nowait
        does after its put (the allocation's wake-up; the listeners told
        each (topic, queue id, max offset)). The puts woke the index thread
        themselves."""
        if needs_allocate:
            self._schedule_allocate()
        for topic, queue_id, max_offset in queues:
            self._notify(topic, queue_id, max_offset)

    def put_copy(
        self,
        m: dict[str, Any],
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        reconsume_times: int,
        sysflag: int | None = None,
    ) -> rmqcore.AppendResult:
        """Store again a message read back from the CommitLog (a decoded
        record, look_message_by_offset) under a new topic/queue and
        properties: body, flag, sysflag (unless given), born time and born
        host kept (delay delivery, send-back, DLQ, a transaction's
        check-back copy, commit and give-up)."""
        return self.put_message_nowait(
            topic,
            queue_id,
            m["body"],
            rmqcore.encode_properties(properties),
            flag=m["flag"],
            sysflag=m["sys_flag"] if sysflag is None else sysflag,
            born_timestamp=m["born_timestamp"],
            born_host=m["born_host"],
            reconsume_times=reconsume_times,
        )

    def put_messages_nowait(
        self,
        topic: str,
        queue_id: int,
        batch: bytes,
        *,
        sysflag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
    ) -> rmqcore.AppendResult:
        """Append every message of a batch body (rmqcore.encode_batch) with
        consecutive queue offsets, in one segment."""
        core = self._core
        if core is None:
            raise StoreError("the store is not started")
        if self._disk_full:
            self._refuse_while_disk_full()
        r = core.put_batch(
            topic,
            queue_id,
            batch,
            sysflag=sysflag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
        if r.needs_allocate:
            self._schedule_allocate()
        if self._listeners or self._topic_listeners:
            self._notify(topic, queue_id, r.queue_offset + r.count)
        return r

    def append_replica(self, offset: int, data: bytes | bytearray) -> int:
        """A slave's append: data is the master's CommitLog from offset on
        (offset is where this CommitLog ends). Writes the whole records in
        it, unchanged, after their checks, and dispatches them; returns the
        bytes written (the rest is an incomplete record: send it again with
        what follows). Raises CorruptStoreError when a record fails its
        checks (what came before it is written) and ValueError when offset
        is not where this CommitLog ends."""
        core = self.core
        accepted, needs_allocate = core.append_replica(offset, data)
        if needs_allocate:
            self._schedule_allocate()
        if accepted and self._group_commit is not None:
            # SYNC_FLUSH: the copy is flushed as soon as it lands, as the
            # master's puts are (a group commit of its own)
            end = offset + accepted
            self._group_commit.wait_flushed(end).add_done_callback(_flush_logged)
        return int(accepted)

    def truncate(self, offset: int) -> None:
        """Cut the CommitLog at offset, a record boundary, with the queue
        units of what follows (a slave dropping a tail its new master never
        had). Nothing may append meanwhile."""
        self.core.truncate(offset)
        if self._group_commit is not None:
            self._group_commit.lower_flushed(offset)
        log.warning("CommitLog truncated at %d: what followed is gone", offset)

    def _set_disk_full(self, full: bool) -> None:
        self._disk_full = full

    def _refuse_while_disk_full(self) -> None:
        """Raise DiskFullError (nothing written) while the disk is marked
        full; measure it again first when the last look is old enough."""
        clean = self._clean
        if clean is None:
            return
        now = time.monotonic()
        if now - self._disk_checked_at >= DISK_RECHECK_INTERVAL:
            self._disk_checked_at = now
            clean.check_disk()  # clears _disk_full through _set_disk_full
            if not self._disk_full:
                return
        cfg = self.config
        raise DiskFullError(
            f"the store's disk is {clean.disk_ratio:.1%} used, past "
            f"diskSpaceWarningLevelRatio={cfg.disk_space_warning_level_ratio}%: puts are "
            f"refused until it is at most diskSpaceCleanForciblyRatio="
            f"{cfg.disk_space_clean_forcibly_ratio}%"
        )

    @property
    def disk_full(self) -> bool:
        """True while puts are refused because the disk is (nearly) full."""
        return self._disk_full

    async def put_message(
        self, topic: str, queue_id: int, body: bytes, properties: bytes | str = b"", **kw: Any
    ) -> PutMessageResult:
        """Append one message; in SYNC_FLUSH wait until it is durable (or
        syncFlushTimeout passes: status FLUSH_DISK_TIMEOUT)."""
        r = self.put_message_nowait(topic, queue_id, body, properties, **kw)
        return await self.wait_appended(r)

    async def put_messages(
        self, topic: str, queue_id: int, batch: bytes, **kw: Any
    ) -> PutMessageResult:
        r = self.put_messages_nowait(topic, queue_id, batch, **kw)
        return await self.wait_appended(r)

    async def wait_appended(self, r: rmqcore.AppendResult) -> PutMessageResult:
        """The PutMessageResult of an append made by a *_nowait put: in
        SYNC_FLUSH, once it is durable (or FLUSH_DISK_TIMEOUT)."""
        if self._group_commit is None:
            return PutMessageResult(PutMessageStatus.PUT_OK, r)
        if await self._group_commit.wait_flushed(r.phys_offset + r.wrote_bytes):
            return PutMessageResult(PutMessageStatus.PUT_OK, r)
        return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, r)

    def durable_future(self, r: rmqcore.AppendResult) -> asyncio.Future[bool] | None:
        """In SYNC_FLUSH, a future that turns True once the append r is
        durable (False: syncFlushTimeout passed first; an exception if the
        flush failed). None in ASYNC_FLUSH. For callers that answer from a
        callback instead of a task per put (the broker's send path)."""
        return self.durable_future_at(r.phys_offset + r.wrote_bytes, 1)

    def durable_future_at(self, end: int, sends: int) -> asyncio.Future[bool] | None:
        """durable_future for the CommitLog bytes below end, which sends
        puts made on writable_core() wait for (flush_backlog counts them)."""
        if self._group_commit is None:
            return None
        return self._group_commit.wait_flushed(end, sends)

    @property
    def flush_backlog(self) -> tuple[int, float, float]:
        """SYNC_FLUSH: (puts waiting for their flush, seconds the oldest has
        waited, seconds the disk should take to flush what they wait for,
        from the recent slow flushes); zeros in ASYNC_FLUSH, where nothing
        waits."""
        gc = self._group_commit
        return (0, 0.0, 0.0) if gc is None else gc.backlog()

    async def wait_durable(self, offset: int) -> None:
        """Wait until CommitLog bytes below offset are durable (any mode)."""
        if self._group_commit is not None:
            await self._group_commit.wait_flushed(offset)
            return
        core = self.core
        if core.flushed_offset >= offset:
            return
        assert self._io is not None
        await self._io.run("flush-commitlog", core.flush_commit_log, 0)

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        only = self._topic_listeners.get(topic)
        for listener in self._listeners if only is None else (*self._listeners, *only):
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("arrival listener failed")

    async def _redispatch_loop(self) -> None:
        """ReputMessageService's safety net: when building ConsumeQueue or
        index entries failed after a put (the record itself is stored), retry
        once a second until it succeeds and tell long-polling listeners. The
        index thread retries by itself; its failures are logged here."""
        while True:
            await asyncio.sleep(1.0)
            core = self._core
            if core is None:
                continue
            self._log_index_error(core.index_error)
            if core.dispatched_offset >= core.commit_log_max_offset:
                continue
            try:
                n = core.dispatch()
                log.info("re-dispatched %d record(s) after an earlier failure", n)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("dispatch still failing: %s", e)

    def _log_index_error(self, error: str | None) -> None:
        if error == self._index_error:
            return
        if error is None:
            log.info("building the index works again")
        else:
            log.error("building the index failed (tried again each second): %s", error)
        self._index_error = error

    def _schedule_allocate(self) -> None:
        """Create the next CommitLog segment and fault in pages ahead of the
        write position, on the allocate thread (AllocateMappedFileService)."""
        if self._allocating or self._io is None or self._core is None:
            return
        self._allocating = True
        if self._clean is not None:
            # the log grew by a segment or a warm window: measure the disk
            # now, not only at the next retention pass (a fast producer can
            # fill what is left in between)
            self._clean.check_disk()

        def done(f: asyncio.Future[None]) -> None:
            self._allocating = False
            if f.cancelled():
                return
            if f.exception() is not None:
                log.error("creating the next CommitLog segment failed: %s", f.exception())
                return
            # The log may have rolled again while the file was being made.
            if self._core is not None and not self._core.has_prepared_segment:
                self._schedule_allocate()

        self._io.run("allocate", self._core.prepare_next_segment).add_done_callback(done)

    # -- get and lookups ---------------------------------------------------------

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        tags_codes: Iterable[int] | None = None,
        max_phys: int = -1,
    ) -> rmqcore.GetResult:
        """RocketMQ getMessage: byte ranges of up to max_msgs records from
        offset, within maxTransferBytes/CountOnMessageInMemory; max_phys >=
        0: only records that end at or below it (a controller-mode master's
        confirmOffset), OFFSET_OVERFLOW_ONE when the first does not."""
        return self.core.get_message(
            *self._get_args(topic, queue_id, offset, max_msgs, tags_codes, max_phys)
        )

    def _get_args(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tags_codes: Iterable[int] | None,
        max_phys: int,
    ) -> tuple[str, int, int, int, int, list[int] | None, int]:
        """The core's get arguments: max_msgs and the bytes bounded by
        maxTransferCountOnMessageInMemory / maxTransferBytesOnMessageInMemory."""
        cfg = self.config
        n = min(max_msgs, cfg.max_transfer_count_on_message_in_memory)
        tags = list(tags_codes) if tags_codes else None
        return (topic, queue_id, offset, max(n, 1), cfg.max_transfer_bytes_on_message_in_memory,
                tags, max_phys)  # fmt: skip

    def pull_answer(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tags_codes: Iterable[int] | None,
        max_phys: int,
        opaque: int,
        version: int,
        body_max: int,
        slow_below: int = -1,
    ) -> tuple[bytes | None, rmqcore.GetResult]:
        """get_message, and when it finds at most body_max bytes of records,
        the PULL_MESSAGE SUCCESS answer frame for a JSON request of this
        opaque and version, built in one C call (rmqcore/_pullpath.pyx):
        (frame or None, the get result)."""
        args = self._get_args(topic, queue_id, offset, max_msgs, tags_codes, max_phys)
        return rmqcore.pull_answer(self.core, *args, opaque, version, body_max, slow_below)

    def read(self, ranges: Sequence[tuple[int, int]]) -> bytes:
        """The records of a GetResult as one buffer (the copying path)."""
        return self.core.read_ranges(ranges)

    def pin(self, phys_offset: int) -> rmqcore.SegmentPin:
        """Pin the segment holding phys_offset (for sendfile)."""
        return self.core.pin(phys_offset)

    def look_message_by_offset(self, phys_offset: int) -> dict[str, Any]:
        return self.core.look_message_by_offset(phys_offset)

    def properties_at(self, phys_offset: int) -> dict[str, str]:
        """The properties of the record at phys_offset (a property filter's
        input)."""
        return self.core.properties_at(phys_offset)

    def look_message_by_offset_msg_id(self, msg_id: str) -> dict[str, Any]:
        """The message of an offsetMsgId stored by this store."""
        host, offset = split_offset_msg_id(msg_id)
        if host != self._store_host:
            raise ValueError(f"offsetMsgId {msg_id} was not stored by this broker")
        return self.core.look_message_by_offset(offset)

    async def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**62
    ) -> list[dict[str, Any]]:
        """Messages of topic whose KEYS or UNIQ_KEY is key, newest first. Sees
        every put made before the call: it first lets the index thread catch
        up (off the event loop)."""
        core = self.core
        await self.catch_up_index()
        return [
            core.look_message_by_offset(o)
            for o in core.query_message_offsets(topic, key, max_num, begin_ts, end_ts)
        ]

    async def catch_up_index(self) -> None:
        """Index what the CommitLog holds and the IndexFiles do not yet, on
        the index thread (off the event loop)."""
        core = self.core
        if core.index_lag > 0 and self._io is not None:
            for _ in range(1_000_000):
                if await self._io.run("index", core.build_index, 1 << 20) == 0:
                    break

    def find_key(self, topic: str, key: str, since_ms: int) -> list[int]:
        """CommitLog offsets (at most 4, newest first) of topic's records
        stored since since_ms whose UNIQ_KEY or a KEYS item is key, each
        checked against its record, among what the IndexFiles hold now:
        records past `index_dispatched` are not indexed yet."""
        return self.core.find_key_offsets(topic, key, since_ms)

    @property
    def index_dispatched(self) -> int:
        """The CommitLog offset up to which every record is indexed."""
        return self.core.index_dispatched

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.core.min_offset_in_queue(topic, queue_id)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.core.max_offset_in_queue(topic, queue_id)

    def offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.core.offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    @property
    def commit_log_min_offset(self) -> int:
        return self.core.commit_log_min_offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.core.commit_log_max_offset

    @property
    def flushed_offset(self) -> int:
        return self.core.flushed_offset

    # -- maintenance ------------------------------------------------------------

    async def clean_expired_files(self, *, now: float | None = None) -> CleanResult:
        """Run one retention pass now (the store also runs it on a timer)."""
        if self._clean is None:
            raise StoreError("the store is not started")
        return await self._clean.run_once(now=now)

    async def flush(self) -> None:
        """Flush the CommitLog, ConsumeQueues, index and checkpoint now."""
        core = self.core
        assert self._io is not None
        await self._io.run("flush-commitlog", core.flush_commit_log, 0)
        await self._io.run("flush-logics", core.flush_logics, 0)

    def delete_topic(self, topic: str) -> int:
        """Drop every ConsumeQueue of topic (its CommitLog records stay until
        retention removes them)."""
        return self.core.delete_topic(topic)
