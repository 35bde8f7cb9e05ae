"""MessagingService: RocketMQ 5's gRPC API over the brokers of a Backend
(backend.py: the broker of this process, or a cluster's).

Each RPC is turned into what the brokers already serve: a send into
SEND_MESSAGE to a broker of the topic, an EndTransaction into
END_TRANSACTION to the broker that holds the half message, a producer's
Settings into its HEART_BEAT (so the transaction check-back finds it and
asks over its Telemetry stream). Answers carry a
``Status`` as RocketMQ 5's proxy writes them; the gRPC call itself fails
only for a request that cannot be read (INVALID_ARGUMENT) or a client that
sent no ``x-mq-client-id`` where one is needed."""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from pyrmq.common.errors import RemotingError
from pyrmq.common.message import decode_offset_msg_id
from pyrmq.proxy.backend import Backend, QueueRef, TopicView, check_names
from pyrmq.proxy.channel import ChannelClosed
from pyrmq.proxy.clients import ClientRegistry, GrpcClient
from pyrmq.proxy.config import ProxyConfig
from pyrmq.proxy.convert import outgoing, parse_transaction_id, send_header, transaction_id
from pyrmq.proxy.errors import ProxyError, code_of
from pyrmq.proxy.offsets import OffsetRpcs
from pyrmq.proxy.protocol import OK, pb, status
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("pyrmq.proxy")

_MESSAGE_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def accept_types(message_type: str) -> list[int]:
    """The 5.x message types a topic takes, by its message.type attribute
    (NORMAL when it has none, as RocketMQ 5 reads it; any when the brokers
    do not say)."""
    return _MESSAGE_TYPES.get(message_type or "MIXED", [pb.MESSAGE_TYPE_UNSPECIFIED])


class MessagingService(OffsetRpcs):
    """One method per RPC, by its name (server.handlers maps them); the
    consuming ones are in consumer.py, the pull consumers' in offsets.py."""

    def __init__(self, backend: Backend, config: ProxyConfig) -> None:
        self.backend = backend
        self.config = config
        self.clients = ClientRegistry(backend, config)

    # -- helpers ------------------------------------------------------------

    def _client(self, context: grpc.aio.ServicerContext) -> GrpcClient:
        return self.clients.of(context)

    async def _topic(self, resource: Any) -> TopicView:
        check_names(topic=resource.name)
        return await self.backend.topic(resource.name)

    async def _call(
        self, client: GrpcClient, addr: str, cmd: RemotingCommand, what: str, timeout: float = 0
    ) -> RemotingCommand:
        """cmd answered by the broker at addr on the client's channel; a
        broker that does not answer is PROXY_TIMEOUT."""
        try:
            return await client.channel.call_broker(
                addr, cmd, timeout or self.config.request_timeout
            )
        except (TimeoutError, ChannelClosed, RemotingError) as e:
            raise ProxyError(pb.Code.PROXY_TIMEOUT, f"{what}: broker {addr}: {e}") from None

    def _queue(self, view: TopicView, q: QueueRef, endpoints: Any) -> Any:
        mq = pb.MessageQueue()
        mq.topic.name = view.name
        mq.id = q.queue_id
        mq.permission = (
            pb.READ_WRITE
            if q.readable and q.writable
            else pb.READ
            if q.readable
            else pb.WRITE
            if q.writable
            else pb.NONE
        )
        mq.broker.name = q.broker_name
        mq.broker.id = 0
        mq.broker.endpoints.CopyFrom(endpoints)
        mq.accept_message_types.extend(accept_types(view.message_type))
        return mq

    # -- route and clients --------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            if not request.endpoints.addresses:
                raise ProxyError(pb.Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
            view = await self._topic(request.topic)
            queues = [self._queue(view, q, request.endpoints) for q in view.queues]
        except ProxyError as e:
            return pb.QueryRouteResponse(status=status(e.code, e.message))
        return pb.QueryRouteResponse(status=status(OK), message_queues=queues)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            await self._client(context).heartbeat()
        except ProxyError as e:
            return pb.HeartbeatResponse(status=status(e.code, e.message))
        return pb.HeartbeatResponse(status=status(OK))

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        self.clients.terminated(context)
        return pb.NotifyClientTerminationResponse(status=status(OK))

    async def Telemetry(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        try:
            client = self._client(context)
        except ProxyError as e:
            yield pb.TelemetryCommand(status=status(e.code, e.message))
            return
        out = client.open_telemetry()
        reader = asyncio.ensure_future(self._read_telemetry(client, request_iterator))
        getter: asyncio.Future[Any] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(out.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                break
        finally:
            # the stream ended or was cancelled: neither wait is left pending
            if getter is not None:
                getter.cancel()
            reader.cancel()
            client.close_telemetry(out)

    async def _read_telemetry(self, client: GrpcClient, commands: AsyncIterator[Any]) -> None:
        async for cmd in commands:
            which = cmd.WhichOneof("command")
            if which == "settings":
                client.send_telemetry(await self.clients.settings_answer(client, cmd.settings))
            elif which == "thread_stack_trace":
                client.answered(cmd.thread_stack_trace.nonce, cmd.thread_stack_trace)
            elif which == "verify_message_result":
                client.answered(cmd.verify_message_result.nonce, cmd)
            else:
                client.send_telemetry(
                    pb.TelemetryCommand(
                        status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE, f"unexpected {which}")
                    )
                )

    # -- producing ----------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        try:
            client = self._client(context)
            entries = await self._send(client, request)
        except ProxyError as e:
            return pb.SendMessageResponse(status=status(e.code, e.message))
        codes = {e.status.code for e in entries}
        top = (
            status(codes.pop())
            if len(codes) == 1
            else status(pb.Code.MULTIPLE_RESULTS)
            if codes
            else status(pb.Code.INTERNAL_SERVER_ERROR, "send status is empty")
        )
        if len(entries) == 1 and entries[0].status.code != OK:
            top = entries[0].status
        return pb.SendMessageResponse(status=top, entries=entries)

    async def _send(self, client: GrpcClient, request: Any) -> list[Any]:
        if not request.messages:
            raise ProxyError(pb.Code.MESSAGE_CORRUPTED, "no message to send")
        first = request.messages[0].topic
        if any(m.topic != first for m in request.messages):
            raise ProxyError(pb.Code.MESSAGE_CORRUPTED, "topic in message is not same")
        view = await self._topic(first)
        writable = view.writable()
        if not writable:
            raise ProxyError(pb.Code.FORBIDDEN, f"topic {view.name!r} takes no writes")
        cfg = self.config
        outs = [
            outgoing(m, max_body=cfg.max_message_size, max_delay_ms=cfg.max_delay_ms)
            for m in request.messages
        ]
        allowed = accept_types(view.message_type)
        for o in outs:
            if cfg.topic_message_type_check and o.message_type not in allowed:
                raise ProxyError(
                    pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"current message type {pb.MessageType.Name(o.message_type)} does not match "
                    f"topic {view.name}'s message.type "
                    f"{'/'.join(pb.MessageType.Name(t) for t in allowed)}",
                )
        entries = []
        for o in outs:
            if o.message_group and len(outs) == 1:
                # one group, one queue: FIFO order is per queue
                q = writable[_group_hash(o.message_group) % len(writable)]
            else:
                q = random.choice(writable)
            cmd = RemotingCommand(RequestCode.SEND_MESSAGE, send_header(o, q.queue_id), o.body)
            try:
                resp = await self._call(client, q.addr, cmd, "send")
            except ProxyError as e:
                entries.append(pb.SendResultEntry(status=status(e.code, e.message)))
                continue
            code = code_of(resp.code)
            if code != OK:
                entries.append(
                    pb.SendResultEntry(status=status(code, resp.remark or pb.Code.Name(code)))
                )
                continue
            f = resp.ext_fields
            entry = pb.SendResultEntry(
                status=status(OK),
                message_id=o.message_id,
                offset=int(f.get("queueOffset", 0)),
            )
            if o.message_type == pb.TRANSACTION:
                entry.transaction_id = transaction_id(f)
            entries.append(entry)
        return entries

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        try:
            client = self._client(context)
            view = await self._topic(request.topic)
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise ProxyError(pb.Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            clog, table, offset_id = parse_transaction_id(request.transaction_id)
            try:
                # the broker that stored the half message: its offset id's host
                addr = decode_offset_msg_id(offset_id)[0]
            except ValueError as e:
                raise ProxyError(
                    pb.Code.INVALID_TRANSACTION_ID,
                    f"transaction id {request.transaction_id[:100]!r}: {e}",
                ) from None
            header = {
                "producerGroup": view.name,
                "tranStateTableOffset": str(table),
                "commitLogOffset": str(clog),
                "commitOrRollback": "8" if request.resolution == pb.COMMIT else "12",
                "fromTransactionCheck": (
                    "true" if request.source == pb.SOURCE_SERVER_CHECK else "false"
                ),
                "msgId": offset_id,
                "transactionId": request.message_id,
            }
            cmd = RemotingCommand(RequestCode.END_TRANSACTION, header)
            resp = await self._call(client, addr, cmd, "end transaction")
            if resp.code != ResponseCode.SUCCESS:
                raise ProxyError(
                    pb.Code.INVALID_TRANSACTION_ID
                    if resp.code == ResponseCode.SYSTEM_ERROR
                    else code_of(resp.code),
                    resp.remark or "the broker refused the transaction's end",
                )
        except ProxyError as e:
            return pb.EndTransactionResponse(status=status(e.code, e.message))
        return pb.EndTransactionResponse(status=status(OK))

    # -- not served yet -----------------------------------------------------

    async def _not_implemented(self, response_type: Any, what: str) -> Any:
        return response_type(status=status(pb.Code.NOT_IMPLEMENTED, f"{what} is not served yet"))

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return await self._not_implemented(pb.RecallMessageResponse, "RecallMessage")


def _group_hash(group: str) -> int:
    """A message group's queue index seed: stable across processes (not
    Python's salted hash), so one group always lands on one queue."""
    return zlib.crc32(group.encode())
