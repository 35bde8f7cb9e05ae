"""SQL92 subscriptions end to end (MessageSelector.bySql): a broker with
enablePropertyFilter filters pulls by message properties, a held long poll
is woken only by a message its filter selects, and a bad expression or a
broker without the switch answers what is wrong. Real NameServer + Broker
(LocalCluster) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

import rmqcore
from pyrmq.common.errors import SubscriptionParseFailedError
from pyrmq.common.filter import compile_sql92
from pyrmq.common.message import Message, MessageExt
from pyrmq.consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MessageSelector,
    PushConsumer,
)
from pyrmq.producer import Producer
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from tests._waiting import wait_until

from .helpers import cluster, max_offset, props, pull, send_ok, simple


def _check_body(expression: str, kind: str) -> bytes:
    """A CheckClientRequestBody as the Java client sends it."""
    sub = {"topic": "ErrSqlT", "subString": expression, "expressionType": kind,
           "classFilterMode": False, "subVersion": 1}  # fmt: skip
    return json.dumps({"clientId": "c1", "group": "CG-chk", "subscriptionData": sub}).encode()


FILTER = "a > 500 AND (region = 'eu' OR region IS NULL) AND TAGS <> 'skip'"
QUEUES = 4


def _message(topic: str, i: int, rng: random.Random) -> Message:
    m = Message(topic, b"%d" % i, tags=rng.choice(["keep", "skip", "other"]))
    m.properties["id"] = str(i)
    if rng.random() < 0.9:
        m.properties["a"] = str(rng.randrange(1000))
    region = rng.choice(["eu", "us", None, "eu"])
    if region is not None:
        m.properties["region"] = region
    return m


def test_a_sql92_consumer_gets_exactly_the_matching_messages(arun, tmp_path):
    """100,000 mixed messages; the push consumer's SQL92 subscription
    receives each selected one once and no other, and its offsets reach the
    end of every queue."""
    total = 100_000
    topic = "SqlT"
    sql = compile_sql92(FILTER)

    async def main() -> None:
        async with cluster(tmp_path, enable_property_filter=True) as (c, cl):
            r = await simple(cl, c.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, topic=topic,
                             readQueueNums=QUEUES, writeQueueNums=QUEUES, perm=6)  # fmt: skip
            assert r.code == R.SUCCESS, r
            rng = random.Random(42)
            msgs = [_message(topic, i, rng) for i in range(total)]
            wanted = {m.properties["id"] for m in msgs if sql.matches(m.properties)}
            assert 0 < len(wanted) < total
            async with Producer("PG-sql", c.namesrv_addr) as p:
                for k in range(0, total, 200):
                    await p.send_batch(msgs[k : k + 200])
            got: list[str] = []

            async def listener(batch: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                got.extend(m.properties["id"] for m in batch)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "CG-sql",
                c.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                pull_batch_size=32,
            )
            consumer.subscribe(topic, MessageSelector.by_sql(FILTER))
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                await wait_until(
                    lambda: len(got) >= len(wanted),
                    f"{len(wanted)} selected messages consumed",
                    progress=lambda: len(got),
                )
                ends = {q: await max_offset(cl, c.broker_addr, topic, q) for q in range(QUEUES)}

                def offsets() -> dict[int, int]:
                    table = consumer.rebalance.process_queue_table
                    return {
                        mq.queue_id: consumer.offset_store.memory_offset(mq)
                        for mq in table
                        if mq.topic == topic
                    }

                await wait_until(
                    lambda: offsets() == ends,
                    "the consumer's offsets at the end of every queue",
                    progress=offsets,
                )
            finally:
                await consumer.shutdown()
            assert len(got) == len(set(got)), "a message delivered twice"
            assert set(got) == wanted

    arun(main(), timeout=600)


def test_a_held_pull_wakes_only_for_a_selected_message(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, enable_property_filter=True) as (c, cl):
            await send_ok(cl, c.broker_addr, "HoldSqlT", b"old", 0, props(a="no"))
            start = await max_offset(cl, c.broker_addr, "HoldSqlT", 0)
            held = asyncio.ensure_future(
                pull(cl, c.broker_addr, "HoldSqlT", 0, start, timeout=30.0, sysflag=2 | 4,
                     sub="a = 'yes'", suspend_ms=15_000, expression_type="SQL92")
            )  # fmt: skip
            processor = c.broker.pull_processor
            await wait_until(lambda: processor.held_count == 1, "the pull held")
            for i in range(20):  # arrivals the filter does not select
                await send_ok(cl, c.broker_addr, "HoldSqlT", b"no%d" % i, 0, props(a="no"))
            await asyncio.sleep(0.3)  # the wake-ups of those arrivals have run
            assert not held.done(), held.result()
            assert processor.held_count == 1
            await send_ok(cl, c.broker_addr, "HoldSqlT", b"match", 0, props(a="yes"))
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.SUCCESS, r
            got = rmqcore.decode_records(r.body, True)
            assert [m["body"] for m in got] == [b"match"]
            assert int(r.ext_fields["nextBeginOffset"]) == start + 21

    arun(main())


def test_sql92_errors_as_a_user_sees_them(arun, tmp_path):
    async def main() -> None:
        # the consumer refuses a bad expression before anything is sent
        c0 = PushConsumer("CG-bad", "127.0.0.1:1")
        with pytest.raises(SubscriptionParseFailedError, match="syntax error"):
            c0.subscribe("T", MessageSelector.by_sql("a > "))
        with pytest.raises(SubscriptionParseFailedError, match="cannot be compared"):
            c0.subscribe("T", MessageSelector.by_sql("a > 'x'"))
        async with cluster(tmp_path, enable_property_filter=True) as (c, cl):
            await send_ok(cl, c.broker_addr, "ErrSqlT", b"x", 0, props(a="1"))
            r = await pull(cl, c.broker_addr, "ErrSqlT", 0, 0, sysflag=2 | 4,
                           sub="a >>> 1", expression_type="SQL92")  # fmt: skip
            assert r.code == R.SUBSCRIPTION_PARSE_FAILED, r
            assert "syntax error" in (r.remark or "")
            r = await pull(cl, c.broker_addr, "ErrSqlT", 0, 0, sysflag=2 | 4,
                           sub="a = 1", expression_type="XPATH")  # fmt: skip
            assert r.code == R.SUBSCRIPTION_PARSE_FAILED and "TAG or SQL92" in (r.remark or "")
            r = await pull(cl, c.broker_addr, "ErrSqlT", 0, 0, sysflag=2 | 4,
                           sub="a = 1", expression_type="SQL92")  # fmt: skip
            assert r.code == R.SUCCESS, r
            # CHECK_CLIENT_CONFIG, which the Java client asks at subscribe
            for expr, kind, code in [
                ("a = 1", "SQL92", R.SUCCESS),
                ("a =", "SQL92", R.SUBSCRIPTION_PARSE_FAILED),
                ("TagA || TagB", "TAG", R.SUCCESS),
            ]:
                r = await simple(cl, c.broker_addr, RC.CHECK_CLIENT_CONFIG,
                                 body=_check_body(expr, kind))  # fmt: skip
                assert r.code == code, (expr, r)
        # a broker without enablePropertyFilter says so
        async with cluster(tmp_path / "off") as (c, cl):
            await send_ok(cl, c.broker_addr, "OffSqlT", b"x", 0, props(a="1"))
            r = await pull(cl, c.broker_addr, "OffSqlT", 0, 0, sysflag=2 | 4,
                           sub="a = 1", expression_type="SQL92")  # fmt: skip
            assert r.code == R.SYSTEM_ERROR, r
            assert "enablePropertyFilter" in (r.remark or "")
            r = await simple(cl, c.broker_addr, RC.CHECK_CLIENT_CONFIG,
                             body=_check_body("a = 1", "SQL92"))  # fmt: skip
            assert r.code == R.SYSTEM_ERROR and "SQL92" in (r.remark or ""), r

    arun(main())


def test_a_filtered_pull_with_metrics_on(arun, tmp_path):
    """With the Prometheus exporter on, a SQL92 pull is counted in the
    messages-out tally like any other (it once failed on the count)."""

    async def main() -> None:
        metrics = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_host": "127.0.0.1",
                   "metrics_prom_exporter_port": 0}  # fmt: skip
        async with cluster(tmp_path, enable_property_filter=True, **metrics) as (c, cl):
            assert c.broker.pull_processor.tallies is not None
            for i in range(4):
                await send_ok(cl, c.broker_addr, "MetSqlT", b"m%d" % i, 0, props(a=str(i % 2)))
            r = await pull(cl, c.broker_addr, "MetSqlT", 0, 0, group="CG-met",
                           sub="a = 1", expression_type="SQL92")  # fmt: skip
            assert r.code == R.SUCCESS, r
            got = rmqcore.decode_records(r.body, True)
            assert [m["body"] for m in got] == [b"m1", b"m3"]

    arun(main())
