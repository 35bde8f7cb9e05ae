"""`pyrmq admin`: mqadmin's commands, over pyrmq.admin.AdminClient.

    pyrmq admin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t TopicTest -r 4 -w 4
    pyrmq admin topicStatus -n 127.0.0.1:9876 -t TopicTest
    pyrmq admin consumerProgress -n 127.0.0.1:9876 -g my-group -t TopicTest --json

Command names and short options are mqadmin's (RocketMQ 4.9 tools); each
command also answers to a dashed lower-case alias (update-topic, topic-list,
...), the names this CLI had before. Every command takes -n (name servers,
'host:port[;host:port]', default $NAMESRV_ADDR or 127.0.0.1:9876), --json
(machine-readable output on stdout instead of aligned tables), --timeout
(the deadline of each request, seconds), --tls with --tls-ca CA.pem (and
--tls-cert/--tls-key for mutual TLS) for servers with TLS on, and
--access-key/--secret-key (ACL: the account requests are signed with;
default $ROCKETMQ_ACCESS_KEY and $ROCKETMQ_SECRET_KEY, none when unset). The
ACL commands (updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr,
clusterAclConfigVersion) are in acl_cli.py, the group commands in
cli_groups.py, the broker, stats and message tools in cli_broker.py, the
name server ones (getNamesrvConfig, updateNamesrvConfig, wipeWritePerm,
addWritePerm) in cli_namesrv.py.

A failure (a broker's refusal, an unreachable name server, a bad argument)
prints one line, `error: ...`, on stderr and exits with status 1."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from pyrmq.acl.signing import ENV_ACCESS_KEY, ENV_SECRET_KEY
from pyrmq.admin.acl_cli import ACL_COMMANDS, Shown
from pyrmq.admin.cli_broker import BROKER_COMMANDS
from pyrmq.admin.cli_common import (
    Output,
    Run,
    default_namesrv,
    fmt_time,
    group_opt,
    message_detail,
    opt,
    parse_bool,
    parse_timestamp,
    perm_text,
    positive_int,
    setup_topic_only,
    short_body,
    table,
    topic_opt,
)
from pyrmq.admin.cli_groups import GROUP_COMMANDS
from pyrmq.admin.cli_namesrv import NAMESRV_COMMANDS
from pyrmq.admin.client import AdminClient
from pyrmq.admin.results import as_json, message_as_dict, send_result_as_dict
from pyrmq.common.errors import ClientError, QueryNotFoundError, RMQError
from pyrmq.common.message import MessageExt
from pyrmq.common.trace import TRACE_TOPIC


async def _update_topic(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await admin.create_topic(
        a.topic,
        read_queue_nums=a.read_queues,
        write_queue_nums=a.write_queues,
        perm=a.perm,
        order=a.order,
        cluster=a.cluster,
        broker_addr=a.broker_addr,
        attributes=a.attributes or "",
    )
    lines = [f"create topic to {b} success: {r.topic}" for b in r.brokers]
    lines.append(
        f"TopicConfig [topicName={r.topic}, readQueueNums={r.read_queue_nums}, "
        f"writeQueueNums={r.write_queue_nums}, perm={perm_text(r.perm)}, "
        f"order={str(r.order).lower()}]"
    )
    return Output(as_json(r), "\n".join(lines))


async def _delete_topic(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await admin.delete_topic(a.topic, a.cluster)
    text = (
        f"delete topic [{r.topic}] from cluster [{a.cluster or 'all'}] success "
        f"({', '.join(r.brokers)}).\n"
        f"delete topic [{r.topic}] from NameServer success ({', '.join(r.name_servers)})."
    )
    return Output(as_json(r), text)


async def _topic_list(admin: AdminClient, a: argparse.Namespace) -> Output:
    if a.cluster:
        topics = await admin.topics_by_cluster(a.cluster)
    else:
        topics = await admin.topic_list()
    return Output(topics, "\n".join(topics))


async def _topic_route(admin: AdminClient, a: argparse.Namespace) -> Output:
    route = await admin.topic_route(a.topic)
    brokers = table(
        ["Cluster", "Broker Name", "BID", "Addr"],
        [
            (b.cluster, b.broker_name, bid, addr)
            for b in route.broker_datas
            for bid, addr in sorted(b.broker_addrs.items())
        ],
    )
    queues = table(
        ["Broker Name", "Read Queues", "Write Queues", "Perm"],
        [
            (q.broker_name, q.read_queue_nums, q.write_queue_nums, perm_text(q.perm))
            for q in route.queue_datas
        ],
    )
    return Output(as_json(route), f"{brokers}\n\n{queues}")


async def _topic_status(admin: AdminClient, a: argparse.Namespace) -> Output:
    st = await admin.topic_status(a.topic)
    text = table(
        ["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"],
        [
            (
                q.broker_name,
                q.queue_id,
                q.min_offset,
                q.max_offset,
                fmt_time(q.last_update_timestamp),
            )
            for q in st.queues
        ],
    )
    return Output(as_json(st), text)


async def _cluster_list(admin: AdminClient, a: argparse.Namespace) -> Output:
    info = await admin.cluster_list()
    brokers = [b for b in info.brokers if a.cluster is None or b.cluster == a.cluster]
    if a.cluster is not None and not brokers:
        raise ClientError(f"cluster {a.cluster!r} is unknown to the name server")
    rows = []
    for b in brokers:
        rt = b.runtime
        boot = int(rt.get("bootTimestamp", "0") or 0)
        rows.append(
            (
                b.cluster,
                b.broker_name,
                b.broker_id,
                b.addr,
                rt.get("brokerVersionDesc") or ("unreachable" if b.error else None),
                rt.get("commitLogMaxOffset"),
                rt.get("connections"),
                fmt_time(boot) if boot else None,
            )
        )
    text = table(
        [
            "Cluster Name",
            "Broker Name",
            "BID",
            "Addr",
            "Version",
            "CommitLog Max",
            "Connections",
            "Boot Time",
        ],
        rows,
    )
    errors = [f"{b.addr}: {b.error}" for b in brokers if b.error]
    if errors:
        text += "\n\n" + "\n".join(errors)
    return Output([as_json(b) for b in brokers], text)


async def _broker_status(admin: AdminClient, a: argparse.Namespace) -> Output:
    if a.broker_addr:
        addrs = [a.broker_addr]
    else:
        info = await admin.cluster_list()
        addrs = [b.addr for b in info.brokers if b.cluster == a.cluster]
        if not addrs:
            raise ClientError(f"cluster {a.cluster!r} has no broker")
    tables = {addr: await admin.broker_status(addr) for addr in addrs}
    width = max((len(k) for t in tables.values() for k in t), default=0)
    lines: list[str] = []
    for addr, t in tables.items():
        prefix = f"{addr:<22} " if len(tables) > 1 else ""
        lines.extend(f"{prefix}{k:<{width}} : {v}" for k, v in t.items())
    data = tables[addrs[0]] if a.broker_addr else tables
    return Output(data, "\n".join(lines))


async def _pending_transactions(admin: AdminClient, a: argparse.Namespace) -> Output:
    found = await admin.pending_transactions(a.broker_addr, a.cluster, a.limit)
    rows = [
        (
            p.broker_addr,
            t.transaction_id,
            t.producer_group,
            t.topic,
            t.queue_id,
            fmt_time(t.born_timestamp),
            t.check_times,
        )
        for p in found
        for t in p.transactions
    ]
    text = table(["Broker", "TransactionId", "Group", "Topic", "QID", "Born", "Checks"], rows)
    shown = sum(len(p.transactions) for p in found)
    total = sum(p.total for p in found)
    text += f"\n\nPending: {total}" + (f" (the oldest {shown} shown)" if shown < total else "")
    return Output(as_json(found), text)


async def _query_msg_trace_by_id(admin: AdminClient, a: argparse.Namespace) -> Output:
    records = await admin.query_msg_trace(a.msg_id, a.trace_topic)
    if not records:
        raise QueryNotFoundError(
            f"no trace of message {a.msg_id} in {a.trace_topic} (was it sent or consumed by a "
            "client with message trace on?)"
        )
    rows = [
        (
            r.type,
            r.group,
            r.client_host,
            fmt_time(r.timestamp),
            r.cost_ms if r.type != "SubBefore" else "-",
            "-" if r.type == "SubBefore" else ("success" if r.success else "failed"),
            r.store_host or "-",
        )
        for r in records
    ]
    text = table(["Type", "Group", "ClientHost", "Time", "CostMs", "Status", "Broker"], rows)
    return Output([dataclasses.asdict(r) for r in records], text)


async def _consumer_progress(admin: AdminClient, a: argparse.Namespace) -> Output:
    p = await admin.consumer_progress(a.group, a.topic)
    text = table(
        ["Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff"],
        [
            (q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset, q.diff)
            for q in p.queues
        ],
    )
    text += f"\n\nDiff Total: {p.diff_total}"
    text += f"\nOnline consumers: {', '.join(p.clients) if p.clients else 'none'}"
    return Output(as_json(p), text)


def _messages_output(msgs: list[MessageExt]) -> Output:
    return Output(
        [message_as_dict(m) for m in msgs],
        "\n\n".join(message_detail(m) for m in msgs),
    )


async def _query_msg_by_id(admin: AdminClient, a: argparse.Namespace) -> Output:
    ids = [i for i in (s.strip() for s in a.msg_id.split(",")) if i]
    if not ids:
        raise ClientError("no message id given")
    if a.group or a.client_id:
        # have one consumer of the group consume the message (consumeMessageDirectly)
        if not (a.group and a.client_id) or len(ids) != 1:
            raise ClientError("give one message id with both -g consumerGroup and -d clientId")
        r = await admin.consume_message_directly(a.group, a.client_id, ids[0], a.topic or "")
        return Output(r, f"ConsumeMessageDirectlyResult: {r}")
    msgs: list[MessageExt] = []
    for msg_id in ids:
        msgs.extend(await admin.query_msg_by_id(msg_id, a.topic))
    return _messages_output(msgs)


async def _query_msg_by_key(admin: AdminClient, a: argparse.Namespace) -> Output:
    msgs = await admin.query_msg_by_key(a.topic, a.key, a.max_num, a.begin, a.end)
    if not msgs:
        raise QueryNotFoundError(f"no message with key {a.key!r} in topic {a.topic}")
    text = table(
        ["Message ID", "Broker Name", "QID", "Offset", "Tags", "Keys", "Store Time", "Body"],
        [
            (
                m.msg_id,
                m.broker_name or m.store_host,
                m.queue_id,
                m.queue_offset,
                m.tags,
                " ".join(m.keys),
                fmt_time(m.store_timestamp),
                short_body(m.body),
            )
            for m in msgs
        ],
    )
    return Output([message_as_dict(m) for m in msgs], text)


async def _query_msg_by_offset(admin: AdminClient, a: argparse.Namespace) -> Output:
    m = await admin.query_msg_by_offset(a.topic, a.broker_name, a.queue_id, a.offset)
    return _messages_output([m])


async def _reset_offset_by_time(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await admin.reset_offset_by_time(a.group, a.topic, a.timestamp, a.force)
    text = table(
        ["Topic", "Broker Name", "QID", "Old Offset", "New Offset"],
        [(q.topic, q.broker_name, q.queue_id, q.old_offset, q.new_offset) for q in r.queues],
    )
    when = {-1: "the max offset", 0: "the first message"}.get(r.timestamp) or fmt_time(r.timestamp)
    head = f"reset offsets of group {r.group} on topic {r.topic} to {when} ({r.timestamp})"
    if r.notified_brokers:
        head += f"; online consumers were told by {', '.join(r.notified_brokers)}"
    else:
        head += (
            "; no consumer of the group is online: offsets committed "
            "(consumers started later begin there)"
        )
    return Output(as_json(r), f"{head}\n{text}")


async def _send_message(admin: AdminClient, a: argparse.Namespace) -> Output:
    r = await admin.send_message(
        a.topic, a.body, tags=a.tags, keys=a.keys, broker_name=a.broker_name, queue_id=a.queue_id
    )
    text = table(
        ["Broker Name", "QID", "Send Result", "MsgId", "OffsetMsgId", "Queue Offset"],
        [
            (
                r.message_queue.broker_name,
                r.message_queue.queue_id,
                r.send_status.name,
                r.msg_id,
                r.offset_msg_id,
                r.queue_offset,
            )
        ],
    )
    return Output(send_result_as_dict(r), text)


async def _consume_message(admin: AdminClient, a: argparse.Namespace) -> Output:
    msgs = await admin.consume_message(
        a.topic,
        a.count,
        broker_name=a.broker_name,
        queue_id=a.queue_id,
        offset=a.offset,
        begin_ms=a.begin,
        end_ms=a.end,
    )
    text = table(
        ["Broker Name", "QID", "Offset", "Message ID", "Tags", "Keys", "Store Time", "Body"],
        [
            (
                m.broker_name,
                m.queue_id,
                m.queue_offset,
                m.msg_id,
                m.tags,
                " ".join(m.keys),
                fmt_time(m.store_timestamp),
                short_body(m.body),
            )
            for m in msgs
        ],
    )
    return Output([message_as_dict(m) for m in msgs], f"{text}\n\n{len(msgs)} message(s)")


# -- argument parsing ----------------------------------------------------------------------


def _setup_update_topic(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    opt(where, "-b", "brokerAddr", "broker-addr", dest="broker_addr", help="one broker (ip:port)")
    opt(where, "-c", "clusterName", "cluster", dest="cluster", help="every master of a cluster")
    topic_opt(p)
    opt(p, "-r", "readQueueNums", "read-queues", dest="read_queues", type=int, default=8)
    opt(p, "-w", "writeQueueNums", "write-queues", dest="write_queues", type=int, default=8)
    opt(p, "-p", "perm", type=int, default=6, help="6 = read+write (4 read, 2 write)")
    opt(
        p,
        "-a",
        "attributes",
        help="topic attributes, e.g. +message.type=FIFO (NORMAL, FIFO, DELAY, TRANSACTION, MIXED)",
    )
    opt(
        p,
        "-o",
        "order",
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        help="ordered topic (-o, or -o true|false)",
    )


def _setup_delete_topic(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-c", "clusterName", "cluster", dest="cluster", help="default: every cluster")


def _setup_cluster_list(p: argparse.ArgumentParser) -> None:
    opt(p, "-c", "clusterName", "cluster", dest="cluster", help="only this cluster")


def _setup_broker_status(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    opt(where, "-b", "brokerAddr", "broker-addr", dest="broker_addr", help="broker ip:port")
    opt(where, "-c", "clusterName", "cluster", dest="cluster", help="every broker of a cluster")


def _setup_pending_transactions(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    opt(where, "-b", "brokerAddr", "broker-addr", dest="broker_addr", help="broker ip:port")
    opt(where, "-c", "clusterName", "cluster", dest="cluster", help="every master of a cluster")
    p.add_argument(
        "--limit", type=positive_int, default=100, help="the oldest N of each broker (100)"
    )


def _setup_query_msg_trace_by_id(p: argparse.ArgumentParser) -> None:
    opt(p, "-i", "msgId", dest="msg_id", required=True, help="the message's id (UNIQ_KEY)")
    opt(p, "-t", "traceTopic", "trace-topic", dest="trace_topic", default=TRACE_TOPIC,
         help=f"the trace topic ({TRACE_TOPIC})")  # fmt: skip


def _setup_consumer_progress(p: argparse.ArgumentParser) -> None:
    group_opt(p)
    topic_opt(p, required=False)


def _setup_topic_list(p: argparse.ArgumentParser) -> None:
    opt(p, "-c", "clusterName", "cluster", dest="cluster", help="only this cluster's topics")


def _setup_query_msg_by_id(p: argparse.ArgumentParser) -> None:
    opt(p, "-i", "msgId", dest="msg_id", required=True, help="message id(s), comma-separated")
    opt(p, "-t", "topic", help="topic: lets a UNIQ_KEY (producer's msgId) be looked up")
    opt(p, "-g", "consumerGroup", dest="group", help="have a consumer of it consume the message")
    opt(p, "-d", "clientId", dest="client_id", help="that consumer (with -g)")


def _setup_query_msg_by_key(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-k", "msgKey", "key", dest="key", required=True, help="message key")
    opt(p, "-b", "beginTimestamp", dest="begin", type=parse_timestamp, default=0)
    opt(p, "-e", "endTimestamp", dest="end", type=parse_timestamp, default=2**62)
    opt(p, "-c", "maxNum", dest="max_num", type=int, default=32, help="at most this many")


def _setup_query_msg_by_offset(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-b", "brokerName", dest="broker_name", required=True)
    opt(p, "-i", "queueId", dest="queue_id", type=int, required=True)
    opt(p, "-o", "offset", type=int, required=True, help="queue offset")


def _setup_reset_offset_by_time(p: argparse.ArgumentParser) -> None:
    group_opt(p)
    topic_opt(p)
    opt(
        p,
        "-s",
        "timestamp",
        type=parse_timestamp,
        required=True,
        help="epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS (local time)",
    )
    opt(p, "-f", "force", type=parse_bool, default=True, help="also move offsets forward (true)")


def _setup_send_message(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-p", "body", required=True, help="message body (text)")
    opt(p, "-k", "keys", help="message keys (space-separated)")
    opt(p, "-c", "tags", help="message tag")
    opt(p, "-b", "brokerName", dest="broker_name", help="send to this broker (with -i)")
    opt(p, "-i", "queueId", dest="queue_id", type=int, help="send to this queue (with -b)")


def _setup_consume_message(p: argparse.ArgumentParser) -> None:
    topic_opt(p)
    opt(p, "-b", "brokerName", dest="broker_name", help="only this broker")
    opt(p, "-i", "queueId", dest="queue_id", type=int, help="only this queue id")
    opt(p, "-o", "offset", type=int, help="start offset (default: each queue's min)")
    opt(p, "-s", "beginTimestamp", dest="begin", type=parse_timestamp, help="start time")
    opt(p, "-e", "endTimestamp", dest="end", type=parse_timestamp, help="end time")
    opt(p, "-c", "messageNumber", dest="count", type=int, default=128, help="at most (128)")


#: (mqadmin name, dashed alias, help, argument setup, coroutine)
COMMANDS: list[tuple[str, str, str, Callable[[argparse.ArgumentParser], None], Run]] = [
    ("updateTopic", "update-topic", "create or update a topic", _setup_update_topic, _update_topic),
    ("deleteTopic", "delete-topic", "delete a topic", _setup_delete_topic, _delete_topic),
    ("topicList", "topic-list", "topics the name server knows", _setup_topic_list, _topic_list),
    ("topicRoute", "topic-route", "the route of a topic", setup_topic_only, _topic_route),
    (
        "topicStatus",
        "topic-status",
        "offsets of a topic's queues",
        setup_topic_only,
        _topic_status,
    ),
    ("clusterList", "cluster-list", "clusters and brokers", _setup_cluster_list, _cluster_list),
    (
        "brokerStatus",
        "broker-status",
        "a broker's runtime info",
        _setup_broker_status,
        _broker_status,
    ),
    (
        "queryMsgTraceById",
        "query-msg-trace-by-id",
        "where a message went: its send and every group that consumed it",
        _setup_query_msg_trace_by_id,
        _query_msg_trace_by_id,
    ),
    (
        "pendingTransactions",
        "pending-transactions",
        "transactions brokers wait on (neither committed nor rolled back)",
        _setup_pending_transactions,
        _pending_transactions,
    ),
    (
        "consumerProgress",
        "consumer-progress",
        "a consumer group's offsets and lag",
        _setup_consumer_progress,
        _consumer_progress,
    ),
    (
        "queryMsgById",
        "query-msg-by-id",
        "a message by offset msg id (or UNIQ_KEY with -t)",
        _setup_query_msg_by_id,
        _query_msg_by_id,
    ),
    (
        "queryMsgByKey",
        "query-msg-by-key",
        "messages by key",
        _setup_query_msg_by_key,
        _query_msg_by_key,
    ),
    (
        "queryMsgByOffset",
        "query-msg-by-offset",
        "the message at a queue offset",
        _setup_query_msg_by_offset,
        _query_msg_by_offset,
    ),
    (
        "resetOffsetByTime",
        "reset-offset-by-time",
        "move a group's offsets to a time",
        _setup_reset_offset_by_time,
        _reset_offset_by_time,
    ),
    ("sendMessage", "send-message", "send one message", _setup_send_message, _send_message),
    (
        "consumeMessage",
        "consume-message",
        "read messages without a group offset",
        _setup_consume_message,
        _consume_message,
    ),
    *GROUP_COMMANDS,
    *BROKER_COMMANDS,
    *NAMESRV_COMMANDS,
]


def _shown(run: Callable[[AdminClient, argparse.Namespace], Awaitable[Shown]]) -> Run:
    async def wrapped(admin: AdminClient, a: argparse.Namespace) -> Output:
        data, text = await run(admin, a)
        return Output(data, text)

    return wrapped


COMMANDS += [(n, alias, h, setup, _shown(run)) for n, alias, h, setup, run in ACL_COMMANDS]


def add_common(p: argparse.ArgumentParser) -> None:
    """-n, --json, --timeout and the ACL credentials, shared by every admin
    command."""
    opt(
        p,
        "-n",
        "namesrvAddr",
        "namesrv-addr",
        dest="namesrv_addr",
        default=default_namesrv(),
        help="name servers, 'host:port[;host:port]' (default: $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--timeout", type=float, default=5.0, help="deadline of each request, seconds (5)"
    )
    p.add_argument(
        "--access-key",
        dest="access_key",
        default=None,
        help=f"ACL: sign requests with this account (default ${ENV_ACCESS_KEY})",
    )
    p.add_argument(
        "--secret-key",
        dest="secret_key",
        default=None,
        help=f"ACL: the account's secret key (default ${ENV_SECRET_KEY})",
    )
    add_tls_options(p)


def add_tls_options(p: argparse.ArgumentParser) -> None:
    """--tls, --tls-ca, --tls-cert, --tls-key: TLS to the servers."""
    p.add_argument(
        "--tls", action="store_true", help="connect with TLS (servers with tls.server.mode on)"
    )
    p.add_argument(
        "--tls-ca", default=None, metavar="PEM", help="CA the servers' certificates chain to"
    )
    p.add_argument("--tls-cert", default=None, metavar="PEM", help="client certificate (mTLS)")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="its private key")


def tls_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The client's tls arguments from add_tls_options' options; --tls-ca
    alone implies --tls."""
    on = bool(args.tls or args.tls_ca or args.tls_cert)
    return {
        "tls": on,
        "tls_ca": args.tls_ca if on else None,
        "tls_cert": args.tls_cert if on else None,
        "tls_key": args.tls_key if on else None,
    }


def add_arguments(sub: Any) -> None:
    """Register `admin` and its commands on the `pyrmq` subparsers."""
    adm = sub.add_parser(
        "admin",
        help="mqadmin commands: topics, clusters, offsets, messages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    asub = adm.add_subparsers(dest="admin_cmd", required=True, metavar="COMMAND")
    for name, alias, help_, setup, run in COMMANDS:
        p = asub.add_parser(name, aliases=[alias], help=help_, description=help_)
        add_common(p)
        setup(p)
        p.set_defaults(admin_run=run)


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """Keep the client's log lines off the terminal: a failure is reported
    once, as the command's `error:` line."""
    logger = logging.getLogger("pyrmq")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(old)


def error_line(e: BaseException) -> str:
    """`error: ...` for any failure, without a traceback."""
    if isinstance(e, RMQError | ValueError | argparse.ArgumentTypeError):
        text = str(e) or type(e).__name__
    elif isinstance(e, TimeoutError):
        text = "timed out"
    elif isinstance(e, OSError) and e.strerror:
        text = f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    else:
        text = f"{type(e).__name__}: {e}"
    return f"error: {text}"


async def _run(args: argparse.Namespace) -> int:
    run: Run = args.admin_run
    async with AdminClient(
        args.namesrv_addr,
        timeout=args.timeout,
        access_key=args.access_key,
        secret_key=args.secret_key,
        **tls_kwargs(args),
    ) as admin:
        out = await run(admin, args)
    if args.json:
        print(json.dumps(out.data, indent=2, ensure_ascii=False))
    elif out.text:
        print(out.text)
    return 0


def main(args: argparse.Namespace) -> int:
    with quiet_logging():
        try:
            return asyncio.run(_run(args))
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            raise  # `| head` closed the output: pyrmq.cli.main ends quietly
        except Exception as e:
            print(error_line(e), file=sys.stderr)
            return 1
