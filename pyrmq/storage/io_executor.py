"""IOExecutor: the store's only threads, one per job kind (flush, logics,
allocate, index, clean), each FIFO. The C calls they run release the GIL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

JOB_KINDS = ("flush-commitlog", "flush-logics", "allocate", "index", "clean", "open")


class IOExecutor:
    def __init__(self, name: str = "pyrmq-store") -> None:
        self._pools = {
            kind: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}:{kind}")
            for kind in JOB_KINDS
        }

    def run(self, kind: str, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run fn(*args) on the kind's thread; an awaitable future."""
        return asyncio.get_running_loop().run_in_executor(self._pools[kind], fn, *args)

    def shutdown(self) -> None:
        """Wait for every queued job, then stop the threads."""
        for pool in self._pools.values():
            pool.shutdown(wait=True)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a service's task and wait for it to end (shutdown)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
