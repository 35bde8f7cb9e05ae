"""QUERY_CONSUME_QUEUE (321), as mqadmin queryCq sends it (raw frames): the
units of one queue from an index, with an online group's subscription and
what it makes of each unit. Error paths answer a code with a remark."""

from __future__ import annotations

import json

import rmqcore
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, heartbeat_body, props, send_ok, simple


def test_query_consume_queue(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            for i in range(5):
                tag = "ta" if i % 2 == 0 else "tb"
                await send_ok(cl, a, "CqT", f"m{i}".encode(), 0, props(TAGS=tag))
            q = dict(topic="CqT", queueId=0, index=1, count=3)
            r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, **q)
            assert r.code == R.SUCCESS and not r.remark, r
            body = json.loads(r.body)
            assert body["maxQueueIndex"] == 5 and body["minQueueIndex"] == 0
            assert "subscriptionData" not in body and "filterData" not in body
            units = body["queueData"]
            assert len(units) == 3
            assert [u["tagsCode"] for u in units] == [
                rmqcore.tag_code(t) for t in ("tb", "ta", "tb")
            ]
            assert all(u["physicSize"] > 0 and u["eval"] is False for u in units)
            assert units[0]["physicOffset"] < units[1]["physicOffset"] < units[2]["physicOffset"]
            # the unit's record is the message stored there
            r = await simple(cl, a, RC.VIEW_MESSAGE_BY_ID, offset=units[0]["physicOffset"])
            assert r.code == R.SUCCESS and b"m1" in r.body, r

            # an online group subscribed to ta: its subscription, and eval per unit
            hb = heartbeat_body("10.0.0.9@cq", "CqG", {"CqT": "ta"})
            r = await simple(cl, a, RC.HEART_BEAT, body=hb)
            assert r.code == R.SUCCESS, r
            r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, consumerGroup="CqG", **q)
            body = json.loads(r.body)
            assert body["subscriptionData"]["subString"] == "ta"
            assert body["filterData"] == "null"
            assert [u["eval"] for u in body["queueData"]] == [False, True, False]
            r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, consumerGroup="Offline", **q)
            body = json.loads(r.body)
            assert body["filterData"] == "Offline@CqT is not online!"
            assert "subscriptionData" not in body and len(body["queueData"]) == 3

            # past the end: fewer units; outside the queue: none, and a remark
            r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, topic="CqT", queueId=0, index=3,
                             count=10)  # fmt: skip
            assert len(json.loads(r.body)["queueData"]) == 2
            for index in (5, 99, -1):
                r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, topic="CqT", queueId=0,
                                 index=index, count=1)  # fmt: skip
                assert r.code == R.SUCCESS and f"Index {index} of 0@CqT" in r.remark, r
                assert json.loads(r.body)["queueData"] == []
            # a queue of the topic nothing was sent to: empty
            r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, topic="CqT", queueId=3, index=0,
                             count=1)  # fmt: skip
            assert r.code == R.SUCCESS and json.loads(r.body)["maxQueueIndex"] == 0, r

            # errors: unknown topic or queue, bad or missing header fields
            for fields, code, word in (
                (dict(q, topic="NoSuchT"), R.SYSTEM_ERROR, "0@NoSuchT is not exist!"),
                (dict(q, queueId=4), R.SYSTEM_ERROR, "4@CqT is not exist!"),
                (dict(q, queueId=-1), R.SYSTEM_ERROR, "-1@CqT is not exist!"),
                (dict(q, count=0), R.INVALID_PARAMETER, "count 0"),
                (dict(q, count=1001), R.INVALID_PARAMETER, "1 to 1000"),
                (dict(q, count=2**40), R.SYSTEM_ERROR, "count"),
                (dict(q, index="x"), R.SYSTEM_ERROR, "index"),
                (dict(q, queueId=2**40), R.SYSTEM_ERROR, "queueId"),
                ({k: v for k, v in q.items() if k != "count"}, R.SYSTEM_ERROR, "count"),
                ({k: v for k, v in q.items() if k != "topic"}, R.SYSTEM_ERROR, "topic"),
                ({k: v for k, v in q.items() if k != "index"}, R.SYSTEM_ERROR, "index"),
            ):
                r = await simple(cl, a, RC.QUERY_CONSUME_QUEUE, **fields)
                assert r.code == code and word in r.remark, (fields, r)

    arun(main())
