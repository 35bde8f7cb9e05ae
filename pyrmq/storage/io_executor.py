"""IOExecutor: the store's Python threads, one per job kind (flush, logics,
allocate, index, clean, open), each FIFO and each named for the OS after
its job. The C calls they run release the GIL. (The index thread of
messageIndexAsync is C's own: csrc/index_thread.c.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from pyrmq.common.threads import single_thread_executor

T = TypeVar("T")

#: job kind -> the name its thread shows as to the OS (pyrmq/common/threads.py):
#: RocketMQ's service doing that job, where one does
JOB_KINDS = {
    "flush-commitlog": "FlushCommitLog",
    "flush-logics": "FlushConsumeQ",
    "allocate": "AllocateMapped",
    "index": "BuildIndex",
    "clean": "CleanCommitLog",
    "open": "StoreOpen",
}


class IOExecutor:
    def __init__(self, name: str = "pyrmq-store") -> None:
        self._pools = {
            kind: single_thread_executor(f"{name}:{kind}", os_name)
            for kind, os_name in JOB_KINDS.items()
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
