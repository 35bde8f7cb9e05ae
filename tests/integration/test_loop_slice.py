"""The broker's event loop asks Linux for short scheduler slices while it is
mostly idle (eventLoopSchedSliceUs; rmqcore.sched_slice,
pyrmq/broker/loop_slice.py).

Each rmqcore.sched_slice call runs on a thread of its own, so the test
process's own threads keep the kernel's default. Where the kernel keeps no
per-thread slice (before Linux 6.12) the checks of the slice itself are
skipped; what must hold everywhere (nothing but the slice changes, bad input
refused) is checked everywhere."""

from __future__ import annotations

import asyncio
import errno
import os
import pathlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import rmqcore
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.loop_slice import LoopSlice
from pyrmq.common.errors import ClientError
from pyrmq.testing.cluster import StandaloneProcess

#: small segments: the standalone's store does not take 1 GiB on disk
SMALL_STORE = {"mappedFileSizeCommitLog": 64 << 20}


def on_a_thread(fn: Callable[[], Any]) -> Any:
    """fn() on a new thread (its scheduling settings die with it)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # handed to the test's thread
            out.append(("raised", e))

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the thread did not end in 30 s"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


def slice_ns_of(pid: int, tid: int | None = None) -> int | None:
    """se.slice of a thread as /proc shows it (None: not shown)."""
    path = pathlib.Path(f"/proc/{pid}/task/{tid or pid}/sched")
    for line in path.read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def kernel_slices() -> tuple[int, int] | None:
    """(the default slice in µs, a slice of 400 µs as reported) where the
    kernel keeps per-thread slices; None where it does not."""

    def probe() -> tuple[int, int]:
        asked = rmqcore.sched_slice(400)
        return rmqcore.sched_slice(0), asked

    try:
        default, asked = on_a_thread(probe)
    except OSError:
        return None
    return (default, asked) if asked == 400 else None


def test_sched_slice_changes_the_slice_and_nothing_else() -> None:
    def run() -> tuple[int, int, int, int | None]:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, 3)
        got = rmqcore.sched_slice(400)
        shown = slice_ns_of(os.getpid(), tid)
        return got, os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(0), shown

    got, nice, policy, shown = on_a_thread(run)
    # the nice value and policy the thread had are kept
    assert (nice, policy) == (3, os.SCHED_OTHER)
    assert got in (0, 400), got
    if got == 400 and shown is not None:
        assert shown == 400_000


def test_sched_slice_back_to_the_default() -> None:
    slices = kernel_slices()
    if slices is None:
        pytest.skip("this kernel keeps no per-thread slice (Linux 6.12+)")
    default, _ = slices
    assert default != 400 and default > 0
    # a new thread starts on the default the probe went back to
    assert on_a_thread(lambda: slice_ns_of(os.getpid(), threading.get_native_id())) in (
        None,
        default * 1000,
    )


def test_sched_slice_refuses_what_it_cannot_do() -> None:
    for bad in (-1, 50, 100_001):
        with pytest.raises(ValueError, match="expected 0"):
            rmqcore.sched_slice(bad)

    def real_time() -> int:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except PermissionError:
            pytest.skip("no CAP_SYS_NICE to make a real-time thread")
        return rmqcore.sched_slice(400)

    with pytest.raises(OSError) as e:
        on_a_thread(real_time)
    assert e.value.errno == errno.EINVAL


class FakeKernel:
    """rmqcore.sched_slice's stand-in: what was asked, what it answers."""

    def __init__(self, answers: dict[int, int | OSError] | None = None) -> None:
        self.asked: list[int] = []
        self.answers = answers or {}

    def __call__(self, slice_us: int) -> int:
        self.asked.append(slice_us)
        a = self.answers.get(slice_us, slice_us or 1400)
        if isinstance(a, OSError):
            raise a
        return a


def test_loop_slice_short_while_idle_default_while_busy() -> None:
    k = FakeKernel()
    ls = LoopSlice(400, ask=k)
    assert ls.start() and ls.short and k.asked == [400]
    for busy in (0.1, 0.45, 0.5):  # up to busy_above: kept
        assert ls.step(busy)
    assert ls.short and k.asked == [400]
    assert ls.step(0.9)  # busy: the kernel's default
    assert not ls.short and k.asked == [400, 0]
    for busy in (0.9, 0.4, 0.3):  # down to idle_below: kept
        assert ls.step(busy)
    assert not ls.short and k.asked == [400, 0]
    assert ls.step(0.05)  # idle again: short
    assert ls.short and k.asked == [400, 0, 400]


def test_loop_slice_run_looks_at_the_loops_own_cpu_time() -> None:
    """run() turns each interval's CPU time over wall time into a step: the
    clock moves 1 s a reading, the loop's CPU time reads 0, 0.9, 1.8, 1.9
    and then stays, so the looks see busy 0.9, 0.9, 0.1, 0, ... : back to
    the default at the first look, short again at the third."""
    readings = iter([0.0, 0.9, 1.8, 1.9])
    wall, used, ended = [0.0], [0.0], [False]

    def clock() -> float:
        wall[0] += 1.0
        return wall[0]

    def cpu() -> float:
        # once the block has ended: fully busy, had anything still looked
        used[0] = used[0] + 10.0 if ended[0] else next(readings, used[0])
        return used[0]

    k = FakeKernel()
    asked_at: list[float] = []

    def ask(slice_us: int) -> int:
        asked_at.append(wall[0])
        return k(slice_us)

    async def main() -> None:
        async with LoopSlice(400, interval=0, ask=ask, clock=clock, cpu=cpu) as ls:
            for _ in range(1000):  # bounded: a look per loop turn
                if len(k.asked) == 3:
                    break
                await asyncio.sleep(0)
            assert k.asked == [400, 0, 400] and ls.short
        # start, then the 1st and 3rd looks (the clock's 2nd and 4th readings)
        assert asked_at == [0.0, 2.0, 4.0]
        # the block's end stopped it: a busy loop now changes nothing
        ended[0] = True
        for _ in range(20):
            await asyncio.sleep(0)
        assert k.asked == [400, 0, 400]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_loop_slice_gives_up_where_the_kernel_says_no() -> None:
    assert not LoopSlice(0, ask=FakeKernel()).start()  # off: nothing asked
    k = FakeKernel({400: 0})  # no per-thread slice in this kernel
    assert not LoopSlice(400, ask=k).start() and k.asked == [400]
    k = FakeKernel({400: OSError(errno.EPERM, "refused")})
    assert not LoopSlice(400, ask=k).start()
    k = FakeKernel({0: OSError(errno.EPERM, "refused")})
    ls = LoopSlice(400, ask=k)
    assert ls.start()
    assert not ls.step(0.99)  # a refused switch ends the governor
    with pytest.raises(ValueError):
        LoopSlice(400, busy_above=0.2, idle_below=0.3)


def test_loop_slice_setting_is_checked() -> None:
    for ok in (0, 100, 400, 100_000):
        BrokerConfig(event_loop_sched_slice_us=ok)
    for bad in (-1, 50, 100_001):
        with pytest.raises(ClientError, match="eventLoopSchedSliceUs"):
            BrokerConfig(event_loop_sched_slice_us=bad)


def _wait_slice(server: StandaloneProcess, want_ns: int) -> int | None:
    """The loop thread's slice once it is want_ns (60 s at most); the last
    seen otherwise. The governor looks every 0.2 s."""
    assert server.proc is not None
    pid = server.proc.pid
    seen = slice_ns_of(pid)
    deadline = time.monotonic() + 60
    while seen != want_ns and time.monotonic() < deadline and server.running:
        time.sleep(0.1)
        seen = slice_ns_of(pid)
    return seen


@pytest.mark.parametrize("setting", [None, 0, 200])
def test_standalone_loop_takes_its_slice(tmp_path: pathlib.Path, setting: int | None) -> None:
    slices = kernel_slices()
    if slices is None:
        pytest.skip("this kernel keeps no per-thread slice (Linux 6.12+)")
    default_us, _ = slices
    settings: dict[str, object] = dict(SMALL_STORE)
    if setting is not None:
        settings["eventLoopSchedSliceUs"] = setting
    want_us = {None: BrokerConfig().event_loop_sched_slice_us, 0: default_us, 200: 200}[setting]
    server = StandaloneProcess(tmp_path, settings)
    server.start()
    try:
        seen = _wait_slice(server, want_us * 1000)
        assert seen == want_us * 1000, (
            f"the loop thread's slice is {seen} ns, not {want_us} µs "
            f"(running: {server.running}); log:\n{server.log.read_text()[-2000:]}"
        )
    finally:
        assert server.stop() == 0
