"""The pull consumers' RPCs of MessagingService (5.x PullConsumer /
LitePullConsumer): PullMessage at an offset of one queue, and the group's
offsets (UpdateOffset, GetOffset) and the queue's (QueryOffset), as the
PULL_MESSAGE, UPDATE/QUERY_CONSUMER_OFFSET, GET_MIN/MAX_OFFSET and
SEARCH_OFFSET_BY_TIMESTAMP a 4.x client sends (pyrmq/client/api.py), to
the broker of the queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.common.message import MessageQueue
from pyrmq.common.results import PullStatus
from pyrmq.proxy.backend import QueueRef, TopicView
from pyrmq.proxy.channel import ChannelClosed
from pyrmq.proxy.clients import GrpcClient
from pyrmq.proxy.consumer import MAX_BATCH, MAX_POLLING_MS, ConsumerRpcs, filter_subscription
from pyrmq.proxy.convert import incoming
from pyrmq.proxy.errors import ProxyError, from_broker
from pyrmq.proxy.protocol import OK, duration_ms, pb, status, timestamp_ms

#: what a broker's failure to answer is for the client
_UNREACHED = (TimeoutError, ChannelClosed, RemotingError)


class OffsetRpcs(ConsumerRpcs):
    """Mixed into MessagingService (service.py)."""

    async def _queue_of(self, mq: Any) -> tuple[TopicView, QueueRef]:
        """The queue a request names: its id on its broker (a request
        without the broker's name names the one broker with that queue)."""
        view = await self._topic(mq.topic)
        found = [
            q
            for q in view.queues
            if q.queue_id == mq.id and q.readable and mq.broker.name in ("", q.broker_name)
        ]
        if len(found) == 1:
            return view, found[0]
        if found:
            raise ProxyError(
                pb.Code.BAD_REQUEST,
                f"queue {mq.id} of {view.name} is on {len(found)} brokers: name the broker",
            )
        raise ProxyError(
            pb.Code.BAD_REQUEST,
            f"{view.name} has no readable queue {mq.id} on broker {mq.broker.name!r}",
        )

    async def _group_and_queue(
        self, request: Any, context: Any
    ) -> tuple[GrpcClient, str, QueueRef, MessageQueue]:
        client = self.clients.of(context)
        view, q = await self._queue_of(request.message_queue)
        group = (await self._group(request.group, view)).group_name
        return client, group, q, MessageQueue(view.name, q.broker_name, q.queue_id)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        try:
            client, group, q, mq = await self._group_and_queue(request, context)
            if request.offset < 0:
                raise ProxyError(pb.Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            try:
                await client.api.update_consumer_offset(
                    q.addr, group, mq, request.offset, self.config.request_timeout
                )
            except BrokerError as e:
                raise from_broker(e, "update offset") from None
            except _UNREACHED as e:
                raise ProxyError(pb.Code.PROXY_TIMEOUT, f"update offset: {e}") from None
        except ProxyError as e:
            return pb.UpdateOffsetResponse(status=status(e.code, e.message))
        return pb.UpdateOffsetResponse(status=status(OK))

    async def GetOffset(self, request: Any, context: Any) -> Any:
        try:
            client, group, q, mq = await self._group_and_queue(request, context)
            try:
                off = await client.api.query_consumer_offset(
                    q.addr, group, mq, self.config.request_timeout
                )
            except BrokerError as e:
                raise from_broker(e, "get offset") from None
            except _UNREACHED as e:
                raise ProxyError(pb.Code.PROXY_TIMEOUT, f"get offset: {e}") from None
            if off is None or off < 0:
                raise ProxyError(
                    pb.Code.OFFSET_NOT_FOUND,
                    f"group {group} has no offset of {mq.topic} queue {mq.queue_id}",
                )
        except ProxyError as e:
            return pb.GetOffsetResponse(status=status(e.code, e.message))
        return pb.GetOffsetResponse(status=status(OK), offset=off)

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        try:
            client = self.clients.of(context)
            view, q = await self._queue_of(request.message_queue)
            mq = MessageQueue(view.name, q.broker_name, q.queue_id)
            api, timeout = client.api, self.config.request_timeout
            policy = request.query_offset_policy
            if policy not in (pb.BEGINNING, pb.END) and not request.HasField("timestamp"):
                raise ProxyError(pb.Code.BAD_REQUEST, "TIMESTAMP policy without a timestamp")
            try:
                if policy == pb.BEGINNING:
                    off = await api.get_min_offset(q.addr, mq, timeout)
                elif policy == pb.END:
                    off = await api.get_max_offset(q.addr, mq, timeout)
                else:
                    ms = timestamp_ms(request.timestamp)
                    off = await api.search_offset(q.addr, mq, ms, timeout)
            except BrokerError as e:
                raise from_broker(e, "query offset") from None
            except _UNREACHED as e:
                raise ProxyError(pb.Code.PROXY_TIMEOUT, f"query offset: {e}") from None
        except ProxyError as e:
            return pb.QueryOffsetResponse(status=status(e.code, e.message))
        return pb.QueryOffsetResponse(status=status(OK), offset=off)

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            client, group, q, mq = await self._group_and_queue(request, context)
            sub = filter_subscription(mq.topic, request.filter_expression)
            if request.offset < 0:
                raise ProxyError(pb.Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            if not 0 < request.batch_size <= MAX_BATCH:
                raise ProxyError(pb.Code.BAD_REQUEST, f"batch_size must be 1..{MAX_BATCH}")
            polling = duration_ms(request.long_polling_timeout)
            if not 0 <= polling <= MAX_POLLING_MS:
                raise ProxyError(
                    pb.Code.ILLEGAL_POLLING_TIME,
                    f"long_polling_timeout must be 0..{MAX_POLLING_MS} ms",
                )
            budget = self._polling_budget(polling, context)
            try:
                cmd = client.api.pull_command(
                    mq,
                    consumer_group=group,
                    queue_offset=request.offset,
                    max_msg_nums=request.batch_size,
                    sys_flag=PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION,
                    commit_offset=0,
                    suspend_timeout_ms=int(budget * 1000),
                    subscription=sub.sub_string,
                    sub_version=0,
                    expression_type=sub.expression_type,
                )
                r = await client.api.pull_message(
                    q.addr,
                    cmd,
                    timeout=budget + self.config.request_timeout,
                    broker_name=mq.broker_name,
                )
            except BrokerError as e:
                raise from_broker(e, "pull") from None
            except _UNREACHED as e:
                raise ProxyError(pb.Code.PROXY_TIMEOUT, f"pull: {e}") from None
        except ProxyError as e:
            yield pb.PullMessageResponse(status=status(e.code, e.message))
            return
        next_offset = max(r.next_begin_offset, request.offset)
        # as a 4.x client does: a tag's hash may match another tag's
        found = [
            m
            for m in (r.msg_found_list if r.pull_status is PullStatus.FOUND else [])
            if sub.accepts(m.properties)
        ]
        if not found:
            yield pb.PullMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
            yield pb.PullMessageResponse(next_offset=next_offset)
            return
        yield pb.PullMessageResponse(status=status(OK))
        for m in found:
            yield pb.PullMessageResponse(message=incoming(m))
        yield pb.PullMessageResponse(next_offset=next_offset)
