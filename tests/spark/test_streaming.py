"""Streaming through format("rocketmq"): readStream checkpointed by Spark
delivers every message to a batch-id-keyed sink exactly once across a stop
and restart; maxOffsetsPerTrigger, Trigger.AvailableNow and broker offset
commits; writeStream survives a restart without loss."""

from __future__ import annotations

import pathlib
import threading
import time
from collections import Counter
from typing import Any

import pytest

from pyrmq import Message
from pyrmq.sync import Producer
from tests.spark.helpers import create_topic, read_topic, wait_for


def _stream(spark: Any, ns: str, topic: str, **options: str) -> Any:
    r = spark.readStream.format("rocketmq").option("nameServer", ns).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _batch_sink(out: pathlib.Path, sizes: list[int] | None = None) -> Any:
    """foreachBatch that writes batch N to out/batch-N (overwrite): a
    replayed batch replaces its first attempt, so the sink is exactly-once."""

    def sink(df: Any, batch_id: int) -> None:
        rows = df.select("msgId", "body").collect()
        if sizes is not None:
            sizes.append(len(rows))
        path = out / f"batch-{batch_id:06d}"
        tmp = out / f".batch-{batch_id:06d}.tmp"
        tmp.write_text("\n".join(f"{r['msgId']} {bytes(r['body']).decode()}" for r in rows))
        tmp.replace(path)

    return sink


def _sink_contents(out: pathlib.Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    for f in sorted(out.glob("batch-*")):
        for line in f.read_text().splitlines():
            if line:
                seen[line.split(" ", 1)[1]] += 1
    return seen


def test_stream_read_restart_delivers_each_message_once(
    spark: Any, broker: Any, tmp_path: pathlib.Path
) -> None:
    ns, topic, total = broker.namesrv, "SparkStreamIn", 6000
    create_topic(ns, topic, 4)
    out = tmp_path / "sink"
    out.mkdir()
    ckpt = str(tmp_path / "ckpt")
    stop = threading.Event()
    sent: list[str] = []

    def produce() -> None:
        with Producer("spark-stream-src", ns) as p:
            for i in range(total):
                if stop.is_set():
                    return
                p.send(Message(topic, f"s-{i}"))
                sent.append(f"s-{i}")
                if i % 500 == 499:
                    time.sleep(0.2)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        sizes: list[int] = []
        q = (
            _stream(spark, ns, topic, startingOffsets="earliest", maxOffsetsPerTrigger="700")
            .writeStream.foreachBatch(_batch_sink(out, sizes))
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        wait_for(lambda: len(list(out.glob("batch-*"))) >= 3, 120, "three micro-batches")
        q.stop()  # mid-stream: the producer is still sending
        assert max(sizes) <= 700, f"maxOffsetsPerTrigger not honoured: {sizes}"
        first_run = sum(_sink_contents(out).values())
        assert 0 < first_run < total
        t.join(120)
        assert len(sent) == total
        q = (
            _stream(spark, ns, topic, startingOffsets="earliest", maxOffsetsPerTrigger="700")
            .writeStream.foreachBatch(_batch_sink(out))
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        wait_for(lambda: sum(_sink_contents(out).values()) >= total, 180, "every message")
        q.processAllAvailable()
        q.stop()
    finally:
        stop.set()
        t.join(30)
    seen = _sink_contents(out)
    assert set(seen) == set(sent), "every message reached the sink"
    dups = {k: v for k, v in seen.items() if v > 1}
    assert not dups, f"{len(dups)} messages delivered more than once"


def test_available_now_reads_what_is_there_and_stops(
    spark: Any, broker: Any, tmp_path: pathlib.Path
) -> None:
    ns, topic = broker.namesrv, "SparkAvailableNow"
    create_topic(ns, topic, 2)
    with Producer("spark-an", ns) as p:
        for i in range(500):
            p.send(Message(topic, f"a-{i}"))
    out = tmp_path / "sink"
    out.mkdir()
    sizes: list[int] = []
    q = (
        _stream(
            spark,
            ns,
            topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="150",
            consumerGroup="spark-an-group",
            commitOffsetsToBroker="true",
        )
        .writeStream.foreachBatch(_batch_sink(out, sizes))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120), "Trigger.AvailableNow query did not end by itself"
    assert set(_sink_contents(out)) == {f"a-{i}" for i in range(500)}
    assert sum(sizes) == 500 and max(sizes) <= 150 and len(sizes) >= 4
    # offsets committed to the broker for lag monitoring
    from pyrmq import sync
    from pyrmq.admin import AdminClient

    async def progress() -> Any:
        async with AdminClient(ns) as admin:
            return await admin.consumer_progress("spark-an-group", topic)

    prog = sync.run(progress(), 30)
    assert prog.diff_total == 0, prog
    assert sum(q.consumer_offset for q in prog.queues) == 500


def test_stream_write_survives_restart(spark: Any, broker: Any, tmp_path: pathlib.Path) -> None:
    ns, topic = broker.namesrv, "SparkStreamOut"
    create_topic(ns, topic, 4)
    src = tmp_path / "in"
    src.mkdir()
    ckpt = str(tmp_path / "ckpt")
    files = 8
    per_file = 500

    def add_file(k: int) -> None:
        tmp = tmp_path / f".f{k}.json"
        tmp.write_text(
            "\n".join(f'{{"body": "w-{k}-{i}", "tags": "F{k}"}}' for i in range(per_file))
        )
        tmp.replace(src / f"f{k}.json")

    def start() -> Any:
        df = (
            spark.readStream.schema("body string, tags string")
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
        )
        return (
            df.writeStream.format("rocketmq")
            .option("nameServer", ns)
            .option("topic", topic)
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    for k in range(files // 2):
        add_file(k)
    q = start()
    wait_for(lambda: len(read_topic(ns, topic)) >= per_file * 2, 120, "two files sent")
    q.stop()
    for k in range(files // 2, files):
        add_file(k)
    q = start()
    q.processAllAvailable()
    q.stop()
    stored = read_topic(ns, topic)
    bodies = Counter(m.body.decode() for m in stored)
    want = {f"w-{k}-{i}" for k in range(files) for i in range(per_file)}
    assert set(bodies) == want, "every row written"
    # a replayed micro-batch carries the same msgIds: dedup by msgId is exact
    by_id: dict[str, set[str]] = {}
    for m in stored:
        by_id.setdefault(m.msg_id, set()).add(m.body.decode())
        assert m.properties.get("SPARK_BATCH_ID", "").isdigit()
    assert all(len(v) == 1 for v in by_id.values())
    assert len(by_id) == len(want), "one msgId per row"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "latest"}, "batch reads only"),
        ({"startingOffsets": "[1,2]"}, "is not understood"),
        ({"topic": "NoSuchStreamTopic"}, "does not exist"),
    ],
)
def test_stream_bad_options(spark: Any, broker: Any, options: dict, message: str) -> None:
    r = spark.readStream.format("rocketmq").option("nameServer", broker.namesrv)
    for k, v in {"topic": "SparkStreamIn", **options}.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=message):
        r.load().writeStream.format("console").start().awaitTermination(10)
