"""GrpcProxy: the gRPC server of RocketMQ 5's MessagingService (grpc.aio),
over a Backend: inside the broker's event loop in local mode, in a process
of its own in cluster mode (backend.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from pyrmq.acl import PlainAccessValidator
from pyrmq.common.errors import ClientError
from pyrmq.proxy import auth
from pyrmq.proxy.backend import Backend
from pyrmq.proxy.config import ProxyConfig
from pyrmq.proxy.protocol import SERVICE, pb
from pyrmq.proxy.service import MessagingService

log = logging.getLogger("pyrmq.proxy")

#: how often idle clients are dropped (seconds)
SWEEP_INTERVAL = 10.0
#: the largest request a client may send: a send of a 4 MB body with room
#: for its properties (gRPC's own default is 4 MB)
MAX_RECEIVE = 8 * 1024 * 1024


def handlers(service: object, acl: PlainAccessValidator | None = None) -> grpc.GenericRpcHandler:
    """The gRPC method handlers of service's RPCs (a method named as each
    RPC of MessagingService; an RPC it lacks is UNIMPLEMENTED).

    Requests arrive as bytes and are parsed here, not by gRPC, so a request
    that is not the protobuf its RPC takes is INVALID_ARGUMENT with what
    failed, where gRPC's own parsing would answer INTERNAL; an unexpected
    error in a handler is logged and answered INTERNAL with its text."""
    table: dict[str, grpc.RpcMethodHandler] = {}
    for m in pb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        impl = getattr(service, m.name, None)
        if impl is None:
            continue
        request_type = getattr(pb, m.input_type.name)
        out = getattr(pb, m.output_type.name).SerializeToString
        response_type = getattr(pb, m.output_type.name)
        if acl is not None and not m.client_streaming:
            impl = _checked(impl, acl, m.name, response_type, m.server_streaming)
        if m.client_streaming:
            # Telemetry: its first command carries the signed metadata of
            # the call itself; checked when the stream opens
            if acl is not None:
                impl = _checked_stream(impl, acl, m.name, response_type)
            table[m.name] = grpc.stream_stream_rpc_method_handler(
                _stream_stream(impl, request_type, m.name), response_serializer=out
            )
        elif m.server_streaming:
            table[m.name] = grpc.unary_stream_rpc_method_handler(
                _unary_stream(impl, request_type, m.name), response_serializer=out
            )
        else:
            table[m.name] = grpc.unary_unary_rpc_method_handler(
                _unary_unary(impl, request_type, m.name), response_serializer=out
            )
    return grpc.method_handlers_generic_handler(SERVICE, table)


def _checked(
    impl: Any, acl: PlainAccessValidator, name: str, response_type: Any, streaming: bool
) -> Any:
    """impl behind the ACL check (auth.py): a refused request gets the
    RPC's response with the refusal's Status."""
    if streaming:

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            refused = auth.check(acl, name, request, context)
            if refused is not None:
                yield response_type(status=refused)
                return
            async for item in impl(request, context):
                yield item

        return stream

    async def unary(request: Any, context: Any) -> Any:
        refused = auth.check(acl, name, request, context)
        if refused is not None:
            return response_type(status=refused)
        return await impl(request, context)

    return unary


def _checked_stream(impl: Any, acl: PlainAccessValidator, name: str, response_type: Any) -> Any:
    async def stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        refused = auth.check(acl, name, None, context)
        if refused is not None:
            yield response_type(status=refused)
            return
        async for item in impl(requests, context):
            yield item

    return stream


async def _parse(request_type: Any, raw: bytes, name: str, context: Any) -> Any:
    try:
        return request_type.FromString(raw)
    except DecodeError as e:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{name}: the request is not a valid {request_type.DESCRIPTOR.full_name}: {e}",
        )


async def _failed(name: str, context: Any, e: Exception) -> None:
    log.exception("proxy: %s failed", name)
    await context.abort(grpc.StatusCode.INTERNAL, f"{name}: {type(e).__name__}: {e}")


def _unary_unary(impl: Any, request_type: Any, name: str) -> Any:
    async def handle(raw: bytes, context: Any) -> Any:
        request = await _parse(request_type, raw, name, context)
        try:
            return await impl(request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:
            await _failed(name, context, e)

    return handle


def _unary_stream(impl: Any, request_type: Any, name: str) -> Any:
    async def handle(raw: bytes, context: Any) -> AsyncIterator[Any]:
        request = await _parse(request_type, raw, name, context)
        try:
            async for item in impl(request, context):
                yield item
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:
            await _failed(name, context, e)

    return handle


def _stream_stream(impl: Any, request_type: Any, name: str) -> Any:
    async def handle(raws: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            async for raw in raws:
                yield await _parse(request_type, raw, name, context)

        try:
            async for item in impl(requests(), context):
                yield item
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:
            await _failed(name, context, e)

    return handle


class GrpcProxy:
    """`await proxy.start()` listens on config.grpc_server_port (0: any;
    the port taken is `port`); `await proxy.shutdown()`."""

    def __init__(self, backend: Backend, config: ProxyConfig) -> None:
        self.backend = backend
        self.config = config
        self.service = MessagingService(backend, config)
        self.port = config.grpc_server_port
        self._server: grpc.aio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE),
                ("grpc.so_reuseport", 0),
            ]
        )
        await self.backend.start()
        server.add_generic_rpc_handlers((handlers(self.service, self.backend.acl),))
        addr = f"{self.config.listen_host}:{self.config.grpc_server_port}"
        if not 0 <= self.config.grpc_server_port <= 65535:
            raise ClientError(
                f"grpcServerPort {self.config.grpc_server_port} is not a port (0-65535)"
            )
        try:
            port = server.add_insecure_port(addr)
        except RuntimeError as e:
            raise ClientError(f"the gRPC proxy cannot listen on {addr}: {e}") from None
        if port == 0:
            raise ClientError(f"the gRPC proxy cannot listen on {addr} (in use?)")
        self.port = port
        await server.start()
        self._server = server
        self._sweeper = asyncio.get_running_loop().create_task(
            self._sweep(), name="pyrmq:proxy:sweep"
        )
        log.info(
            "proxy: gRPC MessagingService on %s:%d (%s mode)",
            self.config.listen_host,
            port,
            self.backend.mode,
        )

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            self.service.clients.sweep()

    async def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=1.0)
        self.service.clients.close_all()
        await self.backend.shutdown()
