"""MessagingService: RocketMQ 5's gRPC API over the broker in this process.

Each RPC is turned into what the broker already serves: a send into
SEND_MESSAGE, an EndTransaction into END_TRANSACTION, a producer's Settings
into its registration in the broker's producer table (so the transaction
check-back finds it and asks over its Telemetry stream). Answers carry a
``Status`` as RocketMQ 5's proxy writes them; the gRPC call itself fails
only for a request that cannot be read (INVALID_ARGUMENT) or a client that
sent no ``x-mq-client-id`` where one is needed."""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from pyrmq.proxy.channel import ChannelClosed
from pyrmq.proxy.clients import ClientRegistry, GrpcClient
from pyrmq.proxy.config import ProxyConfig
from pyrmq.proxy.convert import outgoing, parse_transaction_id, send_header, transaction_id
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.offsets import OffsetRpcs
from pyrmq.proxy.protocol import OK, pb, status
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker

log = logging.getLogger("pyrmq.proxy")

#: a 4.x answer code as the 5.x status a client gets (RocketMQ 5 proxy's
#: ResponseCode -> Code mapping for sends and transactions)
_CODES: dict[int, int] = {
    ResponseCode.SUCCESS: pb.Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.Code.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.Code.TOPIC_NOT_FOUND,
    ResponseCode.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: pb.Code.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: pb.Code.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.Code.PROXY_TIMEOUT,
}

_MESSAGE_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def code_of(response: RemotingCommand) -> int:
    return _CODES.get(response.code, pb.Code.INTERNAL_SERVER_ERROR)


def accept_types(tc: TopicConfig) -> list[int]:
    """The 5.x message types a topic takes, by its message.type attribute
    (NORMAL when it has none, as RocketMQ 5 reads it)."""
    return _MESSAGE_TYPES.get(tc.message_type, [pb.MESSAGE_TYPE_UNSPECIFIED])


class MessagingService(OffsetRpcs):
    """One method per RPC, by its name (server.handlers maps them); the
    consuming ones are in consumer.py, the pull consumers' in offsets.py."""

    def __init__(self, broker: Broker, config: ProxyConfig) -> None:
        self.broker = broker
        self.config = config
        self.clients = ClientRegistry(broker, config)

    # -- helpers ------------------------------------------------------------

    def _client(self, context: grpc.aio.ServicerContext) -> GrpcClient:
        return self.clients.of(context)

    def _topic(self, resource: Any) -> TopicConfig:
        name = resource.name
        if not name:
            raise ProxyError(pb.Code.ILLEGAL_TOPIC, "topic name cannot be empty")
        tc = self.broker.topics.get(name)
        if tc is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        return tc

    def _queue(self, tc: TopicConfig, qid: int, endpoints: Any) -> Any:
        mq = pb.MessageQueue()
        mq.topic.name = tc.topic_name
        mq.id = qid
        read = tc.perm & PERM_READ and qid < tc.read_queue_nums
        write = tc.perm & PERM_WRITE and qid < tc.write_queue_nums
        mq.permission = (
            pb.READ_WRITE if read and write else pb.READ if read else pb.WRITE if write else pb.NONE
        )
        mq.broker.name = self.broker.config.broker_name
        mq.broker.id = 0
        mq.broker.endpoints.CopyFrom(endpoints)
        mq.accept_message_types.extend(accept_types(tc))
        return mq

    # -- route and clients --------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            if not request.endpoints.addresses:
                raise ProxyError(pb.Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
            tc = self._topic(request.topic)
            queues = [self._queue(tc, q, request.endpoints) for q in range(tc.queue_nums)]
        except ProxyError as e:
            return pb.QueryRouteResponse(status=status(e.code, e.message))
        return pb.QueryRouteResponse(status=status(OK), message_queues=queues)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            self._client(context).heartbeat(request)
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
        try:
            while True:
                getter = asyncio.ensure_future(out.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                break
        finally:
            reader.cancel()
            client.close_telemetry(out)

    async def _read_telemetry(self, client: GrpcClient, commands: AsyncIterator[Any]) -> None:
        async for cmd in commands:
            which = cmd.WhichOneof("command")
            if which == "settings":
                client.send_telemetry(self.clients.settings_answer(client, cmd.settings))
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
        tc = self._topic(first)
        writable = [q for q in range(tc.write_queue_nums)] if tc.perm & PERM_WRITE else []
        if not writable:
            raise ProxyError(pb.Code.FORBIDDEN, f"topic {tc.topic_name!r} takes no writes")
        cfg = self.config
        outs = [
            outgoing(m, max_body=cfg.max_message_size, max_delay_ms=cfg.max_delay_ms)
            for m in request.messages
        ]
        allowed = accept_types(tc)
        for o in outs:
            if cfg.topic_message_type_check and o.message_type not in allowed:
                raise ProxyError(
                    pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"current message type {pb.MessageType.Name(o.message_type)} does not match "
                    f"topic {tc.topic_name}'s message.type "
                    f"{'/'.join(pb.MessageType.Name(t) for t in allowed)}",
                )
        entries = []
        for o in outs:
            if o.message_group and len(outs) == 1:
                # one group, one queue: FIFO order is per queue
                qid = writable[_group_hash(o.message_group) % len(writable)]
            else:
                qid = random.choice(writable)
            cmd = RemotingCommand(RequestCode.SEND_MESSAGE, send_header(o, qid), o.body)
            try:
                resp = await client.channel.call_broker(cmd, cfg.request_timeout)
            except (TimeoutError, ChannelClosed) as e:
                entries.append(
                    pb.SendResultEntry(status=status(pb.Code.PROXY_TIMEOUT, f"send: {e}"))
                )
                continue
            code = code_of(resp)
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
            tc = self._topic(request.topic)
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise ProxyError(pb.Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            clog, table, offset_id = parse_transaction_id(request.transaction_id)
            header = {
                "producerGroup": tc.topic_name,
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
            try:
                resp = await client.channel.call_broker(cmd, self.config.request_timeout)
            except (TimeoutError, ChannelClosed) as e:
                raise ProxyError(pb.Code.PROXY_TIMEOUT, f"end transaction: {e}") from None
            if resp.code != ResponseCode.SUCCESS:
                raise ProxyError(
                    pb.Code.INVALID_TRANSACTION_ID
                    if resp.code == ResponseCode.SYSTEM_ERROR
                    else code_of(resp),
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
