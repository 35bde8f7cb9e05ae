"""Controller tests: real `python -m pyrmq controller` processes on
127.0.0.1 (Raft and remoting ports picked free), driven by ControllerClient,
SIGKILLed by the PID of the Popen that started them.

ControllerGroup (pyrmq.testing.controllers) runs the controllers;
BrokerPump heartbeats fake brokers (ids of a
group) to every controller until told to stop, the way a live broker would."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from pyrmq.controller import ControllerClient
from pyrmq.testing.controllers import ControllerGroup
from tests.integration.conftest import arun  # noqa: F401  (the bounded-loop runner)

CLUSTER = "DefaultCluster"
#: ms a fake broker's heartbeat keeps it alive (brokers send it in the header)
HEARTBEAT_TIMEOUT_MS = 3000
#: s between two heartbeats of a fake broker
HEARTBEAT_EVERY = 0.3


@pytest.fixture
def group_factory(tmp_path: pathlib.Path) -> Iterator[Any]:
    made: list[ControllerGroup] = []

    def make(n: int = 3, **kw: Any) -> ControllerGroup:
        root = tmp_path / f"g{len(made)}"
        root.mkdir()
        g = ControllerGroup(root, n, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        for p in g.procs:
            p.kill()


class BrokerPump:
    """Heartbeats the `alive` broker ids of one group to every controller
    every HEARTBEAT_EVERY s (epoch/max offset per id settable)."""

    def __init__(self, client: ControllerClient, broker_name: str) -> None:
        self.client = client
        self.broker_name = broker_name
        self.alive: dict[int, str] = {}
        self.offsets: dict[int, tuple[int, int]] = {}
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    def addr(self, broker_id: int) -> str:
        return f"127.0.0.1:{20000 + broker_id}"

    async def beat_once(self) -> None:
        for bid, addr in list(self.alive.items()):
            epoch, offset = self.offsets.get(bid, (0, 0))
            await self.client.heartbeat(
                CLUSTER,
                self.broker_name,
                addr,
                bid,
                epoch=epoch,
                max_offset=offset,
                heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
            )
            self.sent += 1

    async def _run(self) -> None:
        while True:
            await self.beat_once()
            await asyncio.sleep(HEARTBEAT_EVERY)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="test:broker-pump")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
