"""Topic statistics and the broker's settings as mqadmin and
rocketmq-dashboard ask for them (AdminBrokerProcessor, stats half):
GET_TOPIC_STATS_INFO (202), VIEW_BROKER_STATS_DATA (315, behind mqadmin
statsAll), GET_BROKER_CONSUME_STATS (317), GET_BROKER_CONFIG (26) and
UPDATE_BROKER_CONFIG (25)."""

from __future__ import annotations

import json
from collections.abc import Callable

from pyrmq.broker.processor.admin_groups import AdminGroupProcessor, store_timestamp
from pyrmq.broker.processor.headers import field
from pyrmq.broker.runtime_config import BrokerRuntimeConfig
from pyrmq.broker.stats import STATS_NAMES, TOPIC_PUT_NUMS, BrokerStatsManager
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.config_file import ConfigUpdater
from pyrmq.common.errors import BrokerSystemError, TopicNotExistError
from pyrmq.common.fastjson import ObjectKeyMap, dumps, mq_key
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore


class AdminStatsProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        stats: BrokerStatsManager,
        runtime: BrokerRuntimeConfig,
        groups: AdminGroupProcessor,
        *,
        broker_name: str,
        broker_addr: Callable[[], str],
    ) -> None:
        self.store = store
        self.topics = topics
        self.stats = stats
        self.runtime = runtime
        self.groups = groups
        self.broker_name = broker_name
        self._broker_addr = broker_addr
        self._updater = ConfigUpdater(runtime, "the broker", "broker.conf")

    def topic_stats_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header topic. Body: TopicStatsTable, min and max offset and the
        last store time of every queue, and the topic's put tps."""
        topic = field(cmd, "topic")
        tc = self.topics.get(topic)
        if tc is None:
            raise TopicNotExistError(f"topic[{topic}] not exist")
        table = []
        for qid in range(tc.queue_nums):
            lo = max(0, self.store.min_offset_in_queue(topic, qid))
            hi = max(0, self.store.max_offset_in_queue(topic, qid))
            last = store_timestamp(self.store, topic, qid, hi - 1) if hi > 0 else 0
            table.append(
                (
                    mq_key(topic, self.broker_name, qid),
                    {"lastUpdateTimestamp": last, "maxOffset": hi, "minOffset": lo},
                )
            )
        body = dumps(
            {
                "offsetTable": ObjectKeyMap(table),
                "topicPutTps": self.stats.tps(TOPIC_PUT_NUMS, topic),
            }
        )
        return cmd.response(ResponseCode.SUCCESS, body=body.encode())

    def view_broker_stats_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header statsName (TOPIC_PUT_NUMS, GROUP_GET_NUMS, ...), statsKey
        (topic, topic@group, or the cluster name for BROKER_*). Body:
        BrokerStatsData. A name or key nothing was counted under yet is
        SYSTEM_ERROR, as with RocketMQ (statsAll shows 0 for it)."""
        name = field(cmd, "statsName")
        key = field(cmd, "statsKey")
        if name not in STATS_NAMES:
            raise BrokerSystemError(
                f"The stats <{name}> <{key}> not exist (stats names: {', '.join(STATS_NAMES)})"
            )
        if not self.stats.has(name, key):
            raise BrokerSystemError(f"The stats <{name}> <{key}> not exist")
        body = json.dumps(self.stats.stats_data(name, key)).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Header isOrder, isOnline... Body: ConsumeStatsList: every group
        with offsets on this broker, its ConsumeStats per topic, and the
        total lag (mqadmin brokerConsumeStats)."""
        offsets = self.groups.offsets
        groups = sorted({k.partition("@")[2] for k in offsets.table})
        total = 0
        entries = []
        only_order = cmd.ext_fields.get("isOrder") == "true"
        for g in groups:
            per_topic = []
            for t in sorted(offsets.which_topic_by_consumer(g)):
                tc = self.topics.get(t)
                if tc is None or (only_order and not tc.order):
                    continue
                cs = self.groups.consume_stats(g, t)
                if not cs["offsetTable"]:
                    continue
                total += sum(
                    max(0, w["brokerOffset"] - w["consumerOffset"]) for _, w in cs["offsetTable"]
                )
                per_topic.append(
                    {"consumeTps": cs["consumeTps"], "offsetTable": ObjectKeyMap(cs["offsetTable"])}
                )
            if per_topic:
                entries.append({g: per_topic})
        body = dumps(
            {
                "brokerAddr": self._broker_addr(),
                "consumeStatsList": entries,
                "totalDiff": total,
            }
        )
        return cmd.response(ResponseCode.SUCCESS, body=body.encode())

    def get_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Body: every setting as Java properties text; header version: the
        config's dataVersion."""
        return cmd.response(
            ResponseCode.SUCCESS,
            {"version": self.runtime.version_json()},
            self.runtime.format().encode(),
        )

    async def update_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Body: the settings to change, as Java properties text (see
        ConfigUpdater: checked whole, written into broker.conf, applied)."""
        remark = await self._updater.update(cmd.body)
        return cmd.response(ResponseCode.SUCCESS, remark=remark)
