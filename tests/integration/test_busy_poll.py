"""The broker's event loop polls its sockets for an adaptive window before
it sleeps (eventLoopBusyPollUs; pyrmq/broker/busy_poll.py): by default
where it can use two CPUs or more."""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from pyrmq import Message, Producer
from pyrmq.admin import AdminClient
from pyrmq.broker import busy_poll
from pyrmq.broker.busy_poll import POLL_GROW_START_US, BusyPollSelector, LoopPoller
from pyrmq.broker.config import BrokerConfig
from pyrmq.common.errors import ClientError, InvalidParameterError
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests.client.test_admin_cli import pyrmq
from tests.metrics._scrape import scrape, total


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_off_it_waits_as_the_default_selector(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sel = BusyPollSelector()
    sel.register(a, 1)  # EVENT_READ
    assert sel.select(0.02) == []
    b.send(b"x")
    assert [k.fileobj for k, _ in sel.select(5)] == [a]
    assert (sel.polls, sel.hits, sel.spun_s, sel.window_s) == (0, 0, 0.0, 0.0)
    sel.close()


def test_the_window_grows_on_short_idles_and_shrinks_on_long_ones() -> None:
    sel = BusyPollSelector()
    sel.max_us = 100
    start = POLL_GROW_START_US / 1e6
    seen = []
    for _ in range(6):  # woken by a socket within the maximum
        sel.adapt(50e-6, True)
        seen.append(round(sel.window_s * 1e6))
    assert seen == [10, 20, 40, 80, 100, 100]
    sel.adapt(50e-6, False)  # a timer within the maximum: no change
    assert sel.window_s == pytest.approx(100e-6)
    shrunk = []
    for _ in range(5):  # idle longer than the maximum
        sel.adapt(1e-3, True)
        shrunk.append(sel.window_s * 1e6)
    assert shrunk == pytest.approx([50, 25, 12.5, 0, 0])
    sel.adapt(20e-6, True)
    assert sel.window_s == start
    sel.max_us = 0
    assert sel.window_s == 0
    sel.close()


def test_a_poll_catches_a_write(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sel = BusyPollSelector()
    sel.register(a, 1)
    sel.max_us = busy_poll.POLL_MAX_US
    sel.spare_percent = 0  # poll whatever else this machine is running
    sel.max_s = sel.window_s = 5.0  # long enough for a thread to be scheduled
    assert sel.select(0) == [] and sel.polls == 0
    sel.select(0.01)  # nothing served since the last select: no poll
    assert sel.polls == 0
    writer = threading.Thread(target=b.send, args=(b"x",))
    sel.touch()  # a send was served: the next select polls
    t0 = time.monotonic()
    writer.start()
    ready = sel.select(30)
    writer.join(30)
    took = time.monotonic() - t0
    assert [k.fileobj for k, _ in ready] == [a], f"nothing ready after {took:.3f} s"
    assert (sel.polls, sel.hits) == (1, 1), f"the write came {took:.3f} s after the poll began"
    assert 0 < sel.spun_s <= took
    # nothing to read: the poll runs out at the timeout, not later
    a.recv(1)
    sel.window_s = 0.05
    sel.touch()
    assert sel.select(0.02) == []
    assert (sel.polls, sel.hits) == (2, 1)
    sel.close()


def test_asyncio_on_it_keeps_time_and_order() -> None:
    """A loop on the selector, polling with the longest window: timers fire
    no earlier than asked, and a socket round trip on the same loop works."""
    loop = busy_poll.new_event_loop()
    selector = busy_poll.poller_for(loop)
    assert isinstance(selector, BusyPollSelector)
    selector.max_us = busy_poll.POLL_MAX_US
    selector.spare_percent = 0

    async def main() -> list[bytes]:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while line := await r.readline():
                selector.touch()  # as the broker's sends do
                w.write(line)
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        got = []
        for i in range(200):
            w.write(b"%d\n" % i)
            got.append(await asyncio.wait_for(r.readline(), 30))
        t0 = loop.time()
        await asyncio.sleep(0.02)
        assert loop.time() - t0 >= 0.02
        w.close()
        server.close()
        await server.wait_closed()
        return got

    try:
        assert loop.run_until_complete(main()) == [b"%d\n" % i for i in range(200)]
        status = busy_poll.status(selector)
        assert status["eventLoopBusyPollUs"] == busy_poll.POLL_MAX_US
        assert int(status["eventLoopBusyPollIdles"]) > 0
    finally:
        loop.close()


def test_each_loop_gets_its_poller() -> None:
    """new_event_loop()'s loops poll in their selector, any other loop with
    a LoopPoller; a loop's polled time is taken off its work time."""
    other = asyncio.new_event_loop()
    try:
        assert busy_poll.status(None) == {}
        t0 = time.thread_time()
        assert t0 <= busy_poll.work_time(other)() <= time.thread_time()  # nothing polled
        poller = busy_poll.poller_for(other)
        assert isinstance(poller, LoopPoller) and busy_poll.poller_for(other) is poller
        assert poller.max_s == 0  # off until configured
    finally:
        other.close()
    loop = busy_poll.new_event_loop()
    try:
        sel = busy_poll.poller_for(loop)
        assert isinstance(sel, BusyPollSelector) and sel.max_s == 0  # off until configured
        sel.spun_s = 1000.0
        assert busy_poll.work_time(loop)() < 0  # the polled time is taken off
    finally:
        loop.close()


def _loop_poller_round_trips(loop: asyncio.AbstractEventLoop) -> dict[str, float]:
    """An echo server on loop whose requests touch a LoopPoller (as the
    broker's sends do), and a client in a thread sending one line at a time:
    what the poller counted, and whether it stopped once the client did."""
    poller = busy_poll.poller_for(loop)
    assert isinstance(poller, LoopPoller)
    poller.max_us = busy_poll.POLL_MAX_US
    poller.spare_percent = 0

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            poller.touch()
            self.transport.write(data)  # type: ignore[attr-defined]

    def client(port: int, out: list[int]) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            for i in range(300):  # one at a time, answered before the next
                c.sendall(b"%d" % (i % 10))
                out.append(len(c.recv(16)))

    async def main() -> dict[str, float]:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        answers: list[int] = []
        await asyncio.to_thread(client, port, answers)
        assert answers == [1] * 300
        await asyncio.sleep(0.05)  # idle, far beyond the window: it stops
        spinning_after = poller._spinning
        t0 = time.thread_time()
        await asyncio.sleep(0.2)
        idle_cpu = time.thread_time() - t0
        server.close()
        await server.wait_closed()
        return {
            "polls": poller.polls,
            "hits": poller.hits,
            "spun_s": poller.spun_s,
            "spinning_after": spinning_after,
            "idle_cpu": idle_cpu,
        }

    try:
        r = loop.run_until_complete(main())
    finally:
        loop.close()
    poller.max_us = 0
    return r


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_loop_poller_polls_after_sends_and_stops_when_idle(kind: str) -> None:
    if kind == "uvloop":
        loop = pytest.importorskip("uvloop").new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    r = _loop_poller_round_trips(loop)
    assert r["polls"] > 0 and r["spun_s"] > 0, r
    # a thread's round trip is far shorter than the 1 ms the window grows
    # to: some request comes while the loop polls
    assert r["hits"] > 0, r
    assert r["spinning_after"] is False, r
    assert r["idle_cpu"] < 0.1, r  # asleep, not spinning, while idle


def test_polling_waits_for_a_cpu_to_spare() -> None:
    """A window opens only while the CPUs had spare_percent of one CPU idle,
    or polled away by this loop, over the last look; polling that runs
    stops below SPARE_OFF of that and starts again at it."""
    idle = [100.0]  # the CPUs' idle seconds since boot
    w = busy_poll.PollWindow(idle_s=lambda: idle[0])
    w.max_us = 100
    assert w.spare_percent == 100 and w.may_poll(10.0) and w.spare_cpus is None

    def at(t: float, idle_for: float, spun_for: float = 0.0) -> bool:
        idle[0] += idle_for
        w.spun_s += spun_for
        return w.may_poll(t)

    assert busy_poll.SPARE_INTERVAL == 0.2 and busy_poll.SPARE_OFF == 0.75
    # looks 0.25 s apart
    assert not at(10.25, 0.125)  # 0.5 CPU spare: below 0.75 of one
    assert w.spare_cpus == pytest.approx(0.5)
    assert not at(10.375, 0.1)  # too soon to look again
    assert not at(10.5, 0.125)  # 0.9 over the 0.25 s: not yet the whole CPU
    assert at(10.75, 0.275)  # 1.1
    assert at(11.0, 0.125, 0.075)  # 0.5 idle + 0.3 polled: 0.8, still above 0.75
    assert not at(11.25, 0.125, 0.05)  # 0.7
    w.spare_percent = 0
    assert at(11.3, 0.0)  # 0: whatever the load
    blind = busy_poll.PollWindow(idle_s=lambda: None)  # no /proc/stat
    assert all(blind.may_poll(t) for t in (0.0, 1.0, 2.0)) and blind.spare_cpus is None


def test_cpus_idle_s_counts_the_cpus_this_process_may_run_on(tmp_path: pathlib.Path) -> None:
    mine = sorted(os.sched_getaffinity(0))
    lines = ["cpu  1 2 3 999999 999999 0 0 0 0 0"]
    lines += [f"cpu{n} 10 0 10 {100 * (n + 1)} 50 0 0 0 0 0" for n in mine]
    lines += [f"cpu{mine[-1] + 1} 1 1 1 777777 777777 0 0 0 0 0", "intr 1 2 3"]
    stat = tmp_path / "stat"
    stat.write_text("\n".join(lines) + "\n")
    ticks = sum(100 * (n + 1) + 50 for n in mine)
    assert busy_poll.cpus_idle_s(str(stat)) == pytest.approx(ticks / os.sysconf("SC_CLK_TCK"))
    assert busy_poll.cpus_idle_s(str(tmp_path / "missing")) is None
    real = busy_poll.cpus_idle_s()
    assert real is not None and real > 0


def test_loop_poller_off_does_nothing() -> None:
    """The broker's send processor touches its poller whatever the setting:
    off, touch() queues nothing, and turned off it stops."""
    loop = asyncio.new_event_loop()
    try:
        poller = LoopPoller(loop)
        poller.touch()  # off: no callback queued, nothing counted
        assert not poller._spinning and poller.polls == 0
        poller.max_us = 100
        poller.touch()
        assert poller._spinning
        loop.run_until_complete(asyncio.sleep(0.01))  # idle past the window
        assert not poller._spinning
        poller.max_us = 0
        poller.touch()
        assert not poller._spinning
        loop.run_until_complete(asyncio.sleep(0))
        assert not poller._spinning
    finally:
        loop.close()


def _cgroup(root: pathlib.Path, path: str, limits: dict[str, str]) -> pathlib.Path:
    """A cgroup v2 tree under root with cpu.max files (path -> content);
    the /proc/self/cgroup that puts a process at path."""
    for where, cpu_max in limits.items():
        d = root / where.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(cpu_max + "\n")
    proc = root / "proc-self-cgroup"
    proc.write_text(f"1:cpu:/\n0::{path}\n")
    return proc


def test_usable_cpus_reads_the_affinity_and_cgroup_quotas(tmp_path: pathlib.Path) -> None:
    mine = len(os.sched_getaffinity(0))
    root = tmp_path / "cg"
    root.mkdir()

    def usable(path: str, limits: dict[str, str]) -> float:
        return busy_poll.usable_cpus(str(root), str(_cgroup(root, path, limits)))

    assert busy_poll.usable_cpus(str(root), str(tmp_path / "missing")) == mine
    assert usable("/", {}) == mine  # no cpu.max: no quota
    assert usable("/a/b", {"/a/b": "max 100000", "/a": "max 100000"}) == mine
    # a container's --cpus 1.5, on its own cgroup or on a parent's
    assert usable("/a/b", {"/a/b": "150000 100000"}) == min(mine, 1.5)
    assert usable("/c/d", {"/c": "50000 100000", "/c/d": "max 100000"}) == 0.5
    assert usable("/e", {"/e": "garbage"}) == mine


def test_polling_is_on_by_default_only_with_two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    for cpus, us in ((1, 0), (1.5, 0), (2, busy_poll.DEFAULT_POLL_US), (16, 100)):
        monkeypatch.setattr(busy_poll, "usable_cpus", lambda c=cpus: c)
        assert busy_poll.default_poll_us() == us
        assert BrokerConfig().event_loop_busy_poll_us == us
        assert BrokerConfig(event_loop_busy_poll_us=250).event_loop_busy_poll_us == 250


def test_a_broker_on_one_cpu_does_not_poll_by_default() -> None:
    """The default as a process pinned to one CPU (taskset -c 0) gets it."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from pyrmq.broker.config import BrokerConfig; "
        "print(BrokerConfig().event_loop_busy_poll_us)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["0"], r


@pytest.mark.parametrize("bad", [-1, busy_poll.POLL_MAX_US + 1])
def test_the_setting_is_checked(bad: int) -> None:
    BrokerConfig(event_loop_busy_poll_us=busy_poll.POLL_MAX_US)
    with pytest.raises(ClientError, match="eventLoopBusyPollUs"):
        BrokerConfig(event_loop_busy_poll_us=bad)


@pytest.mark.parametrize("bad", [-1, busy_poll.SPARE_PERCENT_MAX + 1])
def test_the_spare_setting_is_checked(bad: int) -> None:
    BrokerConfig(event_loop_busy_poll_spare_percent=busy_poll.SPARE_PERCENT_MAX)
    with pytest.raises(ClientError, match="eventLoopBusyPollSparePercent"):
        BrokerConfig(event_loop_busy_poll_spare_percent=bad)


@pytest.mark.parametrize("line", ["eventLoopBusyPollUs=5000", "eventLoopSchedSliceUs=50"])
def test_a_bad_event_loop_setting_is_one_line(tmp_path: pathlib.Path, line: str) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text(line + "\n")
    r = pyrmq("broker", "-c", str(bad))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert line in lines[0]


async def _lone_sends_until_polled(
    p: Producer, admin: AdminClient, broker: str, seconds: float
) -> dict[str, str]:
    """Awaited sends one at a time until the broker says its loop polled
    (or `seconds` pass); its runtime info then."""
    status: dict[str, str] = {}
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        for _ in range(100):
            await p.send(Message("BusyPollT", b"x" * 128))
        sent += 100
        status = await admin.broker_status(broker)
        status["sent"] = str(sent)
        if int(status.get("eventLoopBusyPollIdles", 0)) > 0:
            break
    return status


async def _off_then_on(server: StandaloneProcess) -> tuple[dict[str, str], dict[str, str]]:
    async with (
        Producer("busy-poll-test", server.namesrv) as p,
        AdminClient(server.namesrv) as admin,
    ):
        await admin.create_topic("BusyPollT", broker_addr=server.broker)
        off = await _lone_sends_until_polled(p, admin, server.broker, 3)
        with pytest.raises(InvalidParameterError, match="eventLoopBusyPollUs=5000"):
            await admin.update_broker_config({"eventLoopBusyPollUs": "5000"}, server.broker)
        with pytest.raises(InvalidParameterError, match="eventLoopBusyPollSparePercent=-1"):
            await admin.update_broker_config({"eventLoopBusyPollSparePercent": "-1"}, server.broker)
        await admin.update_broker_config({"eventLoopBusyPollUs": "1000"}, server.broker)
        return off, await _lone_sends_until_polled(p, admin, server.broker, 60)


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_standalone_polls_as_configured_and_updated(
    tmp_path: pathlib.Path, event_loop: str
) -> None:
    pytest.importorskip(event_loop)
    metrics = {
        "metricsExporterType": "PROM",
        "metricsPromExporterHost": "127.0.0.1",
        "metricsPromExporterPort": 0,
    }
    # off in broker.conf (the default polls where there are two CPUs), and
    # polling, once on, whatever else this machine runs
    settings = {
        **SMALL_STORE,
        **metrics,
        "eventLoopBusyPollUs": 0,
        "eventLoopBusyPollSparePercent": 0,
    }
    server = StandaloneProcess(tmp_path, settings)
    server.args += ["--event-loop", event_loop]
    server.start()
    try:
        off, on = asyncio.run(_off_then_on(server))
        polled_s = total(
            scrape(str(server.info["metrics"])), "pyrmq_event_loop_busy_poll_seconds_total"
        )
    finally:
        assert server.stop() == 0
    assert off["eventLoopBusyPollUs"] == "0" and off["eventLoopBusyPollIdles"] == "0", off
    assert on["eventLoopBusyPollUs"] == "1000", on
    assert on["eventLoopBusyPollSparePercent"] == "0", on
    # each send waits for its answer: the broker's loop idles between two,
    # and one idle shorter than 1 ms opens the window
    assert int(on["eventLoopBusyPollIdles"]) > 0, f"no poll in {on['sent']} sends: {on}"
    # scraped after the runtime info: no less than it said (to its 6 decimals)
    assert polled_s >= float(on["eventLoopBusyPollSeconds"]) - 1e-6
    assert polled_s > 0
