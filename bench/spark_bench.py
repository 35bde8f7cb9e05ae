"""Spark integration throughput on local[2] against `pyrmq standalone`,
each job beside Spark's own floor measured in the same run:

    python -m bench.spark_bench [--rows 1000000] [--body 128] [--json out.json]

- udf producer: df.select(producer_udf(...)(struct)).write.format("noop"),
  floor: the same job with an Arrow UDF that returns the result structs
  without sending (what Spark itself costs for the job);
- data source writer: df.write.format("rocketmq"), floor: write.format("noop");
- batch read: spark.read.format("rocketmq").load().write.format("noop"),
  floor: a Python data source handing Spark the same Arrow batches from
  memory (the Python Data Source API's own cost), same partition count.

Each job runs once to warm up (JVM, Python workers) on a small input, then
timed on --rows rows. The standalone broker is a subprocess with
ASYNC_FLUSH (its default); this machine's other load shows in the numbers,
so read the ratios beside the absolute figures."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

REPO = pathlib.Path(__file__).resolve().parents[1]


def _spark() -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    return s


def _no_send(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
    """The floor's UDF: result structs for every row, nothing sent."""
    from spark_integration.producer import SendOutcome

    for arr in batches:
        n = len(arr)
        none: list[Any] = [None] * n
        yield SendOutcome(["SEND_OK"] * n, none, none, none, none, none, none).to_arrow()


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=128, help="body bytes")
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.functions import arrow_udf

    from pyrmq.testing.cluster import StandaloneProcess
    from spark_integration import producer_udf
    from spark_integration.schema import READ_ARROW_SCHEMA, READ_SCHEMA_DDL, RESULT_SCHEMA_DDL
    from tests.spark.helpers import create_topic

    work = pathlib.Path(tempfile.mkdtemp(prefix="pyrmq-spark-bench-"))
    broker = StandaloneProcess(work)
    broker.start()
    spark = _spark()
    results: dict[str, Any] = {"rows": args.rows, "body_bytes": args.body, "cpus": os.cpu_count()}
    try:
        ns = broker.namesrv
        pad = "x" * max(0, args.body - 12)

        def frame(n: int) -> Any:
            body = F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit(pad)).cast("binary")
            return spark.range(n, numPartitions=2).select(body.alias("body"))

        send = producer_udf(ns, topic="BenchSparkUdf")

        floor_udf = arrow_udf(_no_send, RESULT_SCHEMA_DDL)
        for t in ("BenchSparkUdf", "BenchSparkWriter"):
            create_topic(ns, t, 8)

        def udf_job(n: int, fn: Any) -> None:
            frame(n).select(fn(F.struct("body")).alias("r")).write.format("noop").mode(
                "overwrite"
            ).save()

        def writer_job(n: int) -> None:
            frame(n).write.format("rocketmq").mode("append").option("nameServer", ns).option(
                "topic", "BenchSparkWriter"
            ).save()

        def noop_write(n: int) -> None:
            frame(n).write.format("noop").mode("overwrite").save()

        # warm-up: JVM, Python workers, producers, routes
        udf_job(20_000, send)
        udf_job(20_000, floor_udf)
        writer_job(20_000)
        noop_write(20_000)

        n = args.rows
        runs = {
            "udf_floor_s": lambda: udf_job(n, floor_udf),
            "udf_producer_s": lambda: udf_job(n, send),
            "writer_floor_s": lambda: noop_write(n),
            "writer_s": lambda: writer_job(n),
        }
        for name, fn in runs.items():
            results[name] = _timed(fn)
            print(f"{name}: {results[name]:.2f} s", flush=True)

        # batch read of what the UDF run stored (n + warm-up rows, 8 queues)
        def read_job() -> int:
            df = (
                spark.read.format("rocketmq")
                .option("nameServer", ns)
                .option("topic", "BenchSparkUdf")
                .load()
            )
            df.write.format("noop").mode("overwrite").save()
            return int(df.rdd.getNumPartitions())

        read_job()  # warm-up (planning, workers)
        stored = (
            spark.read.format("rocketmq")
            .option("nameServer", ns)
            .option("topic", "BenchSparkUdf")
            .load()
            .count()
        )
        results["read_rows"] = stored
        results["read_s"] = _timed(read_job)
        print(f"read_s: {results['read_s']:.2f} s ({stored} rows)", flush=True)

        sample = (
            spark.read.format("rocketmq")
            .option("nameServer", ns)
            .option("topic", "BenchSparkUdf")
            .option("endingOffsets", "latest")
            .load()
            .limit(4096)
            .toArrow()
        )
        batch = sample.cast(READ_ARROW_SCHEMA).combine_chunks().to_batches()[0]
        per_part = stored // 8

        class _Floor(DataSource):
            @classmethod
            def name(cls) -> str:
                return "pyrmq_bench_floor"

            def schema(self) -> str:
                return READ_SCHEMA_DDL

            def reader(self, schema: Any) -> DataSourceReader:
                return _FloorReader()

        class _FloorReader(DataSourceReader):
            def partitions(self) -> list[InputPartition]:
                return [InputPartition(i) for i in range(8)]

            def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
                left = per_part
                while left > 0:
                    k = min(left, batch.num_rows)
                    yield batch.slice(0, k)
                    left -= k

        spark.dataSource.register(_Floor)

        def floor_read() -> None:
            spark.read.format("pyrmq_bench_floor").load().write.format("noop").mode(
                "overwrite"
            ).save()

        floor_read()
        results["read_floor_s"] = _timed(floor_read)
        print(f"read_floor_s: {results['read_floor_s']:.2f} s", flush=True)
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)  # its store: GBs of segments

    r = results
    table = [
        ("UDF producer", n / r["udf_producer_s"], n / r["udf_floor_s"]),
        ("data source writer", n / r["writer_s"], n / r["writer_floor_s"]),
        ("batch read", r["read_rows"] / r["read_s"], (per_part * 8) / r["read_floor_s"]),
    ]
    print(f"\n{n} rows of {args.body} B, local[2], {os.cpu_count()} CPUs")
    print("| job | rows/s | Spark floor rows/s | share of floor |")
    print("|---|---:|---:|---:|")
    for name, rate, floor in table:
        print(f"| {name} | {rate:,.0f} | {floor:,.0f} | {rate / floor:.2f} |")
        results[name.replace(" ", "_") + "_rows_per_s"] = rate
        results[name.replace(" ", "_") + "_floor_rows_per_s"] = floor
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
