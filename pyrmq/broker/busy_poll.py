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

Only loops made by new_event_loop() poll. `pyrmq broker` and `pyrmq
standalone` run on one when their broker.conf sets eventLoopBusyPollUs, or
when started with `--event-loop asyncio`; otherwise on uvloop
(pyrmq.serve.loop_factory). The Broker finds its loop's selector with
selector_of() and sets `max_us` from broker.conf at start and from
updateBrokerConfig while it runs. On any other loop, uvloop or an embedded
broker's, the setting does nothing: uvloop's broker refuses the update,
an embedded one logs a warning."""

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


class BusyPollSelector(selectors.DefaultSelector):
    """The platform's default selector (epoll on Linux) that, when asked to
    wait, first polls with timeout 0 for up to `window_s`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._clock = clock
        #: the configured maximum window, seconds (0: never poll)
        self.max_s = 0.0
        #: the window the next wait polls for, seconds
        self.window_s = 0.0
        #: idle periods that polled, and those a poll caught an event in
        self.polls = 0
        self.hits = 0
        #: wall time spent polling, seconds
        self.spun_s = 0.0
        self.max_us = 0  # off: select() is the platform's (the setter)

    @property
    def max_us(self) -> int:
        """The configured maximum window, µs (0: off)."""
        return round(self.max_s * 1e6)

    @max_us.setter
    def max_us(self, us: int) -> None:
        self.max_s = us / 1e6
        self.window_s = min(self.window_s, self.max_s)
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


_SELECTORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BusyPollSelector] = (
    weakref.WeakKeyDictionary()
)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An asyncio event loop on a BusyPollSelector (polling off until its
    `max_us` is set)."""
    selector = BusyPollSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _SELECTORS[loop] = selector
    return loop


def selector_of(loop: asyncio.AbstractEventLoop) -> BusyPollSelector | None:
    return _SELECTORS.get(loop)


def work_time(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """A clock of the calling thread's CPU time less the time `loop` spent
    polling: the loop's own work, for LoopSlice's busy share."""
    selector = _SELECTORS.get(loop)
    if selector is None:
        return time.thread_time
    return lambda: time.thread_time() - selector.spun_s


def status(selector: BusyPollSelector | None) -> dict[str, Any]:
    """eventLoopBusyPoll* for the broker's runtime info ({} without a
    selector: a loop not made by new_event_loop())."""
    if selector is None:
        return {}
    return {
        "eventLoopBusyPollUs": selector.max_us,
        "eventLoopBusyPollWindowUs": round(selector.window_s * 1e6),
        "eventLoopBusyPollIdles": selector.polls,
        "eventLoopBusyPollHits": selector.hits,
        "eventLoopBusyPollSeconds": f"{selector.spun_s:.6f}",
    }
