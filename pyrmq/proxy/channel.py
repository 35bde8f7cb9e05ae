"""The broker as the proxy reaches it: in-process remoting requests.

In local mode (the proxy inside the broker process, RocketMQ 5's
``--enable-proxy``) every gRPC request becomes the remoting request a 4.x
client would send, handed straight to the broker's processors through
``RemotingServer.handle``: one send path, one transaction path, whichever
protocol the client speaks, and no socket between the two.

Each gRPC client (its ``x-mq-client-id``) gets one ``LocalChannel``: a
``Connection`` with no transport, so the broker's processors, its producer
table and its transaction check-back treat it as any connection. What the
broker sends the client (CHECK_TRANSACTION_STATE) goes to the channel's
``on_request``: the client's Telemetry stream."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.common.errors import RemotingError
from pyrmq.proxy.backend import ProxyChannel
from pyrmq.remoting import RemotingCommand, RemotingServer
from pyrmq.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE
from pyrmq.remoting.connection import Connection, answer, answer_later

log = logging.getLogger("pyrmq.proxy")

_opaques = itertools.count(1)


class ChannelClosed(Exception):
    """The client's channel closed while its request waited."""


class LocalChannel(Connection, ProxyChannel):
    """One gRPC client, as a connection the broker's processors answer on.
    Closing it is a connection closing for the broker (its producer and
    consumer tables let the client go)."""

    carries_frames = False

    def __init__(self, server: RemotingServer, client_id: str, peer: str) -> None:
        super().__init__(server.handle, name="proxy", on_close=server.connection_closed)
        self.client_id = client_id
        self.peer = peer
        #: with aclEnable, the proxy checked each request's 5.x signature
        #: and rights before it is handed over (auth.py): the broker's ACL
        #: hook lets it through
        self.attrs["acl_checked"] = True
        self._open = True
        self._answers: dict[int, asyncio.Future[RemotingCommand]] = {}
        #: what the broker tells the client (oneway requests), or None
        self.on_request: Callable[[RemotingCommand], None] | None = None
        #: what the broker asks the client and awaits (Connection.request:
        #: GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY), or None
        self.on_call: Callable[[RemotingCommand, float], Awaitable[RemotingCommand]] | None = None

    async def call_broker(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """cmd answered by the broker (the one of this process, whatever
        addr), as a remote client would get it."""
        if not self._open:
            raise ChannelClosed(f"the channel of client {self.client_id} is closed")
        opaque = cmd.opaque = next(_opaques) & 0x7FFFFFFF
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._answers[opaque] = fut
        try:
            result = answer(self._handler, self, cmd)
            if isinstance(result, RemotingCommand):
                return result
            if result is not None:
                got = await answer_later(self.name, cmd, result)
                if got is not None:
                    return got
            # the processor answers later by itself (send_soon)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._answers.pop(opaque, None)

    # -- what the broker writes to this "connection" ------------------------

    def send(self, cmd: RemotingCommand) -> None:
        if cmd.flag & FLAG_RESPONSE:
            fut = self._answers.get(cmd.opaque)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        self._request(cmd)

    def send_soon(self, cmd: RemotingCommand) -> None:
        self.send(cmd)

    def send_bytes(self, frame: bytes) -> None:
        raise RuntimeError("a proxy channel carries commands, not frames")

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        self._request(cmd)

    def _request(self, cmd: RemotingCommand) -> None:
        handler = self.on_request
        if handler is None:
            log.info(
                "proxy: request code %d for client %s, which has no telemetry stream",
                cmd.code,
                self.client_id,
            )
            return
        try:
            handler(cmd)
        except Exception:
            log.exception("proxy: passing request code %d to client %s", cmd.code, self.client_id)

    def request(self, cmd: RemotingCommand, timeout: float) -> asyncio.Future[RemotingCommand]:
        """The broker asks the client (the admin's consumerStatus...): the
        client's answer, over its Telemetry stream (clients.py)."""
        call = self.on_call
        if call is None or not self._open:
            fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
            fut.set_exception(
                RemotingError(f"5.x client {self.client_id} cannot be asked request {cmd.code}")
            )
            return fut
        return asyncio.ensure_future(call(cmd, timeout))

    def hold_reading(self, until: asyncio.Future[Any]) -> None:
        """Nothing to hold: each gRPC request awaits its own answer."""

    @property
    def is_open(self) -> bool:
        return self._open

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for fut in self._answers.values():
            if not fut.done():
                fut.set_exception(ChannelClosed(f"client {self.client_id} went away"))
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def abort(self, reason: str) -> None:
        log.info("proxy: closing the channel of client %s: %s", self.client_id, reason)
        self.close()
