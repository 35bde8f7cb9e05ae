"""The consuming RPCs of MessagingService over the brokers' POP requests
(pyrmq/broker/processor/pop.py: POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, and CONSUMER_SEND_MSG_BACK with a receipt
handle for the DLQ): QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, answered as
RocketMQ 5's proxy answers them.

A receipt handle names the broker that gave it (pyrmq/broker/pop/receipt.py),
so an ack goes back to that broker."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pyrmq.broker.pop import InvalidReceiptHandle
from pyrmq.broker.pop.receipt import Receipt, decode
from pyrmq.broker.processor.pop import MAX_BATCH
from pyrmq.broker.processor.pop import MAX_POLL_MS as MAX_POLLING_MS
from pyrmq.broker.subscription_group import SubscriptionGroupConfig
from pyrmq.common.errors import BrokerError
from pyrmq.common.message import PROPERTY_POP_CK, decode_messages
from pyrmq.common.subscription import SubscriptionData
from pyrmq.proxy.backend import TopicView, check_names
from pyrmq.proxy.convert import incoming
from pyrmq.proxy.errors import ProxyError, code_of
from pyrmq.proxy.protocol import OK, duration_ms, pb, set_duration_ms, set_timestamp_ms, status
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.proxy.backend import Backend
    from pyrmq.proxy.clients import ClientRegistry, GrpcClient
    from pyrmq.proxy.config import ProxyConfig

#: a receive without invisible_duration (a PushConsumer's): RocketMQ 5
#: proxy's default invisible time
DEFAULT_INVISIBLE_MS = 30_000
#: a receive's long polling when the request names none (RocketMQ 5 proxy:
#: 20 s); the most it may ask and the most messages one receive hands out
#: are the brokers' POP limits (MAX_POLL_MS, MAX_BATCH)
DEFAULT_POLLING_MS = MAX_POLLING_MS

#: a POP that found nothing in its polling time
_NOT_FOUND = (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT)


class ConsumerRpcs:
    """Mixed into MessagingService (service.py)."""

    backend: Backend
    config: ProxyConfig
    clients: ClientRegistry
    _brokers = itertools.count()

    async def _topic(self, resource: Any) -> TopicView:
        raise NotImplementedError

    async def _call(
        self, client: GrpcClient, addr: str, cmd: RemotingCommand, what: str, timeout: float = 0
    ) -> RemotingCommand:
        raise NotImplementedError

    async def _group(self, resource: Any, view: TopicView | None = None) -> SubscriptionGroupConfig:
        check_names(group=resource.name)
        return await self.backend.group(resource.name, view)

    def _polling_budget(self, polling_ms: int, context: Any) -> float:
        """Seconds a long poll may wait: answered before the client's own
        deadline, as the proxy does."""
        left = context.time_remaining()
        budget = polling_ms / 1000
        return budget if left is None else min(budget, max(left - 1.0, 0.0))

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """One assignment per broker, queue id -1: a POP consumer takes from
        every queue of the broker (RocketMQ 5's proxy answers so)."""
        try:
            self.clients.of(context)
            if not request.endpoints.addresses:
                raise ProxyError(pb.Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
            view = await self._topic(request.topic)
            await self._group(request.group, view)
        except ProxyError as e:
            return pb.QueryAssignmentResponse(status=status(e.code, e.message))
        out = pb.QueryAssignmentResponse(status=status(OK))
        for name, (_, writable) in sorted(view.readable_brokers().items()):
            mq = out.assignments.add().message_queue
            mq.topic.name = view.name
            mq.id = -1
            mq.permission = pb.READ_WRITE if writable else pb.READ
            mq.broker.name = name
            mq.broker.endpoints.CopyFrom(request.endpoints)
        return out

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            client = self.clients.of(context)
            view = await self._topic(request.message_queue.topic)
            sgc = await self._group(request.group, view)
            sub = filter_subscription(view.name, request.filter_expression)
            invisible = (
                duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration")
                else DEFAULT_INVISIBLE_MS
            )
            batch = request.batch_size
            if not 0 < batch <= MAX_BATCH:
                raise ProxyError(pb.Code.BAD_REQUEST, f"batch_size must be 1..{MAX_BATCH}")
            polling = (
                duration_ms(request.long_polling_timeout)
                if request.HasField("long_polling_timeout")
                else DEFAULT_POLLING_MS
            )
            if not 0 <= polling <= MAX_POLLING_MS:
                raise ProxyError(
                    pb.Code.ILLEGAL_POLLING_TIME,
                    f"long_polling_timeout must be 0..{MAX_POLLING_MS} ms",
                )
            brokers = view.readable_brokers()
            if not brokers:
                raise ProxyError(pb.Code.FORBIDDEN, f"topic {view.name!r} has no readable queue")
            name = request.message_queue.broker.name
            if name not in brokers:
                # a queue of no known broker: any readable one, in turn
                name = sorted(brokers)[next(self._brokers) % len(brokers)]
            budget = self._polling_budget(polling, context)
            header = {
                "consumerGroup": sgc.group_name,
                "topic": view.name,
                "queueId": "-1",
                "maxMsgNums": str(batch),
                "invisibleTime": str(invisible),
                "pollTime": str(int(budget * 1000)),
                "bornTime": str(int(time.time() * 1000)),
                "initMode": "1",  # ConsumeInitMode.MAX: a new group starts at the end
                "expType": sub.expression_type,
                "exp": sub.sub_string,
                "order": str(sgc.orderly).lower(),
            }
            cmd = RemotingCommand(RequestCode.POP_MESSAGE, header)
            resp = await self._call(
                client, brokers[name][0], cmd, "receive", budget + self.config.request_timeout
            )
            if resp.code == ResponseCode.INVALID_PARAMETER:
                raise ProxyError(pb.Code.ILLEGAL_INVISIBLE_TIME, resp.remark or "invisible time")
            if resp.code not in (ResponseCode.SUCCESS, *_NOT_FOUND):
                raise ProxyError(code_of(resp.code), f"receive: {resp.remark}")
        except ProxyError as e:
            yield pb.ReceiveMessageResponse(status=status(e.code, e.message))
            return
        found = decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []
        if not found:
            yield pb.ReceiveMessageResponse(
                status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield pb.ReceiveMessageResponse(status=status(OK))
        stamp = pb.ReceiveMessageResponse()
        set_timestamp_ms(stamp.delivery_timestamp, int(time.time() * 1000))
        yield stamp
        for m in found:
            handle = m.properties.pop(PROPERTY_POP_CK, "")
            msg = incoming(m)
            sp = msg.system_properties
            sp.receipt_handle = handle
            set_duration_ms(sp.invisible_duration, invisible)
            yield pb.ReceiveMessageResponse(message=msg)

    async def _receipt_call(
        self, client: GrpcClient, view: TopicView, handle: str, code: int, header: dict[str, str]
    ) -> RemotingCommand:
        """A request about one received message, to the broker that gave
        its receipt handle; INVALID_RECEIPT_HANDLE when the handle is not
        one, or its checkpoint is gone."""
        try:
            r: Receipt = decode(handle)
        except InvalidReceiptHandle as e:
            raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        addr = next((q.addr for q in view.queues if q.broker_name == r.broker_name), None)
        if addr is None:
            raise ProxyError(
                pb.Code.INVALID_RECEIPT_HANDLE,
                f"receipt handle of broker {r.broker_name!r}, which has no queue of {view.name}",
            )
        header.update(queueId=str(r.queue_id), offset=str(r.offset), extraInfo=handle)
        resp = await self._call(client, addr, RemotingCommand(code, header), "receipt handle")
        if resp.code == ResponseCode.INVALID_PARAMETER:
            raise ProxyError(pb.Code.ILLEGAL_INVISIBLE_TIME, resp.remark or "invisible time")
        if resp.code != ResponseCode.SUCCESS:
            raise ProxyError(code_of(resp.code), resp.remark or f"response code {resp.code}")
        return resp

    async def AckMessage(self, request: Any, context: Any) -> Any:
        try:
            client = self.clients.of(context)
            view = await self._topic(request.topic)
            group = (await self._group(request.group, view)).group_name
        except ProxyError as e:
            return pb.AckMessageResponse(status=status(e.code, e.message))
        out = pb.AckMessageResponse()
        codes = set()
        for entry in request.entries:
            result = out.entries.add(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle
            )
            header = {"consumerGroup": group, "topic": view.name}
            try:
                await self._receipt_call(
                    client, view, entry.receipt_handle, RequestCode.ACK_MESSAGE, header
                )
                result.status.CopyFrom(status(OK))
            except ProxyError as e:
                result.status.CopyFrom(status(e.code, e.message))
            codes.add(result.status.code)
        if not request.entries:
            out.status.CopyFrom(status(pb.Code.BAD_REQUEST, "no entry to ack"))
        elif len(codes) == 1:
            only = out.entries[0].status if len(request.entries) == 1 else status(codes.pop())
            out.status.CopyFrom(only)
        else:
            out.status.CopyFrom(status(pb.Code.MULTIPLE_RESULTS))
        return out

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        try:
            client = self.clients.of(context)
            view = await self._topic(request.topic)
            group = (await self._group(request.group, view)).group_name
            ms = duration_ms(request.invisible_duration)
            header = {"consumerGroup": group, "topic": view.name, "invisibleTime": str(ms)}
            resp = await self._receipt_call(
                client,
                view,
                request.receipt_handle,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                header,
            )
            handle = resp.ext_fields.get("extraInfo", "")
        except ProxyError as e:
            return pb.ChangeInvisibleDurationResponse(status=status(e.code, e.message))
        return pb.ChangeInvisibleDurationResponse(status=status(OK), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        """The client gave up on a message (its max attempts): into
        %DLQ%<group>, and acked (CONSUMER_SEND_MSG_BACK, delay level -1,
        naming the message by its receipt handle)."""
        try:
            client = self.clients.of(context)
            view = await self._topic(request.topic)
            group = (await self._group(request.group, view)).group_name
            header = {
                "group": group,
                "originTopic": view.name,
                "originMsgId": request.message_id,
                "delayLevel": "-1",
                "maxReconsumeTimes": str(request.max_delivery_attempts),
            }
            await self._receipt_call(
                client, view, request.receipt_handle, RequestCode.CONSUMER_SEND_MSG_BACK, header
            )
        except ProxyError as e:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(e.code, e.message))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status(OK))


def filter_subscription(topic: str, expr: Any) -> SubscriptionData:
    kind = "SQL92" if expr.type == pb.SQL else "TAG"
    try:
        return SubscriptionData.parse(topic, expr.expression or "*", 0, kind)
    except BrokerError as e:
        raise ProxyError(pb.Code.ILLEGAL_FILTER_EXPRESSION, e.remark) from None
