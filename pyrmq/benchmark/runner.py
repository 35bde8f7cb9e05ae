"""Running a `pyrmq bench` workload: in this process (one event loop, a
ticker printing each second), or in --processes N forked processes whose
seconds and totals the parent merges."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import queue
import signal
import time
from typing import Any

from pyrmq.admin.cli import error_line, quiet_logging
from pyrmq.benchmark.report import Live, Outcome, progress_of, timeline_row
from pyrmq.benchmark.stats import Meter, Tally
from pyrmq.benchmark.workloads import WORKERS, Worker

#: how long the processes may take to connect before the run starts
_READY_TIMEOUT = 60.0
#: how long the processes may take to finish once told to stop
_STOP_TIMEOUT = 60.0


# -- running: one process -------------------------------------------------------------------


class _LocalRun:
    """A workload's Run in this process: started() starts the ticker (the
    live line each second, the bar five times a second) and the -d timer;
    Ctrl-C sets `stop` (a second one interrupts)."""

    def __init__(self, args: argparse.Namespace, out: Outcome, live: Live) -> None:
        self.args = args
        self.out = out
        self.live = live
        self.meters = out.meters
        self.stop = asyncio.Event()
        self.share: int | None = args.count
        self._jobs: list[asyncio.Task[None]] = []
        self._timer: asyncio.TimerHandle | None = None

    async def started(self) -> None:
        self.out.start = self.live.t0 = time.perf_counter()
        self._jobs.append(asyncio.create_task(self._ticker(), name="pyrmq:bench:ticker"))
        if self.args.duration:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.args.duration, self.stop.set)

    def finished(self) -> None:
        if not self.out.end:
            self.out.end = time.perf_counter()
        for j in self._jobs:
            j.cancel()
        if self._timer is not None:
            self._timer.cancel()

    async def close(self) -> None:
        self.finished()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        self.live.done = progress_of(self.args.bench_cmd, self.meters)
        self.live.close()

    async def _ticker(self) -> None:
        out, live, cmd = self.out, self.live, self.args.bench_cmd
        k, last = 0, out.start
        while True:
            k += 1
            for fifth in range(1, 6):
                at = out.start + k - 1 + fifth / 5
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                live.done = progress_of(cmd, self.meters)
                if fifth < 5:
                    live.bar()
            now = time.perf_counter()
            iv = {name: m.take_interval() for name, m in self.meters.items()}
            live.line(k, now - last, iv)
            out.timeline.append(timeline_row(k, now - last, iv))
            last = now


async def run_single(args: argparse.Namespace, worker: Worker) -> Outcome:
    """Run the workload in this process's event loop."""
    loop = asyncio.get_running_loop()
    out = Outcome()
    run = _LocalRun(args, out, Live(args))

    def interrupted() -> None:
        out.interrupted = True
        run.stop.set()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C stops at once

    loop.add_signal_handler(signal.SIGINT, interrupted)
    try:
        out.extra = await worker(args, run)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await run.close()
    return out


# -- running: several processes -------------------------------------------------------------


def _child(
    args: argparse.Namespace, idx: int, share: int | None, q: Any, go: Any, stop_all: Any
) -> None:
    """A worker process: reports ("ready", i), ("tick", i, k, intervals)
    each second once `go` is set, and ("done", i, result) or ("error", i,
    text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent tells us to stop
    try:
        with quiet_logging():
            res = asyncio.run(_child_main(args, _ChildRun(args, idx, share, q, go, stop_all)))
        q.put(("done", idx, res))
    except BaseException as e:
        q.put(("error", idx, error_line(e)))


class _ChildRun:
    """A workload's Run in a worker process: started() waits for the
    parent's `go`; each second's counts go to the parent."""

    def __init__(
        self, args: argparse.Namespace, idx: int, share: int | None, q: Any, go: Any,
        stop_all: Any,
    ) -> None:  # fmt: skip
        self.args = args
        self.idx = idx
        self.share = share
        self.q = q
        self.go = go
        self.stop_all = stop_all
        self.meters: dict[str, Meter] = {}
        self.stop = asyncio.Event()
        self.end = 0.0
        self.jobs: list[asyncio.Task[None]] = []
        self._timer: asyncio.TimerHandle | None = None

    async def started(self) -> None:
        self.q.put(("ready", self.idx))
        for _ in range(int(_READY_TIMEOUT / 0.005)):
            if self.go.is_set():
                break
            await asyncio.sleep(0.005)
        else:
            raise TimeoutError("the other processes did not start")
        t0 = time.perf_counter()
        self.jobs.append(asyncio.create_task(self._ticker(t0), name="pyrmq:bench:tick"))
        if self.args.duration:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.args.duration, self.stop.set)

    def finished(self) -> None:
        if not self.end:
            self.end = time.perf_counter()
        for j in self.jobs:
            j.cancel()
        if self._timer is not None:
            self._timer.cancel()

    async def _ticker(self, t0: float) -> None:
        k = 0
        while True:
            k += 1
            await asyncio.sleep(max(0.0, t0 + k - time.perf_counter()))
            iv = {n: m.take_interval().state() for n, m in self.meters.items()}
            self.q.put(("tick", self.idx, k, iv))

    async def watch(self) -> None:
        """Stop when the parent says so; meanwhile tell it how many
        messages went, 20 times a second, so it stops a consume --count
        run near the count."""
        sent = -1
        parent = os.getppid()
        while not self.stop_all.is_set() and os.getppid() == parent:  # orphaned: stop
            await asyncio.sleep(0.05)
            now = progress_of(self.args.bench_cmd, self.meters)
            if now != sent:
                self.q.put(("count", self.idx, now))
                sent = now
        self.stop.set()


async def _child_main(args: argparse.Namespace, run: _ChildRun) -> dict[str, Any]:
    run.jobs.append(asyncio.create_task(run.watch(), name="pyrmq:bench:watch"))
    try:
        extra = await WORKERS[args.bench_cmd](args, run)
    finally:
        run.finished()
        await asyncio.gather(*run.jobs, return_exceptions=True)
    return {"meters": {n: m.state() for n, m in run.meters.items()}, "end": run.end,
            "extra": extra}  # fmt: skip


def run_processes(args: argparse.Namespace) -> Outcome:
    """Run the workload in --processes forked processes and merge their counts."""
    n = args.processes
    shares: list[int | None] = [None] * n
    if args.bench_cmd == "produce" and args.count is not None:
        shares = [args.count // n + (1 if i < args.count % n else 0) for i in range(n)]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    go, stop_all = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(
            target=_child,
            args=(args, i, shares[i], q, go, stop_all),
            name=f"pyrmq-bench-{i}",
            daemon=True,
        )
        for i in range(n)
    ]
    out = Outcome()
    live = Live(args)
    finals: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    ticks: dict[int, tuple[dict[str, Tally], set[int]]] = {}
    counts: dict[int, int] = {}  # messages each worker sent or consumed so far
    # Ctrl-C: a flag the loop reads (a handler of our own, also when the
    # shell started us with SIGINT ignored, as it does background jobs)
    ctrl_c: list[bool] = []
    old = signal.signal(signal.SIGINT, lambda *_: ctrl_c.append(True))
    for p in procs:
        p.start()
    try:
        _collect(args, procs, q, go, stop_all, out, live, finals, errors, ticks, counts, ctrl_c)
    finally:
        signal.signal(signal.SIGINT, old)
        stop_all.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join(5)
        live.close()
    if errors:
        raise RuntimeError(f"process {min(errors)}: {errors[min(errors)]}")
    for res in finals.values():
        for name, st in res["meters"].items():
            out.meters.setdefault(name, Meter()).merge(Meter.from_state(st))
        out.end = max(out.end, res["end"])
        out.extra = res["extra"]
    return out


def _collect(
    args: argparse.Namespace, procs: list[Any], q: Any, go: Any, stop_all: Any, out: Outcome,
    live: Live, finals: dict[int, dict[str, Any]], errors: dict[int, str],
    ticks: dict[int, tuple[dict[str, Tally], set[int]]], counts: dict[int, int],
    ctrl_c: list[bool],
) -> None:  # fmt: skip
    """The parent's loop: start the workers together, print their merged
    seconds in order, stop them at --count (consume) or on Ctrl-C."""
    n = len(procs)
    ready: set[int] = set()
    deadline = time.perf_counter() + _READY_TIMEOUT
    next_k, last, stopped = 1, 0.0, 0.0
    while len(finals) + len(errors) < n:
        now = time.perf_counter()
        if not go.is_set() and (len(ready) == n or errors):
            go.set()
            out.start = live.t0 = last = now
            if errors:
                stop_all.set()
        if go.is_set():
            # a second is printed once every running worker sent it, or 0.5 s late
            while next_k in ticks and (
                len(ticks[next_k][1]) >= n - len(finals) - len(errors)
                or now > out.start + next_k + 0.5
            ):
                iv, _ = ticks.pop(next_k)
                live.done = sum(counts.values())
                live.line(next_k, now - last, iv)
                out.timeline.append(timeline_row(next_k, now - last, iv))
                next_k, last = next_k + 1, now
            if (
                args.bench_cmd == "consume"
                and args.count is not None
                and sum(counts.values()) >= args.count
            ):
                stop_all.set()
        elif now > deadline:
            raise TimeoutError(f"the worker processes were not ready in {_READY_TIMEOUT:g} s")
        for i, p in enumerate(procs):
            if not p.is_alive() and i not in finals and i not in errors and q.empty():
                errors[i] = f"exited with status {p.exitcode}"
        if ctrl_c and not out.interrupted:
            out.interrupted = True
            stop_all.set()
        if len(ctrl_c) > 1:
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting for the workers
        if stop_all.is_set():
            stopped = stopped or now
            if now - stopped > _STOP_TIMEOUT:
                raise TimeoutError(f"the worker processes did not stop in {_STOP_TIMEOUT:g} s")
        try:
            msg = q.get(timeout=0.1)
        except queue.Empty:
            continue
        kind, idx = msg[0], msg[1]
        if kind == "ready":
            ready.add(idx)
        elif kind == "tick":
            k, states = msg[2], msg[3]
            iv, seen = ticks.setdefault(k, ({}, set()))
            seen.add(idx)
            for name, st in states.items():
                iv.setdefault(name, Tally()).merge(Tally.from_state(st))
        elif kind == "count":
            counts[idx] = msg[2]
        elif kind == "done":
            finals[idx] = msg[2]
        else:
            errors[idx] = msg[2]
            stop_all.set()
