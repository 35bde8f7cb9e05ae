"""LoopSlice: the scheduler slice of the broker's event loop thread
(eventLoopSchedSliceUs), short while the loop is mostly idle and the
kernel's default once it is busy.

Linux 6.12+ lets a thread ask for a shorter time slice (rmqcore.sched_slice,
csrc/sched_slice.h). On a lightly loaded broker a short slice keeps the
clients it answers from taking its CPU in the middle of a turn, so a
consumer's pull answer follows the producer's ack at once: at 1,000 msgs/s
on a 2-vCPU VM, NATS's produce-to-consume p50 over pyrmq's went from a
median 0.84 to 1.00 and p99 from 0.82 to 0.96. On a saturated one it costs
throughput (~10% of pipelined single sends): the loop is then
switched away every slice and wakes for smaller reads. So the loop measures
its own CPU time every `interval` and keeps the short slice only while it is
busy less than `idle_below` of the time, going back to the kernel's default
above `busy_above` (bench/README.md, "Runs of 2026-12-06: the event
loop's scheduler slice")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import rmqcore

log = logging.getLogger("pyrmq.broker")

#: seconds between two looks at the loop's CPU time
INTERVAL = 0.2
#: the loop's busy share (its thread's CPU time over wall time) above which
#: it goes back to the kernel's default slice, and below which it takes the
#: short one again
BUSY_ABOVE = 0.5
IDLE_BELOW = 0.3


class LoopSlice:
    """On the event loop's thread: `async with LoopSlice(n):` runs `run()`
    for the block's length (what `pyrmq broker` and `pyrmq standalone` do);
    `step()` is one look, given the loop's busy share of the last interval."""

    def __init__(
        self,
        slice_us: int,
        *,
        interval: float = INTERVAL,
        busy_above: float = BUSY_ABOVE,
        idle_below: float = IDLE_BELOW,
        ask: Callable[[int], int] = rmqcore.sched_slice,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        if not 0 <= idle_below <= busy_above <= 1:
            raise ValueError("expected 0 <= idle_below <= busy_above <= 1")
        self.slice_us = slice_us
        self.interval = interval
        self.busy_above = busy_above
        self.idle_below = idle_below
        self._ask = ask
        self._clock = clock
        self._cpu = cpu
        #: whether the short slice is asked for now
        self.short = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopSlice:
        self._task = asyncio.create_task(self.run(), name="loop-slice")
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def start(self) -> bool:
        """Ask for the short slice: False (and nothing more to do) when
        slice_us is 0, the kernel refused or keeps no slice of its own."""
        if self.slice_us == 0:
            return False
        got = self._set(self.slice_us)
        if got == 0:
            log.info(
                "eventLoopSchedSliceUs=%d: this kernel has no per-thread slice (Linux 6.12+)",
                self.slice_us,
            )
            return False
        if got > 0:
            log.info(
                "event loop: %d µs scheduler slices while it is idle (eventLoopSchedSliceUs)", got
            )
            self.short = True
        return self.short

    def step(self, busy: float) -> bool:
        """The loop was busy `busy` of the last interval (0..1); False
        once the kernel refused a switch (the slice is then left alone)."""
        if self.short and busy > self.busy_above:
            got = self._set(0)
        elif not self.short and busy < self.idle_below:
            got = self._set(self.slice_us)
        else:
            return True
        if got <= 0:
            return False
        self.short = not self.short
        return True

    async def run(self) -> None:
        """Until cancelled: look at the loop's busy share every interval."""
        if not self.start():
            return
        clock, cpu = self._clock, self._cpu
        t0, c0 = clock(), cpu()
        while True:
            await asyncio.sleep(self.interval)
            t1, c1 = clock(), cpu()
            if t1 > t0 and not self.step((c1 - c0) / (t1 - t0)):
                return
            t0, c0 = t1, c1

    def _set(self, slice_us: int) -> int:
        """The slice the kernel reports after asking for slice_us, or -1
        (the refusal logged)."""
        try:
            return self._ask(slice_us)
        except OSError as e:
            log.warning(
                "eventLoopSchedSliceUs=%d not applied, the kernel's default kept: %s", slice_us, e
            )
            return -1
