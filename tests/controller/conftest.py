"""Controller tests: real `python -m pyrmq controller` processes on
127.0.0.1 (Raft and remoting ports picked free), driven by ControllerClient,
SIGKILLed by the PID of the Popen that started them.

ControllerGroup(root, n) writes controller-n<i>.conf files and runs one
ServerProcess per controller; BrokerPump heartbeats fake brokers (ids of a
group) to every controller until told to stop, the way a live broker would."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from pyrmq.controller import ControllerClient
from pyrmq.testing.cluster import ServerProcess, free_ports
from tests.integration.conftest import arun  # noqa: F401  (the bounded-loop runner)

CLUSTER = "DefaultCluster"
#: ms a fake broker's heartbeat keeps it alive (brokers send it in the header)
HEARTBEAT_TIMEOUT_MS = 3000
#: s between two heartbeats of a fake broker
HEARTBEAT_EVERY = 0.3


class ControllerGroup:
    """n controllers as processes; `extra` adds keys to every conf,
    `per_node` to one node's (by index)."""

    def __init__(
        self,
        root: pathlib.Path,
        n: int = 3,
        extra: dict[str, Any] | None = None,
        per_node: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.root = root
        self.n = n
        ports = free_ports(2 * n)
        self.raft_ports, self.listen_ports = ports[:n], ports[n:]
        self.peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(self.raft_ports))
        self.extra = dict(extra or {})
        self.per_node = per_node or {}
        self.procs = [
            ServerProcess(f"ctl-n{i}", ["controller", "-c", str(self.conf_path(i))], root)
            for i in range(n)
        ]
        for i in range(n):
            self.write_conf(i)

    def conf_path(self, i: int) -> pathlib.Path:
        return self.root / f"controller-n{i}.conf"

    def write_conf(self, i: int) -> None:
        conf = {
            "controllerDLegerGroup": "group1",
            "controllerDLegerPeers": self.peers,
            "controllerDLegerSelfId": f"n{i}",
            "controllerStorePath": str(self.root / f"store-n{i}"),
            "listenPort": self.listen_ports[i],
            "bindAddress": "127.0.0.1",
            "scanNotActiveBrokerInterval": 300,
            **self.extra,
            **self.per_node.get(i, {}),
        }
        self.conf_path(i).write_text("".join(f"{k}={v}\n" for k, v in conf.items()))

    @property
    def addrs(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.listen_ports]

    @property
    def controller_addr(self) -> str:
        return ";".join(self.addrs)

    async def start(self, which: list[int] | None = None) -> None:
        idx = list(range(self.n)) if which is None else which
        for i in idx:
            self.procs[i].launch()
        pending = set(idx)
        for _ in range(int(60 / 0.02)):
            pending = {i for i in pending if not self.procs[i].poll_ready()}
            if not pending:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"controllers {pending} not ready")

    def index_of(self, addr: str) -> int:
        return self.addrs.index(addr)

    def kill(self, i: int) -> None:
        self.procs[i].kill()

    def stop_all(self) -> list[int | None]:
        return [p.stop() for p in self.procs]

    def log(self, i: int) -> str:
        return self.procs[i].log_path.read_text(errors="replace")


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
