"""Wire helpers for the integration tests: request builders for the codes
the NameServer and Broker handle, and checks shared by many tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.testing import LocalCluster

PULL_EXT = ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Any, **settings: Any
) -> AsyncIterator[tuple[LocalCluster, RemotingClient]]:
    """A LocalCluster in tmp_path/store and a RemotingClient, both shut down after."""
    c = LocalCluster(str(tmp_path / "store"), **settings)
    await c.start()
    client = RemotingClient(name="itest")
    try:
        yield c, client
    finally:
        await client.shutdown()
        await c.shutdown()


def props(**kw: Any) -> str:
    return rmqcore.encode_properties(kw).decode()


def send_fields(
    topic: str,
    queue_id: int = 0,
    properties: str = "",
    *,
    sysflag: int = 0,
    batch: bool | str = False,
    reconsume_times: int = 0,
    born_ts: int | None = None,
    flag: int = 0,
    **extra: str,
) -> dict[str, str]:
    f = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": str(sysflag),
        "bornTimestamp": str(int(time.time() * 1000) if born_ts is None else born_ts),
        "flag": str(flag),
        "properties": properties,
        "reconsumeTimes": str(reconsume_times),
        "unitMode": "0",
        "batch": batch if isinstance(batch, str) else ("1" if batch else "0"),
    }
    f.update(extra)
    return f


V1_TO_V2 = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
}


def v2(fields: dict[str, str]) -> dict[str, str]:
    return {V1_TO_V2.get(k, k): v for k, v in fields.items()}


async def send(
    client: RemotingClient,
    addr: str,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    properties: str = "",
    *,
    code: int = RC.SEND_MESSAGE,
    timeout: float = 5.0,
    **kw: Any,
) -> RemotingCommand:
    f = send_fields(topic, queue_id, properties, **kw)
    if code != RC.SEND_MESSAGE:
        f = v2(f)
    return await client.invoke(addr, RemotingCommand(code, f, body), timeout)


async def send_ok(
    client: RemotingClient,
    addr: str,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    properties: str = "",
    **kw: Any,
) -> RemotingCommand:
    r = await send(client, addr, topic, body, queue_id, properties, **kw)
    assert r.code == R.SUCCESS, r
    return r


def pull_cmd(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "CG",
    max_nums: int = 32,
    sysflag: int = 4,
    sub: str = "*",
    suspend_ms: int = 0,
    commit_offset: int = 0,
    expression_type: str | None = None,
) -> RemotingCommand:
    extra = {} if expression_type is None else {"expressionType": expression_type}
    return RemotingCommand(
        RC.PULL_MESSAGE,
        {
            **extra,
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(sysflag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": sub,
            "subVersion": "0",
        },
    )


def check_pull_ext(r: RemotingCommand) -> None:
    """Every pull answer (0, 19, 20, 21) carries the four offsets as strings."""
    for k in PULL_EXT:
        assert k in r.ext_fields, (k, r)
        assert isinstance(r.ext_fields[k], str), (k, r)
        int(r.ext_fields[k])
    assert r.ext_fields["suggestWhichBrokerId"] == "0"


async def pull(
    client: RemotingClient,
    addr: str,
    topic: str,
    queue_id: int,
    offset: int,
    timeout: float = 5.0,
    **kw: Any,
) -> RemotingCommand:
    r = await client.invoke(addr, pull_cmd(topic, queue_id, offset, **kw), timeout)
    if r.code in (R.SUCCESS, R.PULL_NOT_FOUND, R.PULL_RETRY_IMMEDIATELY, R.PULL_OFFSET_MOVED):
        check_pull_ext(r)
    return r


async def pull_all(
    client: RemotingClient,
    addr: str,
    topic: str,
    queue_id: int,
    *,
    start: int = 0,
    limit: int = 100_000,
    **kw: Any,
) -> list[dict[str, Any]]:
    """Every record of a queue from start, by repeated pulls (bounded)."""
    out: list[dict[str, Any]] = []
    offset = start
    for _ in range(10_000):
        r = await pull(client, addr, topic, queue_id, offset, **kw)
        if r.code == R.SUCCESS:
            out.extend(rmqcore.decode_records(r.body, True))
        elif r.code not in (R.PULL_RETRY_IMMEDIATELY,):
            break
        offset = int(r.ext_fields["nextBeginOffset"])
        if len(out) >= limit:
            break
    return out


async def simple(
    client: RemotingClient,
    addr: str,
    code: int,
    timeout: float = 5.0,
    body: bytes = b"",
    **fields: Any,
) -> RemotingCommand:
    return await client.invoke(
        addr, RemotingCommand(code, {k: str(v) for k, v in fields.items()}, body), timeout
    )


async def create_topic(cl: RemotingClient, a: str, topic: str, queues: int = 2) -> None:
    """UPDATE_AND_CREATE_TOPIC as mqadmin updateTopic sends it (read/write)."""
    r = await simple(
        cl, a, RC.UPDATE_AND_CREATE_TOPIC, topic=topic, readQueueNums=queues,
        writeQueueNums=queues, perm=6, topicFilterType="SINGLE_TAG", topicSysFlag=0,
        order="false",
    )  # fmt: skip
    assert r.code == R.SUCCESS, r


async def max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int) -> int:
    r = await simple(client, addr, RC.GET_MAX_OFFSET, topic=topic, queueId=queue_id)
    assert r.code == R.SUCCESS, r
    return int(r.ext_fields["offset"])


async def wait_for(
    pred: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.05
) -> bool:
    """Poll pred until it is true, at most timeout seconds (and count)."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        if await pred():
            return True
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(interval)
    return await pred()


async def route(client: RemotingClient, namesrv: str, topic: str) -> RemotingCommand:
    return await simple(client, namesrv, RC.GET_ROUTEINFO_BY_TOPIC, topic=topic)


def heartbeat_body(
    client_id: str,
    group: str,
    subs: dict[str, str] | None = None,
    *,
    message_model: int = 1,
    consume_type: int = 1,
    producer_group: str | None = None,
) -> bytes:
    """A C++-client style HeartbeatData: integer enums, string subVersion,
    garbage codeSet, keys sorted, trailing newline."""
    consumer: dict[str, Any] = {
        "consumeFromWhere": 0,
        "consumeType": consume_type,
        "groupName": group,
        "messageModel": message_model,
    }
    if subs:
        sds = []
        for topic, expr in subs.items():
            sd: dict[str, Any] = {"subString": expr, "subVersion": "1795308445968", "topic": topic}
            if expr != "*":
                tags = [t.strip() for t in expr.split("||")]
                sd["codeSet"] = [0] * len(tags)
                sd["tagsSet"] = tags
            sds.append(sd)
        consumer["subscriptionDataSet"] = sds
    data: dict[str, Any] = {"clientID": client_id, "consumerDataSet": [consumer]}
    if producer_group:
        data["producerDataSet"] = [{"groupName": producer_group}]
    return (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()


def msg_id_offset(msg_id: str) -> int:
    return int(msg_id[16:], 16)
