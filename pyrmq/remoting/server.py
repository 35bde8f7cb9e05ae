"""RemotingServer: an asyncio TCP server that hands each request to the
processor registered for its code (NettyRemotingServer).

With TLS (tls.server.mode permissive or enforcing) the server accepts the
connections itself and peeks at each one's first byte before it builds the
transport (RocketMQ's HandshakeHandler): 0x16 starts a TLS handshake,
anything else is a plain connection, served in permissive mode and closed
in enforcing mode. The wait for that byte and the handshake share one
deadline (tls.server.handshakeTimeoutMs), so a client that connects and
says nothing, or stops inside its ClientHello, holds a socket no longer.

On an event loop other than asyncio's own (uvloop) the server accepts its
plain connections itself too, so that running out of file descriptors is
reported and the clients wait rather than being reset (pyrmq.common.listen)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

from pyrmq.common.errors import BrokerError
from pyrmq.common.listen import accept_loop, loop_reports_accept_errors
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import FLAG_ONEWAY, MAX_FRAME, RemotingCommand
from pyrmq.remoting.connection import Connection, FastPath, HandlerResult, RequestHandler
from pyrmq.remoting.tls import TLS_HANDSHAKE_BYTE, TlsConfig, TlsMode

log = logging.getLogger("pyrmq.remoting")

#: rpc_observer(request_code, response_code, result, microseconds); result is
#: "success" (answered, whatever its code), "oneway", "deferred" (the
#: processor answers later by itself: response_code -1, the handler's time)
#: or "process_request_failed" (an unexpected exception: SYSTEM_ERROR)
RpcObserver = Callable[[int, int, str, int], None]


class RemotingServer:
    """Listens on host:port; `register(code, processor)` routes requests.
    Unregistered codes get REQUEST_CODE_NOT_SUPPORTED. Connections idle for
    `channel_max_idle` seconds are closed (serverChannelMaxIdleTimeSeconds),
    and so are those with a frame still incomplete `frame_read_timeout`
    seconds after its first byte (pyrmq: a slowloris sender, a byte now and
    then, is never idle)."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        name: str = "server",
        channel_max_idle: float = 120.0,
        frame_read_timeout: float = 120.0,
        max_frame: int = MAX_FRAME,
        tls: TlsConfig | None = None,
    ) -> None:
        """tls: the server side of it is used (tls.server.*); its files are
        read here, so a bad path fails construction (ClientError)."""
        self.host = host
        self.port = port
        self.name = name
        self.channel_max_idle = channel_max_idle
        self.frame_read_timeout = frame_read_timeout
        self.max_frame = max_frame
        self._processors: dict[int, RequestHandler] = {}
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()
        self._idle_task: asyncio.Task[None] | None = None
        self._close_listeners: list[Callable[[Connection], None]] = []
        self._hooks: list[Callable[[Connection, RemotingCommand], None]] = []
        self.tls_mode = tls.server_mode if tls is not None else TlsMode.DISABLED
        self.ssl_context: ssl.SSLContext | None = tls.server_context() if tls else None
        self.handshake_timeout = tls.handshake_timeout if tls is not None else 10.0
        self._listen_sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()
        #: metrics: told of the requests handled (None: nothing measured).
        #: One request in `rpc_sample_every` on average is timed and told, at
        #: random gaps (no aliasing with a periodic request mix): timing every
        #: request would cost the send path ~0.5 us a request.
        self.rpc_observer: RpcObserver | None = None
        self.rpc_sample_every = 1
        self._rpc_skip = 1
        #: splits the frames of every connection accepted from now on, and
        #: may serve requests itself (the broker's C send path)
        self.fast_path: FastPath | None = None

    def register(self, code: int, processor: RequestHandler) -> None:
        self._processors[int(code)] = processor

    def request_codes(self) -> list[int]:
        """The request codes a processor is registered for, ascending (what
        the server serves; the hostile-input fuzzers send every one)."""
        return sorted(self._processors)

    def add_rpc_hook(self, hook: Callable[[Connection, RemotingCommand], None]) -> None:
        """Run hook(conn, request) before every processor (RocketMQ RPCHook);
        raising a BrokerError answers with its code instead. ACL (request
        signature and permission checks) plugs in here."""
        self._hooks.append(hook)

    @property
    def has_rpc_hooks(self) -> bool:
        return bool(self._hooks)

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        """Called with each connection that closes (ChannelEventListener)."""
        self._close_listeners.append(listener)

    def handle(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """One request through the hooks to its processor (what every
        connection calls; the gRPC proxy calls it in-process)."""
        for hook in self._hooks:
            hook(conn, cmd)
        processor = self._processors.get(cmd.code)
        if processor is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {cmd.code} not supported",
            )
        observe = self.rpc_observer
        if observe is None:
            return processor(conn, cmd)
        self._rpc_skip -= 1
        if self._rpc_skip > 0:
            return processor(conn, cmd)
        every = self.rpc_sample_every
        self._rpc_skip = random.randint(1, 2 * every - 1) if every > 1 else 1
        return _observed(processor, observe, conn, cmd)

    def observe_many(self, code: int, n: int, response: int, result: str, micros: int) -> None:
        """n requests of one code answered outside handle() (the broker's C
        send path), micros each: told to rpc_observer as handle() samples."""
        observe = self.rpc_observer
        if observe is None or n <= 0:
            return
        every = self.rpc_sample_every
        skip = self._rpc_skip - n
        while skip <= 0:
            observe(code, response, result, micros)
            skip += random.randint(1, 2 * every - 1) if every > 1 else 1
        self._rpc_skip = skip

    def connection_closed(self, conn: Connection) -> None:
        """conn closed: the close listeners are told (the gRPC proxy's
        in-process channels call it themselves)."""
        self.connections.discard(conn)
        for listener in self._close_listeners:
            try:
                listener(conn)
            except Exception:
                log.exception("%s: close listener failed", self.name)

    def _connection(self) -> Connection:
        conn = Connection(
            self.handle, on_close=self.connection_closed, max_frame=self.max_frame, name=self.name
        )
        if self.fast_path is not None:
            conn.set_fast_path(self.fast_path)
        return conn

    def _new_connection(self) -> Connection:
        conn = self._connection()
        self.connections.add(conn)
        return conn

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen on host:port, or on sock (already bound) when given."""
        loop = asyncio.get_running_loop()
        if self.ssl_context is not None or not loop_reports_accept_errors(loop):
            self._start_listener(sock)
        elif sock is not None:
            self._server = await loop.create_server(self._new_connection, sock=sock, backlog=1024)
        else:
            self._server = await loop.create_server(
                self._new_connection, self.host, self.port, reuse_address=True, backlog=1024
            )
        if self._server is not None:
            self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = asyncio.create_task(
            self._idle_loop(), name=f"pyrmq:{self.name}:idle-channels"
        )

    # -- accepting here: TLS (accept, peek, then plain or TLS), or not asyncio's loop --

    def _start_listener(self, sock: socket.socket | None) -> None:
        if sock is None:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sock = socket.create_server((self.host, self.port), family=family, backlog=1024)
        sock.setblocking(False)
        self._listen_sock = sock
        self.port = sock.getsockname()[1]
        admit = self._admit if self.ssl_context is not None else self._admit_plain
        self._accept_task = asyncio.create_task(
            accept_loop(sock, admit, self._admitting, self.name), name=f"pyrmq:{self.name}:accept"
        )

    async def _admit_plain(self, sock: socket.socket) -> None:
        """Serve one accepted socket as a plain connection."""
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(self._new_connection, sock)
        except OSError as e:  # the transport, made with the socket, closed it
            log.info("%s: dropping a connection just accepted: %s", self.name, e)

    async def _admit(self, sock: socket.socket) -> None:
        """Serve one accepted socket: TLS when it starts with a handshake,
        plain when the mode permits, closed otherwise or when the first
        byte and the handshake do not arrive within the timeout."""
        loop = asyncio.get_running_loop()
        try:
            host, port = sock.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self.handshake_timeout):
                first = await _peek(loop, sock)
        except (OSError, TimeoutError) as e:
            log.info("%s: closing connection from %s: %s", self.name, peer, e or "no first byte")
            sock.close()
            return
        if not first:  # closed before a byte
            sock.close()
            return
        tls = first[0] == TLS_HANDSHAKE_BYTE
        if not tls and self.tls_mode is TlsMode.ENFORCING:
            log.warning(
                "%s: closing connection from %s: a plain (non-TLS) connection while "
                "tls.server.mode=enforcing",
                self.name,
                peer,
            )
            sock.close()
            return
        conn = self._connection()
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await loop.connect_accepted_socket(
                    lambda: conn,
                    sock,
                    ssl=self.ssl_context if tls else None,
                    ssl_handshake_timeout=self.handshake_timeout if tls else None,
                )
        except (OSError, TimeoutError) as e:
            # the transport, made with the socket, closed it
            reason = e.reason if isinstance(e, ssl.SSLError) else None
            log.warning(
                "%s: TLS handshake with %s failed: %s",
                self.name,
                peer,
                reason or str(e) or type(e).__name__,
            )
            return
        if conn.is_open:
            self.connections.add(conn)

    async def _idle_loop(self) -> None:
        interval = min(10.0, self.channel_max_idle / 2, self.frame_read_timeout / 2)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                reason = conn.overdue(now, self.channel_max_idle, self.frame_read_timeout)
                if reason is not None:
                    conn.abort(reason)

    async def shutdown(self) -> None:
        tasks = [t for t in (self._accept_task, *self._admitting) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._accept_task = None
        if self._listen_sock is not None:
            self._listen_sock.close()
            self._listen_sock = None
            conns = list(self.connections)
            for conn in conns:
                conn.close()
            if conns:  # a TLS close sends close_notify first
                await asyncio.wait([c.closed for c in conns], timeout=2)
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
            self._idle_task = None
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            self._server = None
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte sock received, left in it for whoever reads next
    (b"" when the peer closed first)."""
    fd = sock.fileno()
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _tell_failure(observe: RpcObserver, code: int, e: BaseException, start: int) -> None:
    """A handler's exception as the metrics see it: a BrokerError is an
    answer with its code, anything else a failed request (SYSTEM_ERROR)."""
    if isinstance(e, BrokerError):
        observe(code, int(e.code), "success", (time.perf_counter_ns() - start) // 1000)
    else:
        observe(
            code,
            int(ResponseCode.SYSTEM_ERROR),
            "process_request_failed",
            (time.perf_counter_ns() - start) // 1000,
        )


def _observed(
    processor: RequestHandler, observe: RpcObserver, conn: Connection, cmd: RemotingCommand
) -> HandlerResult:
    """processor(conn, cmd), its time and outcome told to observe."""
    start = time.perf_counter_ns()
    code = cmd.code
    try:
        result = processor(conn, cmd)
    except Exception as e:
        _tell_failure(observe, code, e, start)
        raise
    if isinstance(result, RemotingCommand):
        how = "oneway" if cmd.flag & FLAG_ONEWAY else "success"
        observe(code, result.code, how, (time.perf_counter_ns() - start) // 1000)
        return result
    if result is None:
        how = "oneway" if cmd.flag & FLAG_ONEWAY else "deferred"
        observe(code, -1, how, (time.perf_counter_ns() - start) // 1000)
        return None
    return _observed_later(result, observe, code, start)


async def _observed_later(
    pending: Awaitable[RemotingCommand | None], observe: RpcObserver, code: int, start: int
) -> RemotingCommand | None:
    try:
        result = await pending
    except Exception as e:  # CancelledError is a BaseException: not told
        _tell_failure(observe, code, e, start)
        raise
    response = -1 if result is None else result.code
    observe(code, response, "success", (time.perf_counter_ns() - start) // 1000)
    return result
