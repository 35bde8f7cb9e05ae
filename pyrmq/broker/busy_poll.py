"""BusyPollSelector: the broker's event loop polls its sockets for a short,
adaptive window before it sleeps (eventLoopBusyPollUs; 0, the default, off).

A lone client's round trip pays for two wake-ups of an idle CPU: the
broker's when the request arrives, the client's when the answer does. On a
VM an idle vCPU has halted, and waking it costs tens of µs each way; one at
a time, that is most of a round trip (bench/README.md, "Runs of
2026-12-06, morning: busy polling (Intel VM)"). Polling with timeout 0 for
up to ~100 µs after the loop runs out of work keeps the broker's CPU awake
for the next request when requests come that close together, the way
Linux's own busy polling (net.core.busy_poll, SO_BUSY_POLL) does for a
NIC's queues, which loopback and a guest's virtual NIC often do not have.

The window adapts as a guest's halt polling does (Linux's cpuidle haltpoll
governor, Documentation/virt/guest-halt-polling.rst): an idle period that
ended within the configured maximum, after the window had run out, doubles
the window (from POLL_GROW_START_US, up to the maximum); one longer than the
maximum halves it (to 0 below POLL_GROW_START_US). A broker whose requests
come further apart than the maximum stops polling after a few idle periods,
so an idle broker, or one at a steady 1,000 msgs/s, costs nothing more. A
busy loop never runs out of work and never polls. What it costs, the CPU of
the windows polled, is counted (`spun_s`, and eventLoopBusyPoll* in the
broker's runtime info) and left out of the loop's busy share as LoopSlice
reads it.

The poll runs here in Python, holding the GIL between its epoll_wait(0)
calls as any busy loop does; the broker's other Python threads (the store's
I/O executor, the metrics exporter) wait at most a window for it. A loop in
C with the GIL released, on the selector's fileno(), would free them for
the whole window: the next step if a window is ever wanted longer.

Two pollers, one window (PollWindow). On a loop made by new_event_loop()
(asyncio's, `pyrmq broker --event-loop asyncio`) the selector polls
(BusyPollSelector). On any other loop, uvloop (the servers' default) or an
embedded broker's, whose selector pyrmq does not own, a callback that
queues itself again keeps the loop polling with timeout 0 (LoopPoller):
a loop with a callback ready does not sleep. It starts after the loop has
served a read on one of the server's connections (RemotingServer's read
hook, installed only while polling is on) and stops when the window runs
out. The Broker takes its loop's poller from poller_for() and sets
`max_us` from broker.conf at start and from updateBrokerConfig while it
runs."""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref
from collections.abc import Callable
from typing import Any

#: the window an idle period that ended soon after it grows from, µs
POLL_GROW_START_US = 10
#: eventLoopBusyPollUs's highest value, µs
POLL_MAX_US = 1000


class PollWindow:
    """The polling window, its adaptation and its counters (both pollers)."""

    def __init__(self) -> None:
        super().__init__()
        #: the configured maximum window, seconds (0: never poll)
        self.max_s = 0.0
        #: the window the next idle period polls for, seconds
        self.window_s = 0.0
        #: idle periods that polled, and those a poll caught an event in
        self.polls = 0
        self.hits = 0
        #: wall time spent polling, seconds
        self.spun_s = 0.0

    @property
    def max_us(self) -> int:
        """The configured maximum window, µs (0: off)."""
        return round(self.max_s * 1e6)

    @max_us.setter
    def max_us(self, us: int) -> None:
        self.max_s = us / 1e6
        self.window_s = min(self.window_s, self.max_s)
        self._max_changed(us)

    def _max_changed(self, us: int) -> None:
        """The setting changed to us (0: off)."""

    def adapt(self, idle_s: float, woken: bool) -> None:
        """After an idle period of `idle_s` the window did not catch: grow
        the window when a socket woke the loop within the maximum, shrink it
        when the period was longer than the maximum."""
        if idle_s > self.max_s:
            half = self.window_s / 2
            self.window_s = half if half >= POLL_GROW_START_US / 1e6 else 0.0
        elif woken:
            start = min(POLL_GROW_START_US / 1e6, self.max_s)
            self.window_s = min(max(self.window_s * 2, start), self.max_s)


class BusyPollSelector(PollWindow, selectors.DefaultSelector):
    """The platform's default selector (epoll on Linux) that, when asked to
    wait, first polls with timeout 0 for up to `window_s`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._clock = clock
        self.max_us = 0  # off: select() is the platform's (the setter)

    def _max_changed(self, us: int) -> None:
        # off, the loop calls the platform selector's select() itself: the
        # polling select() costs ~0.1 µs more a loop iteration
        if us:
            self.__dict__.pop("select", None)
        else:
            self.select = super().select  # type: ignore[method-assign]

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(timeout)
        clock, poll = self._clock, super().select
        t0 = clock()
        window = self.window_s if timeout is None else min(self.window_s, timeout)
        if window > 0:
            self.polls += 1
            end = t0 + window
            while True:
                ready = poll(0)
                now = clock()
                if ready or now >= end:
                    break
            self.spun_s += now - t0
            if ready:
                self.hits += 1
                return ready
            if timeout is not None:
                timeout = max(0.0, timeout - (now - t0))
        ready = poll(timeout)
        self.adapt(clock() - t0, bool(ready))
        return ready


class LoopPoller(PollWindow):
    """Busy polling on a loop whose selector is not BusyPollSelector: after
    the loop served a read (touch(), the server's read hook), _spin queues
    itself with call_soon until the window runs out, so the loop polls its
    sockets with timeout 0 meanwhile. A read served while it spins is a hit
    and starts a new window; the window adapts as BusyPollSelector's does,
    an idle period running from the end of the loop's work to the read
    that ends it. Each function watch()ed is told True or False when
    polling turns on or off (a Broker installs or removes its server's read
    hook; brokers embedded in one process share their loop's poller)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        super().__init__()
        self._loop = loop
        self._clock = clock
        self._watchers: list[Callable[[bool], None]] = []
        self._spinning = False
        self._touched = False
        #: when the current window ends (0: the next _spin opens one)
        self._until = 0.0
        #: when the current window opened, the last _spin, and when the
        #: idle period now running began (None: none measured)
        self._opened = 0.0
        self._last = 0.0
        self._idle_since: float | None = None

    def _max_changed(self, us: int) -> None:
        if not us:
            self._idle_since = None
        for watcher in list(self._watchers):
            watcher(bool(us))

    def watch(self, watcher: Callable[[bool], None]) -> None:
        """Tell watcher(on) whenever polling turns on or off."""
        self._watchers.append(watcher)

    def unwatch(self, watcher: Callable[[bool], None]) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def touch(self) -> None:
        """A read is being served: start polling once the loop's work is done."""
        if self._spinning:
            self._touched = True
            return
        if not self.max_s:
            return
        if self._idle_since is not None:
            self.adapt(self._clock() - self._idle_since, True)
            self._idle_since = None
        self._spinning = True
        self._touched = False
        self._until = 0.0
        self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        now = self._clock()
        if self._touched:  # a read was served since the last turn
            self._touched = False
            if self._until:  # while the window was open: a hit
                self.hits += 1
                self._until = 0.0
        elif self._until:
            self.spun_s += now - self._last
            if now >= self._until:  # ran out: idle since the window opened
                self._spinning = False
                self._idle_since = self._opened
                return
        if not self._until:  # the loop's work is done: the idle period starts
            if not self.window_s or not self.max_s:
                self._spinning = False
                self._idle_since = now if self.max_s else None
                return
            self.polls += 1
            self._opened = now
            self._until = now + self.window_s
        self._last = now
        self._loop.call_soon(self._spin)


_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PollWindow] = (
    weakref.WeakKeyDictionary()
)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An asyncio event loop on a BusyPollSelector (polling off until its
    `max_us` is set)."""
    selector = BusyPollSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _POLLERS[loop] = selector
    return loop


def poller_for(loop: asyncio.AbstractEventLoop) -> PollWindow:
    """loop's poller: its BusyPollSelector, or else its LoopPoller (made
    the first time it is asked for)."""
    poller = _POLLERS.get(loop)
    if poller is None:
        poller = _POLLERS[loop] = LoopPoller(loop)
    return poller


def work_time(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """A clock of the calling thread's CPU time less the time `loop` spent
    polling: the loop's own work, for LoopSlice's busy share."""

    def worked() -> float:
        poller = _POLLERS.get(loop)
        return time.thread_time() - (poller.spun_s if poller is not None else 0.0)

    return worked


def status(selector: PollWindow | None) -> dict[str, Any]:
    """eventLoopBusyPoll* for the broker's runtime info ({} without a
    poller)."""
    if selector is None:
        return {}
    return {
        "eventLoopBusyPollUs": selector.max_us,
        "eventLoopBusyPollWindowUs": round(selector.window_s * 1e6),
        "eventLoopBusyPollIdles": selector.polls,
        "eventLoopBusyPollHits": selector.hits,
        "eventLoopBusyPollSeconds": f"{selector.spun_s:.6f}",
    }
