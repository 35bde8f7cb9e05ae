"""The pull consumers' RPCs of MessagingService (5.x PullConsumer /
LitePullConsumer): PullMessage at an offset of one queue, and the group's
offsets (UpdateOffset, GetOffset) and the queue's (QueryOffset), over the
broker's store and consumer offsets."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pyrmq.broker.topic_config import TopicConfig
from pyrmq.common.message import decode_messages
from pyrmq.proxy.consumer import MAX_BATCH, MAX_POLLING_MS, ConsumerRpcs, filter_subscription
from pyrmq.proxy.convert import incoming
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import OK, duration_ms, pb, status, timestamp_ms

if TYPE_CHECKING:
    from pyrmq.broker.subscription_group import SubscriptionGroupConfig


class OffsetRpcs(ConsumerRpcs):
    """Mixed into MessagingService (service.py)."""

    def _queue_of(self, mq: Any) -> tuple[TopicConfig, int]:
        tc = self._topic(mq.topic)
        if not 0 <= mq.id < tc.read_queue_nums:
            raise ProxyError(
                pb.Code.BAD_REQUEST,
                f"queue {mq.id} of {tc.topic_name}: it has {tc.read_queue_nums} readable queues",
            )
        return tc, mq.id

    def _group_and_queue(
        self, request: Any, context: Any
    ) -> tuple[SubscriptionGroupConfig, str, int]:
        self.clients.of(context)
        sgc = self._group(request.group)
        tc, qid = self._queue_of(request.message_queue)
        return sgc, tc.topic_name, qid

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        try:
            sgc, topic, qid = self._group_and_queue(request, context)
            if request.offset < 0:
                raise ProxyError(pb.Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            self.broker.offsets.commit_offset(sgc.group_name, topic, qid, request.offset)
        except ProxyError as e:
            return pb.UpdateOffsetResponse(status=status(e.code, e.message))
        return pb.UpdateOffsetResponse(status=status(OK))

    async def GetOffset(self, request: Any, context: Any) -> Any:
        try:
            sgc, topic, qid = self._group_and_queue(request, context)
            off = self.broker.offsets.query_offset(sgc.group_name, topic, qid)
            if off < 0:
                raise ProxyError(
                    pb.Code.OFFSET_NOT_FOUND,
                    f"group {sgc.group_name} has no offset of {topic} queue {qid}",
                )
        except ProxyError as e:
            return pb.GetOffsetResponse(status=status(e.code, e.message))
        return pb.GetOffsetResponse(status=status(OK), offset=off)

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        try:
            self.clients.of(context)
            tc, qid = self._queue_of(request.message_queue)
            store = self.broker.pop.store
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                off = store.min_offset_in_queue(tc.topic_name, qid)
            elif policy == pb.END:
                off = store.max_offset_in_queue(tc.topic_name, qid)
            else:
                if not request.HasField("timestamp"):
                    raise ProxyError(pb.Code.BAD_REQUEST, "TIMESTAMP policy without a timestamp")
                ms = timestamp_ms(request.timestamp)
                off = store.offset_in_queue_by_time(tc.topic_name, qid, ms)
        except ProxyError as e:
            return pb.QueryOffsetResponse(status=status(e.code, e.message))
        return pb.QueryOffsetResponse(status=status(OK), offset=off)

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            _, topic, qid = self._group_and_queue(request, context)
            sub = filter_subscription(topic, request.filter_expression)
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
        except ProxyError as e:
            yield pb.PullMessageResponse(status=status(e.code, e.message))
            return
        store = self.broker.pop.store
        left = context.time_remaining()
        budget = polling / 1000 if left is None else min(polling / 1000, max(left - 1.0, 0.0))
        deadline = time.monotonic() + budget
        offset = request.offset
        found: list[Any] = []
        next_offset = offset
        while True:
            r = store.get_message(topic, qid, offset, request.batch_size, sub.code_set or None)
            if r.ranges:
                found = [
                    m for m in decode_messages(store.read(r.ranges)) if sub.accepts(m.properties)
                ]
            next_offset = max(r.next_begin_offset, offset)
            wait = deadline - time.monotonic()
            if found or wait <= 0 or (next_offset > offset and not r.ranges):
                break
            await self.broker.pop.wait_arrival([topic], wait)
        if not found:
            yield pb.PullMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
            yield pb.PullMessageResponse(next_offset=next_offset)
            return
        yield pb.PullMessageResponse(status=status(OK))
        for m in found:
            yield pb.PullMessageResponse(message=incoming(m))
        yield pb.PullMessageResponse(next_offset=next_offset)
