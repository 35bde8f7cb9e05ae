"""Who is connected: producer groups, consumer groups with their
subscriptions (ConsumerManager, ProducerManager), and orderly consumers'
queue locks (RebalanceLockManager)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from pyrmq.common.errors import SubscriptionParseFailedError
from pyrmq.common.subscription import SubscriptionData

log = logging.getLogger("pyrmq.broker")

CONSUME_TYPES = {0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY"}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}
CONSUME_FROM = {
    0: "CONSUME_FROM_LAST_OFFSET",
    1: "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    2: "CONSUME_FROM_MIN_OFFSET",
    3: "CONSUME_FROM_MAX_OFFSET",
    4: "CONSUME_FROM_FIRST_OFFSET",
    5: "CONSUME_FROM_TIMESTAMP",
}


def _enum(value: Any, names: dict[int, str], default: str) -> str:
    """The C++ client sends enums as integers, Java clients as names."""
    if isinstance(value, int) and not isinstance(value, bool):
        return names.get(value, default)
    if isinstance(value, str) and value in names.values():
        return value
    return default


@dataclasses.dataclass(slots=True)
class ClientChannelInfo:
    client_id: str
    language: str
    version: int
    last_update: float


@dataclasses.dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Any, ClientChannelInfo] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = dataclasses.field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ConsumerManager:
    """Consumer groups seen by heartbeat. `notify(group, channels)` is called
    when a group's membership changes (NOTIFY_CONSUMER_IDS_CHANGED)."""

    def __init__(
        self,
        notify: Callable[[str, list[Any]], None],
        channel_expired: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._notify = notify
        self.channel_expired = channel_expired
        self._clock = clock

    def register(
        self, channel: Any, client_id: str, language: str, version: int, data: dict[str, Any]
    ) -> ConsumerGroupInfo:
        group = str(data.get("groupName") or "")
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = ConsumerGroupInfo(group)
        info.consume_type = _enum(data.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY")
        info.message_model = _enum(data.get("messageModel"), MESSAGE_MODELS, "CLUSTERING")
        info.consume_from_where = _enum(
            data.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"
        )
        before = info.client_ids()
        ch = info.channels.get(channel)
        if ch is None or ch.client_id != client_id:
            info.channels[channel] = ClientChannelInfo(client_id, language, version, self._clock())
        else:
            ch.last_update = self._clock()
        subs: dict[str, SubscriptionData] = {}
        sub_set = data.get("subscriptionDataSet") or []
        if not isinstance(sub_set, list):
            raise SubscriptionParseFailedError(
                f"group {group}: subscriptionDataSet must be a JSON array"
            )
        for s in sub_set:
            if not isinstance(s, dict) or not s.get("topic"):
                continue
            try:
                ver = int(s.get("subVersion") or 0)
            except (TypeError, ValueError):
                ver = 0
            try:
                sd = SubscriptionData.parse(
                    str(s["topic"]),
                    str(s.get("subString") or "*"),
                    ver,
                    str(s.get("expressionType") or "TAG"),
                )
            except SubscriptionParseFailedError as e:
                log.warning("group %s: %s", group, e)
                continue
            subs[sd.topic] = sd
        if subs or info.consume_type == "CONSUME_PASSIVELY":
            info.subscriptions = subs
        if info.client_ids() != before:
            log.info("consumer group %s: %s", group, info.client_ids())
            self._notify(group, list(info.channels))
        return info

    def unregister(self, channel: Any, group: str) -> None:
        info = self.groups.get(group)
        if info is None or channel not in info.channels:
            return
        del info.channels[channel]
        self._removed(info)

    def _removed(self, info: ConsumerGroupInfo) -> None:
        if not info.channels:
            del self.groups[info.group]
            log.info("consumer group %s has no consumers left", info.group)
        else:
            self._notify(info.group, list(info.channels))

    def channel_closed(self, channel: Any) -> None:
        for info in list(self.groups.values()):
            if info.channels.pop(channel, None) is not None:
                self._removed(info)

    def scan_not_active(self) -> None:
        now = self._clock()
        for info in list(self.groups.values()):
            stale = [
                c for c, i in info.channels.items() if now - i.last_update > self.channel_expired
            ]
            for c in stale:
                log.warning("consumer %s of %s expired", info.channels[c].client_id, info.group)
                del info.channels[c]
                close = getattr(c, "close", None)
                if close is not None:
                    close()
            if stale:
                self._removed(info)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None


class ProducerManager:
    def __init__(
        self, channel_expired: float = 120.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.groups: dict[str, dict[Any, ClientChannelInfo]] = {}
        self.channel_expired = channel_expired
        self._clock = clock

    def register(
        self, channel: Any, client_id: str, language: str, version: int, group: str
    ) -> None:
        chans = self.groups.setdefault(group, {})
        ch = chans.get(channel)
        if ch is None:
            chans[channel] = ClientChannelInfo(client_id, language, version, self._clock())
        else:
            ch.last_update = self._clock()

    def unregister(self, channel: Any, group: str) -> None:
        chans = self.groups.get(group)
        if chans is not None:
            chans.pop(channel, None)
            if not chans:
                del self.groups[group]

    def channel_closed(self, channel: Any) -> None:
        for group in list(self.groups):
            self.unregister(channel, group)

    def scan_not_active(self) -> None:
        now = self._clock()
        for group, chans in list(self.groups.items()):
            for c in [c for c, i in chans.items() if now - i.last_update > self.channel_expired]:
                del chans[c]
            if not chans:
                del self.groups[group]


MQKey = tuple[str, str, int]  # (topic, brokerName, queueId)


class RebalanceLockManager:
    """Queue locks of orderly consumers; a lock not renewed for
    lock_max_live seconds expires (rocketmq.broker.rebalance.lockMaxLiveTime)."""

    def __init__(
        self, lock_max_live: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lock_max_live = lock_max_live
        self._clock = clock
        self._locks: dict[str, dict[MQKey, tuple[str, float]]] = {}

    def try_lock_batch(self, group: str, mqs: Iterable[MQKey], client_id: str) -> list[MQKey]:
        now = self._clock()
        table = self._locks.setdefault(group, {})
        granted = []
        for mq in mqs:
            held = table.get(mq)
            if held is None or held[0] == client_id or now - held[1] > self.lock_max_live:
                table[mq] = (client_id, now)
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MQKey], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            held = table.get(mq)
            if held is not None and held[0] == client_id:
                del table[mq]

    def holder(self, group: str, mq: MQKey) -> str | None:
        held = self._locks.get(group, {}).get(mq)
        if held is None or self._clock() - held[1] > self.lock_max_live:
            return None
        return held[0]
