"""CleanCommitLogService and CleanConsumeQueueService (retention): delete
CommitLog segments older than fileReservedTime at the deleteWhen hours, or at
any time once disk use passes diskMaxUsedSpaceRatio (and regardless of age
past diskSpaceCleanForciblyRatio); then ConsumeQueue and index files that
only point below the CommitLog's new minimum. Never the segment being
written.

Each pass also measures the disk for the store's DISK_FULL flag (RocketMQ's
RunningFlags): set past diskSpaceWarningLevelRatio, cleared once use is at
most diskSpaceCleanForciblyRatio again (in between it stays as it was)."""

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
    """Used fraction (0..1) of the filesystem holding path, as df shows it:
    used / (used + available). Blocks reserved for others (ext4 keeps 5% for
    root; some hosts reserve most of a disk) count neither as used nor as
    ours: 1.0 is where our writes get ENOSPC, and a disk whose reserve is
    most of it does not look nearly full while it is nearly empty (which
    made retention delete young segments and, past the warning level, would
    refuse every put)."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    usable = used + st.f_bavail
    if usable <= 0:
        return 0.0
    return used / usable


class CleanService:
    def __init__(
        self,
        core: rmqcore.MessageStoreCore,
        config: MessageStoreConfig,
        io: IOExecutor,
        wall_clock: Callable[[], float] = time.time,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
        on_disk_full: Callable[[bool], None] | None = None,
    ) -> None:
        self._core = core
        self._cfg = config
        self._io = io
        self._wall = wall_clock
        self._disk_ratio = disk_ratio
        self._on_disk_full = on_disk_full
        self._hours = {int(h) for h in config.delete_when.split(";") if h.strip().isdigit()}
        self._task: asyncio.Task[None] | None = None
        # the CommitLog may live elsewhere (storePathCommitLog: a link)
        self._paths = (core.root, os.path.join(core.root, "commitlog"))
        #: DISK_FULL: puts are refused while True (see check_disk)
        self.disk_full = False
        #: the used ratio check_disk measured last
        self.disk_ratio = 0.0

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

    def check_disk(self) -> float:
        """Measure the disk (the fuller of the store's and the CommitLog's)
        and update disk_full, telling on_disk_full of a change; the ratio.
        One statvfs per path: cheap enough for the event loop."""
        ratio = 0.0
        for path in self._paths:
            try:
                ratio = max(ratio, self._disk_ratio(path))
            except OSError:
                continue  # no commitlog folder yet
        self.disk_ratio = ratio
        cfg = self._cfg
        pct = ratio * 100
        full = self.disk_full
        if pct >= cfg.disk_space_warning_level_ratio:
            full = True
        elif pct <= cfg.disk_space_clean_forcibly_ratio:
            full = False
        if full != self.disk_full:
            self.disk_full = full
            if full:
                log.error(
                    "disk %.1f%% used, past diskSpaceWarningLevelRatio=%d%%: refusing puts",
                    pct,
                    cfg.disk_space_warning_level_ratio,
                )
            else:
                log.info("disk %.1f%% used: taking puts again", pct)
            if self._on_disk_full is not None:
                self._on_disk_full(full)
        return ratio

    async def run_once(self, *, now: float | None = None) -> CleanResult:
        """One retention pass (the timer calls this; tests may too)."""
        now = self._wall() if now is None else now
        ratio = self.check_disk()
        hour_ok = time.localtime(now).tm_hour in self._hours
        over = ratio * 100 >= self._cfg.disk_max_used_space_ratio
        # past the warning level too (RocketMQ's cleanImmediately)
        forcibly = self._cfg.clean_file_forcibly_enable and ratio * 100 >= min(
            self._cfg.disk_space_clean_forcibly_ratio, self._cfg.disk_space_warning_level_ratio
        )
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
