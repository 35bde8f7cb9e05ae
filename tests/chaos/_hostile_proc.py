"""What /proc says about a server process (memory, descriptors) and the
well-behaved client that must keep working next to the abuse, for
tests/chaos/test_hostile_input.py."""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Callable

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from tests.integration.helpers import props, pull_cmd, send_fields


def status_kib(pid: int) -> dict[str, int]:
    """The kB fields of /proc/<pid>/status (VmHWM, VmRSS, RssAnon, ...)."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0])
    return out


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_count(pid: int) -> int:
    """Open sockets of the process (its connections and listeners)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:  # closed meanwhile
            pass
    return n


def nofile_limit(pid: int | None = None) -> int:
    """The soft RLIMIT_NOFILE of pid (this process when None)."""
    if pid is None:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return resource.prlimit(pid, resource.RLIMIT_NOFILE)[0]


async def wait_for(cond: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    """Poll cond (bounded by count and time); its last value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    for _ in range(int(timeout / step) + 2):
        if cond():
            return True
        if loop.time() >= end:
            break
        await asyncio.sleep(step)
    return cond()


class MemorySampler:
    """Samples a process's RSS every `interval` s while running; `peak_rss`
    is the largest VmRSS seen (kB), `peak_anon` the largest RssAnon."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.peak_anon = 0
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> dict[str, int]:
        s = status_kib(self.pid)
        self.peak_rss = max(self.peak_rss, s.get("VmRSS", 0))
        self.peak_anon = max(self.peak_anon, s.get("RssAnon", 0))
        return s

    async def _loop(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="test:memory-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.sample()


class GoodClient:
    """A well-behaved client: a send then a pull of what it sent, in a loop
    on its own connection; every answer must be right and prompt."""

    def __init__(self, addr: str, topic: str = "GoodT", timeout: float = 5.0) -> None:
        self.addr = addr
        self.topic = topic
        self.timeout = timeout
        self.client = RemotingClient(name="good")
        self.sent: list[bytes] = []
        self.errors: list[str] = []
        self.worst = 0.0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def round(self) -> None:
        """One send + pull of the sent message; raises AssertionError."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        body = b"good-%d" % len(self.sent)
        f = send_fields(self.topic, 0, props(TAGS="g"))
        r = await self.client.invoke(self.addr, RemotingCommand(RC.SEND_MESSAGE, f, body), 5.0)
        assert r.code == R.SUCCESS, r
        offset = int(r.ext_fields["queueOffset"])
        self.sent.append(body)
        r = await self.client.invoke(self.addr, pull_cmd(self.topic, 0, offset, max_nums=1), 5.0)
        assert r.code == R.SUCCESS, r
        got = rmqcore.decode_records(r.body, True)[0]["body"]
        assert got == body, (got, body)
        self.worst = max(self.worst, loop.time() - t0)

    async def _loop(self, pause: float) -> None:
        for i in range(1_000_000):
            if self._stop.is_set():
                return
            try:
                await self.round()
            except Exception as e:  # recorded: the test asserts there are none
                self.errors.append(f"round {i}: {e!r}")
                if len(self.errors) > 20:
                    return
            await asyncio.sleep(pause)

    def start(self, pause: float = 0.05) -> None:
        self._task = asyncio.create_task(self._loop(pause), name="test:good-client")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 15)
        await self.client.shutdown()
