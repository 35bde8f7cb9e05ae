"""An end-to-end Spark pipeline through pyrmq, runnable with one command
against `pyrmq standalone` (started in another terminal):

    pip install 'pyrmq[spark]'
    pyrmq standalone &                         # name server on 127.0.0.1:9876
    python examples/spark_pipeline.py --name-server 127.0.0.1:9876

1. produce: read a CSV (or Parquet) file of orders (a sample one is written
   when --input is not given) and send every row to topic `orders` through
   the Arrow UDF producer (one JSON body per row, the category as tag and
   the order id as key; the result of every send is counted);
2. stream: read topic `orders` with readStream.format("rocketmq"),
   checkpointed, parse the bodies, aggregate each micro-batch (orders and
   amount per category) and write it as Parquet under --output, keyed by
   batch id so a replayed batch replaces its first attempt. Trigger
   AvailableNow: the job reads what is in the topic and stops (use
   --forever to keep streaming).
3. print the totals read back from the Parquet output.

Run it again and the stream goes on from its checkpoint: only the new
orders are aggregated."""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import sys
import tempfile
from typing import Any


def sample_csv(path: pathlib.Path, rows: int) -> None:
    rnd = random.Random(7)
    cats = ["books", "games", "garden", "music", "tools"]
    with path.open("w") as f:
        f.write("order_id,category,amount\n")
        for i in range(rows):
            f.write(f"o-{i},{rnd.choice(cats)},{rnd.randint(100, 10000) / 100:.2f}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CSV → pyrmq → streaming aggregate → Parquet")
    ap.add_argument("--name-server", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--input", help="CSV or Parquet file of order_id,category,amount")
    ap.add_argument("--rows", type=int, default=10_000, help="rows of the sample CSV")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "pyrmq-spark-example"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--forever", action="store_true", help="keep streaming (Ctrl-C stops)")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from pyrmq import sync
    from pyrmq.admin import AdminClient
    from spark_integration import producer_udf

    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    src = pathlib.Path(args.input) if args.input else work / "orders.csv"
    if not args.input:
        sample_csv(src, args.rows)

    async def create_topic() -> None:
        async with AdminClient(args.name_server) as admin:
            await admin.create_topic(args.topic, 4, 4)

    sync.run(create_topic(), 30)

    spark = (
        SparkSession.builder.master(args.master)
        .appName("pyrmq-example")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    try:
        # 1. produce
        if src.suffix == ".parquet":
            orders = spark.read.parquet(str(src))
        else:
            orders = spark.read.option("header", "true").csv(
                str(src), schema="order_id string, category string, amount double"
            )
        send = producer_udf(args.name_server, topic=args.topic)
        rows = orders.select(
            F.to_json(F.struct("order_id", "category", "amount")).alias("body"),
            F.col("category").alias("tags"),
            F.col("order_id").alias("keys"),
        )
        sent = rows.select(send(F.struct("body", "tags", "keys")).alias("r"))
        by_status = {r["status"]: r["count"] for r in sent.groupBy("r.status").count().collect()}
        print(f"produced: {by_status}")
        if set(by_status) != {"SEND_OK"}:
            return 1

        # 2. stream: aggregate each micro-batch into Parquet, keyed by batch id
        out = work / "aggregates"

        def aggregate(df: Any, batch_id: int) -> None:
            parsed = df.select(
                F.from_json(
                    F.col("body").cast("string"),
                    "order_id string, category string, amount double",
                ).alias("o")
            ).select("o.*")
            agg = parsed.groupBy("category").agg(
                F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount")
            )
            agg.withColumn("batch", F.lit(batch_id)).write.mode("overwrite").parquet(
                str(out / f"batch={batch_id}")
            )

        stream = (
            spark.readStream.format("rocketmq")
            .option("nameServer", args.name_server)
            .option("topic", args.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "20000")
            .load()
            .writeStream.foreachBatch(aggregate)
            .option("checkpointLocation", str(work / "checkpoint"))
        )
        query = (stream if args.forever else stream.trigger(availableNow=True)).start()
        query.awaitTermination()

        # 3. the totals
        if out.exists():
            totals = (
                spark.read.parquet(str(out))
                .groupBy("category")
                .agg(F.sum("orders").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
                .orderBy("category")
            )
            totals.show()
            print(f"orders aggregated: {totals.agg(F.sum('orders')).first()[0]}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
