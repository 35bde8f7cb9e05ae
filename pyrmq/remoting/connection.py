"""Connection: one TCP connection speaking the remoting protocol, on either
side (asyncio.BufferedProtocol).

Requests that arrive are given to the owner's RequestHandler; responses are
matched to pending invocations by opaque. Answers produced while a batch of
received bytes is processed go out in one write. A pull answer may send its
body straight from the CommitLog with sendfile: as much as the socket takes
at once, when nothing is waiting before it; the rest (or all of it, when the
transport still has bytes buffered) is copied into the transport's buffer,
so every answer stays in order and the transport's own flow control
(pause_writing) applies to it. Over TLS the body is always copied: the
socket carries encrypted records, so file bytes cannot go to it directly."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.remoting.codes import ResponseCode
from pyrmq.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    FrameError,
    ReadBytes,
    RemotingCommand,
    Splitter,
)

log = logging.getLogger("pyrmq.remoting")

#: What a handler returns: an answer now, an awaitable answer, or None (no
#: answer: one-way requests, or the handler answers itself later).
HandlerResult = RemotingCommand | Awaitable[RemotingCommand | None] | None


class RequestHandler(Protocol):
    def __call__(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult: ...


class FastPath(Protocol):
    def split(
        self, conn: Connection, buf: ReadBytes, max_frame: int
    ) -> tuple[list[tuple[int, Any, bytes]], int]:
        """split_frames for conn's stream; requests served here are
        answered here and not returned."""
        ...


class FileBody(Protocol):
    """A response body sent from files: pinned ranges (CommitLog)."""

    def send(self, sock_fd: int) -> int:
        """Send as much as the socket takes now; return bytes sent."""

    @property
    def remaining(self) -> int: ...

    def read_rest(self) -> bytes:
        """The bytes not sent yet (copied), releasing what backs them."""

    def close(self) -> None: ...


_opaques = itertools.count(1)


def next_opaque() -> int:
    """A request's opaque: unique among this process's requests in flight
    (31 bits, as Java's AtomicInteger requestId wraps positive)."""
    return next(_opaques) & 0x7FFFFFFF


#: How a response reaches its requester: on_done(response, None) or
#: on_done(None, error).
ResponseCallback = Callable[[RemotingCommand | None, BaseException | None], None]
#: how often pending requests are checked for their deadline
SWEEP_INTERVAL = 0.05
#: answers gathered from one read are written once they reach this many
#: bytes (the transport's default high-water mark), so the transport can
#: signal pause_writing before the next request of the read is served
OUT_FLUSH_BYTES = 64 * 1024
#: frames queued by send_soon in one loop iteration go to the transport at
#: once past this many bytes, so its flow control (pause_writing) sees a
#: sender that never yields (oneway sends in a tight loop), instead of the
#: frames piling up in this process until the loop turns
SOON_FLUSH_BYTES = 256 * 1024


#: bytes read from the socket at most at once (asyncio's own read size)
READ_BYTES = 256 * 1024

_read_buffers = threading.local()


def _read_buffer() -> memoryview:
    """This thread's read buffer, shared by the connections of its loop.

    A read goes into it and is handed to the FrameDecoder at once, which
    copies whatever it keeps (bodies, a partial frame), so the next read,
    on any connection, may reuse it. asyncio's Protocol path instead makes
    a fresh bytes object of READ_BYTES a read; that size is above glibc's
    mmap threshold, so every read cost an mmap, an mremap and an munmap
    (and a page fault): about 10 us of a lone send's round trip here."""
    buf = getattr(_read_buffers, "view", None)
    if buf is None:
        buf = _read_buffers.view = memoryview(bytearray(READ_BYTES))
    return buf


def _call(
    on_done: ResponseCallback, resp: RemotingCommand | None, exc: BaseException | None
) -> None:
    try:
        on_done(resp, exc)
    except Exception:
        log.exception("a response callback raised")


class Connection(asyncio.BufferedProtocol):
    """One remoting connection (Netty channel + NettyRemotingAbstract)."""

    #: what is sent goes to the peer as frames, so send_bytes and
    #: send_with_file_body serve; a proxy's in-process channel carries
    #: commands instead (pyrmq/proxy/channel.py)
    carries_frames = True

    def __init__(
        self,
        handler: RequestHandler | None,
        *,
        on_close: Callable[[Connection], None] | None = None,
        max_frame: int | None = None,
        name: str = "conn",
        lost_hint: str = "",
        rpc_hook: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        self._handler = handler
        #: added to the error of requests pending when the peer closes a
        #: connection that never sent us a byte (a client's "the server may
        #: require TLS")
        self._lost_hint = lost_hint
        self._received_any = False
        #: the transport is TLS (set when the connection is made)
        self.tls = False
        #: runs on every request this side sends and every answer it gives
        #: to the peer's requests, just before encoding (a client's ACL
        #: signing: pyrmq.acl.AclClientRPCHook)
        self.rpc_hook = rpc_hook
        self._on_close = on_close
        self._decoder = FrameDecoder() if max_frame is None else FrameDecoder(max_frame)
        #: opaque -> (deadline, on_done, request code, timeout)
        self._pending: dict[int, tuple[float, ResponseCallback, int, float]] = {}
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._out: list[bytes] | None = None
        self._out_bytes = 0
        self._soon: list[bytes] | None = None
        self._soon_bytes = 0
        #: resolved when the transport takes writes again (writable())
        self._writable: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._write_paused = False
        #: holds on reading (hold_reading) not released yet
        self._held = 0
        #: requests received while the peer was not reading our answers,
        #: served (in order) once it reads again
        self._backlog: list[RemotingCommand] = []
        self.transport: asyncio.Transport | None = None
        #: the loop this connection lives on (asyncio.get_running_loop()
        #: costs a getpid() system call on Python 3.11: not per request)
        self._loop = asyncio.get_running_loop()
        self.closed = self._loop.create_future()
        self.name = name
        self.peer = ""
        self.last_active = time.monotonic()
        #: when the frame now partly received began to arrive (None: no
        #: partial frame); the server closes senders too slow to finish one
        self.frame_started: float | None = None
        #: free slot for the owner (the broker keeps the client's language)
        self.attrs: dict[str, Any] = {}
        self._split: Splitter | None = None
        self._rbuf = _read_buffer()
        #: a chunk of this connection's frames is being served elsewhere (a
        #: C send thread): its fast path splits nothing more until it is back
        self.split_busy = False
        #: the splitter returned the frames before one it serves itself and
        #: left that one and the rest for once those are served (in order)
        self.split_again = False
        #: while split_busy, the hold on reading taken when too much was kept
        self.split_held: asyncio.Future[None] | None = None

    def set_fast_path(self, fast: FastPath) -> None:
        """Frames are split by fast, which may serve some requests itself
        (the broker's C send path, pyrmq/broker/processor/send_fast.py)
        while this connection has no backlog."""
        self._split = functools.partial(fast.split, self)

    # -- asyncio.BufferedProtocol -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; not an isinstance check: uvloop's transports
        # implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.tls = transport.get_extra_info("sslcontext") is not None
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        text = f"connection to {self.peer} closed" + (f": {exc}" if exc else "")
        if self._lost_hint and not self._received_any:
            text += f" before any answer; {self._lost_hint}"
        err = RemotingError(text)
        pending = list(self._pending.values())
        self._pending.clear()
        for _, on_done, _, _ in pending:
            _call(on_done, None, err)
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        for t in list(self._tasks):
            t.cancel()
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake_writers()
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        # The peer does not read its answers: serve none of its requests and
        # read no more of them until it does, so a client that never reads
        # cannot grow our buffers (a few hundred bytes of pull requests ask
        # for megabytes of answers).
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()
        if self._backlog:
            self._loop.call_soon(self._serve_backlog)
        else:
            self._resume_reading()

    def _wake_writers(self) -> None:
        w, self._writable = self._writable, None
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued for the peer and not yet taken by the socket."""
        t = self.transport
        return self._soon_bytes + (t.get_write_buffer_size() if t is not None else 0)

    @property
    def write_paused(self) -> bool:
        """The transport holds more than its high-water mark of unsent bytes."""
        return self._write_paused

    async def writable(self) -> None:
        """Wait until the transport takes writes again (at once when it
        does, or when the connection is closed): a sender's backpressure."""
        if not self._write_paused or self.transport is None:
            return
        if self._writable is None:
            self._writable = self._loop.create_future()
        await asyncio.shield(self._writable)

    def hold_reading(self, until: asyncio.Future[Any]) -> None:
        """Read nothing more from the peer until `until` is done: a
        handler's backpressure (oneway sends while the disk lags, which
        cannot be answered SYSTEM_BUSY). Requests already read are served."""
        if self.transport is None or self.transport.is_closing():
            return
        self._held += 1
        self.transport.pause_reading()

        def release(_: asyncio.Future[Any]) -> None:
            self._held -= 1
            if not self._held and not self._write_paused and not self._backlog:
                self._resume_reading()

        until.add_done_callback(release)

    def _resume_reading(self) -> None:
        if self._held:
            return
        if self.transport is not None and not self.transport.is_closing():
            if self.frame_started is not None:  # the pause was ours, not the sender's
                self.frame_started = time.monotonic()
            self.transport.resume_reading()

    def _serve_backlog(self) -> None:
        if self._write_paused or not self.is_open:
            return
        cmds, self._backlog = self._backlog, []
        self._process(cmds)
        if not self._backlog and not self._write_paused:
            self._resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._rbuf[:nbytes])

    def data_received(self, data: ReadBytes) -> None:
        """Bytes from the peer: every whole frame is served (or answers its
        request), the rest kept. data is not kept: it may be the shared
        read buffer."""
        now = self.last_active = time.monotonic()
        first = not self._received_any
        self._received_any = True
        while True:
            try:
                if self._split is not None and not self._backlog and not self._write_paused:
                    cmds = self._decoder.feed(data, self._split)
                else:
                    cmds = self._decoder.feed(data)
            except FrameError as e:
                if first and data[:1] == b"\x16" and not self.tls:
                    self.abort(
                        "it starts a TLS handshake; TLS is not enabled here (tls.server.mode)"
                    )
                else:
                    self.abort(f"bad frame: {e}")
                return
            if not self._decoder.buffered:
                self.frame_started = None
            elif cmds or self.frame_started is None:
                self.frame_started = now
            if cmds:
                self._process(cmds)
            # the splitter stopped before a frame it serves itself (a send
            # behind a pull): the rest is split now that these are served
            again, self.split_again = self.split_again, False
            if not again or not self.is_open:
                return
            data = b""

    def serve_frames(self, frames: list[tuple[int, Any, bytes]]) -> None:
        """Serve frames its fast path split off earlier and handed back
        (those after a chunk a C send thread served), then whatever came in
        meanwhile (nothing once the connection is closed)."""
        if not self.is_open:
            return
        if frames:
            self._process(FrameDecoder.commands(frames))
        if self._decoder.buffered and self.is_open:
            self.data_received(b"")

    def _process(self, cmds: list[RemotingCommand]) -> None:
        """Answers go to their pending requests; requests are served in
        order, or kept in the backlog while the peer does not read. What
        they send leaves in one write at the end (cork)."""
        corked = self.cork()
        try:
            for cmd in cmds:
                if cmd.flag & FLAG_RESPONSE:
                    entry = self._pending.pop(cmd.opaque, None)
                    if entry is not None:
                        _call(entry[1], cmd, None)
                elif self._backlog or self._write_paused:
                    self._backlog.append(cmd)
                else:
                    self._dispatch(cmd)
                    if self._out_bytes >= OUT_FLUSH_BYTES:
                        self._flush_out()  # may pause writing
        finally:
            if corked:
                self.uncork()

    def cork(self) -> bool:
        """Hold what is sent from now on, to write it in one go at
        uncork(): the answers one step makes for this peer leave in one
        write, so the peer wakes and reads once (_process: the answers to
        one read; SendFastPath._settle: the pulls a chunk of sends woke and
        the chunk's acks, on a connection that both produces and consumes,
        as a RocketMQ Java or C++ client's one connection per broker does).
        False when sends are held already: then the step that held them
        writes them, and there is nothing to uncork."""
        if self._out is not None:
            return False
        self._out = []
        self._out_bytes = 0
        return True

    def uncork(self) -> None:
        """Write what was held since cork() returned True; sends write at
        once again."""
        try:
            self._flush_out()
        finally:
            self._out = None

    def _flush_out(self) -> None:
        out = self._out
        if out:
            data = b"".join(out) if len(out) > 1 else out[0]
            out.clear()
            self._out_bytes = 0
            self._write(data)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        result = answer(self._handler, self, cmd)
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            if not cmd.flag & FLAG_ONEWAY:
                if self.rpc_hook is not None:
                    self.rpc_hook(result)
                self.send(result)
            return
        task = asyncio.ensure_future(self._finish(cmd, result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(
        self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | None]
    ) -> None:
        result = await answer_later(self.name, cmd, pending)
        if result is not None and not cmd.flag & FLAG_ONEWAY:
            if self.rpc_hook is not None:
                self.rpc_hook(result)
            self.send(result)

    # -- output ---------------------------------------------------------------------

    def send(self, cmd: RemotingCommand) -> None:
        """Queue a frame (request or response) for the peer."""
        self.send_bytes(cmd.encode())

    def send_soon(self, cmd: RemotingCommand) -> None:
        """Queue a frame to go out at the end of this loop iteration, in one
        write with the others queued meanwhile (answers completed together,
        such as every send served by one group commit)."""
        self.send_frame_soon(cmd.encode())

    def send_frame_soon(self, frame: bytes) -> None:
        """send_soon of an encoded frame."""
        if self._soon is None:
            # the first leaves now (a lone request or answer is not held for
            # a loop turn), those after it in this iteration together at its end
            self._soon = []
            self._loop.call_soon(self._flush_soon)
            self.send_bytes(frame)
            return
        if not self._soon and self._out is not None:
            # held (cork) with the first, nothing queued behind it: it joins
            # that write, in order, instead of waiting for the loop turn's end
            self._out.append(frame)
            self._out_bytes += len(frame)
            return
        self._soon.append(frame)
        self._soon_bytes += len(frame)
        if self._soon_bytes > SOON_FLUSH_BYTES:
            self._flush_soon()

    def _flush_soon(self) -> None:
        frames, self._soon = self._soon, None
        self._soon_bytes = 0
        if frames:
            # behind what _process holds (the first frame of this iteration
            # may be there): requests made in a callback keep their order
            self.send_bytes(b"".join(frames) if len(frames) > 1 else frames[0])

    def send_bytes(self, frame: bytes) -> None:
        if self._out is not None:
            self._out.append(frame)
            self._out_bytes += len(frame)
        else:
            self._write(frame)

    def _write(self, data: bytes) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        t.write(data)

    def send_with_file_body(self, prefix: bytes, body: FileBody) -> None:
        """Send a frame whose header is prefix and whose body comes from
        body: by sendfile for what the socket takes now, copied otherwise."""
        try:
            self._flush_out()
            t = self.transport
            if t is None or t.is_closing():
                return
            t.write(prefix)
            # a TLS transport reports its raw socket too: never sendfile to it
            sock = None if self.tls else t.get_extra_info("socket")
            if sock is not None and not t.get_write_buffer_size():
                try:
                    body.send(sock.fileno())
                except BlockingIOError:
                    pass
                except OSError as e:
                    self.abort(f"sendfile failed: {e}")
                    return
            if body.remaining:
                t.write(body.read_rest())
        finally:
            body.close()

    # -- requests from this side ---------------------------------------------------

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (RemotingError after
        timeout seconds)."""
        return await self.request(cmd, timeout)

    def request(self, cmd: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        """Send a request; the future gets its response, or RemotingError
        after timeout seconds or when the connection closes."""
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()

        def done(resp: RemotingCommand | None, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(resp)  # type: ignore[arg-type]

        self.request_cb(cmd, timeout, done)
        return fut

    def request_cb(self, cmd: RemotingCommand, timeout: float, on_done: ResponseCallback) -> None:
        """Send a request; on_done(response, None) runs when it is answered,
        on_done(None, RemotingError) after timeout seconds (give or take
        SWEEP_INTERVAL) or when the connection closes. No future, no timer
        per request: the producer's pipelined path lives on this."""
        cmd.opaque = opaque = next_opaque()
        cmd.flag &= ~FLAG_RESPONSE
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self.request_frame(opaque, cmd.code, cmd.encode(), timeout, on_done)

    def request_frame(
        self, opaque: int, code: int, frame: bytes, timeout: float, on_done: ResponseCallback
    ) -> None:
        """request_cb of a request already encoded with `opaque` (from
        next_opaque()) and request `code`: the producer's single send
        builds its frame in C. Only for a connection without an rpc_hook,
        which must see the command."""
        if self.transport is None or self.transport.is_closing():
            raise RemotingError(f"connection to {self.peer} is closed")
        loop = self._loop
        pending = self._pending
        # nothing in flight and nothing queued: a lone request (an awaited
        # send, a pull) leaves now, without the end-of-iteration flush that
        # would cost it a loop turn of its own and find nothing to coalesce
        lone = not pending and self._soon is None
        pending[opaque] = (loop.time() + timeout, on_done, code, timeout)
        if self._sweep_handle is None:
            self._sweep_handle = loop.call_later(SWEEP_INTERVAL, self._sweep)
        if lone:
            self.send_bytes(frame)
        else:
            # requests made in one loop iteration leave in one write
            self.send_frame_soon(frame)

    def _sweep(self) -> None:
        """Fail the requests whose deadline passed (scanResponseTable)."""
        self._sweep_handle = None
        if not self._pending:
            return
        now = self._loop.time()
        expired = [op for op, entry in self._pending.items() if entry[0] <= now]
        for op in expired:
            _, on_done, code, timeout = self._pending.pop(op)
            _call(
                on_done,
                None,
                RemotingError(
                    f"no answer from {self.peer} to request code {code} in {timeout:.3f}s"
                ),
            )
        if self._pending:
            self._sweep_handle = self._loop.call_later(SWEEP_INTERVAL, self._sweep)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self.send_soon(cmd)

    def overdue(self, now: float, max_idle: float, frame_timeout: float) -> str | None:
        """Why the server should close this connection now, if it should:
        nothing read from it for max_idle seconds, or a frame still
        incomplete frame_timeout seconds after its first byte (a slowloris
        sender; not counted while we hold reading back ourselves)."""
        if now - self.last_active > max_idle:
            return f"idle for more than {max_idle:g}s"
        started = self.frame_started
        if (
            started is not None
            and not self._write_paused
            and not self._held
            and now - started > frame_timeout
        ):
            return (
                f"a frame incomplete {now - started:.0f}s after its first byte "
                f"(limit {frame_timeout:g}s; {self._decoder.buffered} bytes so far)"
            )
        return None

    def abort(self, reason: str) -> None:
        """Close this connection at once, logging why."""
        if self.transport is not None and not self.transport.is_closing():
            log.warning("%s: closing connection from %s: %s", self.name, self.peer, reason)
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    @property
    def pending_requests(self) -> int:
        return len(self._pending)


def answer(handler: RequestHandler | None, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
    """handler(conn, cmd), its errors turned into answers: a BrokerError
    into its code and remark, anything else into SYSTEM_ERROR (logged). No
    handler: REQUEST_CODE_NOT_SUPPORTED. Used by every connection, and by
    the gRPC proxy's in-process requests (pyrmq/proxy/channel.py)."""
    try:
        if handler is None:
            raise BrokerError.for_code(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)(
                f"request code {cmd.code} not supported"
            )
        return handler(conn, cmd)
    except BrokerError as e:
        return cmd.response(e.code, remark=e.remark)
    except Exception as e:
        log.exception("%s: handling request code %d failed", conn.name, cmd.code)
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")


async def answer_later(
    name: str, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | None]
) -> RemotingCommand | None:
    """The answer a handler gave as an awaitable, errors turned into
    answers as answer() does."""
    try:
        return await pending
    except asyncio.CancelledError:
        raise
    except BrokerError as e:
        return cmd.response(e.code, remark=e.remark)
    except Exception as e:
        log.exception("%s: handling request code %d failed", name, cmd.code)
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")


class FileRanges:
    """FileBody over CommitLog ranges: each (pin, offset, size) is sent with
    the pin's sendfile and released after. Built by the broker from store
    pins; kept here so the connection does not need the store."""

    __slots__ = ("_items", "_remaining")

    def __init__(self, items: Sequence[tuple[Any, int, int]]) -> None:
        self._items = collections.deque(items)
        self._remaining = sum(size for _, _, size in items)

    @property
    def remaining(self) -> int:
        return self._remaining

    def send(self, sock_fd: int) -> int:
        total = 0
        while self._items:
            pin, offset, size = self._items[0]
            n = pin.sendfile(sock_fd, offset, size)
            total += n
            self._remaining -= n
            if n < size:
                self._items[0] = (pin, offset + n, size - n)
                break
            self._items.popleft()
            pin.release()
        return total

    def read_rest(self) -> bytes:
        parts = []
        while self._items:
            pin, offset, size = self._items.popleft()
            try:
                parts.append(pin.read(offset, size))
            finally:
                pin.release()
        self._remaining = 0
        return b"".join(parts)

    def close(self) -> None:
        while self._items:
            self._items.popleft()[0].release()
