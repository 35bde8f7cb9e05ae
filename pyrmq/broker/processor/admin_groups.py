"""Consumer and producer groups as mqadmin and rocketmq-dashboard see them
(AdminBrokerProcessor, group half): subscription groups
(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, GET_ALL_SUBSCRIPTIONGROUP_CONFIG
201, DELETE_SUBSCRIPTIONGROUP 207), who is connected
(GET_CONSUMER_CONNECTION_LIST 203, GET_PRODUCER_CONNECTION_LIST 204,
QUERY_TOPIC_CONSUME_BY_WHO 300), consume progress (GET_CONSUME_STATS 208,
QUERY_CONSUME_TIME_SPAN 303, CLONE_GROUP_OFFSET 314), and the requests the
broker forwards to one consumer of a group (GET_CONSUMER_RUNNING_INFO 307,
CONSUME_MESSAGE_DIRECTLY 309).

Bodies are written as RocketMQ's fastjson writes them: a map keyed by a
MessageQueue (ConsumeStats.offsetTable) has the queue object as its key,
`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`, which mqadmin and the
dashboard parse (pyrmq.common.fastjson reads it back)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pyrmq.broker.client_manager import ClientChannelInfo, ConsumerManager, ProducerManager
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.processor.headers import field, header_str
from pyrmq.broker.stats import GROUP_GET_NUMS, BrokerStatsManager
from pyrmq.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.errors import (
    BrokerSystemError,
    ConsumeMsgTimeoutError,
    ConsumerNotOnlineError,
    InvalidParameterError,
    RemotingError,
    StoreError,
    TopicNotExistError,
)
from pyrmq.common.fastjson import ObjectKeyMap, dumps, mq_key
from pyrmq.common.message import decode_offset_msg_id
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker")

#: how long the broker waits for a consumer it forwarded a request to
#: (Broker2Client.callClient)
CALL_CLIENT_TIMEOUT = 5.0


def store_timestamp(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """The store time of the message at a queue offset, 0 when there is none
    (MessageStore.getMessageStoreTimeStamp)."""
    if offset < 0:
        return 0
    try:
        r = store.get_message(topic, queue_id, offset, 1)
        if not r.ranges:
            return 0
        return int(store.look_message_by_offset(r.ranges[0][0])["store_timestamp"])
    except (StoreError, ValueError):
        return 0


def connection_json(channel: Any, info: ClientChannelInfo) -> dict[str, Any]:
    """Connection: clientId, clientAddr, language, version."""
    return {
        "clientAddr": getattr(channel, "peer", "") or "",
        "clientId": info.client_id,
        "language": info.language,
        "version": info.version,
    }


class AdminGroupProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        stats: BrokerStatsManager,
        *,
        broker_name: str,
    ) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.consumers = consumers
        self.producers = producers
        self.stats = stats
        self.broker_name = broker_name

    # -- subscription groups -------------------------------------------------------------

    async def update_and_create_subscription_group(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Body: SubscriptionGroupConfig as JSON. Answered once
        subscriptionGroup.json is saved."""
        try:
            data = json.loads(cmd.body) if cmd.body else None
            if data is None:
                raise ValueError("the body holds no SubscriptionGroupConfig")
            sgc = SubscriptionGroupConfig.from_json(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:  # Recursion: too deep
            raise InvalidParameterError(f"bad subscription group config: {e!r}") from None
        if sgc.retry_queue_nums < 0 or sgc.retry_max_times < -1:
            raise InvalidParameterError(
                f"retryQueueNums={sgc.retry_queue_nums} and retryMaxTimes={sgc.retry_max_times} "
                "must not be negative"
            )
        if sgc.retry_queue_nums > self.topics.max_queue_nums:
            # the group's %RETRY% topic gets this many queues
            raise InvalidParameterError(
                f"retryQueueNums={sgc.retry_queue_nums} is more than maxQueueNums="
                f"{self.topics.max_queue_nums}"
            )
        self.groups.update(sgc)
        await self.groups.persist()
        return cmd.response(ResponseCode.SUCCESS)

    def all_subscription_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = json.dumps(self.groups.serialize_wrapper()).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    async def delete_subscription_group(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Header groupName, removeOffset/cleanOffset ("true": the group's
        committed offsets go too). A group the table lacks is no error, as
        with RocketMQ (a tool deletes a group from every broker of a cluster)."""
        group = field(cmd, "groupName")
        self.groups.delete(group)
        f = cmd.ext_fields
        if "true" in (f.get("removeOffset"), f.get("cleanOffset")):
            self.offsets.remove_group(group)
        self.stats.forget(lambda name, key: key.endswith(f"@{group}"))
        await self.groups.persist()
        return cmd.response(ResponseCode.SUCCESS)

    # -- connections ---------------------------------------------------------------------

    def consumer_connection_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """ConsumerConnection of the group's online consumers."""
        group = field(cmd, "consumerGroup")
        info = self.consumers.groups.get(group)
        if info is None:
            raise ConsumerNotOnlineError(f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [connection_json(c, i) for c, i in info.channels.items()],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.as_json() for t, s in sorted(info.subscriptions.items())},
        }
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    def producer_connection_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "producerGroup")
        chans = self.producers.groups.get(group)
        if chans is None:
            raise BrokerSystemError(f"the producer group[{group}] not exist")
        body = {"connectionSet": [connection_json(c, i) for c, i in chans.items()]}
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups subscribed to the topic now, or with offsets of it."""
        groups = {g for g, i in self.consumers.groups.items() if topic in i.subscriptions}
        return groups | self.offsets.which_group_by_topic(topic)

    def query_topic_consume_by_who(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GroupList {"groupList": [...]}."""
        topic = field(cmd, "topic")
        body = json.dumps({"groupList": sorted(self.groups_of_topic(topic))}).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    # -- consume progress -----------------------------------------------------------------

    def _subscribed(self, group: str, topic: str) -> bool:
        """RocketMQ's check: a group with subscriptions online counts only
        the topics it subscribes to."""
        info = self.consumers.groups.get(group)
        return info is None or not info.subscriptions or topic in info.subscriptions

    def consume_stats(self, group: str, topic: str | None) -> dict[str, Any]:
        """ConsumeStats of the group on this broker (one topic, or every
        topic the group has offsets of), as plain data: offsetTable is a list
        of (queue key, OffsetWrapper)."""
        topics = {topic} if topic else self.offsets.which_topic_by_consumer(group)
        table: list[tuple[dict[str, Any], dict[str, Any]]] = []
        tps = 0.0
        for t in sorted(topics):
            tc = self.topics.get(t)
            if tc is None or not self._subscribed(group, t):
                continue
            for qid in range(tc.read_queue_nums):
                broker_offset = max(0, self.store.max_offset_in_queue(t, qid))
                consumer_offset = max(0, self.offsets.query_offset(group, t, qid))
                last = store_timestamp(self.store, t, qid, consumer_offset - 1)
                table.append(
                    (
                        mq_key(t, self.broker_name, qid),
                        {
                            "brokerOffset": broker_offset,
                            "consumerOffset": consumer_offset,
                            "lastTimestamp": last,
                            "pullOffset": consumer_offset,
                        },
                    )
                )
            tps += self.stats.tps(GROUP_GET_NUMS, f"{t}@{group}")
        return {"consumeTps": round(tps, 2), "offsetTable": table}

    def get_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header consumerGroup, topic (optional). Body: ConsumeStats."""
        group = field(cmd, "consumerGroup")
        stats = self.consume_stats(group, cmd.ext_fields.get("topic") or None)
        body = dumps(
            {"consumeTps": stats["consumeTps"], "offsetTable": ObjectKeyMap(stats["offsetTable"])}
        )
        return cmd.response(ResponseCode.SUCCESS, body=body.encode())

    def query_consume_time_span(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header topic, group. Body: QueryConsumeTimeSpanBody, per write
        queue: first and last store time, the store time of the last
        consumed message, and how long the next one has waited (ms)."""
        topic = field(cmd, "topic")
        group = field(cmd, "group")
        tc = self.topics.get(topic)
        if tc is None:
            raise TopicNotExistError(f"topic[{topic}] not exist")
        now = int(time.time() * 1000)
        spans = []
        for qid in range(tc.write_queue_nums):
            lo = self.store.min_offset_in_queue(topic, qid)
            hi = self.store.max_offset_in_queue(topic, qid)
            min_time = store_timestamp(self.store, topic, qid, lo)
            max_time = store_timestamp(self.store, topic, qid, hi - 1)
            consumer_offset = self.offsets.query_offset(group, topic, qid)
            consume_time = (
                store_timestamp(self.store, topic, qid, consumer_offset - 1)
                if consumer_offset > 0
                else min_time
            )
            delay = 0
            if consumer_offset < hi:
                nxt = store_timestamp(self.store, topic, qid, max(consumer_offset, lo))
                delay = now - nxt if nxt else 0
            spans.append(
                {
                    "consumeTimeStamp": consume_time,
                    "delayTime": delay,
                    "maxTimeStamp": max_time,
                    "messageQueue": mq_key(topic, self.broker_name, qid),
                    "minTimeStamp": min_time,
                }
            )
        body = json.dumps({"consumeTimeSpanSet": spans}).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def clone_group_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header srcGroup, destGroup, topic (optional: every topic srcGroup
        has offsets of), offline ("true": skip the subscription check)."""
        f = cmd.ext_fields
        src = field(cmd, "srcGroup")
        dest = field(cmd, "destGroup")
        topic = f.get("topic") or ""
        offline = f.get("offline") == "true"
        topics = {topic} if topic else self.offsets.which_topic_by_consumer(src)
        for t in sorted(topics):
            if self.topics.get(t) is None:
                log.warning("clone group offset: topic %s does not exist", t)
                continue
            if not offline and not self._subscribed(src, t):
                continue
            self.offsets.clone_offset(src, dest, t)
        return cmd.response(ResponseCode.SUCCESS)

    # -- requests forwarded to a consumer ---------------------------------------------------

    async def _call_consumer(
        self, code: int, cmd: RemotingCommand, group: str, client_id: str, body: bytes
    ) -> RemotingCommand:
        info = self.consumers.groups.get(group)
        channel = None
        if info is not None:
            for c, ci in info.channels.items():
                if ci.client_id == client_id and isinstance(c, Connection) and c.is_open:
                    channel = c
                    break
        if channel is None:
            raise BrokerSystemError(f"The Consumer <{group}> <{client_id}> not online")
        fwd = RemotingCommand(code, dict(cmd.ext_fields), body, language="JAVA")
        try:
            resp = await channel.invoke(fwd, CALL_CLIENT_TIMEOUT)
        except (RemotingError, TimeoutError) as e:
            if isinstance(e, TimeoutError) or "no answer" in str(e):
                raise ConsumeMsgTimeoutError(
                    f"consumer <{group}> <{client_id}> Timeout: {e}"
                ) from None
            raise BrokerSystemError(
                f"invoke consumer <{group}> <{client_id}> Exception: {e}"
            ) from None
        return cmd.response(resp.code, dict(resp.ext_fields), resp.body, resp.remark)

    async def consumer_running_info(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Header consumerGroup, clientId, jstackEnable: answered by that consumer."""
        group = field(cmd, "consumerGroup")
        client_id = field(cmd, "clientId")
        return await self._call_consumer(
            RequestCode.GET_CONSUMER_RUNNING_INFO, cmd, group, client_id, cmd.body
        )

    async def consume_message_directly(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Header consumerGroup, clientId, msgId (an offset message id of
        this broker), topic: the consumer consumes that message once, outside
        its queues, and says how it went (ConsumeMessageDirectlyResult)."""
        group = field(cmd, "consumerGroup")
        client_id = field(cmd, "clientId")
        msg_id = header_str(cmd.ext_fields, "msgId", cmd.code)
        try:
            _, offset = decode_offset_msg_id(msg_id)
            m = self.store.look_message_by_offset(offset)
            body = self.store.read([(offset, m["store_size"])])
        except (StoreError, ValueError, OverflowError) as e:  # Overflow: offset >= 2^63
            raise BrokerSystemError(f"no message with offset id {msg_id} here: {e}") from None
        cmd.ext_fields["brokerName"] = self.broker_name
        return await self._call_consumer(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, cmd, group, client_id, body
        )
