"""AdminClient: cluster administration as typed coroutines (DefaultMQAdminExt).

    async with AdminClient("127.0.0.1:9876") as admin:
        await admin.create_topic("TopicTest", read_queue_nums=4, write_queue_nums=4)
        status = await admin.topic_status("TopicTest")
        progress = await admin.consumer_progress("my-group", "TopicTest")

It is built on a ClientInstance (route cache, broker address table) and its
MQClientAPI, and starts none of the instance's background jobs: an admin
session neither heartbeats nor refreshes routes; each call asks the name
server for what it needs. Every request has a deadline (`timeout`, seconds).

Errors are the client's: BrokerError subclasses for refusals (a topic the
name server has no route for is TopicNotExistError), RemotingError when a
name server or broker cannot be reached, ClientError for bad arguments.

Where mqadmin asks the broker for a whole table in one request
(GET_TOPIC_STATS_INFO, GET_CONSUME_STATS), this client assembles the same
table from the per-queue requests every 4.x broker serves (GET_MIN_OFFSET,
GET_MAX_OFFSET, QUERY_CONSUMER_OFFSET, a one-message PULL_MESSAGE), so it
also works against brokers that serve only the client protocol."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterable, Sequence
from typing import Any

from pyrmq.admin.ops import AdminOps
from pyrmq.admin.results import (
    BrokerInfo,
    ClusterInfo,
    ConsumerProgress,
    OffsetReset,
    PendingTransaction,
    PendingTransactions,
    QueueProgress,
    QueueReset,
    QueueStatus,
    TopicCreated,
    TopicDeleted,
    TopicStatus,
)
from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION
from pyrmq.client.instance import ClientInstance
from pyrmq.common.errors import (
    BrokerError,
    ClientError,
    ConsumerNotOnlineError,
    QueryNotFoundError,
    RemotingError,
    RequestCodeNotSupportedError,
    TopicNotExistError,
)
from pyrmq.common.message import Message, MessageExt, MessageQueue, decode_offset_msg_id
from pyrmq.common.results import PullStatus, SendResult
from pyrmq.common.route import TopicRouteData
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX, TBW102
from pyrmq.common.trace import TRACE_TOPIC, TraceRecord
from pyrmq.common.trace import decode as decode_trace
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.tls import resolve_client_tls

#: Consumer group of the admin's own pulls (Java's MixAll.TOOLS_CONSUMER_GROUP).
#: They never carry the commit-offset flag, so no offset is ever stored for it.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: Producer group of send_message.
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
#: The broker answers at most this many messages per pull of consume_message.
_PULL_BATCH = 32
#: How long query_msg_by_id waits for the store host an id names before it
#: falls back to a UNIQ_KEY lookup (a UNIQ_KEY decodes to a made-up address).
_VIEW_TIMEOUT = 3.0
_END_OF_TIME = 2**62


# -- the client -------------------------------------------------------------------------


class AdminClient(AdminOps):
    """Topics, clusters, consumer offsets and message lookups over the
    RocketMQ 4.x remoting protocol (DefaultMQAdminExt + DefaultMQAdminExtImpl);
    groups, stats and broker config come from AdminOps (pyrmq/admin/ops.py).

    `namesrv_addr` is 'host:port[;host:port]' (or NAMESRV_ADDR when None);
    `timeout` is the deadline of each request in seconds."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None,
        *,
        timeout: float = 5.0,
        producer_group: str = TOOLS_PRODUCER_GROUP,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.timeout = timeout
        self.producer_group = producer_group
        self.client = ClientInstance(
            namesrv_addr,
            request_timeout=timeout,
            ssl_context=resolve_client_tls(tls, tls_ca, tls_cert, tls_key),
            access_key=access_key,
            secret_key=secret_key,
        )
        self.api = self.client.api
        self._producer: Producer | None = None

    async def start(self) -> None:
        """Nothing to start: connections open on first use."""

    async def shutdown(self) -> None:
        """Stop the producer of send_message (if one was made) and close
        every connection."""
        try:
            if self._producer is not None:
                await self._producer.shutdown()
        finally:
            self._producer = None
            await self.client.shutdown()

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- helpers ---------------------------------------------------------------------------

    async def _route(self, topic: str) -> TopicRouteData:
        if not topic:
            raise ClientError("no topic given")
        route = await self.client.update_topic_route(topic)
        if route is None:
            raise TopicNotExistError(
                f"topic {topic!r} does not exist (the name server has no route for it)"
            )
        return route

    def _addr_of(self, route: TopicRouteData, broker_name: str) -> str:
        bd = route.broker_data(broker_name)
        addr = bd.select_broker_addr() if bd is not None else None
        if addr is None:
            raise ClientError(f"broker {broker_name!r} has no address in the route")
        return addr

    async def _cluster_info(self) -> dict[str, Any]:
        info = await self.api.namesrv_json(
            RequestCode.GET_BROKER_CLUSTER_INFO, timeout=self.timeout
        )
        if not isinstance(info, dict):
            raise RemotingError("the name server sent no cluster info")
        return info

    async def masters(self, cluster: str | None = None) -> list[str]:
        """Master addresses of `cluster`, or of every cluster when None."""
        return await self._masters(cluster)

    async def _masters(self, cluster: str | None) -> list[str]:
        """Master addresses of `cluster`, or of every cluster when None."""
        info = await self._cluster_info()
        table: dict[str, list[str]] = info.get("clusterAddrTable") or {}
        if cluster is not None and cluster not in table:
            known = ", ".join(sorted(table)) or "none"
            raise ClientError(f"cluster {cluster!r} is unknown to the name server (known: {known})")
        names = table[cluster] if cluster is not None else [n for v in table.values() for n in v]
        brokers = info.get("brokerAddrTable") or {}
        out = []
        for name in sorted(set(names)):
            addr = (brokers.get(name) or {}).get("brokerAddrs", {}).get("0")
            if addr:
                out.append(str(addr))
        if not out:
            raise ClientError(f"no master broker in cluster {cluster or '(any)'}")
        return out

    def _queues(self, route: TopicRouteData, topic: str) -> list[tuple[str, MessageQueue]]:
        """(broker address, queue) of every readable queue, in route order."""
        return [(self._addr_of(route, mq.broker_name), mq) for mq in route.subscribe_queues(topic)]

    async def _pull(self, addr: str, mq: MessageQueue, offset: int, n: int) -> Any:
        cmd = self.api.pull_command(
            mq,
            consumer_group=TOOLS_CONSUMER_GROUP,
            queue_offset=offset,
            max_msg_nums=n,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_ms=0,
            subscription="*",
            sub_version=0,
        )
        return await self.api.pull_message(
            addr, cmd, timeout=self.timeout, broker_name=mq.broker_name
        )

    # -- topics ----------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
        attributes: str = "",
    ) -> TopicCreated:
        """Create or update `topic` on one broker (`broker_addr`), on every
        master of `cluster`, or on every master the name server knows.
        `attributes`: RocketMQ 5's "+message.type=FIFO" form."""
        if broker_addr is not None and cluster is not None:
            raise ClientError("give a broker address or a cluster, not both")
        brokers = [broker_addr] if broker_addr else await self._masters(cluster)
        fields = {
            "topic": topic,
            "defaultTopic": TBW102,
            "readQueueNums": str(read_queue_nums),
            "writeQueueNums": str(write_queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        if attributes:
            fields["attributes"] = attributes
        for b in brokers:
            await self.api.broker_request(
                b, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, timeout=self.timeout
            )
        return TopicCreated(topic, brokers, read_queue_nums, write_queue_nums, perm, order)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> TopicDeleted:
        """Delete `topic` from the masters of `cluster` (every master when
        None), then from every name server."""
        if not topic:
            raise ClientError("no topic given")
        brokers = await self._masters(cluster)
        for b in brokers:
            await self.api.broker_request(
                b, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}, timeout=self.timeout
            )
        for ns in self.api.namesrv_addrs:
            cmd = RemotingCommand(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
            resp = await self.api.remoting.invoke(ns, cmd, self.timeout)
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError.from_response(resp.code, resp.remark, ns)
        return TopicDeleted(topic, brokers, list(self.api.namesrv_addrs))

    async def topic_list(self) -> list[str]:
        """Every topic the name server has a route for."""
        return await self.api.get_all_topic_list(self.timeout)

    async def topic_route(self, topic: str) -> TopicRouteData:
        return await self._route(topic)

    async def topic_status(self, topic: str) -> TopicStatus:
        """Min and max offset of every queue of `topic` (read and write
        queues alike) and the store time of each readable queue's last
        message."""
        route = await self._route(topic)

        async def one(addr: str, mq: MessageQueue, readable: bool) -> QueueStatus:
            lo, hi = await asyncio.gather(
                self.api.get_min_offset(addr, mq, self.timeout),
                self.api.get_max_offset(addr, mq, self.timeout),
            )
            last = 0
            if readable and hi > lo:
                r = await self._pull(addr, mq, hi - 1, 1)
                if r.pull_status is PullStatus.FOUND and r.msg_found_list:
                    last = r.msg_found_list[-1].store_timestamp
            return QueueStatus(mq.broker_name, mq.queue_id, lo, hi, last)

        jobs = []
        for qd in route.queue_datas:
            addr = self._addr_of(route, qd.broker_name)
            n = max(qd.read_queue_nums, qd.write_queue_nums)
            for qid in range(n):
                readable = bool(qd.perm & 4) and qid < qd.read_queue_nums
                jobs.append(one(addr, MessageQueue(topic, qd.broker_name, qid), readable))
        return TopicStatus(topic, list(await asyncio.gather(*jobs)))

    # -- cluster -----------------------------------------------------------------------------

    async def cluster_list(self) -> ClusterInfo:
        """Every broker the name server knows, with its runtime info."""
        info = await self._cluster_info()
        brokers = info.get("brokerAddrTable") or {}
        rows: list[tuple[str, str, int, str]] = []
        for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
            for name in sorted(names):
                addrs = (brokers.get(name) or {}).get("brokerAddrs") or {}
                for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                    rows.append((cluster, name, int(bid), str(addr)))

        async def one(row: tuple[str, str, int, str]) -> BrokerInfo:
            try:
                runtime = await self.broker_status(row[3])
            except (BrokerError, RemotingError) as e:
                return BrokerInfo(*row, runtime={}, error=str(e))
            return BrokerInfo(*row, runtime=runtime)

        return ClusterInfo(list(await asyncio.gather(*(one(r) for r in rows))))

    async def broker_status(self, broker_addr: str) -> dict[str, str]:
        """The broker's runtime info table (GET_BROKER_RUNTIME_INFO)."""
        resp = await self.api.broker_request(
            broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=self.timeout
        )
        try:
            table = json.loads(resp.body)["table"]
            return {str(k): str(v) for k, v in sorted(table.items())}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RemotingError(f"broker {broker_addr} sent malformed runtime info") from None

    async def pending_transactions(
        self, broker_addr: str | None = None, cluster: str | None = None, limit: int = 100
    ) -> list[PendingTransactions]:
        """The transactions brokers wait on (half messages neither committed
        nor rolled back): one broker's, or every master's of a cluster
        (of every cluster when neither is given). pyrmq's own request."""
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        out = []
        for addr in addrs:
            resp = await self.api.broker_request(
                addr,
                RequestCode.GET_PENDING_TRANSACTIONS,
                {"max": str(limit)},
                timeout=self.timeout,
            )
            try:
                data = json.loads(resp.body)
                rows = [PendingTransaction.from_json(t) for t in data["transactions"]]
                out.append(PendingTransactions(addr, int(data["total"]), rows))
            except (ValueError, KeyError, TypeError) as e:
                raise RemotingError(
                    f"broker {addr} sent malformed pending transactions: {e}"
                ) from None
        return out

    # -- consumer offsets ----------------------------------------------------------------------

    async def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Broker offset, committed offset and their difference for every
        readable queue of the group's topics, plus the total difference.

        From GET_CONSUME_STATS, as mqadmin asks it: every topic the group
        has offsets of (or `topic`), on every master. A broker that does not
        serve it (or a group with no offset yet) is asked per queue instead:
        `topic` when given, plus `%RETRY%<group>` when it exists."""
        if not group:
            raise ClientError("no consumer group given")
        try:
            stats = await self.examine_consume_stats(group, topic)
        except (RequestCodeNotSupportedError, ClientError):
            stats = None
        if stats is not None:
            queues = [
                QueueProgress(r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"],
                              r["consumerOffset"], max(0, r["brokerOffset"] - r["consumerOffset"]))
                for r in stats["offsetTable"]
            ]  # fmt: skip
            try:
                cc = await self.examine_consumer_connection(group)
                clients = sorted({str(c["clientId"]) for c in cc.get("connectionSet") or []})
            except (BrokerError, RemotingError):
                clients = []
            return ConsumerProgress(group, sorted({q.topic for q in queues}), queues, clients)
        retry = RETRY_GROUP_TOPIC_PREFIX + group
        topics = [topic] if topic else []
        routes: dict[str, TopicRouteData] = {}
        if topic:
            routes[topic] = await self._route(topic)
        try:
            routes[retry] = await self._route(retry)
            topics.append(retry)
        except TopicNotExistError:
            if not topic:
                raise ClientError(
                    f"group {group!r} has no retry topic {retry} (no consumer of it has "
                    "connected yet): give the topic it consumes"
                ) from None

        async def one(addr: str, mq: MessageQueue) -> QueueProgress:
            broker_offset, consumer_offset = await asyncio.gather(
                self.api.get_max_offset(addr, mq, self.timeout),
                self.api.query_consumer_offset(addr, group, mq, self.timeout),
            )
            diff = max(0, broker_offset - (consumer_offset or 0))
            return QueueProgress(
                mq.topic, mq.broker_name, mq.queue_id, broker_offset, consumer_offset, diff
            )

        jobs = [one(addr, mq) for t in topics for addr, mq in self._queues(routes[t], t)]
        queues = list(await asyncio.gather(*jobs))
        return ConsumerProgress(group, topics, queues, await self._clients(group, routes.values()))

    async def _clients(self, group: str, routes: Iterable[TopicRouteData]) -> list[str]:
        """The group's online consumers, from the first broker that knows them."""
        addrs = {a for r in routes for bd in r.broker_datas if (a := bd.select_broker_addr())}
        for addr in sorted(addrs):
            try:
                return sorted(await self.api.get_consumer_id_list(addr, group, self.timeout))
            except BrokerError:
                continue  # "no consumer for this group"
        return []

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, force: bool = True
    ) -> OffsetReset:
        """Move the group's committed offset of every readable queue of
        `topic` to the first message stored at or after `timestamp_ms` (the
        max offset when there is none; timestamp -1 also means the max).
        Without `force` an offset only moves backwards.

        Each broker is first asked to do it (INVOKE_BROKER_TO_RESET_OFFSET,
        what mqadmin does): it commits the new offsets and pushes them to the
        group's online consumers (RESET_CONSUMER_CLIENT_OFFSET), which adopt
        them in memory. Where the group has no online consumer, or the broker
        does not serve that request, the offsets are looked up per queue
        (SEARCH_OFFSET_BY_TIMESTAMP) and committed (UPDATE_CONSUMER_OFFSET).
        Note: a consumer that is online but ignores RESET_CONSUMER_CLIENT_OFFSET
        keeps its in-memory offsets and overwrites the reset at its next
        offset commit, unless it is restarted after the reset."""
        if not group:
            raise ClientError("no consumer group given")
        route = await self._route(topic)
        by_broker: dict[str, list[MessageQueue]] = {}
        for addr, mq in self._queues(route, topic):
            by_broker.setdefault(addr, []).append(mq)

        async def old_offsets(addr: str, mqs: list[MessageQueue]) -> list[int | None]:
            return list(
                await asyncio.gather(
                    *(self.api.query_consumer_offset(addr, group, mq, self.timeout) for mq in mqs)
                )
            )

        results: list[QueueReset] = []
        notified: list[str] = []
        for addr, mqs in by_broker.items():
            olds = await old_offsets(addr, mqs)
            news = await self._invoke_broker_to_reset(addr, group, topic, timestamp_ms, force)
            if news is not None:
                notified.append(addr)
            else:
                news = {}
                for mq, old in zip(mqs, olds, strict=True):
                    new = await self._offset_at(addr, mq, timestamp_ms)
                    if not force and old is not None and new >= old:
                        new = old
                    await self.api.update_consumer_offset(addr, group, mq, new, self.timeout)
                    news[mq.queue_id] = new
            for mq, old in zip(mqs, olds, strict=True):
                if mq.queue_id in news:
                    results.append(
                        QueueReset(topic, mq.broker_name, mq.queue_id, old, news[mq.queue_id])
                    )
        return OffsetReset(group, topic, timestamp_ms, results, notified)

    async def _offset_at(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        if timestamp_ms < 0:
            return await self.api.get_max_offset(addr, mq, self.timeout)
        return await self.api.search_offset(addr, mq, timestamp_ms, self.timeout)

    async def _invoke_broker_to_reset(
        self, addr: str, group: str, topic: str, timestamp_ms: int, force: bool
    ) -> dict[int, int] | None:
        """queue id -> new offset as the broker reset them, or None when it
        could not (no online consumer, or the request is not served)."""
        fields = {
            "topic": topic,
            "group": group,
            "timestamp": str(timestamp_ms),
            "isForce": "true" if force else "false",
        }
        try:
            resp = await self.api.broker_request(
                addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields, timeout=self.timeout
            )
        except (ConsumerNotOnlineError, RequestCodeNotSupportedError):
            return None
        try:
            table = json.loads(resp.body)["offsetTable"]
            return {int(e["queueId"]): int(e["offset"]) for e in table if e["topic"] == topic}
        except (ValueError, KeyError, TypeError):
            # A Java broker's body keys its map by JSON objects (not JSON):
            # the broker reset the offsets and told the consumers; compute
            # and commit the same offsets here to know them.
            return None

    # -- messages ------------------------------------------------------------------------------

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """The message of an offset message id (store host + CommitLog
        offset: VIEW_MESSAGE_BY_ID at that host). When `msg_id` is not one,
        or that host has no such message, it is taken as a UNIQ_KEY (the id a
        producer shows) and looked up on every broker of `topic`."""
        msg_id = msg_id.strip().upper()
        if not msg_id:
            raise ClientError("no message id given")
        why = ""
        try:
            host, offset = decode_offset_msg_id(msg_id)
            port = int(host.rpartition(":")[2] or -1)
            if not host or not 0 < port < 65536:
                raise ValueError(f"{msg_id} names no valid store host ({host})")
            msg = await self.api.view_message(host, offset, min(self.timeout, _VIEW_TIMEOUT))
            if msg.offset_msg_id.upper() == msg_id:
                msg.broker_name = await self._broker_name_of(host)
                return [msg]
            why = f"the message at {host} offset {offset} has another id"
        except (ValueError, BrokerError, RemotingError, TimeoutError) as e:
            why = str(e)
        if not topic:
            raise QueryNotFoundError(
                f"message {msg_id} not found by offset id ({why}); give its topic to look it "
                "up as a UNIQ_KEY"
            )
        found = await self.query_msg_by_key(topic, msg_id, 32, unique_key=True)
        if not found:
            raise QueryNotFoundError(f"no message with id {msg_id} in topic {topic}")
        return found

    async def _broker_name_of(self, addr: str) -> str:
        """The name of the broker at addr, '' when the name server does not say."""
        try:
            info = await self._cluster_info()
        except (BrokerError, RemotingError):
            return ""
        for name, bd in (info.get("brokerAddrTable") or {}).items():
            if addr in ((bd or {}).get("brokerAddrs") or {}).values():
                return str(name)
        return ""

    async def query_msg_by_key(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int = _END_OF_TIME,
        *,
        unique_key: bool = False,
    ) -> list[MessageExt]:
        """Messages of `topic` whose KEYS contain `key` (or, with
        `unique_key`, whose UNIQ_KEY is `key`), from every broker of the
        topic, oldest first, at most `max_num`."""
        if not key:
            raise ClientError("no key given")
        route = await self._route(topic)
        brokers = {self._addr_of(route, qd.broker_name): qd.broker_name for qd in route.queue_datas}
        addrs = sorted(brokers)
        found = await asyncio.gather(
            *(
                self.api.query_message(
                    a, topic, key, max_num, begin_ms, end_ms, unique_key, self.timeout
                )
                for a in addrs
            )
        )
        msgs = []
        for addr, batch in zip(addrs, found, strict=True):
            for m in batch:
                # the index is hashed: drop other keys that share a slot
                if (m.msg_id.upper() == key.upper()) if unique_key else (key in m.keys):
                    m.broker_name = brokers[addr]
                    msgs.append(m)
        msgs.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        return msgs[:max_num]

    async def query_msg_trace(
        self, msg_id: str, trace_topic: str = TRACE_TOPIC, max_num: int = 64
    ) -> list[TraceRecord]:
        """The trace records of a message (by its msgId, the UNIQ_KEY) in the
        trace topic, oldest first: its sends (Pub) and every consumer group's
        deliveries (SubBefore) and outcomes (SubAfter, given the group of
        their SubBefore), with the host of the client that wrote each."""
        records: list[TraceRecord] = []
        for m in await self.query_msg_by_key(trace_topic, msg_id, max_num):
            for r in decode_trace(m.body.decode("utf-8", "replace")):
                if r.msg_id == msg_id:
                    r.client_host = m.born_host
                    records.append(r)
        groups = {r.request_id: r.group for r in records if r.type == "SubBefore"}
        for r in records:
            if r.type == "SubAfter" and not r.group:
                r.group = groups.get(r.request_id, "")
        order = {"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}
        records.sort(key=lambda r: (r.timestamp, order.get(r.type, 4)))
        return records

    async def query_msg_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> MessageExt:
        """The message at `offset` of one queue (a pull of one message)."""
        route = await self._route(topic)
        mq = MessageQueue(topic, broker_name, queue_id)
        r = await self._pull(self._addr_of(route, broker_name), mq, offset, 1)
        for m in r.msg_found_list:
            if m.queue_offset == offset:
                return m
        raise QueryNotFoundError(
            f"no message at offset {offset} of {mq} (the queue holds "
            f"{r.min_offset}..{r.max_offset - 1})"
        )

    async def send_message(
        self,
        topic: str,
        body: bytes | str,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        broker_name: str | None = None,
        queue_id: int | None = None,
    ) -> SendResult:
        """Send one message through a Producer (group `producer_group`),
        to the given queue when both broker_name and queue_id are given."""
        if (broker_name is None) != (queue_id is None):
            raise ClientError("give both a broker name and a queue id, or neither")
        if self._producer is None:
            self._producer = Producer(
                self.producer_group,
                self.api.namesrv_addrs,
                send_msg_timeout=self.timeout,
                tls=self.client.ssl_context or False,
                rpc_hook=self.client.rpc_hook,
            )
            await self._producer.start()
        mq = (
            MessageQueue(topic, broker_name, queue_id)
            if broker_name and queue_id is not None
            else None
        )
        return await self._producer.send(Message(topic, body, tags=tags, keys=keys), mq=mq)

    async def consume_message(
        self,
        topic: str,
        count: int = 128,
        broker_name: str | None = None,
        queue_id: int | None = None,
        offset: int | None = None,
        begin_ms: int | None = None,
        end_ms: int | None = None,
    ) -> list[MessageExt]:
        """Up to `count` messages of `topic` (or of one broker, or one queue),
        pulled without any group offset: each queue from `offset` (else the
        first message stored at or after `begin_ms`, else its min offset) to
        the message before `end_ms` (else its max offset at the start)."""
        route = await self._route(topic)
        queues = [
            (a, mq)
            for a, mq in self._queues(route, topic)
            if (broker_name is None or mq.broker_name == broker_name)
            and (queue_id is None or mq.queue_id == queue_id)
        ]
        if not queues:
            raise ClientError(
                f"topic {topic} has no readable queue"
                + (f" {broker_name}#{queue_id}" if broker_name or queue_id is not None else "")
            )
        out: list[MessageExt] = []
        for addr, mq in queues:
            if len(out) >= count:
                break
            if offset is not None:
                start = offset
            elif begin_ms is not None:
                start = await self.api.search_offset(addr, mq, begin_ms, self.timeout)
            else:
                start = await self.api.get_min_offset(addr, mq, self.timeout)
            if end_ms is not None:
                stop = await self.api.search_offset(addr, mq, end_ms, self.timeout)
            else:
                stop = await self.api.get_max_offset(addr, mq, self.timeout)
            while start < stop and len(out) < count:
                n = min(_PULL_BATCH, stop - start, count - len(out))
                r = await self._pull(addr, mq, start, n)
                if r.pull_status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset > start:
                    start = r.next_begin_offset
                    continue
                if r.pull_status is not PullStatus.FOUND:
                    break
                out.extend(m for m in r.msg_found_list if m.queue_offset < stop)
                if r.next_begin_offset <= start:
                    break
                start = r.next_begin_offset
        return out[:count]
