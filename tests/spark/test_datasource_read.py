"""spark.read.format("rocketmq"): exactly the messages sent, every column
right; offsets, timestamps, filters and the options' error messages."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from pyrmq import Message
from pyrmq.sync import Producer
from spark_integration.schema import READ_ARROW_SCHEMA, READ_SCHEMA_DDL
from tests.spark.helpers import create_topic, read_topic


def _load(spark: Any, ns: str, **options: str) -> Any:
    r = spark.read.format("rocketmq").option("nameServer", ns)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def sent(broker: Any) -> dict[str, Any]:
    """Messages of every kind in topic SparkRead (4 queues), sent with the
    plain client; returns the ids by kind and the time between two halves."""
    ns, topic = broker.namesrv, "SparkRead"
    create_topic(ns, topic, 4)
    with Producer("spark-read-test", ns) as p:
        first = []
        for i in range(200):
            m = Message(
                topic,
                f"plain-{i}".encode(),
                tags="TagA" if i % 2 else "TagB",
                keys=[f"key-{i}", f"alt-{i}"],
                properties={"n": str(i)},
            )
            first.append(p.send(m).msg_id)
        time.sleep(0.05)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        big = p.send(Message(topic, bytes(range(256)) * 64, tags="Big")).msg_id  # compressed
        binary = p.send(Message(topic, b"\x00\x01\xff" * 5)).msg_id
        batch = p.send_batch([Message(topic, f"b-{i}".encode(), tags="TagC") for i in range(50)])
    return {
        "topic": topic,
        "first": first,
        "middle": middle,
        "big": big,
        "binary": binary,
        "batch": batch.msg_id.split(","),
    }


def test_schema_ddl_matches_arrow(spark: Any) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    assert StructType.fromDDL(READ_SCHEMA_DDL) == from_arrow_schema(READ_ARROW_SCHEMA)


def test_read_returns_exactly_what_was_sent(spark: Any, broker: Any, sent: dict) -> None:
    ns, topic = broker.namesrv, sent["topic"]
    df = _load(spark, ns, topic=topic, includeProperties="true")
    # format("rocketmq") resolved with no register call (pyspark_rocketmq)
    assert df.rdd.getNumPartitions() == 4, "one partition per queue"
    rows = df.collect()
    stored = {m.msg_id: m for m in read_topic(ns, topic)}
    assert len(rows) == len(stored) == 200 + 2 + 50
    assert {r["msgId"] for r in rows} == set(stored)
    for r in rows:
        m = stored[r["msgId"]]
        assert r["topic"] == topic and r["brokerName"] == m.broker_name
        assert (r["queueId"], r["queueOffset"]) == (m.queue_id, m.queue_offset)
        assert bytes(r["body"]) == m.body
        assert r["tags"] == m.tags
        assert r["keys"] == (" ".join(m.keys) if m.keys else None)
        assert dict(r["properties"]) == m.properties
        assert int(r["bornTimestamp"].timestamp() * 1000) == m.born_timestamp
        assert int(r["storeTimestamp"].timestamp() * 1000) == m.store_timestamp
        assert r["bornHost"] == m.born_host and r["reconsumeTimes"] == m.reconsume_times
    by_id = {r["msgId"]: r for r in rows}
    assert bytes(by_id[sent["big"]]["body"]) == bytes(range(256)) * 64
    assert bytes(by_id[sent["binary"]]["body"]) == b"\x00\x01\xff" * 5
    assert {bytes(by_id[i]["body"]) for i in sent["batch"]} == {
        f"b-{i}".encode() for i in range(50)
    }
    # properties are left out unless asked for
    assert _load(spark, ns, topic=topic).first()["properties"] is None


def test_offsets_json_timestamp_filter_and_assign(spark: Any, broker: Any, sent: dict) -> None:
    ns, topic = broker.namesrv, sent["topic"]
    all_rows = (
        _load(spark, ns, topic=topic).select("brokerName", "queueId", "queueOffset").collect()
    )
    b = all_rows[0]["brokerName"]
    start = {topic: {f"{b}:0": 3, f"{b}:1": -2}}
    end = {topic: {f"{b}:0": 10, f"{b}:2": 5}}
    got = (
        _load(
            spark, ns, topic=topic, startingOffsets=json.dumps(start), endingOffsets=json.dumps(end)
        )
        .select("queueId", "queueOffset")
        .collect()
    )
    want = {
        (r["queueId"], r["queueOffset"])
        for r in all_rows
        if (r["queueId"] == 0 and 3 <= r["queueOffset"] < 10)
        or (r["queueId"] == 1)
        or (r["queueId"] == 2 and r["queueOffset"] < 5)
        or r["queueId"] == 3
    }
    assert {(r["queueId"], r["queueOffset"]) for r in got} == want

    after = _load(spark, ns, topic=topic, startingTimestamp=str(sent["middle"])).collect()
    assert {r["msgId"] for r in after} == {sent["big"], sent["binary"], *sent["batch"]}

    tagged = _load(spark, ns, topic=topic, subExpression="TagA || Big").collect()
    assert {r["tags"] for r in tagged} == {"TagA", "Big"} and len(tagged) == 101

    # SQL92, filtered by the broker: n is 0..199 on the first 200 messages
    selected = _load(
        spark, ns, topic=topic, subExpression="n >= 150 AND TAGS = 'TagA'",
        subExpressionType="SQL92",
    ).collect()  # fmt: skip
    assert sorted(int(bytes(r["body"]).decode()[6:]) for r in selected) == list(range(151, 200, 2))

    one = _load(spark, ns, assign=json.dumps({topic: [1]})).collect()
    assert one and {r["queueId"] for r in one} == {1}
    assert len(_load(spark, ns, topicPattern="SparkRe.d").collect()) == 252


def test_narrower_schema_reads_only_those_columns(spark: Any, broker: Any, sent: dict) -> None:
    ns, topic = broker.namesrv, sent["topic"]
    full = {r["msgId"]: r for r in _load(spark, ns, topic=topic).collect()}
    df = (
        spark.read.format("rocketmq")
        .schema("msgId string, body binary, queueOffset bigint")
        .option("nameServer", ns)
        .option("topic", topic)
        .load()
    )
    got = df.collect()
    assert df.columns == ["msgId", "body", "queueOffset"] and len(got) == len(full)
    for r in got:
        assert bytes(r["body"]) == bytes(full[r["msgId"]]["body"])
        assert r["queueOffset"] == full[r["msgId"]]["queueOffset"]
    for ddl, message in (
        ("msgId string, payload binary", "has no column 'payload'"),
        ("body string", "column 'body' of format\\('rocketmq'\\) is binary, not string"),
    ):
        bad = spark.read.format("rocketmq").schema(ddl).option("nameServer", ns)
        with pytest.raises(Exception, match=message):
            bad.option("topic", topic).load().collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "SparkRead"}, "option nameServer is required"),
        ({"nameServer": "nohost", "topic": "T"}, "must be host:port"),
        ({"startingOffsets": "newest"}, "startingOffsets='newest' is not understood"),
        ({"startingOffsets": '{"SparkRead": {"0": 1}}'}, '"brokerName:queueId"'),
        ({"endingOffsets": "earliest"}, "endingOffsets='earliest' is not understood"),
        ({"startingOffsets": "latest"}, "would read nothing"),
        ({"topic": "NoSuchTopic"}, "topic 'NoSuchTopic' \\(option topic\\) does not exist"),
        ({"topicPattern": "Nope.*"}, "matches no topic"),
        ({"topic": "A", "topicPattern": "B"}, "exactly one of the options topic"),
        ({"failOnDataLoss": "maybe"}, "expected true or false"),
        ({"maxOffsetsPerTrigger": "10"}, "streaming reads only"),
        ({"subExpressionType": "XPATH"}, "use TAG or SQL92"),
        ({"subExpression": "n >", "subExpressionType": "SQL92"}, "does not parse"),
    ],
)
def test_bad_options_fail_at_planning(
    spark: Any, broker: Any, sent: dict, options: dict[str, str], message: str
) -> None:
    opts = {"nameServer": broker.namesrv, "topic": "SparkRead", **options}
    if "nameServer" not in options and options.get("topic") == "SparkRead" and len(options) == 1:
        opts.pop("nameServer")
    if "topicPattern" in options and "topic" not in options:
        opts.pop("topic")
    r = spark.read.format("rocketmq")
    for k, v in opts.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=message):
        r.load().collect()


def test_write_modes(spark: Any, broker: Any) -> None:
    ns, topic = broker.namesrv, "SparkWriteModes"
    create_topic(ns, topic, 2)
    df = spark.createDataFrame([(f"w{i}",) for i in range(30)], "body string")
    df.write.format("rocketmq").mode("append").option("nameServer", ns).option(
        "topic", topic
    ).save()
    assert sorted(m.body for m in read_topic(ns, topic)) == sorted(
        f"w{i}".encode() for i in range(30)
    )
    with pytest.raises(Exception, match="save mode overwrite is not supported"):
        df.write.format("rocketmq").mode("overwrite").option("nameServer", ns).option(
            "topic", topic
        ).save()
    with pytest.raises(Exception, match="no topic"):
        df.write.format("rocketmq").mode("append").option("nameServer", ns).save()
