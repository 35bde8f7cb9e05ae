"""The admin requests of mqadmin and rocketmq-dashboard, sent as they send
them (raw frames), with the bodies they parse: consume stats (208), topic
stats (202), connections (203, 204), subscription groups (200, 201, 207),
broker config (25, 26), who consumes (300), time span (303), clone offsets
(314), stats (315, 317), the forwarded requests (307, 309), and the name
server's 224 and 304. Error paths answer a RocketMQ code with a remark."""

from __future__ import annotations

import asyncio
import json
import os

from pyrmq.common import fastjson
from pyrmq.common.topics import TRANS_SYS_GROUP
from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, heartbeat_body, pull, send_ok, simple, wait_for

MQ0 = '{"brokerName":"broker-a","queueId":0,"topic":"%s"}'


def _fastjson_has_object_keys(body: bytes, topic: str) -> bool:
    """The map is keyed by the queue object itself, as fastjson writes it."""
    return ("{" + MQ0 % topic + ":").encode() in body or ("," + MQ0 % topic + ":").encode() in body


async def _heartbeat(cl, addr, client_id, group, subs, producer_group=None):
    r = await cl.invoke(
        addr,
        RemotingCommand(
            RC.HEART_BEAT,
            {},
            heartbeat_body(client_id, group, subs, producer_group=producer_group),
            language="JAVA",
        ),
        5.0,
    )
    assert r.code == R.SUCCESS, r


def test_topic_and_consume_stats(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            for i in range(5):
                await send_ok(cl, a, "StT", f"m{i}".encode(), i % 2)
            r = await simple(cl, a, RC.GET_TOPIC_STATS_INFO, topic="StT")
            assert r.code == R.SUCCESS, r
            assert _fastjson_has_object_keys(r.body, "StT"), r.body
            data = fastjson.loads(r.body)
            table = {json.loads(k)["queueId"]: v for k, v in data["offsetTable"].items()}
            assert table[0]["maxOffset"] == 3 and table[1]["maxOffset"] == 2
            assert table[0]["minOffset"] == 0 and table[0]["lastUpdateTimestamp"] > 0
            assert len(table) == 4 and table[2] == {
                "lastUpdateTimestamp": 0,
                "maxOffset": 0,
                "minOffset": 0,
            }
            assert data["topicPutTps"] >= 0
            r = await simple(cl, a, RC.GET_TOPIC_STATS_INFO, topic="NoSuchT")
            assert r.code == R.TOPIC_NOT_EXIST and "NoSuchT" in r.remark, r
            r = await simple(cl, a, RC.GET_TOPIC_STATS_INFO)
            assert r.code == R.SYSTEM_ERROR and "topic" in r.remark, r

            # the group consumed 2 of queue 0 (commit with a pull)
            r = await pull(cl, a, "StT", 0, 0, group="G1", sysflag=4 | 1, commit_offset=0)
            await simple(
                cl, a, RC.UPDATE_CONSUMER_OFFSET, consumerGroup="G1", topic="StT", queueId=0,
                commitOffset=2,
            )  # fmt: skip
            r = await simple(cl, a, RC.GET_CONSUME_STATS, consumerGroup="G1", topic="StT")
            assert r.code == R.SUCCESS, r
            assert _fastjson_has_object_keys(r.body, "StT"), r.body
            cs = fastjson.loads(r.body)
            q = {json.loads(k)["queueId"]: v for k, v in cs["offsetTable"].items()}
            assert q[0]["brokerOffset"] == 3 and q[0]["consumerOffset"] == 2
            assert q[0]["lastTimestamp"] > 0 and q[1]["consumerOffset"] == 0
            assert set(q[0]) == {"brokerOffset", "consumerOffset", "lastTimestamp", "pullOffset"}
            assert cs["consumeTps"] >= 0
            # no topic: every topic the group has offsets of
            r = await simple(cl, a, RC.GET_CONSUME_STATS, consumerGroup="G1")
            assert len(fastjson.loads(r.body)["offsetTable"]) == 4
            # a group nobody knows: an empty table, as RocketMQ answers
            r = await simple(cl, a, RC.GET_CONSUME_STATS, consumerGroup="Nobody")
            assert r.code == R.SUCCESS and fastjson.loads(r.body)["offsetTable"] == {}, r
            r = await simple(cl, a, RC.GET_CONSUME_STATS)
            assert r.code == R.SYSTEM_ERROR and "consumerGroup" in r.remark, r

            # who consumes StT: G1 (offsets); time span of G1 on StT
            r = await simple(cl, a, RC.QUERY_TOPIC_CONSUME_BY_WHO, topic="StT")
            assert json.loads(r.body) == {"groupList": ["G1"]}, r.body
            r = await simple(cl, a, RC.QUERY_CONSUME_TIME_SPAN, topic="StT", group="G1")
            spans = json.loads(r.body)["consumeTimeSpanSet"]
            assert len(spans) == 4
            s0 = spans[0]
            assert s0["messageQueue"] == {"brokerName": "broker-a", "queueId": 0, "topic": "StT"}
            assert 0 < s0["minTimeStamp"] <= s0["consumeTimeStamp"] <= s0["maxTimeStamp"]
            assert s0["delayTime"] >= 0
            r = await simple(cl, a, RC.QUERY_CONSUME_TIME_SPAN, topic="NoSuchT", group="G1")
            assert r.code == R.TOPIC_NOT_EXIST, r

            # clone G1's offsets to G2
            r = await simple(cl, a, RC.CLONE_GROUP_OFFSET, srcGroup="G1", destGroup="G2",
                             topic="StT", offline="false")  # fmt: skip
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.QUERY_CONSUMER_OFFSET, consumerGroup="G2", topic="StT",
                             queueId=0)  # fmt: skip
            assert r.ext_fields["offset"] == "2", r

            # brokerConsumeStats: every group with offsets, the transaction
            # checker's own (its progress is recorded from start) included,
            # as RocketMQ lists CID_RMQ_SYS_TRANS from its subscription table
            r = await simple(cl, a, RC.GET_BROKER_CONSUME_STATS, isOrder="false",
                             isOnline="false", timeoutMillis=5000, diffLevel=0)  # fmt: skip
            assert r.code == R.SUCCESS, r
            bcs = fastjson.loads(r.body)
            assert bcs["brokerAddr"] == a and bcs["totalDiff"] == 2 * (5 - 2)
            groups = {next(iter(e)) for e in bcs["consumeStatsList"]}
            assert groups == {"G1", "G2", TRANS_SYS_GROUP}

    arun(main())


def test_connections_and_stats_data(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await _heartbeat(cl, a, "10.0.0.1@c1", "CG1", {"CnT": "a||b"}, producer_group="PG1")
            r = await simple(cl, a, RC.GET_CONSUMER_CONNECTION_LIST, consumerGroup="CG1")
            assert r.code == R.SUCCESS, r
            cc = json.loads(r.body)
            (conn,) = cc["connectionSet"]
            assert conn["clientId"] == "10.0.0.1@c1" and conn["language"] == "JAVA"
            assert conn["clientAddr"].startswith("127.0.0.1:")
            assert cc["messageModel"] == "CLUSTERING"
            assert cc["consumeType"] == "CONSUME_PASSIVELY"
            assert cc["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
            assert cc["subscriptionTable"]["CnT"]["subString"] == "a||b"
            assert cc["subscriptionTable"]["CnT"]["tagsSet"] == ["a", "b"]
            r = await simple(cl, a, RC.GET_CONSUMER_CONNECTION_LIST, consumerGroup="NoCG")
            assert r.code == R.CONSUMER_NOT_ONLINE and "NoCG" in r.remark, r
            r = await simple(cl, a, RC.GET_PRODUCER_CONNECTION_LIST, producerGroup="PG1")
            (pconn,) = json.loads(r.body)["connectionSet"]
            assert (
                pconn["clientId"] == "10.0.0.1@c1"
                and pconn["version"] == cc["connectionSet"][0]["version"]
            )
            r = await simple(cl, a, RC.GET_PRODUCER_CONNECTION_LIST, producerGroup="NoPG")
            assert r.code == R.SYSTEM_ERROR and "NoPG" in r.remark, r
            # the subscription counts for who consumes
            r = await simple(cl, a, RC.QUERY_TOPIC_CONSUME_BY_WHO, topic="CnT")
            assert json.loads(r.body)["groupList"] == ["CG1"]

            # stats: 3 messages put to CnT, a pull of 3 by CG1
            for i in range(3):
                await send_ok(cl, a, "CnT", f"s{i}".encode(), 0)
            r = await pull(cl, a, "CnT", 0, 0, group="CG1")
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS",
                             statsKey="CnT")  # fmt: skip
            assert r.code == R.SUCCESS, r
            sd = json.loads(r.body)
            assert set(sd) == {"statsMinute", "statsHour", "statsDay"}
            assert sd["statsMinute"]["sum"] == 3 and sd["statsDay"]["sum"] == 3
            assert sd["statsMinute"]["avgpt"] == 1.0 and sd["statsMinute"]["tps"] > 0
            r = await simple(cl, a, RC.VIEW_BROKER_STATS_DATA, statsName="GROUP_GET_NUMS",
                             statsKey="CnT@CG1")  # fmt: skip
            assert json.loads(r.body)["statsMinute"]["sum"] == 3, r.body
            r = await simple(cl, a, RC.VIEW_BROKER_STATS_DATA, statsName="BROKER_PUT_NUMS",
                             statsKey="DefaultCluster")  # fmt: skip
            assert json.loads(r.body)["statsMinute"]["sum"] == 3, r.body
            r = await simple(cl, a, RC.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS",
                             statsKey="NeverSent")  # fmt: skip
            assert r.code == R.SYSTEM_ERROR and "not exist" in r.remark, r
            r = await simple(cl, a, RC.VIEW_BROKER_STATS_DATA, statsName="BOGUS", statsKey="x")
            assert r.code == R.SYSTEM_ERROR and "TOPIC_PUT_NUMS" in r.remark, r

    arun(main())


def test_subscription_groups(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, auto_create_subscription_group=False) as (c, cl):
            a = c.broker_addr
            await send_ok(cl, a, "SgT", b"x", 0)
            # auto-create off: an unknown group may not pull
            r = await pull(cl, a, "SgT", 0, 0, group="SG1")
            assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST and "SG1" in r.remark, r
            cfg = {
                "groupName": "SG1",
                "consumeEnable": False,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": 3,
                "retryMaxTimes": 2,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
                "groupSysFlag": 0,
            }
            r = await simple(
                cl, a, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode()
            )
            assert r.code == R.SUCCESS, r
            saved = os.path.join(str(tmp_path / "store"), "config", "subscriptionGroup.json")
            with open(saved) as f:
                table = json.load(f)["subscriptionGroupTable"]
            assert table["SG1"]["retryQueueNums"] == 3 and table["SG1"]["groupSysFlag"] == 0
            # consumeEnable false: pulls refused
            r = await pull(cl, a, "SgT", 0, 0, group="SG1")
            assert r.code == R.NO_PERMISSION and "SG1" in r.remark, r
            cfg["consumeEnable"] = True
            r = await simple(
                cl, a, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode()
            )
            r = await pull(cl, a, "SgT", 0, 0, group="SG1")
            assert r.code == R.SUCCESS, r
            # a heartbeat creates %RETRY%SG1 with the group's 3 queues
            await _heartbeat(cl, a, "10.0.0.2@c", "SG1", {"SgT": "*"})
            r = await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)
            topics = json.loads(r.body)["topicConfigTable"]
            assert topics["%RETRY%SG1"]["writeQueueNums"] == 3
            # sent back twice -> the third time (retryMaxTimes 2) to the DLQ
            sent = await send_ok(cl, a, "SgT", b"retry-me", 0)
            off = int(sent.ext_fields["msgId"][16:], 16)
            r = await simple(cl, a, RC.CONSUMER_SEND_MSG_BACK, group="SG1", offset=off,
                             delayLevel=-1, originMsgId=sent.ext_fields["msgId"],
                             originTopic="SgT", unitMode="false")  # fmt: skip
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)
            assert "%DLQ%SG1" in json.loads(r.body)["topicConfigTable"]
            # a send-back of a group that does not exist
            r = await simple(cl, a, RC.CONSUMER_SEND_MSG_BACK, group="NoSuchSG", offset=off,
                             delayLevel=0)  # fmt: skip
            assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST, r

            r = await simple(cl, a, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            wrapper = json.loads(r.body)
            assert wrapper["subscriptionGroupTable"]["SG1"]["retryMaxTimes"] == 2
            assert "TOOLS_CONSUMER" in wrapper["subscriptionGroupTable"]
            assert wrapper["dataVersion"]["counter"] >= 2

            # malformed bodies and bad names
            for body in (b"", b"{", b'{"consumeEnable":true}', b'{"groupName":"a b"}',
                         b'{"groupName":"G","retryQueueNums":"many"}'):  # fmt: skip
                r = await simple(cl, a, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
                assert r.code == R.INVALID_PARAMETER and r.remark, (body, r)

            r = await simple(cl, a, RC.DELETE_SUBSCRIPTIONGROUP, groupName="SG1",
                             removeOffset="true")  # fmt: skip
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            assert "SG1" not in json.loads(r.body)["subscriptionGroupTable"]
            with open(saved) as f:
                assert "SG1" not in json.load(f)["subscriptionGroupTable"]
            r = await simple(cl, a, RC.DELETE_SUBSCRIPTIONGROUP)
            assert r.code == R.SYSTEM_ERROR and "groupName" in r.remark, r
        # the table survives a restart
        async with cluster(tmp_path) as (c, cl):
            r = await simple(cl, c.broker_addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            assert "SG1" not in json.loads(r.body)["subscriptionGroupTable"]

    arun(main())


def test_broker_config(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            r = await simple(cl, a, RC.GET_BROKER_CONFIG)
            assert r.code == R.SUCCESS, r
            conf = dict(line.split("=", 1) for line in r.body.decode().splitlines())
            assert conf["brokerName"] == "broker-a" and conf["longPollingEnable"] == "true"
            assert "flushDiskType" in conf  # the store's settings too
            v0 = json.loads(r.ext_fields["version"])["counter"]
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG,
                             body=b"longPollingEnable=false\nbrokerPermission=4\n")  # fmt: skip
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.GET_BROKER_CONFIG)
            conf = dict(line.split("=", 1) for line in r.body.decode().splitlines())
            assert conf["longPollingEnable"] == "false" and conf["brokerPermission"] == "4"
            assert json.loads(r.ext_fields["version"])["counter"] == v0 + 1
            # read-only broker: sends refused, and the name server hears of it
            r = await send_ok_or(cl, a)
            assert r.code == R.NO_PERMISSION, r

            async def routed_read_only() -> bool:
                rr = await simple(cl, c.namesrv_addr, RC.GET_ROUTEINFO_BY_TOPIC, topic="TBW102")
                return rr.code == R.SUCCESS and json.loads(rr.body)["queueDatas"][0]["perm"] == 4

            assert await wait_for(routed_read_only, 5.0)
            # keys read only at start, unknown keys, bad values: nothing changes
            body = b"brokerName=x\nlistenPort=1\nlongPollingEnable=true"
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=body)
            assert r.code == R.NO_PERMISSION, r
            assert "brokerName" in r.remark and "listenPort" in r.remark, r
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=b"noSuchKey=1")
            assert r.code == R.INVALID_PARAMETER and "noSuchKey" in r.remark, r
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=b"shortPollingTimeMills=soon")
            assert r.code == R.INVALID_PARAMETER, r
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=b"garbage line")
            assert r.code == R.INVALID_PARAMETER, r
            r = await simple(cl, a, RC.GET_BROKER_CONFIG)
            assert "longPollingEnable=false" in r.body.decode()

    arun(main())


async def send_ok_or(cl, addr):
    from .helpers import send

    return await send(cl, addr, "PermT", b"x", 0)


def test_namesrv_topics_by_cluster_and_system_topics(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a, ns = c.broker_addr, c.namesrv_addr
            await send_ok(cl, a, "ClT", b"x", 0)

            async def routed() -> bool:
                r = await simple(cl, ns, RC.GET_TOPICS_BY_CLUSTER, cluster="DefaultCluster")
                return "ClT" in json.loads(r.body)["topicList"]

            assert await wait_for(routed, 5.0)
            r = await simple(cl, ns, RC.GET_TOPICS_BY_CLUSTER, cluster="NoCluster")
            assert r.code == R.SYSTEM_ERROR and "NoCluster" in r.remark, r
            r = await simple(cl, ns, RC.GET_SYSTEM_TOPIC_LIST_FROM_NS)
            body = json.loads(r.body)
            assert {"DefaultCluster", "broker-a"} <= set(body["topicList"])
            assert body["brokerAddr"] == a

    arun(main())


def test_forwarded_to_a_consumer(arun, tmp_path):
    """GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY go to the
    named client of the group and come back with its answer."""
    from pyrmq.consumer import PushConsumer
    from pyrmq.consumer.types import ConsumeConcurrentlyStatus

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            seen: list[bytes] = []

            async def listener(msgs, ctx):
                seen.extend(m.body for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            sent = await send_ok(cl, a, "FwT", b"direct", 0)

            async def routed() -> bool:
                rr = await simple(cl, c.namesrv_addr, RC.GET_ROUTEINFO_BY_TOPIC, topic="FwT")
                return rr.code == R.SUCCESS

            assert await wait_for(routed, 5.0)
            consumer = PushConsumer("FwG", c.namesrv_addr)
            consumer.subscribe("FwT", "*")
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                client_id = consumer.client.client_id

                async def online() -> bool:
                    rr = await simple(cl, a, RC.GET_CONSUMER_CONNECTION_LIST, consumerGroup="FwG")
                    return rr.code == R.SUCCESS

                assert await wait_for(online, 10.0)
                r = await simple(cl, a, RC.GET_CONSUMER_RUNNING_INFO, consumerGroup="FwG",
                                 clientId=client_id, jstackEnable="false")  # fmt: skip
                assert r.code == R.SUCCESS, r
                info = json.loads(r.body)
                assert "subscriptionSet" in info and "properties" in info
                n = len(seen)
                r = await simple(cl, a, RC.CONSUME_MESSAGE_DIRECTLY, consumerGroup="FwG",
                                 clientId=client_id, msgId=sent.ext_fields["msgId"],
                                 topic="FwT")  # fmt: skip
                assert r.code == R.SUCCESS, r
                res = json.loads(r.body)
                assert res["consumeResult"] == "CR_SUCCESS" and res["order"] is False
                assert res["autoCommit"] is True and res["spentTimeMills"] >= 0
                assert seen[n:] == [b"direct"]
                r = await simple(cl, a, RC.GET_CONSUMER_RUNNING_INFO, consumerGroup="FwG",
                                 clientId="nobody@1")  # fmt: skip
                assert r.code == R.SYSTEM_ERROR and "not online" in r.remark, r
                r = await simple(cl, a, RC.CONSUME_MESSAGE_DIRECTLY, consumerGroup="FwG",
                                 clientId=client_id, msgId="00")  # fmt: skip
                assert r.code == R.SYSTEM_ERROR, r
            finally:
                await consumer.shutdown()
            await asyncio.sleep(0)

    arun(main(), timeout=60.0)


def test_cluster_totals_are_the_sums_and_never_go_down():
    """BROKER_PUT_NUMS / BROKER_GET_NUMS are derived from the per-topic and
    per-group counters (not counted twice on the hot path); a forgotten
    group's pulls stay in the total."""
    from pyrmq.broker.stats import BrokerStatsManager

    now = [1000.0]
    s = BrokerStatsManager("C", clock=lambda: now[0])
    assert not s.has("BROKER_PUT_NUMS", "C")
    for _ in range(5):
        s.inc_topic_put("A", 2, 10)
    s.inc_topic_put("B", 1, 10)
    s.inc_group_get("g", "A", 3, 30)
    s.inc_group_get("h", "A", 4, 40)
    now[0] += 10
    s.sample()
    assert s.has("BROKER_PUT_NUMS", "C") and not s.has("BROKER_PUT_NUMS", "other")
    assert s.window("BROKER_PUT_NUMS", "C", "minute") == {"sum": 11, "tps": 1.1, "avgpt": 1.83}
    s.forget(lambda name, key: key.endswith("@g"))
    assert not s.has("GROUP_GET_NUMS", "A@g")
    assert s.window("BROKER_GET_NUMS", "C", "minute") == {"sum": 7, "tps": 0.7, "avgpt": 3.5}
    s.inc_group_get("h", "A", 1, 10)
    now[0] += 10
    assert s.window("BROKER_GET_NUMS", "C", "minute")["sum"] == 8
