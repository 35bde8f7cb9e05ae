"""Producing from Spark: every row of a DataFrame becomes one message.

Rows carry `body` (binary or string, required) and optionally `topic`,
`tags`, `keys` (a string, or an array of strings joined by spaces as
RocketMQ's KEYS property is), `properties` (map<string,string>) and
`shardingKey` (rows with one go to the queue SelectMessageQueueByHash picks,
so a key's messages stay in order in one queue). Extra columns are ignored.

Three ways in, all on one Producer per Python worker process
(spark_integration._runtime) and all returning or checking a result per row
(`status, msgId, offsetMsgId, brokerName, queueId, queueOffset, error`):

    send = producer_udf("127.0.0.1:9876", topic="Orders")      # Arrow UDF
    df.select(send(F.struct("body", "tags")).alias("r"))

    send_dataframe(df, "127.0.0.1:9876", topic="Orders")       # mapInArrow

    send1 = row_producer_udf("127.0.0.1:9876", topic="Orders") # row at a time
    df.select(send1(F.struct("body")).alias("r"))

The batch forms group an Arrow batch's rows by (topic, queue), send them as
SEND_BATCH_MESSAGE requests of at most BATCH_BYTES, all in flight at once,
and wait for every answer before the batch's results are returned. A row
that cannot be sent gets status FAILED and its error; with fail_fast=True
the task fails instead (Spark then retries it: at-least-once)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import rmqcore
from pyrmq.common.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageQueue,
    new_unique_id,
)
from pyrmq.common.results import SendResult
from pyrmq.producer.selector import SelectMessageQueueByHash
from spark_integration import _runtime
from spark_integration.options import (
    DEFAULT_PRODUCER_GROUP,
    OptionError,
    SinkOptions,
    sink_options,
)
from spark_integration.schema import RESULT_ARROW_TYPE, RESULT_SCHEMA_DDL, WRITE_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.udf import UserDefinedFunction

#: most bytes of one SEND_BATCH_MESSAGE body (the broker takes up to 4 MiB)
BATCH_BYTES = 512 * 1024
#: most rows of one batch request
BATCH_ROWS = 4096
#: status of a row that was not stored
FAILED = "FAILED"

_HASH = SelectMessageQueueByHash()


class SendFailed(RuntimeError):
    """Rows of a batch could not be sent (fail-fast mode)."""


@dataclass
class SendOutcome:
    """Per-row results of one batch, as Python lists (Arrow-ready)."""

    status: list[str | None]
    msg_id: list[str | None]
    offset_msg_id: list[str | None]
    broker_name: list[str | None]
    queue_id: list[int | None]
    queue_offset: list[int | None]
    error: list[str | None]

    @property
    def failed(self) -> int:
        return sum(1 for e in self.error if e is not None)

    def first_error(self) -> str | None:
        return next((e for e in self.error if e is not None), None)

    def to_arrow(self) -> pa.StructArray:
        return pa.StructArray.from_arrays(
            [
                pa.array(self.status, pa.string()),
                pa.array(self.msg_id, pa.string()),
                pa.array(self.offset_msg_id, pa.string()),
                pa.array(self.broker_name, pa.string()),
                pa.array(self.queue_id, pa.int32()),
                pa.array(self.queue_offset, pa.int64()),
                pa.array(self.error, pa.string()),
            ],
            fields=list(RESULT_ARROW_TYPE),
        )


#: rows as columns: WRITE_COLUMNS name -> one value per row
Columns = Mapping[str, Sequence[Any]]


def arrow_columns(data: pa.RecordBatch | pa.StructArray) -> dict[str, list[Any]]:
    """The WRITE_COLUMNS an Arrow batch (or struct column) has, as lists."""
    out = {}
    for name in WRITE_COLUMNS:
        if isinstance(data, pa.StructArray):
            idx = data.type.get_field_index(name)
            if idx >= 0:
                out[name] = data.field(idx).to_pylist()
        else:
            idx = data.schema.get_field_index(name)
            if idx >= 0:
                out[name] = data.column(idx).to_pylist()
    return out


def check_write_schema(names: Sequence[str], default_topic: str | None) -> None:
    """Fail early when rows cannot be sent whatever their values."""
    if "body" not in names:
        raise OptionError(
            f"the rows to send need a 'body' column (binary or string); they have {list(names)}"
        )
    if "topic" not in names and not default_topic:
        raise OptionError(
            "no topic: give the option topic (the topic of every row) or a 'topic' column"
        )


def deterministic_ids(seed: str, first_row: int, n: int) -> list[str]:
    """32 hex digits per row from (seed, row number): a replayed Spark task
    (the same micro-batch, partition and rows) sends the same msgIds, so
    consumers can drop the duplicates at-least-once delivery allows."""
    out = []
    for i in range(first_row, first_row + n):
        out.append(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=16).hexdigest().upper())
    return out


async def send_rows(
    columns: Columns,
    n: int,
    opts: SinkOptions,
    *,
    ids: list[str] | None = None,
    extra_properties: dict[str, str] | None = None,
) -> SendOutcome:
    """Send `n` rows given as columns (`properties` values: a mapping or
    (key, value) pairs); one result per row, in row order. Runs on the pyrmq
    loop of this process; returns when every send has settled."""
    prod = await _runtime.producer(opts)
    bodies = columns.get("body")
    if bodies is None:
        raise OptionError("the rows to send need a 'body' column (binary or string)")
    topics = columns.get("topic")
    tags = columns.get("tags")
    keys = columns.get("keys")
    props = columns.get("properties")
    sharding = columns.get("shardingKey")
    if ids is None:
        ids = [new_unique_id() for _ in range(n)]
    out = SendOutcome(
        [None] * n, list(ids), [None] * n, [None] * n, [None] * n, [None] * n, [None] * n
    )
    # (topic, queue or None) -> [(row, encoded entry, size)]
    groups: dict[tuple[str, MessageQueue | None], list[tuple[int, tuple[bytes, bytes, int]]]] = {}
    topic_ok: dict[str, str | None] = {}
    queues_of: dict[str, list[MessageQueue]] = {}
    for i in range(n):
        body = bodies[i]
        topic = (topics[i] if topics is not None else None) or opts.topic
        if body is None:
            out.status[i], out.error[i] = FAILED, "body is null"
            continue
        if topic is None:
            out.status[i], out.error[i] = FAILED, "no topic (null topic column, no topic option)"
            continue
        if topic not in topic_ok:
            try:
                rmqcore.validate_topic(topic)
                topic_ok[topic] = None
            except Exception as e:  # IllegalMessageError: the reason, for this row
                topic_ok[topic] = f"bad topic {topic!r}: {e}"
        if topic_ok[topic] is not None:
            out.status[i], out.error[i] = FAILED, topic_ok[topic]
            continue
        if isinstance(body, str):
            body = body.encode()
        p: dict[str, str] = {}
        if props is not None and props[i]:
            p.update(props[i])
        if extra_properties:
            p.update(extra_properties)
        if tags is not None and tags[i]:
            p[PROPERTY_TAGS] = tags[i]
        if keys is not None and keys[i]:
            k = keys[i]
            p[PROPERTY_KEYS] = k if isinstance(k, str) else " ".join(str(x) for x in k)
        p[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = ids[i]
        try:
            encoded = rmqcore.encode_properties(p)
        except ValueError as e:
            out.status[i], out.error[i] = FAILED, str(e)
            continue
        mq: MessageQueue | None = None
        skey = sharding[i] if sharding is not None else None
        if skey is not None:
            mqs = queues_of.get(topic)
            if mqs is None:
                try:
                    mqs = queues_of[topic] = await prod.fetch_publish_message_queues(topic)
                except Exception as e:  # no route: every sharded row of it fails
                    queues_of[topic] = []
                    out.status[i], out.error[i] = FAILED, f"{type(e).__name__}: {e}"
                    continue
            if not mqs:
                out.status[i], out.error[i] = FAILED, f"topic {topic!r} has no writable queue"
                continue
            mq = _HASH(mqs, None, skey)  # type: ignore[arg-type]
        groups.setdefault((topic, mq), []).append((i, (body, encoded, 0)))

    sends: list[tuple[list[int], asyncio.Future[SendResult]]] = []
    for (topic, mq), rows in groups.items():
        start = 0
        while start < len(rows):
            size = 0
            end = start
            while end < len(rows) and end - start < BATCH_ROWS:
                body, encoded, _ = rows[end][1]
                size += 20 + len(body) + len(encoded)
                if size > BATCH_BYTES and end > start:
                    break
                end += 1
            chunk = rows[start:end]
            start = end
            idx = [r for r, _ in chunk]
            try:
                fut = prod.send_encoded_batch(
                    topic,
                    rmqcore.encode_batch(e for _, e in chunk),
                    [ids[r] for r in idx],
                    mq=mq,
                    timeout=opts.send_timeout_ms / 1000,
                )
            except Exception as e:  # refused before sending (too big, ...)
                for r in idx:
                    out.status[r], out.error[r] = FAILED, f"{type(e).__name__}: {e}"
                continue
            sends.append((idx, fut))
    results = await asyncio.gather(*(f for _, f in sends), return_exceptions=True)
    for (idx, _), res in zip(sends, results, strict=False):
        if isinstance(res, BaseException):
            msg = f"{type(res).__name__}: {res}"
            for r in idx:
                out.status[r], out.error[r] = FAILED, msg
            continue
        offs = res.offset_msg_id.split(",")
        status = res.send_status.name
        q = res.message_queue
        for j, r in enumerate(idx):
            out.status[r] = status
            out.offset_msg_id[r] = offs[j] if j < len(offs) else None
            out.broker_name[r] = q.broker_name
            out.queue_id[r] = q.queue_id
            out.queue_offset[r] = res.queue_offset + j
    return out


def send_blocking(
    columns: Columns,
    n: int,
    opts: SinkOptions,
    *,
    ids: list[str] | None = None,
    extra_properties: dict[str, str] | None = None,
) -> SendOutcome:
    """send_rows from a Spark worker thread (blocks until every row settled);
    raises SendFailed when fail-fast and a row failed."""
    timeout = opts.send_timeout_ms / 1000 * 3 + 60
    outcome = _runtime.run(
        send_rows(columns, n, opts, ids=ids, extra_properties=extra_properties), timeout
    )
    if opts.fail_fast and outcome.failed:
        raise SendFailed(
            f"{outcome.failed} of {n} rows were not sent; first error: {outcome.first_error()}"
        )
    return outcome


def send_arrow(
    data: pa.RecordBatch | pa.StructArray,
    opts: SinkOptions,
    *,
    ids: list[str] | None = None,
    extra_properties: dict[str, str] | None = None,
) -> SendOutcome:
    """send_blocking of an Arrow batch's rows."""
    return send_blocking(
        arrow_columns(data), len(data), opts, ids=ids, extra_properties=extra_properties
    )


def _opts(
    name_server: str,
    topic: str | None,
    producer_group: str,
    send_timeout_ms: int,
    fail_fast: bool,
) -> SinkOptions:
    raw = {
        "nameServer": name_server,
        "producerGroup": producer_group,
        "sendTimeoutMs": str(send_timeout_ms),
        "failFast": str(fail_fast).lower(),
    }
    if topic is not None:
        raw["topic"] = topic
    return sink_options(raw)


def producer_udf(
    name_server: str,
    *,
    topic: str | None = None,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    send_timeout_ms: int = 3000,
    fail_fast: bool = False,
) -> UserDefinedFunction:
    """An Arrow UDF (iterator form) over a struct of the row's columns that
    sends each row and returns its result struct. Rows of an Arrow batch
    are sent together (batched per queue, all in flight); each batch waits
    for all of its sends."""
    from pyspark.sql.functions import arrow_udf

    opts = _opts(name_server, topic, producer_group, send_timeout_ms, fail_fast)

    def send(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        for arr in batches:
            if not isinstance(arr, pa.StructArray):
                raise OptionError(
                    "producer_udf takes one struct column: send(F.struct('body', 'tags', ...))"
                )
            check_write_schema([f.name for f in arr.type], opts.topic)
            yield send_arrow(arr, opts).to_arrow()

    return arrow_udf(send, RESULT_SCHEMA_DDL)  # type: ignore[call-overload]


def row_producer_udf(
    name_server: str,
    *,
    topic: str | None = None,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    send_timeout_ms: int = 3000,
    fail_fast: bool = False,
) -> UserDefinedFunction:
    """The simplest form: a plain Python UDF that sends one row (a struct of
    its columns) per call and waits for the answer."""
    from pyspark.sql.functions import udf

    opts = _opts(name_server, topic, producer_group, send_timeout_ms, fail_fast)

    def send_one(row):  # no hints: they would make Spark guess a pandas UDF
        values = row.asDict()
        check_write_schema(list(values), opts.topic)
        outcome = send_blocking({k: [v] for k, v in values.items()}, 1, opts)
        return outcome.to_arrow().to_pylist()[0]

    return udf(send_one, RESULT_SCHEMA_DDL)  # type: ignore[return-value]


def send_dataframe(
    df: DataFrame,
    name_server: str,
    *,
    topic: str | None = None,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    send_timeout_ms: int = 3000,
    fail_fast: bool = False,
) -> DataFrame:
    """Send every row of `df` through mapInArrow; a DataFrame of results
    (one row per input row, the RESULT_SCHEMA columns). Lazy, as any
    DataFrame: the sends happen when it is computed (count(), write...)."""
    opts = _opts(name_server, topic, producer_group, send_timeout_ms, fail_fast)
    check_write_schema(df.columns, opts.topic)

    def send(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            res = send_arrow(rb, opts).to_arrow()
            yield pa.RecordBatch.from_struct_array(res)

    return df.mapInArrow(send, RESULT_SCHEMA_DDL)
