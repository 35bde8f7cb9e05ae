"""The event loop a server process runs on (`--event-loop`, pyrmq.serve's
loop_factory): uvloop by default, asyncio's own when asked for; busy
polling (eventLoopBusyPollUs) on either."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from pyrmq import Message, Producer
from pyrmq.admin import AdminClient
from pyrmq.broker.busy_poll import default_poll_us
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests.client.test_admin_cli import pyrmq

pytest.importorskip("uvloop")


async def _status_after_a_send(server: StandaloneProcess) -> dict[str, str]:
    async with (
        Producer("event-loop-test", server.namesrv) as p,
        AdminClient(server.namesrv) as admin,
    ):
        await admin.create_topic("EventLoopT", broker_addr=server.broker)
        await p.send(Message("EventLoopT", b"x" * 128))
        return await admin.broker_status(server.broker)


def _run(tmp_path: pathlib.Path, settings: dict[str, object], args: list[str]) -> dict[str, str]:
    server = StandaloneProcess(tmp_path, {**SMALL_STORE, **settings})
    server.args += args
    server.start()
    try:
        return asyncio.run(_status_after_a_send(server))
    finally:
        assert server.stop() == 0


async def _polled(server: StandaloneProcess, us: int) -> dict[str, str]:
    async with AdminClient(server.namesrv) as admin:
        await admin.update_broker_config({"eventLoopBusyPollUs": str(us)}, server.broker)
        return await admin.broker_status(server.broker)


@pytest.mark.parametrize(
    ("args", "loop"),
    [
        ([], "uvloop"),
        (["--event-loop", "uvloop"], "uvloop"),
        (["--event-loop", "asyncio"], "asyncio"),
    ],
)
def test_the_loop_and_polling_turned_on_at_runtime(
    tmp_path: pathlib.Path, args: list[str], loop: str
) -> None:
    server = StandaloneProcess(tmp_path, SMALL_STORE)
    server.args += args
    server.start()
    try:
        status = asyncio.run(_status_after_a_send(server))
        after = asyncio.run(_polled(server, 50))
    finally:
        assert server.stop() == 0
    assert status["eventLoop"] == loop, status
    # the server shares this process's CPUs: 100 on two or more, else 0
    assert status["eventLoopBusyPollUs"] == str(default_poll_us()), status
    assert after["eventLoopBusyPollUs"] == "50", after


@pytest.mark.parametrize("us", [0, 250])
@pytest.mark.parametrize("args", [[], ["--event-loop", "asyncio"]])
def test_busy_polling_in_broker_conf(tmp_path: pathlib.Path, args: list[str], us: int) -> None:
    status = _run(tmp_path, {"eventLoopBusyPollUs": us}, args)
    assert status["eventLoop"] == ("asyncio" if args else "uvloop"), status
    assert status["eventLoopBusyPollUs"] == str(us), status


def test_an_unknown_loop_is_one_line(tmp_path: pathlib.Path) -> None:
    r = pyrmq("standalone", "--store", str(tmp_path / "s"), "--event-loop", "tokio")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and "invalid choice: 'tokio'" in lines[-1], r.stderr
    assert not (tmp_path / "s").exists()
