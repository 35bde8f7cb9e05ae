"""What the Producer tests share: an in-process NameServer + Broker
(LocalCluster) with a started Producer and a reader of its own, a second
broker, one behind a FaultProxy, and small readers of what a send stored."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import (
    Message,
    MessageExt,
    MessageQueue,
    decode_offset_msg_id,
)
from pyrmq.common.results import SendResult
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingClient, RequestCode
from pyrmq.testing import LocalCluster
from pyrmq.testing.proxy import FaultProxy
from tests._reading import read_queue

HEX32 = re.compile(r"^[0-9A-F]{32}$")
#: a second loopback address: a broker advertised there is reached through a
#: FaultProxy listening on it with the broker's own port (Linux routes 127/8)
PROXY_IP = "127.0.0.2"


# -- helpers ------------------------------------------------------------------------------


@dataclass
class Env:
    cluster: LocalCluster
    producer: Producer
    #: a reader with its own connections (pulls, views, admin requests)
    api: MQClientAPI


@contextlib.asynccontextmanager
async def env(
    tmp_path: Any, producer_kw: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[Env]:
    """LocalCluster(**settings) + a started Producer + a reader API."""
    c = LocalCluster(str(tmp_path / "store"), **settings)
    await c.start()
    remoting = RemotingClient(name="test-reader")
    try:
        api = MQClientAPI(remoting, [c.namesrv_addr])
        async with Producer("PG-test", c.namesrv_addr, **(producer_kw or {})) as p:
            yield Env(c, p, api)
    finally:
        await remoting.shutdown()
        await c.shutdown()


async def second_broker(c: LocalCluster, store_dir: str, **settings: Any) -> LocalCluster:
    """Another broker registered with c's name server (stop it with
    `stop_broker()`, never `shutdown()`: the name server is c's)."""
    other = LocalCluster(store_dir, **settings)
    other.namesrv = c.namesrv
    await other.start_broker()
    return other


def can_bind(ip: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((ip, 0))
    except OSError:
        return False
    return True


needs_proxy_ip = pytest.mark.skipif(
    not can_bind(PROXY_IP), reason=f"{PROXY_IP} is not a local address here"
)


async def proxied_broker(c: LocalCluster, store_dir: str, **settings: Any) -> LocalCluster:
    """A second broker that listens on 127.0.0.1 but is advertised (routes,
    store host) as PROXY_IP with the same port; start a FaultProxy on
    PROXY_IP:port before any client uses it."""
    return await second_broker(c, store_dir, broker_ip1=PROXY_IP, **settings)


@contextlib.asynccontextmanager
async def broker_b_behind_proxy(e: Env, tmp_path: Any, topic: str) -> AsyncIterator[FaultProxy]:
    """broker-b beside e's broker, reached through a FaultProxy on PROXY_IP;
    `topic` on both with one queue, and e's producer seen to send to both.
    Yields the proxy (set `refuse` and `reset_all()` to take broker-b's host
    away); both are stopped after."""
    b = await proxied_broker(e.cluster, str(tmp_path / "store-b"), broker_name="broker-b")
    assert b.broker is not None
    proxy = FaultProxy("127.0.0.1", b.broker.port, listen_host=PROXY_IP, listen_port=b.broker.port)
    await proxy.start()
    try:
        await create_topic(e.api, e.cluster.broker_addr, topic, 1)
        await create_topic(e.api, listen_addr(b), topic, 1)
        used = {
            (await e.producer.send(Message(topic, b"x"))).message_queue.broker_name
            for _ in range(4)
        }
        assert used == {"broker-a", "broker-b"}
        yield proxy
    finally:
        await proxy.shutdown()
        await b.stop_broker()


def listen_addr(c: LocalCluster) -> str:
    """The address a broker really listens on (behind any proxy)."""
    assert c.broker is not None
    return f"127.0.0.1:{c.broker.port}"


async def create_topic(api: MQClientAPI, broker_addr: str, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC; answered once the name servers have the route."""
    await api.broker_request(
        broker_addr,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": "6",
        },
    )


async def pull_all(
    api: MQClientAPI, addr: str, mq: MessageQueue, start: int = 0
) -> list[MessageExt]:
    """Every message of mq from start (bounded number of pulls)."""
    return await read_queue(api, addr, mq, start=start, group="CG-test", timeout=5.0)


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode, written out: over UTF-16 code units,
    31*h + c in 32-bit two's complement."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def stored_at(result: SendResult) -> tuple[str, int]:
    return decode_offset_msg_id(result.offset_msg_id)
