"""The workloads of `pyrmq bench`: produce (sync, async or oneway sends,
single or batched), consume (push or lite pull) and e2e (paced sends and a
consumer measuring produce-to-consume latency). Each is a coroutine
`worker(args, run)`: it connects, awaits `run.started()` (the clock
starts), counts into `run.meters` until `run.stop` is set or it sent
`run.share` messages, calls `run.finished()` (the clock stops) before it
disconnects, and returns its extra figures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from pyrmq.benchmark.stats import Meter

if TYPE_CHECKING:  # imported when a workload runs, not by every `pyrmq` command
    from pyrmq.producer import Producer

#: the largest request body the producer sends (its max_message_size)
MAX_BODY = 4 * 1024 * 1024

#: e2e body header: magic, run id, sequence number, send time (perf_counter_ns)
E2E_HEADER = struct.Struct(">4sIQQ")
_E2E_MAGIC = b"PRMQ"
#: how long e2e waits for the consumer to catch up once sending stopped
E2E_DRAIN_SECONDS = 10.0
#: a oneway sender waits while a connection holds more than this, unsent
_ONEWAY_HIGH_WATER = 1 << 20
#: back-off after a send that failed at once (RocketMQ's benchmark sleeps 3 s)
_FAIL_BACKOFF = 0.01


class Run(Protocol):
    """What a worker gets from the runner."""

    #: the worker's counters, by direction ("send", "consume")
    meters: dict[str, Meter]
    #: set at the end of -d, on Ctrl-C, or when --count is reached
    stop: asyncio.Event
    #: the messages this worker is to send or consume (None: no limit)
    share: int | None

    async def started(self) -> None:
        """Connected: start the clock (in several processes, together)."""

    def finished(self) -> None:
        """The measured work is over (before disconnecting)."""


# -- helpers --------------------------------------------------------------------------------


class _Budget:
    """How many messages are left to send (None: no limit)."""

    def __init__(self, total: int | None) -> None:
        self.left = total

    def take(self, n: int) -> int:
        if self.left is None:
            return n
        n = min(n, self.left)
        self.left -= n
        return n

    @property
    def spent(self) -> bool:
        return self.left == 0


def _record_send(m: Meter, n: int, size: int, t0: float, result: Any, exc: Any) -> None:
    now = time.perf_counter()
    if exc is not None:
        m.fail(n, exc)
        return
    m.latency(int((now - t0) * 1e6))
    if result.send_status.name == "SEND_OK":
        m.ok(n, n * size, now)
    else:
        m.fail(n, f"send status {result.send_status.name}")


class _Commit:
    """--mode transaction's local transactions: every one commits."""

    def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
        from pyrmq.common.results import LocalTransactionState

        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: Any) -> Any:
        return self.execute_local_transaction(msg, None)


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    """The clients' tls arguments from --tls, --tls-ca, ... (absent: plain)."""
    from pyrmq.admin.cli import tls_kwargs

    return tls_kwargs(args) if hasattr(args, "tls") else {}


def _producer(args: argparse.Namespace) -> Producer:
    from pyrmq.producer import Producer, TransactionProducer

    kw: dict[str, Any] = {
        **_tls(args),
        "send_msg_timeout": args.timeout,
        "compress_msg_body_over_howmuch": MAX_BODY + 1,
        "enable_msg_trace": getattr(args, "trace", False),
        "auto_batch": getattr(args, "auto_batch", True),
    }
    if getattr(args, "mode", None) == "transaction":
        return TransactionProducer(
            args.producer_group, args.namesrv_addr, transaction_listener=_Commit(), **kw
        )
    return Producer(args.producer_group, args.namesrv_addr, **kw)


async def produce(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    m = run.meters.setdefault("send", Meter())
    stop, budget = run.stop, _Budget(run.share)
    body = os.urandom(args.body_size)
    async with _producer(args) as p:
        await p.fetch_publish_message_queues(args.topic)  # the route, or a clear error
        await run.started()
        if args.mode == "async":
            await _send_windowed(p, args, m, stop, budget, body)
        else:
            one = _send_oneway if args.mode == "oneway" else _send_awaited
            await asyncio.gather(
                *(one(p, args, m, stop, budget, body) for _ in range(args.concurrency))
            )
        run.finished()
    return {}


async def _send_awaited(
    p: Producer,
    args: argparse.Namespace,
    m: Meter,
    stop: asyncio.Event,
    budget: _Budget,
    body: bytes,
) -> None:
    from pyrmq.common.message import Message

    topic, batch, size = args.topic, args.batch_size, len(body)
    transactional = args.mode == "transaction"
    while not stop.is_set():
        n = budget.take(batch)
        if not n:
            return
        t0 = time.perf_counter()
        try:
            if transactional:
                r = await p.send_message_in_transaction(Message(topic, body))  # type: ignore[attr-defined]
            elif batch == 1:
                r = await p.send(Message(topic, body))
            else:
                r = await p.send_batch([Message(topic, body) for _ in range(n)])
        except Exception as e:
            _record_send(m, n, size, t0, None, e)
            await asyncio.sleep(_FAIL_BACKOFF)
            continue
        _record_send(m, n, size, t0, r, None)


async def _send_oneway(
    p: Producer,
    args: argparse.Namespace,
    m: Meter,
    stop: asyncio.Event,
    budget: _Budget,
    body: bytes,
) -> None:
    from pyrmq.common.message import Message

    topic, size = args.topic, len(body)
    while not stop.is_set():
        if not budget.take(1):
            return
        t0 = time.perf_counter()
        try:
            await p.send_oneway(Message(topic, body))
        except Exception as e:
            m.fail(1, e)
            await asyncio.sleep(_FAIL_BACKOFF)
            continue
        now = time.perf_counter()
        m.latency(int((now - t0) * 1e6))
        m.ok(1, size, now)
        # A oneway send never waits for the network: yield so the queued
        # frames go out, and wait while the kernel is not taking them.
        await asyncio.sleep(0)
        for _ in range(int(args.timeout * 1000)):
            if stop.is_set() or _unsent_bytes(p) <= _ONEWAY_HIGH_WATER:
                break
            await asyncio.sleep(0.001)


def _unsent_bytes(p: Producer) -> int:
    """The most any broker connection holds, not yet written to its socket."""
    most = 0
    for addrs in p.client.broker_addr_table.values():
        for addr in addrs.values():
            conn = p.client.remoting.open_connection(addr)
            if conn is not None and conn.transport is not None:
                most = max(most, conn.transport.get_write_buffer_size())
    return most


class _Window:
    """Sends in flight, at most `size`; wait() until there is room."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.inflight = 0
        self._room = asyncio.Event()

    def freed(self) -> None:
        self.inflight -= 1
        self._room.set()

    async def wait(self) -> None:
        while self.inflight >= self.size:
            self._room.clear()
            await self._room.wait()

    async def drain(self, limit: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                while self.inflight:
                    self._room.clear()
                    await self._room.wait()


async def _send_windowed(
    p: Producer,
    args: argparse.Namespace,
    m: Meter,
    stop: asyncio.Event,
    budget: _Budget,
    body: bytes,
) -> None:
    from pyrmq.common.message import Message

    topic, batch, size = args.topic, args.batch_size, len(body)
    win = _Window(args.concurrency)

    def done(n: int, t0: float, result: Any, exc: BaseException | None) -> None:
        win.freed()
        _record_send(m, n, size, t0, result, exc)

    while not stop.is_set() and not budget.spent:
        failed_at_once = False
        while win.inflight < win.size:
            n = budget.take(batch)
            if not n:
                break
            msg: Any = (
                Message(topic, body) if batch == 1 else [Message(topic, body) for _ in range(n)]
            )
            win.inflight += 1
            try:
                p.send_async(msg, functools.partial(done, n, time.perf_counter()))
            except Exception as e:
                win.inflight -= 1
                m.fail(n, e)
                failed_at_once = True
                break
        if failed_at_once:
            await asyncio.sleep(_FAIL_BACKOFF)
        else:
            await win.wait()
    await win.drain(args.timeout * 3 + 5)


async def consume(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    from pyrmq.common.errors import TopicNotExistError
    from pyrmq.consumer import (
        ConsumeConcurrentlyStatus,
        ConsumeFromWhere,
        MessageSelector,
        PullConsumer,
        PushConsumer,
    )

    m = run.meters.setdefault("consume", Meter())
    stop, share = run.stop, run.share
    where = (
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        if args.from_beginning
        else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    )

    def took(msgs: list[Any]) -> None:
        now = time.perf_counter()
        wall_us = time.time() * 1e6
        m.ok(len(msgs), sum(len(x.body) for x in msgs), now)
        for x in msgs:
            m.latency(max(0, int(wall_us - x.born_timestamp * 1000)))
        if share is not None and m.total.msgs >= share:
            stop.set()

    c: Any
    if args.consumer == "push":
        c = PushConsumer(
            args.group,
            args.namesrv_addr,
            consume_from_where=where,
            consume_message_batch_max_size=args.batch_size,
            await_termination_seconds=1.0,
            **_tls(args),
        )

        async def listener(msgs: list[Any], ctx: Any) -> Any:
            took(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c.register_message_listener(listener)
    else:
        c = PullConsumer(
            args.group,
            args.namesrv_addr,
            consume_from_where=where,
            pull_batch_size=min(args.batch_size, 1024),
            **_tls(args),
        )
    try:
        if await c.client.update_topic_route(args.topic) is None:
            raise TopicNotExistError(f"topic {args.topic!r} does not exist (no route)")
    except BaseException:
        await c.client.shutdown()
        raise
    selector = (
        MessageSelector.by_sql(args.subscription)
        if getattr(args, "sql", False)
        else MessageSelector.by_tag(args.subscription)
    )
    c.subscribe(args.topic, selector)
    await c.start()
    try:
        await run.started()
        if args.consumer == "push":
            await stop.wait()
        else:
            while not stop.is_set():
                msgs = await c.poll(0.1)
                if msgs:
                    took(msgs)
        run.finished()
    finally:
        await c.shutdown()
    return {}


async def e2e(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    from pyrmq.common.message import Message
    from pyrmq.consumer import ConsumeConcurrentlyStatus, PushConsumer

    send = run.meters.setdefault("send", Meter())
    recv = run.meters.setdefault("consume", Meter())
    stop = run.stop
    run_id = int.from_bytes(os.urandom(4), "big")
    magic = E2E_HEADER.pack(_E2E_MAGIC, run_id, 0, 0)[:8]
    pad = os.urandom(max(0, args.body_size - E2E_HEADER.size))
    seen = bytearray()
    counts = {"unique": 0, "duplicates": 0, "foreign": 0}

    async def listener(msgs: list[Any], ctx: Any) -> Any:
        now_ns = time.perf_counter_ns()
        now = time.perf_counter()
        nbytes = own = 0
        for x in msgs:
            b = x.body
            if len(b) < E2E_HEADER.size or b[:8] != magic:
                counts["foreign"] += 1
                continue
            _, _, seq, sent_ns = E2E_HEADER.unpack_from(b)
            if seq >= len(seen):
                seen.extend(bytes(max(seq + 1 - len(seen), len(seen))))
            if seen[seq]:
                counts["duplicates"] += 1
            else:
                seen[seq] = 1
                counts["unique"] += 1
            recv.latency(max(0, (now_ns - sent_ns) // 1000))
            nbytes += len(b)
            own += 1
        if own:
            recv.ok(own, nbytes, now)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    group = f"benchmark_e2e_{os.getpid()}_{int(time.time() * 1000)}"
    rate, seq, send_end = args.rate, 0, 0.0
    async with _producer(args) as p:
        queues = await _topic_queues(p, args.topic)
        c = PushConsumer(
            group,
            args.namesrv_addr,
            consume_message_batch_max_size=32,
            await_termination_seconds=1.0,
            **_tls(args),
        )
        try:
            await _start_at_end(c.client, group, args.topic)
        except BaseException:
            await c.client.shutdown()
            raise
        c.subscribe(args.topic)
        c.register_message_listener(listener)
        await c.start()
        try:
            await _wait_assigned(c, queues)
            await run.started()
            budget = _Budget(run.share)
            win = _Window(args.concurrency)
            size = args.body_size

            def done(t0: float, result: Any, exc: BaseException | None) -> None:
                win.freed()
                _record_send(send, 1, size, t0, result, exc)

            t0 = time.perf_counter()
            while not stop.is_set() and not budget.spent:
                due = int((time.perf_counter() - t0) * rate) + 1 - seq if rate else win.size
                for _ in range(min(due, win.size - win.inflight)):
                    if not budget.take(1):
                        break
                    body = E2E_HEADER.pack(_E2E_MAGIC, run_id, seq, time.perf_counter_ns()) + pad
                    seq += 1
                    win.inflight += 1
                    try:
                        p.send_async(
                            Message(args.topic, body),
                            functools.partial(done, time.perf_counter()),
                        )
                    except Exception as e:
                        win.inflight -= 1
                        send.fail(1, e)
                if win.inflight >= win.size:
                    await win.wait()
                elif rate:
                    await asyncio.sleep(max(0.0, t0 + seq / rate - time.perf_counter()))
                else:
                    await asyncio.sleep(_FAIL_BACKOFF)  # only after sends that failed at once
            await win.drain(args.timeout * 3 + 5)
            send_end = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(E2E_DRAIN_SECONDS):
                    while counts["unique"] < send.total.msgs:
                        await asyncio.sleep(0.02)
            run.finished()
        finally:
            await c.shutdown()
    return {
        "sent": seq,
        "send_end": send_end,
        "rate_target": rate,
        "group": group,
        **counts,
    }


async def _topic_queues(p: Producer, topic: str) -> int:
    """The number of readable queues of topic, creating it (one message,
    auto-creation) when the name server knows no route for it yet."""
    from pyrmq.common.message import Message

    route = await p.client.update_topic_route(topic)
    if route is None:
        await p.send(Message(topic, b"pyrmq bench e2e: creates the topic"))
        for _ in range(150):
            route = await p.client.update_topic_route(topic)
            if route is not None:
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError(f"no route for {topic!r} 15 s after its first message")
    return len(route.subscribe_queues(topic))


async def _start_at_end(client: Any, group: str, topic: str) -> None:
    """Commit each queue's max offset for the new group, so it reads only
    what is sent from now on."""
    route = await client.update_topic_route(topic)
    for mq in route.subscribe_queues(topic):
        addr = client.find_broker_addr(mq.broker_name)
        if addr is not None:
            offset = await client.api.get_max_offset(addr, mq)
            await client.api.update_consumer_offset(addr, group, mq, offset)


async def _wait_assigned(c: Any, queues: int, limit: float = 15.0) -> None:
    """Until the consumer's rebalance took every queue (it is the group's
    only member), so the first messages do not wait for a rebalance."""
    deadline = time.perf_counter() + limit
    while len(c.rebalance.process_queue_table) < queues:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the consumer was not assigned the topic's queues in {limit:g} s")
        await asyncio.sleep(0.02)


Worker = Callable[[argparse.Namespace, Run], Awaitable[dict[str, Any]]]
WORKERS: dict[str, Worker] = {"produce": produce, "consume": consume, "e2e": e2e}
