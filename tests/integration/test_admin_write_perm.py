"""WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327) on the
name server, as raw frames, with a real producer over a two-broker cluster:
after a wipe its sends go to the other broker, until write perm is added
back or the broker registers a changed topic table (RocketMQ's
RouteInfoManager semantics)."""

from __future__ import annotations

import json

from pyrmq.common.message import Message
from pyrmq.producer import Producer
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.testing import LocalCluster

from .helpers import cluster, simple


async def _create(cl, addr: str, topic: str) -> None:
    r = await simple(cl, addr, RC.UPDATE_AND_CREATE_TOPIC, topic=topic, readQueueNums=2,
                     writeQueueNums=2, perm=6)  # fmt: skip
    assert r.code == R.SUCCESS, r


async def _perms(cl, ns: str, topic: str) -> dict[str, int]:
    r = await simple(cl, ns, RC.GET_ROUTEINFO_BY_TOPIC, topic=topic)
    assert r.code == R.SUCCESS, r
    return {q["brokerName"]: q["perm"] for q in json.loads(r.body)["queueDatas"]}


async def _sent_to(p: Producer, topic: str, n: int) -> set[str]:
    await p.client.update_topic_route(topic)  # what the 30 s route refresh does
    return {(await p.send(Message(topic, b"x"))).message_queue.broker_name for _ in range(n)}


def test_wipe_and_add_write_perm_route_producers(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            ns = c.namesrv_addr
            b = LocalCluster(str(tmp_path / "store-b"), broker_name="broker-b")
            b.namesrv = c.namesrv
            await b.start_broker()
            try:
                for addr in (c.broker_addr, b.broker_addr):
                    await _create(cl, addr, "WpT")
                assert await _perms(cl, ns, "WpT") == {"broker-a": 6, "broker-b": 6}
                async with Producer("PG-wp", ns) as p:
                    assert await _sent_to(p, "WpT", 6) == {"broker-a", "broker-b"}

                    r = await simple(cl, ns, RC.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-b")
                    assert r.code == R.SUCCESS and not r.remark, r
                    # every topic with queues on broker-b: WpT, its own, TBW102, ...
                    assert int(r.ext_fields["wipeTopicCount"]) >= 3, r
                    assert await _perms(cl, ns, "WpT") == {"broker-a": 6, "broker-b": 4}
                    assert await _sent_to(p, "WpT", 6) == {"broker-a"}
                    # broker-b's periodic registration (table unchanged) keeps the wipe
                    assert b.broker is not None and b.broker.outer is not None
                    await b.broker.outer.register_all()
                    assert (await _perms(cl, ns, "WpT"))["broker-b"] == 4

                    r = await simple(cl, ns, RC.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-b")
                    assert r.code == R.SUCCESS, r
                    assert int(r.ext_fields["addTopicCount"]) >= 3, r
                    assert (await _perms(cl, ns, "WpT"))["broker-b"] == 6
                    assert await _sent_to(p, "WpT", 6) == {"broker-a", "broker-b"}

                    # a wipe also ends when broker-b registers a changed table
                    r = await simple(cl, ns, RC.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-b")
                    assert (await _perms(cl, ns, "WpT"))["broker-b"] == 4
                    await _create(cl, b.broker_addr, "WpT2")  # registers at once
                    assert (await _perms(cl, ns, "WpT"))["broker-b"] == 6
                    assert await _sent_to(p, "WpT", 6) == {"broker-a", "broker-b"}
            finally:
                await b.stop_broker()

    arun(main())


def test_write_perm_error_paths(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            ns = c.namesrv_addr
            for code in (RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER):
                r = await simple(cl, ns, code)
                assert r.code == R.SYSTEM_ERROR and "brokerName" in r.remark, r
                r = await simple(cl, ns, code, brokerName="  ")
                assert r.code == R.SYSTEM_ERROR and "brokerName" in r.remark, r
                # an unknown broker: RocketMQ's SUCCESS with a count of 0, and a remark
                r = await simple(cl, ns, code, brokerName="no-such-broker")
                assert r.code == R.SUCCESS, r
                assert set(r.ext_fields.values()) == {"0"}
                assert "no-such-broker" in r.remark and "broker-a" in r.remark, r
            # add on a read-only topic sets READ|WRITE, as RocketMQ does
            r = await simple(cl, c.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, topic="RoT",
                             readQueueNums=1, writeQueueNums=1, perm=4)  # fmt: skip
            assert r.code == R.SUCCESS, r
            assert (await _perms(cl, ns, "RoT"))["broker-a"] == 4
            r = await simple(cl, ns, RC.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-a")
            assert (await _perms(cl, ns, "RoT"))["broker-a"] == 6

    arun(main())
