"""What the dashboard asks the cluster, over one shared AdminClient.

Nothing here knows HTTP: the pages (app.py) call these coroutines and show
what they return or the error they raise. Two rules keep a dashboard left
open in a few browser tabs from weighing on the brokers:

* every call runs under one semaphore (`max_concurrency` calls at a time)
  and one overall deadline on top of the AdminClient's per-request one;
* the read-only answers the charts poll are cached for `cache_seconds`, so
  N tabs polling cost what one does.

The user's actions (create/delete a topic, send, reset offsets, resend)
are never cached and never retried."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyrmq.admin.client import TOOLS_PRODUCER_GROUP, AdminClient
from pyrmq.admin.results import (
    ClusterInfo,
    ConsumerProgress,
    OffsetReset,
    TopicCreated,
    TopicDeleted,
    TopicStatus,
)
from pyrmq.common.errors import BrokerError, ClientError, ConsumerNotOnlineError, RemotingError
from pyrmq.common.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    SYSTEM_PROPERTIES,
    Message,
    MessageExt,
    MessageQueue,
)
from pyrmq.common.results import SendResult
from pyrmq.common.route import TopicRouteData
from pyrmq.common.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    is_system_group,
    is_system_topic,
    retry_topic,
)
from pyrmq.producer import Producer

T = TypeVar("T")

#: at most this many messages are listed by one query of a topic's time range
MAX_LISTED = 500
#: properties the dashboard drops when it resends a stored message: the ones
#: the broker and the sending client set (SYSTEM_PROPERTIES) plus the delay
#: level and the WAIT flag a resend must not inherit
_NOT_RESENT = SYSTEM_PROPERTIES | {"DELAY", "WAIT"}

@dataclass(frozen=True, slots=True)
class TopicList:
    """The name server's topics, sorted into what a user reads."""

    normal: list[str]
    system: list[str]
    #: consumer groups seen through their %RETRY% / %DLQ% topics
    groups: list[str]
    dlq_groups: list[str]


@dataclass(frozen=True, slots=True)
class BrokerRow:
    """One broker of the cluster page."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str
    version: str
    runtime: dict[str, str]
    error: str | None
    #: bytes stored in the CommitLog (max - min offset), None when not reported
    stored_bytes: int | None
    #: put and get TPS as the broker reports them (Java brokers), else None
    put_tps: str | None = None
    get_tps: str | None = None
    #: disk use as the broker reports it (Java: commitLogDiskRatio), else None
    disk: str | None = None


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One consumer group of the groups page."""

    name: str
    #: brokers holding its subscription group config; empty for a group
    #: seen only through its %RETRY% / %DLQ% topics
    brokers: list[str]
    has_dlq: bool
    #: its subscription group config on the first broker that has it
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupList:
    groups: list[GroupRow]
    #: RocketMQ's own groups (is_system_group), hidden from the list
    system: list[str]
    #: "addr: why" for each master that did not list its subscription groups
    errors: list[str]


@dataclass(slots=True)
class _Cached:
    at: float
    value: Any


@dataclass(slots=True)
class _Cache:
    ttl: float
    entries: dict[str, _Cached] = field(default_factory=dict)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class DashboardService:
    """The dashboard's calls: AdminClient's, bounded and cached, plus the
    resend of a stored message (which AdminClient has no call for)."""

    def __init__(
        self,
        admin: AdminClient,
        *,
        cache_seconds: float = 2.0,
        max_concurrency: int = 4,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin = admin
        self._limit = asyncio.Semaphore(max_concurrency)
        self._cache = _Cache(cache_seconds)
        #: one dashboard call may make several requests; this bounds them all
        self.deadline = deadline if deadline is not None else admin.timeout * 4
        self._clock = clock
        self._producer: Producer | None = None

    async def shutdown(self) -> None:
        try:
            if self._producer is not None:
                await self._producer.shutdown()
        finally:
            self._producer = None
            await self.admin.shutdown()

    async def _call(self, coro: Awaitable[T]) -> T:
        async with self._limit, asyncio.timeout(self.deadline):
            return await coro

    async def _cached(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        now = self._clock()
        hit = self._cache.entries.get(key)
        if hit is not None and now - hit.at < self._cache.ttl:
            value: T = hit.value
            return value
        value = await self._call(make())
        self._cache.entries[key] = _Cached(self._clock(), value)
        if len(self._cache.entries) > 256:  # forget the stale ones
            ttl = self._cache.ttl
            self._cache.entries = {k: v for k, v in self._cache.entries.items() if now - v.at < ttl}
        return value

    # -- cluster ---------------------------------------------------------------------------

    async def cluster(self) -> list[BrokerRow]:
        info: ClusterInfo = await self._cached("cluster", self.admin.cluster_list)
        rows = []
        for b in info.brokers:
            rt = b.runtime
            lo, hi = _int(rt.get("commitLogMinOffset")), _int(rt.get("commitLogMaxOffset"))
            rows.append(
                BrokerRow(
                    b.cluster,
                    b.broker_name,
                    b.broker_id,
                    b.addr,
                    rt.get("brokerRole") or ("MASTER" if b.broker_id == 0 else "SLAVE"),
                    rt.get("brokerVersionDesc", "-"),
                    rt,
                    b.error,
                    hi - lo if lo is not None and hi is not None else None,
                    rt.get("putTps"),
                    rt.get("getTransferedTps") or rt.get("getTransferredTps"),
                    rt.get("commitLogDiskRatio"),
                )
            )
        return rows

    async def cluster_sample(self) -> dict[str, Any]:
        """What the cluster chart polls: each broker's CommitLog end (its
        rate of change is the put throughput in bytes/s) and reported TPS."""
        rows = await self.cluster()
        return {
            "ts": int(time.time() * 1000),
            "brokers": [
                {
                    "addr": r.addr,
                    "brokerName": r.broker_name,
                    "brokerId": r.broker_id,
                    "commitLogMaxOffset": _int(r.runtime.get("commitLogMaxOffset")),
                    "putTps": r.put_tps,
                    "error": r.error,
                }
                for r in rows
            ],
        }

    # -- topics ----------------------------------------------------------------------------

    async def topics(self) -> TopicList:
        names: list[str] = await self._cached("topics", self.admin.topic_list)
        groups = sorted(
            {t[len(RETRY_GROUP_TOPIC_PREFIX) :] for t in names if t.startswith("%RETRY%")}
            | {t[len(DLQ_GROUP_TOPIC_PREFIX) :] for t in names if t.startswith("%DLQ%")}
        )
        dlq = sorted(t[len(DLQ_GROUP_TOPIC_PREFIX) :] for t in names if t.startswith("%DLQ%"))
        return TopicList(
            sorted(t for t in names if not is_system_topic(t)),
            sorted(t for t in names if is_system_topic(t)),
            groups,
            dlq,
        )

    async def topic(self, topic: str) -> tuple[TopicRouteData, TopicStatus]:
        route = await self._call(self.admin.topic_route(topic))
        status = await self._call(self.admin.topic_status(topic))
        return route, status

    async def topic_sample(self, topic: str) -> dict[str, Any]:
        """What the topic chart polls: the sum of its queues' max offsets
        (its rate of change is the topic's TPS in messages/s). Only max
        offsets are asked, one request per queue, cached."""

        async def make() -> dict[str, Any]:
            route = await self.admin.topic_route(topic)
            jobs = []
            for qd in route.queue_datas:
                bd = route.broker_data(qd.broker_name)
                addr = bd.select_broker_addr() if bd is not None else None
                if addr is None:
                    continue
                for qid in range(qd.write_queue_nums):
                    mq = MessageQueue(topic, qd.broker_name, qid)
                    jobs.append(self.admin.api.get_max_offset(addr, mq, self.admin.timeout))
            total = sum(await asyncio.gather(*jobs))
            return {"ts": int(time.time() * 1000), "topic": topic, "totalMaxOffset": total}

        sample: dict[str, Any] = await self._cached("topic-sample:" + topic, make)
        return sample

    async def create_topic(
        self, topic: str, read_queues: int, write_queues: int, perm: int, order: bool
    ) -> TopicCreated:
        topic = topic.strip()
        if not topic:
            raise ClientError("give the topic a name")
        if any(c.isspace() for c in topic) or len(topic) > 127:
            raise ClientError(f"{topic!r} is no valid topic name (no spaces, at most 127 chars)")
        for what, n in (("read queues", read_queues), ("write queues", write_queues)):
            if not 1 <= n <= 1024:
                raise ClientError(f"{what} must be between 1 and 1024, not {n}")
        if perm not in (2, 4, 6):
            raise ClientError(f"perm must be 2 (write), 4 (read) or 6 (read+write), not {perm}")
        created = await self._call(
            self.admin.create_topic(topic, read_queues, write_queues, perm, order)
        )
        self._forget("topics")
        return created

    async def delete_topic(self, topic: str) -> TopicDeleted:
        deleted = await self._call(self.admin.delete_topic(topic))
        self._forget("topics")
        return deleted

    async def send(self, topic: str, body: str, tags: str, keys: str) -> SendResult:
        if not body:
            raise ClientError("the message has no body")
        return await self._call(
            self.admin.send_message(topic, body, tags or None, keys.split() or None)
        )

    def _forget(self, key: str) -> None:
        self._cache.entries.pop(key, None)

    # -- consumer groups ----------------------------------------------------------------------

    async def groups(self) -> GroupList:
        """The masters' subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        merged with the groups the %RETRY% / %DLQ% topics name (a group a
        consumer ran under without a config, e.g. on an auto-creating
        broker that has since restarted). A master that does not answer is
        named in `errors`, the others are still listed."""
        topics = await self.topics()
        masters = [r for r in await self.cluster() if r.broker_id == 0 and not r.error]
        answers = await asyncio.gather(
            *(self._subscription_groups(r.addr) for r in masters), return_exceptions=True
        )
        brokers: dict[str, list[str]] = {}
        configs: dict[str, dict[str, Any]] = {}
        errors = []
        for r, answer in zip(masters, answers, strict=True):
            if isinstance(answer, BrokerError | RemotingError | TimeoutError | OSError):
                errors.append(f"{r.broker_name} ({r.addr}): {answer or type(answer).__name__}")
                continue
            if isinstance(answer, BaseException):
                raise answer
            for name, config in (answer.get("subscriptionGroupTable") or {}).items():
                brokers.setdefault(name, []).append(r.broker_name)
                configs.setdefault(name, config if isinstance(config, dict) else {})
        names = set(brokers) | set(topics.groups)
        dlq = set(topics.dlq_groups)
        rows = [
            GroupRow(g, sorted(brokers.get(g, [])), g in dlq, configs.get(g, {}))
            for g in sorted(names)
            if not is_system_group(g)
        ]
        return GroupList(rows, sorted(g for g in names if is_system_group(g)), errors)

    async def _subscription_groups(self, addr: str) -> dict[str, Any]:
        return await self._cached("subgroups:" + addr, lambda: self.admin.subscription_groups(addr))

    async def connection(self, group: str) -> dict[str, Any] | None:
        """The group's ConsumerConnection (online clients, subscriptions,
        consume type and model), None when no consumer of it is online."""
        try:
            return await self._call(self.admin.examine_consumer_connection(group))
        except ConsumerNotOnlineError:
            return None

    async def progress(self, group: str, topic: str | None) -> ConsumerProgress:
        return await self._call(self.admin.consumer_progress(group, topic or None))

    async def progress_sample(self, group: str, topic: str | None) -> dict[str, Any]:
        """What the lag chart polls: the group's total lag."""
        p = await self._cached(
            f"progress:{group}\0{topic or ''}",
            lambda: self.admin.consumer_progress(group, topic or None),
        )
        return {"ts": int(time.time() * 1000), "group": group, "diffTotal": p.diff_total}

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int) -> OffsetReset:
        """timestamp_ms -1: skip the backlog (every offset to the queue's end)."""
        if not group or not topic:
            raise ClientError("give a group and a topic")
        return await self._call(self.admin.reset_offset_by_time(group, topic, timestamp_ms))

    # -- messages --------------------------------------------------------------------------

    async def by_key(self, topic: str, key: str, limit: int = 64) -> list[MessageExt]:
        return await self._call(self.admin.query_msg_by_key(topic, key, limit))

    async def by_id(self, msg_id: str, topic: str | None) -> list[MessageExt]:
        return await self._call(self.admin.query_msg_by_id(msg_id, topic or None))

    async def by_time(
        self, topic: str, begin_ms: int | None, end_ms: int | None, limit: int
    ) -> list[MessageExt]:
        if not 1 <= limit <= MAX_LISTED:
            raise ClientError(f"list between 1 and {MAX_LISTED} messages, not {limit}")
        if begin_ms is not None and end_ms is not None and end_ms <= begin_ms:
            raise ClientError("the end of the time range is not after its beginning")
        msgs = await self._call(
            self.admin.consume_message(topic, limit, begin_ms=begin_ms, end_ms=end_ms)
        )
        return sorted(msgs, key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id))

    async def at_offset(self, topic: str, broker: str, queue_id: int, offset: int) -> MessageExt:
        return await self._call(self.admin.query_msg_by_offset(topic, broker, queue_id, offset))

    async def dlq(self, group: str, limit: int) -> list[MessageExt]:
        if not group:
            raise ClientError("give a consumer group")
        return await self.by_time(dlq_topic(group), None, None, limit)

    async def resend(
        self, topic: str, broker: str, queue_id: int, offset: int, group: str, target: str
    ) -> tuple[str, SendResult]:
        """Send a copy of a stored message again: to `group`'s retry topic
        (`target` 'retry': only that group gets it, as after a
        RECONSUME_LATER, and its consumers see the original topic), or to
        its original topic ('original': every group subscribed gets it).

        resend_to_client pushes the stored message itself to one online
        client of the group instead (CONSUME_MESSAGE_DIRECTLY)."""
        if target not in ("retry", "original"):
            raise ClientError(f"resend to 'retry' or 'original', not {target!r}")
        msg = await self.at_offset(topic, broker, queue_id, offset)
        original = msg.properties.get(PROPERTY_RETRY_TOPIC) or msg.topic
        if original.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise ClientError(f"message {msg.msg_id} names no original topic (only {original})")
        props = {k: v for k, v in msg.properties.items() if k not in _NOT_RESENT}
        if target == "retry":
            if not group:
                if not topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                    raise ClientError("give the consumer group to resend the message to")
                group = topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
            dest = retry_topic(group)
        else:
            dest = original
        copy = Message(dest, msg.body, properties=props, flag=msg.flag)
        copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id
        if target == "retry":
            # the consumer shows the message under this topic again
            copy.properties[PROPERTY_RETRY_TOPIC] = original
        result = await self._call(self._send(copy))
        return dest, result

    async def resend_to_client(
        self, topic: str, broker: str, queue_id: int, offset: int, group: str, client_id: str
    ) -> tuple[str, dict[str, Any]]:
        """Have one online client of `group` consume the stored message once
        (CONSUME_MESSAGE_DIRECTLY, forwarded by the broker storing it): the
        group and the client's ConsumeMessageDirectlyResult. Nothing is
        stored again; whatever the client answers is not retried."""
        if not group:
            if not topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                raise ClientError("give the consumer group of the client")
            group = topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
        if not client_id:
            raise ClientError(f"pick an online client of {group}")
        msg = await self.at_offset(topic, broker, queue_id, offset)
        result = await self._call(
            self.admin.consume_message_directly(group, client_id, msg.offset_msg_id, msg.topic)
        )
        return group, result

    async def _send(self, msg: Message) -> SendResult:
        if self._producer is None:
            client = self.admin.client
            producer = Producer(
                TOOLS_PRODUCER_GROUP + "_DASHBOARD",
                self.admin.api.namesrv_addrs,
                send_msg_timeout=self.admin.timeout,
                tls=client.ssl_context or False,
                rpc_hook=client.rpc_hook,
            )
            await producer.start()
            self._producer = producer
        return await self._producer.send(msg)
