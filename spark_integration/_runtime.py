"""Per-process clients of the Spark integration.

Spark runs Python in worker processes forked from a daemon and reused
across tasks, and ends them without running atexit hooks. So each process
keeps its own clients here, made on first use in that process (never
inherited across fork: the key holds the pid), all on pyrmq.sync's loop
thread; nothing is shared through the driver. Every batch of sends is
awaited before its function returns, so a worker that exits loses
nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from pyrmq import sync
from pyrmq.client.instance import ClientInstance
from pyrmq.producer import Producer
from spark_integration.options import SinkOptions

T = TypeVar("T")

_clients: dict[tuple[int, str], ClientInstance] = {}
_producers: dict[tuple[int, str, str], asyncio.Future[Producer]] = {}


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on this process's pyrmq loop thread (from a Spark
    task or planner thread, never from that loop)."""
    return sync.run(coro, timeout)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start a coroutine on this process's pyrmq loop; a future of its result."""
    return sync.submit(coro)


def client(name_server: str) -> ClientInstance:
    """This process's ClientInstance for `name_server` (routes, pulls,
    offsets; no background jobs). Call it on the pyrmq loop."""
    key = (os.getpid(), name_server)
    c = _clients.get(key)
    if c is None:
        c = _clients[key] = ClientInstance(name_server, instance_name=f"spark-{os.getpid()}")
    return c


async def producer(opts: SinkOptions) -> Producer:
    """This process's started Producer for (nameServer, producerGroup).
    Call it on the pyrmq loop; concurrent first calls share one start."""
    key = (os.getpid(), opts.name_server, opts.producer_group)
    fut = _producers.get(key)
    if fut is None or (fut.done() and fut.exception() is not None):

        async def make() -> Producer:
            prod = Producer(
                opts.producer_group,
                opts.name_server,
                instance_name=f"spark-{os.getpid()}",
                send_msg_timeout=opts.send_timeout_ms / 1000,
            )
            await prod.start()
            return prod

        fut = _producers[key] = asyncio.ensure_future(make())
    return await asyncio.shield(fut)
