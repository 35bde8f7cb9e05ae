"""OffsetWaiters: futures that wait for a CommitLog offset to be reached
(flushed by the group commit, or held by a slave), each with a deadline.
Offsets are added in ascending order (appends are); reaching an offset
sets True on every waiter at or below it; one timer sweeps the expired
ones (False), so a waiter costs no timer of its own."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable


class OffsetWaiters:
    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout_s
        self._clock = clock
        # (offset, deadline, future, sends), offsets ascending
        self._w: collections.deque[tuple[int, float, asyncio.Future[bool], int]] = (
            collections.deque()
        )
        self._sweeper: asyncio.TimerHandle | None = None
        self._sends = 0

    def __len__(self) -> int:
        """The sends waiting (a waiter may stand for several: the broker's C
        send path waits once for a chunk of sends)."""
        return self._sends

    def _pop(self) -> asyncio.Future[bool]:
        entry = self._w.popleft()
        self._sends -= entry[3]
        return entry[2]

    def add(
        self, loop: asyncio.AbstractEventLoop, offset: int, sends: int = 1
    ) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = loop.create_future()
        self._w.append((offset, self._clock() + self.timeout, fut, sends))
        self._sends += sends
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.timeout, self._sweep, loop)
        return fut

    def reached(self, offset: int) -> None:
        """True for every waiter at or below offset."""
        w = self._w
        while w and w[0][0] <= offset:
            fut = self._pop()
            if not fut.done():
                fut.set_result(True)

    def fail_all(self, exc: BaseException) -> None:
        while self._w:
            fut = self._pop()
            if not fut.done():
                fut.set_exception(exc)

    def cancel_all(self) -> None:
        self.stop_sweeping()
        while self._w:
            fut = self._pop()
            if not fut.done():
                fut.cancel()

    def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def oldest_age(self) -> float:
        """Seconds the oldest waiter has waited (0.0 when none)."""
        return self._clock() - (self._w[0][1] - self.timeout) if self._w else 0.0

    def newest_offset(self) -> int:
        return self._w[-1][0] if self._w else -1

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper = None
        now = self._clock()
        for _, deadline, fut, _sends in self._w:
            if deadline > now:
                break
            if not fut.done():
                fut.set_result(False)
        while self._w and self._w[0][2].done():
            self._pop()
        if self._w:
            delay = max(0.001, self._w[0][1] - now)
            self._sweeper = loop.call_later(delay, self._sweep, loop)
