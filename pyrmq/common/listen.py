"""Listening sockets that say when they cannot accept, on any event loop.

Out of file descriptors (EMFILE), accept() fails. asyncio's own loop hands
that to the loop's exception handler (ACCEPT_ERROR_MESSAGE) and leaves the
connection in the listen backlog until a descriptor is free. libuv's
listener (uvloop) instead accepts the connection on a descriptor it keeps
in reserve and closes it at once, telling nobody: the client is reset and
the server's log says nothing. On a loop that is not asyncio's own, the
servers therefore accept their connections themselves (accept_loop): the
failure reaches the exception handler as on asyncio's loop (`pyrmq`
servers install AcceptErrorReporter, which sums it up once per 10 s), and
the connections wait in the backlog.

start_stream_server() is asyncio.start_server on either kind of loop (the
HA service's and the metrics endpoint's listeners); RemotingServer runs
accept_loop() with its own admission of each socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

#: the message of a failed accept() in the loop exception handler's context,
#: as asyncio's own loop words it (and accept_loop repeats)
ACCEPT_ERROR_MESSAGE = "socket.accept() out of system resource"
#: seconds before accepting again after accept() failed (asyncio's own wait)
ACCEPT_RETRY_DELAY = 1.0

log = logging.getLogger("pyrmq.listen")

StreamHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


#: seconds between two reports of connections that could not be accepted
ACCEPT_ERROR_REPORT_INTERVAL = 10.0


class AcceptErrorReporter:
    """The servers' loop exception handler. Out of file descriptors
    (EMFILE), asyncio's loop reports a failed accept() once per backlog
    slot, each with a traceback: over a thousand a second for as long as
    the limit lasts (accept_loop, on uvloop: once a second). This reports it once per
    interval, with the count and the limit; every other error goes to the
    default handler."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = -ACCEPT_ERROR_REPORT_INTERVAL
        self._count = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR_MESSAGE:
            loop.default_exception_handler(context)
            return
        self._count += 1
        now = self._clock()
        if now - self._last < ACCEPT_ERROR_REPORT_INTERVAL:
            return
        log.error(
            "cannot accept connections: %s (%d failed accepts since the last report; ulimit -n "
            "is %d: raise it, or idle connections are closed after clientChannelMaxIdleTimeMs)",
            context.get("exception"),
            self._count,
            resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        )
        self._last = now
        self._count = 0


def loop_reports_accept_errors(loop: asyncio.AbstractEventLoop) -> bool:
    """True on asyncio's own loop, whose listeners report a failed accept()
    and keep the connection waiting; False on others (uvloop's closes it)."""
    return isinstance(loop, asyncio.BaseEventLoop)


async def accept_loop(
    lsock: socket.socket,
    admit: Callable[[socket.socket], Coroutine[Any, Any, None]],
    admitting: set[asyncio.Task[None]],
    name: str,
) -> None:
    """Accept connections on the non-blocking listening socket lsock until
    cancelled, each served by its own task admit(sock), kept in
    `admitting` while it runs (to be cancelled with the server)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            sock, _ = await loop.sock_accept(lsock)
        except OSError as e:
            # out of descriptors (EMFILE) and the like: the backlog keeps the
            # clients waiting; told as asyncio's loop tells it, and tried
            # again shortly rather than in a spin
            loop.call_exception_handler(
                {"message": ACCEPT_ERROR_MESSAGE, "exception": e, "socket": lsock}
            )
            await asyncio.sleep(ACCEPT_RETRY_DELAY)
            continue
        task = asyncio.create_task(admit(sock), name=f"pyrmq:{name}:admit")
        admitting.add(task)
        task.add_done_callback(admitting.discard)


class AcceptingServer:
    """What asyncio.start_server returns, as far as pyrmq's servers use it
    (sockets, close, wait_closed), over accept_loop."""

    def __init__(self, lsock: socket.socket, handler: StreamHandler, name: str, limit: int) -> None:
        self.sockets = [lsock]
        self._handler = handler
        self._limit = limit
        self._admitting: set[asyncio.Task[None]] = set()
        self._task = asyncio.create_task(
            accept_loop(lsock, self._admit, self._admitting, name), name=f"pyrmq:{name}:accept"
        )

    async def _admit(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=self._limit)
        except OSError:  # the transport, made with the socket, closed it
            return
        await self._handler(reader, writer)

    def close(self) -> None:
        """Stop listening; connections being served go on (as asyncio's)."""
        self._task.cancel()
        for s in self.sockets:
            s.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def start_stream_server(
    handler: StreamHandler, host: str, port: int, *, name: str, limit: int = 2**16
) -> asyncio.Server | AcceptingServer:
    """asyncio.start_server(handler, host, port) on asyncio's loop; on any
    other, a listener that accepts itself (AcceptingServer)."""
    if loop_reports_accept_errors(asyncio.get_running_loop()):
        return await asyncio.start_server(handler, host, port, limit=limit, reuse_address=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    lsock = socket.create_server((host, port), family=family, backlog=100)
    lsock.setblocking(False)
    return AcceptingServer(lsock, handler, name, limit)
