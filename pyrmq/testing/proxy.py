"""FaultProxy: a real TCP proxy that puts network faults between a client and
a server in tests (latency, a black hole, connection resets, refusals).

Point a client at ``proxy.addr`` instead of the server; every accepted
connection is piped to ``target_host:target_port`` by two one-way pumps.
Knobs can be flipped at any time and act on data read from then on:

* ``delay``  seconds added to every chunk, each direction; order is kept
  (each direction is a FIFO whose writer waits for the chunk's due time).
* ``drop``   accept and keep connections, but discard every byte read.
* ``refuse`` reset new connections as soon as they are accepted.
* ``reset_all()`` aborts every current connection, both sides, with a TCP RST.

This module imports nothing from pyrmq: it is plain asyncio over sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Literal

from pyrmq.common import aio

__all__ = ["FaultProxy"]

log = logging.getLogger("pyrmq.testing")

#: Bytes read per chunk; also the unit the delay applies to.
_CHUNK_SIZE = 64 * 1024
#: Chunks buffered per direction before the proxy stops reading (backpressure
#: toward the sender when the receiver or a long delay holds data back).
_QUEUE_CHUNKS = 256
#: SO_LINGER {on, 0 s}: close() then sends RST instead of FIN.
_LINGER_RST = struct.pack("ii", 1, 0)

_Direction = Literal["up", "down"]
#: A queued chunk: (due time on the loop clock, data), or None for EOF.
_Item = tuple[float, bytes] | None


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    """Close the connection at once with a TCP RST (not a FIN), dropping any
    unsent data: what a crashed peer or a middlebox reset looks like."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


class _Pipe:
    """One proxied connection: client <-> proxy <-> target, with a reader and
    a writer task per direction. A reset anywhere aborts both sides and
    cancels all four tasks, so none can be left waiting on another."""

    def __init__(
        self,
        proxy: FaultProxy,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        self._proxy = proxy
        self._client_reader = client_reader
        self._client_writer = client_writer
        self._target_writer: asyncio.StreamWriter | None = None
        self._pumps: list[asyncio.Task[None]] = []
        self._was_reset = False

    def reset(self) -> None:
        """Abort both sides with RST and stop the pumps."""
        self._was_reset = True
        _abort_with_rst(self._client_writer)
        if self._target_writer is not None:
            _abort_with_rst(self._target_writer)
        for pump in self._pumps:
            pump.cancel()

    async def run(self) -> None:
        proxy = self._proxy
        try:
            try:
                async with asyncio.timeout(proxy.connect_timeout):
                    target_reader, target_writer = await asyncio.open_connection(
                        proxy.target_host, proxy.target_port
                    )
            except (OSError, TimeoutError) as exc:
                log.debug(
                    "FaultProxy: cannot reach %s:%s: %r", proxy.target_host, proxy.target_port, exc
                )
                self.reset()
                return
            self._target_writer = target_writer
            if self._was_reset:  # reset_all() ran while we were connecting
                self.reset()
                return
            up: asyncio.Queue[_Item] = asyncio.Queue(_QUEUE_CHUNKS)
            down: asyncio.Queue[_Item] = asyncio.Queue(_QUEUE_CHUNKS)
            loop = asyncio.get_running_loop()
            self._pumps = [
                loop.create_task(coro, name=f"pyrmq:fault_proxy:{job}")
                for job, coro in (
                    ("read_up", self._read_loop(self._client_reader, up)),
                    ("write_up", self._write_loop(up, target_writer, "up")),
                    ("read_down", self._read_loop(target_reader, down)),
                    ("write_down", self._write_loop(down, self._client_writer, "down")),
                )
            ]
            await asyncio.wait(self._pumps, return_when=asyncio.FIRST_EXCEPTION)
            for pump in self._pumps:
                if pump.done() and not pump.cancelled() and (error := pump.exception()):
                    self.reset()
                    raise error
        finally:
            await self._close()

    async def _close(self) -> None:
        """Cancel what still runs, then close both sides: gracefully after a
        clean end in both directions, else abortively."""
        for pump in self._pumps:
            pump.cancel()
        if self._pumps:
            await asyncio.wait(self._pumps)
        clean = (
            bool(self._pumps)
            and not self._was_reset
            and all(not t.cancelled() for t in self._pumps)
        )
        writers = [w for w in (self._client_writer, self._target_writer) if w is not None]
        for writer in writers:
            if clean:
                writer.close()
            else:
                writer.transport.abort()
        for writer in writers:
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _read_loop(self, reader: asyncio.StreamReader, queue: asyncio.Queue[_Item]) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(_CHUNK_SIZE):
                if self._proxy.drop:
                    continue
                await queue.put((loop.time() + self._proxy.delay, data))
        except OSError:
            self.reset()  # the peer reset us: pass the reset on to the other side
            return
        await queue.put(None)

    async def _write_loop(
        self,
        queue: asyncio.Queue[_Item],
        writer: asyncio.StreamWriter,
        direction: _Direction,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                aio.write(writer, data)  # a reset peer: OSError on any loop
                self._proxy._forwarded(direction, len(data))
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()  # half-close, as the sender did
        except OSError:
            self.reset()


class FaultProxy:
    """A TCP proxy for tests that injects delay, drops, resets and refusals
    (no Java counterpart; RocketMQ's tests use real brokers or mocks).

    ``async with FaultProxy(host, port) as proxy:`` then connect to
    ``proxy.addr``. `bytes_up` counts bytes forwarded client -> target,
    `bytes_down` target -> client."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        *,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.connect_timeout = connect_timeout
        self.delay: float = 0.0
        self.drop: bool = False
        self.refuse: bool = False
        self.bytes_up = 0
        self.bytes_down = 0
        self._server: asyncio.Server | None = None
        self._pipes: dict[_Pipe, asyncio.Task[None]] = {}
        self._closing = False

    @property
    def port(self) -> int:
        """The port the proxy listens on (known once started)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("FaultProxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def addr(self) -> str:
        """``"host:port"`` for clients to connect to."""
        return f"{self.listen_host}:{self.port}"

    @property
    def connection_count(self) -> int:
        """Connections currently piped (accepted and not yet finished)."""
        return len(self._pipes)

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("FaultProxy already started")
        self._closing = False
        self._server = await asyncio.start_server(
            self._on_accept, self.listen_host, self.listen_port
        )

    async def shutdown(self) -> None:
        """Stop listening and close every piped connection (unsent data is lost)."""
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._pipes.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    def reset_all(self) -> int:
        """Abort every current connection, both sides, with RST. Returns how
        many connections were reset."""
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.reset()
        return len(pipes)

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _forwarded(self, direction: _Direction, n: int) -> None:
        if direction == "up":
            self.bytes_up += n
        else:
            self.bytes_down += n

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse or self._closing:
            _abort_with_rst(writer)
            return
        pipe = _Pipe(self, reader, writer)
        task = asyncio.get_running_loop().create_task(pipe.run(), name="pyrmq:fault_proxy:pipe")
        self._pipes[pipe] = task
        task.add_done_callback(lambda t: self._pipe_done(pipe, t))

    def _pipe_done(self, pipe: _Pipe, task: asyncio.Task[None]) -> None:
        self._pipes.pop(pipe, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error(
                "FaultProxy -> %s:%s: pipe failed", self.target_host, self.target_port, exc_info=exc
            )
