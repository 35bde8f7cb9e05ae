"""Offset queries (29-32), lookups (33, 12), topic admin (17, 21, 215),
runtime info (28) and unknown codes."""

from __future__ import annotations

import asyncio
import json

import rmqcore
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import (
    cluster,
    max_offset,
    msg_id_offset,
    props,
    pull,
    pull_all,
    route,
    send,
    send_ok,
    simple,
    wait_for,
)


def test_offset_queries(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            for _i in range(3):
                await send_ok(cl, a, "OqT", b"a", 0)
            await asyncio.sleep(0.05)
            first = await pull_all(cl, a, "OqT", 0)
            mid_ts = first[-1]["store_timestamp"] + 20
            await asyncio.sleep(0.05)
            for _i in range(3):
                await send_ok(cl, a, "OqT", b"b", 0)
            msgs = await pull_all(cl, a, "OqT", 0)
            assert await max_offset(cl, a, "OqT", 0) == 6
            r = await simple(cl, a, RC.GET_MIN_OFFSET, topic="OqT", queueId=0)
            assert r.code == R.SUCCESS and r.ext_fields == {"offset": "0"}, r
            r = await simple(
                cl, a, RC.SEARCH_OFFSET_BY_TIMESTAMP, topic="OqT", queueId=0, timestamp=mid_ts
            )
            assert r.code == R.SUCCESS and r.ext_fields["offset"] == "3", r
            r = await simple(
                cl,
                a,
                RC.SEARCH_OFFSET_BY_TIMESTAMP,
                topic="OqT",
                queueId=0,
                timestamp=msgs[0]["store_timestamp"] - 1000,
            )
            assert r.ext_fields["offset"] == "0", r
            r = await simple(
                cl,
                a,
                RC.SEARCH_OFFSET_BY_TIMESTAMP,
                topic="OqT",
                queueId=0,
                timestamp=msgs[-1]["store_timestamp"] + 10**6,
            )
            assert r.ext_fields["offset"] in ("5", "6"), r
            r = await simple(cl, a, RC.GET_EARLIEST_MSG_STORETIME, topic="OqT", queueId=0)
            assert r.code == R.SUCCESS and r.ext_fields["timestamp"] == str(
                msgs[0]["store_timestamp"]
            ), r
            # empty / unknown queues answer 0, as strings
            for code in (RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET):
                r = await simple(cl, a, code, topic="OqT", queueId=3)
                assert r.code == R.SUCCESS and r.ext_fields["offset"] == "0", r
                r = await simple(cl, a, code, topic="Nope", queueId=0)
                assert r.code == R.SUCCESS and r.ext_fields["offset"] == "0", r
            r = await simple(cl, a, RC.GET_EARLIEST_MSG_STORETIME, topic="Nope", queueId=0)
            assert r.code == R.SUCCESS and r.ext_fields["timestamp"] == "0", r
            # missing fields
            r = await simple(cl, a, RC.GET_MAX_OFFSET, topic="OqT")
            assert r.code == R.SYSTEM_ERROR and r.remark, r
            r = await simple(cl, a, RC.SEARCH_OFFSET_BY_TIMESTAMP, topic="OqT", queueId=0)
            assert r.code == R.SYSTEM_ERROR and r.remark, r

    arun(main())


def test_view_message_by_id(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await send_ok(cl, a, "ViewT", b"zero", 0)
            r = await send_ok(cl, a, "ViewT", b"one", 0, props(TAGS="v"))
            off = msg_id_offset(r.ext_fields["msgId"])
            v = await simple(cl, a, RC.VIEW_MESSAGE_BY_ID, offset=off)
            assert v.code == R.SUCCESS, v
            (m,) = rmqcore.decode_records(v.body, True)
            assert m["body"] == b"one" and m["commit_log_offset"] == off and m["queue_offset"] == 1
            assert len(v.body) == m["store_size"]
            for bad in (off + 1, 10**12, -5):
                r = await simple(cl, a, RC.VIEW_MESSAGE_BY_ID, offset=bad)
                assert r.code == R.SYSTEM_ERROR and r.remark, (bad, r)
            r = await simple(cl, a, RC.VIEW_MESSAGE_BY_ID)
            assert r.code == R.SYSTEM_ERROR, r

    arun(main())


def test_query_message_by_key_and_unique_key(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            for i in range(3):
                await send_ok(
                    cl, a, "QmT", b"k1-%d" % i, i % 2, props(KEYS="k1", UNIQ_KEY=f"{i:032X}")
                )
            await send_ok(
                cl,
                a,
                "QmT",
                b"k2",
                0,
                props(KEYS="k2 k3", UNIQ_KEY="ABCDEF0123456789ABCDEF0123456789"),
            )
            await send_ok(cl, a, "OtherT", b"k1-other", 0, props(KEYS="k1"))
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="k1",
                maxNum=32,
                beginTimestamp=0,
                endTimestamp=2**60,
            )
            assert r.code == R.SUCCESS, r
            assert (
                "indexLastUpdateTimestamp" in r.ext_fields
                and "indexLastUpdatePhyoffset" in r.ext_fields
            )
            got = rmqcore.decode_records(r.body, True)
            assert sorted(m["body"] for m in got) == [b"k1-0", b"k1-1", b"k1-2"]
            # the second key of "k2 k3"
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="k3",
                maxNum=32,
                beginTimestamp=0,
                endTimestamp=2**60,
            )
            assert r.code == R.SUCCESS and [m["body"] for m in rmqcore.decode_records(r.body)] == [
                b"k2"
            ], r
            # by UNIQ_KEY
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="ABCDEF0123456789ABCDEF0123456789",
                maxNum=1,
                beginTimestamp=0,
                endTimestamp=2**60,
                _UNIQUE_KEY_QUERY="true",
            )
            assert r.code == R.SUCCESS, r
            (m,) = rmqcore.decode_records(r.body, True)
            assert m["body"] == b"k2"
            # maxNum caps the answer
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="k1",
                maxNum=2,
                beginTimestamp=0,
                endTimestamp=2**60,
            )
            assert len(rmqcore.decode_records(r.body)) == 2
            # missing key, time range that excludes everything
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="nope",
                maxNum=32,
                beginTimestamp=0,
                endTimestamp=2**60,
            )
            assert r.code == R.QUERY_NOT_FOUND and r.remark, r
            r = await simple(
                cl,
                a,
                RC.QUERY_MESSAGE,
                topic="QmT",
                key="k1",
                maxNum=32,
                beginTimestamp=0,
                endTimestamp=1000,
            )
            assert r.code == R.QUERY_NOT_FOUND, r
            r = await simple(cl, a, RC.QUERY_MESSAGE, topic="QmT", maxNum=32)
            assert r.code == R.SYSTEM_ERROR, r

    arun(main())


def test_topic_admin_create_route_delete(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, auto_create_topic_enable=False) as (c, cl):
            a, ns = c.broker_addr, c.namesrv_addr
            r = await simple(
                cl,
                a,
                RC.UPDATE_AND_CREATE_TOPIC,
                topic="AdmT",
                readQueueNums=3,
                writeQueueNums=2,
                perm=6,
                topicFilterType="SINGLE_TAG",
                topicSysFlag=0,
                order="false",
            )
            assert r.code == R.SUCCESS, r
            cfg = json.loads((await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)).body)
            assert cfg["topicConfigTable"]["AdmT"]["readQueueNums"] == 3
            assert "dataVersion" in cfg

            async def routed() -> bool:
                r = await route(cl, ns, "AdmT")
                return (
                    r.code == R.SUCCESS
                    and json.loads(r.body)["queueDatas"][0]["readQueueNums"] == 3
                )

            assert await wait_for(routed, 5.0)
            qd = json.loads((await route(cl, ns, "AdmT")).body)["queueDatas"][0]
            assert qd["writeQueueNums"] == 2 and qd["perm"] == 6
            await send_ok(cl, a, "AdmT", b"x", 2)  # queue 2 < max(read, write)
            r = await send(cl, a, "AdmT", b"x", 3)
            assert r.code == R.SYSTEM_ERROR, r
            # update in place
            r = await simple(
                cl,
                a,
                RC.UPDATE_AND_CREATE_TOPIC,
                topic="AdmT",
                readQueueNums=8,
                writeQueueNums=8,
                perm=6,
            )
            assert r.code == R.SUCCESS

            async def routed8() -> bool:
                r = await route(cl, ns, "AdmT")
                return (
                    r.code == R.SUCCESS
                    and json.loads(r.body)["queueDatas"][0]["readQueueNums"] == 8
                )

            assert await wait_for(routed8, 5.0)
            # refusals
            for bad in (
                {"topic": "bad name"},
                {"topic": "SCHEDULE_TOPIC_XXXX"},
                {"topic": "TBW102"},
                {"topic": "X1", "perm": 99},
                {"topic": "X2", "readQueueNums": "many"},
                {"topic": "X3", "readQueueNums": 5000},
            ):
                r = await simple(cl, a, RC.UPDATE_AND_CREATE_TOPIC, **bad)
                assert r.code == R.MESSAGE_ILLEGAL and r.remark, (bad, r)
            r = await simple(cl, a, RC.UPDATE_AND_CREATE_TOPIC)
            assert r.code == R.SYSTEM_ERROR, r
            # delete: gone from config, sends/pulls get 17, route disappears
            await simple(
                cl,
                a,
                RC.UPDATE_CONSUMER_OFFSET,
                consumerGroup="DG",
                topic="AdmT",
                queueId=0,
                commitOffset=1,
            )
            r = await simple(cl, a, RC.DELETE_TOPIC_IN_BROKER, topic="AdmT")
            assert r.code == R.SUCCESS, r
            cfg = json.loads((await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)).body)
            assert "AdmT" not in cfg["topicConfigTable"]
            assert (await send(cl, a, "AdmT", b"x", 0)).code == R.TOPIC_NOT_EXIST
            assert (await pull(cl, a, "AdmT", 2, 0)).code == R.TOPIC_NOT_EXIST
            assert await max_offset(cl, a, "AdmT", 2) == 0

            async def unrouted() -> bool:
                return (await route(cl, ns, "AdmT")).code == R.TOPIC_NOT_EXIST

            assert await wait_for(unrouted, 5.0)
            r = await simple(cl, a, RC.DELETE_TOPIC_IN_BROKER, topic="SCHEDULE_TOPIC_XXXX")
            assert r.code == R.MESSAGE_ILLEGAL, r
            # recreated topic starts empty
            await simple(
                cl,
                a,
                RC.UPDATE_AND_CREATE_TOPIC,
                topic="AdmT",
                readQueueNums=4,
                writeQueueNums=4,
                perm=6,
            )
            r = await send_ok(cl, a, "AdmT", b"new", 2)
            assert r.ext_fields["queueOffset"] == "0"

    arun(main())


def test_topic_attributes(arun, tmp_path):
    """RocketMQ 5's topic attributes ("+message.type=FIFO"): set, kept by an
    update that names none, dropped with "-key", refused when unknown, and
    in the topic table the broker saves and serves."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr

            async def create(**kw: object) -> object:
                fields = {"topic": "AttrT", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
                return await simple(cl, a, RC.UPDATE_AND_CREATE_TOPIC, **(fields | kw))

            async def attributes() -> dict[str, str]:
                cfg = json.loads((await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)).body)
                return cfg["topicConfigTable"]["AttrT"]["attributes"]

            assert (await create(attributes="+message.type=FIFO")).code == R.SUCCESS
            assert await attributes() == {"message.type": "FIFO"}
            assert (await create(readQueueNums=4)).code == R.SUCCESS
            assert await attributes() == {"message.type": "FIFO"}, "an update keeps them"
            for bad in ("+message.type=QUEUE", "+color=red", "message.type=FIFO", "+message.type"):
                r = await create(attributes=bad)
                assert r.code == R.MESSAGE_ILLEGAL and r.remark, (bad, r)
            assert await attributes() == {"message.type": "FIFO"}, "a refusal changes nothing"
            assert (await create(attributes="-message.type")).code == R.SUCCESS
            assert await attributes() == {}
            assert (await create(attributes="+message.type=TRANSACTION")).code == R.SUCCESS
            saved = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())
            assert saved["topicConfigTable"]["AttrT"]["attributes"] == {
                "message.type": "TRANSACTION"
            }

    arun(main())


def test_all_topic_config_system_topics(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            r = await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)
            assert r.code == R.SUCCESS
            table = json.loads(r.body)["topicConfigTable"]
            assert table["TBW102"]["perm"] == 7 and table["TBW102"]["writeQueueNums"] == 8
            assert table["SCHEDULE_TOPIC_XXXX"]["readQueueNums"] == 18
            for t in (
                "SELF_TEST_TOPIC",
                "BenchmarkTest",
                "DefaultCluster",
                "broker-a",
                "OFFSET_MOVED_EVENT",
            ):
                assert t in table, t

    arun(main())


def test_runtime_info_and_unknown_code(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "RtT", b"x", 0)
            r = await simple(cl, c.broker_addr, RC.GET_BROKER_RUNTIME_INFO)
            assert r.code == R.SUCCESS
            table = json.loads(r.body)["table"]
            assert all(isinstance(v, str) for v in table.values())
            assert int(table["commitLogMaxOffset"]) > 0
            for code in (9999, 0, -1, 32767):
                r = await simple(cl, c.broker_addr, code)
                assert r.code == R.REQUEST_CODE_NOT_SUPPORTED, (code, r)
                assert r.remark and str(int(code)) in r.remark, r
            # the connection is still usable
            assert await max_offset(cl, c.broker_addr, "RtT", 0) == 1

    arun(main())
