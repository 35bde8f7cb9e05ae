"""SubscriptionGroupConfig and SubscriptionGroupManager: the broker's
consumer groups and their settings, persisted in
<store>/config/subscriptionGroup.json in RocketMQ's layout
(SubscriptionGroupWrapper: subscriptionGroupTable + dataVersion).

What the broker honours of a group's settings: consumeEnable (a pull of a
disabled group is refused NO_PERMISSION), retryQueueNums (the queues of
%RETRY%<group> when the broker creates it; 0: failed messages are dropped,
not retried), retryMaxTimes (how often a message is retried before it goes
to %DLQ%<group>, unless the consumer says otherwise). A group the table
lacks is created with the defaults on first use when autoCreateSubscriptionGroup
is on (RocketMQ's default); when off, its pulls and send-backs are refused
SUBSCRIPTION_GROUP_NOT_EXIST."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from pyrmq.common.config_file import JsonStateFile
from pyrmq.common.errors import InvalidParameterError, SubscriptionGroupNotExistError
from pyrmq.common.topics import SYSTEM_GROUPS

log = logging.getLogger("pyrmq.broker")

#: TopicValidator.validateGroup: the characters and length RocketMQ allows
_GROUP_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
GROUP_NAME_MAX_LENGTH = 255


def check_group_name(group: str) -> None:
    """INVALID_PARAMETER for a name RocketMQ refuses."""
    if not group:
        raise InvalidParameterError("the specified group is blank")
    if len(group) > GROUP_NAME_MAX_LENGTH:
        raise InvalidParameterError(
            f"the specified group is longer than group max length {GROUP_NAME_MAX_LENGTH}."
        )
    if not _GROUP_NAME.match(group):
        raise InvalidParameterError(
            f"the specified group[{group}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )


@dataclasses.dataclass(slots=True)
class SubscriptionGroupConfig:
    """One consumer group's settings (RocketMQ 4.9's SubscriptionGroupConfig;
    fields of later versions a tool sends are kept in `extra` and written back)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    _FIELDS = (
        ("groupName", "group_name", str),
        ("consumeEnable", "consume_enable", bool),
        ("consumeFromMinEnable", "consume_from_min_enable", bool),
        ("consumeBroadcastEnable", "consume_broadcast_enable", bool),
        ("retryQueueNums", "retry_queue_nums", int),
        ("retryMaxTimes", "retry_max_times", int),
        ("brokerId", "broker_id", int),
        ("whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly", int),
        ("notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable", bool),
    )

    @property
    def orderly(self) -> bool:
        """A FIFO group (RocketMQ 5's consumeMessageOrderly, set with
        ``updateSubGroup -o true``): POP hands out a queue's messages one
        at a time."""
        return str(self.extra.get("consumeMessageOrderly", "")).lower() == "true"

    def as_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        for key, attr, _ in self._FIELDS:
            out[key] = getattr(self, attr)
        return out

    @classmethod
    def from_json(cls, d: Any) -> SubscriptionGroupConfig:
        """From a SubscriptionGroupConfig JSON object; ValueError on a value
        of the wrong type (a Java client could not have sent it)."""
        if not isinstance(d, dict):
            raise ValueError("a subscription group config must be a JSON object")
        kw: dict[str, Any] = {}
        for key, attr, kind in cls._FIELDS:
            if key not in d or d[key] is None:
                continue
            v = d[key]
            if kind is bool:
                if isinstance(v, str) and v.lower() in ("true", "false"):
                    v = v.lower() == "true"
                elif not isinstance(v, bool):
                    raise ValueError(f"{key} must be true or false, not {v!r}")
            elif kind is int:
                if isinstance(v, bool) or not isinstance(v, int | str):
                    raise ValueError(f"{key} must be a whole number, not {v!r}")
                v = int(v)
                if not -(2**31) <= v < 2**31 and key != "brokerId":
                    raise ValueError(f"{key}={v} is not a Java int")
            elif not isinstance(v, str):
                raise ValueError(f"{key} must be a string, not {v!r}")
            kw[attr] = v
        if "group_name" not in kw:
            raise ValueError("groupName is missing")
        known = {key for key, _, _ in cls._FIELDS}
        kw["extra"] = {k: v for k, v in d.items() if k not in known}
        return cls(**kw)


class SubscriptionGroupManager:
    """The subscription group table (SubscriptionGroupManager). Every change
    bumps dataVersion and is saved off the event loop."""

    def __init__(
        self,
        store_root: str,
        *,
        auto_create_subscription_group: bool = True,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.auto_create_subscription_group = auto_create_subscription_group
        self.default_retry_queue_nums = retry_queue_nums
        self.default_retry_max_times = retry_max_times
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": 0}
        self._file = JsonStateFile(
            os.path.join(store_root, "config", "subscriptionGroup.json"), self._snapshot
        )
        self._on_change = on_change
        self.dirty = False
        loaded = self._file.load(self._parse)
        if loaded:
            self.table, version = loaded
            self.data_version = version or self.data_version
        for g in SYSTEM_GROUPS:
            if g not in self.table:
                self.table[g] = self._new(g)

    def _new(self, group: str) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig(
            group,
            retry_queue_nums=self.default_retry_queue_nums,
            retry_max_times=self.default_retry_max_times,
        )

    @staticmethod
    def _parse(
        data: dict[str, Any],
    ) -> tuple[dict[str, SubscriptionGroupConfig], dict[str, int] | None]:
        table = {
            str(name): SubscriptionGroupConfig.from_json({"groupName": name, **d})
            for name, d in (data.get("subscriptionGroupTable") or {}).items()
        }
        dv = data.get("dataVersion")
        version = None
        if isinstance(dv, dict):
            version = {k: int(dv.get(k, 0)) for k in ("timestamp", "counter")}
        return table, version

    def _snapshot(self) -> dict[str, Any]:
        return {
            "dataVersion": dict(self.data_version),
            "subscriptionGroupTable": {n: c.as_json() for n, c in sorted(self.table.items())},
        }

    def serialize_wrapper(self) -> dict[str, Any]:
        """SubscriptionGroupWrapper (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        return self._snapshot()

    def _changed(self) -> None:
        self.data_version = {
            "timestamp": int(time.time() * 1000),
            "counter": self.data_version["counter"] + 1,
        }
        self.dirty = True
        if self._on_change is not None:
            self._on_change()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with the defaults when the table
        lacks it and autoCreateSubscriptionGroup is on (None otherwise, or
        for a name RocketMQ refuses)."""
        sgc = self.table.get(group)
        if sgc is not None or not self.auto_create_subscription_group:
            return sgc
        try:
            check_group_name(group)
        except InvalidParameterError:
            return None
        sgc = self.table[group] = self._new(group)
        log.info("subscription group %s auto-created", group)
        self._changed()
        return sgc

    def require(self, group: str) -> SubscriptionGroupConfig:
        """find(), or SubscriptionGroupNotExistError (what a pull or a
        send-back of an unknown group answers with auto-creation off)."""
        sgc = self.find(group)
        if sgc is None:
            raise SubscriptionGroupNotExistError(
                f"subscription group [{group}] does not exist (autoCreateSubscriptionGroup "
                "is off: create it with updateSubGroup)"
            )
        return sgc

    def update(self, sgc: SubscriptionGroupConfig) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        check_group_name(sgc.group_name)
        old = self.table.get(sgc.group_name)
        self.table[sgc.group_name] = sgc
        log.info(
            "subscription group %s %s: %s",
            sgc.group_name,
            "updated" if old else "created",
            sgc.as_json(),
        )
        self._changed()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            log.warning("delete subscription group failed: %s does not exist", group)
            return False
        log.info("subscription group %s deleted", group)
        self._changed()
        return True

    async def persist(self) -> None:
        if self.dirty:
            self.dirty = False
            await self._file.persist()

    def persist_now(self) -> None:
        self._file.persist_now()
        self.dirty = False


__all__ = [
    "SYSTEM_GROUPS",
    "SubscriptionGroupConfig",
    "SubscriptionGroupManager",
    "check_group_name",
]
