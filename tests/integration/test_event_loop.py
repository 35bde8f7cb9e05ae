"""The event loop a server process runs on (`--event-loop`, pyrmq.serve's
loop_factory): uvloop by default, asyncio's own when asked for or when
broker.conf sets busy polling (which needs it)."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from pyrmq import Message, Producer
from pyrmq.admin import AdminClient
from pyrmq.common.errors import NoPermissionError
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


@pytest.mark.parametrize("args", [[], ["--event-loop", "uvloop"]])
def test_uvloop_by_default_and_asked_for_refuses_busy_polling(
    tmp_path: pathlib.Path, args: list[str]
) -> None:
    async def refused(server: StandaloneProcess) -> dict[str, str]:
        async with AdminClient(server.namesrv) as admin:
            with pytest.raises(
                NoPermissionError,
                match="eventLoopBusyPollUs: this broker runs on uvloop, which cannot poll; "
                "start it with --event-loop asyncio",
            ):
                await admin.update_broker_config({"eventLoopBusyPollUs": "100"}, server.broker)
            return await admin.broker_status(server.broker)

    server = StandaloneProcess(tmp_path, SMALL_STORE)
    server.args += args
    server.start()
    try:
        status = asyncio.run(_status_after_a_send(server))
        after = asyncio.run(refused(server))
    finally:
        assert server.stop() == 0
    assert status["eventLoop"] == "uvloop", status
    assert "eventLoopBusyPollUs" not in after, after


def test_busy_polling_in_broker_conf_polls(tmp_path: pathlib.Path) -> None:
    status = _run(tmp_path, {"eventLoopBusyPollUs": 100}, [])
    assert status["eventLoop"] == "asyncio", status
    assert status["eventLoopBusyPollUs"] == "100", status


def test_asyncio_asked_for_can_poll_at_runtime(tmp_path: pathlib.Path) -> None:
    async def polled(server: StandaloneProcess) -> dict[str, str]:
        async with AdminClient(server.namesrv) as admin:
            await admin.update_broker_config({"eventLoopBusyPollUs": "50"}, server.broker)
            return await admin.broker_status(server.broker)

    server = StandaloneProcess(tmp_path, SMALL_STORE)
    server.args += ["--event-loop", "asyncio"]
    server.start()
    try:
        status = asyncio.run(_status_after_a_send(server))
        after = asyncio.run(polled(server))
    finally:
        assert server.stop() == 0
    assert status["eventLoop"] == "asyncio", status
    assert status["eventLoopBusyPollUs"] == "0", status
    assert after["eventLoopBusyPollUs"] == "50", after


def test_uvloop_with_busy_polling_is_one_line(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("eventLoopBusyPollUs=100\n")
    r = pyrmq(
        "standalone", "--store", str(tmp_path / "s"), "--event-loop", "uvloop", "-c", str(conf)
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "eventLoopBusyPollUs needs asyncio's event loop" in lines[0], lines
    assert not (tmp_path / "s").exists()  # refused before anything was opened
