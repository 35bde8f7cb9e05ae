"""`pyrmq admin` commands about brokers, stats, name server config and
message tools (mqadmin 4.9's names and options): getBrokerConfig,
updateBrokerConfig, statsAll, topicClusterList, updateTopicPerm,
updateKvConfig, deleteKvConfig, updateOrderConf, sendMsgStatus,
checkMsgSendRT, clusterRT, printMsg, printMsgByQueue, queryMsgByUniqueKey,
queryCq, allocateMQ."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from pyrmq.admin.cli_common import (
    Output,
    Setup,
    fmt_time,
    opt,
    parse_timestamp,
    perm_text,
    positive_int,
    short_body,
    table,
    topic_opt,
    where_opt,
)
from pyrmq.admin.client import AdminClient
from pyrmq.admin.ops import ORDER_TOPIC_CONFIG
from pyrmq.admin.results import message_as_dict
from pyrmq.common.errors import BrokerError, ClientError
from pyrmq.common.message import MessageExt
from pyrmq.consumer.allocate import AllocateMessageQueueAveragely
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode


async def _get_broker_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    addrs = [a.broker_addr] if a.broker_addr else await admin._masters(a.cluster)
    out = {addr: await admin.get_broker_config(addr) for addr in addrs}
    parts = [
        f"============{addr}============\n" + "\n".join(f"{k:<50}=  {v}" for k, v in conf.items())
        for addr, conf in out.items()
    ]
    return Output(out, "\n\n".join(parts))


def _setup_update_broker_config(p: argparse.ArgumentParser) -> None:
    where_opt(p, required=True)
    opt(p, "-k", "key", required=True, help="config key (camelCase, as in broker.conf)")
    opt(p, "-v", "value", required=True, help="new value")


async def _update_broker_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    remarks: dict[str, str] = {}
    addrs = await admin.update_broker_config({a.key: a.value}, a.broker_addr, a.cluster, remarks)
    text = "\n".join(
        f"update broker config success, {b}" + (f" ({remarks[b]})" if b in remarks else "")
        for b in addrs
    )
    data = {"brokers": addrs, "key": a.key, "value": a.value, "remarks": remarks}
    return Output(data, text)


def _setup_query_cq(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-q", "queue", dest="queue_id", type=int, required=True, help="queue id, ie. 1")
    opt(p, "-i", "index", type=int, required=True, help="start queue index")
    opt(p, "-c", "count", type=positive_int, default=10, help="how many (10; at most 1000)")
    opt(p, "-b", "broker", dest="broker_addr",
        help="broker address (default: the topic's first broker's master)")  # fmt: skip
    opt(p, "-g", "consumer", dest="group", help="consumer group: its subscription and eval")


async def _query_cq(admin: AdminClient, a: argparse.Namespace) -> Output:
    addr = a.broker_addr
    if not addr:
        route = await admin.topic_route(a.topic)
        addr = next((bd.broker_addrs[0] for bd in route.broker_datas if 0 in bd.broker_addrs),
                    None)  # fmt: skip
        if addr is None:
            raise ClientError(f"No topic route data: no master serves {a.topic}")
    r = await admin.query_consume_queue(addr, a.topic, a.queue_id, a.index, a.count, a.group)
    parts = []
    if r.get("subscriptionData") is not None:
        parts.append("Subscription data: \n" + json.dumps(r["subscriptionData"], indent=2))
    if r.get("filterData") is not None:
        parts.append(f"Filter data: \n{r['filterData']}")
    parts.append(f"Queue data: \nmax: {r.get('maxQueueIndex', 0)}, "
                 f"min: {r.get('minQueueIndex', 0)}")  # fmt: skip
    units = r.get("queueData") or []
    rows = [(a.index + i, u.get("physicOffset"), u.get("physicSize"), u.get("tagsCode"),
             str(u.get("eval", False)).lower()) for i, u in enumerate(units)]  # fmt: skip
    parts.append(table(["idx", "physicOffset", "physicSize", "tagsCode", "eval"], rows))
    if r.get("remark"):
        parts.append(r["remark"])
    return Output(
        dict(r, brokerAddr=addr), "\n======================================\n".join(parts)
    )


def _setup_stats_all(p: argparse.ArgumentParser) -> None:
    opt(p, "-t", "topic", help="only this topic")
    opt(p, "-a", "activeTopic", dest="active", action="store_true",
        help="only topics and groups with messages in the last day")  # fmt: skip


async def _stats_all(admin: AdminClient, a: argparse.Namespace) -> Output:
    rows = await admin.stats_all(a.topic, a.active)
    text = table(
        ["Topic", "Consumer Group", "InTPS", "OutTPS", "InMsg24Hour", "OutMsg24Hour"],
        [(r["topic"], r["consumerGroup"] or "", r["inTps"], r["outTps"], r["inMsg24Hour"],
          r["outMsg24Hour"]) for r in rows],
    )  # fmt: skip
    return Output(rows, text)


async def _topic_cluster_list(admin: AdminClient, a: argparse.Namespace) -> Output:
    clusters = await admin.topic_cluster_list(a.topic)
    return Output(clusters, "\n".join(clusters))


def _setup_update_topic_perm(p: argparse.ArgumentParser) -> None:
    where_opt(p)
    topic_opt(p)
    opt(p, "-p", "perm", type=int, required=True, choices=(2, 4, 6),
        help="2 write only, 4 read only, 6 read and write")  # fmt: skip


async def _update_topic_perm(admin: AdminClient, a: argparse.Namespace) -> Output:
    route = await admin.topic_route(a.topic)
    targets = {a.broker_addr} if a.broker_addr else None
    if a.cluster is not None:
        targets = set(await admin._masters(a.cluster))
    done = []
    for qd in route.queue_datas:
        bd = route.broker_data(qd.broker_name)
        addr = bd.broker_addrs.get(0) if bd is not None else None
        if addr is None or (targets is not None and addr not in targets):
            continue
        resp = await admin.api.broker_request(addr, RequestCode.GET_ALL_TOPIC_CONFIG,
                                              timeout=admin.timeout)  # fmt: skip
        tc = json.loads(resp.body).get("topicConfigTable", {}).get(a.topic)
        if tc is None:
            continue
        await admin.create_topic(a.topic, tc["readQueueNums"], tc["writeQueueNums"], a.perm,
                                 order=bool(tc.get("order")), broker_addr=addr)  # fmt: skip
        done.append({"brokerAddr": addr, "oldPerm": tc["perm"], "newPerm": a.perm})
    if not done:
        raise ClientError(f"topic {a.topic} has no queue on the broker(s) given")
    text = "\n".join(
        f"update topic perm from {perm_text(d['oldPerm'])} to {perm_text(d['newPerm'])} in "
        f"{d['brokerAddr']} success." for d in done
    )  # fmt: skip
    return Output(done, text)


def _setup_kv(p: argparse.ArgumentParser, with_value: bool) -> None:
    opt(p, "-s", "namespace", required=True, help="KV namespace")
    opt(p, "-k", "key", required=True, help="key")
    if with_value:
        opt(p, "-v", "value", required=True, help="value")


async def _update_kv_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    ns = await admin.put_kv_config(a.namespace, a.key, a.value)
    return Output({"nameServers": ns}, "update kv config in namespace success.")


async def _delete_kv_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    ns = await admin.delete_kv_config(a.namespace, a.key)
    return Output({"nameServers": ns}, "delete kv config from namespace success.")


def _setup_update_order_conf(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-m", "method", required=True, choices=("get", "put", "delete"))
    opt(p, "-v", "orderConf", dest="order_conf", help="put: brokerName:queueNums;...")


async def _update_order_conf(admin: AdminClient, a: argparse.Namespace) -> Output:
    if a.method == "put":
        if not a.order_conf:
            raise ClientError("put needs -v orderConf (brokerName:queueNums;...)")
        await admin.put_kv_config(ORDER_TOPIC_CONFIG, a.topic, a.order_conf)
        text = f"update orderConf success. topic=[{a.topic}], orderConf=[{a.order_conf}]"
        return Output({"topic": a.topic, "orderConf": a.order_conf}, text)
    if a.method == "delete":
        await admin.delete_kv_config(ORDER_TOPIC_CONFIG, a.topic)
        return Output({"topic": a.topic}, f"delete orderConf success. topic=[{a.topic}]")
    cmd = RemotingCommand(RequestCode.GET_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG,
                                                     "key": a.topic})  # fmt: skip
    resp = await admin.api.invoke_namesrv(cmd, admin.timeout)
    if resp.code != ResponseCode.SUCCESS:
        raise BrokerError.from_response(resp.code, resp.remark)
    value = resp.ext_fields.get("value", "")
    return Output({"topic": a.topic, "orderConf": value},
                  f"get orderConf success. topic=[{a.topic}], orderConf=[{value}]")  # fmt: skip


async def _send_and_time(
    admin: AdminClient, topic: str, body: str, n: int, **kw: Any
) -> dict[str, Any]:
    rts = []
    failed = 0
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            await admin.send_message(topic, body)
        except BrokerError:
            failed += 1
            continue
        rts.append((time.perf_counter() - t0) * 1000)
    avg = round(sum(rts) / len(rts), 3) if rts else 0.0
    return {"topic": topic, "sent": len(rts), "failed": failed, "avgRT": avg,
            "maxRT": round(max(rts), 3) if rts else 0.0}  # fmt: skip


def _setup_send_msg_status(p: argparse.ArgumentParser) -> None:
    opt(p, "-b", "brokerName", dest="broker_name", required=True, help="broker name")
    opt(p, "-s", "messageSize", dest="size", type=positive_int, default=128)
    opt(p, "-c", "count", type=positive_int, default=50)


async def _send_msg_status(admin: AdminClient, a: argparse.Namespace) -> Output:
    # every broker has a topic named after it (as RocketMQ's mqadmin uses)
    r = await _send_and_time(admin, a.broker_name, "x" * a.size, a.count)
    text = f"rt={r['avgRT']}ms, max={r['maxRT']}ms, sent={r['sent']}, failed={r['failed']}"
    return Output(r, text)


def _setup_check_msg_send_rt(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-a", "amount", type=positive_int, default=100)
    opt(p, "-s", "size", type=positive_int, default=128)


async def _check_msg_send_rt(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await _send_and_time(admin, a.topic, "x" * a.size, a.amount)
    return Output(r, f"Avg RT: {r['avgRT']}ms (max {r['maxRT']}ms, {r['failed']} failed)")


def _setup_cluster_rt(p: argparse.ArgumentParser) -> None:
    opt(p, "-c", "clusterName", dest="cluster", help="only this cluster")
    opt(p, "-a", "amount", type=positive_int, default=20)
    opt(p, "-s", "size", type=positive_int, default=128)


async def _cluster_rt(admin: AdminClient, a: argparse.Namespace) -> Output:
    info = await admin._cluster_info()
    rows = []
    for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
        if a.cluster is not None and cluster != a.cluster:
            continue
        for name in sorted(names):
            r = await _send_and_time(admin, name, "x" * a.size, a.amount)
            rows.append({"cluster": cluster, "brokerName": name, **r})
    if not rows:
        raise ClientError(f"no broker in cluster {a.cluster or '(any)'}")
    text = table(["Cluster", "Broker Name", "RT (ms)", "Max RT", "Sent", "Failed"],
                 [(r["cluster"], r["brokerName"], r["avgRT"], r["maxRT"], r["sent"], r["failed"])
                  for r in rows])  # fmt: skip
    return Output(rows, text)


def _messages(msgs: list[MessageExt]) -> Output:
    text = table(
        ["Broker Name", "QID", "Offset", "MsgId", "Store Time", "Body"],
        [(m.broker_name, m.queue_id, m.queue_offset, m.msg_id, fmt_time(m.store_timestamp),
          short_body(m.body)) for m in msgs],
    )  # fmt: skip
    return Output([message_as_dict(m) for m in msgs], f"{text}\n\n{len(msgs)} message(s)")


def _setup_print_msg(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-b", "beginTimestamp", dest="begin", type=parse_timestamp, help="start time")
    opt(p, "-e", "endTimestamp", dest="end", type=parse_timestamp, help="end time")
    p.add_argument("--count", type=positive_int, default=128, help="at most (128)")


async def _print_msg(admin: AdminClient, a: argparse.Namespace) -> Output:
    msgs = await admin.consume_message(a.topic, a.count, begin_ms=a.begin, end_ms=a.end)
    return _messages(msgs)


def _setup_print_msg_by_queue(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-a", "brokerName", dest="broker_name", required=True)
    opt(p, "-i", "queueId", dest="queue_id", type=int, required=True)
    opt(p, "-b", "beginTimestamp", dest="begin", type=parse_timestamp, help="start time")
    opt(p, "-e", "endTimestamp", dest="end", type=parse_timestamp, help="end time")
    p.add_argument("--count", type=positive_int, default=128, help="at most (128)")


async def _print_msg_by_queue(admin: AdminClient, a: argparse.Namespace) -> Output:
    msgs = await admin.consume_message(a.topic, a.count, a.broker_name, a.queue_id,
                                       begin_ms=a.begin, end_ms=a.end)  # fmt: skip
    return _messages(msgs)


def _setup_query_msg_by_unique_key(p: argparse.ArgumentParser) -> None:
    opt(p, "-i", "msgId", dest="msg_id", required=True, help="the message's id (UNIQ_KEY)")
    topic_opt(p)
    opt(p, "-g", "consumerGroup", dest="group", help="have a consumer of it consume the message")
    opt(p, "-d", "clientId", dest="client_id", help="that consumer (with -g)")


async def _query_msg_by_unique_key(admin: AdminClient, a: argparse.Namespace) -> Output:
    msgs = await admin.query_msg_by_key(a.topic, a.msg_id, 32, unique_key=True)
    if not msgs:
        raise ClientError(f"no message with id {a.msg_id} in topic {a.topic}")
    if a.group or a.client_id:
        if not (a.group and a.client_id):
            raise ClientError("give both -g consumerGroup and -d clientId")
        r = await admin.consume_message_directly(a.group, a.client_id, msgs[0].offset_msg_id,
                                                 a.topic)  # fmt: skip
        return Output(r, f"ConsumeMessageDirectlyResult: {r}")
    out = _messages(msgs)
    return Output(out.data, out.text)


def _setup_allocate_mq(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-i", "ipList", dest="ips", required=True, help="consumer ids, comma-separated")


async def _allocate_mq(admin: AdminClient, a: argparse.Namespace) -> Output:
    route = await admin.topic_route(a.topic)
    mqs = sorted(route.subscribe_queues(a.topic))
    ids = sorted({i.strip() for i in a.ips.split(",") if i.strip()})
    strategy = AllocateMessageQueueAveragely()
    result = {cid: strategy.allocate("", cid, mqs, ids) for cid in ids}
    text = "\n".join(f"{cid}: {', '.join(f'{m.broker_name}#{m.queue_id}' for m in qs)}"
                     for cid, qs in result.items())  # fmt: skip
    data = {
        cid: [{"topic": m.topic, "brokerName": m.broker_name, "queueId": m.queue_id} for m in qs]
        for cid, qs in result.items()
    }
    return Output({"result": data}, text)


def _setup_topic_only(p: argparse.ArgumentParser) -> None:
    topic_opt(p)


def _setup_get_broker_config(p: argparse.ArgumentParser) -> None:
    where_opt(p, required=True)


BROKER_COMMANDS: list[tuple[str, str, str, Setup, Any]] = [
    ("getBrokerConfig", "get-broker-config", "a broker's settings",
     _setup_get_broker_config, _get_broker_config),
    ("updateBrokerConfig", "update-broker-config", "change a broker setting while it runs",
     _setup_update_broker_config, _update_broker_config),
    ("statsAll", "stats-all", "in/out tps and 24h counts of every topic and group",
     _setup_stats_all, _stats_all),
    ("topicClusterList", "topic-cluster-list", "the clusters a topic is in",
     _setup_topic_only, _topic_cluster_list),
    ("updateTopicPerm", "update-topic-perm", "change a topic's permission",
     _setup_update_topic_perm, _update_topic_perm),
    ("updateKvConfig", "update-kv-config", "set a name server KV config item",
     lambda p: _setup_kv(p, True), _update_kv_config),
    ("deleteKvConfig", "delete-kv-config", "delete a name server KV config item",
     lambda p: _setup_kv(p, False), _delete_kv_config),
    ("updateOrderConf", "update-order-conf", "get, put or delete an ordered topic's conf",
     _setup_update_order_conf, _update_order_conf),
    ("sendMsgStatus", "send-msg-status", "send to a broker and show the round trip",
     _setup_send_msg_status, _send_msg_status),
    ("checkMsgSendRT", "check-msg-send-rt", "send to a topic and show the round trip",
     _setup_check_msg_send_rt, _check_msg_send_rt),
    ("clusterRT", "cluster-rt", "send to every broker and show the round trips",
     _setup_cluster_rt, _cluster_rt),
    ("printMsg", "print-msg", "print a topic's messages (time range)",
     _setup_print_msg, _print_msg),
    ("printMsgByQueue", "print-msg-by-queue", "print one queue's messages (time range)",
     _setup_print_msg_by_queue, _print_msg_by_queue),
    ("queryMsgByUniqueKey", "query-msg-by-unique-key", "a message by its id (UNIQ_KEY)",
     _setup_query_msg_by_unique_key, _query_msg_by_unique_key),
    ("queryCq", "query-cq", "a queue's ConsumeQueue units from an index",
     _setup_query_cq, _query_cq),
    ("allocateMQ", "allocate-mq", "how a topic's queues split over consumers (averagely)",
     _setup_allocate_mq, _allocate_mq),
]  # fmt: skip
