"""RemotingClient: one connection per address, opened on demand and again
after it drops (NettyRemotingClient)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from pyrmq.common.errors import RemotingError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.connection import Connection, RequestHandler
from pyrmq.remoting.tls import describe_handshake_error

log = logging.getLogger("pyrmq.remoting")

#: why a plain connection may be closed before its first answer
_PLAIN_HINT = "the server may require TLS (tls.server.mode=enforcing; connect with TLS)"


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    """Requests to many servers. `handler` answers requests the servers send
    us (NOTIFY_CONSUMER_IDS_CHANGED and friends). With ssl_context every
    connection is TLS (the server's certificate checked as the context
    says, against the host of the address dialed). `rpc_hook(cmd)` runs on
    every request sent and every answer given, before encoding (RocketMQ's
    RPCHook.doBeforeRequest: ACL signing)."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        connect_timeout: float = 3.0,
        name: str = "client",
        ssl_context: ssl.SSLContext | None = None,
        rpc_hook: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        self._handler = handler
        self.ssl_context = ssl_context
        self.rpc_hook = rpc_hook
        self.connect_timeout = connect_timeout
        self.name = name
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False

    async def connection(self, addr: str) -> Connection:
        if self._closed:
            raise RemotingError("the client is shut down")
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._connect(addr)
            self._conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e if isinstance(e, Exception) else RemotingError(str(e)))
            fut.exception()  # mark retrieved
            raise
        finally:
            self._connecting.pop(addr, None)

    async def _connect(self, addr: str) -> Connection:
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()

        def closed(c: Connection) -> None:
            if self._conns.get(addr) is c:
                del self._conns[addr]

        ctx = self.ssl_context
        if ctx is None:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    _, proto = await loop.create_connection(
                        lambda: Connection(
                            self._handler,
                            on_close=closed,
                            name=self.name,
                            lost_hint=_PLAIN_HINT,
                            rpc_hook=self.rpc_hook,
                        ),
                        host,
                        port,
                    )
            except (OSError, TimeoutError) as e:
                raise RemotingError(f"cannot connect to {addr}: {e or 'timed out'}") from None
            return proto
        try:
            sock = await self._open_socket(addr, host, port)
        except (OSError, TimeoutError) as e:
            raise RemotingError(f"cannot connect to {addr}: {e or 'timed out'}") from None
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, proto = await loop.create_connection(
                    lambda: Connection(
                        self._handler, on_close=closed, name=self.name, rpc_hook=self.rpc_hook
                    ),
                    sock=sock,
                    server_hostname=host,
                    ssl=ctx,
                    ssl_handshake_timeout=self.connect_timeout,
                )
        except (OSError, TimeoutError) as e:
            sock.close()
            raise RemotingError(
                f"TLS handshake with {addr} failed: {describe_handshake_error(e)}"
            ) from None
        return proto

    async def _open_socket(self, addr: str, host: str, port: int) -> socket.socket:
        """A connected TCP socket (so a refused connection and a failed TLS
        handshake are told apart)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_timeout):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            err: OSError | None = None
            for family, kind, proto, _, sockaddr in infos:
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                try:
                    await loop.sock_connect(sock, sockaddr)
                    return sock
                except BaseException as e:
                    sock.close()
                    if not isinstance(e, OSError):
                        raise
                    err = e
            raise err or OSError(f"no address for {addr}")

    def open_connection(self, addr: str) -> Connection | None:
        """The open connection to addr, if there is one (no connecting)."""
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send cmd with no answer; waits only while the connection has more
        unsent bytes than the transport's high-water mark, so a caller
        sending in a tight loop is held to the speed the peer reads at
        instead of buffering without bound."""
        conn = await self.connection(addr)
        conn.invoke_oneway(cmd)
        if conn.write_paused:
            await conn.writable()

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def shutdown(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        for c in conns:
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(2):
                    await c.closed
