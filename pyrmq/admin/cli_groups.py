"""`pyrmq admin` commands about consumer and producer groups (mqadmin 4.9's
names and options): consumerConnection, producerConnection, updateSubGroup,
deleteSubGroup, getConsumerConfig, consumerStatus, cloneGroupOffset,
queryConsumeTimeSpan, brokerConsumeStats."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyrmq.admin.cli_common import (
    Output,
    Setup,
    fmt_time,
    group_opt,
    opt,
    parse_bool,
    table,
    topic_opt,
    where_opt,
)
from pyrmq.admin.client import AdminClient


async def _consumer_connection(admin: AdminClient, a: argparse.Namespace) -> Output:
    cc = await admin.examine_consumer_connection(a.group)
    conns = sorted(cc.get("connectionSet") or [], key=lambda c: str(c.get("clientId")))
    text = table(
        ["ClientId", "ClientAddr", "Language", "Version"],
        [(c["clientId"], c["clientAddr"], c["language"], c["version"]) for c in conns],
    )
    subs = cc.get("subscriptionTable") or {}
    text += "\n\nBelow is subscription:\n" + table(
        ["Topic", "SubExpression"], [(t, s.get("subString")) for t, s in sorted(subs.items())]
    )
    text += (
        f"\n\nConsumeType: {cc.get('consumeType')}\nMessageModel: {cc.get('messageModel')}"
        f"\nConsumeFromWhere: {cc.get('consumeFromWhere')}"
    )
    return Output(cc, text)


async def _producer_connection(admin: AdminClient, a: argparse.Namespace) -> Output:
    pc = await admin.examine_producer_connection(a.producer_group, a.topic)
    rows = [
        (c["clientId"], c["clientAddr"], c["language"], c["version"]) for c in pc["connectionSet"]
    ]
    return Output(pc, table(["ClientId", "ClientAddr", "Language", "Version"], rows))


_SUB_GROUP_OPTIONS = (
    # (short, long, JSON field, type)
    ("-s", "consumeEnable", "consumeEnable", parse_bool),
    ("-m", "consumeFromMinEnable", "consumeFromMinEnable", parse_bool),
    ("-d", "consumeBroadcastEnable", "consumeBroadcastEnable", parse_bool),
    ("-q", "retryQueueNums", "retryQueueNums", int),
    ("-r", "retryMaxTimes", "retryMaxTimes", int),
    ("-i", "brokerId", "brokerId", int),
    ("-w", "whichBrokerWhenConsumeSlowly", "whichBrokerWhenConsumeSlowly", int),
    ("-a", "notifyConsumerIdsChanged", "notifyConsumerIdsChangedEnable", parse_bool),
    # RocketMQ 5: a FIFO group (POP consumers get a queue's messages in order)
    ("-o", "consumeMessageOrderly", "consumeMessageOrderly", parse_bool),
)


def _setup_update_sub_group(p: argparse.ArgumentParser) -> None:
    where_opt(p, required=True)
    opt(p, "-g", "groupName", dest="group", required=True, help="consumer group")
    for short, long, field, kind in _SUB_GROUP_OPTIONS:
        opt(p, short, long, dest=field, type=kind, help=f"{field} (default: RocketMQ's)")


async def _update_sub_group(admin: AdminClient, a: argparse.Namespace) -> Output:
    settings = {f: getattr(a, f) for _, _, f, _ in _SUB_GROUP_OPTIONS if getattr(a, f) is not None}
    r = await admin.create_and_update_subscription_group(
        a.group, settings, a.broker_addr, a.cluster
    )
    lines = [f"create subscription group to {b} success." for b in r["brokers"]]
    lines.append(json.dumps(r["config"]))
    return Output(r, "\n".join(lines))


def _setup_delete_sub_group(p: argparse.ArgumentParser) -> None:
    where_opt(p, required=True)
    opt(p, "-g", "groupName", dest="group", required=True, help="consumer group")
    opt(p, "-r", "removeOffset", dest="remove_offset", type=parse_bool, default=False,
        help="also drop the group's committed offsets (false)")  # fmt: skip


async def _delete_sub_group(admin: AdminClient, a: argparse.Namespace) -> Output:
    addrs = await admin.delete_subscription_group(
        a.group, a.broker_addr, a.cluster, a.remove_offset
    )
    text = "\n".join(
        f"delete subscription group [{a.group}] from broker [{b}] success." for b in addrs
    )
    return Output({"group": a.group, "brokers": addrs, "removeOffset": a.remove_offset}, text)


async def _get_consumer_config(admin: AdminClient, a: argparse.Namespace) -> Output:
    found = await admin.examine_subscription_group_config(a.group)
    parts = []
    for f in found:
        rows = [(k, v) for k, v in sorted(f["config"].items())]
        parts.append(f"============{f['brokerAddr']}============\n" + table(["Key", "Value"], rows))
    return Output(found, "\n\n".join(parts))


def _setup_consumer_status(p: argparse.ArgumentParser) -> None:
    group_opt(p)
    opt(p, "-i", "clientId", dest="client_id", help="one consumer (default: each online)")
    opt(p, "-s", "jstack", type=parse_bool, default=False, help="ignored (no JVM)")


async def _consumer_status(admin: AdminClient, a: argparse.Namespace) -> Output:
    infos = await admin.consumer_status(a.group, a.client_id)
    parts = []
    for i in infos:
        info: dict[str, Any] = i["runningInfo"]
        if "error" in info:
            parts.append(f"{i['clientId']}: {info['error']}")
            continue
        props = info.get("properties") or {}
        mqs = info.get("mqTable") or {}
        subs = info.get("subscriptionSet") or []
        parts.append(
            f"#Consumer {i['clientId']}\n"
            + table(["Property", "Value"], sorted(props.items()))
            + "\n\n"
            + table(
                ["Topic", "SubExpression"], [(s.get("topic"), s.get("subString")) for s in subs]
            )
            + "\n\n"
            + table(
                ["MessageQueue", "CachedMsgCount", "CommitOffset", "Locked"],
                [
                    (q, v.get("cachedMsgCount"), v.get("commitOffset"), v.get("locked"))
                    for q, v in sorted(mqs.items())
                ],
            )
        )
    return Output(infos, "\n\n".join(parts))


def _setup_clone_group_offset(p: argparse.ArgumentParser) -> None:
    opt(p, "-s", "srcGroup", dest="src_group", required=True, help="source consumer group")
    opt(p, "-d", "destGroup", dest="dest_group", required=True, help="target consumer group")
    topic_opt(p)
    opt(p, "-o", "offline", type=parse_bool, default=False,
        help="the source group is offline: skip the subscription check (false)")  # fmt: skip


async def _clone_group_offset(admin: AdminClient, a: argparse.Namespace) -> Output:
    addrs = await admin.clone_group_offset(a.src_group, a.dest_group, a.topic, a.offline)
    text = (
        f"clone group offset success. srcGroup[{a.src_group}], destGroup[{a.dest_group}], "
        f"topic[{a.topic}] on {', '.join(addrs)}"
    )
    return Output({"srcGroup": a.src_group, "destGroup": a.dest_group, "topic": a.topic,
                   "brokers": addrs}, text)  # fmt: skip


def _setup_time_span(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    group_opt(p)


async def _query_consume_time_span(admin: AdminClient, a: argparse.Namespace) -> Output:
    spans = await admin.query_consume_time_span(a.topic, a.group)
    rows = [
        (s["brokerName"], s["queueId"], fmt_time(s["minTimeStamp"]), fmt_time(s["maxTimeStamp"]),
         fmt_time(s["consumeTimeStamp"]), s["delayTime"])
        for s in spans
    ]  # fmt: skip
    head = ["Broker Name", "QID", "Min Time", "Max Time", "Consume Time", "Delay (ms)"]
    return Output(spans, table(head, rows))


def _setup_broker_consume_stats(p: argparse.ArgumentParser) -> None:
    opt(p, "-b", "brokerAddr", dest="broker_addr", required=True, help="broker ip:port")


async def _broker_consume_stats(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await admin.fetch_consume_stats_in_broker(a.broker_addr)
    rows = [
        (q["topic"], q["consumerGroup"], q["brokerName"], q["queueId"], q["brokerOffset"],
         q["consumerOffset"], max(0, q["brokerOffset"] - q["consumerOffset"]),
         fmt_time(q["lastTimestamp"]))
        for q in r["offsetTable"]
    ]  # fmt: skip
    head = ["Topic", "Group", "Broker Name", "QID", "Broker Offset", "Consumer Offset",
            "Diff", "LastTime"]  # fmt: skip
    return Output(r, table(head, rows) + f"\n\nDiff Total: {r['totalDiff']}")


def _setup_group_only(p: argparse.ArgumentParser) -> None:
    group_opt(p)


def _setup_producer_connection(p: argparse.ArgumentParser) -> None:
    opt(p, "-g", "producerGroup", dest="producer_group", required=True, help="producer group")
    topic_opt(p)


GROUP_COMMANDS: list[tuple[str, str, str, Setup, Any]] = [
    ("consumerConnection", "consumer-connection", "a consumer group's online consumers",
     _setup_group_only, _consumer_connection),
    ("producerConnection", "producer-connection", "a producer group's connections to a topic",
     _setup_producer_connection, _producer_connection),
    ("updateSubGroup", "update-sub-group", "create or update a subscription group",
     _setup_update_sub_group, _update_sub_group),
    ("deleteSubGroup", "delete-sub-group", "delete a subscription group",
     _setup_delete_sub_group, _delete_sub_group),
    ("getConsumerConfig", "get-consumer-config", "a subscription group's config on each broker",
     _setup_group_only, _get_consumer_config),
    ("consumerStatus", "consumer-status", "consumers' running info (asked of the consumers)",
     _setup_consumer_status, _consumer_status),
    ("cloneGroupOffset", "clone-group-offset", "copy a group's offsets of a topic to another",
     _setup_clone_group_offset, _clone_group_offset),
    ("queryConsumeTimeSpan", "query-consume-time-span", "how far behind in time a group is",
     _setup_time_span, _query_consume_time_span),
    ("brokerConsumeStats", "broker-consume-stats", "every group's offsets and lag on a broker",
     _setup_broker_consume_stats, _broker_consume_stats),
]  # fmt: skip
