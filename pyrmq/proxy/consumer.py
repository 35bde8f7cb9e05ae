"""The consuming RPCs of MessagingService over the broker's PopService
(pyrmq/broker/pop): QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, answered as
RocketMQ 5's proxy answers them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pyrmq.broker.pop import InvalidReceiptHandle, PopService
from pyrmq.broker.subscription_group import SubscriptionGroupConfig, check_group_name
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from pyrmq.common.errors import BrokerError
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import retry_topic
from pyrmq.proxy.convert import incoming
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import OK, duration_ms, pb, set_duration_ms, set_timestamp_ms, status

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker
    from pyrmq.proxy.clients import ClientRegistry
    from pyrmq.proxy.config import ProxyConfig

#: a receive without invisible_duration (a PushConsumer's): RocketMQ 5
#: proxy's default invisible time
DEFAULT_INVISIBLE_MS = 30_000
#: a receive's long polling when the request names none, and the most it
#: may ask (RocketMQ 5 proxy: 20 s, grpcClientConsumerMaxLongPollingTimeoutMillis)
DEFAULT_POLLING_MS = 20_000
MAX_POLLING_MS = 20_000
#: the most messages one receive hands out
MAX_BATCH = 32


class ConsumerRpcs:
    """Mixed into MessagingService (service.py)."""

    broker: Broker
    config: ProxyConfig
    clients: ClientRegistry

    def _topic(self, resource: Any) -> TopicConfig:
        raise NotImplementedError

    @property
    def _pop(self) -> PopService:
        pop = self.broker.pop
        if not pop.running:
            raise ProxyError(
                pb.Code.FORBIDDEN,
                f"broker {self.broker.config.broker_name} is a slave now: POP consumption is "
                "served by its master",
            )
        return pop

    def _group(self, resource: Any) -> SubscriptionGroupConfig:
        name = resource.name
        try:
            check_group_name(name)
        except BrokerError as e:
            raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, e.remark) from None
        sgc = self.broker.groups.find(name)
        if sgc is None:
            raise ProxyError(
                pb.Code.CONSUMER_GROUP_NOT_FOUND,
                f"consumer group {name!r} does not exist (autoCreateSubscriptionGroup is off: "
                "create it with updateSubGroup)",
            )
        if not sgc.consume_enable:
            raise ProxyError(pb.Code.FORBIDDEN, f"consumer group {name!r} may not consume now")
        return sgc

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """One assignment per broker, queue id -1: a POP consumer takes from
        every queue of the broker (RocketMQ 5's proxy answers so)."""
        try:
            self.clients.of(context)
            if not request.endpoints.addresses:
                raise ProxyError(pb.Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
            self._group(request.group)
            tc = self._topic(request.topic)
        except ProxyError as e:
            return pb.QueryAssignmentResponse(status=status(e.code, e.message))
        out = pb.QueryAssignmentResponse(status=status(OK))
        if tc.perm & PERM_READ and tc.read_queue_nums > 0:
            mq = out.assignments.add().message_queue
            mq.topic.name = tc.topic_name
            mq.id = -1
            mq.permission = pb.READ_WRITE if tc.perm & PERM_WRITE else pb.READ
            mq.broker.name = self.broker.config.broker_name
            mq.broker.endpoints.CopyFrom(request.endpoints)
        return out

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            self.clients.of(context)
            sgc = self._group(request.group)
            tc = self._topic(request.message_queue.topic)
            sub = filter_subscription(tc.topic_name, request.filter_expression)
            invisible = (
                duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration")
                else DEFAULT_INVISIBLE_MS
            )
            try:
                self._pop.check_invisible(invisible)
            except ValueError as e:
                raise ProxyError(pb.Code.ILLEGAL_INVISIBLE_TIME, str(e)) from None
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
            popped = await self._receive(
                sgc.group_name, tc, sub, batch, invisible, polling, context
            )
        except ProxyError as e:
            yield pb.ReceiveMessageResponse(status=status(e.code, e.message))
            return
        if not popped:
            yield pb.ReceiveMessageResponse(
                status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield pb.ReceiveMessageResponse(status=status(OK))
        stamp = pb.ReceiveMessageResponse()
        set_timestamp_ms(stamp.delivery_timestamp, int(time.time() * 1000))
        yield stamp
        for p in popped:
            msg = incoming(p.message, topic=p.topic)
            sp = msg.system_properties
            sp.receipt_handle = p.handle
            set_duration_ms(sp.invisible_duration, invisible)
            yield pb.ReceiveMessageResponse(message=msg)

    async def _receive(
        self,
        group: str,
        tc: TopicConfig,
        sub: SubscriptionData,
        batch: int,
        invisible: int,
        polling_ms: int,
        context: Any,
    ) -> list[Any]:
        left = context.time_remaining()
        budget = polling_ms / 1000
        if left is not None:
            # answer before the client's own deadline, as the proxy does
            budget = min(budget, max(left - 1.0, 0.0))
        deadline = time.monotonic() + budget
        topics = [tc.topic_name, retry_topic(group)]
        while True:
            popped = self._pop.pop(group, tc.topic_name, sub, batch, invisible)
            left = deadline - time.monotonic()
            if popped or left <= 0:
                return popped
            await self._pop.wait_arrival(topics, left)

    async def AckMessage(self, request: Any, context: Any) -> Any:
        try:
            self.clients.of(context)
            group = self._group(request.group).group_name
            topic = self._topic(request.topic).topic_name
            pop = self._pop
        except ProxyError as e:
            return pb.AckMessageResponse(status=status(e.code, e.message))
        out = pb.AckMessageResponse()
        codes = set()
        for entry in request.entries:
            result = out.entries.add(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle
            )
            try:
                pop.ack(group, topic, entry.receipt_handle)
                result.status.CopyFrom(status(OK))
            except InvalidReceiptHandle as e:
                result.status.CopyFrom(status(pb.Code.INVALID_RECEIPT_HANDLE, str(e)))
            except BrokerError as e:
                result.status.CopyFrom(status(pb.Code.INTERNAL_SERVER_ERROR, e.remark))
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
            self.clients.of(context)
            group = self._group(request.group).group_name
            topic = self._topic(request.topic).topic_name
            ms = duration_ms(request.invisible_duration)
            try:
                self._pop.check_invisible(ms)
            except ValueError as e:
                raise ProxyError(pb.Code.ILLEGAL_INVISIBLE_TIME, str(e)) from None
            try:
                handle = self._pop.change_invisible(group, topic, request.receipt_handle, ms)
            except InvalidReceiptHandle as e:
                raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        except ProxyError as e:
            return pb.ChangeInvisibleDurationResponse(status=status(e.code, e.message))
        return pb.ChangeInvisibleDurationResponse(status=status(OK), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        """The client gave up on a message (its max attempts): into
        %DLQ%<group>, and acked."""
        try:
            self.clients.of(context)
            group = self._group(request.group).group_name
            topic = self._topic(request.topic).topic_name
            try:
                self._pop.dead_letter(group, topic, request.receipt_handle)
            except InvalidReceiptHandle as e:
                raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, str(e)) from None
        except ProxyError as e:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(e.code, e.message))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status(OK))


def filter_subscription(topic: str, expr: Any) -> SubscriptionData:
    kind = "SQL92" if expr.type == pb.SQL else "TAG"
    try:
        return SubscriptionData.parse(topic, expr.expression or "*", 0, kind)
    except BrokerError as e:
        raise ProxyError(pb.Code.ILLEGAL_FILTER_EXPRESSION, e.remark) from None
