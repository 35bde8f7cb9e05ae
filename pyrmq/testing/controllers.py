"""Controller processes for tests and benchmarks: ControllerGroup(root, n)
writes controller-n<i>.conf files (Raft and remoting ports picked free,
127.0.0.1 unless `extra` binds elsewhere) and runs one `python -m pyrmq
controller` ServerProcess per controller, ended by the PID of the Popen
that started it."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from pyrmq.testing.cluster import ServerProcess, free_ports


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
