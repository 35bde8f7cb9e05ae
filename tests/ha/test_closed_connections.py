"""Replication outlives a connection its peer resets, on either event loop.

On uvloop (the servers' default) a write to a transport whose peer's reset
has been seen raises RuntimeError ("the handler is closed"); asyncio's loop
drops it. A slave whose master (or a proxy in between) accepted and reset
its connection before the hello went out had its HAClient task die of that
RuntimeError and never connect again: tests/chaos/test_ha_chaos.py stalled
30 s waiting for it. pyrmq.common.aio.write turns that into the
ConnectionResetError every reader of a stream already handles.

Servers run in this process on 127.0.0.1 with free ports, on the loop each
test names."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from pyrmq.common import aio
from tests.ha.test_refusals import slave_of

LOOPS = ["asyncio", "uvloop"]


def run_on(kind: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    if kind == "uvloop":
        loop = pytest.importorskip("uvloop").new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a peer that gave up does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.mark.parametrize("kind", LOOPS)
def test_a_write_after_the_peer_reset_is_a_connection_error(kind: str) -> None:
    async def main() -> tuple[bool, BaseException | None]:
        server = await asyncio.start_server(lambda r, w: reset(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(ConnectionError):
            while await reader.read(1024):  # until the reset is seen
                pass
            raise ConnectionResetError("closed without a reset")
        deadline = time.monotonic() + 10
        while not writer.is_closing() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with pytest.raises(ConnectionResetError):
            aio.write(writer, b"hello")
        raw: BaseException | None = None
        try:
            writer.write(b"hello")
        except BaseException as e:
            raw = e
        writer.close()
        server.close()
        await server.wait_closed()
        return writer.is_closing(), raw

    closing, raw = run_on(kind, main)
    assert closing
    if kind == "uvloop":  # what aio.write is for: if this changes, it may go
        assert isinstance(raw, RuntimeError) and "closed" in str(raw), raw
    else:
        assert raw is None


@pytest.mark.parametrize("kind", LOOPS)
def test_a_slave_keeps_connecting_to_a_master_that_resets_it(
    kind: str, tmp_path: pathlib.Path
) -> None:
    """A fake master accepts and resets every connection: the slave's
    HAClient tries again every RECONNECT_DELAY instead of dying."""

    async def main() -> tuple[int, bool]:
        accepted: list[float] = []

        def refuse(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.append(time.monotonic())
            reset(w)

        server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        slave = slave_of(tmp_path / "s", f"127.0.0.1:{port}")
        await slave.start()
        try:
            client = slave.ha_client
            assert client is not None
            deadline = time.monotonic() + 30
            while len(accepted) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                task = client._task
                if task is None or task.done():
                    break
            task = client._task
            alive = task is not None and not task.done()
            return len(accepted), alive
        finally:
            await slave.shutdown()
            server.close()
            await server.wait_closed()

    attempts, alive = run_on(kind, main)
    assert alive, f"the HA client ended after {attempts} attempt(s)"
    assert attempts >= 3, f"the master saw {attempts} connection(s) in 30 s, the HA client alive"
