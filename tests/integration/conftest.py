"""Integration tests: real NameServer + Broker (pyrmq.testing.LocalCluster)
on 127.0.0.1, driven over TCP with RemotingClient or raw sockets.

No pytest-asyncio: `arun(coro, timeout=...)` runs a coroutine on this test's
own event loop, bounded in time. At teardown the loop must have no pending
tasks left (STYLE.md section 7)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


@contextlib.contextmanager
def _runner(loop: asyncio.AbstractEventLoop) -> Iterator[Callable[..., Any]]:
    """run(coro, timeout=30.0) on loop; at the end no task may be pending."""

    def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
        async def bounded() -> T:
            async with asyncio.timeout(timeout):
                return await coro

        return loop.run_until_complete(bounded())

    try:
        yield run
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        assert not pending, f"tasks left pending: {[t.get_name() for t in pending]}"


@pytest.fixture
def arun() -> Iterator[Callable[..., Any]]:
    """arun(coro, timeout=30.0): run coro on a fresh loop, at most timeout s."""
    with _runner(asyncio.new_event_loop()) as run:
        yield run


@pytest.fixture
def arun_uvloop() -> Iterator[Callable[..., Any]]:
    """arun on a uvloop loop (skipped without uvloop), whose transports are
    not asyncio's."""
    uvloop = pytest.importorskip("uvloop")
    with _runner(uvloop.new_event_loop()) as run:
        yield run
