"""What a broker group looks like from outside, for tests and benchmarks:
each running broker's role, id and SyncStateSet from its
GET_BROKER_RUNTIME_INFO table (`controllerRole`, `controllerBrokerId`,
`syncStateSet`), whether the group has settled (one master, every running
replica in its SyncStateSet and replicating), and how many messages of a
topic a broker's queues hold."""

from __future__ import annotations

import json
from collections.abc import Iterable

from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RMQError
from pyrmq.remoting import RequestCode
from pyrmq.testing.cluster import ProcessCluster


async def replica_tables(
    api: MQClientAPI, cluster: ProcessCluster, names: Iterable[str], timeout: float = 2.0
) -> dict[str, dict[str, str]]:
    """name -> runtime table of each running broker that answered."""
    out = {}
    for name in names:
        if not cluster.brokers[name].running:
            continue
        try:
            resp = await api.broker_request(
                cluster.broker_addr(name), RequestCode.GET_BROKER_RUNTIME_INFO, timeout=timeout
            )
        except RMQError:
            continue
        out[name] = dict(json.loads(resp.body)["table"])
    return out


def masters(tables: dict[str, dict[str, str]]) -> list[str]:
    return [n for n, t in tables.items() if t.get("controllerRole") == "MASTER"]


def settled_master(
    tables: dict[str, dict[str, str]], cluster: ProcessCluster, names: Iterable[str]
) -> str | None:
    """The master's name once exactly one broker is master, every running
    broker answered and is in its SyncStateSet, and every other member of
    the set is replicating from it now (a set the master has not shrunk
    yet may still name a slave whose connection just broke), else None."""
    found = masters(tables)
    if len(found) != 1:
        return None
    master = tables[found[0]]
    in_set = set(json.loads(master["syncStateSet"]))
    ids = {int(t["controllerBrokerId"]) for t in tables.values()}
    running = sum(1 for n in names if cluster.brokers[n].running)
    connected = {int(s["brokerId"]) for s in json.loads(master.get("haSlaves", "[]"))}
    slaves = in_set - {int(master["controllerBrokerId"])}
    ok = len(tables) == running and ids <= in_set and slaves <= connected
    return found[0] if ok else None


async def stored_messages(api: MQClientAPI, addr: str, topic: str, queues: int) -> int:
    """Messages of topic in the broker's queues 0..queues-1 (the sum of
    their max offsets: GET_MAX_OFFSET)."""
    total = 0
    for q in range(queues):
        resp = await api.broker_request(
            addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}
        )
        total += int(resp.ext_fields["offset"])
    return total
