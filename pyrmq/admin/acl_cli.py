"""`pyrmq admin`'s ACL commands, with mqadmin's names and short options:

    pyrmq admin updateAclConfig -n NS -c DefaultCluster -a RocketMQ -s 12345678 \\
        -t "topicA=PUB|SUB,topicB=SUB" -g "groupA=SUB" -i DENY -u SUB -m false
    pyrmq admin deleteAclConfig -n NS -b 127.0.0.1:10911 -a RocketMQ
    pyrmq admin updateGlobalWhiteAddr -n NS -c DefaultCluster -g "10.10.*.*,192.168.0.1"
    pyrmq admin clusterAclConfigVersion -n NS -c DefaultCluster

They need an admin account when the brokers check ACL: give its keys with
--access-key/--secret-key (or ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY), as
every other command."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.admin import acl
from pyrmq.admin.client import AdminClient
from pyrmq.admin.results import as_json

#: (data for --json, text)
Shown = tuple[Any, str]


def _where(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "-b", "--brokerAddr", "--broker-addr", dest="broker_addr", help="one broker (ip:port)"
    )
    where.add_argument(
        "-c", "--clusterName", "--cluster", dest="cluster", help="every master of a cluster"
    )


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return low == "true"


def _setup_update(p: argparse.ArgumentParser) -> None:
    _where(p)
    p.add_argument("-a", "--accessKey", dest="acl_access_key", required=True)
    p.add_argument("-s", "--secretKey", dest="acl_secret_key", help="(required for a new account)")
    p.add_argument("-w", "--whiteRemoteAddress", dest="white_remote_address")
    p.add_argument("-i", "--defaultTopicPerm", dest="default_topic_perm", help="PUB|SUB|DENY")
    p.add_argument("-u", "--defaultGroupPerm", dest="default_group_perm", help="PUB|SUB|DENY")
    p.add_argument("-t", "--topicPerms", dest="topic_perms", type=_csv, help="a=PUB|SUB,b=DENY")
    p.add_argument("-g", "--groupPerms", dest="group_perms", type=_csv, help="g1=SUB,g2=DENY")
    p.add_argument("-m", "--admin", dest="acl_admin", type=_bool, help="true or false")


def _setup_delete(p: argparse.ArgumentParser) -> None:
    _where(p)
    p.add_argument("-a", "--accessKey", dest="acl_access_key", required=True)


def _setup_white(p: argparse.ArgumentParser) -> None:
    _where(p)
    p.add_argument(
        "-g",
        "--globalWhiteRemoteAddresses",
        dest="white",
        required=True,
        help="comma-separated; '' empties the list",
    )


async def _update(admin: AdminClient, a: argparse.Namespace) -> Shown:
    brokers = await acl.update_acl_config(
        admin,
        a.acl_access_key,
        secret_key=a.acl_secret_key,
        white_remote_address=a.white_remote_address,
        admin_account=a.acl_admin,
        default_topic_perm=a.default_topic_perm,
        default_group_perm=a.default_group_perm,
        topic_perms=a.topic_perms,
        group_perms=a.group_perms,
        broker_addr=a.broker_addr,
        cluster=a.cluster,
    )
    text = "\n".join(f"create or update plain access config to {b} success." for b in brokers)
    return {"accessKey": a.acl_access_key, "brokers": brokers}, text


async def _delete(admin: AdminClient, a: argparse.Namespace) -> Shown:
    brokers = await acl.delete_acl_config(admin, a.acl_access_key, a.broker_addr, a.cluster)
    text = "\n".join(
        f"delete plain access config account {a.acl_access_key} from {b} success." for b in brokers
    )
    return {"accessKey": a.acl_access_key, "brokers": brokers}, text


async def _white(admin: AdminClient, a: argparse.Namespace) -> Shown:
    addrs = _csv(a.white)
    brokers = await acl.update_global_white_addrs(admin, addrs, a.broker_addr, a.cluster)
    text = "\n".join(f"update global white remote addresses to {b} success." for b in brokers)
    return {"globalWhiteRemoteAddresses": addrs, "brokers": brokers}, text


async def _version(admin: AdminClient, a: argparse.Namespace) -> Shown:
    rows = await acl.cluster_acl_config_version(admin, a.broker_addr, a.cluster)
    lines = ["#Cluster Name  #Broker Name  #Broker Addr  #AclConfigVersionNum  #AclLastUpdateTime"]
    for r in rows:
        when = datetime.datetime.fromtimestamp(r.timestamp / 1000).isoformat(" ", "seconds")
        lines.append(f"{r.cluster_name}  {r.broker_name}  {r.broker_addr}  {r.counter}  {when}")
    return as_json(rows), "\n".join(lines)


ACL_COMMANDS: list[
    tuple[
        str,
        str,
        str,
        Callable[[argparse.ArgumentParser], None],
        Callable[[AdminClient, argparse.Namespace], Awaitable[Shown]],
    ]
] = [
    (
        "updateAclConfig",
        "update-acl-config",
        "create or update an ACL account in plain_acl.yml",
        _setup_update,
        _update,
    ),
    (
        "deleteAclConfig",
        "delete-acl-config",
        "delete an ACL account",
        _setup_delete,
        _delete,
    ),
    (
        "updateGlobalWhiteAddr",
        "update-global-white-addr",
        "replace the global white list of remote addresses",
        _setup_white,
        _white,
    ),
    (
        "clusterAclConfigVersion",
        "cluster-acl-config-version",
        "each broker's ACL config version",
        _where,
        _version,
    ),
]
