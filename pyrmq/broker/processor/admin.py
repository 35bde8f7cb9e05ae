"""Topic administration, offset queries and message lookups
(AdminBrokerProcessor + QueryMessageProcessor): UPDATE_AND_CREATE_TOPIC
(17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32), VIEW_MESSAGE_BY_ID (33), QUERY_MESSAGE (12),
GET_BROKER_RUNTIME_INFO (28), INVOKE_BROKER_TO_RESET_OFFSET (222)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.broker.client_manager import ConsumerManager
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.processor.headers import field, header_int, int_field, queue_id_field
from pyrmq.broker.topic_config import (
    TopicConfig,
    TopicConfigManager,
    apply_attributes,
    check_topic_name,
)
from pyrmq.common.errors import (
    BrokerSystemError,
    ConsumerNotOnlineError,
    MessageIllegalError,
    StoreError,
)
from pyrmq.common.topics import NOT_ALLOWED_SEND_TOPICS, TBW102
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker")


class AdminBrokerProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        *,
        runtime_info: Callable[[], dict[str, str]],
        publish_topics: Callable[[], Awaitable[None]] | None = None,
        consumers: ConsumerManager | None = None,
        broker_name: str = "",
    ) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.broker_name = broker_name
        self._runtime_info = runtime_info
        self._publish_topics = publish_topics

    async def update_and_create_topic(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Create or update a topic; answered once the topic table is saved
        and the name servers have the new route (Java answers before it
        registers, so a producer right after could still miss the topic)."""
        f = cmd.ext_fields
        topic = field(cmd, "topic")
        if topic in NOT_ALLOWED_SEND_TOPICS or (topic == TBW102 and f.get("force") != "true"):
            raise MessageIllegalError(f"the topic[{topic}] is a system topic")

        def int32(key: str, default: int) -> int:
            # Java ints: the topic table goes to the name servers, which
            # refuse a registration carrying anything wider
            return header_int(f, key, default, error=MessageIllegalError, bits=32)

        tc = TopicConfig(
            topic,
            int32("readQueueNums", 16),
            int32("writeQueueNums", 16),
            int32("perm", 6),
            f.get("topicFilterType") or "SINGLE_TAG",
            int32("topicSysFlag", 0),
            f.get("order") in ("true", "1"),
        )
        old = self.topics.get(topic)
        tc.attributes = apply_attributes(old.attributes if old else {}, f.get("attributes") or "")
        if tc.perm & ~15:
            raise MessageIllegalError(f"perm {tc.perm} is not a combination of 8, 4, 2, 1")
        self.topics.update(tc)
        if self._publish_topics is not None:
            await self._publish_topics()
        return cmd.response(ResponseCode.SUCCESS)

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = field(cmd, "topic")
        check_topic_name(topic)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise MessageIllegalError(f"the topic[{topic}] is a system topic")
        self.topics.delete(topic)
        self.offsets.remove_topic(topic)
        # Blocks for the ConsumeQueue flush so the deletion survives a crash
        # (an admin operation; sends and pulls wait for it).
        self.store.delete_topic(topic)
        return cmd.response(ResponseCode.SUCCESS)

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = json.dumps(self.topics.serialize_wrapper()).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def _topic_queue(self, cmd: RemotingCommand) -> tuple[str, int]:
        return field(cmd, "topic"), queue_id_field(cmd)

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, qid = self._topic_queue(cmd)
        return cmd.response(
            ResponseCode.SUCCESS, {"offset": str(self.store.max_offset_in_queue(topic, qid))}
        )

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, qid = self._topic_queue(cmd)
        return cmd.response(
            ResponseCode.SUCCESS, {"offset": str(self.store.min_offset_in_queue(topic, qid))}
        )

    def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, qid = self._topic_queue(cmd)
        ts = int_field(cmd, "timestamp")
        return cmd.response(
            ResponseCode.SUCCESS,
            {"offset": str(self.store.offset_in_queue_by_time(topic, qid, ts))},
        )

    def earliest_msg_store_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, qid = self._topic_queue(cmd)
        ts = 0
        lo = self.store.min_offset_in_queue(topic, qid)
        r = self.store.get_message(topic, qid, lo, 1)
        if r.ranges:
            ts = self.store.look_message_by_offset(r.ranges[0][0])["store_timestamp"]
        return cmd.response(ResponseCode.SUCCESS, {"timestamp": str(ts)})

    def view_message_by_id(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = int_field(cmd, "offset")
        try:
            m = self.store.look_message_by_offset(offset)
        except (StoreError, ValueError) as e:
            raise BrokerSystemError(f"can not find message by the offset, {offset}: {e}") from None
        body = self.store.read([(offset, m["store_size"])])
        return cmd.response(ResponseCode.SUCCESS, body=body)

    async def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        topic = field(cmd, "topic")
        key = field(cmd, "key")
        max_num = header_int(f, "maxNum", 32)
        begin = header_int(f, "beginTimestamp", 0)
        end = header_int(f, "endTimestamp", 2**62)
        if f.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = max(max_num, 32)
        found = await self.store.query_message(topic, key, max(1, min(max_num, 64)), begin, end)
        ext = {
            "indexLastUpdateTimestamp": str(int(time.time() * 1000)),
            "indexLastUpdatePhyoffset": str(self.store.commit_log_max_offset),
        }
        if not found:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                ext,
                remark=f"can not find message, maybe time range not correct: {topic} {key}",
            )
        body = self.store.read([(m["commit_log_offset"], m["store_size"]) for m in found])
        return cmd.response(ResponseCode.SUCCESS, ext, body)

    def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table: dict[str, Any] = self._runtime_info()
        # every value a string, as RocketMQ's table has them; lists and
        # objects as JSON, so tools can read them back
        body = json.dumps(
            {
                "table": {
                    k: json.dumps(v) if isinstance(v, list | dict) else str(v)
                    for k, v in table.items()
                }
            }
        ).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def invoke_broker_to_reset_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222; Broker2Client.resetOffset):
        move a consumer group's offsets of every readable queue of a topic on
        this broker to the first message stored at or after `timestamp` (the
        max offset when none is; timestamp -1 means the max offset). Without
        `isForce`, an offset only moves backwards.

        Header: topic, group, timestamp (ms), isForce ("true"/"false").
        The group must have a consumer online, else CONSUMER_NOT_ONLINE
        (206), and the admin tool commits the offsets itself with
        UPDATE_CONSUMER_OFFSET, as mqadmin does. Then the broker commits the
        new offsets (Java leaves that to the consumers; doing it here too
        makes the reset visible at once and keeps it if a consumer dies
        before its next commit) and sends each online consumer of the group
        a one-way RESET_CONSUMER_CLIENT_OFFSET (220) with the same header
        (plus the new offsets in the body) so it adopts them in memory.

        Body of 220 and of this answer, by the receiver's language: for Java
        clients, Java's ResetOffsetBody as fastjson writes it, a map keyed
        by JSON objects (`{"offsetTable":{{"brokerName":..,"queueId":..,
        "topic":..}:123}}`, not valid JSON); for every other language (C++,
        Python, ...) ResetOffsetBodyForC, valid JSON (protocol doc section 6.6):
        `{"offsetTable":[{"brokerName":"b","queueId":0,"topic":"T","offset":123},...]}`."""
        f = cmd.ext_fields
        topic = field(cmd, "topic")
        group = field(cmd, "group")
        timestamp = header_int(f, "timestamp", code=cmd.code)
        force = (f.get("isForce") or "true").lower() != "false"
        tc = self.topics.get(topic)
        if tc is None:
            raise BrokerSystemError(
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
            )
        info = self.consumers.groups.get(group) if self.consumers is not None else None
        channels = [(c, ci) for c, ci in (info.channels.items() if info else ()) if _is_open(c)]
        if not channels:
            raise ConsumerNotOnlineError(
                f"Consumer not online, so can not reset offset, Group: {group} "
                f"Topic: {topic} Timestamp: {timestamp}"
            )
        table: list[tuple[int, int]] = []
        for qid in range(tc.read_queue_nums):
            current = self.offsets.query_offset(group, topic, qid)
            if timestamp < 0:
                new = self.store.max_offset_in_queue(topic, qid)
            else:
                new = self.store.offset_in_queue_by_time(topic, qid, timestamp)
            new = max(0, new)
            if not force and 0 <= current <= new:
                new = current
            self.offsets.commit_offset(group, topic, qid, new)
            table.append((qid, new))
        header = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp),
            "isForce": "true" if force else "false",
        }
        for channel, client in channels:
            log.info(
                "reset offsets of %s on %s for client %s: %s", group, topic, client.client_id, table
            )
            channel.invoke_oneway(
                RemotingCommand(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    dict(header),
                    self._reset_body(topic, table, client.language),
                    language="JAVA",
                )
            )
        return cmd.response(ResponseCode.SUCCESS, body=self._reset_body(topic, table, cmd.language))

    def _reset_body(self, topic: str, table: list[tuple[int, int]], language: str) -> bytes:
        """ResetOffsetBody for Java, ResetOffsetBodyForC for everyone else."""
        name = self.broker_name
        if language == "JAVA":
            items = ",".join(
                json.dumps(
                    {"brokerName": name, "queueId": qid, "topic": topic}, separators=(",", ":")
                )
                + f":{offset}"
                for qid, offset in table
            )
            return ('{"offsetTable":{' + items + "}}").encode()
        entries = [
            {"brokerName": name, "queueId": qid, "topic": topic, "offset": offset}
            for qid, offset in table
        ]
        return json.dumps({"offsetTable": entries}, separators=(",", ":")).encode()


def _is_open(channel: Any) -> bool:
    return isinstance(channel, Connection) and channel.is_open
