"""Client-facing group management: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14),
UPDATE_CONSUMER_OFFSET (15), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46) (ClientManageProcessor + ConsumerManageProcessor)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.broker.client_manager import ConsumerManager, ProducerManager, RebalanceLockManager
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.processor.headers import field, int_field, queue_id_field
from pyrmq.broker.subscription_group import SubscriptionGroupManager
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfigManager
from pyrmq.common.errors import BrokerSystemError, MessageIllegalError
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import retry_topic
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import Connection, HandlerResult
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker")


def _json_body(cmd: RemotingCommand, what: str) -> dict[str, Any]:
    try:
        data = json.loads(cmd.body) if cmd.body else {}
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise MessageIllegalError(f"{what} body is not JSON: {e!r}") from None
    if not isinstance(data, dict):
        raise MessageIllegalError(f"{what} body is not a JSON object")
    if b"\\u" in cmd.body:
        # an escape such as \uD800 decodes to a lone surrogate, which no
        # UTF-8 header can carry (a group name goes into the header of
        # NOTIFY_CONSUMER_IDS_CHANGED and into remarks): refused here
        try:
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise MessageIllegalError(f"{what} body has a lone UTF-16 surrogate") from None
    return data


def _list(data: dict[str, Any], key: str, what: str) -> list[Any]:
    v = data.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise MessageIllegalError(f"{what} body: {key} must be a JSON array")
    return v


class ConsumerManageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        offsets: ConsumerOffsetManager,
        locks: RebalanceLockManager,
        *,
        broker_name: str,
        retry_queue_nums: int = 1,
        publish_topics: Callable[[], Awaitable[None]] | None = None,
        enable_property_filter: bool = False,
    ) -> None:
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.producers = producers
        self.offsets = offsets
        self.locks = locks
        self.broker_name = broker_name
        self.retry_queue_nums = retry_queue_nums
        self.publish_topics = publish_topics
        self.enable_property_filter = enable_property_filter
        #: consumer groups: a heartbeat creates %RETRY%<group> with the
        #: group's retryQueueNums (None: retry_queue_nums)
        self.groups: SubscriptionGroupManager | None = None

    def heart_beat(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        data = _json_body(cmd, "HEART_BEAT")
        client_id = str(data.get("clientID") or "")
        if not client_id:
            raise MessageIllegalError("HEART_BEAT body lacks clientID")
        conn.attrs["client_id"] = client_id
        conn.attrs["language"] = cmd.language
        created = False
        for c in _list(data, "consumerDataSet", "HEART_BEAT"):
            if not isinstance(c, dict) or not c.get("groupName"):
                continue
            info = self.consumers.register(conn, client_id, cmd.language, cmd.version, c)
            retry_queues = self.retry_queue_nums
            if self.groups is not None:
                sgc = self.groups.find(info.group)
                retry_queues = sgc.retry_queue_nums if sgc is not None else 0
            if info.message_model == "CLUSTERING" and retry_queues > 0:
                rt = retry_topic(info.group)
                created |= rt not in self.topics.table
                self.topics.create_system_group_topic(rt, retry_queues, PERM_READ | PERM_WRITE)
        for p in _list(data, "producerDataSet", "HEART_BEAT"):
            if isinstance(p, dict) and p.get("groupName"):
                self.producers.register(
                    conn, client_id, cmd.language, cmd.version, str(p["groupName"])
                )
        if created and self.publish_topics is not None:
            # as Java's broker, answer once the name servers route the new
            # %RETRY% topic, so the consumer's first rebalance finds it
            return self._answer_when_published(cmd)
        return cmd.response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """CHECK_CLIENT_CONFIG: the Java client asks it when a consumer
        subscribes with a selector (body {clientId, group, subscriptionData});
        a TAG subscription passes, a SQL92 one needs enablePropertyFilter
        (SYSTEM_ERROR) and must compile (SUBSCRIPTION_PARSE_FAILED)."""
        data = _json_body(cmd, "CHECK_CLIENT_CONFIG")
        sub = data.get("subscriptionData")
        if not isinstance(sub, dict):
            return cmd.response(ResponseCode.SUCCESS)
        kind = str(sub.get("expressionType") or "TAG")
        if kind.upper() == "TAG":
            return cmd.response(ResponseCode.SUCCESS)
        if not self.enable_property_filter:
            raise BrokerSystemError(
                f"The broker does not support consumer to filter message by {kind}"
            )
        # SubscriptionParseFailedError (23) names what does not parse
        SubscriptionData.parse(
            str(sub.get("topic") or ""), str(sub.get("subString") or ""), 0, kind
        )
        return cmd.response(ResponseCode.SUCCESS)

    async def _answer_when_published(self, cmd: RemotingCommand) -> RemotingCommand:
        assert self.publish_topics is not None
        await self.publish_topics()
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        if f.get("producerGroup"):
            self.producers.unregister(conn, f["producerGroup"])
        if f.get("consumerGroup"):
            self.consumers.unregister(conn, f["consumerGroup"])
        return cmd.response(ResponseCode.SUCCESS)

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        info = self.consumers.groups.get(group)
        if info is None or not info.channels:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group}"
            )
        body = json.dumps({"consumerIdList": info.client_ids()}).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        topic = field(cmd, "topic")
        queue_id = queue_id_field(cmd)
        offset = self.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return cmd.response(ResponseCode.SUCCESS, {"offset": str(offset)})
        # A new group on a queue whose first message is still stored starts
        # at 0, as Java's broker answers while offset 0 is in memory: a new
        # consumer of a fresh topic sees its first messages. Otherwise
        # QUERY_NOT_FOUND sends the client to its consumeFromWhere. Clients
        # that apply consumeFromWhere themselves send setZeroIfNotFound=false
        # (RocketMQ 5's header; pyrmq's client does).
        zero_if_not_found = cmd.ext_fields.get("setZeroIfNotFound", "true") != "false"
        if zero_if_not_found and self.store.min_offset_in_queue(topic, queue_id) <= 0:
            return cmd.response(ResponseCode.SUCCESS, {"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe")

    def update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        topic = field(cmd, "topic")
        queue_id = queue_id_field(cmd)
        offset = int_field(cmd, "commitOffset")
        if offset < 0:
            raise BrokerSystemError(f"commitOffset {offset} is negative")
        self.offsets.commit_offset(group, topic, queue_id, offset)
        return cmd.response(ResponseCode.SUCCESS)

    def _mq_set(self, data: dict[str, Any]) -> list[tuple[str, str, int]]:
        out = []
        for mq in _list(data, "mqSet", "lock"):
            try:
                out.append((str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])))
            except (KeyError, TypeError, ValueError, OverflowError):  # Overflow: 1e999
                raise MessageIllegalError(f"bad message queue in mqSet: {mq!r}") from None
        return out

    def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = _json_body(cmd, "LOCK_BATCH_MQ")
        group = str(data.get("consumerGroup") or "")
        client_id = str(data.get("clientId") or "")
        if not group or not client_id:
            raise MessageIllegalError("LOCK_BATCH_MQ body needs consumerGroup and clientId")
        granted = self.locks.try_lock_batch(group, self._mq_set(data), client_id)
        body = json.dumps(
            {"lockOKMQSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in granted]}
        ).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = _json_body(cmd, "UNLOCK_BATCH_MQ")
        self.locks.unlock_batch(
            str(data.get("consumerGroup") or ""),
            self._mq_set(data),
            str(data.get("clientId") or ""),
        )
        return cmd.response(ResponseCode.SUCCESS)
