"""Flush services: GroupCommitService (SYNC_FLUSH), FlushRealTimeService
(ASYNC_FLUSH) and FlushConsumeQueueService, as in RocketMQ's CommitLog.

The flush itself is one msync over the dirty range, run on the store's
flush thread with the GIL released; results come back to the event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import rmqcore
from pyrmq.storage.io_executor import IOExecutor, cancel_and_wait
from pyrmq.storage.waiters import OffsetWaiters

log = logging.getLogger("pyrmq.storage.flush")

#: seconds: a flush at least this long measures the disk's bandwidth (a
#: shorter one is mostly fixed cost; it only says the disk is at least
#: that fast)
SLOW_FLUSH_S = 0.05


class GroupCommitService:
    """SYNC_FLUSH group commit (RocketMQ GroupCommitService): a put waits
    until a flush covers its offset. One msync serves every waiter whose
    offset it covers; waiters that arrive while it runs are served by the
    next one. A waiter not served within timeout_s gets False (the caller
    reports FLUSH_DISK_TIMEOUT); one timer sweeps them all, so a put costs
    no timer of its own."""

    def __init__(
        self,
        core: rmqcore.MessageStoreCore,
        io: IOExecutor,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._io = io
        self._clock = clock
        self._waiters = OffsetWaiters(timeout_s, clock)
        self._flushing = False
        self._flushed = core.flushed_offset
        self.flush_count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        # (clock, flushed offset) when the running flush began
        self._flush_began = (0.0, 0)
        # bytes/s of the recent flushes; None until one was slow
        self._rate: float | None = None

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def lower_flushed(self, offset: int) -> None:
        """The CommitLog was cut at offset: bytes past it are not flushed."""
        self._flushed = min(self._flushed, offset)

    def backlog(self) -> tuple[int, float, float]:
        """How far the disk is behind the puts: (waiters not served yet,
        seconds the oldest has waited, seconds the disk is expected to take
        for the bytes they wait for; 0.0 until a flush was slow)."""
        w = self._waiters
        if not w:
            return 0, 0.0, 0.0
        ahead = 0.0 if self._rate is None else (w.newest_offset() - self._flushed) / self._rate
        return len(w), w.oldest_age(), ahead

    def wait_flushed(self, offset: int, sends: int = 1) -> asyncio.Future[bool]:
        """A future: True once CommitLog bytes below offset are durable, False
        when the timeout passed first; the flush's exception if it failed.
        sends: how many sends wait on it (the backlog counts sends)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if offset <= self._flushed:
            fut: asyncio.Future[bool] = loop.create_future()
            fut.set_result(True)
            return fut
        fut = self._waiters.add(loop, offset, sends)
        if not self._flushing:
            self._start()
        return fut

    def _start(self) -> None:
        self._flushing = True
        self._flush_began = (self._clock(), self._flushed)
        self._io.run("flush-commitlog", self._core.flush_commit_log, 0).add_done_callback(
            self._done
        )

    def _done(self, f: asyncio.Future[int]) -> None:
        self._flushing = False
        self.flush_count += 1
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        if exc is not None:
            log.error("CommitLog flush failed: %s", exc)
            self._waiters.fail_all(exc)
            return
        began, before = self._flush_began
        took = self._clock() - began
        done = f.result() - before
        if took >= SLOW_FLUSH_S and done > 0:
            rate = done / took
            self._rate = rate if self._rate is None else (self._rate + rate) / 2
        elif self._rate is not None and done > 0:
            # quick: the disk does at least this much now
            self._rate = max(self._rate, done / max(took, 1e-6))
        self._flushed = max(self._flushed, f.result())
        self._waiters.reached(self._flushed)
        if self._waiters:
            # Start the next flush after the writers just woken have run and
            # appended again, so that one msync covers all of them.
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._start)

    async def drain(self) -> None:
        """Wait until no flush is running (shutdown)."""
        self._waiters.stop_sweeping()
        for _ in range(10_000):
            if not self._flushing:
                return
            await asyncio.sleep(0.001)


class PeriodicFlushService:
    """Flush on a timer: every interval flush if at least least_pages are
    dirty, and everything once per thorough interval. Used for the CommitLog
    in ASYNC_FLUSH (FlushRealTimeService) and for ConsumeQueues, IndexFiles
    and the checkpoint (FlushConsumeQueueService; IndexFiles on the thorough
    pass only, see rmq_store_flush_logics)."""

    def __init__(
        self,
        name: str,
        flush: Callable[[int], object],
        io: IOExecutor,
        io_kind: str,
        interval_s: float,
        least_pages: int,
        thorough_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._flush = flush
        self._io = io
        self._io_kind = io_kind
        self._interval = interval_s
        self._least = least_pages
        self._thorough = thorough_interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.flush_count = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"pyrmq:store:{self._name}")

    async def _loop(self) -> None:
        last_thorough = self._clock()
        while True:
            await asyncio.sleep(self._interval)
            now = self._clock()
            least = self._least
            if now - last_thorough >= self._thorough:
                least = 0
                last_thorough = now
            try:
                await self._io.run(self._io_kind, self._flush, least)
                self.flush_count += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed; retrying in %.1fs", self._name, self._interval)

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
