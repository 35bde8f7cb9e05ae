"""`pyrmq admin`: topic and cluster administration over the remoting
protocol (a small mqadmin)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode


def add_arguments(sub: Any) -> None:
    adm = sub.add_parser("admin", help="topics, routes and cluster info")
    asub = adm.add_subparsers(dest="admin_cmd", required=True)

    def ns(p: argparse.ArgumentParser) -> None:
        p.add_argument("-n", "--namesrv-addr", default="127.0.0.1:9876")

    up = asub.add_parser("update-topic", help="create or update a topic")
    ns(up)
    where = up.add_mutually_exclusive_group()
    where.add_argument("-b", "--broker-addr", help="one broker (ip:port)")
    where.add_argument("-c", "--cluster", help="every master of a cluster")
    up.add_argument("-t", "--topic", required=True)
    up.add_argument("-r", "--read-queues", type=int, default=8)
    up.add_argument("-w", "--write-queues", type=int, default=8)
    up.add_argument("-p", "--perm", type=int, default=6)
    up.add_argument("-o", "--order", action="store_true")

    de = asub.add_parser("delete-topic", help="delete a topic from a cluster")
    ns(de)
    de.add_argument("-c", "--cluster", default=None)
    de.add_argument("-t", "--topic", required=True)

    ns(asub.add_parser("topic-list", help="topics the name server knows"))
    ns(asub.add_parser("cluster-list", help="clusters and their brokers"))
    rt = asub.add_parser("topic-route", help="the route of a topic")
    ns(rt)
    rt.add_argument("-t", "--topic", required=True)


async def _call(client: RemotingClient, addr: str, code: int, fields: dict[str, str]) -> Any:
    resp = await client.invoke(addr, RemotingCommand(code, fields), 5.0)
    if resp.code != ResponseCode.SUCCESS:
        raise BrokerError.from_response(resp.code, resp.remark, addr)
    return json.loads(resp.body) if resp.body else None


async def _masters(client: RemotingClient, namesrv: str, cluster: str | None) -> list[str]:
    info = await _call(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, {})
    names = (
        info["clusterAddrTable"].get(cluster, [])
        if cluster
        else [n for ns in info["clusterAddrTable"].values() for n in ns]
    )
    out = []
    for name in names:
        bd = info["brokerAddrTable"].get(name, {})
        addr = bd.get("brokerAddrs", {}).get("0")
        if addr:
            out.append(addr)
    if not out:
        raise SystemExit(f"no master broker found for cluster {cluster or '(any)'} at {namesrv}")
    return out


async def _run(args: argparse.Namespace) -> int:
    client = RemotingClient(name="admin")
    ns = args.namesrv_addr
    try:
        cmd = args.admin_cmd
        if cmd == "update-topic":
            brokers = (
                [args.broker_addr] if args.broker_addr else await _masters(client, ns, args.cluster)
            )
            fields = {
                "topic": args.topic,
                "defaultTopic": "TBW102",
                "readQueueNums": str(args.read_queues),
                "writeQueueNums": str(args.write_queues),
                "perm": str(args.perm),
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "true" if args.order else "false",
            }
            for b in brokers:
                await _call(client, b, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
                print(f"create topic to {b} success: {args.topic}")
        elif cmd == "delete-topic":
            for b in await _masters(client, ns, args.cluster):
                await _call(client, b, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": args.topic})
            await _call(client, ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": args.topic})
            print(f"delete topic [{args.topic}] from cluster success")
        elif cmd == "topic-list":
            data = await _call(client, ns, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
            print("\n".join(data["topicList"]))
        elif cmd == "cluster-list":
            print(
                json.dumps(
                    await _call(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO, {}), indent=2
                )
            )
        elif cmd == "topic-route":
            data = await _call(
                client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": args.topic}
            )
            print(json.dumps(data, indent=2))
        return 0
    except (BrokerError, RemotingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        await client.shutdown()


def main(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
