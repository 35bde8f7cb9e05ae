"""UDF-based producers: every row becomes exactly one stored message and
its result column matches what the broker stored."""

from __future__ import annotations

import pathlib
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pyrmq.common.message import decode_offset_msg_id
from spark_integration import producer_udf, row_producer_udf, send_dataframe
from spark_integration.schema import RESULT_ARROW_TYPE, RESULT_SCHEMA_DDL
from tests.spark.helpers import create_topic, read_topic


def test_result_schema_ddl_matches_arrow(spark: Any) -> None:
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType

    assert StructType.fromDDL(RESULT_SCHEMA_DDL) == from_arrow_type(RESULT_ARROW_TYPE)


def test_udf_sends_100k_rows_exactly_once(spark: Any, broker: Any, tmp_path: pathlib.Path) -> None:
    ns, topic, n = broker.namesrv, "SparkUdf100k", 100_000
    create_topic(ns, topic, 4)
    df = spark.range(n).select(
        F.col("id"),
        F.format_string("row-%d", "id").cast("binary").alias("body"),
        F.when(F.col("id") % 2 == 0, F.lit("even")).otherwise(F.lit("odd")).alias("tags"),
        F.col("id").cast("string").alias("keys"),
    )
    send = producer_udf(ns, topic=topic)
    out = str(tmp_path / "results")
    # results written once: a UDF with side effects runs again on every action
    df.select("id", send(F.struct("body", "tags", "keys")).alias("r")).write.parquet(out)
    results = {row["id"]: row["r"] for row in spark.read.parquet(out).collect()}
    assert len(results) == n
    assert {r["status"] for r in results.values()} == {"SEND_OK"}
    stored = read_topic(ns, topic)
    assert len(stored) == n, "each row stored exactly once"
    by_id = {m.msg_id: m for m in stored}
    assert len(by_id) == n
    for i, r in results.items():
        m = by_id[r["msgId"]]
        assert m.body == f"row-{i}".encode()
        assert m.tags == ("even" if i % 2 == 0 else "odd") and m.keys == [str(i)]
        assert (m.broker_name, m.queue_id, m.queue_offset) == (
            r["brokerName"],
            r["queueId"],
            r["queueOffset"],
        )
        assert decode_offset_msg_id(r["offsetMsgId"])[1] == m.commit_log_offset
        assert r["error"] is None
    # rows were spread over the queues
    assert len({(m.queue_id) for m in stored}) == 4


def test_send_dataframe_sharding_properties_and_failed_rows(spark: Any, broker: Any) -> None:
    ns, topic = broker.namesrv, "SparkMapInArrow"
    create_topic(ns, topic, 4)
    rows = [
        (f"k{i % 3}", f"v{i}".encode(), {"src": "spark", "i": str(i)}, f"user-{i % 3}")
        for i in range(60)
    ]
    df = spark.createDataFrame(
        rows, "keys string, body binary, properties map<string,string>, shardingKey string"
    )
    res = send_dataframe(df, ns, topic=topic).collect()
    assert len(res) == 60 and all(r["status"] == "SEND_OK" for r in res)
    stored = read_topic(ns, topic)
    assert len(stored) == 60
    queue_of_key: dict[str, set[int]] = {}
    for m in stored:
        i = int(m.properties["i"])
        assert m.body == f"v{i}".encode() and m.properties["src"] == "spark"
        queue_of_key.setdefault(f"user-{i % 3}", set()).add(m.queue_id)
    # one queue per sharding key: that key's messages keep the order they
    # had in their Spark partition
    assert all(len(q) == 1 for q in queue_of_key.values())
    parts = df.rdd.mapPartitionsWithIndex(
        lambda p, it: [(int(r["properties"]["i"]), p) for r in it]
    ).collectAsMap()
    for key in queue_of_key:
        for p in set(parts.values()):
            seq = [
                int(m.properties["i"])
                for m in sorted(stored, key=lambda m: m.queue_offset)
                if f"user-{int(m.properties['i']) % 3}" == key
                and parts[int(m.properties["i"])] == p
            ]
            assert seq == sorted(seq) and seq

    # a row that cannot be sent gets its error, the others go on
    bad = spark.createDataFrame(
        [(b"fine", topic), (None, topic), (b"x", "bad topic name!")],
        "body binary, topic string",
    )
    got = send_dataframe(bad, ns).collect()
    assert [r["status"] for r in got] == ["SEND_OK", "FAILED", "FAILED"]
    assert "body is null" in got[1]["error"] and "bad topic" in got[2]["error"]
    # ... unless fail-fast is asked for
    with pytest.raises(Exception, match="rows were not sent"):
        send_dataframe(bad, ns, fail_fast=True).collect()


def test_row_at_a_time_udf(spark: Any, broker: Any) -> None:
    ns, topic = broker.namesrv, "SparkRowUdf"
    create_topic(ns, topic, 2)
    df = spark.createDataFrame([(f"r{i}", "T1") for i in range(20)], "body string, tags string")
    send = row_producer_udf(ns, topic=topic)
    res = df.select(F.col("body"), send(F.struct("body", "tags")).alias("r")).collect()
    assert all(r["r"]["status"] == "SEND_OK" for r in res)
    stored = {m.msg_id: m for m in read_topic(ns, topic)}
    assert len(stored) == 20
    for r in res:
        assert stored[r["r"]["msgId"]].body == r["body"].encode()


def test_udf_without_body_column_is_refused(spark: Any, broker: Any) -> None:
    send = producer_udf(broker.namesrv, topic="Whatever")
    df = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="'body' column"):
        df.select(send(F.struct("payload"))).collect()
    with pytest.raises(Exception, match="need a 'body' column"):
        send_dataframe(df, broker.namesrv, topic="Whatever")


def test_result_struct_type_is_what_spark_sees(spark: Any, broker: Any) -> None:
    send = producer_udf(broker.namesrv, topic="SparkSchemaT")
    df = spark.createDataFrame([(b"a",)], "body binary")
    schema = df.select(send(F.struct("body")).alias("r")).schema
    assert schema["r"].dataType.simpleString() == pa.struct(RESULT_ARROW_TYPE).__str__() or (
        [f.name for f in schema["r"].dataType.fields] == [f.name for f in RESULT_ARROW_TYPE]
    )
