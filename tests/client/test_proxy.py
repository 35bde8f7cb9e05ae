"""FaultProxy over real sockets, in front of a tiny asyncio echo server:
delay adds latency and keeps order, drop swallows data, reset_all sends RSTs
both ways, refuse turns connections away, shutdown closes everything.

Every test runs on its own loop under asyncio.timeout and ends with no task
left but its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from pyrmq.testing.proxy import FaultProxy

TEST_TIMEOUT = 10.0
#: How long "nothing arrives" is watched for.
QUIET = 0.3


class EchoServer:
    """Echoes every byte back; records what it saw."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.errors: list[BaseException] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_accept, "127.0.0.1", 0)

    async def shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.get_running_loop().create_task(self._echo(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                self.received += data
                writer.write(data)
                await writer.drain()
        except OSError as exc:
            self.errors.append(exc)
        finally:
            writer.transport.abort()


@contextlib.asynccontextmanager
async def proxied_echo() -> AsyncIterator[tuple[EchoServer, FaultProxy]]:
    echo = EchoServer()
    await echo.start()
    try:
        async with FaultProxy("127.0.0.1", echo.port) as proxy:
            yield echo, proxy
    finally:
        await echo.shutdown()


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def roundtrip(proxy: FaultProxy, payload: bytes = b"ping") -> None:
    reader, writer = await connect(proxy)
    try:
        writer.write(payload)
        assert await reader.readexactly(len(payload)) == payload
    finally:
        writer.close()
        await writer.wait_closed()


async def eventually(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run scenario() on a fresh loop, bounded in time, and check it leaves
    no task behind."""

    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT):
            await scenario()
        await asyncio.sleep(0)  # let closed transports finish closing
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(bounded())


async def read_outcome(reader: asyncio.StreamReader) -> bytes | type[BaseException]:
    """What one read gives: data, b"" (EOF), or the exception type raised."""
    try:
        return await reader.read(100)
    except OSError as exc:
        return type(exc)


def test_plain_forwarding_counts_bytes() -> None:
    async def scenario() -> None:
        async with proxied_echo() as (echo, proxy):
            assert proxy.addr == f"127.0.0.1:{proxy.port}"
            await roundtrip(proxy, b"hello world")
            assert proxy.bytes_up == proxy.bytes_down == len(b"hello world")
            assert echo.received == b"hello world"
            await eventually(lambda: proxy.connection_count == 0)

    run(scenario)


def test_delay_adds_latency_in_each_direction_and_keeps_order() -> None:
    delay = 0.2

    async def scenario() -> None:
        async with proxied_echo() as (_, proxy):
            proxy.delay = delay
            reader, writer = await connect(proxy)
            loop = asyncio.get_running_loop()
            started = loop.time()
            writer.write(b"x")
            assert await reader.readexactly(1) == b"x"
            # One delay on the way up, one on the way down.
            assert loop.time() - started >= 2 * delay * 0.9

            # Many separate chunks under a short delay arrive complete and in order.
            proxy.delay = 0.05
            chunks = [f"<{i:03d}>".encode() for i in range(40)]
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(0.002)
            expected = b"".join(chunks)
            assert await reader.readexactly(len(expected)) == expected
            writer.close()
            await writer.wait_closed()

    run(scenario)


def test_drop_swallows_data_until_turned_off() -> None:
    async def scenario() -> None:
        async with proxied_echo() as (echo, proxy):
            proxy.drop = True
            reader, writer = await connect(proxy)
            writer.write(b"lost")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(100), QUIET)
            assert proxy.bytes_up == 0
            assert echo.received == b""
            assert proxy.connection_count == 1  # accepted and kept open

            proxy.drop = False
            writer.write(b"found")
            assert await reader.readexactly(5) == b"found"
            assert echo.received == b"found"
            writer.close()
            await writer.wait_closed()

    run(scenario)


def test_reset_all_sends_rst_both_ways() -> None:
    async def scenario() -> None:
        async with proxied_echo() as (echo, proxy):
            reader, writer = await connect(proxy)
            writer.write(b"hi")
            assert await reader.readexactly(2) == b"hi"

            assert proxy.reset_all() == 1
            assert await read_outcome(reader) is ConnectionResetError
            await eventually(lambda: bool(echo.errors))
            assert isinstance(echo.errors[0], ConnectionResetError)
            await eventually(lambda: proxy.connection_count == 0)
            writer.transport.abort()

            await roundtrip(proxy)  # new connections still work

    run(scenario)


def test_refuse_turns_new_connections_away() -> None:
    async def scenario() -> None:
        async with proxied_echo() as (echo, proxy):
            proxy.refuse = True
            reader, writer = await connect(proxy)
            assert await read_outcome(reader) in (b"", ConnectionResetError)
            writer.transport.abort()
            assert echo.connections == 0
            assert proxy.connection_count == 0

            proxy.refuse = False
            await roundtrip(proxy)
            assert echo.connections == 1

    run(scenario)


def test_shutdown_closes_piped_connections_and_stops_listening() -> None:
    async def scenario() -> None:
        echo = EchoServer()
        await echo.start()
        proxy = FaultProxy("127.0.0.1", echo.port)
        await proxy.start()
        port = proxy.port
        proxy.delay = 5.0  # data in flight when we shut down
        reader, writer = await connect(proxy)
        writer.write(b"in flight")
        await eventually(lambda: proxy.connection_count == 1)

        await proxy.shutdown()
        assert await read_outcome(reader) in (b"", ConnectionResetError)
        writer.transport.abort()
        assert proxy.connection_count == 0
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        await echo.shutdown()

    run(scenario)


def test_unreachable_target_resets_the_client() -> None:
    async def scenario() -> None:
        echo = EchoServer()
        await echo.start()
        port = echo.port
        await echo.shutdown()  # nothing listens there any more
        async with FaultProxy("127.0.0.1", port) as proxy:
            reader, writer = await connect(proxy)
            assert await read_outcome(reader) in (b"", ConnectionResetError)
            writer.transport.abort()
            await eventually(lambda: proxy.connection_count == 0)

    run(scenario)
