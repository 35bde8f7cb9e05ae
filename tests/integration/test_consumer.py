"""Consumer-side codes: offsets (14, 15), HEART_BEAT (34),
UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY (40),
LOCK/UNLOCK_BATCH_MQ (41, 42), CONSUMER_SEND_MSG_BACK (36) and delay."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import rmqcore
from pyrmq.broker.client_manager import RebalanceLockManager
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.connection import Connection

from .helpers import (
    cluster,
    heartbeat_body,
    max_offset,
    msg_id_offset,
    props,
    pull,
    pull_all,
    send,
    send_ok,
    simple,
    wait_for,
)

SHORT_LEVELS = " ".join(["1s"] * 18)


async def _query(
    cl: RemotingClient, addr: str, group: str, topic: str, qid: int
) -> RemotingCommand:
    return await simple(
        cl, addr, RC.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=qid
    )


def test_consumer_offsets_query_update_restart(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "OffsT", b"x", 0)
            r = await _query(cl, c.broker_addr, "NewGroup", "OffsT", 0)
            assert r.code == R.SUCCESS and r.ext_fields == {"offset": "0"}, r
            r = await simple(
                cl,
                c.broker_addr,
                RC.UPDATE_CONSUMER_OFFSET,
                consumerGroup="G",
                topic="OffsT",
                queueId=0,
                commitOffset=7,
            )
            assert r.code == R.SUCCESS, r
            r = await simple(
                cl,
                c.broker_addr,
                RC.UPDATE_CONSUMER_OFFSET,
                consumerGroup="G",
                topic="OffsT",
                queueId=1,
                commitOffset=3,
            )
            assert (await _query(cl, c.broker_addr, "G", "OffsT", 0)).ext_fields["offset"] == "7"
            # errors
            r = await simple(
                cl,
                c.broker_addr,
                RC.UPDATE_CONSUMER_OFFSET,
                consumerGroup="G",
                topic="OffsT",
                queueId=0,
                commitOffset=-5,
            )
            assert r.code == R.SYSTEM_ERROR and r.remark, r
            r = await simple(
                cl, c.broker_addr, RC.QUERY_CONSUMER_OFFSET, consumerGroup="G", queueId=0
            )
            assert r.code == R.SYSTEM_ERROR and r.remark and "topic" in r.remark, r
            r = await simple(
                cl,
                c.broker_addr,
                RC.QUERY_CONSUMER_OFFSET,
                consumerGroup="G",
                topic="OffsT",
                queueId="zz",
            )
            assert r.code == R.SYSTEM_ERROR, r
            # offsets survive a broker restart
            await c.stop_broker()
            await c.start_broker()
            assert (await _query(cl, c.broker_addr, "G", "OffsT", 0)).ext_fields["offset"] == "7"
            assert (await _query(cl, c.broker_addr, "G", "OffsT", 1)).ext_fields["offset"] == "3"
            assert await max_offset(cl, c.broker_addr, "OffsT", 0) == 1

    arun(main())


class Recorder:
    """A RemotingClient handler that records the requests a server sends."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self.event = asyncio.Event()

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        self.requests.append(cmd)
        self.event.set()
        return None

    def notifies(self, group: str) -> list[RemotingCommand]:
        return [
            r
            for r in self.requests
            if r.code == RC.NOTIFY_CONSUMER_IDS_CHANGED
            and r.ext_fields.get("consumerGroup") == group
        ]


async def _consumer_ids(cl: RemotingClient, addr: str, group: str) -> RemotingCommand:
    return await simple(cl, addr, RC.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=group)


def test_heartbeat_consumer_list_notify_unregister(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            rec1, rec2 = Recorder(), Recorder()
            c1 = RemotingClient(rec1, name="c1")
            c2 = RemotingClient(rec2, name="c2")
            try:
                hb1 = heartbeat_body(
                    "1111-127.0.0.1@DEFAULT",
                    "GID_C",
                    {"T": "ta || tb", "%RETRY%GID_C": "*"},
                    producer_group="GID_P",
                )
                assert (
                    hb1.endswith(b"\n")
                    and b'"messageModel":1' in hb1
                    and b'"subVersion":"1795308445968"' in hb1
                )
                r = await simple(c1, c.broker_addr, RC.HEART_BEAT, body=hb1)
                assert r.code == R.SUCCESS, r
                r = await _consumer_ids(cl, c.broker_addr, "GID_C")
                assert r.code == R.SUCCESS
                assert json.loads(r.body) == {"consumerIdList": ["1111-127.0.0.1@DEFAULT"]}
                # %RETRY% topic created for the clustering group: 1 queue, perm 6
                cfg = json.loads((await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)).body)
                rt = cfg["topicConfigTable"]["%RETRY%GID_C"]
                assert rt["readQueueNums"] == 1 and rt["writeQueueNums"] == 1 and rt["perm"] == 6
                # heartbeat again: no change, no notification
                rec1.requests.clear()
                assert (await simple(c1, c.broker_addr, RC.HEART_BEAT, body=hb1)).code == R.SUCCESS
                # a second consumer joins: the first is notified (one-way code 40)
                hb2 = heartbeat_body("2222-127.0.0.1@DEFAULT", "GID_C", {"T": "*"})
                assert (await simple(c2, c.broker_addr, RC.HEART_BEAT, body=hb2)).code == R.SUCCESS
                await asyncio.wait_for(rec1.event.wait(), 2)
                (n,) = rec1.notifies("GID_C")
                assert n.flag & 2 and not n.flag & 1, n
                r = await _consumer_ids(cl, c.broker_addr, "GID_C")
                assert json.loads(r.body)["consumerIdList"] == [
                    "1111-127.0.0.1@DEFAULT",
                    "2222-127.0.0.1@DEFAULT",
                ]
                # UNREGISTER_CLIENT removes c2 and notifies c1 again
                rec1.event.clear()
                r = await simple(
                    c2,
                    c.broker_addr,
                    RC.UNREGISTER_CLIENT,
                    clientID="2222-127.0.0.1@DEFAULT",
                    producerGroup="",
                    consumerGroup="GID_C",
                )
                assert r.code == R.SUCCESS, r
                await asyncio.wait_for(rec1.event.wait(), 2)
                assert len(rec1.notifies("GID_C")) == 2
                r = await _consumer_ids(cl, c.broker_addr, "GID_C")
                assert json.loads(r.body)["consumerIdList"] == ["1111-127.0.0.1@DEFAULT"]
                # offsets are still accepted after unregister
                r = await simple(
                    c2,
                    c.broker_addr,
                    RC.UPDATE_CONSUMER_OFFSET,
                    consumerGroup="GID_C",
                    topic="T",
                    queueId=0,
                    commitOffset=0,
                )
                assert r.code == R.SUCCESS
                r = await simple(
                    c1,
                    c.broker_addr,
                    RC.UNREGISTER_CLIENT,
                    clientID="1111-127.0.0.1@DEFAULT",
                    producerGroup="GID_P",
                    consumerGroup="GID_C",
                )
                assert r.code == R.SUCCESS
                r = await _consumer_ids(cl, c.broker_addr, "GID_C")
                assert r.code == R.SYSTEM_ERROR and r.remark, r
                r = await _consumer_ids(cl, c.broker_addr, "NeverSeen")
                assert r.code == R.SYSTEM_ERROR and r.remark, r
                assert "GID_P" not in c.broker.producers.groups
            finally:
                await c1.shutdown()
                await c2.shutdown()

    arun(main())


def test_heartbeat_variants_and_errors(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            # broadcasting group: no retry topic
            hb = heartbeat_body("b-1", "GID_BC", {"T": "*"}, message_model=0)
            assert (await simple(cl, c.broker_addr, RC.HEART_BEAT, body=hb)).code == R.SUCCESS
            # Java-style names, numeric subVersion
            java = {
                "clientID": "j-1",
                "consumerDataSet": [
                    {
                        "groupName": "GID_J",
                        "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING",
                        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                        "subscriptionDataSet": [
                            {
                                "topic": "T",
                                "subString": "*",
                                "subVersion": 17,
                                "classFilterMode": False,
                                "expressionType": "TAG",
                            }
                        ],
                        "unitMode": False,
                    }
                ],
                "producerDataSet": [],
            }
            assert (
                await simple(cl, c.broker_addr, RC.HEART_BEAT, body=json.dumps(java).encode())
            ).code == R.SUCCESS
            # pull consumer: no subscriptionDataSet; pure producer
            pc = heartbeat_body("p-1", "GID_PULL", None, consume_type=0)
            assert (await simple(cl, c.broker_addr, RC.HEART_BEAT, body=pc)).code == R.SUCCESS
            prod = (
                b'{"clientID":"15729-127.0.0.1@DEFAULT",'
                b'"producerDataSet":[{"groupName":"GID_P"}]}\n'
            )
            assert (await simple(cl, c.broker_addr, RC.HEART_BEAT, body=prod)).code == R.SUCCESS
            cfg = json.loads((await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)).body)[
                "topicConfigTable"
            ]
            assert "%RETRY%GID_BC" not in cfg
            assert "%RETRY%GID_J" in cfg and "%RETRY%GID_PULL" in cfg
            assert json.loads((await _consumer_ids(cl, c.broker_addr, "GID_J")).body)[
                "consumerIdList"
            ] == ["j-1"]
            # errors
            r = await simple(cl, c.broker_addr, RC.HEART_BEAT, body=b"not json")
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            r = await simple(cl, c.broker_addr, RC.HEART_BEAT, body=b'{"consumerDataSet":[]}')
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            r = await simple(cl, c.broker_addr, RC.HEART_BEAT, body=b"[1,2]")
            assert r.code == R.MESSAGE_ILLEGAL, r
            r = await simple(cl, c.broker_addr, RC.GET_CONSUMER_LIST_BY_GROUP)
            assert r.code == R.SYSTEM_ERROR and r.remark, r

    arun(main())


def test_consumer_dropped_when_its_connection_closes(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            rec = Recorder()
            a = RemotingClient(rec, name="a")
            b = RemotingClient(name="b")
            try:
                await simple(
                    a, c.broker_addr, RC.HEART_BEAT, body=heartbeat_body("A", "GX", {"T": "*"})
                )
                await simple(
                    b, c.broker_addr, RC.HEART_BEAT, body=heartbeat_body("B", "GX", {"T": "*"})
                )
                await asyncio.wait_for(rec.event.wait(), 2)
                rec.event.clear()
                b.close_connection(c.broker_addr)

                async def only_a() -> bool:
                    r = await _consumer_ids(cl, c.broker_addr, "GX")
                    return json.loads(r.body)["consumerIdList"] == ["A"]

                assert await wait_for(only_a, 2.0)
                await asyncio.wait_for(rec.event.wait(), 2)
            finally:
                await a.shutdown()
                await b.shutdown()

    arun(main())


def _lock_body(client_id: str, group: str, qids: list[int], topic: str = "LockT") -> bytes:
    data = {
        "clientId": client_id,
        "consumerGroup": group,
        "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": topic} for q in qids],
    }
    return (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()


async def _lock(
    cl: RemotingClient, addr: str, client_id: str, qids: list[int], group: str = "GO"
) -> list[int]:
    r = await simple(cl, addr, RC.LOCK_BATCH_MQ, body=_lock_body(client_id, group, qids))
    assert r.code == R.SUCCESS, r
    got = json.loads(r.body).get("lockOKMQSet") or []
    for mq in got:
        assert mq["topic"] == "LockT" and mq["brokerName"] == "broker-a"
    return sorted(mq["queueId"] for mq in got)


async def _unlock(
    cl: RemotingClient, addr: str, client_id: str, qids: list[int], group: str = "GO"
) -> None:
    r = await simple(cl, addr, RC.UNLOCK_BATCH_MQ, body=_lock_body(client_id, group, qids))
    assert r.code == R.SUCCESS, r
    assert r.body == b""


def test_lock_unlock_batch_mq(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, _cl):
            ca, cb = RemotingClient(name="ca"), RemotingClient(name="cb")
            try:
                a = c.broker_addr
                assert await _lock(ca, a, "A", [0, 1]) == [0, 1]
                assert await _lock(cb, a, "B", [1, 2]) == [2]
                assert await _lock(ca, a, "A", [0, 1, 2]) == [0, 1]  # renewal; 2 is B's
                assert await _lock(cb, a, "B", [0], group="OtherGroup") == [0]  # per group
                await _unlock(cb, a, "B", [1])  # not B's: no effect
                assert await _lock(cb, a, "B", [1]) == []
                await _unlock(ca, a, "A", [1])
                assert await _lock(cb, a, "B", [1]) == [1]
                # errors
                r = await simple(ca, a, RC.LOCK_BATCH_MQ, body=b'{"mqSet":[]}')
                assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
                r = await simple(
                    ca,
                    a,
                    RC.LOCK_BATCH_MQ,
                    body=b'{"clientId":"A","consumerGroup":"GO","mqSet":[{"topic":"T"}]}',
                )
                assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
                r = await simple(ca, a, RC.UNLOCK_BATCH_MQ, body=b"{{")
                assert r.code == R.MESSAGE_ILLEGAL, r
            finally:
                await ca.shutdown()
                await cb.shutdown()

    arun(main())


def test_lock_expiry_over_the_wire(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, rebalance_lock_max_live_time_ms=300) as (c, cl):
            assert await _lock(cl, c.broker_addr, "A", [0]) == [0]
            assert await _lock(cl, c.broker_addr, "B", [0]) == []
            await asyncio.sleep(0.45)
            assert await _lock(cl, c.broker_addr, "B", [0]) == [0]
            assert await _lock(cl, c.broker_addr, "A", [0]) == []

    arun(main())


def test_rebalance_lock_manager_injected_clock():
    now = [0.0]
    m = RebalanceLockManager(60.0, clock=lambda: now[0])
    mq = ("T", "b", 0)
    assert m.try_lock_batch("G", [mq], "A") == [mq]
    now[0] = 59.0
    assert m.try_lock_batch("G", [mq], "B") == []
    assert m.try_lock_batch("G", [mq], "A") == [mq]  # renew at 59
    now[0] = 118.0
    assert m.try_lock_batch("G", [mq], "B") == []
    assert m.holder("G", mq) == "A"
    now[0] = 119.5
    assert m.holder("G", mq) is None
    assert m.try_lock_batch("G", [mq], "B") == [mq]


async def _wait_records(
    cl: RemotingClient, addr: str, topic: str, qid: int, n: int, timeout: float
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    async def enough() -> bool:
        nonlocal got
        if await max_offset(cl, addr, topic, qid) < n:
            return False
        got = await pull_all(cl, addr, topic, qid)
        return len(got) >= n

    assert await wait_for(enough, timeout), (
        f"{topic}/{qid} did not get {n} message(s) in {timeout}s"
    )
    return got


def test_consumer_send_msg_back_retry_then_dlq(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, message_delay_level=SHORT_LEVELS, max_reconsume_times=2) as (
            c,
            cl,
        ):
            a = c.broker_addr
            uniq = "0A0000010000ABCD0000000000000001"
            r = await send_ok(
                cl, a, "SbT", b"payload", 1, props(TAGS="TagS", KEYS="kS", UNIQ_KEY=uniq)
            )
            off = msg_id_offset(r.ext_fields["msgId"])
            r = await simple(cl, a, RC.CONSUMER_SEND_MSG_BACK, group="GS", offset=off, delayLevel=0)
            assert r.code == R.SUCCESS, r
            # scheduled on level 3 (+0 reconsumes): SCHEDULE_TOPIC_XXXX queue 2
            (s,) = await pull_all(cl, a, "SCHEDULE_TOPIC_XXXX", 2)
            sp = rmqcore.decode_properties(s["properties"])
            assert sp["REAL_TOPIC"] == "%RETRY%GS" and sp["DELAY"] == "3" and sp["REAL_QID"] == "0"
            t0 = time.monotonic()
            (m,) = await _wait_records(cl, a, "%RETRY%GS", 0, 1, 4.0)
            assert time.monotonic() - t0 < 3.0
            p = rmqcore.decode_properties(m["properties"])
            assert m["body"] == b"payload" and m["reconsume_times"] == 1
            assert p["RETRY_TOPIC"] == "SbT" and p["ORIGIN_MESSAGE_ID"] == uniq
            assert p["TAGS"] == "TagS" and p["KEYS"] == "kS" and p["UNIQ_KEY"] == uniq
            assert "DELAY" not in p and "REAL_TOPIC" not in p and "REAL_QID" not in p
            # second failure: level 3 + 1 = 4 -> queue 3
            r = await simple(
                cl,
                a,
                RC.CONSUMER_SEND_MSG_BACK,
                group="GS",
                offset=m["commit_log_offset"],
                delayLevel=0,
            )
            assert r.code == R.SUCCESS, r
            assert await max_offset(cl, a, "SCHEDULE_TOPIC_XXXX", 3) == 1
            _, m2 = await _wait_records(cl, a, "%RETRY%GS", 0, 2, 4.0)
            assert m2["reconsume_times"] == 2
            p2 = rmqcore.decode_properties(m2["properties"])
            assert p2["RETRY_TOPIC"] == "SbT" and p2["ORIGIN_MESSAGE_ID"] == uniq
            # third failure: reconsume 2 >= max 2 -> %DLQ%GS at once
            r = await simple(
                cl,
                a,
                RC.CONSUMER_SEND_MSG_BACK,
                group="GS",
                offset=m2["commit_log_offset"],
                delayLevel=0,
            )
            assert r.code == R.SUCCESS, r
            (d,) = await pull_all(cl, a, "%DLQ%GS", 0)
            pd = rmqcore.decode_properties(d["properties"])
            assert d["body"] == b"payload" and d["reconsume_times"] == 3
            assert pd["RETRY_TOPIC"] == "SbT" and pd["ORIGIN_MESSAGE_ID"] == uniq
            assert "DELAY" not in pd
            assert await max_offset(cl, a, "SCHEDULE_TOPIC_XXXX", 4) == 0
            # delayLevel -1 goes straight to the DLQ
            r = await simple(
                cl, a, RC.CONSUMER_SEND_MSG_BACK, group="GS", offset=off, delayLevel=-1
            )
            assert r.code == R.SUCCESS
            assert await max_offset(cl, a, "%DLQ%GS", 0) == 2

    arun(main())


def test_consumer_send_msg_back_errors(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            r = await send_ok(cl, a, "SbE", b"x", 0)
            off = msg_id_offset(r.ext_fields["msgId"])
            for bad in (off + 7, 10**12, -1):
                r = await simple(
                    cl, a, RC.CONSUMER_SEND_MSG_BACK, group="GE", offset=bad, delayLevel=0
                )
                assert r.code == R.SYSTEM_ERROR and r.remark, (bad, r)
            r = await simple(cl, a, RC.CONSUMER_SEND_MSG_BACK, offset=off, delayLevel=0)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            r = await simple(cl, a, RC.CONSUMER_SEND_MSG_BACK, group="GE", delayLevel=0)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            assert await max_offset(cl, a, "%RETRY%GE", 0) == 0

    arun(main())


def test_delay_level_message(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, message_delay_level="1s 2s") as (c, cl):
            a = c.broker_addr
            uniq = "0A0000010000ABCD00000000000000DD"
            t_send = time.time()
            r = await send_ok(
                cl,
                a,
                "DelayT",
                b"later",
                1,
                props(TAGS="TagD", KEYS="kd", UNIQ_KEY=uniq, DELAY="2"),
            )
            assert r.ext_fields["queueId"] == "1"
            assert await max_offset(cl, a, "DelayT", 1) == 0
            (s,) = await pull_all(cl, a, "SCHEDULE_TOPIC_XXXX", 1)
            stored_at = s["store_timestamp"]
            (m,) = await _wait_records(cl, a, "DelayT", 1, 1, 4.0)
            arrived = time.time()
            assert m["store_timestamp"] - stored_at >= 2000, (m["store_timestamp"], stored_at)
            assert arrived - t_send <= 3.2, arrived - t_send
            p = rmqcore.decode_properties(m["properties"])
            assert p["TAGS"] == "TagD" and p["KEYS"] == "kd" and p["UNIQ_KEY"] == uniq
            assert "DELAY" not in p and "REAL_TOPIC" not in p and "REAL_QID" not in p
            assert m["body"] == b"later"
            # the tag code is recomputed: a tag-filtered pull finds it
            r = await pull(cl, a, "DelayT", 1, 0, sub="TagD")
            assert r.code == R.SUCCESS and len(rmqcore.decode_records(r.body)) == 1
            r = await pull(cl, a, "DelayT", 1, 0, sub="Other")
            assert r.code == R.PULL_RETRY_IMMEDIATELY
            # levels above the table are clamped to the last level
            await send_ok(cl, a, "DelayT", b"clamped", 0, props(DELAY="18"))
            assert await max_offset(cl, a, "SCHEDULE_TOPIC_XXXX", 1) == 2
            # a non-integer DELAY is refused
            r = await send(cl, a, "DelayT", b"x", 0, props(DELAY="soon"))
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r

    arun(main())
