"""`pyrmq admin`'s group, broker-config, stats and message-tool commands
(mqadmin 4.9's names) end to end: subprocesses against a `pyrmq standalone`
subprocess (the `server` fixture of test_admin_cli), --json checked; the
consumer-facing ones (consumerStatus, queryMsgById -g -d) against a push
consumer running in this process."""

from __future__ import annotations

import asyncio
import json

from pyrmq.consumer import PushConsumer
from pyrmq.consumer.types import ConsumeConcurrentlyStatus
from pyrmq.testing import LocalCluster
from tests._cli import pyrmq_cli
from tests.client.test_admin_cli import failed, ok, ok_json, server  # noqa: F401


def test_cli_subscription_groups_and_broker_config(server):  # noqa: F811
    n, b = server.namesrv, server.broker
    out = ok("admin", "updateSubGroup", "-n", n, "-b", b, "-g", "CliSG", "-q", "2", "-r", "5",
             "-s", "false")  # fmt: skip
    assert f"create subscription group to {b} success." in out
    (cfg,) = ok_json("admin", "getConsumerConfig", "-n", n, "-g", "CliSG")
    assert cfg["brokerAddr"] == b
    assert cfg["config"]["retryQueueNums"] == 2 and cfg["config"]["retryMaxTimes"] == 5
    assert cfg["config"]["consumeEnable"] is False
    assert "retryMaxTimes" in ok("admin", "getConsumerConfig", "-n", n, "-g", "CliSG")
    r = ok_json("admin", "updateSubGroup", "-n", n, "-c", "DefaultCluster", "-g", "CliSG")
    assert r["brokers"] == [b] and r["config"]["consumeEnable"] is True
    r = ok_json("admin", "deleteSubGroup", "-n", n, "-b", b, "-g", "CliSG", "-r", "true")
    assert r == {"group": "CliSG", "brokers": [b], "removeOffset": True}
    assert "no broker has" in failed("admin", "getConsumerConfig", "-n", n, "-g", "CliSG")
    # a refused name: one error line with the broker's remark
    assert "illegal characters" in failed("admin", "updateSubGroup", "-n", n, "-b", b,
                                          "-g", "bad name")  # fmt: skip
    assert "-b" in failed("admin", "updateSubGroup", "-n", n, "-g", "G")  # neither -b nor -c

    conf = ok_json("admin", "getBrokerConfig", "-n", n, "-b", b)
    assert conf[b]["brokerName"] == "broker-a" and conf[b]["longPollingEnable"] == "true"
    r = ok_json("admin", "updateBrokerConfig", "-n", n, "-b", b, "-k", "shortPollingTimeMills",
                "-v", "700")  # fmt: skip
    assert r["brokers"] == [b]
    assert (
        ok_json("admin", "getBrokerConfig", "-n", n, "-c", "DefaultCluster")[b][
            "shortPollingTimeMills"
        ]
        == "700"
    )
    line = failed("admin", "updateBrokerConfig", "-n", n, "-b", b, "-k", "brokerName", "-v", "x")
    assert "brokerName" in line and "can not update at runtime" in line
    assert "noSuchKey" in failed("admin", "updateBrokerConfig", "-n", n, "-b", b, "-k",
                                 "noSuchKey", "-v", "1")  # fmt: skip


def test_cli_progress_stats_and_message_tools(server):  # noqa: F811
    n, b = server.namesrv, server.broker
    ok("admin", "updateTopic", "-n", n, "-b", b, "-t", "CliStT", "-r", "2", "-w", "2")
    for i in range(4):
        ok("admin", "sendMessage", "-n", n, "-t", "CliStT", "-p", f"body{i}")
    # a group that consumed everything of queue 0 (through the admin's own
    # offset commit: consumeMessage reads without a group)
    ok("admin", "resetOffsetByTime", "-n", n, "-g", "CliCG", "-t", "CliStT", "-s", "0")
    p = ok_json("admin", "consumerProgress", "-n", n, "-g", "CliCG")
    assert p["topics"] == ["CliStT"] and p["diff_total"] == 4
    ts = ok_json("admin", "topicStatus", "-n", n, "-t", "CliStT")
    assert ts["total_messages"] == 4
    spans = ok_json("admin", "queryConsumeTimeSpan", "-n", n, "-t", "CliStT", "-g", "CliCG")
    assert [s["queueId"] for s in spans] == [0, 1] and all(s["delayTime"] >= 0 for s in spans)
    r = ok_json("admin", "cloneGroupOffset", "-n", n, "-s", "CliCG", "-d", "CliCG2", "-t",
                "CliStT", "-o", "true")  # fmt: skip
    assert r["brokers"] == [b]
    assert ok_json("admin", "consumerProgress", "-n", n, "-g", "CliCG2")["diff_total"] == 4
    bcs = ok_json("admin", "brokerConsumeStats", "-n", n, "-b", b)
    assert {q["consumerGroup"] for q in bcs["offsetTable"]} >= {"CliCG", "CliCG2"}
    assert "Diff Total" in ok("admin", "brokerConsumeStats", "-n", n, "-b", b)

    rows = ok_json("admin", "statsAll", "-n", n, "-t", "CliStT")
    assert {r["consumerGroup"] for r in rows} == {"CliCG", "CliCG2"}
    assert all(r["inMsg24Hour"] == 4 and r["inTps"] >= 0 for r in rows)
    assert "InMsg24Hour" in ok("admin", "statsAll", "-n", n, "-a")
    assert ok_json("admin", "topicClusterList", "-n", n, "-t", "CliStT") == ["DefaultCluster"]
    assert "CliStT" in ok_json("admin", "topicList", "-n", n, "-c", "DefaultCluster")
    assert "NoCluster" in failed("admin", "topicList", "-n", n, "-c", "NoCluster")

    perm = ok_json("admin", "updateTopicPerm", "-n", n, "-t", "CliStT", "-p", "4")
    assert perm == [{"brokerAddr": b, "oldPerm": 6, "newPerm": 4}]
    assert ok_json("admin", "topicRoute", "-n", n, "-t", "CliStT")["queueDatas"][0]["perm"] == 4
    ok("admin", "updateTopicPerm", "-n", n, "-t", "CliStT", "-p", "6")

    msgs = ok_json("admin", "printMsg", "-n", n, "-t", "CliStT")
    assert sorted(m["body"] for m in msgs) == [f"body{i}" for i in range(4)]
    q0 = ok_json("admin", "printMsgByQueue", "-n", n, "-t", "CliStT", "-a", "broker-a", "-i", "0")
    assert all(m["queueId"] == 0 for m in q0)
    found = ok_json("admin", "queryMsgByUniqueKey", "-n", n, "-t", "CliStT", "-i",
                    msgs[0]["msgId"])  # fmt: skip
    assert found[0]["body"] == msgs[0]["body"]
    r = ok_json("admin", "checkMsgSendRT", "-n", n, "-t", "CliStT", "-a", "3", "-s", "16")
    assert r["sent"] == 3 and r["failed"] == 0 and r["avgRT"] > 0
    r = ok_json("admin", "sendMsgStatus", "-n", n, "-b", "broker-a", "-c", "2")
    assert r["sent"] == 2
    assert ok_json("admin", "clusterRT", "-n", n, "-a", "2")[0]["brokerName"] == "broker-a"
    alloc = ok_json("admin", "allocateMQ", "-n", n, "-t", "CliStT", "-i", "c1,c2")["result"]
    assert [[q["queueId"] for q in alloc[c]] for c in ("c1", "c2")] == [[0], [1]]

    ok("admin", "updateKvConfig", "-n", n, "-s", "NS1", "-k", "k1", "-v", "v1")
    ok("admin", "deleteKvConfig", "-n", n, "-s", "NS1", "-k", "k1")
    ok("admin", "updateOrderConf", "-n", n, "-t", "CliStT", "-m", "put", "-v", "broker-a:2")
    got = ok_json("admin", "updateOrderConf", "-n", n, "-t", "CliStT", "-m", "get")
    assert got == {"topic": "CliStT", "orderConf": "broker-a:2"}
    ok("admin", "updateOrderConf", "-n", n, "-t", "CliStT", "-m", "delete")
    assert "No config item" in failed("admin", "updateOrderConf", "-n", n, "-t", "CliStT",
                                      "-m", "get")  # fmt: skip

    # connections: nobody online
    assert "not online" in failed("admin", "consumerConnection", "-n", n, "-g", "CliCG")
    assert "not exist" in failed("admin", "producerConnection", "-n", n, "-g", "NoPG", "-t",
                                 "CliStT")  # fmt: skip


def test_cli_with_an_online_consumer(arun, tmp_path):
    """consumerConnection, producerConnection, consumerStatus and
    queryMsgById -g -d against a consumer and producer of this process."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path)) as c:
            n = c.namesrv_addr
            seen: list[bytes] = []

            def listener(msgs, ctx):
                seen.extend(m.body for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            rc, out, err = await pyrmq_cli("admin", "sendMessage", "-n", n, "-t", "OnlT", "-p",
                                           "hello", "--json")  # fmt: skip
            assert rc == 0, err
            offset_id = json.loads(out)["offsetMsgId"]
            consumer = PushConsumer("OnlG", n)
            consumer.subscribe("OnlT", "*")
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                cid = consumer.client.client_id
                cc = None
                for _ in range(100):
                    rc, out, err = await pyrmq_cli("admin", "consumerConnection", "-n", n, "-g",
                                                   "OnlG", "--json")  # fmt: skip
                    if rc == 0:
                        cc = json.loads(out)
                        break
                    await asyncio.sleep(0.1)
                assert cc is not None, err
                assert [x["clientId"] for x in cc["connectionSet"]] == [cid]
                assert cc["messageModel"] == "CLUSTERING" and "OnlT" in cc["subscriptionTable"]
                rc, out, err = await pyrmq_cli("admin", "consumerStatus", "-n", n, "-g", "OnlG",
                                               "--json")  # fmt: skip
                assert rc == 0, err
                (st,) = json.loads(out)
                assert st["clientId"] == cid and "subscriptionSet" in st["runningInfo"]
                rc, out, err = await pyrmq_cli("admin", "consumerStatus", "-n", n, "-g", "OnlG")
                assert rc == 0 and f"#Consumer {cid}" in out, err
                before = len(seen)
                rc, out, err = await pyrmq_cli("admin", "queryMsgById", "-n", n, "-i", offset_id,
                                               "-g", "OnlG", "-d", cid, "--json")  # fmt: skip
                assert rc == 0, err
                assert json.loads(out)["consumeResult"] == "CR_SUCCESS"
                assert seen[before:] == [b"hello"]
                rc, out, err = await pyrmq_cli("admin", "consumerStatus", "-n", n, "-g", "OnlG",
                                               "-i", "nobody@0")  # fmt: skip
                assert rc == 1 and err.startswith("error: ") and "not online" in err
                assert "Traceback" not in err
            finally:
                await consumer.shutdown()

    arun(main(), timeout=120.0)
