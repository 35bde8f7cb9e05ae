"""What AdminClient's calls return: typed results, and the JSON shapes
`pyrmq admin --json` prints them as."""

from __future__ import annotations

import base64
import dataclasses
import enum
from typing import Any

from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.common.results import SendResult
from pyrmq.common.route import TopicRouteData, route_as_dict


@dataclasses.dataclass(frozen=True, slots=True)
class TopicCreated:
    """What create_topic did: the topic config sent to each broker."""

    topic: str
    brokers: list[str]
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDeleted:
    topic: str
    brokers: list[str]
    name_servers: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue of topic_status (TopicOffset). `last_update_timestamp` is
    the store time of the queue's last message, 0 when it has none."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclasses.dataclass(frozen=True, slots=True)
class TopicStatus:
    topic: str
    queues: list[QueueStatus]

    @property
    def total_messages(self) -> int:
        return sum(q.max_offset - q.min_offset for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker of cluster_list: its runtime info (GET_BROKER_RUNTIME_INFO),
    or `error` when it did not answer."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    runtime: dict[str, str]
    error: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterInfo:
    brokers: list[BrokerInfo]

    @property
    def clusters(self) -> dict[str, list[str]]:
        """cluster -> its broker names."""
        out: dict[str, list[str]] = {}
        for b in self.brokers:
            names = out.setdefault(b.cluster, [])
            if b.broker_name not in names:
                names.append(b.broker_name)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue of consumer_progress (OffsetWrapper). `consumer_offset` is
    None when the group has committed none; `diff` then counts from 0, as
    the Java broker's GET_CONSUME_STATS does."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int | None
    diff: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerProgress:
    group: str
    topics: list[str]
    queues: list[QueueProgress]
    #: clientIds of the group's online consumers (empty when none is online)
    clients: list[str]

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueReset:
    topic: str
    broker_name: str
    queue_id: int
    old_offset: int | None
    new_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetReset:
    """What reset_offset_by_time did. `notified_brokers` lists the brokers
    that pushed the new offsets to the group's online consumers
    (INVOKE_BROKER_TO_RESET_OFFSET); on the others the offsets were
    committed with UPDATE_CONSUMER_OFFSET."""

    group: str
    topic: str
    timestamp: int
    queues: list[QueueReset]
    notified_brokers: list[str]


@dataclasses.dataclass(frozen=True, slots=True)
class PendingTransaction:
    """A transaction a broker waits on: its latest half message copy."""

    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    born_timestamp: int
    check_times: int
    tran_state_table_offset: int
    commit_log_offset: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PendingTransaction:
        return cls(
            str(d["transactionId"]),
            str(d["producerGroup"]),
            str(d["topic"]),
            int(d["queueId"]),
            int(d["bornTimestamp"]),
            int(d["checkTimes"]),
            int(d["tranStateTableOffset"]),
            int(d["commitLogOffset"]),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PendingTransactions:
    """One broker's pending transactions: how many, and the oldest ones."""

    broker_addr: str
    total: int
    transactions: list[PendingTransaction]


def as_json(obj: Any) -> Any:
    """A result of this module (dataclasses, routes, messages, lists of
    them) as JSON-ready data."""
    if isinstance(obj, MessageExt):
        return message_as_dict(obj)
    if isinstance(obj, TopicRouteData):
        return route_as_dict(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        d = {f.name: as_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        for extra in ("total_messages", "diff_total", "clusters"):
            if hasattr(obj, extra):
                d[extra] = as_json(getattr(obj, extra))
        return d
    if isinstance(obj, dict):
        return {str(k): as_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [as_json(v) for v in obj]
    if isinstance(obj, MessageQueue):
        return {"topic": obj.topic, "brokerName": obj.broker_name, "queueId": obj.queue_id}
    if isinstance(obj, enum.Enum):
        return obj.name
    return obj


def message_as_dict(msg: MessageExt) -> dict[str, Any]:
    """A stored message as JSON-ready data: the body as text when it is
    UTF-8, otherwise base64 (`bodyEncoding` says which)."""
    try:
        body, encoding = msg.body.decode(), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return {
        "topic": msg.topic,
        "brokerName": msg.broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "commitLogOffset": msg.commit_log_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "bornTimestamp": msg.born_timestamp,
        "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp,
        "storeHost": msg.store_host,
        "reconsumeTimes": msg.reconsume_times,
        "sysFlag": msg.sys_flag,
        "bodyCRC": msg.body_crc,
        "storeSize": msg.store_size,
        "properties": dict(msg.properties),
        "body": body,
        "bodyEncoding": encoding,
    }


def send_result_as_dict(r: SendResult) -> dict[str, Any]:
    return {
        "sendStatus": r.send_status.name,
        "msgId": r.msg_id,
        "offsetMsgId": r.offset_msg_id,
        "topic": r.message_queue.topic,
        "brokerName": r.message_queue.broker_name,
        "queueId": r.message_queue.queue_id,
        "queueOffset": r.queue_offset,
    }
