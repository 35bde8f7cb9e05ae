"""Reading topics into Arrow batches: queue discovery and offset resolution
(on the driver, at planning), and pulling one queue's offset range (in a
Spark task).

A range [start, end) of one MessageQueue is read by PULL_MESSAGE requests
over windows of PULL_BATCH offsets, PULL_WINDOWS windows in flight at once;
the records of each answer are decoded column by column in C
(rmqcore.decode_columns) and turned into Arrow arrays without a Python
object per field. A window whose answer stops short (byte limit, tag
filter) is pulled on from the broker's nextBeginOffset; records past the
window's end are dropped (the next window reads them), so every offset of
the range is read exactly once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import rmqcore
from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION
from pyrmq.client.instance import ClientInstance
from pyrmq.common.errors import ClientError
from pyrmq.common.message import MessageQueue, host_str
from pyrmq.common.results import PullStatus
from pyrmq.common.topics import is_system_topic
from spark_integration import _runtime
from spark_integration.options import (
    EARLIEST,
    LATEST,
    OptionError,
    QueueKey,
    SourceOptions,
)
from spark_integration.schema import READ_ARROW_SCHEMA

#: offsets per pull request (the broker answers at most 32 from memory)
PULL_BATCH = 32
#: pull requests in flight per queue range
PULL_WINDOWS = 32
#: a record batch handed to Spark covers at most this many offsets
CHUNK_OFFSETS = PULL_BATCH * PULL_WINDOWS * 4
#: deadline of one request
TIMEOUT = 10.0


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention deleted them, or a queue
    went backwards); raised unless failOnDataLoss=false."""


@dataclass(frozen=True)
class QueueRef:
    topic: str
    broker_name: str
    broker_addr: str
    queue_id: int

    @property
    def key(self) -> QueueKey:
        return (self.topic, self.broker_name, self.queue_id)

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


def key_str(key: QueueKey) -> str:
    return f"{key[1]}:{key[2]}"


def offsets_to_json(offsets: dict[QueueKey, int]) -> dict[str, dict[str, int]]:
    """{(topic, broker, qid): off} → Kafka-style {"topic": {"broker:qid": off}}."""
    out: dict[str, dict[str, int]] = {}
    for k in sorted(offsets):
        out.setdefault(k[0], {})[key_str(k)] = offsets[k]
    return out


def offsets_from_json(doc: dict[str, Any]) -> dict[QueueKey, int]:
    out: dict[QueueKey, int] = {}
    for topic, queues in doc.items():
        for q, off in queues.items():
            broker, _, qid = q.rpartition(":")
            out[(topic, broker, int(qid))] = int(off)
    return out


# -- planning (driver) ------------------------------------------------------------------------


async def _topics(client: ClientInstance, opts: SourceOptions) -> list[str]:
    if opts.topics:
        return list(opts.topics)
    if opts.assign is not None:
        return list(opts.assign)
    pat = re.compile(opts.topic_pattern or "")
    names = await client.api.get_all_topic_list(TIMEOUT)
    return [t for t in names if pat.fullmatch(t) and not is_system_topic(t)]


async def discover(opts: SourceOptions, *, must_exist: bool = True) -> list[QueueRef]:
    """Every readable queue the options select, in a stable order."""
    client = _runtime.client(opts.name_server)
    topics = await _topics(client, opts)
    if not topics and must_exist and opts.topic_pattern:
        raise OptionError(f"option topicPattern={opts.topic_pattern!r} matches no topic")
    refs: list[QueueRef] = []
    for topic in topics:
        route = await client.update_topic_route(topic)
        if route is None:
            if must_exist:
                raise OptionError(
                    f"topic {topic!r} (option {'assign' if opts.assign else 'topic'}) does not "
                    f"exist on name server {opts.name_server}: create it (pyrmq admin "
                    "updateTopic) or send to it first"
                )
            continue
        wanted = opts.assign.get(topic) if opts.assign is not None else None
        for mq in route.subscribe_queues(topic):
            if wanted is not None:
                ids = wanted.get(mq.broker_name, []) if isinstance(wanted, dict) else wanted
                if mq.queue_id not in ids:
                    continue
            bd = route.broker_data(mq.broker_name)
            addr = bd.select_broker_addr() if bd is not None else None
            if addr is None:
                continue
            refs.append(QueueRef(topic, mq.broker_name, addr, mq.queue_id))
    refs.sort(key=lambda r: r.key)
    if must_exist and not refs:
        raise OptionError("the options select no readable queue")
    return refs


async def queue_bounds(name_server: str, refs: list[QueueRef]) -> dict[QueueKey, tuple[int, int]]:
    """(min offset, max offset) of every queue."""
    if not refs:
        return {}
    client = _runtime.client(name_server)

    async def one(r: QueueRef) -> tuple[int, int]:
        return await asyncio.gather(
            client.api.get_min_offset(r.broker_addr, r.mq, TIMEOUT),
            client.api.get_max_offset(r.broker_addr, r.mq, TIMEOUT),
        )

    got = await asyncio.gather(*(one(r) for r in refs))
    return {r.key: (lo, hi) for r, (lo, hi) in zip(refs, got, strict=False)}


async def resolve(
    opts: SourceOptions,
    refs: list[QueueRef],
    bounds: dict[QueueKey, tuple[int, int]],
    spec: str | dict[QueueKey, int],
    timestamp: int | None,
    default: int,
) -> dict[QueueKey, int]:
    """Concrete offsets for every queue from 'earliest' / 'latest' / the
    JSON form / a timestamp; queues the JSON leaves out get `default`."""
    client = _runtime.client(opts.name_server)
    if isinstance(spec, dict):
        known = {r.key for r in refs}
        for k in spec:
            if k not in known:
                raise OptionError(
                    f"offsets name queue {k[0]}/{key_str(k)}, which the options do not select "
                    f"(known: {', '.join(sorted(f'{r.topic}/{key_str(r.key)}' for r in refs))})"
                )
    out: dict[QueueKey, int] = {}
    for r in refs:
        lo, hi = bounds[r.key]
        if timestamp is not None:
            out[r.key] = await client.api.search_offset(r.broker_addr, r.mq, timestamp, TIMEOUT)
            continue
        want = (
            spec.get(r.key, default)
            if isinstance(spec, dict)
            else (EARLIEST if spec == "earliest" else LATEST)
        )
        out[r.key] = lo if want == EARLIEST else hi if want == LATEST else want
    return out


def plan(coro: Any) -> Any:
    """Run a planning coroutine on this process's loop."""
    return _runtime.run(coro, TIMEOUT * 6)


# -- reading (task) ---------------------------------------------------------------------------


async def _pull_window(
    client: ClientInstance, ref: QueueRef, lo: int, hi: int, opts: SourceOptions
) -> tuple[list[bytes], int | None]:
    """The record bytes of offsets [lo, hi) of one queue; and the min offset
    when lo turned out to be below it (data lost), else None."""
    bodies: list[bytes] = []
    off = lo
    lost_to: int | None = None
    for _ in range(hi - lo + 16):
        if off >= hi:
            break
        cmd = client.api.pull_command(
            ref.mq,
            consumer_group=opts.consumer_group,
            queue_offset=off,
            max_msg_nums=min(PULL_BATCH, hi - off),
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_ms=0,
            subscription=opts.sub_expression,
            sub_version=0,
            expression_type=opts.sub_expression_type,
        )
        r = await client.api.pull_message(
            ref.broker_addr, cmd, timeout=TIMEOUT, broker_name=ref.broker_name, raw=True
        )
        st = r.pull_status
        if st is PullStatus.FOUND:
            bodies.append(r.body)
        elif st is PullStatus.OFFSET_ILLEGAL or (off < r.min_offset):
            if off < r.min_offset:
                lost_to = r.min_offset
                off = r.min_offset
                continue
            break  # beyond the max: nothing more here
        elif st is PullStatus.NO_NEW_MSG:
            break
        if r.next_begin_offset <= off:
            if st is PullStatus.FOUND:
                raise ClientError(
                    f"broker {ref.broker_addr} answered a pull of {ref.topic}/{key_str(ref.key)} "
                    f"at {off} with nextBeginOffset {r.next_begin_offset}"
                )
            break
        off = r.next_begin_offset
    return bodies, lost_to


def _ms_to_us(buf: Any, n: int) -> pa.Array:
    ms = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(buf)])
    return ms.cast(pa.timestamp("us", tz="UTC"))


def _hosts(raw: list[bytes]) -> pa.Array:
    """ip:port strings of raw host fields (few distinct: formatted once each)."""
    enc = pa.array(raw, pa.binary()).dictionary_encode()
    names = pa.array([host_str(h) for h in enc.dictionary.to_pylist()], pa.string())
    return names.take(enc.indices)


def _msg_ids(cols: dict[str, Any]) -> pa.Array:
    uniq = cols["uniq_key"]
    if None in uniq:  # no UNIQ_KEY: the id is the offset message id, as in Java
        store_hosts = cols["store_host"]
        phys = cols["commit_log_offset"]
        uniq = [
            u if u is not None else rmqcore.offset_msg_id(store_hosts[i], phys[i])
            for i, u in enumerate(uniq)
        ]
    return pa.array(uniq, pa.string())


def _properties(cols: dict[str, Any], n: int, include: bool) -> pa.Array:
    if not include:
        return pa.nulls(n, pa.map_(pa.string(), pa.string()))
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(cols["prop_offsets"])]),
        pa.array(cols["prop_names"], pa.string()),
        pa.array(cols["prop_values"], pa.string()),
    )


#: how each read column is built from decode_columns' output
_BUILDERS: dict[str, Any] = {
    "topic": lambda c, n, ref, o: pa.repeat(pa.scalar(ref.topic, pa.string()), n),
    "brokerName": lambda c, n, ref, o: pa.repeat(pa.scalar(ref.broker_name, pa.string()), n),
    "queueId": lambda c, n, ref, o: pa.Array.from_buffers(
        pa.int32(), n, [None, pa.py_buffer(c["queue_id"])]
    ),
    "queueOffset": lambda c, n, ref, o: pa.Array.from_buffers(
        pa.int64(), n, [None, pa.py_buffer(c["queue_offset"])]
    ),
    "msgId": lambda c, n, ref, o: _msg_ids(c),
    "keys": lambda c, n, ref, o: pa.array(c["keys"], pa.string()),
    "tags": lambda c, n, ref, o: pa.array(c["tags"], pa.string()),
    "body": lambda c, n, ref, o: pa.array(c["body"], pa.binary()),
    "properties": lambda c, n, ref, o: _properties(c, n, o.include_properties),
    "bornTimestamp": lambda c, n, ref, o: _ms_to_us(c["born_timestamp"], n),
    "storeTimestamp": lambda c, n, ref, o: _ms_to_us(c["store_timestamp"], n),
    "bornHost": lambda c, n, ref, o: _hosts(c["born_host"]),
    "reconsumeTimes": lambda c, n, ref, o: pa.Array.from_buffers(
        pa.int32(), n, [None, pa.py_buffer(c["reconsume_times"])]
    ),
}


def projected_schema(names: list[str] | None) -> pa.Schema:
    """The Arrow schema of the read columns `names` (all when None);
    OptionError for a column the source does not have."""
    if names is None:
        return READ_ARROW_SCHEMA
    unknown = [n for n in names if n not in _BUILDERS]
    if unknown:
        raise OptionError(
            f"format('rocketmq') has no column {', '.join(map(repr, unknown))}; "
            f"its columns are {', '.join(READ_ARROW_SCHEMA.names)}"
        )
    return pa.schema([READ_ARROW_SCHEMA.field(n) for n in names])


def _to_batch(
    cols: dict[str, Any],
    ref: QueueRef,
    opts: SourceOptions,
    hi: int,
    schema: pa.Schema = READ_ARROW_SCHEMA,
) -> pa.RecordBatch | None:
    """One Arrow batch (the columns of `schema`) of the decoded records of
    a chunk. Windows were pulled in order, so a record is kept when its
    offset is above every offset kept before it (a filtered pull that ran
    past its window read records the next window reads again) and below
    the chunk's end."""
    n = cols["n"]
    if n == 0:
        return None
    qoff = cols["queue_offset"]
    keep = None
    offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(qoff)])
    ascending = n < 2 or pc.all(pc.less(offsets.slice(0, n - 1), offsets.slice(1))).as_py()
    if opts.tag_set or qoff[n - 1] >= hi or not ascending:
        mask = []
        top = -1
        for o in qoff:
            ok = top < o < hi
            if ok:
                top = o
            mask.append(ok)
        keep = pa.array(mask, pa.bool_())
    if opts.tag_set:
        tagged = pc.is_in(
            pa.array(cols["tags"], pa.string()), value_set=pa.array(sorted(opts.tag_set))
        )
        keep = tagged if keep is None else pc.and_(keep, tagged)
    arrays = [_BUILDERS[name](cols, n, ref, opts) for name in schema.names]
    rb = pa.RecordBatch.from_arrays(arrays, schema=schema)
    if keep is not None:
        rb = rb.filter(keep)
    return rb if rb.num_rows else None


async def _fetch_chunk(
    ref: QueueRef, lo: int, hi: int, opts: SourceOptions
) -> tuple[bytes, int | None]:
    """The records of offsets [lo, hi), back to back in window order (see
    _to_batch), and the queue's min offset when data below it was asked."""
    client = _runtime.client(opts.name_server)
    starts = list(range(lo, hi, PULL_BATCH))
    got = await asyncio.gather(
        *(_pull_window(client, ref, s, min(s + PULL_BATCH, hi), opts) for s in starts)
    )
    lost = [lt for _, lt in got if lt is not None]
    return b"".join(b for bodies, _ in got for b in bodies), (max(lost) if lost else None)


def read_range(
    ref: QueueRef,
    start: int,
    end: int,
    opts: SourceOptions,
    schema: pa.Schema = READ_ARROW_SCHEMA,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (the columns of `schema`) of offsets [start, end) of
    one queue (a Spark task). The next chunk is pulled while Spark consumes
    the current one."""
    if start >= end:
        return
    chunks = [(lo, min(lo + CHUNK_OFFSETS, end)) for lo in range(start, end, CHUNK_OFFSETS)]

    def submit(i: int) -> concurrent.futures.Future[tuple[bytes, int | None]]:
        lo, hi = chunks[i]
        return _runtime.submit(_fetch_chunk(ref, lo, hi, opts))

    include_props = opts.include_properties and "properties" in schema.names
    pending = submit(0)
    for i in range(len(chunks)):
        records, lost_to = pending.result(TIMEOUT * 6)
        if i + 1 < len(chunks):
            pending = submit(i + 1)
        if lost_to is not None and opts.fail_on_data_loss:
            pending.cancel()
            raise DataLossError(
                f"{ref.topic}/{key_str(ref.key)}: offsets from {chunks[i][0]} are gone (the "
                f"queue now starts at {lost_to}); set failOnDataLoss=false to skip them"
            )
        cols = rmqcore.decode_columns(records, include_props)
        rb = _to_batch(cols, ref, opts, chunks[i][1], schema)
        if rb is not None:
            yield rb
