"""The member list a rebalance needs (findConsumerIdList) while one broker of
the topic is cut off: alive, in the route, silent. RocketMQ asks a random
broker and gives up on a timeout, so half the rebalances of every member
fail; pyrmq asks the broker that answered last first and the others after
a timeout. The cut-off broker is a FaultProxy in black-hole mode (accepts,
discards every byte, never answers) put into the route beside a real one."""

from __future__ import annotations

from typing import Any

from pyrmq.client.api import MQClientAPI
from pyrmq.client.instance import ClientInstance
from pyrmq.common.message import MessageExt
from pyrmq.common.route import BrokerData, QueueData, TopicRouteData
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.remoting import RemotingClient
from pyrmq.testing import LocalCluster
from pyrmq.testing.proxy import FaultProxy
from tests._waiting import wait_until
from tests.client._producer_env import create_topic

TOPIC = "MemberLookupT"
GROUP = "CG-member-lookup"


async def _ok(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _route(live: str, silent: str) -> TopicRouteData:
    return TopicRouteData(
        (QueueData("live", 4, 4, 6), QueueData("silent", 4, 4, 6)),
        (BrokerData("c", "live", {0: live}), BrokerData("c", "silent", {0: silent})),
    )


def test_member_list_comes_from_the_broker_that_answers(arun, tmp_path):
    async def main() -> None:
        c = LocalCluster(str(tmp_path / "store"))
        await c.start()
        live = f"127.0.0.1:{c.broker.port}"
        admin = RemotingClient(name="test-admin")
        await create_topic(MQClientAPI(admin, [c.namesrv_addr]), live, TOPIC, 4)
        await admin.shutdown()
        member = PushConsumer(
            GROUP,
            c.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            heartbeat_broker_interval=1.0,
        )
        member.subscribe(TOPIC)
        member.register_message_listener(_ok)
        asker = ClientInstance(c.namesrv_addr, request_timeout=0.5)
        try:
            await member.start()
            async with FaultProxy("127.0.0.1", c.broker.port) as hole:
                hole.drop = True
                asker.routes[TOPIC] = _route(live, hole.addr)

                async def listed() -> bool:
                    # None until the member's first heartbeat: the broker
                    # answers "no consumer for this group" before it
                    cids = await asker.consumer_id_list(TOPIC, GROUP)
                    return cids is not None and member.client_id in cids

                # the member's heartbeat reaches the broker in its own time
                await wait_until(listed, "the member in the live broker's list")
                assert asker._member_broker == live
                # from now on the live broker is asked first: every lookup
                # answers (a turn at the black hole would time out first)
                for _ in range(10):
                    assert member.client_id in (await asker.consumer_id_list(TOPIC, GROUP) or [])
                assert asker._member_broker == live

                # every broker silent: None, not an exception
                asker.routes[TOPIC] = _route(hole.addr, hole.addr)
                assert await asker.consumer_id_list(TOPIC, GROUP) is None
                # and no route at all
                assert await asker.consumer_id_list("NoSuchTopicHere", GROUP) is None
        finally:
            await asker.shutdown()
            await member.shutdown()
            await c.shutdown()

    arun(main())
