"""TopicConfig and TopicConfigManager: the broker's topics, persisted in
<store>/config/topics.json in RocketMQ's layout."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.common.config_file import JsonStateFile
from pyrmq.common.errors import MessageIllegalError, TopicNotExistError
from pyrmq.common.topics import (
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TBW102,
)

log = logging.getLogger("pyrmq.broker")

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


@dataclasses.dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5's topic attributes (message.type: NORMAL, FIFO, DELAY,
    #: TRANSACTION or MIXED; a topic without one is NORMAL)
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def message_type(self) -> str:
        return self.attributes.get("message.type", "NORMAL")

    @property
    def queue_nums(self) -> int:
        return max(self.read_queue_nums, self.write_queue_nums)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    def as_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            str(d["topicName"]),
            int(d.get("readQueueNums", 16)),
            int(d.get("writeQueueNums", 16)),
            int(d.get("perm", 6)),
            str(d.get("topicFilterType", "SINGLE_TAG")),
            int(d.get("topicSysFlag", 0) or 0),
            bool(d.get("order", False)),
            {str(k): str(v) for k, v in (d.get("attributes") or {}).items()},
        )


#: the topic attributes a broker takes, and the values each may have
#: (RocketMQ 5's TopicAttributes)
TOPIC_ATTRIBUTES = {"message.type": {"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}}


def apply_attributes(current: dict[str, str], text: str) -> dict[str, str]:
    """current changed by CreateTopicRequestHeader.attributes, RocketMQ 5's
    AttributeParser text: comma-separated "+key=value" (set) and "-key"
    (drop), e.g. "+message.type=FIFO". MessageIllegalError for anything
    else."""
    out = dict(current)
    for item in filter(None, (s.strip() for s in text.split(","))):
        op, rest = item[0], item[1:]
        key, eq, value = rest.partition("=")
        allowed = TOPIC_ATTRIBUTES.get(key)
        if op not in "+-" or allowed is None:
            raise MessageIllegalError(
                f"attribute {item!r}: want +key=value or -key, "
                f"key one of {sorted(TOPIC_ATTRIBUTES)}"
            )
        if op == "-":
            out.pop(key, None)
        elif not eq or value not in allowed:
            raise MessageIllegalError(
                f"attribute {key}={value}: the value must be one of {sorted(allowed)}"
            )
        else:
            out[key] = value
    return out


def check_topic_name(topic: str) -> None:
    """MESSAGE_ILLEGAL-style error for a name RocketMQ refuses."""
    try:
        rmqcore.validate_topic(topic)
    except ValueError as e:
        raise MessageIllegalError(str(e)) from None


class TopicConfigManager:
    """The topic table (TopicConfigManager). `on_change` is called after a
    topic is created, updated or deleted (the broker re-registers)."""

    def __init__(
        self,
        store_root: str,
        *,
        cluster_name: str,
        broker_name: str,
        default_topic_queue_nums: int,
        auto_create_topic_enable: bool,
        max_queue_nums: int,
        on_change: Callable[[], None] | None = None,
        delay_levels: int = 18,
    ) -> None:
        self.table: dict[str, TopicConfig] = {}
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": 0}
        self._file = JsonStateFile(
            os.path.join(store_root, "config", "topics.json"), self._snapshot
        )
        self._on_change = on_change
        self.max_queue_nums = max_queue_nums
        loaded = self._file.load(self._parse)
        if loaded:
            self.table, version = loaded
            self.data_version = version or self.data_version
        # System topics (BrokerController / TopicConfigManager constructor).
        self._system(SELF_TEST_TOPIC, 1, 1)
        if auto_create_topic_enable:
            self._system(
                TBW102,
                default_topic_queue_nums,
                default_topic_queue_nums,
                PERM_READ | PERM_WRITE | PERM_INHERIT,
            )
        else:
            self.table.pop(TBW102, None)
        self._system(BENCHMARK_TOPIC, min(1024, max_queue_nums), min(1024, max_queue_nums))
        self._system(cluster_name, 16, 16, PERM_INHERIT)
        self._system(broker_name, 1, 1)
        self._system(OFFSET_MOVED_EVENT, 1, 1)
        self._system(SCHEDULE_TOPIC, delay_levels, delay_levels)

    @staticmethod
    def _parse(data: dict[str, Any]) -> tuple[dict[str, TopicConfig], dict[str, int] | None]:
        """topics.json as (table, dataVersion); raises on a shape or value
        that is not one (JsonStateFile then loads the previous save)."""
        table = {
            str(name): TopicConfig.from_json({"topicName": name, **d})
            for name, d in (data.get("topicConfigTable") or {}).items()
        }
        dv = data.get("dataVersion")
        version = None
        if isinstance(dv, dict):
            version = {k: int(dv.get(k, 0)) for k in ("timestamp", "counter")}
        return table, version

    def _system(self, name: str, r: int, w: int, perm: int = PERM_READ | PERM_WRITE) -> None:
        if name not in self.table:
            self.table[name] = TopicConfig(name, r, w, perm, topic_sys_flag=0)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "dataVersion": dict(self.data_version),
            "topicConfigTable": {n: tc.as_json() for n, tc in self.table.items()},
        }

    def _changed(self) -> None:
        self.data_version = {
            "timestamp": int(time.time() * 1000),
            "counter": self.data_version["counter"] + 1,
        }
        if self._on_change is not None:
            self._on_change()

    def bump_version(self) -> None:
        """A new dataVersion without a change of the table (the broker's
        permission changed: the name servers must hear of it)."""
        self._changed()

    async def persist(self) -> None:
        await self._file.persist()

    def persist_now(self) -> None:
        self._file.persist_now()

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def replace_all_from_master(self, wrapper: dict[str, Any]) -> bool:
        """A slave takes its master's table (GET_ALL_TOPIC_CONFIG's answer)
        when the master's dataVersion differs; True when it changed."""
        table, version = self._parse(wrapper)
        if version is None or version == self.data_version:
            return False
        self.table = table
        self.data_version = version
        if self._on_change is not None:
            self._on_change()
        return True

    def adopt_stored(self, stored: dict[str, int]) -> list[str]:
        """Give a table entry (that many read and write queues, read-write)
        to every topic the store holds messages of but the table lacks; the
        names adopted. A slave that becomes master (controller mode) needs
        it for a topic its old master created and sent to less than a
        metadata sync before it died: the messages were replicated, the
        topic table not yet, and without an entry the name servers would
        route the topic nowhere."""
        adopted = []
        for topic, n in sorted(stored.items()):
            if topic in self.table:
                continue
            try:
                check_topic_name(topic)
                self._check_queues(n, n)
            except MessageIllegalError as e:
                log.warning("stored topic %s not adopted: %s", topic, e)
                continue
            self.table[topic] = TopicConfig(topic, n, n, PERM_READ | PERM_WRITE)
            adopted.append(topic)
        if adopted:
            log.warning(
                "topics with stored messages but no entry in the topic table (their master "
                "died before the slave synced it) adopted with their stored queues: %s",
                ", ".join(f"{t} ({stored[t]})" for t in adopted),
            )
            self._changed()
        return adopted

    def serialize_wrapper(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper (REGISTER_BROKER, GET_ALL_TOPIC_CONFIG)."""
        return self._snapshot()

    def _check_queues(self, r: int, w: int) -> None:
        for n, what in ((r, "readQueueNums"), (w, "writeQueueNums")):
            if not 0 <= n <= self.max_queue_nums:
                raise MessageIllegalError(f"{what}={n} must be within 0..{self.max_queue_nums}")

    def update(self, tc: TopicConfig) -> TopicConfig:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC)."""
        check_topic_name(tc.topic_name)
        self._check_queues(tc.read_queue_nums, tc.write_queue_nums)
        old = self.table.get(tc.topic_name)
        self.table[tc.topic_name] = tc
        log.info("topic %s %s: %s", tc.topic_name, "updated" if old else "created", tc.as_json())
        self._changed()
        return tc

    def create_in_send(
        self, topic: str, default_topic: str, queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Auto-create topic from its default (TBW102) template, or raise
        TopicNotExistError (createTopicInSendMessageMethod)."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        check_topic_name(topic)
        tmpl = self.table.get(default_topic or TBW102)
        if tmpl is None or not tmpl.perm & PERM_INHERIT:
            raise TopicNotExistError(
                f"topic[{topic}] not exist, apply first please! "
                "(auto-create is off or the default topic does not allow it)"
            )
        n = max(
            1, min(queue_nums if queue_nums > 0 else tmpl.write_queue_nums, tmpl.write_queue_nums)
        )
        tc = TopicConfig(
            topic, n, n, tmpl.perm & ~PERM_INHERIT, tmpl.topic_filter_type, topic_sys_flag
        )
        self.table[topic] = tc
        log.info("topic %s auto-created from %s with %d queues", topic, tmpl.topic_name, n)
        self._changed()
        return tc

    def create_system_group_topic(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """%RETRY% and %DLQ% topics (createTopicInSendMessageBackMethod),
        with at most max_queue_nums queues (a group's retryQueueNums from
        an older subscriptionGroup.json may say more)."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        check_topic_name(topic)  # the group name is part of it
        queue_nums = min(queue_nums, self.max_queue_nums)
        tc = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.table[topic] = tc
        log.info("topic %s created with %d queue(s)", topic, queue_nums)
        self._changed()
        return tc

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        log.info("topic %s deleted", topic)
        self._changed()
        return True

    def require(self, topic: str) -> TopicConfig:
        tc = self.table.get(topic)
        if tc is None:
            raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        return tc


__all__ = [
    "TopicConfig",
    "TopicConfigManager",
    "check_topic_name",
]
