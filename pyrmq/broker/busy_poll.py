"""BusyPollSelector: the broker's event loop polls its sockets for a short,
adaptive window before it sleeps (eventLoopBusyPollUs: by default 100 µs
where the broker can use two CPUs or more, 0 (off) where it has one).

A lone client's round trip pays for two wake-ups of an idle CPU: the
broker's when the request arrives, the client's when the answer does. On a
VM an idle vCPU has halted, and waking it costs tens of µs each way; one at
a time, that is most of a round trip (bench/README.md, "Busy polling by
default"). Polling with timeout 0 for up to ~100 µs after the loop runs out
of work keeps the broker's CPU awake for the next request when requests
come that close together, the way Linux's own busy polling
(net.core.busy_poll, SO_BUSY_POLL) does for a NIC's queues, which loopback
and a guest's virtual NIC often do not have, and the way Seastar's reactor
(ScyllaDB, Redpanda) polls 200 µs before it sleeps unless told the machine
is overprovisioned.

Only sends open a window: touch(), which the SendMessageProcessor calls
as each request of sends is served (in Python or on the C send path).
The request polling pays for is the next send of a client awaiting each
one; a consumer's next pull is held until a message comes and gains
nothing from being read sooner, and polling after every read cost
produce-to-consume at 1,000 msgs/s its p99 (bench/README.md).

Polling spends a CPU; it must be one nobody else wants. On one CPU the
poll would only keep the client, whose next request ends it, from
running: default_poll_us() is 0 where usable_cpus() is below 2 (an
affinity of one CPU, or a cgroup quota under two: a container's ``--cpus
1``); an explicit eventLoopBusyPollUs is taken as it is. And where the
CPUs are there but busy (a client beside the broker that needs more than
one of two CPUs: four C++ ``send_sync`` threads cost 1.16x the answer
server's CPU a message polling, 0.88x not, and sent no faster), the loop
polls only while the CPUs it may run on had a whole CPU to spare over the
last SPARE_INTERVAL: idle, or spent polling by this loop
(eventLoopBusyPollSparePercent, 100 by default: percent of one CPU; 0
polls whatever the load). It looks at /proc/stat at most every
SPARE_INTERVAL, on the loop (a read of procfs, ~20 µs), when a window
would open; polling stops below SPARE_OFF of the need and starts again
at the need.

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
served a send (touch()) and stops when the window runs out. The Broker
takes its loop's poller from poller_for(), sets `max_us` and
`spare_percent` from broker.conf at start and from updateBrokerConfig
while it runs, and hands its touch() to the SendMessageProcessor: with
polling off, touch() only looks at `max_s`."""

from __future__ import annotations

import asyncio
import os
import selectors
import time
import weakref
from collections.abc import Callable
from typing import Any

#: the window an idle period that ended soon after it grows from, µs
POLL_GROW_START_US = 10
#: eventLoopBusyPollUs's highest value, µs
POLL_MAX_US = 1000
#: eventLoopBusyPollUs's default where the broker can use two CPUs or more, µs
DEFAULT_POLL_US = 100
#: eventLoopBusyPollSparePercent's default: a whole CPU to spare
DEFAULT_SPARE_PERCENT = 100
#: eventLoopBusyPollSparePercent's highest value (1,024 CPUs)
SPARE_PERCENT_MAX = 102_400
#: seconds between two looks at how much CPU is spare
SPARE_INTERVAL = 0.2
#: polling that runs stops once the spare CPU falls below this share of
#: the need (it starts again at the need)
SPARE_OFF = 0.75
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: where cgroup v2 is mounted
CGROUP_ROOT = "/sys/fs/cgroup"


def usable_cpus(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> float:
    """How many CPUs this process can use: the CPUs its affinity allows,
    capped by the cgroup v2 CPU quota (cpu.max) of its cgroup or any parent
    (a container's ``--cpus``), as Java's availableProcessors() counts."""
    if hasattr(os, "sched_getaffinity"):
        cpus: float = len(os.sched_getaffinity(0))
    else:
        cpus = os.cpu_count() or 1
    try:
        with open(proc_cgroup) as f:
            path = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), "")
    except OSError:
        return cpus
    if not path.startswith("/"):
        return cpus
    where = os.path.normpath(cgroup_root + path)
    while True:
        try:
            with open(os.path.join(where, "cpu.max")) as f:
                quota, period = f.read().split()
            if quota != "max":
                cpus = min(cpus, int(quota) / int(period))
        except (OSError, ValueError, ZeroDivisionError):
            pass
        if len(where) <= len(cgroup_root):
            return cpus
        where = os.path.dirname(where)


def cpus_idle_s(proc_stat: str = "/proc/stat") -> float | None:
    """Seconds the CPUs this process may run on have been idle (idle and
    iowait, /proc/stat) since boot, summed; None where that cannot be read."""
    try:
        mine = os.sched_getaffinity(0)
        with open(proc_stat, "rb") as f:
            lines = f.read().split(b"\n")
    except (OSError, AttributeError):
        return None
    ticks = 0
    for line in lines:
        if line.startswith(b"cpu") and line[3:4].isdigit():
            fields = line.split()
            if len(fields) > 5 and int(fields[0][3:]) in mine:
                ticks += int(fields[4]) + int(fields[5])
    return ticks / _CLOCK_TICKS


def default_poll_us() -> int:
    """eventLoopBusyPollUs's default: DEFAULT_POLL_US, or 0 where this
    process can use less than two CPUs."""
    return DEFAULT_POLL_US if usable_cpus() >= 2 else 0


class PollWindow:
    """The polling window, its adaptation and its counters (both pollers)."""

    def __init__(self, idle_s: Callable[[], float | None] = cpus_idle_s) -> None:
        super().__init__()
        #: the configured maximum window, seconds (0: never poll)
        self.max_s = 0.0
        #: percent of one CPU that must be spare for polling (0: always poll)
        self.spare_percent = DEFAULT_SPARE_PERCENT
        #: CPUs idle or polled away over the last look (None: not known yet)
        self.spare_cpus: float | None = None
        #: whether the last look found enough to spare
        self.spare_ok = True
        self._idle_s = idle_s
        self._looked_at = 0.0
        self._idle_then: float | None = None
        self._spun_then = 0.0
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

    def touch(self) -> None:
        """A send is being served (SendMessageProcessor.on_send): the loop
        may poll once its work is done."""
        raise NotImplementedError

    def may_poll(self, now: float) -> bool:
        """Whether a window may open at `now` (the poller's clock): looks
        again at the spare CPU once SPARE_INTERVAL has passed."""
        if not self.spare_percent:
            return True
        if now - self._looked_at >= SPARE_INTERVAL:
            self._look(now)
        return self.spare_ok

    def _look(self, now: float) -> None:
        idle, spun = self._idle_s(), self.spun_s
        if idle is not None and self._idle_then is not None and now > self._looked_at:
            spare = (idle - self._idle_then + spun - self._spun_then) / (now - self._looked_at)
            need = self.spare_percent / 100
            self.spare_ok = spare >= (need * SPARE_OFF if self.spare_ok else need)
            self.spare_cpus = spare
        self._idle_then, self._spun_then, self._looked_at = idle, spun, now

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
    wait after a send was served (touch()), first polls with timeout 0 for
    up to `window_s`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._clock = clock
        self._touched = False
        self.max_us = 0  # off: select() is the platform's (the setter)

    def touch(self) -> None:
        """A send is being served: the next select() may poll."""
        self._touched = True

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
        touched, self._touched = self._touched, False
        if window > 0 and touched and self.may_poll(t0):
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
    the loop served a send (touch()), _spin queues itself with call_soon
    until the window runs out, so the loop polls its sockets with timeout 0
    meanwhile. A send served while it spins is a hit and starts a new
    window; the window adapts as BusyPollSelector's does, an idle period
    running from the end of the loop's work to the send that ends it.
    Brokers embedded in one process share their loop's poller."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        super().__init__()
        self._loop = loop
        self._clock = clock
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

    def touch(self) -> None:
        """A send is being served: start polling once the loop's work is
        done (off: nothing)."""
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
        if self._touched:  # a send was served since the last turn
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
            if not self.window_s or not self.max_s or not self.may_poll(now):
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
        "eventLoopBusyPollSparePercent": selector.spare_percent,
        "eventLoopBusyPollSpareCpus": (
            "" if selector.spare_cpus is None else f"{selector.spare_cpus:.2f}"
        ),
    }
