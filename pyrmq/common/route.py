"""Topic routes as clients read them from a name server (TopicRouteData,
QueueData, BrokerData; JSON body of GET_ROUTEINFO_BY_TOPIC, wire facts in
docs/rocketmq-remoting-protocol.md §6.1), and the queue tables a producer
and a consumer build from them (TopicPublishInfo, subscribe queues)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyrmq.common.message import MessageQueue

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    def select_broker_addr(self) -> str | None:
        """The master's address, else any slave's."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(self.broker_addrs.values()), None)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, body: bytes) -> TopicRouteData:
        """Parse a name server's answer; ValueError on anything malformed."""
        try:
            d = json.loads(body)
            qds = tuple(
                sorted(
                    (
                        QueueData(
                            str(q["brokerName"]),
                            int(q["readQueueNums"]),
                            int(q["writeQueueNums"]),
                            int(q["perm"]),
                            int(q.get("topicSysFlag", q.get("topicSynFlag", 0)) or 0),
                        )
                        for q in d.get("queueDatas") or ()
                    ),
                    key=lambda q: q.broker_name,
                )
            )
            bds = tuple(
                sorted(
                    (
                        BrokerData(
                            str(b.get("cluster", "")),
                            str(b["brokerName"]),
                            {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
                        )
                        for b in d.get("brokerDatas") or ()
                    ),
                    key=lambda b: b.broker_name,
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed topic route: {e!r}") from None
        return cls(qds, bds, d.get("orderTopicConf") or None)

    def broker_data(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues on master brokers, broker by broker
        (topicRouteData2TopicPublishInfo); an orderTopicConf overrides."""
        out: list[MessageQueue] = []
        if self.order_topic_conf:
            for item in self.order_topic_conf.split(";"):
                name, _, n = item.partition(":")
                if n.isdigit():
                    out.extend(MessageQueue(topic, name, i) for i in range(int(n)))
            return out
        for q in self.queue_datas:
            if not q.perm & PERM_WRITE:
                continue
            bd = self.broker_data(q.broker_name)
            if bd is None or MASTER_ID not in bd.broker_addrs:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues (topicRouteData2TopicSubscribeInfo)."""
        return [
            MessageQueue(topic, q.broker_name, i)
            for q in self.queue_datas
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        ]


@dataclass(slots=True)
class TopicPublishInfo:
    """What a producer publishes a topic to: its write queues in route order,
    and a round-robin position (TopicPublishInfo.sendWhichQueue)."""

    queues: list[MessageQueue]
    route: TopicRouteData
    order_topic: bool = False
    index: int = field(default=0)

    def ok(self) -> bool:
        return bool(self.queues)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """The next queue round robin, avoiding last_broker_name (the
        broker the previous attempt failed on) when another exists."""
        n = len(self.queues)
        if last_broker_name is not None:
            for _ in range(n):
                self.index += 1
                mq = self.queues[self.index % n]
                if mq.broker_name != last_broker_name:
                    return mq
        self.index += 1
        return self.queues[self.index % n]


def route_as_dict(route: TopicRouteData) -> dict[str, Any]:
    """The route in the name server's JSON shape (for admin output)."""
    return {
        "brokerDatas": [
            {
                "cluster": b.cluster,
                "brokerName": b.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(b.broker_addrs.items())},
            }
            for b in route.broker_datas
        ],
        "queueDatas": [
            {
                "brokerName": q.broker_name,
                "readQueueNums": q.read_queue_nums,
                "writeQueueNums": q.write_queue_nums,
                "perm": q.perm,
                "topicSysFlag": q.topic_sys_flag,
            }
            for q in route.queue_datas
        ],
    }
