"""QUERY_CONSUME_QUEUE (321), behind mqadmin queryCq: the ConsumeQueue units
of one queue from an index, with what an online consumer group's
subscription makes of each (AdminBrokerProcessor.queryConsumeQueue)."""

from __future__ import annotations

import json
from typing import Any

from pyrmq.broker.client_manager import ConsumerManager
from pyrmq.broker.processor.headers import field, header_int, queue_id_field
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.errors import BrokerSystemError, InvalidParameterError
from pyrmq.common.subscription import SQL92, SubscriptionData
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore

#: most units one QUERY_CONSUME_QUEUE lists (mqadmin asks for 10 by
#: default): each is ~100 bytes of JSON, so the answer stays ~100 KiB
MAX_QUERY_CQ_COUNT = 1000
#: no byte cap on the units' records: only their places are read
_NO_BYTE_LIMIT = 1 << 62


def _filter_data(group: str, topic: str, sub: SubscriptionData | None) -> str:
    """RocketMQ's filterData text: a notice when the group is not online,
    the ConsumerFilterData JSON of a SQL92 subscription, else "null" (a TAG
    subscription has none)."""
    if sub is None:
        return f"{group}@{topic} is not online!"
    if sub.expression_type != SQL92:
        return "null"
    return json.dumps(
        {
            "clientVersion": sub.sub_version,
            "consumerGroup": group,
            "expression": sub.sub_string,
            "expressionType": SQL92,
            "topic": topic,
        }
    )


def _eval(sub: SubscriptionData, tags_code: int) -> bool:
    """What the subscription makes of a unit by its tags code alone
    (ExpressionMessageFilter.isMatchedByConsumeQueue): TAG, the code is one
    of the subscribed tags' (or '*'); SQL92 needs the message's properties,
    so the unit passes at this stage."""
    if sub.expression_type == SQL92 or sub.matches_all:
        return True
    return tags_code in sub.code_set


class AdminQueueProcessor:
    def __init__(
        self, store: MessageStore, topics: TopicConfigManager, consumers: ConsumerManager
    ) -> None:
        self.store = store
        self.topics = topics
        self.consumers = consumers

    def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header topic, queueId, index (the first unit), count (1 to
        MAX_QUERY_CQ_COUNT), consumerGroup (optional). Body:
        QueryConsumeQueueResponseBody: maxQueueIndex, minQueueIndex,
        queueData (ConsumeQueueData per unit: physicOffset, physicSize,
        tagsCode, and eval when the group is online), subscriptionData and
        filterData (with consumerGroup). An unknown topic or queue is
        SYSTEM_ERROR "queueId@topic is not exist!"; an index outside the
        queue is SUCCESS with no units and RocketMQ's remark (RocketMQ sends
        no body then, which its own client cannot decode)."""
        topic = field(cmd, "topic")
        qid = queue_id_field(cmd)
        f = cmd.ext_fields
        index = header_int(f, "index", code=cmd.code)
        count = header_int(f, "count", code=cmd.code, bits=32)
        if not 0 < count <= MAX_QUERY_CQ_COUNT:
            raise InvalidParameterError(
                f"count {count} is out of range: 1 to {MAX_QUERY_CQ_COUNT} units per query"
            )
        tc = self.topics.get(topic)
        if tc is None or not 0 <= qid < tc.queue_nums:
            raise BrokerSystemError(f"{qid}@{topic} is not exist!")
        lo = max(0, self.store.min_offset_in_queue(topic, qid))
        hi = max(0, self.store.max_offset_in_queue(topic, qid))
        body: dict[str, Any] = {"maxQueueIndex": hi, "minQueueIndex": lo}
        group = f.get("consumerGroup") or None
        sub = None
        if group is not None:
            sub = self.consumers.find_subscription(group, topic)
            if sub is not None:
                body["subscriptionData"] = sub.as_json()
            body["filterData"] = _filter_data(group, topic, sub)
        if not lo <= index < hi:
            body["queueData"] = []
            return cmd.response(
                ResponseCode.SUCCESS,
                body=json.dumps(body).encode(),
                remark=f"Index {index} of {qid}@{topic} is not exist!",
            )
        r = self.store.core.get_message(topic, qid, index, count, _NO_BYTE_LIMIT, None, -1)
        units = []
        for (phys, size), tags_code in zip(r.ranges, r.tags_codes, strict=True):
            unit: dict[str, Any] = {
                "eval": _eval(sub, tags_code) if sub is not None else False,
                "physicOffset": phys,
                "physicSize": size,
                "tagsCode": tags_code,
            }
            units.append(unit)
        body["queueData"] = units
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


__all__ = ["MAX_QUERY_CQ_COUNT", "AdminQueueProcessor"]
