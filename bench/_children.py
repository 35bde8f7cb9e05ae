"""Load processes for the benchmarks: one forked process per job, started together.

One Python process cannot drive a broker's loopback at full rate, so the
load generators run in processes of their own. ``LoadProcesses`` forks one
process per job, never a ``multiprocessing.Pool``: a busy machine lets a Pool
hand two jobs to one worker (the second starts when the first ends, and the
row measures one process's rate over two windows), and a Pool ends its
workers with SIGTERM, which a worker that inherited a Python handler for it
(pytest's, here) may never act on.

Each child runs ``asyncio.run(work(*job, ready))``: ``work`` sets itself up
(connects), calls ``ready()``, which waits at a barrier until every child and
the parent are there and returns the common start (``time.monotonic()``,
the same clock in every process), then works and returns a dict. The parent
calls ``start()`` (the same barrier) and ``results()``. A child that fails
reports ``repr`` of its error and breaks the barrier, so nobody waits for it.
Children get SIGTERM and SIGINT back at their defaults, and leaving the
``with`` block kills (by PID, SIGKILL) any child still running after a
bounded join."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any

Work = Callable[..., Coroutine[Any, Any, dict[str, Any]]]


class LoadProcesses:
    def __init__(self, work: Work, jobs: Sequence[tuple[Any, ...]],
                 ready_timeout: float = 180.0) -> None:
        self._work = work
        self._jobs = list(jobs)
        self._ready_timeout = ready_timeout
        ctx = multiprocessing.get_context("fork")
        self._barrier = ctx.Barrier(len(self._jobs) + 1)
        self._out: Any = ctx.Queue()
        self._procs = [
            ctx.Process(target=self._child, args=(i,), name=f"bench-load-{i}", daemon=True)
            for i in range(len(self._jobs))
        ]

    def __enter__(self) -> LoadProcesses:
        for p in self._procs:
            p.start()
        return self

    def _ready(self) -> float:
        self._barrier.wait(self._ready_timeout)
        return time.monotonic()

    def _child(self, index: int) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            result = asyncio.run(self._work(*self._jobs[index], self._ready))
        except BaseException as e:  # reported to the parent, which raises
            self._barrier.abort()
            self._out.put((index, {"error": repr(e)}))
            return
        self._out.put((index, result))

    def start(self) -> float:
        """Wait until every child is set up; then the parent's clock. The
        children go on at once: one that measures from the start reads its
        own clock (`ready()`'s value), as the parent may be scheduled late
        on a busy machine."""
        try:
            self._barrier.wait(self._ready_timeout)
        except threading.BrokenBarrierError:
            errors = self._drain(10.0)
            raise RuntimeError(f"load processes failed before the start: {errors}") from None
        return time.monotonic()

    def _drain(self, timeout: float) -> list[str]:
        errors = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                _, r = self._out.get(timeout=0.5)
            except queue.Empty:
                if not any(p.is_alive() for p in self._procs):
                    break
                continue
            errors.append(r.get("error", "reported a result"))
        return errors

    def results(self, timeout: float) -> list[dict[str, Any]]:
        """Every child's result, in job order; raises if one failed or did
        not report within timeout (saying which, and whether it still runs)."""
        got: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(self._procs):
            try:
                index, r = self._out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    missing = [
                        f"{i} ({'running' if self._procs[i].is_alive() else 'exited'})"
                        for i in range(len(self._procs)) if i not in got
                    ]
                    raise TimeoutError(
                        f"load processes {', '.join(missing)} gave no result in {timeout:.0f} s "
                        f"({len(got)} of {len(self._procs)} did)"
                    ) from None
                continue
            got[index] = r
        errors = [f"{i}: {r['error']}" for i, r in sorted(got.items()) if "error" in r]
        if errors:
            raise RuntimeError(f"load process failed: {'; '.join(errors)}")
        return [got[i] for i in range(len(self._procs))]

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # A child exits once its result is in the queue (or at once after an
        # error); one still running here has failed or hangs: SIGKILL it.
        deadline = time.monotonic() + (30.0 if exc is None else 2.0)
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)
        self._out.close()
