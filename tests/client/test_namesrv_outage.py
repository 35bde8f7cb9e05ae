"""Clients keep working on their cached routes while every name server is
away (RocketMQ's design: the name servers only hand out routes).

The crash-loop chaos test found the producer stalled for the whole of a
name-server outage (issue 14): a send that failed once, in the broker's
restart, made the producer drop the topic's route and ask the (dead) name
server for it before every later send. These tests replay that order of
events deterministically, in process: the route is cached, the name server
goes away, the broker restarts on its address, and both a producer and a
push consumer must carry on with no name server at all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, MessageExt
from pyrmq.common.results import SendStatus
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingClient, RequestCode
from pyrmq.testing import LocalCluster
from tests._waiting import wait_until

TOPIC = "NsOutageT"
QUEUES = 4


async def _create_topic(cluster: LocalCluster) -> None:
    remoting = RemotingClient(name="test-admin")
    api = MQClientAPI(remoting, [cluster.namesrv_addr])
    try:
        fields = {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": str(QUEUES),
            "writeQueueNums": str(QUEUES),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        await api.broker_request(cluster.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)

        async def routed() -> bool:
            route = await api.get_topic_route(TOPIC, timeout=2.0)
            return route is not None and bool(route.queue_datas)

        await wait_until(routed, "the topic's route", stall_after=10.0)
    finally:
        await remoting.shutdown()


async def _restart_broker_without_namesrv(cluster: LocalCluster, producer: Producer) -> None:
    """Name server gone first, then the broker stops, a send fails on it
    (as the sends in flight at a broker crash do), and the broker starts
    again on its port."""
    assert cluster.namesrv is not None
    await cluster.namesrv.shutdown()
    await cluster.stop_broker()
    with pytest.raises(RMQError):
        await producer.send(Message(TOPIC, b"while-down"))
    await cluster.start_broker()


async def _send_until_ok(producer: Producer, what: str, attempts: int = 40) -> int:
    """Send until one is acknowledged (at most `attempts` sends, 0.1 s
    apart); the number of failed sends before it."""
    failed = 0
    for i in range(attempts):
        try:
            r = await producer.send(Message(TOPIC, f"{what}-{i}".encode()))
        except RMQError:
            failed += 1
            await asyncio.sleep(0.1)
            continue
        assert r.send_status is SendStatus.SEND_OK
        return failed
    raise AssertionError(f"no send acknowledged in {attempts} attempts ({what})")


def test_producer_sends_on_cached_route_after_broker_restart_with_namesrv_down(
    arun: Any, tmp_path: Any
) -> None:
    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), register_name_server_period=1000) as c:
            await _create_topic(c)
            async with Producer(
                "pg-ns-outage", c.namesrv_addr, send_msg_timeout=2.0, poll_name_server_interval=0.5
            ) as p:
                await _send_until_ok(p, "before")
                await _restart_broker_without_namesrv(c, p)
                # the sends that meet the dead connection fail (and may make
                # the producer want a fresh route); the broker is back, so the
                # next ones must go through on the route the producer cached
                await _send_until_ok(p, "after")
                # and keep going: a failure does not cost the cached route
                for i in range(20):
                    r = await p.send(Message(TOPIC, f"more-{i}".encode()))
                    assert r.send_status is SendStatus.SEND_OK

    arun(main(), timeout=60.0)


def test_push_consumer_goes_on_after_broker_restart_with_namesrv_down(
    arun: Any, tmp_path: Any
) -> None:
    got: set[str] = set()

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        got.update(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), register_name_server_period=1000) as c:
            await _create_topic(c)
            consumer = PushConsumer(
                "cg-ns-outage",
                c.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                rebalance_interval=0.5,
                poll_name_server_interval=0.5,
                heartbeat_broker_interval=0.5,
            )
            consumer.subscribe(TOPIC)
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                async with Producer(
                    "pg-ns-outage-c", c.namesrv_addr, poll_name_server_interval=0.5
                ) as p:
                    first = {f"a-{i}" for i in range(8)}
                    for body in sorted(first):
                        await p.send(Message(TOPIC, body.encode()))
                    await wait_until(lambda: first <= got, "the first messages", stall_after=20.0)
                    await _restart_broker_without_namesrv(c, p)
                    await _send_until_ok(p, "b")
                    second = {f"c-{i}" for i in range(8)}
                    for body in sorted(second):
                        await p.send(Message(TOPIC, body.encode()))
                    await wait_until(
                        lambda: second <= got,
                        "messages sent after the restart, with the name server down",
                        stall_after=20.0,
                    )
            finally:
                await consumer.shutdown()

    arun(main(), timeout=90.0)


def test_send_without_any_route_and_no_namesrv_is_a_clear_error(arun: Any, tmp_path: Any) -> None:
    """With no cached route and no name server, a send fails at once with
    an error naming the name servers, not a hang."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            addr = c.namesrv_addr
            assert c.namesrv is not None
            await c.namesrv.shutdown()
            async with Producer("pg-ns-none", addr, send_msg_timeout=2.0) as p:
                with pytest.raises(RMQError) as err:
                    await p.send(Message(TOPIC, b"x"))
                assert addr in str(err.value) or "name server" in str(err.value)

    arun(main(), timeout=30.0)
