"""duplicateDetection across a controller-mode failover: a message the old
master stored (and its slave copied) and sent again to the new master, as a
producer does whose answer the failover cut, is answered with the first
send's result, not stored a second time. Real processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.testing.ha import stored_messages
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.ha.conftest import (
    NAMES,
    controller_mode_cluster,
    start_controller_mode,
    stop_controller_mode,
)
from tests.ha.test_failover import _wait_new_master, wait_settled

TOPIC = "DedupFailoverT"
KEY = "0A0000010000" + "0" * 18 + "42"


def send_frame(queue_id: int) -> RemotingCommand:
    props = rmqcore.encode_properties({"UNIQ_KEY": KEY, "WAIT": "true"}).decode()
    return RemotingCommand(RC.SEND_MESSAGE, {
        "producerGroup": "PG-dedup", "topic": TOPIC, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
        "bornTimestamp": "1700000000000", "flag": "0", "properties": props,
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }, b"once")  # fmt: skip


def test_a_message_resent_to_the_new_master_is_stored_once(tmp_path, arun):
    ctl, c = controller_mode_cluster(tmp_path)
    c.broker_conf.update({"duplicateDetection": "true"})

    async def main() -> None:
        async with Admin(c.namesrv_addr) as admin:
            old = await wait_settled(admin, c)
            await admin.create_topic(c.broker_addr(old), TOPIC, 4)
            client = RemotingClient(name="dedup-producer")
            try:
                first = await client.invoke(c.broker_addr(old), send_frame(1), 10.0)
                assert first.code == R.SUCCESS, first  # SYNC_MASTER: the slave has it
                (slave,) = [n for n in NAMES if n != old]

                async def slave_knows_topic() -> bool:
                    resp = await admin.api.broker_request(
                        c.broker_addr(slave), RC.GET_ALL_TOPIC_CONFIG
                    )
                    table = json.loads(resp.body)["topicConfigTable"]
                    return table.get(TOPIC, {}).get("writeQueueNums") == 4

                # the topic's 4 queues reach the slave with the metadata sync
                await wait_until(slave_knows_topic, "the slave's copy of the topic config")
                await asyncio.to_thread(c.kill_broker, old)
                new = await _wait_new_master(admin, c, old)
                assert new is not None
                again = await client.invoke(c.broker_addr(new), send_frame(2), 10.0)
                assert again.code == R.SUCCESS, again
                for k in ("msgId", "queueId", "queueOffset"):
                    assert again.ext_fields[k] == first.ext_fields[k], k
                assert await stored_messages(admin.api, c.broker_addr(new), TOPIC, 4) == 1
            finally:
                await client.shutdown()

    try:
        start_controller_mode(ctl, c, None)
        arun(main(), timeout=120)
    finally:
        stop_controller_mode(ctl, c)
