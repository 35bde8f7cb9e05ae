"""The `rocketmq` Spark data source (PySpark's Python Data Source API,
pyspark >= 4.2):

    spark.read.format("rocketmq").option("nameServer", ns).option("topic", t).load()
    spark.readStream.format("rocketmq")...load()
    df.write.format("rocketmq").mode("append").option("nameServer", ns).save()
    df.writeStream.format("rocketmq").option("checkpointLocation", d)...start()

`format("rocketmq")` works without a register call when this package is
installed: Spark looks up `pyspark_rocketmq.DefaultSource` (the module
beside this package) at startup. `register(spark)` does it by hand.

Reads: one Spark partition per MessageQueue (batch: the range from
startingOffsets/startingTimestamp to endingOffsets, resolved at planning;
streaming: per-queue offsets checkpointed by Spark as
{"topic": {"broker:queueId": offset}}, maxOffsetsPerTrigger shared between
queues by backlog, Trigger.AvailableNow stops at the offsets seen when it
began). Writes: at-least-once (a failed task is retried by Spark); the
streaming writer gives each message a msgId derived from the query id,
micro-batch id, partition and row, so a micro-batch replayed after a
restart carries the same ids as the first attempt (consumers deduplicate by
msgId) and the property SPARK_BATCH_ID. Options: spark_integration.options."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_integration import reader
from spark_integration.options import (
    OptionError,
    QueueKey,
    SinkOptions,
    SourceOptions,
    sink_options,
    source_options,
)
from spark_integration.producer import check_write_schema, deterministic_ids, send_arrow
from spark_integration.schema import READ_SCHEMA_DDL


@dataclass
class QueuePartition(InputPartition):
    """Offsets [start, end) of one queue: one Spark task."""

    ref: reader.QueueRef
    start: int
    end: int

    def __init__(self, ref: reader.QueueRef, start: int, end: int) -> None:
        super().__init__(f"{ref.topic}/{reader.key_str(ref.key)}:{start}-{end}")
        self.ref = ref
        self.start = start
        self.end = end


def _partitions(
    refs: Sequence[reader.QueueRef], start: dict[QueueKey, int], end: dict[QueueKey, int]
) -> list[QueuePartition]:
    return [
        QueuePartition(r, start[r.key], end[r.key])
        for r in refs
        if r.key in start and r.key in end and end[r.key] > start[r.key]
    ]


def _read(
    partition: InputPartition, opts: SourceOptions, columns: list[str] | None
) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, QueuePartition)
    return reader.read_range(
        partition.ref, partition.start, partition.end, opts, reader.projected_schema(columns)
    )


def _check_loss(
    opts: SourceOptions,
    start: dict[QueueKey, int],
    bounds: dict[QueueKey, tuple[int, int]],
) -> dict[QueueKey, int]:
    """Start offsets moved into each queue's [min, max]; DataLossError
    instead when failOnDataLoss (the default) and any had to move. Queues
    with no bounds (gone from the route) are left as they are."""
    out = dict(start)
    for k, off in start.items():
        if k not in bounds:
            continue
        lo, hi = bounds[k]
        if off < lo or off > hi:
            if opts.fail_on_data_loss:
                raise reader.DataLossError(
                    f"{k[0]}/{reader.key_str(k)}: offset {off} is outside the queue's "
                    f"[{lo}, {hi}] (messages deleted by retention, or the topic was "
                    "recreated); set failOnDataLoss=false to go on from what is there"
                )
            out[k] = lo if off < lo else hi
    return out


def _columns(schema: StructType) -> list[str] | None:
    """The read columns a user schema asks for (None: all of them). A
    narrower .schema(...) makes reads cheaper: only those columns are built."""
    from pyspark.sql.pandas.types import from_arrow_schema

    full = from_arrow_schema(reader.READ_ARROW_SCHEMA)  # (no SparkContext in planners)
    if schema == full:
        return None
    names = schema.fieldNames()
    reader.projected_schema(names)  # unknown names: OptionError
    for f in schema.fields:
        want = full[f.name].dataType
        if f.dataType != want:
            raise OptionError(
                f"column {f.name!r} of format('rocketmq') is {want.simpleString()}, "
                f"not {f.dataType.simpleString()}: cast it after loading"
            )
    return names


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, columns: list[str] | None = None) -> None:
        self.opts = opts
        self.columns = columns
        o = opts

        async def planned() -> list[QueuePartition]:
            refs = await reader.discover(o)
            bounds = await reader.queue_bounds(o.name_server, refs)
            start = await reader.resolve(
                o, refs, bounds, o.starting_offsets, o.starting_timestamp, reader.EARLIEST
            )
            end = await reader.resolve(o, refs, bounds, o.ending_offsets, None, reader.LATEST)
            start = _check_loss(o, start, bounds)
            return _partitions(refs, start, end)

        # planning happens here (the driver): bad topics fail the query now
        self.planned = reader.plan(planned())

    def partitions(self) -> Sequence[InputPartition]:
        return self.planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts, self.columns)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"topic": {"broker:queueId": next offset to read}}."""

    def __init__(self, opts: SourceOptions, columns: list[str] | None = None) -> None:
        self.opts = opts
        self.columns = columns
        self.target: dict[QueueKey, int] | None = None
        self._committed: dict[str, Any] | None = None
        # fail at planning on a missing topic or bad offsets
        self._initial = self._resolve_initial()

    def _resolve_initial(self) -> dict[str, Any]:
        o = self.opts

        async def initial() -> dict[QueueKey, int]:
            refs = await reader.discover(o)
            bounds = await reader.queue_bounds(o.name_server, refs)
            return await reader.resolve(
                o, refs, bounds, o.starting_offsets, o.starting_timestamp, reader.EARLIEST
            )

        return reader.offsets_to_json(reader.plan(initial()))

    def initialOffset(self) -> dict[str, Any]:
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _latest(self) -> tuple[list[reader.QueueRef], dict[QueueKey, tuple[int, int]]]:
        o = self.opts

        async def latest() -> tuple[list[reader.QueueRef], dict[QueueKey, tuple[int, int]]]:
            refs = await reader.discover(o, must_exist=False)
            return refs, await reader.queue_bounds(o.name_server, refs)

        return reader.plan(latest())

    def prepareForTriggerAvailableNow(self) -> None:
        _, bounds = self._latest()
        self.target = {k: hi for k, (_, hi) in bounds.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = reader.offsets_from_json(start)
        # `start` ends the batch Spark finished last: Spark commits a batch
        # to its sources only when it plans the one after, which never
        # happens for the last batch of Trigger.AvailableNow
        self.commit(start)
        refs, bounds = self._latest()
        end: dict[QueueKey, int] = {}
        for r in refs:
            lo, hi = bounds[r.key]
            if self.target is not None:
                hi = min(hi, self.target.get(r.key, lo))
            # a queue new since the last batch starts at its earliest; one
            # that went backwards (recreated) is left for partitions() to
            # refuse (failOnDataLoss) or skip
            s = begin.get(r.key, lo)
            end[r.key] = s if s > hi and self.opts.fail_on_data_loss else hi
        for k, v in begin.items():  # queues gone from the route keep their offset
            end.setdefault(k, v)
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, bounds, limit.max_rows)
        return reader.offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        _, bounds = self._latest()
        return reader.offsets_to_json({k: hi for k, (_, hi) in bounds.items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        o = self.opts
        s = reader.offsets_from_json(start)
        e = reader.offsets_from_json(end)
        refs, bounds = self._latest()
        for r in refs:
            s.setdefault(r.key, bounds[r.key][0])
        s = _check_loss(o, {k: v for k, v in s.items() if k in e}, bounds)
        return _partitions(refs, s, e)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts, self.columns)

    def commit(self, end: dict[str, Any]) -> None:
        """With commitOffsetsToBroker, store the processed offsets in the
        brokers under consumerGroup (for lag monitoring; Spark's checkpoint
        stays the source of truth)."""
        o = self.opts
        if not o.commit_offsets_to_broker or end == self._committed:
            return
        self._committed = end
        offsets = reader.offsets_from_json(end)

        async def commit() -> None:
            from spark_integration import _runtime

            client = _runtime.client(o.name_server)
            refs = await reader.discover(o, must_exist=False)
            for r in refs:
                if r.key in offsets:
                    await client.api.update_consumer_offset(
                        r.broker_addr, o.consumer_group, r.mq, offsets[r.key], reader.TIMEOUT
                    )

        reader.plan(commit())


def _rate_limit(
    begin: dict[QueueKey, int],
    end: dict[QueueKey, int],
    bounds: dict[QueueKey, tuple[int, int]],
    max_rows: int,
) -> dict[QueueKey, int]:
    """At most max_rows offsets in all, shared by backlog (Kafka's
    rateLimit): each queue gets its share of the total lag, at least one
    when it has any, never past its end."""
    lag = {k: max(0, e - begin.get(k, bounds.get(k, (e, e))[0])) for k, e in end.items()}
    total = sum(lag.values())
    if total <= max_rows:
        return end
    out = {}
    left = max_rows
    for k in sorted(end):
        s = end[k] - lag[k]
        share = min(lag[k], max(1 if lag[k] else 0, lag[k] * max_rows // total), left)
        left -= share
        out[k] = s + share
    return out


@dataclass
class SentCount(WriterCommitMessage):
    """Rows a task sent (every one acknowledged: a failure fails the task)."""

    rows: int


class RocketMQBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentCount:
        rows = 0
        for rb in iterator:
            check_write_schema(rb.schema.names, self.opts.topic)
            send_arrow(rb, self.opts)
            rows += rb.num_rows
        return SentCount(rows)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentCount:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        part = ctx.partitionId() if ctx else 0
        seed = f"{query_id}:{batch_id}:{part}"
        rows = 0
        for rb in iterator:
            check_write_schema(rb.schema.names, self.opts.topic)
            ids = deterministic_ids(seed, rows, rb.num_rows)
            extra = {"SPARK_BATCH_ID": str(batch_id)} if batch_id is not None else None
            send_arrow(rb, self.opts, ids=ids, extra_properties=extra)
            rows += rb.num_rows
        return SentCount(rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row was acknowledged before its task ended: nothing left."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already sent stay sent (at-least-once); the replay of this
        micro-batch sends them again with the same msgIds."""


class RocketMQDataSource(DataSource):
    """format("rocketmq")."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(source_options(self.options, streaming=False), _columns(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(source_options(self.options, streaming=True), _columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        _refuse_overwrite(overwrite)
        opts = sink_options(self.options)
        check_write_schema(schema.fieldNames(), opts.topic)
        return RocketMQBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        _refuse_overwrite(overwrite)
        opts = sink_options(self.options)
        check_write_schema(schema.fieldNames(), opts.topic)
        return RocketMQStreamWriter(opts)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise OptionError(
            "save mode overwrite is not supported by format('rocketmq'): a topic is "
            "append-only; use .mode('append') (outputMode('append') for streams)"
        )


def register(spark: Any) -> None:
    """Register format("rocketmq") with a SparkSession by hand (needed only
    where pyspark_rocketmq is not importable by Spark's Python workers)."""
    spark.dataSource.register(RocketMQDataSource)
