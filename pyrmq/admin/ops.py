"""AdminClient's calls over the admin requests of RocketMQ's brokers and name
servers (DefaultMQAdminExt): consume stats, connections, subscription
groups, broker config, consumer running info, direct consumption, stats,
cloning offsets, time spans, KV config. AdminClient inherits them.

Results are JSON-ready data in RocketMQ's own field names (what mqadmin
and rocketmq-dashboard read), with a MessageQueue key given as a field
(`{"topic", "brokerName", "queueId", ...}`) where RocketMQ keys a map by it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyrmq.common import fastjson
from pyrmq.common.config_file import parse_properties_text
from pyrmq.common.errors import (
    BrokerError,
    ClientError,
    ConsumerNotOnlineError,
    RemotingError,
    TopicNotExistError,
)
from pyrmq.common.route import TopicRouteData
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.client.api import MQClientAPI

#: the KV namespace of ordered topics' broker lists (updateOrderConf)
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

SUBSCRIPTION_GROUP_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeBroadcastEnable": True,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
}


def _body(resp: RemotingCommand, what: str, addr: str) -> Any:
    try:
        return fastjson.loads(resp.body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RemotingError(f"{addr} sent a malformed {what}: {e}") from None


def _queue_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A map keyed by MessageQueue objects as rows: the queue's fields plus
    the value's, ordered by topic, broker, queue."""
    rows = []
    for key, value in table.items():
        mq = json.loads(key)
        rows.append(
            {"topic": mq["topic"], "brokerName": mq["brokerName"], "queueId": mq["queueId"]} | value
        )
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    return rows


class AdminOps:
    if TYPE_CHECKING:
        api: MQClientAPI
        timeout: float

        async def _masters(self, cluster: str | None) -> list[str]: ...
        async def _route(self, topic: str) -> TopicRouteData: ...
        async def _cluster_info(self) -> dict[str, Any]: ...
        async def topic_list(self) -> list[str]: ...

    async def _request(
        self, addr: str, code: int, fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        return await self.api.broker_request(addr, code, fields, body, timeout=self.timeout)

    async def _targets(self, broker_addr: str | None, cluster: str | None) -> list[str]:
        if broker_addr and cluster:
            raise ClientError("give a broker address or a cluster, not both")
        return [broker_addr] if broker_addr else await self._masters(cluster)

    def _route_masters(self, route: TopicRouteData) -> list[str]:
        return sorted({a for bd in route.broker_datas if (a := bd.broker_addrs.get(0))})

    async def _group_brokers(self, group: str) -> list[str]:
        """The masters serving the group's retry topic, else every master."""
        try:
            return self._route_masters(await self._route(RETRY_GROUP_TOPIC_PREFIX + group))
        except TopicNotExistError:
            return await self._masters(None)

    # -- consume progress ---------------------------------------------------------------

    async def examine_consume_stats(self, group: str, topic: str | None = None) -> dict[str, Any]:
        """ConsumeStats of the group over every master (GET_CONSUME_STATS):
        {"consumeTps", "diffTotal", "offsetTable": [queue rows with
        brokerOffset, consumerOffset, pullOffset, lastTimestamp]}."""
        if not group:
            raise ClientError("no consumer group given")
        addrs = (
            self._route_masters(await self._route(topic)) if topic else await self._masters(None)
        )
        fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        resps = await asyncio.gather(
            *(self._request(a, RequestCode.GET_CONSUME_STATS, fields) for a in addrs)
        )
        table: dict[str, Any] = {}
        tps = 0.0
        for addr, resp in zip(addrs, resps, strict=True):
            cs = _body(resp, "ConsumeStats", addr)
            table.update(cs.get("offsetTable") or {})
            tps += float(cs.get("consumeTps") or 0)
        rows = _queue_rows(table)
        if not rows:
            raise ClientError(
                f"no consume stats of group {group!r}"
                + (f" on topic {topic!r}" if topic else "")
                + ": it has committed no offset yet (has it consumed anything?)"
            )
        diff = sum(max(0, r["brokerOffset"] - r["consumerOffset"]) for r in rows)
        return {"consumerGroup": group, "consumeTps": round(tps, 2), "diffTotal": diff,
                "offsetTable": rows}  # fmt: skip

    async def examine_consumer_connection(self, group: str) -> dict[str, Any]:
        """ConsumerConnection from the first broker that knows the group online."""
        last: BrokerError | None = None
        for addr in await self._group_brokers(group):
            try:
                resp = await self._request(
                    addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}
                )
            except ConsumerNotOnlineError as e:
                last = e
                continue
            return dict(_body(resp, "ConsumerConnection", addr))
        raise last or ConsumerNotOnlineError(f"the consumer group[{group}] not online")

    async def examine_producer_connection(self, group: str, topic: str) -> dict[str, Any]:
        """ProducerConnection: the group's producers connected to the topic's
        brokers (mqadmin producerConnection -g -t)."""
        conns: dict[str, dict[str, Any]] = {}
        last: BrokerError | None = None
        for addr in self._route_masters(await self._route(topic)):
            try:
                resp = await self._request(
                    addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}
                )
            except BrokerError as e:
                last = e
                continue
            for c in _body(resp, "ProducerConnection", addr).get("connectionSet") or []:
                conns[f"{c.get('clientId')}|{c.get('clientAddr')}"] = c
        if not conns and last is not None:
            raise last
        return {"connectionSet": [conns[k] for k in sorted(conns)]}

    async def query_topic_consume_by_who(self, topic: str) -> list[str]:
        """Groups that consume the topic (online, or with offsets), over its brokers."""
        groups: set[str] = set()
        for addr in self._route_masters(await self._route(topic)):
            resp = await self._request(
                addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}
            )
            groups.update(_body(resp, "GroupList", addr).get("groupList") or [])
        return sorted(groups)

    async def query_consume_time_span(self, topic: str, group: str) -> list[dict[str, Any]]:
        """Per queue: first and last store time, the store time of the last
        consumed message and the wait of the next one (QueueTimeSpan)."""
        out = []
        for addr in self._route_masters(await self._route(topic)):
            resp = await self._request(
                addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": topic, "group": group}
            )
            for s in _body(resp, "QueryConsumeTimeSpanBody", addr).get("consumeTimeSpanSet") or []:
                mq = s.pop("messageQueue", {})
                out.append({"topic": mq.get("topic"), "brokerName": mq.get("brokerName"),
                            "queueId": mq.get("queueId"), **s})  # fmt: skip
        out.sort(key=lambda r: (r["brokerName"], r["queueId"]))
        return out

    async def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str, offline: bool = False
    ) -> list[str]:
        """dest_group takes src_group's offsets of the topic on each of its
        brokers; the brokers done."""
        addrs = self._route_masters(await self._route(topic))
        fields = {"srcGroup": src_group, "destGroup": dest_group, "topic": topic,
                  "offline": str(offline).lower()}  # fmt: skip
        for addr in addrs:
            await self._request(addr, RequestCode.CLONE_GROUP_OFFSET, fields)
        return addrs

    async def fetch_consume_stats_in_broker(self, broker_addr: str) -> dict[str, Any]:
        """ConsumeStatsList of one broker (mqadmin brokerConsumeStats)."""
        fields = {"isOrder": "false", "isOnline": "false", "timeoutMillis": "5000"}
        resp = await self._request(broker_addr, RequestCode.GET_BROKER_CONSUME_STATS, fields)
        data = _body(resp, "ConsumeStatsList", broker_addr)
        rows = []
        for entry in data.get("consumeStatsList") or []:
            for group, stats in entry.items():
                for cs in stats:
                    for r in _queue_rows(cs.get("offsetTable") or {}):
                        rows.append({"consumerGroup": group, **r})
        return {"brokerAddr": data.get("brokerAddr", broker_addr),
                "totalDiff": data.get("totalDiff", 0), "offsetTable": rows}  # fmt: skip

    # -- subscription groups ------------------------------------------------------------

    async def create_and_update_subscription_group(
        self,
        group: str,
        settings: dict[str, Any] | None = None,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> dict[str, Any]:
        """Create or update the group on one broker or every master of a
        cluster (every master when neither); the config sent."""
        config = {"groupName": group, **SUBSCRIPTION_GROUP_DEFAULTS, **(settings or {})}
        body = json.dumps(config).encode()
        addrs = await self._targets(broker_addr, cluster)
        for addr in addrs:
            await self._request(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        return {"brokers": addrs, "config": config}

    async def delete_subscription_group(
        self,
        group: str,
        broker_addr: str | None = None,
        cluster: str | None = None,
        remove_offset: bool = False,
    ) -> list[str]:
        fields = {"groupName": group, "removeOffset": str(remove_offset).lower(),
                  "cleanOffset": str(remove_offset).lower()}  # fmt: skip
        addrs = await self._targets(broker_addr, cluster)
        for addr in addrs:
            await self._request(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)
        return addrs

    async def subscription_groups(self, broker_addr: str) -> dict[str, Any]:
        """SubscriptionGroupWrapper of one broker."""
        resp = await self._request(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return dict(_body(resp, "SubscriptionGroupWrapper", broker_addr))

    async def examine_subscription_group_config(self, group: str) -> list[dict[str, Any]]:
        """The group's config on every master that has it (getConsumerConfig)."""
        out = []
        for addr in await self._masters(None):
            table = (await self.subscription_groups(addr)).get("subscriptionGroupTable") or {}
            if group in table:
                out.append({"brokerAddr": addr, "config": table[group]})
        if not out:
            raise ClientError(f"no broker has subscription group {group!r}")
        return out

    # -- broker config --------------------------------------------------------------------

    async def get_broker_config(self, broker_addr: str) -> dict[str, str]:
        resp = await self._request(broker_addr, RequestCode.GET_BROKER_CONFIG)
        out = {}
        for line in resp.body.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    async def update_broker_config(
        self,
        settings: dict[str, str],
        broker_addr: str | None = None,
        cluster: str | None = None,
        remarks: dict[str, str] | None = None,
    ) -> list[str]:
        """Change settings of one broker or every master of a cluster while
        they run; the brokers changed. remarks gets each broker's note (a
        broker started without a config file keeps the change in memory)."""
        if not settings:
            raise ClientError("no setting to update")
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
        addrs = await self._targets(broker_addr, cluster)
        for addr in addrs:
            resp = await self._request(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)
            if remarks is not None and resp.remark:
                remarks[addr] = resp.remark
        return addrs

    async def query_consume_queue(
        self,
        broker_addr: str,
        topic: str,
        queue_id: int,
        index: int,
        count: int,
        group: str | None = None,
    ) -> dict[str, Any]:
        """QueryConsumeQueueResponseBody of one queue (QUERY_CONSUME_QUEUE),
        plus "remark": the broker's note (an index outside the queue)."""
        fields = {"topic": topic, "queueId": str(queue_id), "index": str(index),
                  "count": str(count)}  # fmt: skip
        if group:
            fields["consumerGroup"] = group
        resp = await self._request(broker_addr, RequestCode.QUERY_CONSUME_QUEUE, fields)
        body = _body(resp, "QueryConsumeQueueResponseBody", broker_addr) if resp.body else {}
        return dict(body, remark=resp.remark or "")

    # -- requests answered by a consumer ---------------------------------------------------

    async def _client_broker(self, group: str, client_id: str) -> str:
        """A broker the client is connected to, from the group's connections."""
        addrs = await self._group_brokers(group)
        for addr in addrs:
            try:
                resp = await self._request(
                    addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}
                )
            except ConsumerNotOnlineError:
                continue
            ids = {
                c.get("clientId") for c in _body(resp, "ConsumerConnection", addr)["connectionSet"]
            }
            if client_id in ids:
                return addr
        raise ConsumerNotOnlineError(f"consumer {client_id} of group {group} is not online")

    async def get_consumer_running_info(self, group: str, client_id: str) -> dict[str, Any]:
        """ConsumerRunningInfo, answered by the consumer itself through its broker."""
        addr = await self._client_broker(group, client_id)
        fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        resp = await self._request(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
        return dict(_body(resp, "ConsumerRunningInfo", addr))

    async def consumer_status(
        self, group: str, client_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Running info of one consumer of the group, or of every one online."""
        cc = await self.examine_consumer_connection(group)
        ids = sorted({str(c["clientId"]) for c in cc.get("connectionSet") or []})
        if client_id is not None:
            if client_id not in ids:
                raise ConsumerNotOnlineError(f"consumer {client_id} of group {group} is not online")
            ids = [client_id]
        out = []
        for cid in ids:
            try:
                info: Any = await self.get_consumer_running_info(group, cid)
            except (BrokerError, RemotingError) as e:
                info = {"error": str(e)}
            out.append({"clientId": cid, "runningInfo": info})
        return out

    async def consume_message_directly(
        self, group: str, client_id: str, msg_id: str, topic: str = ""
    ) -> dict[str, Any]:
        """Have one consumer consume one message (by its offset message id)
        outside its queues: ConsumeMessageDirectlyResult."""
        from pyrmq.common.message import decode_offset_msg_id

        try:
            host, _ = decode_offset_msg_id(msg_id.strip().upper())
        except ValueError as e:
            raise ClientError(f"{msg_id} is not an offset message id: {e}") from None
        fields = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id.strip().upper(),
                  "topic": topic}  # fmt: skip
        resp = await self._request(host, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        return dict(_body(resp, "ConsumeMessageDirectlyResult", host))

    # -- stats ---------------------------------------------------------------------------

    async def view_broker_stats_data(
        self, broker_addr: str, stats_name: str, stats_key: str
    ) -> dict[str, Any] | None:
        """BrokerStatsData, None when the broker counted nothing under it."""
        fields = {"statsName": stats_name, "statsKey": stats_key}
        cmd = RemotingCommand(RequestCode.VIEW_BROKER_STATS_DATA, fields)
        resp = await self.api.remoting.invoke(broker_addr, cmd, self.timeout)
        if resp.code == ResponseCode.SYSTEM_ERROR and "not exist" in (resp.remark or ""):
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.from_response(resp.code, resp.remark, broker_addr)
        return dict(_body(resp, "BrokerStatsData", broker_addr))

    async def stats_all(
        self, topic: str | None = None, active_only: bool = False
    ) -> list[dict[str, Any]]:
        """mqadmin statsAll: per topic and consumer group, messages put (in)
        and pulled (out), as tps over the last minute and sums of the day,
        over the topic's masters."""
        topics = [topic] if topic else [
            t for t in await self.topic_list()
            if not t.startswith((RETRY_GROUP_TOPIC_PREFIX, "%DLQ%"))
        ]  # fmt: skip
        rows: list[dict[str, Any]] = []
        for t in sorted(topics):
            try:
                route = await self._route(t)
            except TopicNotExistError:
                continue
            addrs = self._route_masters(route)
            in_tps, in_day = 0.0, 0
            for addr in addrs:
                sd = await self.view_broker_stats_data(addr, "TOPIC_PUT_NUMS", t)
                if sd is not None:
                    in_tps += float(sd["statsMinute"]["tps"])
                    in_day += int(sd["statsDay"]["sum"])
            groups: set[str] = set()
            for addr in addrs:
                resp = await self._request(
                    addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": t}
                )
                groups.update(_body(resp, "GroupList", addr).get("groupList") or [])
            per_group = []
            for g in sorted(groups):
                out_tps, out_day = 0.0, 0
                for addr in addrs:
                    sd = await self.view_broker_stats_data(addr, "GROUP_GET_NUMS", f"{t}@{g}")
                    if sd is not None:
                        out_tps += float(sd["statsMinute"]["tps"])
                        out_day += int(sd["statsDay"]["sum"])
                per_group.append((g, out_tps, out_day))
            if not per_group:
                per_group = [("", 0.0, 0)]
            for g, out_tps, out_day in per_group:
                if active_only and not (in_day or out_day):
                    continue
                rows.append({"topic": t, "consumerGroup": g, "inTps": round(in_tps, 2),
                             "outTps": round(out_tps, 2), "inMsg24Hour": in_day,
                             "outMsg24Hour": out_day})  # fmt: skip
        return rows

    # -- name server ---------------------------------------------------------------------

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        cmd = RemotingCommand(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        resp = await self.api.invoke_namesrv(cmd, self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.from_response(resp.code, resp.remark)
        return sorted(_body(resp, "TopicList", "the name server").get("topicList") or [])

    async def topic_cluster_list(self, topic: str) -> list[str]:
        """The clusters the topic has brokers in."""
        route = await self._route(topic)
        names = {bd.broker_name for bd in route.broker_datas}
        table = (await self._cluster_info()).get("clusterAddrTable") or {}
        return sorted(c for c, brokers in table.items() if names & set(brokers))

    async def put_kv_config(self, namespace: str, key: str, value: str) -> list[str]:
        return await self._each_namesrv(
            RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value}
        )

    async def delete_kv_config(self, namespace: str, key: str) -> list[str]:
        return await self._each_namesrv(
            RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key}
        )

    async def _namesrv_request(
        self, ns: str, code: int, fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        cmd = RemotingCommand(code, dict(fields or {}), body)
        resp = await self.api.remoting.invoke(ns, cmd, self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.from_response(resp.code, resp.remark, ns)
        return resp

    def _namesrvs(self, addrs: Sequence[str] | None) -> list[str]:
        return list(addrs) if addrs else list(self.api.namesrv_addrs)

    async def get_namesrv_config(
        self, addrs: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """Each name server's settings (GET_NAMESRV_CONFIG), by address."""
        out = {}
        for ns in self._namesrvs(addrs):
            resp = await self._namesrv_request(ns, RequestCode.GET_NAMESRV_CONFIG)
            text = resp.body.decode("utf-8", "replace")
            try:
                out[ns] = parse_properties_text(text)
            except ValueError as e:
                raise RemotingError(f"{ns} sent a malformed config: {e}") from None
        return out

    async def update_namesrv_config(
        self, settings: dict[str, str], addrs: Sequence[str] | None = None
    ) -> dict[str, str]:
        """Change settings of each name server (UPDATE_NAMESRV_CONFIG); each
        one's remark by address ("" when none)."""
        if not settings:
            raise ClientError("no setting to update")
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
        out = {}
        for ns in self._namesrvs(addrs):
            resp = await self._namesrv_request(ns, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
            out[ns] = resp.remark or ""
        return out

    async def write_perm_of_broker(self, broker_name: str, *, wipe: bool) -> list[dict[str, Any]]:
        """WIPE_WRITE_PERM_OF_BROKER (wipe) or ADD_WRITE_PERM_OF_BROKER on
        every name server: [{nameServer, wipeTopicCount|addTopicCount,
        remark}]."""
        code = (
            RequestCode.WIPE_WRITE_PERM_OF_BROKER if wipe else RequestCode.ADD_WRITE_PERM_OF_BROKER
        )
        key = "wipeTopicCount" if wipe else "addTopicCount"
        out = []
        for ns in self._namesrvs(None):
            resp = await self._namesrv_request(ns, code, {"brokerName": broker_name})
            try:
                count = int(resp.ext_fields.get(key, "0"))
            except ValueError:
                raise RemotingError(f"{ns} sent a malformed {key}") from None
            out.append({"nameServer": ns, key: count, "remark": resp.remark or ""})
        return out

    async def _each_namesrv(self, code: int, fields: dict[str, str]) -> list[str]:
        addrs: Sequence[str] = self.api.namesrv_addrs
        for ns in addrs:
            resp = await self.api.remoting.invoke(
                ns, RemotingCommand(code, dict(fields)), self.timeout
            )
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError.from_response(resp.code, resp.remark, ns)
        return list(addrs)
