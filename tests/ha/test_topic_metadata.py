"""The topic table across replication: a slave copies its master's topic
table every few seconds (SlaveSynchronize), so a topic created and sent to
just before the master dies reaches the slave as messages but not as a
table entry. The new master adopts every topic it holds messages of
(TopicConfigManager.adopt_stored), or the name servers would route the
topic nowhere and its acknowledged messages could be neither consumed nor
added to. A topic the master deletes loses its ConsumeQueues on the slave
too, so adoption never brings it back."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Awaitable
from typing import Any

from pyrmq.broker.topic_config import TopicConfig, TopicConfigManager
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.remoting import RequestCode
from pyrmq.storage.files import stored_topics
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.controllers import ControllerGroup
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.ha.conftest import MASTER, SLAVE
from tests.ha.test_failover import _wait_new_master, wait_settled
from tests.ha.test_replication import consumed_by_new_group, replicated


def _manager(root: pathlib.Path) -> TopicConfigManager:
    return TopicConfigManager(
        str(root),
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        default_topic_queue_nums=8,
        auto_create_topic_enable=True,
        max_queue_nums=1024,
    )


def _queue_dir(root: pathlib.Path, topic: str, qid: int) -> None:
    (root / "consumequeue" / topic / str(qid)).mkdir(parents=True)


def test_adopt_stored_gives_unknown_stored_topics_their_queues(tmp_path: pathlib.Path) -> None:
    _queue_dir(tmp_path, "Fresh", 0)
    _queue_dir(tmp_path, "Fresh", 5)  # queues 1-4 got no message yet
    _queue_dir(tmp_path, "Known", 0)
    _queue_dir(tmp_path, "bad name!", 0)  # never a topic: left alone
    (tmp_path / "consumequeue" / "Empty").mkdir()
    stored = stored_topics(str(tmp_path))
    assert stored == {"Fresh": 6, "Known": 1, "bad name!": 1}
    m = _manager(tmp_path)
    m.table["Known"] = TopicConfig("Known", 2, 3, 6)
    assert m.adopt_stored(stored) == ["Fresh"]
    fresh = m.require("Fresh")
    assert (fresh.read_queue_nums, fresh.write_queue_nums, fresh.perm) == (6, 6, 6)
    assert (m.require("Known").read_queue_nums, m.require("Known").write_queue_nums) == (2, 3)
    assert m.get("bad name!") is None
    assert m.adopt_stored(stored) == []  # nothing left to adopt


def test_new_master_routes_a_topic_created_just_before_the_old_one_died(
    arun: Any, controller_cluster: tuple[ControllerGroup, ProcessCluster]
) -> None:
    _, c = controller_cluster
    arun(_fresh_topic_failover(c), timeout=300)


async def _fresh_topic_failover(c: ProcessCluster) -> None:
    topic = "FreshBeforeFailoverT"
    async with Admin(c.namesrv_addr) as admin:
        master = await wait_settled(admin, c)
        await admin.create_topic(c.broker_addr(master), topic, 4)
        acked: set[str] = set()
        async with Producer("fresh-pg", c.namesrv_addr, send_msg_timeout=3.0) as p:
            for i in range(40):  # SYNC_MASTER, all of the SyncStateSet: the slave has each
                r = await p.send(Message(topic, f"fresh-{i}".encode()))
                assert r.send_status is SendStatus.SEND_OK
                acked.add(f"fresh-{i}")
        c.kill_broker(master)  # most likely before the slave's next metadata sync
        await _wait_new_master(admin, c, master)
        await wait_until(lambda: admin.routed(topic), f"a route for {topic} after the failover")
        await consumed_by_new_group(
            c, "fresh-reader", topic, acked, "the new master serving every message of the topic"
        )
        async with Producer("fresh-pg2", c.namesrv_addr, send_msg_timeout=3.0) as p:
            r = await p.send(Message(topic, b"after"))
            assert r.send_status is SendStatus.SEND_OK
    survivor = next(n for n in c.brokers if n != master)
    adopted = "adopted" in c.brokers[survivor].log_path.read_text(errors="replace")
    print(f"\n{len(acked)} messages of a fresh topic served after failover; adopted: {adopted}")


def test_a_topic_deleted_on_the_master_loses_its_queues_on_the_slave(
    arun: Any, async_cluster: ProcessCluster
) -> None:
    arun(_deleted_topic(async_cluster), timeout=200)


async def _deleted_topic(c: ProcessCluster) -> None:
    topic = "DeletedOnMasterT"
    slave_queues = c.store_dir(SLAVE) / "consumequeue" / topic
    async with Admin(c.namesrv_addr) as admin:
        await admin.create_topic(c.broker_addr(MASTER), topic, 2)
        await replicated(admin, c, topic)
        async with Producer("deleted-pg", c.namesrv_addr) as p:
            for i in range(10):
                await p.send(Message(topic, f"d-{i}".encode()))
        await admin.api.broker_request(
            c.broker_addr(MASTER),
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "deleted-cg", "topic": topic, "queueId": "0", "commitOffset": "3"},
        )

        async def slave_offsets() -> set[str]:
            resp = await admin.api.broker_request(
                c.broker_addr(SLAVE), RequestCode.GET_ALL_CONSUMER_OFFSET
            )
            return set(json.loads(resp.body)["offsetTable"])

        key = f"{topic}@deleted-cg"
        await wait_until(
            lambda: slave_queues.is_dir() and topic in stored_topics(str(c.store_dir(SLAVE))),
            "the slave dispatching the topic's messages",
        )
        await wait_until(lambda: _has(slave_offsets(), key), "the slave holding the group's offset")
        await admin.api.broker_request(
            c.broker_addr(MASTER), RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}
        )
        await wait_until(
            lambda: topic not in stored_topics(str(c.store_dir(SLAVE))),
            "the slave dropping the deleted topic's ConsumeQueues at its next sync",
        )
        assert key not in await slave_offsets(), "the slave kept the deleted topic's offsets"


async def _has(offsets: Awaitable[set[str]], key: str) -> bool:
    return key in await offsets
