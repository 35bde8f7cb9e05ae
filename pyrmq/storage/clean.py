"""CleanCommitLogService and CleanConsumeQueueService (retention): delete
CommitLog segments older than fileReservedTime at the deleteWhen hours, or at
any time once disk use passes diskMaxUsedSpaceRatio (and regardless of age
past diskSpaceCleanForciblyRatio); then ConsumeQueue and index files that
only point below the CommitLog's new minimum. Never the segment being
written."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable

import rmqcore
from pyrmq.storage.config import MessageStoreConfig
from pyrmq.storage.io_executor import IOExecutor, cancel_and_wait

log = logging.getLogger("pyrmq.storage.clean")


@dataclasses.dataclass(frozen=True, slots=True)
class CleanResult:
    commit_log_files: int
    logic_files: int
    disk_ratio: float
    reason: str


def disk_used_ratio(path: str) -> float:
    """Used fraction (0..1) of the filesystem holding path."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total == 0:
        return 0.0
    free = st.f_bavail * st.f_frsize
    return 1.0 - free / total


class CleanService:
    def __init__(
        self,
        core: rmqcore.MessageStoreCore,
        config: MessageStoreConfig,
        io: IOExecutor,
        wall_clock: Callable[[], float] = time.time,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
    ) -> None:
        self._core = core
        self._cfg = config
        self._io = io
        self._wall = wall_clock
        self._disk_ratio = disk_ratio
        self._hours = {int(h) for h in config.delete_when.split(";") if h.strip().isdigit()}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="pyrmq:store:clean")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._cfg.clean_resource_interval_ms / 1000)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention pass failed")

    async def run_once(self, *, now: float | None = None) -> CleanResult:
        """One retention pass (the timer calls this; tests may too)."""
        now = self._wall() if now is None else now
        ratio = self._disk_ratio(self._core.root)
        hour_ok = time.localtime(now).tm_hour in self._hours
        over = ratio * 100 >= self._cfg.disk_max_used_space_ratio
        forcibly = ratio * 100 >= self._cfg.disk_space_clean_forcibly_ratio
        deleted = 0
        reason = "none"
        if hour_ok or over:
            reason = "disk full" if forcibly else ("disk use" if over else "deleteWhen")
            deleted = await self._io.run(
                "clean",
                self._core.delete_expired_commit_log,
                self._cfg.file_reserved_time * 3600 * 1000,
                int(now * 1000),
                forcibly,
                self._cfg.delete_commit_log_files_max,
            )
            if deleted:
                log.info("retention (%s): deleted %d CommitLog segment(s)", reason, deleted)
        logic = await self._io.run("clean", self._core.delete_expired_logics)
        return CleanResult(deleted, logic, ratio, reason)

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
